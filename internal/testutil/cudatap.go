package testutil

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// Cudatap builds the cudatap command once per test binary, into its build
// directory (Main removes it), for tests that run it as a process of its
// own (to kill it, to run it as another user).
func Cudatap(t testing.TB) string {
	t.Helper()
	bin, err := cudatapBuild()
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

var cudatapBuild = sync.OnceValues(func() (string, error) {
	dir, err := BuildDir("cudatap")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "cudatap")
	// The go that runs this test; under sudo PATH may lack it: then where
	// the Makefile also looks.
	gobin, err := exec.LookPath("go")
	if err != nil {
		gobin = "/usr/local/go/bin/go"
	}
	if out, err := exec.Command(gobin, "build", "-o", bin, "github.com/cudatap/cudatap/cmd/cudatap").CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build: %v\n%s", err, out)
	}
	return bin, nil
})
