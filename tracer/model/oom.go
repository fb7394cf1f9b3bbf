package model

import "github.com/cudatap/cudatap/tracer/event"

// errOutOfMemory is what a device allocation returns when the device has
// not the memory: cudaErrorMemoryAllocation and CUDA_ERROR_OUT_OF_MEMORY
// are both 2.
const errOutOfMemory = 2

// maxOOMs bounds the out-of-memory records a process keeps; past it they
// are counted only (Process.OOMCount).
const maxOOMs = 64

// OOM is a device allocation that failed for want of memory: what was
// asked, where and when, what the process held at that moment and by
// whom, and whether the process got memory again afterwards. Held memory
// is what the process reserved through CUDA while traced: with
// Process.AttachedLate, what it allocated before cudatap came is unknown.
type OOM struct {
	At, End        uint64 // the first failed call's start and the last's return, ns
	TID            uint32
	API            event.API // the call that failed (the runtime's when both layers saw it)
	Symbol         uint8
	Seq            int   // the first failed call
	Stack, PyStack int32 // of the first failed call (indexes into Process.Stacks, PyStacks; -1 none)
	Size           uint64
	// Attempts: failed calls of this request, the thread asking the same
	// size again with no allocation of its own succeeding between (PyTorch's
	// caching allocator frees its cache and asks again before it raises).
	Attempts int
	Device   int8 // the calling thread's device, DeviceUnknown
	// InUse: device memory the process held through CUDA at the last
	// attempt, in Allocations allocations; Released: how much less that
	// was than at the first (what it freed to try again).
	InUse, Released uint64
	Allocations     uint64
	// Holders: the places holding InUse, most first (at most 16); Rest
	// the others together; ByAPI the same memory by allocating API.
	Holders []MemHolder
	Rest    MemHolder
	ByAPI   []MemHolder
	// Recovered: a device allocation of the process succeeded after it,
	// the first at RecoveredAt (its return, ns). Calls: the process's calls
	// up to its last attempt (Process.NCalls less it were made after).
	Recovered   bool
	RecoveredAt uint64
	Calls       int64
}

// MemHolder is device memory held by one place that allocated it (an API
// and the stacks of its calls), or by several added up (Sites of them).
type MemHolder struct {
	API            event.API
	Symbol         uint8
	Stack, PyStack int32 // -1 none
	Bytes, Count   uint64
	Sites          int
	// Other: the places past the model's bound of distinct places, whose
	// stacks were not kept apart.
	Other bool
}

// openOOM is a thread's last failed request while none of its
// allocations has succeeded since: a failure of the same size is another
// attempt of it.
type openOOM struct {
	size               uint64
	index              int // into Process.OOMs, -1 when past the bound
	lastStart, lastEnd uint64
	inUse              uint64 // at the first attempt
}

// outOfMemory follows an allocation that failed for want of memory.
func (m *Model) outOfMemory(ps *procState, call *Call, spec *event.Spec) {
	p, a := ps.p, &call.Args
	if ps.oomOpen == nil {
		ps.oomOpen = map[uint32]*openOOM{}
	}
	o := ps.oomOpen[call.TID]
	if o != nil && o.size == a.Size {
		// The driver's call inside the runtime's is the same attempt,
		// named by the runtime's call.
		nested := call.Start <= o.lastStart && call.End >= o.lastEnd || call.Start >= o.lastStart && call.End <= o.lastEnd
		o.lastStart, o.lastEnd = min(o.lastStart, call.Start), max(o.lastEnd, call.End)
		if o.index < 0 {
			return
		}
		r := &p.OOMs[o.index]
		if nested {
			if spec.Layer == event.Runtime {
				r.API, r.Symbol, r.Stack, r.PyStack = call.API, call.Symbol, call.Stack, call.PyStack
			}
		} else {
			r.Attempts++
		}
		r.End = max(r.End, call.End)
		r.Recovered, r.RecoveredAt = false, 0
		ps.snapshot(r, o.inUse)
		return
	}
	p.OOMCount++
	o = &openOOM{size: a.Size, index: -1, lastStart: call.Start, lastEnd: call.End, inUse: ps.mem.inUse}
	ps.oomOpen[call.TID] = o
	if len(p.OOMs) >= maxOOMs {
		return
	}
	o.index = len(p.OOMs)
	p.OOMs = append(p.OOMs, OOM{At: call.Start, End: call.End, TID: call.TID, API: call.API, Symbol: call.Symbol, Seq: call.Seq,
		Stack: call.Stack, PyStack: call.PyStack, Size: a.Size, Attempts: 1, Device: ps.currentDevice(call.TID)})
	ps.snapshot(&p.OOMs[o.index], o.inUse)
}

// snapshot writes what the process holds now into r; first is what it
// held at r's first attempt.
func (ps *procState) snapshot(r *OOM, first uint64) {
	r.InUse, r.Allocations, r.Calls = ps.mem.inUse, ps.mem.allocations(), ps.p.NCalls
	r.Released = first - min(first, r.InUse)
	r.Holders, r.Rest, r.ByAPI = ps.mem.holders()
}

// allocated follows a device allocation of thread tid that succeeded,
// returning at end: the thread's failed request is over, and the
// process's failures so far recovered.
func (ps *procState) allocated(tid uint32, end uint64) {
	if len(ps.oomOpen) > 0 {
		delete(ps.oomOpen, tid)
	}
	for i := range ps.p.OOMs {
		if o := &ps.p.OOMs[i]; !o.Recovered {
			o.Recovered, o.RecoveredAt = true, end
		}
	}
}
