package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/cudatap/cudatap/internal/testutil"
)

// TestHTAReadsTraces records the simulated workloads (streams, syncs,
// copies; NCCL collectives) and runs HolisticTraceAnalysis on the traces as
// Kineto traces (testdata/hta/check.py): every analysis must run and find
// what a profiler trace of such a run has (kernel time, queue lengths,
// launch statistics, a critical path, overlap within 0–100%), with no host
// call taken for a kernel and no slice rounding to a negative duration.
func TestHTAReadsTraces(t *testing.T) {
	testutil.RequireRoot(t)
	py := "/usr/bin/python3" // Debian's, with Debian's pandas
	if _, err := os.Stat(py); err != nil {
		py = "python3"
	}
	if out, err := exec.Command(py, "-c", "import pandas, numpy, networkx, plotly, yaml, psutil, pydot").CombinedOutput(); err != nil {
		t.Fatalf("HTA's Python dependencies are missing (%v: %s): run `make test-deps` (apt-get install python3-pandas python3-numpy python3-networkx python3-plotly python3-yaml python3-psutil python3-pydot)", err, out)
	}
	b := testutil.Sim(t)
	for _, tc := range []struct {
		name string
		cmd  []string
		flag []string
	}{
		{"basic", []string{b.Workload, "--scenario", "basic", "--iters", "20"}, nil},
		{"nccl", []string{b.NCCLWorkload, "--scenario", "nccl", "--iters", "10"}, []string{"--comm"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			trace := filepath.Join(t.TempDir(), "trace.json")
			if _, stderr, err := run(t, append([]string{"record", "--nvml-interval=-1s", "-o", trace, "--"}, tc.cmd...)...); err != nil {
				t.Fatalf("record: %v\n%s", err, stderr)
			}
			out, err := exec.Command(py, append([]string{"../../testdata/hta/check.py", trace}, tc.flag...)...).CombinedOutput()
			t.Logf("HTA:\n%s", out)
			if err != nil {
				t.Errorf("HTA does not read the trace as a Kineto trace: %v", err)
			}
		})
	}
}
