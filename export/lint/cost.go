package lint

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/cudatap/cudatap/internal/units"
	"github.com/cudatap/cudatap/tracer/model"
)

// Every finding is priced: the time it cost the run, measured where the
// times exist (the host's clock for blocked calls; CUPTI's for GPU ops,
// with --gpu-times) and bounded from above otherwise (a GPU op ran
// somewhere between its enqueue and the call that proved it complete).
// A finding that costs less than Options.NoteBelow of its process's
// traced time is a note: listed, not raised. A possible race is an error
// whatever it costs: its price is a wrong result, not time.

// Level says whether a finding is raised, and how.
type Level string

const (
	// LevelError: a failed allocation (out-of-memory) or a possible wrong
	// result (cross-stream-race).
	LevelError Level = "error"
	// LevelWarning: costs at least Options.NoteBelow of its process's
	// traced time, or may (an upper bound that reaches it).
	LevelWarning Level = "warning"
	// LevelNote: costs less: listed, not raised.
	LevelNote Level = "note"
)

// Levels are the levels, most severe first.
var Levels = []Level{LevelError, LevelWarning, LevelNote}

func (l Level) rank() int {
	for i, x := range Levels {
		if x == l {
			return i
		}
	}
	return len(Levels)
}

// AtLeast reports whether l is as severe as min, or more.
func (l Level) AtLeast(min Level) bool { return l.rank() <= min.rank() }

// ParseLevel reads a level by its name.
func ParseLevel(s string) (Level, error) {
	for _, l := range Levels {
		if string(l) == s {
			return l, nil
		}
	}
	return "", fmt.Errorf("unknown lint level %q: give error, warning or note", s)
}

// CostKind says what a finding's time is.
type CostKind string

const (
	// CostBlocked: host time blocked in the calls that fired the lint.
	CostBlocked CostKind = "blocked"
	// CostSerialized: GPU time work waited because of the calls: a
	// legacy-stream copy waiting for blocking streams' work, and the work
	// queued behind it (on the legacy stream, or on a blocking stream)
	// while it ran.
	CostSerialized CostKind = "serialized"
	// CostOversubscribed: time more streams had GPU work at once than the
	// device has hardware queues for (work there may wait behind another
	// stream's).
	CostOversubscribed CostKind = "oversubscribed"
	// CostCorrectness: not priced in time: a possible wrong result.
	CostCorrectness CostKind = "correctness"
	// CostFailure: not priced in time: a call failed (out of memory).
	CostFailure CostKind = "failure"
)

// Cost is what a finding cost its process.
type Cost struct {
	Kind CostKind `json:"kind"`
	// Ns is the time; with AtMost, an upper bound of it (some GPU ops had
	// no measured times: CUPTI was not found or GPU times were off).
	Ns     uint64 `json:"ns"`
	AtMost bool   `json:"at_most"`
	// Share is Ns over RunNs, the process's traced time: its first call
	// to its last, less the time cudatap held its threads within.
	Share float64 `json:"share"`
	RunNs uint64  `json:"run_ns"`
}

// String says the cost in words: "1.2ms serialized (3.4% of 35.0ms
// traced), measured".
func (c Cost) String() string {
	switch c.Kind {
	case CostCorrectness:
		return "not priced in time: a possible wrong result"
	case CostFailure:
		return "not priced in time: a device allocation failed"
	}
	var b strings.Builder
	if c.Ns == 0 && !c.AtMost {
		b.WriteString("none")
		if c.RunNs > 0 {
			fmt.Fprintf(&b, " (of %s traced)", units.Duration(c.RunNs))
		}
		return b.String()
	}
	if c.AtMost {
		b.WriteString("at most ")
	}
	b.WriteString(units.Duration(c.Ns))
	switch c.Kind {
	case CostBlocked:
		b.WriteString(" blocked on the host")
	case CostSerialized:
		b.WriteString(" of GPU work serialized")
	case CostOversubscribed:
		b.WriteString(" with more busy streams than hardware queues")
	}
	if c.RunNs > 0 {
		fmt.Fprintf(&b, " (%s of %s traced)", percent(c.Share), units.Duration(c.RunNs))
	}
	if c.AtMost {
		b.WriteString(": a bound, GPU times not measured (CUPTI not found, or --gpu-times=off: cudatap doctor says which)")
	} else {
		b.WriteString(", measured")
	}
	return b.String()
}

// percent writes a share as a percentage: "0.25%", "1%", "42%".
func percent(f float64) string {
	switch p := 100 * f; {
	case p == 0:
		return "0%"
	case p < 0.01:
		return "<0.01%"
	case p < 10:
		return strconv.FormatFloat(math.Round(p*100)/100, 'f', -1, 64) + "%"
	default:
		return fmt.Sprintf("%.0f%%", p)
	}
}

// runNs is the time a finding of process p is priced against: its
// traced time less the time cudatap held its threads within (holds,
// their union), else the recording's.
func runNs(r *model.Result, p *model.Process, holds *holds) uint64 {
	if p.LastSeen > p.FirstSeen {
		w := p.LastSeen - p.FirstSeen
		if run := w - min(w, holds.within(p.FirstSeen, p.LastSeen)); run > 0 {
			return run
		}
	}
	if r.End > r.Start {
		return r.End - r.Start
	}
	return 0
}

// maxHolds bounds the holds kept per process (one per library hooked
// per thread, a few); past it a hold counts whole, wherever it was.
const maxHolds = 64

// holds are the times cudatap held a process's threads.
type holds struct {
	spans [][2]uint64
	over  uint64
}

func (h *holds) add(start, end uint64) {
	if end <= start {
		return
	}
	if len(h.spans) < maxHolds {
		h.spans = append(h.spans, [2]uint64{start, end})
	} else {
		h.over += end - start
	}
}

// within is the time held between from and to: the union of the holds
// clipped to it, and those past maxHolds.
func (h *holds) within(from, to uint64) uint64 {
	var u union
	s := slices.Clone(h.spans)
	slices.SortFunc(s, func(a, b [2]uint64) int { return cmp.Compare(a[0], b[0]) })
	for _, x := range s {
		u.add(max(x[0], from), min(x[1], to))
	}
	return u.total() + h.over
}

// price sets f's share of the run and its level.
func price(f *Finding, run uint64, noteBelow float64) {
	f.Cost.RunNs = run
	if run > 0 {
		f.Cost.Share = float64(f.Cost.Ns) / float64(run)
	}
	switch {
	case f.Cost.Kind == CostCorrectness:
		f.Level = LevelError
	case run > 0 && f.Cost.Share < noteBelow:
		f.Level = LevelNote
	default:
		f.Level = LevelWarning
	}
}

// union is the length of a union of intervals added in about the order
// of their starts. One that starts before the current interval is merged
// into it whole, which can only count some time twice: a bound built of
// it stays a bound.
type union struct{ start, end, closed uint64 }

func (u *union) add(start, end uint64) {
	if end <= start {
		return
	}
	if u.end == 0 || start > u.end {
		u.closed += u.end - u.start
		u.start, u.end = start, end
		return
	}
	u.start, u.end = min(u.start, start), max(u.end, end)
}

func (u *union) total() uint64 { return u.closed + u.end - u.start }

// maxPriced bounds the legacy-stream copies priced at once per process
// (each waits for its op's times and for its thread's next call).
const maxPriced = 1 << 14

// pricedCopy is a legacy-stream copy being priced: what the calls said
// (when it was enqueued, whether it waited for blocking streams' work,
// when the first op after it that had to wait behind it was enqueued),
// what its op said (its times), and the group it was booked in once its
// thread's next call showed it a non_blocking copy.
type pricedCopy struct {
	enq, waiter                 uint64
	start, end, proven, prevEnd uint64
	group                       int
	serialized, measured        bool
	booked, arrived             bool
}

// legacyPrices are one process's copies being priced.
type legacyPrices struct {
	copies map[int]*pricedCopy // by GPU op
	// Those no op has queued behind yet. Another such copy does not count:
	// it would queue behind them wherever they ran.
	unwaited []*pricedCopy
	end0     uint64 // end of the latest legacy-stream op handed over
	bound    union  // the bounds of the booked copies not measured
}

// enqueued notes a candidate copy (op id, enqueued at t).
func (lp *legacyPrices) enqueued(id int, t uint64, serialized bool, limits *Limits) {
	if lp.copies == nil {
		lp.copies = map[int]*pricedCopy{}
	}
	if len(lp.copies) >= maxPriced {
		limits.Unpriced++
		return
	}
	pc := &pricedCopy{enq: t, serialized: serialized, group: -1}
	lp.copies[id] = pc
	lp.unwaited = append(lp.unwaited, pc)
}

// queued notes an op enqueued at t on the legacy stream or a blocking
// stream, not a copy being priced: it waits behind the copies no op
// waited behind yet.
func (lp *legacyPrices) queued(t uint64) {
	for _, pc := range lp.unwaited {
		pc.waiter = t
	}
	clear(lp.unwaited)
	lp.unwaited = lp.unwaited[:0]
}

// op takes the times of a legacy-stream op.
func (lp *legacyPrices) op(op *model.GPUOp, g *groups) {
	prev := lp.end0
	lp.end0 = max(lp.end0, op.End)
	pc := lp.copies[op.ID]
	if pc == nil {
		return
	}
	pc.arrived, pc.measured, pc.prevEnd = true, op.Measured, prev
	pc.start, pc.end, pc.proven = op.Start, op.End, max(op.ProvenBy(), op.End)
	if pc.booked {
		lp.settle(op.ID, pc, g)
	}
}

// book puts copy id in group gi of the legacy lint (-1: it is not
// counted, no longer priced).
func (lp *legacyPrices) book(id, gi int, g *groups) {
	pc := lp.copies[id]
	if pc == nil {
		return
	}
	if gi < 0 {
		lp.drop(id)
		return
	}
	pc.booked, pc.group = true, gi
	if pc.arrived {
		lp.settle(id, pc, g)
	}
}

func (lp *legacyPrices) drop(id int) {
	if pc := lp.copies[id]; pc != nil {
		if i := slices.Index(lp.unwaited, pc); i >= 0 {
			lp.unwaited = slices.Delete(lp.unwaited, i, i+1)
		}
	}
	delete(lp.copies, id)
}

// settle adds a copy's cost to its group. Measured: the time it waited
// for blocking streams' work (when it did: its start past both its
// enqueue and the end of the legacy stream's op before it), and the time
// it ran while an op waited behind it. Not measured: the stretch from its
// enqueue (or the waiting op's) to its proof of completion holds both.
func (lp *legacyPrices) settle(id int, pc *pricedCopy, g *groups) {
	gr := &g.list[pc.group]
	if pc.measured {
		var ns uint64
		if pc.serialized {
			ns += sub(pc.start, max(pc.enq, pc.prevEnd))
		}
		if pc.waiter != 0 {
			ns += sub(pc.end, max(pc.start, pc.waiter))
		}
		gr.costNs += ns
	} else {
		from := uint64(0)
		switch {
		case pc.serialized:
			from = pc.enq
		case pc.waiter != 0:
			from = max(pc.enq, pc.waiter)
		}
		if from != 0 && pc.proven > from {
			gr.bound.add(from, pc.proven)
			lp.bound.add(from, pc.proven)
			gr.atMost = true
		}
	}
	lp.drop(id)
}

// sub is a-b, 0 when b >= a.
func sub(a, b uint64) uint64 {
	if a > b {
		return a - b
	}
	return 0
}
