package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cudatap/cudatap/internal/testutil"
)

// TestHTAReadsTraces records the simulated workloads (streams, syncs,
// copies; NCCL collectives) and runs HolisticTraceAnalysis on the traces as
// Kineto traces (testdata/hta/check.py): every analysis must run and find
// what a profiler trace of such a run has (kernel time, queue lengths,
// launch statistics, a critical path, overlap within 0–100%), with no host
// call taken for a kernel and no slice rounding to a negative duration.
// So with GPU times (the default: CUPTI measures every op) and without
// (--gpu-times=off: every op bounded), where HTA must read every kernel's
// duration as unknown (0), none made up.
func TestHTAReadsTraces(t *testing.T) {
	t.Parallel()
	testutil.RequireRoot(t)
	py := htaPython(t)
	b := testutil.Sim(t)
	for _, tc := range []struct {
		name string
		cmd  []string
		flag []string
	}{
		{"basic", []string{b.Workload, "--scenario", "basic", "--iters", "20"}, nil},
		{"nccl", []string{b.NCCLWorkload, "--scenario", "nccl", "--iters", "10"}, []string{"--comm"}},
		{"basic bounded", []string{b.Workload, "--scenario", "basic", "--iters", "20"}, []string{"--bounded"}},
		{"nccl bounded", []string{b.NCCLWorkload, "--scenario", "nccl", "--iters", "10"}, []string{"--comm", "--bounded"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			trace := filepath.Join(t.TempDir(), "trace.json")
			record := []string{"record", "--nvml-interval=-1s", "-o", trace}
			if slices.Contains(tc.flag, "--bounded") {
				record = append(record, "--gpu-times=off")
			}
			if _, stderr, err := run(t, append(append(record, "--"), tc.cmd...)...); err != nil {
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

// htaPython is the Python that runs HTA, with its dependencies.
func htaPython(t *testing.T) string {
	t.Helper()
	py := "/usr/bin/python3" // Debian's, with Debian's pandas
	if _, err := os.Stat(py); err != nil {
		py = "python3"
	}
	if out, err := exec.Command(py, "-c", "import pandas, numpy, networkx, plotly, yaml, psutil, pydot").CombinedOutput(); err != nil {
		t.Fatalf("HTA's Python dependencies are missing (%v: %s): run `make test-deps` (apt-get install python3-pandas python3-numpy python3-networkx python3-plotly python3-yaml python3-psutil python3-pydot)", err, out)
	}
	return py
}

// TestHTASeesEveryRank: the traces of a job's two ranks, recorded and
// exported each on its own, load in HTA as ranks 0 and 1: each says its
// rank as Kineto does (distributedInfo), where HTA took both for rank 0
// and kept one.
func TestHTASeesEveryRank(t *testing.T) {
	t.Parallel()
	testutil.RequireRoot(t)
	py := htaPython(t)
	b := testutil.Sim(t)
	recs, _ := recordSimJob(t, b, t.TempDir(), "hta", 900, 5, 0)
	traces := t.TempDir()
	for i, rec := range recs {
		if _, stderr, err := run(t, "export", rec, "-o", filepath.Join(traces, fmt.Sprintf("rank-%d.json", i))); err != nil {
			t.Fatalf("export: %v\n%s", err, stderr)
		}
	}
	out, err := exec.Command(py, "../../testdata/hta/ranks.py", traces).CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "[0, 1]" {
		t.Errorf("HTA sees ranks %s (%v), want [0, 1]", out, err)
	}
}
