package pprofout

import (
	"testing"

	"github.com/cudatap/cudatap/tracer/event"
	"github.com/cudatap/cudatap/tracer/model"
)

// A sync's Python frames become locations with file and line, above (as
// callers of) the native frames.
func TestPythonFrames(t *testing.T) {
	py := []model.PyKey{{Code: 1, Instr: 2}, {Code: 3, Instr: 4}}
	p := &model.Process{PID: 9, Threads: map[uint32]struct{}{9: {}}, Stacks: [][]uint64{{0x100}}, PyStacks: [][]model.PyKey{py}}
	n := model.NewNames()
	n.Procs[9] = model.ProcessInfo{Comm: "python3"}
	n.Threads[model.NameKey{PID: 9, Key: 9}] = "python3"
	n.Frames[model.NameKey{PID: 9, Key: 0x100}] = "at::native::_local_scalar_dense_cuda (libtorch_cuda.so)"
	n.Py[model.PyNameKey{PID: 9, PyKey: py[0]}] = "/src/train.py:12 step"
	n.Py[model.PyNameKey{PID: 9, PyKey: py[1]}] = "/src/train.py:30 <module>"
	c := NewCollector()
	c.Call(p, &model.Call{API: event.CudaStreamSynchronize, TID: 9, Start: 10, End: 5010, Stream: 0,
		GPUOp: -1, Sync: model.SyncStream, BlockedNs: 5000, Stack: 0, PyStack: 0})
	r := &model.Result{Processes: []*model.Process{p}, Start: 10, End: 5010}
	r.Name(n)
	prof, err := Build(r, c, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(prof.Sample) != 1 {
		t.Fatalf("%d samples", len(prof.Sample))
	}
	var names []string
	lines := map[string]int64{}
	for _, l := range prof.Sample[0].Location {
		fn := l.Line[0].Function
		names = append(names, fn.Name)
		switch {
		case l.Address != 0: // native: in its object's file
			if fn.Filename != "libtorch_cuda.so" || l.Mapping == nil || l.Mapping.File != fn.Filename {
				t.Errorf("%s: file %q mapping %v", fn.Name, fn.Filename, l.Mapping)
			}
		case fn.Filename != "":
			lines[fn.Name] = l.Line[0].Line
			if fn.Filename != "/src/train.py" {
				t.Errorf("%s: file %q", fn.Name, fn.Filename)
			}
		}
	}
	want := []string{"cudaStreamSynchronize", "at::native::_local_scalar_dense_cuda (libtorch_cuda.so)", "step", "<module>"}
	for i, w := range want {
		if i >= len(names) || names[i] != w {
			t.Fatalf("stack (leaf first) %q, want it to start %q", names, want)
		}
	}
	if lines["step"] != 12 || lines["<module>"] != 30 {
		t.Errorf("lines %v", lines)
	}
}
