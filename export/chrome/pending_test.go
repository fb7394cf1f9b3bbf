package chrome

import (
	"bytes"
	"encoding/json"
	"maps"
	"os"
	"slices"
	"testing"

	"github.com/cudatap/cudatap/export/internal/fixture"
	"github.com/cudatap/cudatap/tracer/model"
)

// lateNames is the fixture's name tables as a live session has them when
// its events come: the threads, processes and stack frames (named before
// the model handles an event), but no kernel nor Python frame yet.
func lateNames(f *fixture.Fixture) *model.Names {
	n := model.NewNames()
	maps.Copy(n.Procs, f.Names.Procs)
	maps.Copy(n.Threads, f.Names.Threads)
	maps.Copy(n.Frames, f.Names.Frames)
	maps.Copy(n.Mappings, f.Names.Mappings)
	return n
}

// pendingFile is a file for a live trace's held events.
func pendingFile(t *testing.T) *os.File {
	t.Helper()
	f, err := os.CreateTemp(t.TempDir(), "pending")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// events are a trace's events, each as canonical JSON, sorted: the trace
// as a set.
func events(t *testing.T, b []byte) []string {
	t.Helper()
	var tr struct {
		TraceEvents []map[string]any `json:"traceEvents"`
	}
	if err := json.Unmarshal(b, &tr); err != nil {
		t.Fatalf("the trace is not JSON: %v", err)
	}
	var out []string
	for _, ev := range tr.TraceEvents {
		j, _ := json.Marshal(ev)
		out = append(out, string(j))
	}
	slices.Sort(out)
	return out
}

// TestLateNames: a live trace (Options.Pending) is written as the events
// come, while the session still names kernels (a stripped library's are
// decoded off the reader) and Python frames (a code object's copy follows
// the record that needed it). The events that name one not named yet are
// held and written by Close with the names known then: the trace holds the
// same events as one written with every name known from the start, and a
// kernel never named is drawn by its address in both.
func TestLateNames(t *testing.T) {
	f := fixture.New()
	delete(f.Names.Kernels, model.NameKey{PID: fixture.PIDA, Key: fixture.StubLong}) // never named
	var want bytes.Buffer
	w := NewWriter(&want, f.Names, Options{Version: "v-test"})
	f.Feed(w)
	if err := w.Close(f.Result); err != nil {
		t.Fatal(err)
	}

	late := lateNames(f)
	var got bytes.Buffer
	lw := NewWriter(&got, late, Options{Version: "v-test", Pending: pendingFile(t)})
	f.Feed(lw)
	if lw.nHeld == 0 {
		t.Fatal("no event was held: the test names nothing late")
	}
	maps.Copy(late.Kernels, f.Names.Kernels) // named at last
	maps.Copy(late.Py, f.Names.Py)
	if err := lw.Close(f.Result); err != nil {
		t.Fatal(err)
	}
	g, x := events(t, got.Bytes()), events(t, want.Bytes())
	if !slices.Equal(g, x) {
		for _, e := range g {
			if !slices.Contains(x, e) {
				t.Errorf("the live trace has %s", e)
			}
		}
		for _, e := range x {
			if !slices.Contains(g, e) {
				t.Errorf("the live trace lacks %s", e)
			}
		}
	}
	if !bytes.Contains(got.Bytes(), []byte(`"kernel@0x`)) || !bytes.Contains(got.Bytes(), []byte(`"train.py:88 step"`)) {
		t.Error("the live trace lacks the kernel never named or the Python frame named late")
	}
}
