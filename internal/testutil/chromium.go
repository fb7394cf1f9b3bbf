package testutil

import (
	"os"
	"os/exec"
	"testing"
)

// Chromium finds a headless-capable Chromium to open HTML reports in. None
// installed is a skip, except under CI, where it fails the test (make
// test-deps installs Debian's chromium).
func Chromium(t testing.TB) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("no chromium on PATH: run `make test-deps` (apt-get install chromium)")
	}
	t.Skip("no chromium on PATH to open the report in (make test-deps installs it; under CI this fails)")
	return ""
}
