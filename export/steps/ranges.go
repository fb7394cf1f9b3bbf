package steps

import (
	"slices"

	"github.com/cudatap/cudatap/tracer/event"
	"github.com/cudatap/cudatap/tracer/model"
)

// Range is an NVTX range of a thread (pushed and popped, or started and
// ended), or a mark (Start == End, Mark set).
type Range struct {
	PID, TID   uint32
	Start, End uint64 // ns
	Name       string // its message ("" when none, or not kept)
	Domain     uint64 // 0: the default domain
	Depth      int    // how many ranges of the thread and domain enclose it (pushed ones)
	Mark       bool
	// Started: started and ended by ID (nvtxRangeStartA), not pushed: such
	// ranges may overlap. ID 0: NVTX gave none (see Ranges).
	Started bool
	ID      uint64
	// StartSeq and EndSeq are the calls that opened and closed it.
	StartSeq, EndSeq int
}

// Bounds on the open ranges kept: pushes deeper than maxDepth on one
// thread and domain are not drawn (their pops balance them), and past
// maxStarted started ranges not ended yet the oldest is let go.
const (
	maxDepth   = 256
	maxStarted = 4096
)

type stackKey struct {
	pid, tid uint32
	domain   uint64
}

type startKey struct {
	pid uint32
	id  uint64
}

// unnumberedKey: started ranges without an id, per process and domain.
type unnumberedKey struct {
	pid    uint32
	domain uint64
}

type open struct {
	start uint64
	key   uint64 // message key
	seq   int
	tid   uint32
}

// Ranges pairs a recording's NVTX calls into ranges, as the model hands
// the calls over: pushes and pops per thread and domain, starts and ends
// by id across threads. Its memory is bounded by the open ranges.
//
// NVTX's ids come from its tool: in a process with none loaded (hooked
// while running, not launched with cudatap's injection library), every
// nvtxRangeStart returns 0 and every nvtxRangeEnd is given 0. Such a
// start and end are paired by order, per process and domain: an end
// closes the last range its own thread started and has not ended, else
// the first one still open (a range started on one thread, ended on
// another). Nested or one-at-a-time ranges pair right; overlapping ones
// ended in another order than so may not.
type Ranges struct {
	stacks     map[stackKey][]open
	deep       map[stackKey]int // pushes past maxDepth not popped yet
	started    map[startKey]open
	unnumbered map[unnumberedKey][]open // started without an id, oldest first
	order      []startKey               // started ranges, oldest first, to let go of
	// Lost counts the ranges not drawn: pushed past maxDepth, started and
	// let go before their end, popped or ended without a beginning.
	Lost int
}

// NewRanges returns an empty matcher.
func NewRanges() *Ranges {
	return &Ranges{stacks: map[stackKey][]open{}, deep: map[stackKey]int{}, started: map[startKey]open{},
		unnumbered: map[unnumberedKey][]open{}}
}

// Annotation reports whether c is an NVTX call.
func Annotation(c *model.Call) bool {
	s := event.Lookup(c.API)
	return s != nil && s.Class == event.ClassAnnotation
}

// Call takes one call; for a pop, an end or a mark it returns what it
// closed (ok). Calls that are not NVTX calls are ignored.
func (r *Ranges) Call(p *model.Process, c *model.Call) (rg Range, ok bool) {
	a := &c.Args
	k := stackKey{p.PID, c.TID, a.Comm}
	switch c.API {
	case event.NvtxRangePushA:
		if len(r.stacks[k]) >= maxDepth {
			r.deep[k]++
			r.Lost++
			return rg, false
		}
		r.stacks[k] = append(r.stacks[k], open{start: c.Start, key: a.Ptr, seq: c.Seq, tid: c.TID})
	case event.NvtxRangePop:
		if r.deep[k] > 0 {
			r.deep[k]--
			return rg, false
		}
		s := r.stacks[k]
		if len(s) == 0 {
			r.Lost++ // pushed before the recording began
			return rg, false
		}
		o := s[len(s)-1]
		if len(s) == 1 {
			delete(r.stacks, k)
		} else {
			r.stacks[k] = s[:len(s)-1]
		}
		return r.closed(p, o, c, a.Comm, len(s)-1), true
	case event.NvtxRangeStartA:
		if a.Event == 0 {
			uk := unnumberedKey{p.PID, a.Comm}
			if len(r.unnumbered[uk]) >= maxStarted {
				r.unnumbered[uk] = r.unnumbered[uk][1:] // let the oldest go
				r.Lost++
			}
			r.unnumbered[uk] = append(r.unnumbered[uk], open{start: c.Start, key: a.Ptr, seq: c.Seq, tid: c.TID})
			return rg, false
		}
		sk := startKey{p.PID, a.Event}
		if _, dup := r.started[sk]; !dup {
			if len(r.started) >= maxStarted {
				r.letGo()
			}
			r.order = append(r.order, sk)
		}
		r.started[sk] = open{start: c.Start, key: a.Ptr, seq: c.Seq, tid: c.TID}
	case event.NvtxRangeEnd:
		if a.Event == 0 {
			o, found := r.unnumberedEnd(unnumberedKey{p.PID, a.Comm}, c.TID)
			if !found {
				r.Lost++
				return rg, false
			}
			rg := r.closed(p, o, c, a.Comm, 0)
			rg.Started = true
			return rg, true
		}
		sk := startKey{p.PID, a.Event}
		o, found := r.started[sk]
		if !found {
			r.Lost++
			return rg, false
		}
		delete(r.started, sk)
		rg := r.closed(p, o, c, a.Comm, 0)
		rg.Started, rg.ID = true, a.Event
		return rg, true
	case event.NvtxMarkA:
		return Range{PID: p.PID, TID: c.TID, Start: c.Start, End: c.Start, Name: p.Message(a.Ptr), Domain: a.Comm,
			Mark: true, StartSeq: c.Seq, EndSeq: c.Seq}, true
	}
	return rg, false
}

// closed is the range o opened and c closed.
func (r *Ranges) closed(p *model.Process, o open, c *model.Call, domain uint64, depth int) Range {
	return Range{PID: p.PID, TID: o.tid, Start: o.start, End: max(c.Start, o.start), Name: p.Message(o.key), Domain: domain,
		Depth: depth, StartSeq: o.seq, EndSeq: c.Seq}
}

// unnumberedEnd takes the open range without an id that an end by thread
// tid closes (see Ranges).
func (r *Ranges) unnumberedEnd(uk unnumberedKey, tid uint32) (open, bool) {
	s := r.unnumbered[uk]
	if len(s) == 0 {
		return open{}, false
	}
	i := 0
	for j := len(s) - 1; j >= 0; j-- {
		if s[j].tid == tid {
			i = j
			break
		}
	}
	o := s[i]
	if s = slices.Delete(s, i, i+1); len(s) == 0 {
		delete(r.unnumbered, uk)
	} else {
		r.unnumbered[uk] = s
	}
	return o, true
}

// letGo forgets the oldest started range still open.
func (r *Ranges) letGo() {
	for len(r.order) > 0 {
		sk := r.order[0]
		r.order = r.order[1:]
		if _, ok := r.started[sk]; ok {
			delete(r.started, sk)
			r.Lost++
			return
		}
	}
}

// Open lists the ranges still open at the end of the recording (their
// End is end): pushed and not popped, started and not ended.
func (r *Ranges) Open(names func(pid uint32) *model.Process, end uint64) []Range {
	var out []Range
	name := func(pid uint32, key uint64) string {
		if p := names(pid); p != nil {
			return p.Message(key)
		}
		return ""
	}
	for k, s := range r.stacks {
		for depth, o := range s {
			out = append(out, Range{PID: k.pid, TID: k.tid, Start: o.start, End: max(end, o.start), Name: name(k.pid, o.key),
				Domain: k.domain, Depth: depth, StartSeq: o.seq, EndSeq: -1})
		}
	}
	for sk, o := range r.started {
		out = append(out, Range{PID: sk.pid, TID: o.tid, Start: o.start, End: max(end, o.start), Name: name(sk.pid, o.key),
			StartSeq: o.seq, EndSeq: -1, Started: true, ID: sk.id})
	}
	for uk, s := range r.unnumbered {
		for _, o := range s {
			out = append(out, Range{PID: uk.pid, TID: o.tid, Start: o.start, End: max(end, o.start), Name: name(uk.pid, o.key),
				Domain: uk.domain, StartSeq: o.seq, EndSeq: -1, Started: true})
		}
	}
	sortRanges(out)
	return out
}
