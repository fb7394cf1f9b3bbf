package model

import "github.com/cudatap/cudatap/tracer/event"

// NCCL: communicators, collectives and the groups that defer them
// (driver_test.go).

// commInit follows the making of a communicator: the process's place in
// its job is its widest communicator (DDP's world, not a sub-group made
// later).
func (m *Model) commInit(ps *procState, _ *event.Spec, _ *event.Event) {
	p, call := ps.p, &m.call
	a := &call.Args
	if call.HasRet && call.Ret == 0 && a.Size > 0 && int64(a.Size) > int64(p.WorldSize) && a.Peer >= 0 {
		p.Rank, p.WorldSize = a.Peer, int32(a.Size)
	}
}

// collective follows a collective or point-to-point call: one op on its
// stream, deferred to the end of the thread's NCCL group if one is open.
func (m *Model) collective(ps *procState, _ *event.Spec, _ *event.Event) {
	call := &m.call
	st := &ps.p.Streams[call.Stream].Stats
	st.Collectives++
	st.CommBytes += call.Args.Bytes
	id := m.enqueue(ps, GPUOp{Kind: OpCollective, Bytes: call.Args.Bytes})
	if g := ps.groups[call.TID]; g != nil && id >= 0 && len(ps.deferred) < maxGroupOps {
		ps.deferred[id] = true
		g.ops = append(g.ops, id)
	}
}

// ncclGroup is one thread's open NCCL group.
type ncclGroup struct {
	depth int
	ops   []int // collectives called inside, deferred until the end
}

// maxGroupOps bounds the collectives deferred in a process's open groups:
// beyond, they count as enqueued at their call (a "ready" answer before the group's end
// may then prove them complete early).
const maxGroupOps = 4096

// group follows ncclGroupStart/ncclGroupEnd: at the outermost end, the
// collectives called inside are enqueued (NCCL launches them then).
func (m *Model) group(ps *procState, _ *event.Spec, _ *event.Event) {
	call := &m.call
	g := ps.groups[call.TID]
	if call.API == event.NcclGroupStart {
		if g == nil {
			g = &ncclGroup{}
			ps.groups[call.TID] = g
		}
		g.depth++
		return
	}
	if g == nil {
		return
	}
	if g.depth--; g.depth > 0 {
		return
	}
	delete(ps.groups, call.TID)
	for _, id := range g.ops {
		delete(ps.deferred, id)
		if op := ps.op(id); op.ID == id && !op.final {
			op.Enqueued = max(op.Enqueued, call.Start)
			if len(g.ops) > 1 && ps.measuring && len(ps.shared) < maxGroupOps {
				ps.shared[id] = true
			}
		}
	}
}
