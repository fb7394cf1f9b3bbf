package perfetto

import (
	"bytes"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/cudatap/cudatap/export/internal/fixture"
	"github.com/cudatap/cudatap/export/perfetto/perfettotest"
	"github.com/cudatap/cudatap/tracer/model"
)

// slices are a trace's slices as sorted strings, where they nest left
// out (it depends on the order of the packets): the trace as a set.
func sliceSet(t *testing.T, b []byte) []string {
	t.Helper()
	tr, err := perfettotest.Read(b)
	if err != nil {
		t.Fatalf("the trace does not parse: %v", err)
	}
	if len(tr.Problems) > 0 {
		t.Errorf("trace_processor would log: %q", tr.Problems)
	}
	var out []string
	for _, s := range tr.Slices {
		s.Parent = 0
		out = append(out, fmt.Sprintf("%+v", s))
	}
	slices.Sort(out)
	return out
}

// TestLateNames: as the Chrome trace's (export/chrome), a live trace
// holds the packets that name a kernel or a Python frame not named yet,
// and writes them at Close with the names known then, without interned
// strings: the same slices as a trace with every name known from the
// start, a kernel never named drawn by its address in both.
func TestLateNames(t *testing.T) {
	f := fixture.New()
	delete(f.Names.Kernels, model.NameKey{PID: fixture.PIDA, Key: fixture.StubLong}) // never named
	var want bytes.Buffer
	w := NewWriter(&want, f.Names, Options{Version: "v-test"})
	f.Feed(w)
	if err := w.Close(f.Result); err != nil {
		t.Fatal(err)
	}

	late := model.NewNames()
	maps.Copy(late.Procs, f.Names.Procs)
	maps.Copy(late.Threads, f.Names.Threads)
	maps.Copy(late.Frames, f.Names.Frames)
	pending, err := os.CreateTemp(t.TempDir(), "pending")
	if err != nil {
		t.Fatal(err)
	}
	defer pending.Close()
	var got bytes.Buffer
	lw := NewWriter(&got, late, Options{Version: "v-test", Pending: pending})
	f.Feed(lw)
	if lw.nHeld == 0 {
		t.Fatal("no packet was held: the test names nothing late")
	}
	maps.Copy(late.Kernels, f.Names.Kernels) // named at last
	maps.Copy(late.Py, f.Names.Py)
	if err := lw.Close(f.Result); err != nil {
		t.Fatal(err)
	}
	g, x := sliceSet(t, got.Bytes()), sliceSet(t, want.Bytes())
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
	for _, s := range []string{"kernel@0x", "train.py:88 step"} {
		if !slices.ContainsFunc(g, func(e string) bool { return strings.Contains(e, s) }) {
			t.Errorf("the live trace lacks %q", s)
		}
	}
}
