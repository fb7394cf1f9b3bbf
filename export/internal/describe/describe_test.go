package describe

import (
	"testing"

	"github.com/cudatap/cudatap/symbolize"
	"github.com/cudatap/cudatap/tracer/event"
	"github.com/cudatap/cudatap/tracer/model"
)

func TestKernelAt(t *testing.T) {
	p := &model.Process{Kernels: map[uint64]string{0x10: "_Z6vecAddPfS_S_i"}}
	k := KernelAt(p, 0x10)
	if k.Mangled != "_Z6vecAddPfS_S_i" || k.Full != symbolize.Demangle(k.Mangled) || k.Display != symbolize.Shorten(k.Full, KernelNameMax) || k.Full == k.Mangled {
		t.Errorf("known kernel: %+v", k)
	}
	if k := KernelAt(p, 0xbeef); k != (Kernel{"kernel@0xbeef", "kernel@0xbeef", "kernel@0xbeef"}) {
		t.Errorf("unknown kernel: %+v", k)
	}
}

// The innermost native frame outside the probed function is the site.
func TestNativeStackSite(t *testing.T) {
	p := &model.Process{
		Stacks: [][]uint64{{1, 2, 3}, {1}, {4, 2}, {5, 2}},
		Frames: map[uint64]string{
			1: "cudaMemcpyAsync_ptsz@@libcudart.so.13 (libcudart.so.13)",
			2: "train_step (train.py)",
			4: "cudaMemcpyAsyncHelper (libfoo.so)", // a different function that shares the prefix
			// The _ptsz variant aliases the plain function: the symbolizer may name either.
			5: "cudaMemcpyAsync (libcudart.so.13)",
		},
	}
	call := func(sym uint8, stack int32) *model.Call {
		return &model.Call{API: event.CudaMemcpyAsync, Symbol: sym, Stack: stack}
	}
	for _, tc := range []struct {
		c    *model.Call
		want string
	}{
		{call(1, 0), "train_step (train.py)"},
		{call(1, 3), "train_step (train.py)"},
		{call(1, 1), ""}, // nothing outside the API
		{call(1, 2), "cudaMemcpyAsyncHelper (libfoo.so)"},
		{call(1, -1), ""},
		{call(1, 7), ""},
	} {
		got := ""
		if st := NativeStack(p, tc.c, 1); len(st) > 0 {
			got = st[0]
		}
		if got != tc.want {
			t.Errorf("NativeStack(stack %d)[0] = %q, want %q", tc.c.Stack, got, tc.want)
		}
	}
	if got := Frame(p, 3); got != "0x3" {
		t.Errorf("unresolved frame %q", got)
	}
}

func TestDrops(t *testing.T) {
	for _, tc := range []struct {
		d    model.Drops
		want string
	}{
		{model.Drops{}, "dropped events: 0 (ring buffer full 0, entry table full 0, decode errors 0); returns without their entry: 0; argument read faults: 0; attach failures: 0"},
		{model.Drops{RingbufFull: 1, UnknownAPI: 2, ReadFaults: 3}, "dropped events: 3 (ring buffer full 1, entry table full 0, decode errors 0, unknown API 2); returns without their entry: 0; argument read faults: 3; attach failures: 0"},
	} {
		if got := Drops(tc.d); got != tc.want {
			t.Errorf("Drops(%+v) = %q, want %q", tc.d, got, tc.want)
		}
	}
}
