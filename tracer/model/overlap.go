package model

import (
	"cmp"
	"slices"
)

// CommOverlap is, on the inferred GPU timeline, how long NCCL operations
// ran and how much of that was covered by kernels on other streams of the
// same process: the communication that overlapped compute. Both are
// inferred (see GPUOp), so this is an estimate bounded by the observed syncs.
func CommOverlap(p *Process) (commNs, overlappedNs uint64) { return p.CommNs, p.OverlapNs }

type span struct{ start, end uint64 }

// maxSpans bounds the compute and communication intervals kept for the
// overlap measure; past it the oldest half is settled and dropped.
const maxSpans = 1 << 13

// overlapTracker measures CommOverlap as ops become final. Ops become final
// out of time order across streams, so intervals are kept until the window
// is full; then those that ended before the newest ones began are settled
// (a late op reaching that far back is rare: the model's own window bounds
// how late an op can be).
type overlapTracker struct {
	compute, comm []span
	commNs, ovNs  uint64
}

func (t *overlapTracker) add(op *GPUOp) {
	if op.End <= op.Start {
		return
	}
	switch op.Kind {
	case OpCollective:
		t.comm = append(t.comm, span{op.Start, op.End})
	case OpKernel, OpGraph:
		// Kernels on the comm stream itself never overlap its collectives,
		// so no per-stream split is needed.
		t.compute = append(t.compute, span{op.Start, op.End})
	default:
		return
	}
	if len(t.compute)+len(t.comm) > maxSpans {
		t.settle(false)
	}
}

// settle measures the communication intervals; unless all, it keeps the
// newest half of both lists for ops still to come.
func (t *overlapTracker) settle(all bool) {
	merged := mergeSpans(t.compute)
	slices.SortFunc(t.comm, func(a, b span) int { return cmp.Compare(a.start, b.start) })
	keep := len(t.comm)
	cut := uint64(0)
	if !all && len(merged) > 0 {
		cut = merged[len(merged)/2].start
		keep, _ = slices.BinarySearchFunc(t.comm, cut, func(s span, c uint64) int { return cmp.Compare(s.end, c+1) })
	}
	for _, c := range t.comm[:keep] {
		t.commNs += c.end - c.start
		t.ovNs += overlapWith(merged, c)
	}
	t.comm = slices.Delete(t.comm, 0, keep)
	if all {
		t.compute = t.compute[:0]
		return
	}
	// Keep compute that can still meet a kept or later collective.
	t.compute = t.compute[:0]
	for _, m := range merged {
		if m.end > cut {
			t.compute = append(t.compute, m)
		}
	}
}

func (t *overlapTracker) finish() (commNs, overlappedNs uint64) {
	t.settle(true)
	return t.commNs, t.ovNs
}

func mergeSpans(in []span) []span {
	slices.SortFunc(in, func(a, b span) int { return cmp.Compare(a.start, b.start) })
	var merged []span
	for _, c := range in {
		if n := len(merged); n > 0 && c.start <= merged[n-1].end {
			merged[n-1].end = max(merged[n-1].end, c.end)
			continue
		}
		merged = append(merged, c)
	}
	return merged
}

func overlapWith(merged []span, c span) (ns uint64) {
	i, _ := slices.BinarySearchFunc(merged, c.start, func(m span, t uint64) int {
		if m.end <= t {
			return -1
		}
		return 1
	})
	for ; i < len(merged) && merged[i].start < c.end; i++ {
		lo, hi := max(merged[i].start, c.start), min(merged[i].end, c.end)
		if hi > lo {
			ns += hi - lo
		}
	}
	return ns
}
