package model

import (
	"testing"

	"github.com/cudatap/cudatap/tracer/event"
)

// TestHoldNotCUDATime: the time cudatap held a thread while hooking a
// library is taken out of the call that contained it, and only that call.
func TestHoldNotCUDATime(t *testing.T) {
	col := NewCollector()
	m := New(col)
	m.AddHold(testPID, 1, 2*ms, 142*ms) // the first call loads libcuda: held 140 ms
	m.Handle(&malloc(1, 1*ms, 145*ms, devA, 1<<20).Event)
	m.Handle(&free(1, 150*ms, 20*us, devA).Event)
	m.Handle(&malloc(2, 1*ms, 145*ms, devB, 1<<20).Event) // another thread: not held
	p := finish(m, col)[0]
	if c := p.Calls[0]; c.HoldNs != 140*ms || c.Duration() != 5*ms || c.End != 146*ms {
		t.Errorf("held call: hold %d duration %d end %d", c.HoldNs, c.Duration(), c.End)
	}
	if c := p.Calls[1]; c.HoldNs != 0 || c.Duration() != 20*us {
		t.Errorf("later call: hold %d duration %d", c.HoldNs, c.Duration())
	}
	if c := p.Calls[2]; c.HoldNs != 0 || c.Duration() != 145*ms {
		t.Errorf("other thread: hold %d duration %d", c.HoldNs, c.Duration())
	}
	if len(p.Holds) != 1 || p.Holds[0] != (Hold{TID: 1, Start: 2 * ms, End: 142 * ms}) || p.HeldNs != 140*ms {
		t.Errorf("holds %+v, held %d", p.Holds, p.HeldNs)
	}
}

// TestOverlappingHolds: two holds of one thread that overlap (their ends
// taken late on a loaded host) count once within the call: a call is never
// held longer than it lasted (make test once saw held 282 ms in a 270 ms
// call).
func TestOverlappingHolds(t *testing.T) {
	col := NewCollector()
	m := New(col)
	m.AddHold(testPID, 1, 2*ms, 100*ms)
	m.AddHold(testPID, 1, 50*ms, 160*ms) // overlaps the first, ends after the call
	m.Handle(&malloc(1, 1*ms, 145*ms, devA, 1<<20).Event)
	p := finish(m, col)[0]
	if c := p.Calls[0]; c.HoldNs != 144*ms || c.Duration() != 1*ms {
		t.Errorf("held call: hold %d duration %d, want 144 ms and 1 ms", c.HoldNs, c.Duration())
	}
}

// TestPinnedBeforeAttach: a pinned range found in the memory map at attach
// makes copies from it pinned, not pageable syncs.
func TestPinnedBeforeAttach(t *testing.T) {
	col := NewCollector()
	m := New(col)
	m.AttachedLate(testPID)
	m.AddPinned(testPID, hostP, 1<<20)
	m.Handle(&memcpyAsync(1, 10*us, 5*us, devA, hostP+64, 4096, event.HostToDevice, 0).Event)
	m.Handle(&memcpyAsync(1, 30*us, 500*us, devA, hostQ, 4096, event.HostToDevice, 0).Event)
	p := finish(m, col)[0]
	if p.Calls[0].Pageable || !p.Calls[1].Pageable {
		t.Errorf("pageable: recovered range %v, other %v", p.Calls[0].Pageable, p.Calls[1].Pageable)
	}
	if got := syncKinds(p); len(got) != 1 || got[0] != SyncPageableMemcpy {
		t.Errorf("syncs %v, want only the pageable copy's", got)
	}
	if !p.AttachedLate || p.PinnedRecovered != 1<<20 {
		t.Errorf("attached late %v, recovered %d", p.AttachedLate, p.PinnedRecovered)
	}
}
