package describe

import (
	"testing"

	"github.com/cudatap/cudatap/symbolize"
	"github.com/cudatap/cudatap/tracer/event"
	"github.com/cudatap/cudatap/tracer/model"
)

func TestKernelOf(t *testing.T) {
	const pid = 7
	n := model.NewNames()
	n.Kernels[model.NameKey{PID: pid, Key: 0x10}] = "_Z6vecAddPfS_S_i"
	n.Kernels[model.NameKey{PID: pid, Key: 0x20}] = "_Z4fillPfi"
	n.Kernels[model.NameKey{PID: pid + 1, Key: 0x30}] = "_Z5otherv" // another process's address
	p := &model.Process{PID: pid,
		KernelNames: map[uint64]string{0xc0: "_Z6reducePf"}, // named by cuModuleGetFunction
		Stubs:       map[uint64]uint64{0xf0: 0x20},          // a CUfunction launched by the runtime stub 0x20
	}
	k := KernelOf(n, p, 0x10)
	if k.Mangled != "_Z6vecAddPfS_S_i" || k.Full != symbolize.Demangle(k.Mangled) || k.Display != symbolize.Shorten(k.Full, KernelNameMax) || k.Full == k.Mangled {
		t.Errorf("known kernel: %+v", k)
	}
	if k := KernelOf(n, p, 0xc0); k.Mangled != "_Z6reducePf" || k.Full != "reduce(float*)" {
		t.Errorf("kernel named by handle: %+v", k)
	}
	if k := KernelOf(n, p, 0xf0); k.Mangled != "_Z4fillPfi" {
		t.Errorf("kernel named by its stub: %+v", k)
	}
	for _, f := range []uint64{0xbeef, 0x30} {
		want := "kernel@0x" + map[uint64]string{0xbeef: "beef", 0x30: "30"}[f]
		if k := KernelOf(n, p, f); k != (Kernel{want, want, want}) {
			t.Errorf("unknown kernel %#x: %+v", f, k)
		}
	}
	if k := KernelOf(nil, p, 0x10); k.Mangled != "kernel@0x10" {
		t.Errorf("no name tables: %+v", k)
	}
}

// The innermost native frame outside the probed function is the site.
func TestNativeStackSite(t *testing.T) {
	const pid = 3
	p := &model.Process{PID: pid, Stacks: [][]uint64{{1, 2, 3}, {1}, {4, 2}, {5, 2}}}
	n := model.NewNames()
	for addr, name := range map[uint64]string{
		1: "cudaMemcpyAsync_ptsz@@libcudart.so.13 (libcudart.so.13)",
		2: "train_step (train.py)",
		4: "cudaMemcpyAsyncHelper (libfoo.so)", // a different function that shares the prefix
		// The _ptsz variant aliases the plain function: the symbolizer may name either.
		5: "cudaMemcpyAsync (libcudart.so.13)",
	} {
		n.Frames[model.NameKey{PID: pid, Key: addr}] = name
	}
	for _, tc := range []struct {
		stack int32
		want  string
	}{
		{0, "train_step (train.py)"},
		{3, "train_step (train.py)"},
		{1, ""}, // nothing outside the API
		{2, "cudaMemcpyAsyncHelper (libfoo.so)"},
		{-1, ""},
		{7, ""},
	} {
		got := ""
		if st := NativeStack(n, p, tc.stack, event.CudaMemcpyAsync, 1, 1); len(st) > 0 {
			got = st[0]
		}
		if got != tc.want {
			t.Errorf("NativeStack(stack %d)[0] = %q, want %q", tc.stack, got, tc.want)
		}
	}
	if got := NativeStack(n, p, 0, event.CudaMemcpyAsync, 1, 5); len(got) != 2 || got[1] != "0x3" {
		t.Errorf("whole stack %q", got)
	}
	if got := Frame(n, pid, 3); got != "0x3" {
		t.Errorf("unresolved frame %q", got)
	}
	if got := Frame(n, pid+1, 2); got != "0x2" {
		t.Errorf("another process's frame %q", got)
	}
}

func TestPyStack(t *testing.T) {
	const pid = 9
	keys := []model.PyKey{{Code: 0x10, Instr: 1}, {Code: 0x20, Instr: 2}}
	p := &model.Process{PID: pid, PyStacks: [][]model.PyKey{keys}}
	n := model.NewNames()
	n.Py[model.PyNameKey{PID: pid, PyKey: keys[0]}] = "train.py:12 step"
	got := PyStack(n, p, 0)
	if len(got) != 2 || got[0] != "train.py:12 step" || got[1] != "<python code 0x20>" {
		t.Errorf("PyStack = %q", got)
	}
	if PyStack(n, p, -1) != nil || PyStack(n, p, 1) != nil {
		t.Error("a stack for no index")
	}
}

func TestDrops(t *testing.T) {
	for _, tc := range []struct {
		d    model.Drops
		want string
	}{
		{model.Drops{}, "dropped events: 0 (ring buffer full 0, entry table full 0, decode errors 0); returns without their entry: 0; argument read faults: 0; attach failures: 0"},
		{model.Drops{RingbufFull: 1, UnknownAPI: 2, ReadFaults: 3}, "dropped events: 3 (ring buffer full 1, entry table full 0, decode errors 0, unknown API 2); returns without their entry: 0; argument read faults: 3; attach failures: 0"},
		{model.Drops{WindowFull: 4, StacksDropped: 5}, "dropped events: 0 (ring buffer full 0, entry table full 0, decode errors 0); returns without their entry: 0; argument read faults: 0; attach failures: 0, 4 GPU ops laid out early (window full), 5 stacks not kept"},
	} {
		if got := Drops(tc.d); got != tc.want {
			t.Errorf("Drops(%+v) = %q, want %q", tc.d, got, tc.want)
		}
	}
}

func TestSplitPyFrame(t *testing.T) {
	for in, want := range map[string]struct {
		file string
		line int
		fn   string
	}{
		"train.py:42 step":               {"train.py", 42, "step"},
		"/My Drive/run v2.py:7 <module>": {"/My Drive/run v2.py", 7, "<module>"},
		"no-line.py f":                   {"no-line.py", 0, "f"},
		"nothing":                        {"", 0, ""},
	} {
		if file, line, fn := SplitPyFrame(in); file != want.file || line != want.line || fn != want.fn {
			t.Errorf("SplitPyFrame(%q) = %q, %d, %q; want %+v", in, file, line, fn, want)
		}
	}
}
