package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cudatap/cudatap/export/perfetto/perfettotest"
	"github.com/cudatap/cudatap/internal/testutil"
)

// TestRecordPerfetto records the simulated workload with `-o
// x.perfetto-trace` beside a Chrome trace, reads the Perfetto trace back
// with Perfetto's .proto and counts what it holds against the Chrome
// trace of the same run; `export` of the recording writes the same trace.
func TestRecordPerfetto(t *testing.T) {
	testutil.RequireRoot(t)
	b := testutil.Sim(t)
	dir := t.TempDir()
	js, pf, rec := filepath.Join(dir, "t.json"), filepath.Join(dir, "t.perfetto-trace"), filepath.Join(dir, "r.cudatap")
	if _, stderr, err := run(t, "record", "-q", "-o", js, "-o", pf, "-o", rec, "--", b.Workload, "--scenario", "basic", "--iters", "20"); err != nil {
		t.Fatalf("record: %v\n%s", err, stderr)
	}
	data, err := os.ReadFile(pf)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := perfettotest.Read(data)
	if err != nil {
		t.Fatalf("the trace does not parse with Perfetto's .proto: %v", err)
	}
	for _, p := range tr.Problems {
		t.Error(p)
	}
	ct := readChrome(t, js)

	// Every slice of the Chrome trace, by category and name; the Perfetto
	// trace adds the recording's slice and an anchor per event
	// dependency's flow.
	type key struct{ cat, name string }
	want, got := map[key]int{}, map[key]int{}
	for _, ev := range ct.TraceEvents {
		if ev["ph"] == "X" {
			cat, _ := ev["cat"].(string)
			name, _ := ev["name"].(string)
			want[key{cat, name}]++
		}
	}
	launches := 0
	for _, s := range tr.Slices {
		if s.Category == "cuda_event" || strings.HasPrefix(s.Name, "recording: ") {
			continue
		}
		got[key{s.Category, s.Name}]++
		if (s.Name == "cudaLaunchKernel" || s.Name == "cuLaunchKernel") && tr.Tracks[s.Track].Thread {
			launches++
		}
	}
	if launches != 60 { // basic with 2 streams: 2 gemm + 1 relu launch per iteration
		t.Errorf("%d launch slices, want 60", launches)
	}
	for k, n := range want {
		if got[k] != n {
			t.Errorf("%v: %d slices, the Chrome trace has %d", k, got[k], n)
		}
	}
	// Tracks: the process, its threads, its GPU and streams, each as the
	// Chrome trace names them.
	names := map[string]bool{}
	for _, track := range tr.Tracks {
		names[track.Name] = true
	}
	for _, ev := range ct.TraceEvents {
		if ev["ph"] != "M" || (ev["name"] != "process_name" && ev["name"] != "thread_name") {
			continue
		}
		if name, _ := ev["args"].(map[string]any)["name"].(string); !names[name] {
			t.Errorf("no track named %q", name)
		}
	}

	// export makes the same trace from the recording (but for the wall
	// clock's offset, which the recording keeps to the µs).
	pf2 := filepath.Join(dir, "t2.pftrace")
	if _, stderr, err := run(t, "export", "-q", rec, "-o", pf2); err != nil {
		t.Fatalf("export: %v\n%s", err, stderr)
	}
	data2, _ := os.ReadFile(pf2)
	tr2, err := perfettotest.Read(data2)
	if err != nil {
		t.Fatal(err)
	}
	if len(tr2.Slices) != len(tr.Slices) || len(tr2.Tracks) != len(tr.Tracks) {
		t.Fatalf("export: %d slices on %d tracks, record: %d on %d", len(tr2.Slices), len(tr2.Tracks), len(tr.Slices), len(tr.Tracks))
	}
	for i := range tr.Slices {
		a, b := tr.Slices[i], tr2.Slices[i]
		delete(a.Args, "wall_offset_ns")
		delete(b.Args, "wall_offset_ns")
		if fmt.Sprint(a) != fmt.Sprint(b) {
			t.Errorf("slice %d: record %v\nexport %v", i, a, b)
		}
	}
}
