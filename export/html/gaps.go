package html

import (
	"cmp"
	"slices"

	"github.com/cudatap/cudatap/tracer/event"
	"github.com/cudatap/cudatap/tracer/model"
)

// Gap is a stretch of time a stream had no work: from the end of one op
// to the start of the next as the timeline draws them, and the part of it
// proven idle: after a synchronization proved the ops before complete and
// before the next op was enqueued. Between measured ops (CUPTI) the gap
// is exact. Host is what the process's threads did meanwhile.
type Gap struct {
	Start, End               uint64 // as drawn
	CertainStart, CertainEnd uint64 // proven idle
	Measured                 bool
	Host                     []ThreadActivity // busiest first, at most maxGapThreads
	HostComplete             bool             // the calls kept covered the whole gap
}

// Certain is how long the stream was idle for certain.
func (g *Gap) Certain() uint64 { return g.CertainEnd - g.CertainStart }

// span is the part of the gap asked about: the certain part.
func (g *Gap) span() (a, b uint64) { return g.CertainStart, g.CertainEnd }

// ThreadActivity is one thread's CUDA calls during a gap.
type ThreadActivity struct {
	TID       uint32
	Calls     int
	CallNs    uint64         // time within the gap spent in CUDA calls
	BlockedNs uint64         // of it, blocked in synchronizations
	Sync      model.SyncKind // the synchronization kind that blocked it most
	TopAPI    string         // the call it spent most time in
	TopNs     uint64
}

const maxGapThreads = 3

// gapState follows one stream's ops in the order they are final (their
// stream order) and keeps its longest proven gaps.
type gapState struct {
	seen         bool
	lastEnd      uint64
	lastProven   uint64
	lastKnown    bool // the op before was bounded or measured
	lastMeasured bool
	n            int64
	certainNs    uint64
	drawnNs      uint64
	top          []Gap // longest certain first
}

// op sees the next op of the stream and returns the gap before it when it
// is among the k longest so far (for the caller to fill Host and keep).
func (g *gapState) op(op *model.GPUOp, k int) (Gap, bool) {
	var out Gap
	ok := false
	if g.seen && op.Start > g.lastEnd {
		g.drawnNs += op.Start - g.lastEnd
		gap := Gap{Start: g.lastEnd, End: op.Start, Measured: op.Measured && g.lastMeasured}
		switch {
		case gap.Measured:
			gap.CertainStart, gap.CertainEnd = gap.Start, gap.End
		case g.lastKnown && g.lastProven < min(op.Enqueued, op.Start):
			gap.CertainStart, gap.CertainEnd = g.lastProven, min(op.Enqueued, op.Start)
		}
		if c := gap.Certain(); c > 0 {
			g.n++
			g.certainNs += c
			if len(g.top) < k || c > g.top[len(g.top)-1].Certain() {
				out, ok = gap, true
			}
		}
	}
	g.seen = true
	if op.End >= g.lastEnd {
		g.lastEnd = op.End
		g.lastProven = proven(op)
		g.lastKnown = op.Bounded || op.Measured
		g.lastMeasured = op.Measured
	}
	return out, ok
}

func (g *gapState) keep(gap Gap, k int) {
	i, _ := slices.BinarySearchFunc(g.top, gap.Certain(), func(x Gap, c uint64) int { return cmp.Compare(c, x.Certain()) })
	g.top = slices.Insert(g.top, i, gap)
	if len(g.top) > k {
		g.top = g.top[:k]
	}
}

// depthState follows a stream's queue depth: ops enqueued and not yet
// complete (not yet proven complete where not measured, an upper bound).
// Ops come in stream order; a min-heap holds the completion times of
// those pending.
type depthState struct {
	pending   doneHeap
	max       int
	saturated bool // more than maxDepth pending at once: max is a lower bound
	bound     bool // some op was not measured: max is an upper bound
}

func (d *depthState) init() { d.pending = doneHeap{} }

func (d *depthState) op(enq, done uint64, bound bool) {
	d.bound = d.bound || bound
	if d.saturated {
		return
	}
	for len(d.pending) > 0 && d.pending[0] <= enq {
		d.pending.pop()
	}
	if len(d.pending) >= maxDepth {
		d.saturated = true
		d.pending = nil
		return
	}
	d.pending.push(done)
	d.max = max(d.max, len(d.pending))
}

// doneHeap is a min-heap of completion times (typed: container/heap would
// box each one, two allocations per op).
type doneHeap []uint64

func (h *doneHeap) push(v uint64) {
	*h = append(*h, v)
	s := *h
	for i := len(s) - 1; i > 0; {
		p := (i - 1) / 2
		if s[p] <= s[i] {
			break
		}
		s[p], s[i] = s[i], s[p]
		i = p
	}
}

func (h *doneHeap) pop() {
	s := *h
	n := len(s) - 1
	s[0] = s[n]
	s = s[:n]
	for i := 0; ; {
		l, m := 2*i+1, i
		if l < n && s[l] < s[m] {
			m = l
		}
		if r := l + 1; r < n && s[r] < s[m] {
			m = r
		}
		if m == i {
			break
		}
		s[i], s[m] = s[m], s[i]
		i = m
	}
	*h = s
}

// ring keeps a process's last ringSize calls, to tell what its threads
// did during a gap found when the ops around it became final (shortly
// after, as a rule).
type ring struct {
	buf    [ringSize]ringCall
	n      int
	maxDur uint64
}

type ringCall struct {
	start, end uint64
	blocked    uint64
	tid        uint32
	api        event.API
	sym        uint8
	sync       model.SyncKind
}

func (r *ring) push(x *model.Call) {
	sync := x.Sync
	if sync == model.SyncLegacyStream {
		sync = model.SyncNone
	}
	r.buf[r.n%ringSize] = ringCall{start: x.Start, end: x.End, blocked: x.BlockedNs, tid: x.TID, api: x.API, sym: x.Symbol, sync: sync}
	r.n++
	r.maxDur = max(r.maxDur, x.End-x.Start)
}

// during sums, per thread, the calls that overlapped [a, b]; complete
// says the ring reaches back to a.
func (r *ring) during(a, b uint64) ([]ThreadActivity, bool) {
	type acc struct {
		ThreadActivity
		apis   map[string]uint64
		byKind map[model.SyncKind]uint64
	}
	threads := map[uint32]*acc{}
	oldest := max(0, r.n-ringSize)
	for i := r.n - 1; i >= oldest; i-- {
		x := &r.buf[i%ringSize]
		if x.start+r.maxDur < a {
			break // calls come in time order: none older can reach the gap
		}
		if x.start > b || x.end < a {
			continue
		}
		ov := min(x.end, b) - max(x.start, a)
		if x.end < x.start {
			ov = 0
		}
		t := threads[x.tid]
		if t == nil {
			t = &acc{ThreadActivity: ThreadActivity{TID: x.tid}, apis: map[string]uint64{}, byKind: map[model.SyncKind]uint64{}}
			threads[x.tid] = t
		}
		t.Calls++
		t.CallNs += ov
		name := x.api.String()
		if s := event.Lookup(x.api); s != nil {
			name = s.Symbol(int(x.sym))
		}
		t.apis[name] += ov
		if x.sync != model.SyncNone {
			t.BlockedNs += ov
			t.byKind[x.sync] += ov
		}
	}
	complete := r.n <= ringSize || r.buf[oldest%ringSize].start <= a
	out := make([]ThreadActivity, 0, len(threads))
	for _, t := range threads {
		for name, ns := range t.apis {
			if ns > t.TopNs || ns == t.TopNs && (t.TopAPI == "" || name < t.TopAPI) {
				t.TopAPI, t.TopNs = name, ns
			}
		}
		var most uint64
		for k, ns := range t.byKind {
			if ns > most || ns == most && k < t.Sync {
				t.Sync, most = k, ns
			}
		}
		out = append(out, t.ThreadActivity)
	}
	slices.SortFunc(out, func(x, y ThreadActivity) int {
		return cmp.Or(cmp.Compare(y.CallNs, x.CallNs), cmp.Compare(y.Calls, x.Calls), cmp.Compare(x.TID, y.TID))
	})
	if len(out) > maxGapThreads {
		out = out[:maxGapThreads]
	}
	return out, complete
}
