package model

import (
	"encoding/binary"
	"math/bits"
	"slices"

	"github.com/cudatap/cudatap/tracer/event"
)

// maxWindow bounds the GPU ops a process keeps pending (not yet bounded by a
// synchronization): beyond it the oldest is laid out as if never bounded and
// counted (Drops.WindowFull). A training step enqueues a few thousand.
const maxWindow = 1 << 16

// maxStacks bounds the distinct native and Python stacks kept per process;
// beyond it calls keep no stack, counted (Drops.StacksDropped).
const maxStacks = 1 << 16

// Model consumes events in time order, keeps live state and aggregates
// only, and hands calls, syncs and GPU ops to its sink as they become
// final. It calls nothing outside itself. Not safe for concurrent use.
type Model struct {
	sink   Sink
	procs  map[uint32]*procState
	drops  Drops
	start  uint64
	end    uint64
	corr   uint64
	call   Call   // the call being handled
	syncs  []Sync // the syncs it caused
	keyBuf []byte
	window int // max pending ops per process (maxWindow; smaller in tests)
	// OnMeasureMiss, if set, is told each measurement counted unmatched or
	// late, and the op it found if any, and each that became an op CUPTI
	// alone saw ("CUPTI only"): a diagnosis (measured.go).
	OnMeasureMiss func(pid uint32, why string, r *Measurement, op *GPUOp)
	// Threads and streams modeled apart, over all processes, and what
	// the bounds merged (limits.go).
	threads, streams int
	merged           merged
}

type procState struct {
	p          *Process
	byHandle   map[uint64]int
	perThread  map[uint32]int
	st         []*streamState
	other      int // id of the stream the streams past the bounds share, 0 = none yet
	events     map[uint64]eventPos
	pinned     Ranges
	mem        devMem              // device memory held, by allocation and place
	oomOpen    map[uint32]*openOOM // by thread: its failed request, until an allocation of it succeeds
	polls      map[pollKey]pollState
	lastLegacy uint64
	calls      int
	capturing  map[int]*capture // stream id → the capture it records into (graphs.go)
	// NCCL groups open per thread, and the collectives called inside
	// them: NCCL enqueues those only at the outermost ncclGroupEnd, so no
	// synchronization or query before it proves them complete.
	groups   map[uint32]*ncclGroup
	deferred map[int]bool // collectives of the open groups, by op ID
	// Ops enqueued with others by one call (an NCCL group's end) in a
	// measured process, until their thread's ops are trimmed past them
	// (measured.go): their GPU records cannot be told apart.
	shared map[int]bool
	// Graphs and executable graphs by handle, the nodes they hold, and
	// the measured launches not all released (graphs.go).
	graphs     map[uint64]*graphDef
	execs      map[uint64]*execDef
	graphNodes int
	nodeRefs   map[uint64]nodeRef // nodes added by hand, by handle
	launches   map[uint64]*launchState
	nParked    int
	// GPU ops by ID modulo len(ops): the pending ones and the most recent
	// final ones. oldest is the lowest ID that may not be final yet.
	ops     []GPUOp
	nextOp  int
	oldest  int
	stacks  map[string]int32
	pyIndex map[string]int32
	overlap overlapTracker
	// When a kernel was last named from a runtime stub it had no name
	// before (ns): the naming window can close once this stops changing.
	newStubAt uint64
	// Launches since then: a window quiet for a while but with no launch
	// in it proves nothing.
	launchesSinceStub int
	holds             map[uint32][]Hold // by thread, until a call covers them
	devices           map[uint32]int8   // by thread: its current device, once cudaSetDevice was seen
	// GPU times (measured.go): whether CUPTI measures this process, the
	// final ops waiting for their measurement (in the order they became
	// final), the ops each thread enqueued that may still be measured,
	// and the collector's previous mark.
	measuring     bool
	measuredSince uint64 // ops enqueued before were not measured (the collector came later)
	held          []int
	byTID         map[uint32]*tidOps
	collectorDone bool                           // no more measurements will come
	threadSeen    map[uint32]uint64              // by thread: the end of its last call seen
	early         map[uint32]*queue[Measurement] // by thread: measurements ahead of its events
	nEarly        int
	// Which stream each of CUPTI's streams is, learnt from the records
	// joined, and the records of ops CUPTI alone saw that wait to learn
	// theirs (measured.go).
	cuptiStreams map[cuptiStream]int
	cuptiParked  []Measurement
}

// New returns an empty model that hands what it concludes to sink (nil:
// keep nothing but the aggregates).
func New(sink Sink) *Model {
	if sink == nil {
		sink = Discard{}
	}
	return &Model{sink: sink, procs: make(map[uint32]*procState), window: maxWindow}
}

// Auxiliary counts a record that was received but carries no call (the
// library-load hook's), so that Received stays comparable to Submitted.
func (m *Model) Auxiliary() { m.drops.Received++ }

// DecodeError counts a record that was received but could not be decoded.
func (m *Model) DecodeError() {
	m.drops.Received++
	m.drops.DecodeErrors++
}

// SetKernelStats records the BPF side's counters (they are cumulative, so
// the last call wins).
func (m *Model) SetKernelStats(submitted, ringbufFull, inflightFull, orphans, readFaults uint64) {
	m.drops.Submitted = submitted
	m.drops.RingbufFull = ringbufFull
	m.drops.InflightFull = inflightFull
	m.drops.OrphanReturns = orphans
	m.drops.ReadFaults = readFaults
}

// SetProgramSkips records how many runs of the BPF programs the kernel
// skipped (recursion protection).
func (m *Model) SetProgramSkips(n uint64) { m.drops.ProgramSkips = n }

// SetPyCodeLost records how many Python code object copies found no room.
func (m *Model) SetPyCodeLost(n uint64) { m.drops.PyCodeLost = n }

// SetNested records how many launches both layers saw and the BPF side
// counted once.
func (m *Model) SetNested(n uint64) { m.drops.Nested = n }

// SetAttachFailures records how many probe sets could not be attached.
func (m *Model) SetAttachFailures(n uint64) { m.drops.AttachFailures = n }

// Drops so far.
func (m *Model) Drops() Drops { return m.drops }

// Calls is the number of calls modeled so far.
func (m *Model) Calls() int64 {
	var n int64
	for _, ps := range m.procs {
		n += ps.p.NCalls
	}
	return n
}

// newProc adds the state of process pid.
func (m *Model) newProc(pid uint32) *procState {
	p := &Process{PID: pid, Threads: map[uint32]struct{}{}, KernelNames: map[uint64]string{}, Stubs: map[uint64]uint64{}}
	ps := &procState{p: p, byHandle: map[uint64]int{}, perThread: map[uint32]int{},
		events: map[uint64]eventPos{}, polls: map[pollKey]pollState{},
		capturing: map[int]*capture{}, groups: map[uint32]*ncclGroup{}, deferred: map[int]bool{}, shared: map[int]bool{},
		graphs: map[uint64]*graphDef{}, execs: map[uint64]*execDef{}, launches: map[uint64]*launchState{},
		ops: newOps(64), stacks: map[string]int32{}, pyIndex: map[string]int32{}, devices: map[uint32]int8{}}
	// Stream 0 always exists: the legacy default stream.
	ps.addStream(&Stream{Kind: StreamLegacy})
	m.streams++
	m.procs[pid] = ps
	return ps
}

// AddProcess registers a process before any of its calls arrive, so that an
// attached process that makes no CUDA call still shows up.
func (m *Model) AddProcess(pid uint32) { m.proc(pid) }

// Handle adds one event. Events must arrive in the order of their Start
// time per thread; across threads small reorderings are harmless.
func (m *Model) Handle(ev *event.Event) {
	m.drops.Received++
	spec := ev.Spec()
	if spec == nil {
		m.drops.UnknownAPI++
		return
	}
	ps := m.proc(ev.PID)
	p := ps.p
	if m.start == 0 || ev.Start < m.start {
		m.start = ev.Start
	}
	end := max(ev.End, ev.Start)
	m.end = max(m.end, end)
	if p.FirstSeen == 0 {
		p.FirstSeen = ev.Start
	}
	p.LastSeen = max(p.LastSeen, end)
	tid := m.thread(ps, ev.TID)

	// The call is built in place: it is big, and this is the hot path.
	call := &m.call
	*call = Call{
		Start: ev.Start, End: end, TID: tid, API: spec.API, Symbol: uint8(ev.SymbolIndex()), Seq: ps.calls,
		Stream: -1, Ret: ev.Ret, HasRet: ev.HasReturn(), GPUOp: -1, Stack: -1, PyStack: -1,
		ReadFault:  ev.Flags&(event.FlagStackArgFault|event.FlagDerefFault|event.FlagOutFault) != 0,
		ViaRuntime: ev.Flags&event.FlagViaRuntime != 0,
	}
	ps.calls++
	p.NCalls++
	if i := int(spec.API)*symbolsPerAPI + min(int(call.Symbol), symbolsPerAPI-1); i < len(p.BySymbol) {
		p.BySymbol[i]++
	} else {
		p.BySymbol = append(p.BySymbol, make([]int64, i+1-len(p.BySymbol))...)
		p.BySymbol[i]++
	}
	m.syncs = m.syncs[:0]
	if ps.holds != nil {
		call.HoldNs = ps.heldDuring(tid, call.Start, call.End)
	}
	a := &call.Args
	*a = *ev.Named()
	if a.HasStream && spec.Class != event.ClassStreamCreate {
		call.Stream = int32(m.streamID(ps, a.Stream, spec.PerThreadDefault(ev.SymbolIndex()), tid, ev.Start))
	}
	if ev.NStack > 0 {
		call.Stack = m.addStack(ps, ev)
	}
	if ev.NPy > 0 {
		call.PyStack = m.addPyStack(ps, ev)
	}
	if int(spec.Class) < len(handlers) && handlers[spec.Class] != nil {
		handlers[spec.Class](m, ps, spec, ev)
	}
	m.sink.Call(p, call)
	for i := range m.syncs {
		m.sink.Sync(p, &m.syncs[i])
	}
	if ps.measuring {
		m.seen(ps, call.TID, end)
	}
}

// A handler follows what a call of one class does to the model: it reads
// the call being handled (m.call) and completes it, and adds its syncs.
type handler func(m *Model, ps *procState, spec *event.Spec, ev *event.Event)

// handlers by class, each beside the state it changes; a class without
// one (event.ClassOther) changes nothing but the counts. Never written.
var handlers = [...]handler{
	event.ClassStreamCreate:     (*Model).createStream, // streams.go
	event.ClassStreamDestroy:    (*Model).destroyStream,
	event.ClassSetDevice:        (*Model).setDevice, // devices.go
	event.ClassLaunch:           (*Model).launch,    // launches.go
	event.ClassHostFunc:         (*Model).hostFunc,
	event.ClassFuncName:         (*Model).nameFunc,
	event.ClassMemcpy:           (*Model).memcpy, // memory.go
	event.ClassMemset:           (*Model).memset,
	event.ClassMalloc:           (*Model).malloc,
	event.ClassFree:             (*Model).free,
	event.ClassHostAlloc:        (*Model).hostAlloc,
	event.ClassHostFree:         (*Model).hostFree,
	event.ClassHostRegister:     (*Model).hostRegister,
	event.ClassHostUnregister:   (*Model).hostUnregister,
	event.ClassEventCreate:      (*Model).forgetEvent, // deps.go
	event.ClassEventDestroy:     (*Model).forgetEvent,
	event.ClassEventRecord:      (*Model).recordEvent,
	event.ClassStreamWaitEvent:  (*Model).waitEvent,
	event.ClassEventSync:        (*Model).syncEvent, // syncs.go
	event.ClassStreamSync:       (*Model).syncStream,
	event.ClassDeviceSync:       (*Model).syncDevice,
	event.ClassEventQuery:       (*Model).query,
	event.ClassStreamQuery:      (*Model).query,
	event.ClassGraphLaunch:      (*Model).graphLaunch, // graphs.go
	event.ClassCaptureBegin:     (*Model).beginCapture,
	event.ClassCaptureEnd:       (*Model).endCapture,
	event.ClassGraphInstantiate: (*Model).instantiate,
	event.ClassGraph:            (*Model).graphCall,
	event.ClassCommInit:         (*Model).commInit, // nccl.go
	event.ClassCollective:       (*Model).collective,
	event.ClassGroup:            (*Model).group,
	event.ClassAnnotation:       (*Model).annotation, // annotations.go
}

// intern returns the index of the stack whose key is b, adding it (with
// add) on first sight; -1 once the process has maxStacks of them.
func (m *Model) intern(index map[string]int32, b []byte, n int, add func()) int32 {
	if i, ok := index[string(b)]; ok { // no allocation: the compiler looks up without converting
		return i
	}
	if len(index) >= maxStacks {
		m.drops.StacksDropped++
		return -1
	}
	i := int32(n)
	index[string(b)] = i
	add()
	return i
}

func (m *Model) addStack(ps *procState, ev *event.Event) int32 {
	st := ev.Stack[:ev.NStack]
	b := m.keyBuf[:0]
	for _, pc := range st {
		b = binary.LittleEndian.AppendUint64(b, pc)
	}
	m.keyBuf = b
	p := ps.p
	return m.intern(ps.stacks, b, len(p.Stacks), func() { p.Stacks = append(p.Stacks, slices.Clone(st)) })
}

func (m *Model) addPyStack(ps *procState, ev *event.Event) int32 {
	b := m.keyBuf[:0]
	for i := range ev.NPy {
		b = binary.LittleEndian.AppendUint64(b, ev.Py[i][0])
		b = binary.LittleEndian.AppendUint64(b, ev.Py[i][1])
	}
	m.keyBuf = b
	p := ps.p
	return m.intern(ps.pyIndex, b, len(p.PyStacks), func() {
		st := make([]PyKey, ev.NPy)
		for i := range st {
			st[i] = PyKey{Code: ev.Py[i][0], Instr: ev.Py[i][1]}
		}
		p.PyStacks = append(p.PyStacks, st)
	})
}

// op returns the GPU op with this ID while it is in the window, else nil.
func (ps *procState) op(id int) *GPUOp {
	if id < 0 || id >= ps.nextOp {
		return nil
	}
	op := &ps.ops[id&(len(ps.ops)-1)]
	if op.ID != id {
		return nil
	}
	return op
}

// reserve makes room in the window for op ID ps.nextOp: it grows the window
// up to m.window, then lays out the oldest pending ops unbounded.
// newOps makes an op ring of n slots, none holding an op: a zero GPUOp
// has ID 0, and a slot left empty (a ring grown after op 0 went out) would
// pass for op 0 (op checks the slot's ID), which a late lookup then
// handed to the sink a second time, empty.
func newOps(n int) []GPUOp {
	ops := make([]GPUOp, n)
	for i := range ops {
		ops[i].ID = -1
	}
	return ops
}

func (m *Model) reserve(ps *procState) {
	for ps.oldest < ps.nextOp && ps.ops[ps.oldest&(len(ps.ops)-1)].released {
		ps.oldest++
	}
	if ps.nextOp-ps.oldest < len(ps.ops) {
		return
	}
	if len(ps.ops) < m.window {
		grown := newOps(2 * len(ps.ops))
		for id := ps.oldest; id < ps.nextOp; id++ {
			grown[id&(len(grown)-1)] = ps.ops[id&(len(ps.ops)-1)]
		}
		ps.ops = grown
		return
	}
	m.drops.WindowFull++
	op := &ps.ops[ps.oldest&(len(ps.ops)-1)]
	m.layOutUnbounded(ps, op)
	if !op.released {
		m.release(ps, op) // held for a measurement that is too late now
	}
	ps.oldest++
}

// enqueue adds GPU work for the current call on its stream and returns the
// op's ID (-1 when captured into a graph).
func (m *Model) enqueue(ps *procState, op GPUOp) int {
	m.corr++
	return m.enqueueAs(ps, op, m.corr)
}

// enqueueAs enqueues op with correlation id corr (a graph launch gives
// every op it runs its own).
func (m *Model) enqueueAs(ps *procState, op GPUOp, corr uint64) int {
	p := ps.p
	call := &m.call
	sid := int(call.Stream)
	if sid < 0 {
		sid = 0
	}
	if c := ps.capturing[sid]; c != nil {
		// Recorded into the graph being captured: it runs when the graph
		// is launched, not now.
		m.captured(ps, c, &op)
		return -1
	}
	m.reserve(ps)
	st := ps.st[sid]
	op.ID, op.Stream, op.Call, op.Correlation, op.Enqueued, op.TID = ps.nextOp, sid, call.Seq, corr, call.Start, call.TID
	if op.API == 0 {
		op.API = call.API // a graph's op has the API of the call its node captured
	}
	op.EnqueueOnly = call.End <= call.Start
	// A created stream belongs to the device it was created on; work on a
	// default stream goes to the calling thread's current device.
	if s := p.Streams[sid]; s.Kind == StreamCreated || s.Kind == StreamPreExisting {
		op.Device = s.Device
	} else {
		op.Device = ps.currentDevice(call.TID)
	}
	p.Devices |= deviceBit(op.Device)
	p.Streams[sid].Devices |= deviceBit(op.Device)
	op.Start, op.End, op.enqEnd = call.Start, call.Start, call.End
	op.After, st.waitAfter = st.waitAfter, -1
	op.AfterStream = -1
	ps.forget(op.ID)
	ps.ops[op.ID&(len(ps.ops)-1)] = op
	if ps.measuring {
		l := ps.byTID[call.TID]
		if l == nil {
			l = &tidOps{}
			ps.byTID[call.TID] = l
		}
		l.ids.push(op.ID)
	}
	ps.nextOp++
	p.NGPUOps++
	p.Streams[sid].Stats.GPUOps++
	call.GPUOp, call.Correlation = op.ID, corr

	if sid == 0 {
		// The legacy default stream waits for every blocking stream with
		// work enqueued since it last ran.
		waiting := 0
		for i := 1; i < len(p.Streams); i++ {
			if p.Streams[i].Blocking() && ps.st[i].lastEnqueue > ps.lastLegacy && len(ps.st[i].pending()) > 0 {
				waiting += len(ps.st[i].pending())
			}
		}
		if waiting > 0 {
			m.addSync(ps, SyncLegacyStream, 0, waiting)
		}
		ps.lastLegacy = call.Start
	}
	st.queue = append(st.queue, op.ID)
	st.lastOp = op.ID
	st.lastEnqueue = call.Start
	return op.ID
}

// layOutUnbounded places an op no synchronization bounded: right after the
// stream's previous op (or its enqueue), with no duration. op must be the
// oldest pending op of its stream.
func (m *Model) layOutUnbounded(ps *procState, op *GPUOp) {
	if op.final {
		return
	}
	st := ps.st[op.Stream]
	op.provenAt = m.end
	st.busy.op(op.Enqueued, m.end) // no sync proved it done: by the end, as far as is known
	if op.Measured {
		st.gpuClock = max(st.gpuClock, op.End)
		st.dequeue(op.ID)
		m.final(ps, op)
		return
	}
	op.Start = max(st.gpuClock, op.Enqueued)
	if op.After >= 0 {
		if dep := ps.op(op.After); dep != nil {
			m.layOutUnbounded(ps, dep)
			op.Start = max(op.Start, dep.End)
			op.AfterStart, op.AfterStream, op.AfterDevice = dep.Start, int32(dep.Stream), dep.Device
		}
	}
	op.End = op.Start
	st.gpuClock = op.End
	st.dequeue(op.ID)
	m.final(ps, op)
}

// final marks an op laid out; it goes to the sink now, or once measured
// where CUPTI measures the process.
func (m *Model) final(ps *procState, op *GPUOp) {
	op.final = true
	if ps.measurable(op) && (!op.Measured || op.Kind == OpGraph) {
		ps.held = append(ps.held, op.ID)
		return
	}
	m.release(ps, op)
}

// release hands a final op to the sink and to the aggregates.
func (m *Model) release(ps *procState, op *GPUOp) {
	op.released = true
	if ps.p.Measured && !op.Measured {
		m.drops.GPUTimesUnmeasured++
	}
	if op.Node != 0 {
		ps.launchReleased(op)
	}
	ps.overlap.add(op)
	m.sink.GPUOp(ps.p, op)
}

// mulDiv returns a*b/c without overflowing; b <= c.
func mulDiv(a, b, c uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	q, _ := bits.Div64(hi, lo, c)
	return q
}

// Finish lays out the work no synchronization bounded, hands it to the
// sink, and returns the result. The model must not be used afterwards.
func (m *Model) Finish() *Result {
	for _, ps := range m.procs {
		m.conclude(ps)
	}
	return m.Interim()
}

// conclude lays out what ps still has pending, hands it to the sink, and
// fills in its totals: nothing more of it is coming.
func (m *Model) conclude(ps *procState) {
	// In enqueue order, so that an op waited for is laid out first.
	for id := ps.oldest; id < ps.nextOp; id++ {
		if op := ps.op(id); op != nil && !op.final {
			m.layOutUnbounded(ps, op)
		}
	}
	m.joinEarly(ps)
	m.dropAllParked(ps)
	m.dropCUPTIParked(ps)
	m.releaseHeld(ps, ^uint64(0), false)
	ps.p.CommNs, ps.p.OverlapNs = ps.overlap.finish()
	for sid, st := range ps.st {
		s := &ps.p.Streams[sid].Stats
		s.BusyMaxNs = st.busy.max()
		s.BusyNs = st.measured.total()
		if s.Measured > 0 && s.Measured >= s.GPUOps {
			s.BusyMaxNs = s.BusyNs // every op measured: exact
		}
	}
}

// Retire concludes process pid (it exited) as Finish would and forgets
// it: its Process is returned (nil when unknown), and nothing of it stays
// in the model. A session that runs for ever (the agent's --continuous)
// retires the exited, so that its memory follows the live processes, not
// every process it ever saw.
func (m *Model) Retire(pid uint32) *Process {
	ps := m.procs[pid]
	if ps == nil {
		return nil
	}
	m.conclude(ps)
	delete(m.procs, pid)
	return ps.p
}

// PIDs lists the processes the model holds.
func (m *Model) PIDs() []uint32 {
	pids := make([]uint32, 0, len(m.procs))
	for pid := range m.procs {
		pids = append(pids, pid)
	}
	return pids
}

// Interim returns the processes so far (sorted by PID; their totals are
// final only once concluded), the drops and the time span, concluding
// nothing. The processes are the model's own: read them only while it
// handles nothing (see tracer.Config.OnCut).
func (m *Model) Interim() *Result {
	r := &Result{Drops: m.drops, Start: m.start, End: m.end}
	for _, ps := range m.procs {
		r.Processes = append(r.Processes, ps.p)
	}
	slices.SortFunc(r.Processes, func(a, b *Process) int { return int(a.PID) - int(b.PID) })
	return r
}
