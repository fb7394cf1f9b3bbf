package tracer

import (
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/cudatap/cudatap/internal/testutil"
	"github.com/cudatap/cudatap/symbolize/python"
	"github.com/cudatap/cudatap/tracer/model"
	"github.com/cudatap/cudatap/tracer/probe"
)

// The model reads the flags the walkers set.
func TestPyEntryFlags(t *testing.T) {
	t.Parallel()
	if model.PyInstrEntry != python.InstrEntry || model.PyInstrEntryKnown != python.InstrEntryKnown {
		t.Fatalf("model's Python frame flags %#x %#x, the walkers' %#x %#x",
			uint64(model.PyInstrEntry), uint64(model.PyInstrEntryKnown), uint64(python.InstrEntry), uint64(python.InstrEntryKnown))
	}
}

// TestPythonEntryFrames: the Python frames of a traced CPython process
// carry which ones were entered from C, through the session's model, and
// are named as if they did not. In pysync.py the functions call each other
// from Python and only the module level (run by the interpreter) and the
// code it exec()s are entered from C; up to 3.10 every frame is.
func TestPythonEntryFrames(t *testing.T) {
	t.Parallel()
	testutil.RequireRoot(t)
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not installed")
	}
	out, err := exec.Command(py, "-c", "import sys; print(sys.version_info[1])").Output()
	if err != nil {
		t.Fatal(err)
	}
	minor, _ := strconv.Atoi(strings.TrimSpace(string(out)))
	b := testutil.Sim(t)
	o, rep := launch(t, probe.StacksSync, py, b.PySync, b.Runtime, "3", "--module-syncs")
	p := tracedOf(t, o, rep.PID)
	if p == nil {
		t.Fatal("the Python process was not traced")
	}
	n := 0
	for _, s := range p.Syncs {
		c := &p.Calls[s.Call]
		if c.PyStack < 0 {
			continue
		}
		for i, k := range p.PyStacks[c.PyStack] {
			name := p.pyFrame(k)
			entry, known := k.Entry()
			want := minor <= 10 || strings.HasSuffix(name, " <module>")
			if !known || entry != want || name == "" {
				t.Errorf("%s: Python frame %d %q: entry %v known %v, want entry %v", s.Kind, i, name, entry, known, want)
			}
			n++
		}
	}
	if n == 0 {
		t.Fatal("no Python frames traced")
	}
}
