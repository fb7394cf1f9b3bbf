package model

import (
	"testing"

	"github.com/cudatap/cudatap/tracer/event"
)

// TestGraphCapture: work enqueued on a capturing stream is recorded, not
// executed; a launch of the instantiated graph is one op that knows how many
// operations it replays.
func TestGraphCapture(t *testing.T) {
	col := NewCollector()
	m := New(col)
	ts := uint64(1000)
	ev := func(api event.API, args []uint64, out uint64, ret bool) {
		spec := event.Lookup(api)
		e := event.Event{Cookie: spec.Cookie(0), PID: 7, TID: 7, Start: ts, Out: out}
		copy(e.Args[:], args)
		if ret {
			e.End, e.Flags = ts+10, event.FlagHasRet
		}
		ts += 100
		m.Handle(&e)
	}
	const s, graph, exec = 0x5000, 0x6000, 0x7000
	ev(event.CudaStreamCreateWithFlags, []uint64{0x10, 1}, s, true)
	ev(event.CudaStreamBeginCapture, []uint64{s, 0}, 0, false)
	for i := 0; i < 3; i++ {
		ev(event.CuLaunchKernel, []uint64{0xf00, 1, 1, 1, 32, 1, 1, 0, s}, 0, false)
	}
	ev(event.CudaMemcpyAsync, []uint64{0x7e00, 0x7e10, 64, 3, s}, 0, true)
	ev(event.CudaStreamEndCapture, []uint64{s, 0x20}, graph, true)
	ev(event.CudaGraphInstantiate, []uint64{0x30, graph, 0}, exec, true)
	for i := 0; i < 5; i++ {
		ev(event.CudaGraphLaunch, []uint64{exec, s}, 0, false)
	}
	ev(event.CuLaunchKernel, []uint64{0xf00, 1, 1, 1, 32, 1, 1, 0, s}, 0, false)
	p := finish(m, col)[0]
	captured, graphs, kernels := 0, 0, 0
	for i := range p.Calls {
		if p.Calls[i].Captured {
			captured++
			if p.Calls[i].GPUOp >= 0 {
				t.Errorf("captured call %s has a GPU op", p.Calls[i].API)
			}
		}
	}
	for _, op := range p.GPUOps {
		switch op.Kind {
		case OpGraph:
			graphs++
			if op.GraphOps != 4 {
				t.Errorf("graph launch replays %d ops, want 4 (3 kernels + 1 copy)", op.GraphOps)
			}
		case OpKernel:
			kernels++
		}
	}
	if captured != 4 || graphs != 5 || kernels != 1 || len(p.GPUOps) != 6 {
		t.Errorf("captured %d, graph ops %d, kernels %d, ops %d; want 4, 5, 1, 6", captured, graphs, kernels, len(p.GPUOps))
	}
}
