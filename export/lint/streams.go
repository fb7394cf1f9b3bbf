package lint

import (
	"container/heap"
	"slices"

	"github.com/cudatap/cudatap/tracer/model"
)

// many-busy-streams counts, per device, the streams with GPU work at each
// instant, from the ops as the model draws them (measured by CUPTI, or
// inferred between the synchronizations that bound them; an op no
// synchronization bounded has no known duration and is not counted).
//
// The model hands ops over when they are final, not in time order: a
// stream nobody synchronized keeps its ops pending while other streams'
// ops arrive. The sweep therefore runs up to a horizon before which no op
// can start any more: the enqueue time of the oldest op still pending
// (none starts before it was enqueued), else the latest call. Ops laid out
// wait in a heap until the horizon passes them; memory is bounded by the
// ops pending in the model (its window) and by maxArrived.

// span is one op's time on the GPU.
type span struct {
	start, end uint64
	stream     int32
	call       ref
}

// spanHeap orders spans by start, or by end.
type spanHeap struct {
	s     []span
	byEnd bool
}

func (h *spanHeap) Len() int { return len(h.s) }
func (h *spanHeap) Less(i, j int) bool {
	if h.byEnd {
		return h.s[i].end < h.s[j].end
	}
	if h.s[i].start != h.s[j].start {
		return h.s[i].start < h.s[j].start
	}
	return h.s[i].call.seq < h.s[j].call.seq
}
func (h *spanHeap) Swap(i, j int) { h.s[i], h.s[j] = h.s[j], h.s[i] }
func (h *spanHeap) Push(x any)    { h.s = append(h.s, x.(span)) }
func (h *spanHeap) Pop() any {
	x := h.s[len(h.s)-1]
	h.s = h.s[:len(h.s)-1]
	return x
}

// busyStream is a stream with work at the sweep's instant.
type busyStream struct {
	n   int  // its ops active
	op  span // the latest of them
	sid int32
}

// sweep counts one device's busy streams.
type sweep struct {
	device    int8
	arrived   spanHeap
	active    spanHeap
	busy      map[int32]*busyStream
	watermark uint64 // the sweep's instant: ops starting before it come late
	limit     int    // more busy streams than this fire the lint
	peak      int
	peakAt    uint64
	shown     []span // the busy streams' latest ops at the peak, by stream
	over      uint64 // when the count last rose past limit
	overNs    uint64 // time spent past it
}

func newSweep(device int8, limit int) *sweep {
	return &sweep{device: device, active: spanHeap{byEnd: true}, busy: map[int32]*busyStream{}, limit: limit}
}

// add takes a laid-out op; one starting before the sweep's instant is
// clipped to it (counted).
func (s *sweep) add(x span, limits *Limits) {
	if x.start < s.watermark {
		limits.LateOps++
		if x.end <= s.watermark {
			return
		}
		x.start = s.watermark
	}
	heap.Push(&s.arrived, x)
	if s.arrived.Len() > maxArrived {
		s.run(s.arrived.s[0].start + 1)
	}
}

// run sweeps every op starting before horizon h.
func (s *sweep) run(h uint64) {
	for s.arrived.Len() > 0 && s.arrived.s[0].start < h {
		x := heap.Pop(&s.arrived).(span)
		s.retire(x.start)
		s.activate(x)
		s.watermark = x.start
	}
}

// retire ends the ops that ended by t.
func (s *sweep) retire(t uint64) {
	for s.active.Len() > 0 && s.active.s[0].end <= t {
		y := heap.Pop(&s.active).(span)
		b := s.busy[y.stream]
		if b.n--; b.n > 0 {
			continue
		}
		if len(s.busy) == s.limit+1 {
			s.overNs += y.end - s.over
		}
		delete(s.busy, y.stream)
	}
}

func (s *sweep) activate(x span) {
	heap.Push(&s.active, x)
	b := s.busy[x.stream]
	if b == nil {
		b = &busyStream{sid: x.stream}
		s.busy[x.stream] = b
		if len(s.busy) == s.limit+1 {
			s.over = x.start
		}
	}
	b.n++
	b.op = x
	if len(s.busy) > s.peak {
		s.peak, s.peakAt = len(s.busy), x.start
		s.shown = s.shown[:0]
		for _, b := range s.busy {
			s.shown = append(s.shown, b.op)
		}
		slices.SortFunc(s.shown, func(a, b span) int { return int(a.stream - b.stream) })
		if len(s.shown) > maxShown {
			s.shown = s.shown[:maxShown]
		}
	}
}

// finish sweeps everything left.
func (s *sweep) finish() {
	s.run(unknownTime)
	s.retire(unknownTime)
}

// opTracker follows the ops the model has not laid out yet, for the
// horizon, and feeds the laid-out ones to their device's sweep.
type opTracker struct {
	pending map[int]ref      // by op ID: the enqueue call
	early   map[int]struct{} // laid out within their own call, before it was handed over
	oldest  int              // no op below it is pending
	next    int              // one past the highest op ID a call showed
	sweeps  map[int8]*sweep
	devices []int8 // sorted
	swept   uint64 // horizon last swept to
	limit   int
}

func (t *opTracker) init() {
	t.pending, t.early, t.sweeps = map[int]ref{}, map[int]struct{}{}, map[int8]*sweep{}
}

// enqueued notes the op call x enqueued.
func (t *opTracker) enqueued(x *model.Call) {
	id := x.GPUOp
	t.next = max(t.next, id+1)
	if _, ok := t.early[id]; ok {
		delete(t.early, id)
		return
	}
	if len(t.pending) < maxPending {
		t.pending[id] = refOf(x)
	}
}

// final takes an op the model laid out, and sweeps up to the new horizon.
func (t *opTracker) final(op *model.GPUOp, now uint64, limit int, limits *Limits) {
	call, ok := t.pending[op.ID]
	if ok {
		delete(t.pending, op.ID)
	} else {
		if op.ID >= t.next {
			t.early[op.ID] = struct{}{}
		}
		call = ref{start: op.Enqueued, seq: op.Call, tid: op.TID, stream: int32(op.Stream), stack: -1, py: -1, api: op.API, valid: true}
	}
	if op.End > op.Start {
		s := t.sweeps[op.Device]
		if s == nil {
			s = newSweep(op.Device, limit)
			t.sweeps[op.Device] = s
			i, _ := slices.BinarySearch(t.devices, op.Device)
			t.devices = slices.Insert(t.devices, i, op.Device)
		}
		s.add(span{start: op.Start, end: op.End, stream: int32(op.Stream), call: call}, limits)
	}
	if h := t.horizon(now); h > t.swept {
		t.swept = h
		for _, d := range t.devices {
			t.sweeps[d].run(h)
		}
	}
}

// horizon is the time before which no op can start any more.
func (t *opTracker) horizon(now uint64) uint64 {
	for t.oldest < t.next {
		if r, ok := t.pending[t.oldest]; ok {
			return r.start
		}
		t.oldest++
	}
	return now
}

// finish sweeps every device to the end.
func (t *opTracker) finish() {
	for _, d := range t.devices {
		t.sweeps[d].finish()
	}
}
