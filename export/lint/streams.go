package lint

import (
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
//
// The finding's cost is the time more than the limit of streams were busy:
// measured when every op was; otherwise a second sweep counts, per device,
// the streams that may have been busy (an op anywhere between its enqueue
// and its proof of completion), whose time past the limit bounds the real
// one from above. Neither sweep starts an op before the horizon: the
// horizon is an enqueue time, and no op runs before it was enqueued.
//
// The bounds' sweep waits until the process has put work on more streams
// than the limit: before the first op of the stream past it was enqueued
// (at t), fewer streams can have been busy. Until then each stream keeps
// only the latest end of its ops' bounds; every op handed over by then was
// enqueued before t, so what its stream's bounds hold from t on is the one
// span [t, that end], with which the sweep starts.

// span is one op's time on the GPU.
type span struct {
	start, end uint64
	stream     int32
	call       ref
}

// spanHeap is a binary heap of spans by start, or by end (typed: no
// boxing per op, as container/heap would).
type spanHeap struct {
	s     []span
	byEnd bool
}

func (h *spanHeap) Len() int { return len(h.s) }

func (h *spanHeap) less(i, j int) bool {
	if h.byEnd {
		return h.s[i].end < h.s[j].end
	}
	if h.s[i].start != h.s[j].start {
		return h.s[i].start < h.s[j].start
	}
	return h.s[i].call.seq < h.s[j].call.seq
}

func (h *spanHeap) push(x span) {
	h.s = append(h.s, x)
	for i := len(h.s) - 1; i > 0; {
		p := (i - 1) / 2
		if !h.less(i, p) {
			break
		}
		h.s[i], h.s[p] = h.s[p], h.s[i]
		i = p
	}
}

func (h *spanHeap) pop() span {
	top := h.s[0]
	n := len(h.s) - 1
	h.s[0] = h.s[n]
	h.s = h.s[:n]
	for i := 0; ; {
		l, r, m := 2*i+1, 2*i+2, i
		if l < n && h.less(l, m) {
			m = l
		}
		if r < n && h.less(r, m) {
			m = r
		}
		if m == i {
			break
		}
		h.s[i], h.s[m] = h.s[m], h.s[i]
		i = m
	}
	return top
}

// busyStream is a stream as the sweep sees it: busy until a time, by
// its latest op. One entry per busy stream waits in the active heap, so
// the heap holds at most as many as there are streams: when it comes up,
// a stream whose later ops reach further goes back in until then.
type busyStream struct {
	busy  bool
	until uint64
	op    span
}

// sweep counts one device's busy streams.
type sweep struct {
	device    int8
	arrived   spanHeap
	active    spanHeap     // when busy streams may fall idle
	busy      []busyStream // by stream id: every stream seen, busy or not
	nbusy     int          // the streams busy now
	watermark uint64       // the sweep's instant: ops starting before it come late
	limit     int          // more busy streams than this fire the lint
	peak      int
	peakAt    uint64
	shown     []span // the busy streams' latest ops at the peak, by stream
	over      uint64 // when the count last rose past limit
	overNs    uint64 // time spent past it
	costOnly  bool   // the bounds' sweep: overNs is all it is for
}

func newSweep(device int8, limit int) *sweep {
	return &sweep{device: device, active: spanHeap{byEnd: true}, limit: limit}
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
	s.arrived.push(x)
	if s.arrived.Len() > maxArrived {
		s.run(s.arrived.s[0].start + 1)
	}
}

// run sweeps every op starting before horizon h.
func (s *sweep) run(h uint64) {
	for s.arrived.Len() > 0 && s.arrived.s[0].start < h {
		x := s.arrived.pop()
		s.retire(x.start)
		s.activate(x)
		s.watermark = x.start
	}
}

// retire makes idle the streams whose work ended by t.
func (s *sweep) retire(t uint64) {
	for s.active.Len() > 0 && s.active.s[0].end <= t {
		y := s.active.pop()
		b := &s.busy[y.stream]
		if b.until > y.end {
			s.active.push(span{end: b.until, stream: y.stream})
			continue
		}
		b.busy = false
		if s.nbusy == s.limit+1 {
			s.overNs += y.end - s.over
		}
		s.nbusy--
	}
}

func (s *sweep) activate(x span) {
	for int(x.stream) >= len(s.busy) {
		s.busy = append(s.busy, busyStream{})
	}
	b := &s.busy[x.stream]
	b.op = x
	if b.busy {
		b.until = max(b.until, x.end)
	} else {
		b.busy, b.until = true, x.end
		s.active.push(span{end: x.end, stream: x.stream})
		if s.nbusy++; s.nbusy == s.limit+1 {
			s.over = x.start
		}
	}
	if s.nbusy > s.peak && !s.costOnly {
		s.peak, s.peakAt = s.nbusy, x.start
		s.shown = s.shown[:0]
		for i := range s.busy {
			if s.busy[i].busy && len(s.shown) < maxShown {
				s.shown = append(s.shown, s.busy[i].op)
			}
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
	// The ops enqueued and not laid out yet, by ID in a ring (IDs are
	// dense and increasing): at most maxPending of them, past which an op
	// is not followed (the horizon then passes it: counted if it comes
	// late). oldest: no op below it is pending; next: one past the highest
	// op ID a call showed.
	ring   []pendingOp
	oldest int
	next   int
	early  []int // laid out within their own call, before it was handed over
	// devices, sorted (a few: looked up by a scan); swept is the horizon
	// last swept to; bounding: the bounds' sweeps have started.
	devices  []*deviceSweeps
	swept    uint64
	bounding bool
}

// deviceSweeps are one device's sweeps: of the ops as drawn, and of their
// bounds; unmeasured says an op was not measured (the cost is then the
// bounds').
type deviceSweeps struct {
	device       int8
	drawn, bound *sweep
	unmeasured   bool
	boundEnd     []uint64 // by stream, until the bounds' sweep starts
}

type pendingOp struct {
	id   int
	call ref
	live bool
}

func (t *opTracker) init() {
	t.ring = make([]pendingOp, 64)
}

// enqueued notes the op call x enqueued.
func (t *opTracker) enqueued(x *model.Call) {
	id := x.GPUOp
	t.next = max(t.next, id+1)
	if i := slices.Index(t.early, id); i >= 0 {
		t.early = slices.Delete(t.early, i, i+1)
		return
	}
	if id-t.oldest >= len(t.ring) && !t.grow(id) {
		return
	}
	t.ring[id&(len(t.ring)-1)] = pendingOp{id: id, call: refOf(x), live: true}
}

// grow doubles the ring until op id fits, up to maxPending.
func (t *opTracker) grow(id int) bool {
	t.skip()
	n := len(t.ring)
	for id-t.oldest >= n {
		if n >= maxPending {
			return false
		}
		n *= 2
	}
	ring := make([]pendingOp, n)
	for _, p := range t.ring {
		if p.live {
			ring[p.id&(n-1)] = p
		}
	}
	t.ring = ring
	return true
}

// take removes op id from the pending ops.
func (t *opTracker) take(id int) (ref, bool) {
	p := &t.ring[id&(len(t.ring)-1)]
	if !p.live || p.id != id {
		return ref{}, false
	}
	p.live = false
	return p.call, true
}

// skip moves oldest past the ops no longer pending.
func (t *opTracker) skip() {
	for t.oldest < t.next {
		if p := &t.ring[t.oldest&(len(t.ring)-1)]; p.live && p.id == t.oldest {
			return
		}
		t.oldest++
	}
}

// final takes an op the model laid out, and sweeps up to the new horizon.
func (t *opTracker) final(op *model.GPUOp, now uint64, limit int, limits *Limits) {
	call, ok := t.take(op.ID)
	if !ok {
		if op.ID >= t.next && len(t.early) < 64 {
			t.early = append(t.early, op.ID)
		}
		call = ref{start: op.Enqueued, seq: op.Call, tid: op.TID, stream: int32(op.Stream), stack: -1, py: -1, api: op.API, valid: true}
	}
	drawn := span{start: op.Start, end: op.End, stream: int32(op.Stream), call: call}
	bound := drawn
	if !op.Measured {
		bound.start, bound.end = op.Enqueued, max(op.ProvenBy(), op.End)
	}
	if bound.end > bound.start {
		d := t.device(op.Device, limit)
		if drawn.end > drawn.start {
			d.drawn.add(drawn, limits)
		}
		d.unmeasured = d.unmeasured || !op.Measured
		switch {
		case !t.bounding:
			for int(bound.stream) >= len(d.boundEnd) {
				d.boundEnd = append(d.boundEnd, 0)
			}
			d.boundEnd[bound.stream] = max(d.boundEnd[bound.stream], bound.end)
		case op.Measured:
			var counted Limits // a clip here is the drawn sweep's, counted there
			d.bound.add(bound, &counted)
		default:
			d.bound.add(bound, limits)
		}
	}
	if h := t.horizon(now); h > t.swept {
		t.swept = h
		for _, d := range t.devices {
			d.drawn.run(h)
			if t.bounding {
				d.bound.run(h)
			}
		}
	}
}

// startBounds starts the bounds' sweeps when the first op of a stream
// past the limit is enqueued at t.
func (t *opTracker) startBounds(at uint64, limits *Limits) {
	t.bounding = true
	for _, d := range t.devices {
		for sid, end := range d.boundEnd {
			if end > at {
				d.bound.add(span{start: at, end: end, stream: int32(sid)}, limits)
			}
		}
		d.boundEnd = nil
	}
}

// device returns the sweeps of device d, made when new.
func (t *opTracker) device(d int8, limit int) *deviceSweeps {
	i := 0
	for ; i < len(t.devices) && t.devices[i].device <= d; i++ {
		if t.devices[i].device == d {
			return t.devices[i]
		}
	}
	ds := &deviceSweeps{device: d, drawn: newSweep(d, limit), bound: newSweep(d, limit)}
	ds.bound.costOnly = true
	t.devices = slices.Insert(t.devices, i, ds)
	return ds
}

// over is the time past the limit on the device, and whether it is a
// bound.
func (d *deviceSweeps) over() (ns uint64, atMost bool) {
	if d.unmeasured {
		return d.bound.overNs, true
	}
	return d.drawn.overNs, false
}

// horizon is the time before which no op can start any more.
func (t *opTracker) horizon(now uint64) uint64 {
	t.skip()
	if t.oldest < t.next {
		return t.ring[t.oldest&(len(t.ring)-1)].call.start
	}
	return now
}

// finish sweeps every device to the end.
func (t *opTracker) finish() {
	for _, d := range t.devices {
		d.drawn.finish()
		d.bound.finish()
	}
}
