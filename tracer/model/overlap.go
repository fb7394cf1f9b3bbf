package model

import (
	"cmp"
	"slices"
)

// CommOverlap measures, on the inferred GPU timeline, how much of the time
// NCCL operations ran was covered by kernels on other streams of the same
// process: the communication that overlapped compute. Both are inferred
// (see GPUOp), so this is an estimate bounded by the observed syncs.
func CommOverlap(p *Process) (commNs, overlappedNs uint64) {
	type span struct{ start, end uint64 }
	var comm []struct {
		span
		stream int
	}
	var compute []span
	for i := range p.GPUOps {
		op := &p.GPUOps[i]
		if op.End <= op.Start {
			continue
		}
		switch op.Kind {
		case OpCollective:
			comm = append(comm, struct {
				span
				stream int
			}{span{op.Start, op.End}, op.Stream})
		case OpKernel, OpGraph:
			compute = append(compute, span{op.Start, op.End})
		}
	}
	if len(comm) == 0 {
		return 0, 0
	}
	// Merge compute into disjoint intervals. Kernels on the comm stream
	// itself never overlap its collectives, so no per-stream split is needed.
	slices.SortFunc(compute, func(a, b span) int { return cmp.Compare(a.start, b.start) })
	var merged []span
	for _, c := range compute {
		if n := len(merged); n > 0 && c.start <= merged[n-1].end {
			merged[n-1].end = max(merged[n-1].end, c.end)
			continue
		}
		merged = append(merged, c)
	}
	for _, c := range comm {
		commNs += c.end - c.start
		i, _ := slices.BinarySearchFunc(merged, c.start, func(m span, t uint64) int {
			if m.end <= t {
				return -1
			}
			return 1
		})
		for ; i < len(merged) && merged[i].start < c.end; i++ {
			lo, hi := max(merged[i].start, c.start), min(merged[i].end, c.end)
			if hi > lo {
				overlappedNs += hi - lo
			}
		}
	}
	return commNs, overlappedNs
}
