package flight

import "slices"

// maxPending bounds the GPU ops followed per process (the model's own
// window of pending ops is larger: past the bound, ops are not followed
// and their calls are not restated).
const maxPending = 1 << 15

// pendingOps follows a process's GPU work the model has not seen complete
// yet. The model numbers a process's ops in enqueue order, and most
// complete in that order: by op id from base, the sequence number of the
// call that enqueued it (0: complete, or not followed), the complete ones
// at the front let go.
type pendingOps struct {
	base int
	seqs []uint64
	// early: ops released before their call's record came (a synchronous
	// copy is proven complete by its own call); cleared at each record.
	early []int
}

// add follows op, enqueued by the call of record seq; false when it is
// not followed (complete already, past the bound).
func (q *pendingOps) add(op int, seq uint64) bool {
	i := op - q.base
	if i < 0 || i >= maxPending || slices.Contains(q.early, op) {
		return false
	}
	for len(q.seqs) <= i {
		q.seqs = append(q.seqs, 0)
	}
	q.seqs[i] = seq
	return true
}

// done says op is complete; the sequence number of its call, if followed.
func (q *pendingOps) done(op int) (uint64, bool) {
	i := op - q.base
	switch {
	case i < 0:
		return 0, false
	case i >= len(q.seqs):
		if len(q.early) < 64 {
			q.early = append(q.early, op)
		}
		return 0, false
	}
	seq := q.seqs[i]
	q.seqs[i] = 0
	n := 0
	for n < len(q.seqs) && q.seqs[n] == 0 {
		n++
	}
	q.seqs, q.base = q.seqs[n:], q.base+n
	return seq, seq != 0
}

// still reports whether op, enqueued by the call of record seq, is
// pending.
func (q *pendingOps) still(op int, seq uint64) bool {
	i := op - q.base
	return i >= 0 && i < len(q.seqs) && q.seqs[i] == seq
}
