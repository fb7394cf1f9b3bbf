package model

import (
	"slices"

	"github.com/cudatap/cudatap/tracer/event"
)

// Synchronizations: the calls that make the host wait for the GPU, and
// what each proves complete, which bounds when the work ran (syncs_test.go).

// cudaErrorNotReady: a query found work still pending.
const errNotReady = 600

// A synchronization shorter than this did not really wait for the GPU: the
// work it covers finished before the call began. (Two uprobe traps alone cost
// tens of µs on a VM.)
const blockedThreshold = 50_000 // ns

type pollKey struct {
	tid    uint32
	target uint64
	event  bool
}

type pollState struct {
	start uint64
	n     int
}

// syncStream follows cudaStreamSynchronize: the host waited for all the
// stream's work (the legacy default stream's waits for the blocking
// streams' too).
func (m *Model) syncStream(ps *procState, _ *event.Spec, _ *event.Event) {
	call := &m.call
	sid := int(call.Stream)
	queued := m.queued(ps, sid)
	m.addSync(ps, SyncStream, sid, queued)
	m.boundStream(ps, sid, -1, boundTime(call))
	if sid == 0 {
		m.boundBlocking(ps, boundTime(call))
	}
}

// syncDevice follows cudaDeviceSynchronize: the host waited for all the
// process's work.
func (m *Model) syncDevice(ps *procState, _ *event.Spec, _ *event.Event) {
	call := &m.call
	m.addSync(ps, SyncDevice, -1, m.queuedAll(ps))
	m.boundAll(ps, boundTime(call))
}

// syncEvent follows cudaEventSynchronize: the host waited for the work
// the event was recorded after.
func (m *Model) syncEvent(ps *procState, _ *event.Spec, _ *event.Event) {
	call := &m.call
	e := call.Args.Event
	pos, found := ps.events[e]
	if !found {
		m.addSync(ps, SyncEvent, -1, 0)
		return
	}
	call.Stream = int32(pos.stream)
	queued := 0
	for _, op := range ps.st[pos.stream].pending() {
		if op <= pos.op {
			queued++
		}
	}
	m.addSync(ps, SyncEvent, pos.stream, queued)
	m.sink.Dependency(ps.p, &Dependency{Event: e, RecordCall: pos.call, WaitCall: call.Seq, FromStream: pos.stream, ToStream: -1})
	if pos.op >= 0 {
		m.boundStream(ps, pos.stream, pos.op, boundTime(call))
	}
}

// query tracks cudaStreamQuery/cudaEventQuery: a run of "not ready" answers
// ending in "ready" is a busy-poll loop, one synchronization.
func (m *Model) query(ps *procState, spec *event.Spec, _ *event.Event) {
	call := &m.call
	isEvent := spec.Class == event.ClassEventQuery
	target := call.Args.Stream
	if isEvent {
		target = call.Args.Event
	}
	key := pollKey{tid: call.TID, target: target, event: isEvent}
	st := ps.polls[key]
	if call.HasRet && call.Ret == errNotReady {
		if st.n == 0 {
			if len(ps.polls) >= maxPolls {
				m.drops.Limits.Polls++
				return
			}
			st.start = call.Start
		}
		st.n++
		ps.polls[key] = st
		return
	}
	delete(ps.polls, key)
	sid := int(call.Stream)
	upto := -1
	if isEvent {
		pos, found := ps.events[call.Args.Event]
		if !found {
			return
		}
		sid, upto = pos.stream, pos.op
		call.Stream = int32(sid)
	}
	if st.n >= 2 {
		s := m.addSync(ps, SyncQueryPoll, sid, m.queued(ps, sid))
		s.Start, s.BlockedNs, s.Polls = st.start, call.End-st.start, st.n+1
		call.BlockedNs = s.BlockedNs
		ps.p.Streams[sid].Stats.SyncBlockedNs += s.BlockedNs - call.Duration()
	}
	// "Ready" at time T bounds the work it covers.
	if call.HasRet && call.Ret == 0 && (!isEvent || upto >= 0) {
		m.boundStream(ps, sid, upto, call.End)
	}
}

func (m *Model) queued(ps *procState, sid int) int {
	if sid < 0 {
		return m.queuedAll(ps)
	}
	return len(ps.st[sid].pending())
}

func (m *Model) queuedAll(ps *procState) int {
	n := 0
	for _, st := range ps.st {
		n += len(st.pending())
	}
	return n
}

// addSync records a synchronization caused by the current call.
func (m *Model) addSync(ps *procState, kind SyncKind, sid int, queued int) *Sync {
	p := ps.p
	call := &m.call
	blocked := call.Duration()
	if kind == SyncLegacyStream {
		blocked = 0 // serializes GPU work; the host does not wait
	}
	m.syncs = append(m.syncs, Sync{Kind: kind, Call: call.Seq, TID: call.TID, Stream: sid, Start: call.Start,
		BlockedNs: blocked, QueuedOps: queued, API: call.API, Symbol: call.Symbol, Stack: call.Stack, PyStack: call.PyStack})
	call.Sync, call.BlockedNs = kind, blocked
	s := sid
	if s < 0 {
		s = 0 // device-wide waits are booked on the legacy stream
	}
	p.Streams[s].Stats.Syncs++
	p.Streams[s].Stats.SyncBlockedNs += blocked
	return &m.syncs[len(m.syncs)-1]
}

func (m *Model) boundAll(ps *procState, t uint64) {
	for sid := range ps.st {
		m.boundStream(ps, sid, -1, t)
	}
}

// boundBlocking bounds every blocking stream: a sync on the legacy default
// stream waits for all of them.
func (m *Model) boundBlocking(ps *procState, t uint64) {
	for sid := 1; sid < len(ps.st); sid++ {
		if ps.p.Streams[sid].Blocking() {
			m.boundStream(ps, sid, -1, t)
		}
	}
}

// boundStream lays out the pending ops of a stream up to op upto (all when
// -1), knowing they completed by t. Without kernel timings the busy interval
// is split evenly between them, never starting an op before its enqueue nor
// before the op it waits for (cudaStreamWaitEvent) ended; that op completed
// by t too, so it is bounded first.
func (m *Model) boundStream(ps *procState, sid int, upto int, t uint64) {
	st := ps.st[sid]
	pend := st.pending()
	n := len(pend)
	if upto >= 0 {
		n, _ = slices.BinarySearch(pend, upto+1)
	}
	// Not past a collective of an NCCL group still open: not enqueued yet.
	if len(ps.deferred) > 0 {
		for i, id := range pend[:n] {
			if ps.deferred[id] {
				n = i
				break
			}
		}
	}
	if n == 0 {
		return
	}
	begin := max(st.gpuClock, ps.op(pend[0]).Enqueued)
	if t < begin {
		t = begin
	}
	prev := st.gpuClock
	for k := range n {
		op := ps.op(st.pending()[0])
		// Proven complete when the call being handled returned, at the
		// latest (t, where the layout ends it, may be its start).
		op.provenAt = max(t, m.call.End)
		op.Bounded = true
		st.busy.op(op.Enqueued, op.provenAt)
		if op.Measured {
			// CUPTI's times arrived before the sync: they stand.
			prev = max(prev, op.End)
			st.gpuClock = prev
			st.pop(1)
			m.final(ps, op)
			continue
		}
		op.Start = max(prev, op.Enqueued)
		m.waitFor(ps, op, t)
		share := begin + mulDiv(t-begin, uint64(k+1), uint64(n))
		op.End = max(op.Start, share)
		prev = op.End
		st.gpuClock = prev
		st.pop(1)
		m.final(ps, op)
	}
}

// waitFor starts op no earlier than the end of the op it waits for, which
// completed by t as well and is laid out first.
func (m *Model) waitFor(ps *procState, op *GPUOp, t uint64) {
	if op.After < 0 {
		return
	}
	dep := ps.op(op.After)
	if dep == nil {
		return // left the window long ago: it ended before op was enqueued
	}
	if !dep.final {
		m.boundStream(ps, dep.Stream, dep.ID, t)
	}
	op.Start = max(op.Start, dep.End)
	op.AfterStart, op.AfterStream, op.AfterDevice = dep.Start, int32(dep.Stream), dep.Device
}

// boundTime is when the work a sync waited for was known to be complete: its
// return if it really blocked, else its start.
func boundTime(c *Call) uint64 {
	if c.Duration() >= blockedThreshold {
		return c.End
	}
	return c.Start
}
