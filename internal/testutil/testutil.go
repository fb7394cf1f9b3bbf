// Package testutil holds helpers shared by cudatap's tests: root gating,
// one build directory per test binary, and the simulated CUDA runtime.
package testutil

import (
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/cudatap/cudatap/internal/sim"
)

// RequireRoot skips a test that needs real uprobes or BPF programs when not
// root. CI runs as root, so these tests run there.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root for BPF programs and real uprobes (CI runs as root): go test -exec sudo ./...")
	}
}

// root is the directory this test binary builds into, made on first use.
var root struct {
	sync.Mutex
	dir string
}

// BuildDir returns the directory name under this test binary's build
// directory, creating both: where a package's tests put what they compile
// once and share. Main removes it.
func BuildDir(name string) (string, error) {
	root.Lock()
	defer root.Unlock()
	if root.dir == "" {
		d, err := os.MkdirTemp("", "cudatap-test-")
		if err != nil {
			return "", err
		}
		root.dir = d
	}
	dir := filepath.Join(root.dir, name)
	return dir, os.MkdirAll(dir, 0o755)
}

// Main runs a package's tests, then removes what they built under BuildDir.
// Call it from TestMain.
func Main(m *testing.M) {
	code := m.Run()
	Cleanup()
	os.Exit(code)
}

// Cleanup removes the build directory: Main calls it, and so does a
// TestMain that does more than run the tests.
func Cleanup() {
	root.Lock()
	defer root.Unlock()
	if root.dir != "" {
		os.RemoveAll(root.dir)
		root.dir = ""
	}
}

// CleanupSim is Cleanup, under the name older TestMains call.
func CleanupSim() { Cleanup() }

var simBuild = sync.OnceValues(func() (*sim.Build, error) {
	dir, err := BuildDir("sim")
	if err != nil {
		return nil, err
	}
	return sim.Compile(dir)
})

// Sim compiles the simulated CUDA runtime and workloads once per test
// binary.
func Sim(t testing.TB) *sim.Build {
	t.Helper()
	b, err := simBuild()
	if err != nil {
		t.Fatalf("build the simulated CUDA runtime: %v", err)
	}
	return b
}
