// Package testutil holds helpers shared by cudatap's tests.
package testutil

import (
	"os"
	"sync"
	"testing"

	"github.com/cudatap/cudatap/internal/sim"
)

// RequireRoot skips a test that needs real uprobes when not root. CI runs
// as root, so these tests run there.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root for real uprobes (CI runs these as root): sudo go test ./...")
	}
}

var (
	simOnce  sync.Once
	simBuild *sim.Build
	simErr   error
	simDir   string
)

// Sim compiles the simulated CUDA runtime and workloads once per test
// binary. Call CleanupSim from TestMain.
func Sim(t testing.TB) *sim.Build {
	t.Helper()
	simOnce.Do(func() {
		simDir, simErr = os.MkdirTemp("", "cudatap-sim-")
		if simErr == nil {
			simBuild, simErr = sim.Compile(simDir)
		}
	})
	if simErr != nil {
		t.Fatalf("build the simulated CUDA runtime: %v", simErr)
	}
	return simBuild
}

// CleanupSim removes what Sim built.
func CleanupSim() {
	if simDir != "" {
		os.RemoveAll(simDir)
	}
}
