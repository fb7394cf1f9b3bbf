package model

import (
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

// Options are the model's dependencies, all optional.
type Options struct {
	// ProcessInfo describes a process the first time it is seen.
	ProcessInfo func(pid uint32) ProcessInfo
	// ThreadName names a thread the first time it is seen.
	ThreadName func(pid, tid uint32) string
	// KernelName resolves a kernel stub address to its symbol ("" if none);
	// called once per process and address.
	KernelName func(pid uint32, addr uint64) string
	// FrameName resolves a stack address; called once per process and address.
	FrameName func(pid uint32, addr uint64) string
	// PyFrameName resolves a Python frame to "file:line function"; called
	// once per process and frame.
	PyFrameName func(pid uint32, code, instr uint64) string
}

// Model consumes events in time order and builds a Result. Not safe for
// concurrent use.
type Model struct {
	opts  Options
	procs map[uint32]*procState
	drops Drops
	start uint64
	end   uint64
	corr  uint64
}

type eventPos struct {
	stream int
	op     int // last GPU op on the stream at record time, -1 if none
	call   int
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
	queue       []int32 // pending GPU ops (indices), enqueue order
	head        int
	gpuClock    uint64 // inferred end of the last laid-out op
	lastOp      int
	lastEnqueue uint64
	waitAfter   int32 // op a cudaStreamWaitEvent made the next op wait for, -1 = none
}

func (s *streamState) pending() []int32 { return s.queue[s.head:] }

type procState struct {
	p          *Process
	byHandle   map[uint64]int
	perThread  map[uint32]int
	st         []*streamState
	events     map[uint64]eventPos
	pinned     ranges
	device     ranges
	polls      map[pollKey]pollState
	lastLegacy uint64
	funcNames  map[uint64]string // CUfunction/CUkernel handle → kernel name, from load-time calls
	stubTried  map[uint64]bool   // host stubs already symbolized
	capturing  map[int]int32     // stream id → operations captured so far
	graphs     map[uint64]int32  // captured graph → its operations
	execs      map[uint64]int32  // instantiated graph → its operations
}

// New returns an empty model.
func New(opts Options) *Model {
	return &Model{opts: opts, procs: make(map[uint32]*procState)}
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

// SetNested records how many launches both layers saw and the BPF side
// counted once.
func (m *Model) SetNested(n uint64) { m.drops.Nested = n }

// SetAttachFailures records how many probe sets could not be attached.
func (m *Model) SetAttachFailures(n uint64) { m.drops.AttachFailures = n }

// Drops so far.
func (m *Model) Drops() Drops { return m.drops }

// Calls is the number of calls modeled so far.
func (m *Model) Calls() int {
	n := 0
	for _, ps := range m.procs {
		n += len(ps.p.Calls)
	}
	return n
}

// Process returns the process state, creating it on first sight.
func (m *Model) proc(pid uint32) *procState {
	if ps, ok := m.procs[pid]; ok {
		return ps
	}
	p := &Process{PID: pid, Threads: map[uint32]string{}, Kernels: map[uint64]string{}, Frames: map[uint64]string{},
		PyFrames: map[PyKey]string{}}
	if m.opts.ProcessInfo != nil {
		p.Info = m.opts.ProcessInfo(pid)
	}
	ps := &procState{p: p, byHandle: map[uint64]int{}, perThread: map[uint32]int{},
		events: map[uint64]eventPos{}, polls: map[pollKey]pollState{}, funcNames: map[uint64]string{},
		stubTried: map[uint64]bool{}, capturing: map[int]int32{}, graphs: map[uint64]int32{}, execs: map[uint64]int32{}}
	// Stream 0 always exists: the legacy default stream.
	ps.newStream(&Stream{Kind: StreamLegacy})
	m.procs[pid] = ps
	return ps
}

// AddProcess registers a process before any of its calls arrive, so that an
// attached process that makes no CUDA call still shows up.
func (m *Model) AddProcess(pid uint32) { m.proc(pid) }

func (ps *procState) newStream(s *Stream) int {
	s.ID = len(ps.p.Streams)
	ps.p.Streams = append(ps.p.Streams, s)
	ps.st = append(ps.st, &streamState{lastOp: -1, waitAfter: -1})
	return s.ID
}

// streamID maps a handle as passed to a call to the process's stream id.
func (ps *procState) streamID(handle uint64, perThreadDefault bool, tid uint32, now uint64) int {
	if (handle == 0 && perThreadDefault) || handle == handlePerThread {
		if id, ok := ps.perThread[tid]; ok {
			return id
		}
		id := ps.newStream(&Stream{Kind: StreamPerThread, Handle: handlePerThread, OwnerTID: tid, CreatedAt: now})
		ps.perThread[tid] = id
		return id
	}
	if handle == 0 || handle == handleLegacy {
		return 0
	}
	if id, ok := ps.byHandle[handle]; ok {
		return id
	}
	id := ps.newStream(&Stream{Kind: StreamPreExisting, Handle: handle})
	ps.byHandle[handle] = id
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
	if _, ok := p.Threads[ev.TID]; !ok {
		name := ""
		if m.opts.ThreadName != nil {
			name = m.opts.ThreadName(ev.PID, ev.TID)
		}
		p.Threads[ev.TID] = name
	}

	// The call is built in place: it is big, and this is the hot path.
	idx := len(p.Calls)
	p.Calls = grow(p.Calls)
	call := &p.Calls[idx]
	*call = Call{
		Start: ev.Start, End: end, TID: ev.TID, API: spec.API, Symbol: uint8(ev.SymbolIndex()),
		Stream: -1, Ret: ev.Ret, HasRet: ev.HasReturn(), GPUOp: -1, Sync: -1, Stack: -1, PyStack: -1,
		ReadFault: ev.Flags&(event.FlagStackArgFault|event.FlagDerefFault|event.FlagOutFault) != 0,
	}
	a := &call.Args
	ev.Decode(a)
	ok := !call.HasRet || call.Ret == 0
	if a.HasStream && spec.Class != event.ClassStreamCreate {
		call.Stream = int32(ps.streamID(a.Stream, spec.PerThreadDefault(ev.SymbolIndex()), ev.TID, ev.Start))
	}
	if ev.NStack > 0 {
		call.Stack = m.addStack(ev)
	}
	if ev.NPy > 0 {
		call.PyStack = m.addPyStack(ev)
	}

	switch spec.Class {
	case event.ClassStreamCreate:
		if ok && a.Stream != 0 {
			// A handle reused after destroy is a new stream.
			id := ps.newStream(&Stream{Kind: StreamCreated, Handle: a.Stream, NonBlocking: a.Flags&1 != 0,
				Priority: a.Priority, CreatedAt: ev.Start})
			ps.byHandle[a.Stream] = id
			call.Stream = int32(id)
		}
	case event.ClassStreamDestroy:
		if call.Stream > 0 {
			p.Streams[call.Stream].DestroyedAt = ev.Start
			delete(ps.byHandle, a.Stream)
		}
	case event.ClassLaunch:
		if spec.Layer == event.Driver && ev.Out != 0 {
			m.learnStub(ps, a.Func, ev.Out)
		}
		p.Streams[call.Stream].Stats.Launches++
		m.kernelName(ps, a.Func)
		m.enqueue(ps, idx, GPUOp{Kind: OpKernel, Func: a.Func})
	case event.ClassGraphLaunch:
		p.Streams[call.Stream].Stats.GraphLaunches++
		m.enqueue(ps, idx, GPUOp{Kind: OpGraph, GraphOps: ps.execs[a.Ptr]})
	case event.ClassHostFunc:
		m.enqueue(ps, idx, GPUOp{Kind: OpHostFunc, Func: a.Func})
	case event.ClassMemcpy:
		m.memcpy(ps, idx, spec, ev)
	case event.ClassMemset:
		m.memset(ps, idx, spec, ev)
	case event.ClassEventRecord:
		sid := int(call.Stream)
		ps.events[a.Event] = eventPos{stream: sid, op: ps.st[sid].lastOp, call: idx}
	case event.ClassStreamWaitEvent:
		if pos, found := ps.events[a.Event]; found {
			p.Deps = append(p.Deps, Dependency{Event: a.Event, RecordCall: pos.call, WaitCall: idx,
				FromStream: pos.stream, ToStream: int(call.Stream)})
			if pos.op >= 0 {
				ps.st[call.Stream].waitAfter = int32(pos.op)
			}
		}
	case event.ClassEventCreate, event.ClassEventDestroy:
		// A new or destroyed event has no recorded position (handles are reused).
		delete(ps.events, a.Event)
	case event.ClassEventSync:
		m.eventSync(ps, idx, a.Event)
	case event.ClassStreamSync:
		sid := int(call.Stream)
		queued := m.queued(ps, sid)
		m.addSync(ps, idx, SyncStream, sid, queued)
		m.boundStream(ps, sid, -1, boundTime(call))
		if sid == 0 {
			m.boundBlocking(ps, boundTime(call))
		}
	case event.ClassDeviceSync:
		m.addSync(ps, idx, SyncDevice, -1, m.queuedAll(ps))
		m.boundAll(ps, boundTime(call))
	case event.ClassEventQuery, event.ClassStreamQuery:
		m.query(ps, idx, spec.Class == event.ClassEventQuery)
	case event.ClassMalloc:
		if ok && a.Ptr != 0 {
			ps.device.add(a.Ptr, a.Size)
			p.DeviceMemInUse += a.Size
			p.DeviceMemPeak = max(p.DeviceMemPeak, p.DeviceMemInUse)
		}
		if !a.HasStream && call.Duration() > mallocSyncThreshold {
			if q := m.queuedAll(ps); q > 0 {
				m.addSync(ps, idx, SyncMalloc, -1, q)
			}
		}
	case event.ClassFree:
		if a.Ptr != 0 {
			p.DeviceMemInUse -= min(p.DeviceMemInUse, ps.device.removeAt(a.Ptr))
		}
		// cudaFree synchronizes the device; cudaFree(NULL) only initializes
		// the context and cudaFreeAsync is stream-ordered.
		if !a.HasStream && a.Ptr != 0 {
			m.addSync(ps, idx, SyncFree, -1, m.queuedAll(ps))
			m.boundAll(ps, boundTime(call))
		}
	case event.ClassHostAlloc:
		if ok && a.Ptr != 0 {
			ps.pinned.add(a.Ptr, a.Size)
			p.PinnedBytes += a.Size
		}
	case event.ClassHostRegister:
		if ok {
			ps.pinned.add(a.Ptr, a.Size)
			p.PinnedBytes += a.Size
		}
	case event.ClassHostFree:
		p.PinnedBytes -= min(p.PinnedBytes, ps.pinned.removeAt(a.Ptr))
		if a.Ptr != 0 {
			m.addSync(ps, idx, SyncFree, -1, m.queuedAll(ps))
			m.boundAll(ps, boundTime(call))
		}
	case event.ClassHostUnregister:
		p.PinnedBytes -= min(p.PinnedBytes, ps.pinned.removeAt(a.Ptr))
	case event.ClassFuncName:
		if ok && a.Ptr != 0 {
			name := ps.funcNames[a.Func] // cuKernelGetFunction: the kernel's name
			if spec.API != event.CuKernelGetFunction {
				name = ev.String()
			}
			if name != "" {
				ps.funcNames[a.Ptr] = name
			}
		}
	case event.ClassCaptureBegin:
		ps.capturing[int(call.Stream)] = 0
	case event.ClassCaptureEnd:
		if n, ok := ps.capturing[int(call.Stream)]; ok {
			delete(ps.capturing, int(call.Stream))
			if ok && a.Graph != 0 {
				ps.graphs[a.Graph] = n
			}
		}
	case event.ClassGraphInstantiate:
		if n, ok := ps.graphs[a.Graph]; ok && a.Ptr != 0 {
			ps.execs[a.Ptr] = n
		}
	case event.ClassCollective:
		st := &p.Streams[call.Stream].Stats
		st.Collectives++
		st.CommBytes += a.Bytes
		m.enqueue(ps, idx, GPUOp{Kind: OpCollective, Bytes: a.Bytes})
	}
}

// grow extends s by one element, doubling its capacity when full: append
// grows a big slice by 1.25×, which copies every call about four times.
func grow[E any](s []E) []E {
	if len(s) == cap(s) {
		s = slices.Grow(s, max(len(s), 64))
	}
	return s[:len(s)+1]
}

// boundTime is when the work a sync waited for was known to be complete: its
// return if it really blocked, else its start.
func boundTime(c *Call) uint64 {
	if c.Duration() >= blockedThreshold {
		return c.End
	}
	return c.Start
}

func (m *Model) addStack(ev *event.Event) int32 {
	ps := m.procs[ev.PID]
	p := ps.p
	st := slices.Clone(ev.Stack[:ev.NStack])
	for _, pc := range st {
		if _, ok := p.Frames[pc]; !ok {
			name := ""
			if m.opts.FrameName != nil {
				name = m.opts.FrameName(ev.PID, pc)
			}
			p.Frames[pc] = name
		}
	}
	p.Stacks = append(p.Stacks, st)
	return int32(len(p.Stacks) - 1)
}

func (m *Model) addPyStack(ev *event.Event) int32 {
	p := m.procs[ev.PID].p
	st := make([]PyKey, ev.NPy)
	for i := range st {
		k := PyKey{Code: ev.Py[i][0], Instr: ev.Py[i][1]}
		st[i] = k
		// Unresolved names are asked again: a launched interpreter's
		// layout is confirmed only once it runs.
		if p.PyFrames[k] == "" && m.opts.PyFrameName != nil {
			p.PyFrames[k] = m.opts.PyFrameName(ev.PID, k.Code, k.Instr)
		}
	}
	p.PyStacks = append(p.PyStacks, st)
	return int32(len(p.PyStacks) - 1)
}

// learnStub names a CUfunction from the runtime host stub that launched it
// (see tracer.AttachPairing): the stub's ELF symbol is the kernel's name.
func (m *Model) learnStub(ps *procState, f, stub uint64) {
	if name := ps.funcNames[f]; name != "" || ps.stubTried[stub] {
		return
	}
	ps.stubTried[stub] = true
	name := ""
	if m.opts.KernelName != nil {
		name = m.opts.KernelName(ps.p.PID, stub)
	}
	if name != "" {
		ps.funcNames[f] = name
		ps.p.Kernels[f] = name
	}
}

func (m *Model) kernelName(ps *procState, addr uint64) {
	if _, ok := ps.p.Kernels[addr]; ok {
		return
	}
	// A driver launch names a CUfunction handle that a load-time call named;
	// a runtime launch names the host stub, an ELF symbol.
	name, ok := ps.funcNames[addr]
	if !ok && m.opts.KernelName != nil {
		name = m.opts.KernelName(ps.p.PID, addr)
	}
	ps.p.Kernels[addr] = name
}

// enqueue adds GPU work for call idx on its stream.
func (m *Model) enqueue(ps *procState, idx int, op GPUOp) int {
	p := ps.p
	call := &p.Calls[idx]
	sid := int(call.Stream)
	if sid < 0 {
		sid = 0
	}
	if n, ok := ps.capturing[sid]; ok {
		// Recorded into the graph being captured: it runs when the graph
		// is launched, not now.
		ps.capturing[sid] = n + 1
		call.Captured = true
		return -1
	}
	m.corr++
	op.Stream, op.Call, op.Correlation, op.Enqueued, op.API = sid, idx, m.corr, call.Start, call.API
	op.Start, op.End = call.Start, call.Start
	op.After, ps.st[sid].waitAfter = ps.st[sid].waitAfter, -1
	opIdx := len(p.GPUOps)
	p.GPUOps = grow(p.GPUOps)
	p.GPUOps[opIdx] = op
	call.GPUOp, call.Correlation = int32(opIdx), m.corr

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
			m.addSync(ps, idx, SyncLegacyStream, 0, waiting)
		}
		ps.lastLegacy = call.Start
	}
	st := ps.st[sid]
	st.queue = append(st.queue, int32(opIdx))
	st.lastOp = opIdx
	st.lastEnqueue = call.Start
	return opIdx
}

func (m *Model) memcpy(ps *procState, idx int, spec *event.Spec, ev *event.Event) {
	p := ps.p
	call := &p.Calls[idx]
	a := &call.Args
	if call.Stream < 0 {
		// Synchronous copies run on the default stream of the build.
		call.Stream = int32(ps.streamID(0, spec.PerThreadDefault(ev.SymbolIndex()), call.TID, call.Start))
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
	pageable := host != 0 && !ps.pinned.contains(host, max(a.Bytes, 1))
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
	op := m.enqueue(ps, idx, GPUOp{Kind: OpMemcpy, Bytes: a.Bytes, CopyKind: kind, Pageable: pageable})
	if op < 0 {
		return // captured into a graph
	}
	switch {
	case spec.Sync && kind != event.DeviceToDevice && kind != event.HostToHost:
		m.addSync(ps, idx, SyncMemcpy, sid, queued)
	case !spec.Sync && pageable:
		m.addSync(ps, idx, SyncPageableMemcpy, sid, queued)
	default:
		return
	}
	// The host returned only once the stream had drained up to this copy.
	m.boundStream(ps, sid, op, call.End)
	if sid == 0 {
		m.boundBlocking(ps, call.End) // the legacy stream waited for them first
	}
}

func (m *Model) memset(ps *procState, idx int, spec *event.Spec, ev *event.Event) {
	p := ps.p
	call := &p.Calls[idx]
	if call.Stream < 0 {
		call.Stream = int32(ps.streamID(0, spec.PerThreadDefault(ev.SymbolIndex()), call.TID, call.Start))
	}
	sid := int(call.Stream)
	p.Streams[sid].Stats.Memsets++
	queued := m.queued(ps, sid)
	op := m.enqueue(ps, idx, GPUOp{Kind: OpMemset, Bytes: call.Args.Bytes})
	if spec.Sync && op >= 0 {
		m.addSync(ps, idx, SyncMemset, sid, queued)
		m.boundStream(ps, sid, op, call.End)
		if sid == 0 {
			m.boundBlocking(ps, call.End)
		}
	}
}

// direction infers a cudaMemcpyDefault copy's direction from the device
// allocations seen.
func (ps *procState) direction(dst, src uint64) event.MemcpyKind {
	d, s := ps.device.contains(dst, 1), ps.device.contains(src, 1)
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

func (m *Model) eventSync(ps *procState, idx int, ev uint64) {
	call := &ps.p.Calls[idx]
	pos, found := ps.events[ev]
	if !found {
		m.addSync(ps, idx, SyncEvent, -1, 0)
		return
	}
	call.Stream = int32(pos.stream)
	queued := 0
	for _, op := range ps.st[pos.stream].pending() {
		if int(op) <= pos.op {
			queued++
		}
	}
	m.addSync(ps, idx, SyncEvent, pos.stream, queued)
	ps.p.Deps = append(ps.p.Deps, Dependency{Event: ev, RecordCall: pos.call, WaitCall: idx, FromStream: pos.stream, ToStream: -1})
	if pos.op >= 0 {
		m.boundStream(ps, pos.stream, pos.op, boundTime(call))
	}
}

// query tracks cudaStreamQuery/cudaEventQuery: a run of "not ready" answers
// ending in "ready" is a busy-poll loop, one synchronization.
func (m *Model) query(ps *procState, idx int, isEvent bool) {
	call := &ps.p.Calls[idx]
	target := call.Args.Stream
	if isEvent {
		target = call.Args.Event
	}
	key := pollKey{tid: call.TID, target: target, event: isEvent}
	st := ps.polls[key]
	if call.HasRet && call.Ret == errNotReady {
		if st.n == 0 {
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
		i := m.addSync(ps, idx, SyncQueryPoll, sid, m.queued(ps, sid))
		s := &ps.p.Syncs[i]
		s.Start, s.BlockedNs, s.Polls = st.start, call.End-st.start, st.n+1
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

func (m *Model) addSync(ps *procState, idx int, kind SyncKind, sid int, queued int) int {
	p := ps.p
	call := &p.Calls[idx]
	blocked := call.Duration()
	if kind == SyncLegacyStream {
		blocked = 0 // serializes GPU work; the host does not wait
	}
	p.Syncs = append(p.Syncs, Sync{Kind: kind, Call: idx, TID: call.TID, Stream: sid, Start: call.Start,
		BlockedNs: blocked, QueuedOps: queued})
	call.Sync = int32(len(p.Syncs) - 1)
	s := sid
	if s < 0 {
		s = 0 // device-wide waits are booked on the legacy stream
	}
	p.Streams[s].Stats.Syncs++
	p.Streams[s].Stats.SyncBlockedNs += blocked
	return len(p.Syncs) - 1
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
		n, _ = slices.BinarySearch(pend, int32(upto+1))
	}
	if n == 0 {
		return
	}
	ops := ps.p.GPUOps
	begin := max(st.gpuClock, ops[pend[0]].Enqueued)
	if t < begin {
		t = begin
	}
	prev := st.gpuClock
	for k, i := range pend[:n] {
		op := &ops[i]
		op.Start = max(prev, op.Enqueued)
		if op.After >= 0 {
			dep := &ops[op.After]
			if !dep.Bounded {
				m.boundStream(ps, dep.Stream, int(op.After), t)
			}
			op.Start = max(op.Start, dep.End)
		}
		share := begin + mulDiv(t-begin, uint64(k+1), uint64(n))
		op.End = max(op.Start, share)
		op.Bounded = true
		prev = op.End
	}
	st.gpuClock = prev
	st.head += n
	if st.head == len(st.queue) {
		st.queue, st.head = st.queue[:0], 0
	}
}

// mulDiv returns a*b/c without overflowing; b <= c.
func mulDiv(a, b, c uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	q, _ := bits.Div64(hi, lo, c)
	return q
}

// Finish lays out the work no synchronization bounded and returns the
// result. The model must not be used afterwards.
func (m *Model) Finish() *Result {
	r := &Result{Drops: m.drops, Start: m.start, End: m.end}
	for _, ps := range m.procs {
		// In enqueue order, so that an op waited for is laid out first.
		prev := make([]uint64, len(ps.st))
		for sid, st := range ps.st {
			prev[sid] = st.gpuClock
		}
		ops := ps.p.GPUOps
		for i := range ops {
			op := &ops[i]
			if op.Bounded {
				continue
			}
			op.Start = max(prev[op.Stream], op.Enqueued)
			if op.After >= 0 {
				op.Start = max(op.Start, ops[op.After].End)
			}
			op.End = op.Start
			prev[op.Stream] = op.End
		}
		r.Processes = append(r.Processes, ps.p)
	}
	slices.SortFunc(r.Processes, func(a, b *Process) int { return int(a.PID) - int(b.PID) })
	return r
}
