package model

import (
	"cmp"
	"slices"

	"github.com/cudatap/cudatap/tracer/event"
)

// Measured GPU times. Where CUPTI runs in a process (cudatap's collector,
// --gpu-times), every GPU op it executed comes back as a Measurement some
// hundreds of milliseconds after the fact: its real start and end, and the
// thread and interval of the API call that enqueued it. The model joins it
// to the op that call enqueued (a call on one thread contains its CUPTI API
// record: the uprobe fires before CUPTI's wrapper starts its clock and
// returns after it stops it) and draws the op where the GPU ran it.
//
// A record measures only an op it fits: of its kind (a memset record never
// times a kernel), of its size (copies and memsets), on the stream CUPTI
// ran it on (learnt from the records joined before), not measured already.
// A record whose call enqueued no op cudatap traced is an op CUPTI alone
// saw — on the H200, the memsets cuBLASLt's statically linked runtime
// makes through driver calls cudatap does not hook where a runtime is
// present (the probe policy, tracer/targets): it becomes a measured op of
// its own (GPUOp.CUPTIOnly) on the stream CUPTI named, so that each
// stream's ops and busy time are the profiler's; until the model knows
// which stream that is, it waits (bounded), and is counted unmatched if it
// never learns.
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
	// CUPTIStream is CUPTI's id of the stream it ran on, plus one: 0 says
	// unknown (a recording made before cudatap kept it).
	CUPTIStream uint32
	CopyKind    event.MemcpyKind // a copy's direction, as CUPTI gives it
	Correlation uint32           // CUPTI's correlation id: a diagnosis only, not recorded
}

// cuptiStream names one of CUPTI's streams: its ids are per device.
type cuptiStream struct {
	device int8
	id     uint32
}

// ProvenBy is the latest the op can have ended: the return of the call
// that proved it complete (the end of the recording when none did).
func (op *GPUOp) ProvenBy() uint64 { return op.provenAt }

// tidOps are the ops a thread enqueued that may still be measured, in
// enqueue order (a thread's calls are sequential: Enqueued grows), and the
// last of those trimmed from the front (gone to the sink), oldest first: a
// record that comes after its call's op went out finds what it was.
type tidOps struct {
	ids  queue[int]
	gone []goneOp // at most maxGone
}

// queue is a FIFO whose pops cost nothing per item: the front moves, and
// the live part moves down once the dead front is as long (a thread's ops
// and early measurements run to tens of thousands; shifting them down at
// each pop cost the model most of its time on the launch-bound loop).
type queue[T any] struct {
	s    []T
	head int
}

func (q *queue[T]) push(v T)   { q.s = append(q.s, v) }
func (q *queue[T]) items() []T { return q.s[q.head:] }
func (q *queue[T]) len() int   { return len(q.s) - q.head }
func (q *queue[T]) pop(n int) {
	q.head += n
	switch {
	case q.head >= len(q.s):
		clear(q.s)
		q.s, q.head = q.s[:0], 0
	case q.head >= len(q.s)-q.head:
		live := copy(q.s, q.s[q.head:])
		clear(q.s[live:])
		q.s, q.head = q.s[:live], 0
	}
}

// goneOp is what the join needs of an op gone to the sink.
type goneOp struct {
	enqueued, enqEnd uint64
	shared           bool // one of several ops one call enqueued
	measured         bool // it had its measurement
}

const maxGone = 32

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
	ps.threadSeen, ps.early = map[uint32]uint64{}, map[uint32]*queue[Measurement]{}
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
			l.ids.push(id)
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
	// CUPTI's stream ids and correlation ids may start over once it is
	// taken back: nothing learnt carries over.
	m.dropCUPTIParked(ps)
	clear(ps.cuptiStreams)
}

// dropCUPTIParked counts unmatched the records of ops CUPTI alone saw
// whose stream the model never learnt.
func (m *Model) dropCUPTIParked(ps *procState) {
	for i := range ps.cuptiParked {
		m.drops.GPUTimesUnmatched++
		m.missed(ps.p.PID, "CUPTI only, stream unknown", &ps.cuptiParked[i], nil)
	}
	ps.cuptiParked = nil
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
		q := ps.early[r.TID]
		if q == nil {
			q = &queue[Measurement]{}
			ps.early[r.TID] = q
		}
		q.push(*r)
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
	q := ps.early[tid]
	if q == nil {
		return
	}
	waiting := q.items()
	n := 0
	for n < len(waiting) && waiting[n].APIEnd <= t {
		m.join(ps, &waiting[n])
		n++
	}
	if n > 0 {
		ps.nEarly -= n
		if q.pop(n); q.len() == 0 {
			delete(ps.early, tid)
		}
		if ps.nEarly == 0 && ps.collectorDone {
			m.endMeasuring(ps)
		}
	}
}

// joinEarly joins what still waits, as well as can be (the end).
func (m *Model) joinEarly(ps *procState) {
	for tid, q := range ps.early {
		waiting := q.items()
		for i := range waiting {
			m.join(ps, &waiting[i])
		}
		delete(ps.early, tid)
	}
	ps.nEarly = 0
}

func (m *Model) join(ps *procState, r *Measurement) {
	op, v := ps.enqueuedBy(r.TID, r.APIStart, r.APIEnd)
	if v == joined && op.InGraph() {
		if r.GraphNode == 0 {
			v = noTracedOp // not a graph's record: its call is another
		} else {
			// One of the ops a graph launch ran: its node says which
			// (graphs.go).
			var wait bool
			if op, wait = m.nodeOp(ps, op, r); wait {
				return
			}
			m.apply(ps, op, r, false)
			return
		}
	}
	if v == joined {
		v = ps.fit(op, r)
	}
	switch v {
	case joined:
		m.apply(ps, op, r, false)
	case wentOut:
		m.apply(ps, op, r, true)
	case noTracedOp:
		m.cuptiOnly(ps, r)
	default:
		m.drops.GPUTimesUnmatched++
		m.missed(ps.p.PID, v.String(), r, op)
	}
}

// A record's join: found its op, or why not.
type verdict uint8

const (
	joined     verdict = iota
	wentOut            // its op went to the sink unmeasured before it came: late
	noTracedOp         // its call enqueued no op cudatap traced: CUPTI alone saw its op
	ambiguous          // its call enqueued several ops (an NCCL group's end)
	unknown            // its call's ops left the model's window: cannot tell
)

func (v verdict) String() string {
	return [...]string{"joined", "late", "CUPTI only", "ambiguous", "unmatched"}[v]
}

// fit says whether r measures op, the last op its call's thread enqueued
// by the call's end: a record of another kind, size or stream, or a second
// one, is another call's, which cudatap did not trace.
func (ps *procState) fit(op *GPUOp, r *Measurement) verdict {
	sid, known := ps.cuptiStreams[cuptiStream{r.Device, r.CUPTIStream}]
	switch {
	case !kindFits(op.Kind, r.Kind):
		return noTracedOp
	case (r.Kind == OpMemcpy || r.Kind == OpMemset) && op.Bytes != 0 && r.Bytes != 0 && op.Bytes != r.Bytes:
		return noTracedOp
	case known && r.CUPTIStream != 0 && sid != op.Stream:
		return noTracedOp
	case op.Measured && op.Kind != OpGraph:
		return noTracedOp // its own record came already
	case op.released:
		return wentOut
	}
	return joined
}

// kindFits says whether a GPU record of kind r can time an op of kind op:
// an NCCL collective runs as a kernel; a graph launch not expanded runs
// anything; a record of no known kind (0: a test's) fits any.
func kindFits(op, r OpKind) bool {
	return op == r || r == 0 || op == OpGraph || (op == OpCollective && r == OpKernel)
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
	m.learnStream(ps, r, op.Stream)
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

// maxCUPTIStreams bounds the CUPTI streams a process's model knows;
// maxCUPTIParked the records of ops CUPTI alone saw that wait to learn
// theirs (past it they are counted unmatched).
const (
	maxCUPTIStreams = 1 << 12
	maxCUPTIParked  = 1 << 12
)

// learnStream notes that r's CUPTI stream is stream sid, if the model did
// not know it, and shows the ops CUPTI alone saw there that waited for it.
func (m *Model) learnStream(ps *procState, r *Measurement, sid int) {
	if r.CUPTIStream == 0 || r.Device < 0 {
		return
	}
	key := cuptiStream{r.Device, r.CUPTIStream}
	if _, ok := ps.cuptiStreams[key]; ok || len(ps.cuptiStreams) >= maxCUPTIStreams {
		return
	}
	if ps.cuptiStreams == nil {
		ps.cuptiStreams = map[cuptiStream]int{}
	}
	ps.cuptiStreams[key] = sid
	n := 0
	for _, w := range ps.cuptiParked {
		if (cuptiStream{w.Device, w.CUPTIStream}) == key {
			m.addCUPTIOnly(ps, &w, sid)
		} else {
			ps.cuptiParked[n] = w
			n++
		}
	}
	ps.cuptiParked = ps.cuptiParked[:n]
}

// cuptiOnly shows the op r measured, which no traced call enqueued, on the
// stream CUPTI ran it on; it waits while the model does not know which
// stream that is.
func (m *Model) cuptiOnly(ps *procState, r *Measurement) {
	if r.CUPTIStream != 0 && r.Device >= 0 && (r.Kind == OpKernel || r.Kind == OpMemcpy || r.Kind == OpMemset) {
		if sid, ok := ps.cuptiStreams[cuptiStream{r.Device, r.CUPTIStream}]; ok {
			m.addCUPTIOnly(ps, r, sid)
			return
		}
		if len(ps.cuptiParked) < maxCUPTIParked {
			ps.cuptiParked = append(ps.cuptiParked, *r)
			return
		}
	}
	m.drops.GPUTimesUnmatched++
	m.missed(ps.p.PID, "CUPTI only, stream unknown", r, nil)
}

// cuptiOnlyFunc is the function key a kernel CUPTI alone saw is named by
// (in Process.MeasuredNames): no traced launch gave it a handle. The top
// bit keeps it apart from addresses.
func cuptiOnlyFunc(name string) uint64 {
	h := uint64(14695981039346656037) // FNV-1a
	for i := 0; i < len(name); i++ {
		h = (h ^ uint64(name[i])) * 1099511628211
	}
	return h | 1<<63
}

// addCUPTIOnly adds the op r measured to stream sid as CUPTI saw it, and
// hands it to the sink: it ran and is done.
func (m *Model) addCUPTIOnly(ps *procState, r *Measurement, sid int) {
	p := ps.p
	m.reserve(ps)
	op := GPUOp{ID: ps.nextOp, Stream: sid, Call: -1, Enqueued: r.APIStart, Start: r.Start, End: r.End, TID: r.TID,
		Kind: r.Kind, CopyKind: r.CopyKind, Bytes: r.Bytes, Device: r.Device, After: -1, AfterStream: -1,
		Measured: true, Bounded: true, final: true, enqEnd: r.APIEnd, provenAt: r.End}
	if r.Kind == OpKernel {
		op.Bytes = 0
		if r.Name != "" {
			op.Func = cuptiOnlyFunc(r.Name)
			if _, ok := p.MeasuredNames[op.Func]; !ok && len(p.MeasuredNames) < maxMeasuredNames {
				p.MeasuredNames[op.Func] = r.Name
			}
		}
	}
	if op.Device < 0 {
		op.Device = DeviceUnknown
	}
	ps.forget(op.ID)
	ps.ops[op.ID&(len(ps.ops)-1)] = op
	ps.nextOp++
	p.NGPUOps++
	st := &p.Streams[sid].Stats
	st.GPUOps++
	st.CUPTIOnly++
	st.Measured++
	p.Devices |= deviceBit(op.Device)
	p.Streams[sid].Devices |= deviceBit(op.Device)
	ps.st[sid].measured.add(r.Start, r.End)
	m.drops.GPUOpsCUPTIOnly++
	m.missed(p.PID, "CUPTI only", r, nil) // not a miss: the diagnosis lists them too
	m.release(ps, ps.op(op.ID))
}

// missed tells OnMeasureMiss, if set (and of each op CUPTI alone saw).
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
	m.staleExecs(ps, t-MeasureSlack)
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
// Else it says why not (fit then checks the op found is the record's).
func (ps *procState) enqueuedBy(tid uint32, start, end uint64) (*GPUOp, verdict) {
	l := ps.byTID[tid]
	if l == nil {
		return nil, noTracedOp // the thread enqueued nothing traced while measured
	}
	l.trim(ps)
	ids := l.ids.items()
	i, _ := slices.BinarySearchFunc(ids, end, func(id int, t uint64) int {
		op := ps.op(id)
		if op == nil || op.Enqueued <= t {
			return -1
		}
		return 1
	})
	if i == 0 {
		// The thread's last op by end went to the sink, if any did.
		g := l.gone
		k, _ := slices.BinarySearchFunc(g, end, func(o goneOp, t uint64) int {
			if o.enqueued <= t {
				return -1
			}
			return 1
		})
		switch {
		case k == 0 && len(g) == maxGone && g[0].enqueued > end:
			return nil, unknown // gone too long ago to tell
		case k == 0:
			return nil, noTracedOp
		case g[k-1].shared:
			return nil, ambiguous
		case g[k-1].enqEnd > g[k-1].enqueued && g[k-1].enqEnd < start, g[k-1].measured:
			return nil, noTracedOp // its call returned before, or it had its record: this one is another call's
		}
		return nil, wentOut
	}
	op := ps.op(ids[i-1])
	switch {
	case op == nil:
		return nil, unknown
	case ps.shared[op.ID]:
		return nil, ambiguous
	case op.enqEnd > op.Enqueued && op.enqEnd < start:
		return nil, noTracedOp // its call returned before this one began
	}
	return op, joined
}

// forget is called before op id takes the window's slot of an op gone to
// the sink: that op's thread notes what the join needs of it first.
func (ps *procState) forget(id int) {
	if !ps.measuring {
		return
	}
	if old := &ps.ops[id&(len(ps.ops)-1)]; old.ID >= 0 && old.ID != id {
		if l := ps.byTID[old.TID]; l != nil {
			l.trim(ps)
		}
	}
}

// trim drops the ops at the front that went to the sink.
func (l *tidOps) trim(ps *procState) {
	n := 0
	for _, id := range l.ids.items() {
		op := ps.op(id)
		if op != nil && !op.released {
			break
		}
		if op != nil {
			if len(l.gone) == maxGone {
				l.gone = l.gone[:copy(l.gone, l.gone[1:])]
			}
			l.gone = append(l.gone, goneOp{enqueued: op.Enqueued, enqEnd: op.enqEnd, shared: ps.shared[op.ID], measured: op.Measured})
			delete(ps.shared, op.ID)
		}
		n++
	}
	l.ids.pop(n)
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
