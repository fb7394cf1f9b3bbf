package testutil

import (
	"os"
	"os/exec"
	"testing"

	"github.com/google/pprof/profile"

	"github.com/cudatap/cudatap/internal/sim"
)

// ReadProfile parses the pprof profile at path and checks it is valid.
func ReadProfile(t testing.TB, path string) *profile.Profile {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p, err := profile.Parse(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if err := p.CheckValid(); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return p
}

// RunWorkload runs the simulated workload with args (env added to this
// process's) and returns its report.
func RunWorkload(t testing.TB, b *sim.Build, env []string, args ...string) *sim.Report {
	t.Helper()
	cmd := exec.Command(b.Workload, args...)
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %v: %v", b.Workload, args, err)
	}
	rep, err := sim.ParseReport(out)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}
