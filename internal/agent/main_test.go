package agent

import (
	"testing"

	"github.com/cudatap/cudatap/internal/testutil"
)

func TestMain(m *testing.M) { testutil.Main(m) }
