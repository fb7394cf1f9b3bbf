package model

import (
	"cmp"
	"slices"
)

// Hold is a stretch of time a thread of a target spent stopped while
// cudatap hooked a library it had just loaded: cudatap's time, not CUDA's.
// The call that contained it (a first CUDA call loading libcuda) has it
// subtracted from its duration.
type Hold struct {
	TID        uint32
	Start, End uint64 // ns, CLOCK_MONOTONIC
}

// maxHolds bounds the holds remembered per thread until a call covers them.
const maxHolds = 8

// AddHold records that thread tid of pid was held from start to end. It
// must come before the events of calls that contain it (the session sees
// the hold end before the call can return).
func (m *Model) AddHold(pid, tid uint32, start, end uint64) {
	if end <= start {
		return
	}
	ps := m.proc(pid)
	tid = m.thread(ps, tid)
	h := Hold{TID: tid, Start: start, End: end}
	if ps.holds == nil {
		ps.holds = map[uint32][]Hold{}
	}
	hs := append(ps.holds[tid], h)
	if len(hs) > maxHolds {
		hs = hs[len(hs)-maxHolds:]
	}
	ps.holds[tid] = hs
	ps.p.HeldNs += end - start
	m.sink.Hold(ps.p, &h)
}

// heldDuring is how long thread tid was held within [start, end]; holds
// that ended before start are forgotten (a thread's calls come in order).
func (ps *procState) heldDuring(tid uint32, start, end uint64) uint64 {
	hs := ps.holds[tid]
	if len(hs) == 0 {
		return 0
	}
	// The union of the holds within the call: two can overlap (their ends
	// are taken in cudatap once it resumed the thread, late on a loaded
	// host), and a call is never held for longer than it lasted.
	var in [][2]uint64
	keep := hs[:0]
	for _, h := range hs {
		if h.End <= start {
			continue
		}
		keep = append(keep, h)
		if lo, hi := max(h.Start, start), min(h.End, end); hi > lo {
			in = append(in, [2]uint64{lo, hi})
		}
	}
	slices.SortFunc(in, func(a, b [2]uint64) int { return cmp.Compare(a[0], b[0]) })
	var held, upTo uint64
	for _, iv := range in {
		lo := max(iv[0], upTo)
		if iv[1] > lo {
			held += iv[1] - lo
		}
		upTo = max(upTo, iv[1])
	}
	if len(keep) == 0 {
		delete(ps.holds, tid)
	} else {
		ps.holds[tid] = keep
	}
	return held
}

// AddPinned records a pinned host range that existed before cudatap
// attached (found in the target's memory map), so that copies from it are
// not taken for pageable ones.
func (m *Model) AddPinned(pid uint32, start, size uint64) {
	ps := m.proc(pid)
	if m.track(&ps.pinned, start, size) {
		ps.p.PinnedBytes += size
		ps.p.PinnedRecovered += size
	}
}

// AttachedLate marks pid as a process that ran before cudatap attached:
// its device memory in use is then a lower bound.
func (m *Model) AttachedLate(pid uint32) { m.proc(pid).p.AttachedLate = true }
