package symbolize

import (
	"testing"

	"github.com/cudatap/cudatap/internal/testutil"
)

// The fixtures (a C++ library, programs linked against it that print
// addresses to name) are testutil.ELF's.

func TestMain(m *testing.M) { testutil.Main(m) }
