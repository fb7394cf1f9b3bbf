package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/pprof/profile"

	"github.com/cudatap/cudatap/tracer/event"
	"github.com/cudatap/cudatap/tracer/recording"
)

// craft writes a recording of n copies of one launch, the j-th changed by
// vary, as a hostile recording is made (the review's: a 192-byte launch
// record with a new pid or tid each time).
func craft(t *testing.T, path string, n int, vary func(e *event.Event, j int)) {
	t.Helper()
	var buf bytes.Buffer
	w, err := recording.NewWriter(&buf, recording.NewHeader("crafted", 0))
	if err != nil {
		t.Fatal(err)
	}
	var rec []byte
	for j := range n {
		e := event.Event{Cookie: event.Lookup(event.CudaLaunchKernel).Cookie(0), PID: 100, TID: 100, Start: uint64(1e9 + j*1000)}
		e.Args[0] = 0x401000
		vary(&e, j)
		rec = event.Encode(rec[:0], &e)
		w.Event(rec)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestCraftedRecordings: recordings with more threads, processes or
// streams than cudatap models apart go through every command that reads
// a recording with their overflow merged and counted (so memory follows
// the bounds, not the recording), and every output says how much was.
func TestCraftedRecordings(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, tc := range []struct {
		name   string
		n      int
		vary   func(e *event.Event, j int)
		key    string // in the Chrome trace's drops.limits
		merged int    // how many past the bound of 1,024
		says   string // in the loss line
	}{
		{"threads", 20_000, func(e *event.Event, j int) { e.TID = uint32(1000 + j) }, "threads_merged", 20_000 - 1024, "18976 threads past 1024 per process"},
		{"processes", 3_000, func(e *event.Event, j int) { e.PID, e.TID = uint32(1000+j), uint32(1000+j) }, "processes_merged", 3_000 - 1024, "1976 processes past 1024 merged into one"},
		{"streams", 3_000, func(e *event.Event, j int) { e.Args[7] = uint64(0x10000 + 16*j) }, "streams_merged", 3_000 - 1023, "1977 streams past 1024 per process"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := filepath.Join(dir, tc.name+".cudatap")
			craft(t, in, tc.n, tc.vary)
			out := func(name string) string { return filepath.Join(dir, tc.name+"-"+name) }

			stdout, stderr, err := run(t, "export", in, "-o", out("trace.json"), "-o", out("profile.pb.gz"))
			if err != nil {
				t.Fatalf("export: %v\n%s", err, stderr)
			}
			if !strings.Contains(stdout, tc.says) {
				t.Errorf("export's summary does not say %q:\n%s", tc.says, stdout)
			}
			tr := readChrome(t, out("trace.json"))
			limits, _ := tr.Cudatap["drops"].(map[string]any)["limits"].(map[string]any)
			if got := limits[tc.key]; got != float64(tc.merged) {
				t.Errorf("trace: drops.limits.%s = %v, want %d", tc.key, got, tc.merged)
			}
			// The host side's processes and threads: 1,024 and the one
			// that stands for the rest.
			tracks := map[string]bool{}
			for _, ev := range tr.TraceEvents {
				if pid, _ := ev["pid"].(float64); ev["ph"] == "M" && pid < 1e9 && (ev["name"] == "process_name" || ev["name"] == "thread_name") {
					tracks[fmt.Sprint(ev["name"], ev["pid"], "/", ev["tid"])] = true
				}
			}
			if len(tracks) > 2*(1024+1) {
				t.Errorf("the trace names %d host processes and threads, want at most %d", len(tracks), 2*(1024+1))
			}
			pb, _ := os.ReadFile(out("profile.pb.gz"))
			if p, err := profile.Parse(bytes.NewReader(pb)); err != nil || !strings.Contains(strings.Join(p.Comments, "\n"), tc.says) {
				t.Errorf("profile (%v) comments do not say %q", err, tc.says)
			}

			stdout, _, err = run(t, "export", "--json", in, "-o", out("t2.json"))
			var summary struct {
				Drops struct{ Limits map[string]uint64 }
			}
			if err != nil || json.Unmarshal([]byte(stdout), &summary) != nil || summary.Drops.Limits[strings.ToUpper(tc.name[:1])+tc.name[1:]] != uint64(tc.merged) {
				t.Errorf("export --json (%v): drops.Limits %v, want %s %d", err, summary.Drops.Limits, tc.name, tc.merged)
			}

			for _, args := range [][]string{
				{"report", in},
				{"lint", in},
				{"syncs", in},
				{"merge", in, "-o", out("merged.json")},
			} {
				stdout, stderr, err := run(t, args...)
				if err != nil || !strings.Contains(stdout, tc.says) {
					t.Errorf("%s: %v; its output does not say %q:\n%s%s", args[0], err, tc.says, stdout, stderr)
				}
			}
			if _, stderr, err := run(t, "report", "-q", in, "-o", out("report.html"), "--memory-profile", "none"); err != nil {
				t.Errorf("report -o: %v\n%s", err, stderr)
			} else if page, _ := os.ReadFile(out("report.html")); !bytes.Contains(page, []byte(tc.says)) {
				t.Errorf("the HTML report does not say %q", tc.says)
			}
		})
	}
}
