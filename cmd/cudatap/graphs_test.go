package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cudatap/cudatap/export/perfetto/perfettotest"
	"github.com/cudatap/cudatap/internal/testutil"
)

// TestGraphsRecorded records the simulated graphs scenario (10 replays
// each of a 5-node capture, of its update, of its re-instantiation, of a
// 3-node graph built by hand and of it with a node set: 50 replays of 210
// ops) with record's defaults (GPU times on) and counts the replays' ops
// everywhere they show: 210 kernels in the Chrome trace and in the
// Perfetto trace, each with its node and measured; 50 graph launches and
// 210 graph ops in the summary's JSON and its text; the same from the
// recording, exported.
func TestGraphsRecorded(t *testing.T) {
	testutil.RequireRoot(t)
	b := testutil.Sim(t)
	dir := t.TempDir()
	js, pf, rec := filepath.Join(dir, "trace.json"), filepath.Join(dir, "trace.perfetto-trace"), filepath.Join(dir, "run.cudatap")
	stdout, stderr, err := run(t, "record", "--json", "--nvml-interval=-1s", "-o", js, "-o", pf, "-o", rec, "--", b.Workload, "--scenario", "graphs", "--iters", "10")
	if err != nil {
		t.Fatalf("record: %v\n%s", err, stderr)
	}
	const launches, ops = 50, 210
	var sum struct {
		Processes []struct {
			Streams []struct {
				GraphLaunches int64 `json:"graph_launches"`
				GraphOps      int64 `json:"graph_ops"`
				GPUOps        int64 `json:"gpu_ops"`
			} `json:"streams"`
		} `json:"processes"`
	}
	if err := json.Unmarshal([]byte(stdout), &sum); err != nil {
		t.Fatalf("summary JSON: %v\n%s", err, stdout)
	}
	var gl, gops, all int64
	for _, p := range sum.Processes {
		for _, s := range p.Streams {
			gl, gops, all = gl+s.GraphLaunches, gops+s.GraphOps, all+s.GPUOps
		}
	}
	if gl != launches || gops != ops || all != ops {
		t.Errorf("summary: %d graph launches, %d graph ops, %d GPU ops; want %d, %d, %d", gl, gops, all, launches, ops, ops)
	}

	exported := filepath.Join(dir, "exported.json")
	if _, stderr, err := run(t, "export", "-q", rec, "-o", exported); err != nil {
		t.Fatalf("export: %v\n%s", err, stderr)
	}
	for _, trace := range []string{js, exported} {
		kernels, measured := 0, 0
		for _, ev := range readChrome(t, trace).TraceEvents {
			args, _ := ev["args"].(map[string]any)
			if ev["ph"] != "X" || ev["cat"] != "kernel" || args["graph_node"] == nil {
				continue
			}
			kernels++
			if args["timing"] == "measured" {
				measured++
			}
		}
		if kernels != ops || measured != ops {
			t.Errorf("%s has %d kernels of graph replays, %d measured; want %d, all", filepath.Base(trace), kernels, measured, ops)
		}
	}
	data, err := os.ReadFile(pf)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := perfettotest.Read(data)
	if err != nil {
		t.Fatal(err)
	}
	pk := 0
	for _, s := range tr.Slices {
		if _, ok := s.Args["graph_node"]; ok && s.Category == "kernel" {
			pk++
		}
	}
	if pk != ops {
		t.Errorf("the Perfetto trace has %d kernels of graph replays, want %d", pk, ops)
	}

	// The terminal summary says how they count.
	stdout, stderr, err = run(t, "record", "--nvml-interval=-1s", "--gpu-times=off", "-o", filepath.Join(dir, "off.cudatap"), "--", b.Workload, "--scenario", "graphs", "--iters", "10")
	if err != nil {
		t.Fatalf("record: %v\n%s", err, stderr)
	}
	if want := "CUDA graphs: 50 launches ran 210 GPU ops (their nodes: in GPU OPS, not in LAUNCHES)"; !strings.Contains(stdout+stderr, want) {
		t.Errorf("the summary lacks %q:\n%s%s", want, stdout, stderr)
	}
}
