package model

import (
	"encoding/binary"
	"math/bits"
	"slices"

	"github.com/cudatap/cudatap/tracer/event"
)

// Stream handles with a fixed meaning in the CUDA runtime.
const (
	handleLegacy    = 0x1 // cudaStreamLegacy
	handlePerThread = 0x2 // cudaStreamPerThread
)

// cudaErrorNotReady: a query found work still pending.
const errNotReady = 600

// A synchronization shorter than this did not really wait for the GPU: the
// work it covers finished before the call began. (Two uprobe traps alone cost
// tens of µs on a VM.)
const blockedThreshold = 50_000 // ns

// A cudaMalloc taking longer than this while work was queued is reported as
// an implicit synchronization.
const mallocSyncThreshold = 1_000_000 // ns

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

type eventPos struct {
	stream  int
	op      int      // ID of the last GPU op on the stream at record time, -1 if none
	call    int      // Seq of the record call
	capture *capture // the capture its stream recorded into, nil if none: a wait on it joins the capture
}

type pollKey struct {
	tid    uint32
	target uint64
	event  bool
}

type pollState struct {
	start uint64
	n     int
}

// streamState is the model's private per-stream bookkeeping.
type streamState struct {
	queue       []int // pending GPU ops (IDs), enqueue order
	head        int
	gpuClock    uint64 // inferred end of the last laid-out op
	lastOp      int
	lastEnqueue uint64
	waitAfter   int // op a cudaStreamWaitEvent made the next op wait for, -1 = none
	busy        busyBounds
	measured    spanUnion // the measured ops' GPU time (measured.go)
}

// busyBounds accumulates the upper bound of a stream's GPU busy time that is
// known without kernel timings (StreamStats.BusyMaxNs): each op ran within
// [earliest start, latest end] — it could not start before its enqueue nor
// before the stream's previous op could, and it had ended by the
// synchronization that proved it complete (by the end of the recording if
// none did) — so the union of those intervals holds all of the stream's
// work. No lower bound is known without timings: a host blocked in a
// synchronization also waits for its own wake-up after the GPU finished
// (81 µs blocked for 20 µs of work on the simulated GPU, TestBusyBounds).
type busyBounds struct {
	earliest         uint64 // earliest start of the stream's last op
	maxStart, maxEnd uint64 // the union's current interval
	maxNs            uint64 // closed intervals of the union
}

// op adds an op that could start no earlier than enqueued and had ended by
// latest.
func (b *busyBounds) op(enqueued, latest uint64) {
	b.earliest = max(b.earliest, enqueued)
	latest = max(latest, b.earliest)
	if b.maxEnd == 0 || b.earliest > b.maxEnd {
		b.maxNs += b.maxEnd - b.maxStart
		b.maxStart, b.maxEnd = b.earliest, latest
		return
	}
	b.maxEnd = max(b.maxEnd, latest)
}

func (b *busyBounds) max() uint64 { return b.maxNs + b.maxEnd - b.maxStart }

func (s *streamState) pending() []int { return s.queue[s.head:] }

func (s *streamState) pop(n int) {
	s.head += n
	if s.head == len(s.queue) {
		s.queue, s.head = s.queue[:0], 0
	} else if s.head > 1024 && s.head*2 > len(s.queue) {
		s.queue, s.head = s.queue[:copy(s.queue, s.queue[s.head:])], 0
	}
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

// currentDevice is thread tid's current device: the last it set, else
// CUDA's default, device 0 — unknown in a process that ran before cudatap
// attached (it may have set one then).
func (ps *procState) currentDevice(tid uint32) int8 {
	if d, ok := ps.devices[tid]; ok {
		return d
	}
	if ps.p.AttachedLate {
		return DeviceUnknown
	}
	return 0
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

func (ps *procState) addStream(s *Stream) int {
	s.ID = len(ps.p.Streams)
	ps.p.Streams = append(ps.p.Streams, s)
	ps.st = append(ps.st, &streamState{lastOp: -1, waitAfter: -1})
	return s.ID
}

// streamID maps a handle as passed to a call to the process's stream id.
// A stream merged into the other-streams stream is not remembered: each
// of its calls finds it so again.
func (m *Model) streamID(ps *procState, handle uint64, perThreadDefault bool, tid uint32, now uint64) int {
	if (handle == 0 && perThreadDefault) || handle == handlePerThread {
		if id, ok := ps.perThread[tid]; ok {
			return id
		}
		id := m.newStream(ps, &Stream{Kind: StreamPerThread, Handle: handlePerThread, OwnerTID: tid, CreatedAt: now},
			streamKey{ps.p.PID, tid, handlePerThread})
		if id != ps.other {
			ps.perThread[tid] = id
		}
		return id
	}
	if handle == 0 || handle == handleLegacy {
		return 0
	}
	if id, ok := ps.byHandle[handle]; ok {
		return id
	}
	id := m.newStream(ps, &Stream{Kind: StreamPreExisting, Handle: handle, Device: DeviceUnknown}, streamKey{ps.p.PID, 0, handle})
	if id != ps.other {
		ps.byHandle[handle] = id
	}
	return id
}

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
	ok := !call.HasRet || call.Ret == 0
	if a.HasStream && spec.Class != event.ClassStreamCreate {
		call.Stream = int32(m.streamID(ps, a.Stream, spec.PerThreadDefault(ev.SymbolIndex()), tid, ev.Start))
	}
	if ev.NStack > 0 {
		call.Stack = m.addStack(ps, ev)
	}
	if ev.NPy > 0 {
		call.PyStack = m.addPyStack(ps, ev)
	}
	if len(ev.KernelArgs.Bytes) > 0 && spec.Class == event.ClassLaunch {
		call.KernelArgs = &ev.KernelArgs
	}

	switch spec.Class {
	case event.ClassStreamCreate:
		if ok && a.Stream != 0 {
			// A handle reused after destroy is a new stream.
			id := m.newStream(ps, &Stream{Kind: StreamCreated, Handle: a.Stream, NonBlocking: a.Flags&1 != 0,
				Priority: a.Priority, CreatedAt: ev.Start, Device: ps.currentDevice(call.TID)}, streamKey{p.PID, 0, a.Stream})
			if id != ps.other {
				ps.byHandle[a.Stream] = id
			} else {
				delete(ps.byHandle, a.Stream)
			}
			call.Stream = int32(id)
		}
	case event.ClassSetDevice:
		if call.HasRet && call.Ret == 0 && a.Device >= 0 && a.Device < maxDevices {
			ps.devices[call.TID] = int8(a.Device)
		}
	case event.ClassCommInit:
		// The process's place in its job: its widest communicator (DDP's
		// world, not a sub-group made later).
		if call.HasRet && call.Ret == 0 && a.Size > 0 && int64(a.Size) > int64(p.WorldSize) && a.Peer >= 0 {
			p.Rank, p.WorldSize = a.Peer, int32(a.Size)
		}
	case event.ClassStreamDestroy:
		if call.Stream > 0 && int(call.Stream) != ps.other {
			p.Streams[call.Stream].DestroyedAt = ev.Start
			delete(ps.byHandle, a.Stream)
		}
	case event.ClassLaunch:
		if spec.Layer == event.Driver && ev.Out != 0 {
			// A driver launch made by a runtime launch carries the runtime
			// host stub (see tracer.AttachRuntimeLaunches): its ELF symbol
			// names the CUfunction.
			if _, known := p.Stubs[a.Func]; !known {
				if len(p.Stubs) < maxKernelNames {
					p.Stubs[a.Func] = ev.Out
				} else {
					m.drops.Limits.KernelNames++
				}
				ps.newStubAt, ps.launchesSinceStub = ev.Start, -1
			}
		}
		ps.launchesSinceStub++
		p.Streams[call.Stream].Stats.Launches++
		m.enqueue(ps, GPUOp{Kind: OpKernel, Func: a.Func, Grid: a.Grid, Block: a.Block})
	case event.ClassGraphLaunch:
		p.Streams[call.Stream].Stats.GraphLaunches++
		m.graphLaunch(ps, a.Ptr)
	case event.ClassHostFunc:
		m.enqueue(ps, GPUOp{Kind: OpHostFunc, Func: a.Func})
	case event.ClassMemcpy:
		m.memcpy(ps, spec, ev)
	case event.ClassMemset:
		m.memset(ps, spec, ev)
	case event.ClassEventRecord:
		sid := int(call.Stream)
		if _, known := ps.events[a.Event]; known || len(ps.events) < maxEvents {
			ps.events[a.Event] = eventPos{stream: sid, op: ps.st[sid].lastOp, call: call.Seq, capture: ps.capturing[sid]}
		} else {
			m.drops.Limits.Events++
		}
		// A record enqueues a marker on the stream: it gets a correlation
		// id of its own, as CUPTI gives it (Kineto traces, and HTA's
		// critical path, match waits to records by it).
		m.corr++
		call.Correlation = m.corr
	case event.ClassStreamWaitEvent:
		if pos, found := ps.events[a.Event]; found {
			m.sink.Dependency(p, &Dependency{Event: a.Event, RecordCall: pos.call, WaitCall: call.Seq,
				FromStream: pos.stream, ToStream: int(call.Stream)})
			if c := pos.capture; c != nil && ps.capturing[pos.stream] == c {
				ps.capturing[int(call.Stream)] = c // forked into the capture: its work is the graph's
			} else if pos.op >= 0 && ps.capturing[int(call.Stream)] == nil {
				ps.st[call.Stream].waitAfter = pos.op
			}
		}
	case event.ClassEventCreate, event.ClassEventDestroy:
		// A new or destroyed event has no recorded position (handles are reused).
		delete(ps.events, a.Event)
	case event.ClassEventSync:
		m.eventSync(ps, a.Event)
	case event.ClassStreamSync:
		sid := int(call.Stream)
		queued := m.queued(ps, sid)
		m.addSync(ps, SyncStream, sid, queued)
		m.boundStream(ps, sid, -1, boundTime(call))
		if sid == 0 {
			m.boundBlocking(ps, boundTime(call))
		}
	case event.ClassDeviceSync:
		m.addSync(ps, SyncDevice, -1, m.queuedAll(ps))
		m.boundAll(ps, boundTime(call))
	case event.ClassEventQuery, event.ClassStreamQuery:
		m.query(ps, spec.Class == event.ClassEventQuery)
	case event.ClassMalloc:
		switch {
		case ok && a.Ptr != 0:
			if !ps.mem.alloc(a.Ptr, a.Size, siteKey{api: call.API, symbol: call.Symbol, stack: call.Stack, py: call.PyStack}, spec.Handle) {
				m.drops.Limits.Allocations++
			}
			p.DeviceMemInUse = ps.mem.inUse
			p.DeviceMemPeak = max(p.DeviceMemPeak, p.DeviceMemInUse)
			ps.allocated(call.TID, call.End)
		case call.HasRet && int32(call.Ret) == errOutOfMemory:
			m.outOfMemory(ps, call, spec)
		}
		if !a.HasStream && !spec.Handle && call.Duration() > mallocSyncThreshold {
			if q := m.queuedAll(ps); q > 0 {
				m.addSync(ps, SyncMalloc, -1, q)
			}
		}
	case event.ClassFree:
		if a.Ptr != 0 {
			ps.mem.free(a.Ptr, spec.Handle)
			p.DeviceMemInUse = ps.mem.inUse
		}
		// cudaFree synchronizes the device; cudaFree(NULL) only initializes
		// the context, cudaFreeAsync is stream-ordered and cuMemRelease
		// lets physical memory go once unmapped.
		if spec.Sync && a.Ptr != 0 {
			m.addSync(ps, SyncFree, -1, m.queuedAll(ps))
			m.boundAll(ps, boundTime(call))
		}
	case event.ClassHostAlloc:
		if ok && a.Ptr != 0 && m.track(&ps.pinned, a.Ptr, a.Size) {
			p.PinnedBytes += a.Size
		}
	case event.ClassHostRegister:
		if ok && m.track(&ps.pinned, a.Ptr, a.Size) {
			p.PinnedBytes += a.Size
		}
	case event.ClassHostFree:
		p.PinnedBytes -= min(p.PinnedBytes, removed(&ps.pinned, a.Ptr))
		if a.Ptr != 0 {
			m.addSync(ps, SyncFree, -1, m.queuedAll(ps))
			m.boundAll(ps, boundTime(call))
		}
	case event.ClassHostUnregister:
		p.PinnedBytes -= min(p.PinnedBytes, removed(&ps.pinned, a.Ptr))
	case event.ClassFuncName:
		if ok && a.Ptr != 0 {
			name := p.KernelNames[a.Func] // cuKernelGetFunction: the kernel's name
			if spec.API != event.CuKernelGetFunction {
				name = ev.String()
			}
			if _, known := p.KernelNames[a.Ptr]; name != "" && !known && len(p.KernelNames) >= maxKernelNames {
				m.drops.Limits.KernelNames++
			} else if name != "" {
				p.KernelNames[a.Ptr] = name
			}
		}
	case event.ClassCaptureBegin:
		ps.beginCapture(call)
	case event.ClassCaptureEnd:
		m.endCapture(ps, call)
	case event.ClassGraphInstantiate:
		m.instantiate(ps, call)
	case event.ClassGraph:
		m.graphCall(ps, call)
	case event.ClassCollective:
		st := &p.Streams[call.Stream].Stats
		st.Collectives++
		st.CommBytes += a.Bytes
		id := m.enqueue(ps, GPUOp{Kind: OpCollective, Bytes: a.Bytes})
		if g := ps.groups[call.TID]; g != nil && id >= 0 && len(ps.deferred) < maxGroupOps {
			ps.deferred[id] = true
			g.ops = append(g.ops, id)
		}
	case event.ClassGroup:
		ps.group(call)
	case event.ClassAnnotation:
		m.annotation(p, a, ev)
	}

	m.sink.Call(p, call)
	for i := range m.syncs {
		m.sink.Sync(p, &m.syncs[i])
	}
	if ps.measuring {
		m.seen(ps, call.TID, end)
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
func (ps *procState) group(call *Call) {
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

// LastNewStub is when a launch last named a kernel from its runtime stub
// that had no name before (ns, CLOCK_MONOTONIC), 0 if never, and how many
// launches the process made since.
func (m *Model) LastNewStub(pid uint32) (at uint64, launchesSince int) {
	if ps := m.procs[pid]; ps != nil {
		return ps.newStubAt, ps.launchesSinceStub
	}
	return 0, 0
}

// boundTime is when the work a sync waited for was known to be complete: its
// return if it really blocked, else its start.
func boundTime(c *Call) uint64 {
	if c.Duration() >= blockedThreshold {
		return c.End
	}
	return c.Start
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

func (m *Model) memcpy(ps *procState, spec *event.Spec, ev *event.Event) {
	p := ps.p
	call := &m.call
	a := &call.Args
	if call.Stream < 0 {
		// Synchronous copies run on the default stream of the build.
		call.Stream = int32(m.streamID(ps, 0, spec.PerThreadDefault(ev.SymbolIndex()), call.TID, call.Start))
	}
	kind := a.Kind
	if kind == event.DefaultKind {
		kind = ps.direction(a.Dst, a.Src)
	}
	host := uint64(0)
	switch kind {
	case event.HostToDevice:
		host = a.Src
	case event.DeviceToHost:
		host = a.Dst
	}
	pageable := host != 0 && !ps.pinned.Contains(host, max(a.Bytes, 1))
	call.Pageable = pageable
	s := &p.Streams[call.Stream].Stats
	s.Memcpys++
	switch kind {
	case event.HostToDevice:
		s.BytesHtoD += a.Bytes
	case event.DeviceToHost:
		s.BytesDtoH += a.Bytes
	case event.DeviceToDevice:
		s.BytesDtoD += a.Bytes
	default:
		s.BytesOther += a.Bytes
	}
	if host != 0 {
		if pageable {
			s.BytesPageable += a.Bytes
		} else {
			s.BytesPinned += a.Bytes
		}
	}
	sid := int(call.Stream)
	queued := m.queued(ps, sid)
	op := m.enqueue(ps, GPUOp{Kind: OpMemcpy, Bytes: a.Bytes, CopyKind: kind, Pageable: pageable})
	if op < 0 {
		return // captured into a graph
	}
	switch {
	case spec.Sync && kind != event.DeviceToDevice && kind != event.HostToHost:
		m.addSync(ps, SyncMemcpy, sid, queued)
	case !spec.Sync && pageable:
		m.addSync(ps, SyncPageableMemcpy, sid, queued)
	default:
		return
	}
	// The host returned only once the stream had drained up to this copy.
	m.boundStream(ps, sid, op, call.End)
	if sid == 0 {
		m.boundBlocking(ps, call.End) // the legacy stream waited for them first
	}
}

func (m *Model) memset(ps *procState, spec *event.Spec, ev *event.Event) {
	p := ps.p
	call := &m.call
	if call.Stream < 0 {
		call.Stream = int32(m.streamID(ps, 0, spec.PerThreadDefault(ev.SymbolIndex()), call.TID, call.Start))
	}
	sid := int(call.Stream)
	p.Streams[sid].Stats.Memsets++
	queued := m.queued(ps, sid)
	op := m.enqueue(ps, GPUOp{Kind: OpMemset, Bytes: call.Args.Bytes})
	if spec.Sync && op >= 0 {
		m.addSync(ps, SyncMemset, sid, queued)
		m.boundStream(ps, sid, op, call.End)
		if sid == 0 {
			m.boundBlocking(ps, call.End)
		}
	}
}

// direction infers a cudaMemcpyDefault copy's direction from the device
// allocations seen.
func (ps *procState) direction(dst, src uint64) event.MemcpyKind {
	d, s := ps.mem.ranges.Contains(dst, 1), ps.mem.ranges.Contains(src, 1)
	switch {
	case d && s:
		return event.DeviceToDevice
	case d:
		return event.HostToDevice
	case s:
		return event.DeviceToHost
	}
	return event.HostToHost
}

func (m *Model) eventSync(ps *procState, ev uint64) {
	call := &m.call
	pos, found := ps.events[ev]
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
	m.sink.Dependency(ps.p, &Dependency{Event: ev, RecordCall: pos.call, WaitCall: call.Seq, FromStream: pos.stream, ToStream: -1})
	if pos.op >= 0 {
		m.boundStream(ps, pos.stream, pos.op, boundTime(call))
	}
}

// query tracks cudaStreamQuery/cudaEventQuery: a run of "not ready" answers
// ending in "ready" is a busy-poll loop, one synchronization.
func (m *Model) query(ps *procState, isEvent bool) {
	call := &m.call
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

// dequeue removes op id from the stream's pending ops.
func (s *streamState) dequeue(id int) {
	if pend := s.pending(); len(pend) > 0 && pend[0] == id {
		s.pop(1)
	} else if i := slices.Index(pend, id); i >= 0 {
		s.queue = slices.Delete(s.queue, s.head+i, s.head+i+1)
	}
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
