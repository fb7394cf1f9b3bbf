package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cudatap/cudatap/internal/testutil"
)

// TestRecordFlightRecorder: record --flight-recorder on the simulated job
// that runs out of device memory writes one dump, says where on stderr,
// writes no recording of its own unless asked (-o: then the whole one,
// beside the dump), and the dump reads back with report and export as any
// recording does, the report leading with the trigger.
func TestRecordFlightRecorder(t *testing.T) {
	testutil.RequireRoot(t)
	b := testutil.Sim(t)
	dir := t.TempDir()
	dumps, whole := filepath.Join(dir, "dumps"), filepath.Join(dir, "whole.cudatap")
	t.Chdir(dir) // where a recording by default would go
	_, stderr, err := run(t, "record", "--flight-recorder", "1h", "--dumps-dir", dumps, "--nvml-interval=-1s", "--", b.Workload, "--scenario", "oom")
	if err != nil {
		t.Fatalf("record: %v\n%s", err, stderr)
	}
	written, _ := filepath.Glob(filepath.Join(dumps, "cudatap-flight-*-oom-pid*.cudatap"))
	if len(written) != 1 || !strings.Contains(stderr, "cudatap: flight recorder: oom: cudaMalloc of 2.0 GiB failed (out of memory): wrote "+written[0]) {
		t.Fatalf("dumps %v; stderr:\n%s", written, stderr)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "*.cudatap")); len(left) != 0 {
		t.Errorf("a recording by default with --flight-recorder: %v", left)
	}
	text, stderr, err := run(t, "report", written[0])
	if err != nil || !strings.HasPrefix(text, "flight recorder, trigger oom: cudaMalloc of 2.0 GiB failed (out of memory)\n") {
		t.Errorf("report: %v\n%s\n%s", err, text, stderr)
	}
	if _, stderr, err := run(t, "export", written[0], "-o", filepath.Join(dir, "dump.json")); err != nil {
		t.Errorf("export: %v\n%s", err, stderr)
	}

	// With -o the whole recording too: the same calls.
	if _, stderr, err = run(t, "record", "--flight-recorder", "1h", "--dumps-dir", dumps, "--nvml-interval=-1s", "-o", whole, "--", b.Workload, "--scenario", "oom"); err != nil {
		t.Fatalf("record -o: %v\n%s", err, stderr)
	}
	all, _, err := run(t, "export", whole)
	if err != nil || !strings.Contains(all, "verdict: out of memory: workload (pid ") {
		t.Errorf("the whole recording: %v\n%s", err, all)
	}
	if n, _ := filepath.Glob(filepath.Join(dumps, "*.cudatap")); len(n) != 2 {
		t.Errorf("%d dumps after two runs, want 2", len(n))
	}

	// Flight flags without --flight-recorder: said.
	if _, _, err := run(t, "record", "--dumps-dir", dumps, "--", "true"); err == nil || !strings.Contains(err.Error(), "--dumps-dir goes with --flight-recorder DURATION") {
		t.Errorf("--dumps-dir alone: %v", err)
	}
	if _, err := os.Stat(dumps); err != nil {
		t.Fatal(err)
	}
}
