package agent

import (
	"testing"

	"github.com/cudatap/cudatap/internal/testutil"
	"github.com/cudatap/cudatap/tracer/guard"
)

func TestMain(m *testing.M) {
	guard.Init() // the test binary is its sessions' guardian and launcher too
	testutil.Main(m)
}
