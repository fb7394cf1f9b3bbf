package tracer

import (
	"fmt"
	"maps"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cudatap/cudatap/internal/sim"
	"github.com/cudatap/cudatap/internal/testutil"
	"github.com/cudatap/cudatap/tracer/model"
	"github.com/cudatap/cudatap/tracer/probe"
)

// TestPythonLines: a CPython script drives the simulated runtime through
// ctypes; every synchronization it makes must be named by its Python
// file:line and function, innermost first, and carry a native stack that
// reaches into the interpreter (CPython has no frame pointers: this needs
// the .eh_frame unwinder). The script also syncs at module level and from
// code compiled and freed at once, then exits without lingering: those
// frames are named from the copies of their code objects the BPF side
// took at the call, not from the process, which is gone.
func TestPythonLines(t *testing.T) {
	t.Parallel()
	testutil.RequireRoot(t)
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not installed")
	}
	b := testutil.Sim(t)
	for _, mode := range []string{"launch", "attach"} {
		t.Run(mode, func(t *testing.T) {
			var out *Outcome
			var rep *sim.Report
			if mode == "launch" {
				out, rep = launch(t, probe.StacksSync, py, b.PySync, b.Runtime, "5", "--module-syncs")
			} else {
				cmd := exec.Command(py, b.PySync, b.Runtime, "5", "--wait-stdin", "--module-syncs")
				testAttach(t, cmd, func(o *Outcome, r *sim.Report) { out, rep = o, r })
			}
			p := tracedOf(t, out, rep.PID)
			if p == nil {
				t.Fatal("the Python process was not traced")
			}
			// How many syncs of each kind each line makes. step_item's D2H
			// copy into pageable memory blocks too, on the line before its
			// sync.
			want := map[model.SyncKind]map[string]int{
				model.SyncStream: {fmt.Sprintf("pysync.py:%d step_item", rep.Lines["step_item"]): 5,
					fmt.Sprintf("pysync.py:%d <module>", rep.Lines["module"]): 1},
				model.SyncPageableMemcpy: {fmt.Sprintf("pysync.py:%d step_item", rep.Lines["step_item"]-1): 5,
					fmt.Sprintf("pysync.py:%d pageable_copy", rep.Lines["pageable_copy"]): 5},
				model.SyncDevice: {fmt.Sprintf("pysync.py:%d device_sync", rep.Lines["device_sync"]): 5,
					fmt.Sprintf("compiled.py:%d <module>", rep.Lines["compiled"]): 1},
			}
			seen := map[model.SyncKind]map[string]int{}
			for _, s := range p.Syncs {
				w, ok := want[s.Kind]
				if !ok {
					continue
				}
				c := &p.Calls[s.Call]
				if c.PyStack < 0 {
					t.Errorf("%s: no Python stack", s.Kind)
					continue
				}
				frames := p.PyStacks[c.PyStack]
				top := filepath.Base(p.pyFrame(frames[0]))
				if _, ok := w[top]; !ok {
					t.Errorf("%s: innermost Python frame %q, want one of %v", s.Kind, top, w)
				}
				if outer := p.pyFrame(frames[len(frames)-1]); !strings.HasSuffix(outer, "<module>") {
					t.Errorf("%s: outermost Python frame %q, want <module>", s.Kind, outer)
				}
				if c.Stack < 0 || len(p.Stacks[c.Stack]) < 5 {
					t.Errorf("%s: native stack too short: %v", s.Kind, c.Stack)
				} else if !nativeReaches(p, p.Stacks[c.Stack], "ffi_call") && !nativeReaches(p, p.Stacks[c.Stack], "_PyEval_EvalFrameDefault") {
					t.Errorf("%s: native stack does not reach ctypes or the interpreter: %v", s.Kind, names(p, p.Stacks[c.Stack]))
				}
				if seen[s.Kind] == nil {
					seen[s.Kind] = map[string]int{}
				}
				seen[s.Kind][top]++
			}
			for kind, w := range want {
				if !maps.Equal(seen[kind], w) {
					t.Errorf("%s: syncs by line %v, want %v", kind, seen[kind], w)
				}
			}
		})
	}
}

func nativeReaches(p *traced, stack []uint64, fn string) bool {
	for _, pc := range stack {
		if strings.Contains(p.frame(pc), fn) {
			return true
		}
	}
	return false
}

func names(p *traced, stack []uint64) []string {
	var out []string
	for _, pc := range stack {
		out = append(out, p.frame(pc))
	}
	return out
}
