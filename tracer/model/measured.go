package model

import (
	"cmp"
	"slices"
)

// Measured GPU times. Where CUPTI runs in a process (cudatap's collector,
// --gpu-times), every GPU op it executed comes back as a Measurement some
// hundreds of milliseconds after the fact: its real start and end, and the
// thread and interval of the API call that enqueued it. The model joins it
// to the op that call enqueued (a call on one thread contains its CUPTI API
// record: the uprobe fires before CUPTI's wrapper starts its clock and
// returns after it stops it) and draws the op where the GPU ran it.
//
// Ops are final when a synchronization proves them complete, long before
// their measurement arrives; in a measured process the model holds final
// ops until their measurement arrives or the collector's last word says
// none will (it stopped, or let CUPTI go to another client), then hands
// them to the sink. CUPTI keeps records in a buffer until it fills, for as
// long as that takes: no time limit would be right, so none is set. Held
// ops live in the model's window of pending ops, so memory stays bounded:
// when the window is full the oldest goes out unmeasured, counted
// (Drops.GPUTimesUnmeasured). Host functions are never held: CUPTI does
// not time them.

// Measurement is one GPU operation as CUPTI timed it.
type Measurement struct {
	TID              uint32 // thread of the enqueuing API call (host pid namespace)
	APIStart, APIEnd uint64 // CUPTI's interval of that call
	Start, End       uint64 // on the GPU
	Kind             OpKind // OpKernel, OpMemcpy or OpMemset
	Device           int8
	Bytes            uint64
	Name             string // a kernel's mangled name, as CUPTI gives it ("" unknown)
	GraphNode        uint64 // CUPTI's id of the graph node that ran it; 0: not run by a graph launch
	Correlation      uint32 // CUPTI's correlation id: a diagnosis only, not recorded
}

// ProvenBy is the latest the op can have ended: the return of the call
// that proved it complete (the end of the recording when none did).
func (op *GPUOp) ProvenBy() uint64 { return op.provenAt }

// tidOps are the ops a thread enqueued that may still be measured, in
// enqueue order (a thread's calls are sequential: Enqueued grows), and
// when the last op trimmed from the front (gone to the sink) was enqueued.
type tidOps struct {
	ids           []int
	trimmed       uint64
	trimmedShared bool // that op was one of several one call enqueued
}

// StartMeasuring says that pid's GPU ops will be measured: from now on its
// final ops wait for their measurement.
func (m *Model) StartMeasuring(pid uint32) { m.StartMeasuringSince(pid, 0) }

// StartMeasuringSince says that pid's GPU ops enqueued from since on are
// measured (the collector had CUPTI from then): its final ones wait for
// their measurement. It also resumes measuring after a hand-over.
func (m *Model) StartMeasuringSince(pid uint32, since uint64) {
	ps := m.proc(pid)
	if ps.measuring && ps.collectorDone {
		// Taken back before every measurement of the time before found
		// its call: those that still wait, as well as they can.
		m.joinEarly(ps)
		m.endMeasuring(ps)
	}
	if ps.measuring {
		return
	}
	ps.measuring, ps.measuredSince = true, since
	ps.p.Measured = true
	if n := len(ps.p.CUPTIAway); n > 0 && ps.p.CUPTIAway[n-1].End == 0 {
		ps.p.CUPTIAway[n-1].End = max(since, ps.p.CUPTIAway[n-1].Start)
	}
	if ps.p.MeasuredNames == nil {
		ps.p.MeasuredNames = map[uint64]string{}
	}
	ps.threadSeen, ps.early = map[uint32]uint64{}, map[uint32][]Measurement{}
	// Ops enqueued since then but before the collector's word reached
	// the model (it races the events) and not yet drawn can still be
	// measured.
	ps.byTID = map[uint32]*tidOps{}
	for id := ps.oldest; id < ps.nextOp; id++ {
		if op := ps.op(id); op != nil && !op.released && op.Enqueued >= since {
			l := ps.byTID[op.TID]
			if l == nil {
				l = &tidOps{}
				ps.byTID[op.TID] = l
			}
			l.ids = append(l.ids, id)
		}
	}
}

// measurable says whether op waits for its measurement: enqueued while
// the process is measured, of a kind CUPTI times, and not one of several
// ops one call enqueued (an NCCL group's: their GPU records, which NCCL
// may fuse into one kernel, cannot be told apart).
func (ps *procState) measurable(op *GPUOp) bool {
	return ps.measuring && op.Enqueued >= ps.measuredSince && op.Kind != OpHostFunc && !ps.shared[op.ID]
}

// maxCUPTIAway bounds the hand-overs a process keeps; past it the last
// one stands for the rest.
const maxCUPTIAway = 1024

// HandedOver says that pid's collector let CUPTI go to another client of
// the process at t, after every record of the ops before: nothing more is
// measured until StartMeasuringSince.
func (m *Model) HandedOver(pid uint32, t uint64) {
	ps, ok := m.procs[pid]
	if !ok || !ps.measuring || ps.collectorDone {
		return
	}
	if n := len(ps.p.CUPTIAway); n < maxCUPTIAway {
		ps.p.CUPTIAway = append(ps.p.CUPTIAway, Interval{Start: t})
	} else {
		ps.p.CUPTIAway[n-1].End = 0
	}
	m.StopMeasuring(pid)
}

// AddGPUTimesLost counts measurements lost before they reached the model.
func (m *Model) AddGPUTimesLost(n uint64) { m.drops.GPUTimesLost += n }

// SetGPUTimesLost sets that count (a replay, from the recorded total).
func (m *Model) SetGPUTimesLost(n uint64) { m.drops.GPUTimesLost = n }

// NotMeasured says pid's GPU ops are not measured after all (its
// collector could not start): those held for a measurement go out as laid
// out, uncounted, and the process is not marked measured.
func (m *Model) NotMeasured(pid uint32) {
	ps, ok := m.procs[pid]
	if !ok {
		return
	}
	ps.p.Measured = false
	if ps.measuring {
		m.endMeasuring(ps)
	}
}

// StopMeasuring says no more measurements will come for pid. Those that
// overtook the events of their calls still wait for them; once none does,
// held ops go to the sink as laid out and new ones are no longer held.
func (m *Model) StopMeasuring(pid uint32) {
	ps, ok := m.procs[pid]
	if !ok || !ps.measuring {
		return
	}
	ps.collectorDone = true
	if ps.nEarly == 0 {
		m.endMeasuring(ps)
	}
}

func (m *Model) endMeasuring(ps *procState) {
	m.joinEarly(ps)
	m.releaseHeld(ps, ^uint64(0), false)
	ps.measuring, ps.collectorDone = false, false
	ps.byTID = map[uint32]*tidOps{}
	m.dropAllParked(ps)
	clear(ps.shared)
}

// maxMeasuredNames bounds the kernel names CUPTI gives per process.
const maxMeasuredNames = 1 << 16

// maxEarly bounds the measurements a process keeps waiting for the events
// of their calls; past it they are counted unmatched.
const maxEarly = 1 << 16

// Measure joins a measurement to the op it times. A measurement can
// overtake the event of its own call (the collector flushes while the ring
// buffer has a backlog): it waits until the model has seen its thread past
// the call. Measurements matching no op (its call was not traced, or
// enqueued several: ambiguous) and those arriving after their op went to
// the sink are counted, never guessed.
func (m *Model) Measure(pid uint32, r *Measurement) {
	ps, ok := m.procs[pid]
	if !ok || ps.byTID == nil {
		m.drops.GPUTimesUnmatched++
		m.missed(pid, "not measuring", r, nil)
		return
	}
	if ps.threadSeen[r.TID] < r.APIEnd && !ps.collectorDone {
		if ps.nEarly >= maxEarly {
			m.drops.GPUTimesUnmatched++
			m.missed(pid, "too many early", r, nil)
			return
		}
		ps.early[r.TID] = append(ps.early[r.TID], *r)
		ps.nEarly++
		return
	}
	m.join(ps, r)
}

// seen notes that the model has seen thread tid up to t: measurements
// waiting for it are joined now.
func (m *Model) seen(ps *procState, tid uint32, t uint64) {
	if t <= ps.threadSeen[tid] {
		return
	}
	ps.threadSeen[tid] = t
	waiting := ps.early[tid]
	n := 0
	for n < len(waiting) && waiting[n].APIEnd <= t {
		m.join(ps, &waiting[n])
		n++
	}
	if n > 0 {
		ps.nEarly -= n
		if n == len(waiting) {
			delete(ps.early, tid)
		} else {
			ps.early[tid] = waiting[:copy(waiting, waiting[n:])]
		}
		if ps.nEarly == 0 && ps.collectorDone {
			m.endMeasuring(ps)
		}
	}
}

// joinEarly joins what still waits, as well as can be (the end).
func (m *Model) joinEarly(ps *procState) {
	for tid, waiting := range ps.early {
		for i := range waiting {
			m.join(ps, &waiting[i])
		}
		delete(ps.early, tid)
	}
	ps.nEarly = 0
}

func (m *Model) join(ps *procState, r *Measurement) {
	op, late := ps.enqueuedBy(r.TID, r.APIStart, r.APIEnd)
	if op != nil && op.InGraph() {
		// One of the ops a graph launch ran: its node says which
		// (graphs.go).
		var wait bool
		if op, wait = m.nodeOp(ps, op, r); wait {
			return
		}
	}
	m.apply(ps, op, r, late)
}

// apply draws op where measurement r says it ran (op nil: r matched no
// op; late: its op went to the sink already).
func (m *Model) apply(ps *procState, op *GPUOp, r *Measurement, late bool) {
	if late || (op != nil && op.released) {
		m.drops.GPUTimesLate++
		m.missed(ps.p.PID, "late", r, op)
		return
	}
	if op == nil {
		m.drops.GPUTimesUnmatched++
		m.missed(ps.p.PID, "unmatched", r, nil)
		return
	}
	if op.Measured {
		if op.Kind != OpGraph {
			m.missed(ps.p.PID, "second measurement", r, op) // not a graph: one of the two is not this op's
		}
		// A graph launch runs many kernels under one correlation: the op
		// spans them all.
		op.Start, op.End = min(op.Start, r.Start), max(op.End, r.End)
	} else {
		op.Measured = true
		op.Start, op.End = r.Start, r.End
		ps.p.Streams[op.Stream].Stats.Measured++
	}
	ps.st[op.Stream].measured.add(r.Start, r.End)
	if r.Device >= 0 && r.Device != op.Device {
		// CUPTI knows the device the op ran on: it overrides what the
		// calling thread's current device suggested (a context made
		// current through the driver API, a process attached late).
		op.Device = r.Device
		ps.p.Devices |= deviceBit(op.Device)
		ps.p.Streams[op.Stream].Devices |= deviceBit(op.Device)
	}
	if r.Name != "" && op.Kind == OpKernel {
		if _, ok := ps.p.MeasuredNames[op.Func]; !ok && len(ps.p.MeasuredNames) < maxMeasuredNames {
			ps.p.MeasuredNames[op.Func] = r.Name
		}
	}
	if op.final && op.Kind != OpGraph {
		m.release(ps, op)
	}
}

// missed tells OnMeasureMiss, if set.
func (m *Model) missed(pid uint32, why string, r *Measurement, op *GPUOp) {
	if m.OnMeasureMiss != nil {
		m.OnMeasureMiss(pid, why, r, op)
	}
}

// MeasureSlack is how long after a graph launch was proven complete more
// of its kernels' records may still come: CUPTI hands over full activity
// buffers, so a record waits for its buffer to fill (the collector keeps
// them small).
const MeasureSlack = 1_000_000_000 // ns

// MeasuredUntil is the collector's mark: it flushed CUPTI's full buffers
// at t. Held graph launches measured already and proven complete
// MeasureSlack before it go out; an op still unmeasured waits for its
// record, or for the collector's last word.
func (m *Model) MeasuredUntil(pid uint32, t uint64) {
	ps, ok := m.procs[pid]
	if !ok || !ps.measuring || t < MeasureSlack {
		return
	}
	m.releaseHeld(ps, t-MeasureSlack, true)
}

// releaseHeld hands held ops proven complete before t to the sink (only
// the measured ones: measuredOnly).
func (m *Model) releaseHeld(ps *procState, t uint64, measuredOnly bool) {
	n := 0
	for _, id := range ps.held {
		op := ps.op(id)
		if op == nil || op.released {
			continue
		}
		if op.provenAt >= t || (measuredOnly && !op.Measured) {
			ps.held[n] = id
			n++
			continue
		}
		m.release(ps, op)
	}
	ps.held = ps.held[:n]
}

// enqueuedBy finds the op that thread tid's call overlapping CUPTI's API
// interval [start, end] enqueued: the thread's last op enqueued by end, if
// its call had not returned before start. The traced call usually contains
// CUPTI's interval; a call CUPTI sees from outside (cuBLASLt's static
// runtime around the driver call cudatap probes) contains the traced one.
// late says that op went to the sink already.
func (ps *procState) enqueuedBy(tid uint32, start, end uint64) (op *GPUOp, late bool) {
	l := ps.byTID[tid]
	if l == nil {
		return nil, false
	}
	l.trim(ps)
	ids := l.ids
	i, _ := slices.BinarySearchFunc(ids, end, func(id int, t uint64) int {
		op := ps.op(id)
		if op == nil || op.Enqueued <= t {
			return -1
		}
		return 1
	})
	if i == 0 {
		// Its op went to the sink; unless it was one of several one
		// call enqueued: then it is ambiguous, not late.
		return nil, l.trimmed != 0 && l.trimmed <= end && !l.trimmedShared
	}
	op = ps.op(ids[i-1])
	if op == nil || ps.shared[op.ID] || (op.enqEnd > op.Enqueued && op.enqEnd < start) {
		return nil, false // a call that enqueued nothing traced, or several ops: ambiguous
	}
	return op, false
}

// trim drops the ops at the front that went to the sink.
func (l *tidOps) trim(ps *procState) {
	n := 0
	for _, id := range l.ids {
		op := ps.op(id)
		if op != nil && !op.released {
			break
		}
		if op != nil {
			l.trimmed, l.trimmedShared = op.Enqueued, ps.shared[op.ID]
			delete(ps.shared, op.ID)
		}
		n++
	}
	if n > 0 {
		l.ids = l.ids[:copy(l.ids, l.ids[n:])]
	}
}

// spanUnion accumulates the length of the union of intervals that arrive
// nearly in start order: a stream's measurements come in completion order
// per thread, interleaved across the threads that share the stream. The
// newest intervals are kept, and the older half settled (merged and
// counted) when they exceed maxOpenSpans; an interval reaching back before
// the settled part counts only where it extends past it.
type spanUnion struct {
	open    []span
	settled uint64 // end of the settled part
	closed  uint64 // length of the settled part's union
}

const maxOpenSpans = 256

func (u *spanUnion) add(start, end uint64) {
	if end <= start {
		return
	}
	u.open = append(u.open, span{start, end})
	if len(u.open) > maxOpenSpans {
		u.settle(len(u.open) / 2)
	}
}

// settle merges the open intervals, counts the first n of them (in start
// order) and keeps the rest open.
func (u *spanUnion) settle(n int) {
	slices.SortFunc(u.open, func(a, b span) int { return cmp.Compare(a.start, b.start) })
	for _, sp := range u.open[:n] {
		sp.start = max(sp.start, u.settled)
		if sp.end > sp.start {
			u.closed += sp.end - sp.start
			u.settled = sp.end
		}
	}
	u.open = u.open[:copy(u.open, u.open[n:])]
}

func (u *spanUnion) total() uint64 {
	u.settle(len(u.open))
	return u.closed
}
