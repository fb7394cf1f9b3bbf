package syncs

import (
	"testing"

	"github.com/cudatap/cudatap/tracer/event"
	"github.com/cudatap/cudatap/tracer/model"
)

// A thread's wall time leaves out the time cudatap held it (an attach, a
// library load: cudatap's time, not the program's), and its blocked time
// is never more than what is left, as the summary, the report and the
// lints' prices all count it.
func TestThreadWallLessHolds(t *testing.T) {
	const us = 1000
	p := &model.Process{PID: 1}
	c := NewCollector()
	call := func(api event.API, start, end uint64) *model.Call {
		x := &model.Call{Start: start * us, End: end * us, TID: 1, API: api, Stream: -1, GPUOp: -1, Stack: -1, PyStack: -1, HasRet: true}
		c.Call(p, x)
		return x
	}
	// Held 30 µs, 20 of them inside the thread's calls (from 0 on).
	c.Hold(p, &model.Hold{TID: 1, Start: 0, End: 20 * us})
	c.Hold(p, &model.Hold{TID: 1, Start: 90 * us, End: 100 * us})
	c.Hold(p, &model.Hold{TID: 2, Start: 0, End: 50 * us}) // a thread that never calls
	launch := call(event.CudaLaunchKernel, 5, 10)
	launch.GPUOp, launch.Stream = 0, 0
	s := call(event.CudaStreamSynchronize, 10, 100)
	c.Sync(p, &model.Sync{Kind: model.SyncStream, Call: s.Seq, TID: 1, Stream: 0, Start: s.Start, BlockedNs: s.End - s.Start, API: s.API, Stack: -1, PyStack: -1})

	h := HostOf(nil, c, 1)
	if h == nil || len(h.Threads) != 1 {
		t.Fatalf("host %+v: want the one thread that called", h)
	}
	th := h.Threads[0]
	// Calls span 5..100 µs (95); held within: 5..20 and 90..100 (25).
	if th.HeldNs != 25*us || th.WallNs != 70*us || th.BlockedNs != 70*us || th.SyncNs != 90*us {
		t.Errorf("thread held %d, wall %d, blocked %d, sync %d; want 25, 70, 70 (capped) and 90 µs", th.HeldNs/us, th.WallNs/us, th.BlockedNs/us, th.SyncNs/us)
	}
	if h.ThreadWallNs != 70*us || h.Blocked() != 1 {
		t.Errorf("host thread wall %d, blocked share %v; want 70 µs, 1", h.ThreadWallNs/us, h.Blocked())
	}
}
