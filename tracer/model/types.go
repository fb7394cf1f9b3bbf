// Package model rebuilds what every CUDA stream of every traced process did
// from decoded calls: streams and their flags, event dependencies, inferred
// GPU activity, pinned host ranges, device memory and host-blocking
// synchronizations. It is pure Go and sees only event.Event values.
package model

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/cudatap/cudatap/tracer/event"
)

// StreamKind says how a stream came to be known.
type StreamKind uint8

const (
	StreamLegacy      StreamKind = iota // handle 0 / cudaStreamLegacy: the legacy default stream
	StreamPerThread                     // cudaStreamPerThread or a _ptsz call with handle 0
	StreamCreated                       // creation observed: flags and priority known
	StreamPreExisting                   // first seen in use: flags unknown
	StreamOther                         // the streams past the model's bounds, merged (limits.go)
)

// Stream is one CUDA stream of one process.
type Stream struct {
	ID          int // small id within the process; 0 = legacy default stream
	Handle      uint64
	Kind        StreamKind
	NonBlocking bool
	Priority    int32
	OwnerTID    uint32 // for per-thread default streams
	CreatedAt   uint64 // ns, 0 if not seen
	DestroyedAt uint64 // ns, 0 if not seen
	// Device: the device a created stream belongs to (DeviceUnknown for a
	// stream created before cudatap attached); default streams serve every
	// device, each op going to its thread's current device. Devices has a
	// bit per device its ops ran on (see DeviceBits).
	Device  int8
	Devices uint64

	Stats StreamStats
}

// Label is the human name of the stream, as trace metadata shows it.
func (s *Stream) Label() string {
	switch s.Kind {
	case StreamLegacy:
		return "stream 0 (legacy default)"
	case StreamPerThread:
		return fmt.Sprintf("stream %d (per-thread default, tid %d)", s.ID, s.OwnerTID)
	case StreamPreExisting:
		return fmt.Sprintf("stream %d (pre-existing)", s.ID)
	case StreamOther:
		return fmt.Sprintf("stream %d (the streams past %d, merged)", s.ID, maxStreams)
	}
	mode := "blocking"
	if s.NonBlocking {
		mode = "non-blocking"
	}
	return fmt.Sprintf("stream %d (%s, prio %d)", s.ID, mode, s.Priority)
}

// Blocking reports whether the legacy default stream synchronizes with it.
// Pre-existing streams are assumed blocking (the CUDA default); so is a
// per-thread default stream, which is not a non-blocking stream and
// synchronizes with the legacy one when both are used.
func (s *Stream) Blocking() bool {
	return !s.NonBlocking
}

// StreamStats are per-stream totals for summaries and metrics.
type StreamStats struct {
	Launches      int64
	Memcpys       int64
	Memsets       int64
	GraphLaunches int64
	BytesHtoD     uint64
	BytesDtoH     uint64
	BytesDtoD     uint64
	BytesOther    uint64 // HtoH and unknown directions
	BytesPageable uint64 // host side not pinned
	BytesPinned   uint64
	Syncs         int64  // host-blocking synchronizations on this stream
	SyncBlockedNs uint64 // host time blocked in them
	Collectives   int64  // NCCL operations enqueued
	CommBytes     uint64 // their payload bytes
	GPUOps        int64  // GPU operations enqueued (not captured into a graph), a graph launch's included
	GraphOps      int64  // of them, those graph launches ran: each launch's nodes (graphs.go)
	CUPTIOnly     int64  // of them, those CUPTI alone saw: no traced call enqueued them (GPUOp.CUPTIOnly)
	// The stream's GPU busy time lies in [BusyNs, BusyMaxNs]. BusyMaxNs
	// bounds it from above without kernel timings (see busyBounds);
	// BusyNs is what CUPTI measured (the union of the measured ops'
	// intervals), 0 without it. Measured counts the ops it timed: with
	// every op measured, both bounds are the measured time. Set by Finish.
	BusyMaxNs uint64
	BusyNs    uint64
	Measured  int64
}

// OpKind is the kind of inferred GPU activity.
type OpKind uint8

const (
	OpKernel OpKind = iota + 1
	OpMemcpy
	OpMemset
	OpGraph
	OpHostFunc
	OpCollective // an NCCL collective or send/recv on its (comm) stream
)

// Category is the Chrome-trace category of the GPU slice.
func (k OpKind) Category() string {
	switch k {
	case OpKernel, OpGraph, OpCollective:
		return "kernel"
	case OpMemcpy:
		return "gpu_memcpy"
	case OpMemset:
		return "gpu_memset"
	}
	return "gpu_user_annotation"
}

// SyncKind classifies a call that blocked (or serialized) the GPU.
type SyncKind uint8

const (
	SyncNone           SyncKind = iota
	SyncStream                  // cudaStreamSynchronize
	SyncDevice                  // cudaDeviceSynchronize
	SyncEvent                   // cudaEventSynchronize
	SyncMemcpy                  // synchronous cudaMemcpy*
	SyncMemset                  // synchronous cudaMemset
	SyncPageableMemcpy          // cudaMemcpyAsync with pageable host memory
	SyncFree                    // cudaFree / cudaFreeHost: device-wide sync
	SyncMalloc                  // cudaMalloc that blocked while work was queued
	SyncLegacyStream            // work on the legacy default stream serialized blocking streams
	SyncQueryPoll               // a cudaStreamQuery/cudaEventQuery busy-poll loop
)

var syncNames = [...]string{"", "stream_sync", "device_sync", "event_sync", "sync_memcpy", "sync_memset",
	"pageable_memcpy", "free_sync", "malloc_sync", "legacy_stream", "query_poll"}

func (k SyncKind) String() string {
	if int(k) < len(syncNames) {
		return syncNames[k]
	}
	return "unknown"
}

// Explicit reports whether the program asked for the synchronization.
func (k SyncKind) Explicit() bool { return k == SyncStream || k == SyncDevice || k == SyncEvent }

// Hint is a one-line fix for the sync kind.
func (k SyncKind) Hint() string {
	switch k {
	case SyncStream, SyncEvent:
		return "the host waits for the GPU here: move the read-back (.item(), .cpu(), .tolist()) out of the hot loop or sync less often"
	case SyncDevice:
		return "cudaDeviceSynchronize waits for every stream: sync only the stream (or event) you need, and only when you need the result"
	case SyncMemcpy, SyncMemset:
		return "synchronous copy/set blocks the host: use the Async form on a stream with pinned host memory"
	case SyncPageableMemcpy:
		return "pin the host buffer (cudaHostAlloc / tensor.pin_memory()): async copies from pageable memory block the host"
	case SyncFree:
		return "cudaFree synchronizes the device: reuse buffers or use a caching / stream-ordered allocator (cudaFreeAsync)"
	case SyncMalloc:
		return "cudaMalloc blocked while work was queued: allocate up front or use cudaMallocAsync"
	case SyncLegacyStream:
		return "use a non-blocking stream (cudaStreamNonBlocking) or per-thread default streams: the legacy default stream serializes blocking streams"
	case SyncQueryPoll:
		return "the host spins on cudaStreamQuery/cudaEventQuery: block on an event instead, or do useful work between polls"
	}
	return ""
}

// Call is one observed CUDA API call, handed to the Sink as soon as it is
// handled; the model keeps none of them.
type Call struct {
	Start, End  uint64 // ns, CLOCK_MONOTONIC; End == Start when only the entry was probed
	Ret         int64
	Args        event.Args
	Correlation uint64 // links the call to its GPU op (or to the marker an event record enqueues); 0 = none
	Seq         int    // position of the call in its process (0, 1, ...)
	GPUOp       int    // ID of the GPU op it enqueued, -1 = none
	BlockedNs   uint64 // host time blocked in the (last) synchronization it caused
	HoldNs      uint64 // time within the call the thread was held by cudatap (hooking a library)
	TID         uint32
	Stream      int32    // stream id, -1 when the call takes none
	Stack       int32    // index into Process.Stacks, -1 = none
	PyStack     int32    // index into Process.PyStacks, -1 = none
	Sync        SyncKind // the (last) synchronization it caused, SyncNone = none
	API         event.API
	Symbol      uint8 // index into the API's symbol list
	HasRet      bool
	ReadFault   bool // some argument could not be read
	Captured    bool // enqueued on a capturing stream: recorded into a graph, not executed
	Pageable    bool // a copy whose host side is not pinned
	ViaRuntime  bool // a driver launch the CUDA runtime made: the program called the runtime's launch
	// KernelArgs: a launch's kernel parameter values, when the record
	// carries them (record --kernel-args); nil otherwise. It aliases the
	// event: valid only while the Sink handles the call.
	KernelArgs *event.KernelArgs
}

// Duration of the call on the host (0 when only the entry was probed),
// without the time cudatap held the thread while hooking a library.
func (c *Call) Duration() uint64 {
	if c.End > c.Start+c.HoldNs {
		return c.End - c.Start - c.HoldNs
	}
	return 0
}

// failed reports whether the call returned an error (one whose return was
// not probed did not, as far as is known).
func (c *Call) failed() bool { return c.HasRet && c.Ret != 0 }

// Spec of the call's API.
func (c *Call) Spec() *event.Spec { return event.Lookup(c.API) }

// SymbolName is the exact symbol that was hit (e.g. cudaLaunchKernel_ptsz).
func (c *Call) SymbolName() string {
	if s := c.Spec(); s != nil {
		return s.Symbol(int(c.Symbol))
	}
	return c.API.String()
}

// GPUOp is inferred GPU activity: when it ran is an estimate bounded by the
// synchronizations that were observed, never a measurement. The Sink gets it
// once final: when a synchronization bounded it, when the model's window of
// pending ops was full, or at Finish.
type GPUOp struct {
	ID          int // per process, in enqueue order
	Stream      int
	Call        int // Seq of the call that enqueued it
	Correlation uint64
	Enqueued    uint64 // host time of the enqueue call
	Start, End  uint64 // inferred
	Func        uint64 // kernel stub, CUfunction handle or host function address
	Bytes       uint64
	After       int    // ID of the op this one waits for (cudaStreamWaitEvent), -1 = none
	AfterStart  uint64 // that op's inferred start, once laid out (flows in traces)
	AfterStream int32  // and its stream, -1 when unknown (it left the window)
	TID         uint32 // thread of the enqueue call
	Grid, Block event.Dim3
	// Node: run by a graph launch (InGraph), as one of its graph's nodes:
	// 1 + the index of that node in Process.GraphNodes (NodeOf), -1 when
	// the node's call was not kept; 0 = not a graph's op.
	Node        int32
	API         event.API // the call that enqueued it (names collectives); a graph's op: the call its node captured
	Kind        OpKind
	CopyKind    event.MemcpyKind
	Device      int8 // the device it ran on, DeviceUnknown when cudatap cannot tell
	AfterDevice int8 // the device of the op it waits for
	Bounded     bool // End is bounded by an observed completion (sync, ready query)
	Measured    bool // Start and End are CUPTI's (measured.go), not inferred
	EnqueueOnly bool // the enqueue call has no duration (only its entry was probed)
	Pageable    bool
	final       bool   // laid out
	released    bool   // handed to the sink
	enqEnd      uint64 // return of the enqueue call
	provenAt    uint64 // when it was known complete
}

// CUPTIOnly says CUPTI timed the op but cudatap traced no call that
// enqueued it (a memset cuBLASLt's static runtime makes through a driver
// call cudatap does not hook in a process with a runtime): it has no call
// (Call is -1, API 0), its stream is the one CUPTI named, and Enqueued is
// when CUPTI saw its call begin (measured.go).
func (op *GPUOp) CUPTIOnly() bool { return op.Call < 0 && op.Measured }

// ProvenAt is when the op was known complete: the return of the call that
// proved it (a sync, a ready query) or, for an op nothing bounded, the last
// event seen when it was laid out. Until then the op was queued or running:
// its stream was not empty. 0 when unknown (an op not laid out by a model).
func (op *GPUOp) ProvenAt() uint64 { return op.provenAt }

// Sync is one host-blocking (or stream-serializing) synchronization.
type Sync struct {
	Kind      SyncKind
	Call      int // Seq of the call (the last call of a query poll loop)
	TID       uint32
	Stream    int    // -1 for device-wide
	Start     uint64 // ns
	BlockedNs uint64 // host time blocked
	QueuedOps int    // GPU operations pending on the waited-for stream(s) when the sync began
	Polls     int    // for query polls: number of queries in the loop
	API       event.API
	Symbol    uint8 // index into the API's symbol list
	Stack     int32 // index into Process.Stacks, -1 = none
	PyStack   int32 // index into Process.PyStacks, -1 = none
}

// Dependency is an event record on one stream waited on by another stream
// (cudaEventRecord → cudaStreamWaitEvent), or by the host.
type Dependency struct {
	Event      uint64
	RecordCall int // Seq of the record call
	WaitCall   int
	FromStream int
	ToStream   int // -1 when the host waited (cudaEventSynchronize)
}

// PyKey identifies one Python frame position: a code object and an
// instruction (pointer or offset, depending on the interpreter version).
type PyKey struct{ Code, Instr uint64 }

// ProcessInfo names a process; the recorder fills it from /proc.
type ProcessInfo struct {
	Comm    string
	Cmdline string
	// Parent is the process of the followed tree that started this one
	// (record follows what its command starts); 0 for a root.
	Parent    uint32 `json:",omitempty"`
	NSPID     uint32 // pid inside its own PID namespace
	Container string // container id when the cgroup path shows one
	PodUID    string
	Libraries []string // CUDA libraries found and hooked, as the target sees their paths
}

// Interval is a span of time, CLOCK_MONOTONIC ns.
type Interval struct{ Start, End uint64 }

// Process is what the model keeps about one traced process: its live
// state and aggregates, bounded by the number of streams, threads, kernels
// and distinct stacks, never by the number of calls.
type Process struct {
	PID     uint32
	Info    ProcessInfo         // filled from the name tables (Result.Name)
	Threads map[uint32]struct{} // threads seen
	Streams []*Stream           // index = stream id
	// Kernel names learnt from load-time calls (cuModuleGetFunction, ...),
	// by CUfunction/CUkernel handle; and the runtime host stub that
	// launched a CUfunction, whose ELF symbol names it.
	KernelNames map[uint64]string
	// MeasuredNames: the names CUPTI gave the kernels launched as each
	// function (--gpu-times), for kernels nothing else names (launched
	// before cudatap attached, by a statically linked runtime).
	MeasuredNames map[uint64]string
	Stubs         map[uint64]uint64
	// Messages: what the program's NVTX ranges and marks say, by the key
	// their calls carry (event.MessageKey; annotations.go). nil until one.
	Messages map[uint64]string
	// nvtxDomains numbers the NVTX domain handles of probed calls
	// (annotations.go).
	nvtxDomains map[uint64]uint64
	// GraphNodes: the calls that made the nodes of its CUDA graphs (the
	// capture sites), which the ops of graph launches point at (NodeOf).
	GraphNodes []GraphNode
	// Distinct captured user stacks (raw addresses, innermost first) and
	// Python stacks (innermost first); calls and syncs index them.
	Stacks   [][]uint64
	PyStacks [][]PyKey

	NCalls         int64   // calls handled
	BySymbol       []int64 // calls per exact symbol: index API*symbolsPerAPI + symbol index
	NGPUOps        int64   // GPU operations enqueued (not captured), a graph launch's nodes each
	CommNs         uint64
	OverlapNs      uint64 // communication time covered by compute on other streams (inferred)
	DeviceMemInUse uint64
	DeviceMemPeak  uint64
	// OOMs: its device allocations that failed for want of memory, the
	// first 64; OOMCount counts them all.
	OOMs        []OOM
	OOMCount    int64
	PinnedBytes uint64 // pinned host memory currently registered or allocated
	// PinnedRecovered is the part of it found in the memory map when
	// cudatap attached; AttachedLate says the process ran before cudatap
	// came, so DeviceMemInUse/Peak count only what was allocated since.
	PinnedRecovered uint64
	AttachedLate    bool
	Measured        bool // CUPTI measured its GPU ops (--gpu-times)
	// CUPTIAway: when cudatap's collector had let CUPTI go to another
	// client of the process (its own profiler): GPU ops enqueued then are
	// bounded, not measured. End 0: not taken back.
	CUPTIAway []Interval
	// Rank and WorldSize: its place in an NCCL job (ncclCommInitRank, its
	// widest communicator); WorldSize 0 when none was seen.
	Rank, WorldSize int32
	// Devices has a bit per device the process's GPU ops ran on (DeviceBits).
	Devices   uint64
	HeldNs    uint64 // time its threads were held while cudatap hooked libraries
	FirstSeen uint64
	LastSeen  uint64
	// Other: this is not one process but those past the model's bound,
	// merged (pid OtherPID; Drops.Limits counts them).
	Other bool
}

// symbolsPerAPI bounds the symbols of one API (cudaMemcpy, cudaMemcpy_ptds).
const symbolsPerAPI = 4

// CallCounts is how many calls of each exact symbol the process made.
func (p *Process) CallCounts() map[string]int64 {
	out := map[string]int64{}
	for i, n := range p.BySymbol {
		if n == 0 {
			continue
		}
		c := Call{API: event.API(i / symbolsPerAPI), Symbol: uint8(i % symbolsPerAPI)}
		out[c.SymbolName()] += n
	}
	return out
}

// KernelSymbol says how to name the kernel launched as f: by name when a
// load-time call named it, else by the ELF symbol at addr (the runtime stub
// that launched it, or f itself for a runtime launch).
func (p *Process) KernelSymbol(f uint64) (name string, addr uint64) {
	if n := p.KernelNames[f]; n != "" {
		return n, 0
	}
	if stub, ok := p.Stubs[f]; ok {
		return "", stub
	}
	return "", f
}

// Label names the process as trace metadata shows it.
func (p *Process) Label() string {
	if p.Other {
		return fmt.Sprintf("other processes (those past %d, merged)", maxProcesses)
	}
	name := p.Info.Comm
	if name == "" {
		name = "process"
	}
	rank := ""
	if p.WorldSize > 0 {
		rank = fmt.Sprintf(", rank %d of %d", p.Rank, p.WorldSize)
	}
	if p.Info.Parent != 0 {
		rank += fmt.Sprintf(", started by %d", p.Info.Parent)
	}
	if p.Info.Container != "" {
		short := p.Info.Container
		if len(short) > 12 {
			short = short[:12]
		}
		return fmt.Sprintf("%s (pid %d%s, container %s)", name, p.PID, rank, short)
	}
	return fmt.Sprintf("%s (pid %d%s)", name, p.PID, rank)
}

// Drops says what was lost between the probes and the model. Every output
// shows it, also when all zero.
type Drops struct {
	Submitted      uint64 // records the BPF side handed to the ring buffer
	Received       uint64 // records read by user space
	RingbufFull    uint64 // lost: ring buffer full
	InflightFull   uint64 // lost: no room to remember a call's entry
	OrphanReturns  uint64 // return seen without its entry: the call began before the probes were live, or its entry was not seen
	ReadFaults     uint64 // kept, but an argument could not be read
	DecodeErrors   uint64 // lost: malformed record
	UnknownAPI     uint64 // lost: cookie names no known API
	AttachFailures uint64 // probe sets (a library's symbols, a loader hook) that could not be attached
	Nested         uint64 // launches both the runtime and the driver probe saw, counted once (not a loss)
	ProgramSkips   uint64 // lost: the kernel skipped our BPF program (recursion protection)
	// Not losses, shown so that no limit acts silently: GPU ops laid out
	// without a bound because the model's window of pending ops was full,
	// and stacks not kept because a process had too many distinct ones.
	WindowFull    uint64
	StacksDropped uint64
	// Python code objects not copied at the call (ring buffer full): their
	// frames are named from the live process, "?" once it is gone.
	PyCodeLost uint64
	// GPU times (--gpu-times): records the collector or CUPTI lost, and
	// measurements that matched no traced call, that arrived after their op
	// was drawn, or ops drawn without one (bounded instead).
	GPUTimesLost       uint64
	GPUTimesUnmatched  uint64
	GPUTimesLate       uint64
	GPUTimesUnmeasured uint64
	// Not a loss: GPU ops CUPTI timed whose calls cudatap did not trace,
	// shown from CUPTI's records alone (GPUOp.CUPTIOnly).
	GPUOpsCUPTIOnly uint64
	// What the model's bounds on processes, threads, streams and the
	// like merged or did not follow (not losses; a recording can hold any
	// number of them).
	Limits Limits
}

// Lost is the number of calls that happened while traced but are missing
// from the model. Orphan returns are not among them: their calls began
// before the probes were attached (or, rarely, their entry was evicted),
// and every output shows them separately.
func (d Drops) Lost() uint64 {
	return d.RingbufFull + d.InflightFull + d.DecodeErrors + d.UnknownAPI + d.ProgramSkips
}

// Counter is one sample of a device time series (NVML): utilization,
// memory, power, clocks. TS is on the tracer's clock.
type Counter struct {
	Device int                `json:"device"`
	Name   string             `json:"name"` // track name, e.g. "GPU 0 NVIDIA H200"
	TS     uint64             `json:"ts"`
	Values map[string]float64 `json:"values"`
}

// Result is the finished model of a recording.
type Result struct {
	Processes []*Process // sorted by PID
	Drops     Drops
	Start     uint64 // first event, ns CLOCK_MONOTONIC
	End       uint64 // last event
	// WallOffsetNs converts the monotonic clock to Unix time: unix_ns = mono_ns + WallOffsetNs.
	WallOffsetNs int64
	Counters     []Counter // device samples (NVML), time ordered
	GPU          GPUReport
	Names        *Names // what was resolved while the processes lived; never nil after Name
	// Truncated, when not "", says why the recording ends early (a killed
	// recorder): what is before the cut is complete, the drop counters of
	// the whole run are unknown.
	Truncated string
}

// Process is the process pid of the result, nil if none (Processes is
// sorted by PID).
func (r *Result) Process(pid uint32) *Process {
	i, ok := slices.BinarySearchFunc(r.Processes, pid, func(p *Process, pid uint32) int { return cmp.Compare(p.PID, pid) })
	if !ok {
		return nil
	}
	return r.Processes[i]
}

// Name attaches the name tables and fills every process's Info from them.
func (r *Result) Name(n *Names) {
	if n == nil {
		n = NewNames()
	}
	r.Names = n
	for _, p := range r.Processes {
		if info, ok := n.Procs[p.PID]; ok && !p.Other {
			p.Info = info
		}
		// The thread that stands for those past the bound is named for
		// what it is, wherever threads are named.
		if _, ok := p.Threads[OtherTID]; ok {
			if n.Threads == nil {
				n.Threads = map[NameKey]string{}
			}
			n.Threads[NameKey{PID: p.PID, Key: uint64(OtherTID)}] = "other threads"
		}
	}
}

// DeviceUnknown is the device of work cudatap cannot attribute: on a stream
// created, or by a thread that chose its device, before cudatap attached.
const DeviceUnknown int8 = -1

// maxDevices bounds the device numbers kept (one bit each in Devices masks,
// the last for DeviceUnknown).
const maxDevices = 63

func deviceBit(d int8) uint64 {
	if d < 0 || d >= maxDevices {
		return 1 << maxDevices
	}
	return 1 << uint(d)
}

// DeviceBits lists the devices of a Devices mask in order, DeviceUnknown
// last.
func DeviceBits(mask uint64) []int8 {
	var out []int8
	for d := int8(0); d < maxDevices; d++ {
		if mask&(1<<uint(d)) != 0 {
			out = append(out, d)
		}
	}
	if mask&(1<<maxDevices) != 0 {
		out = append(out, DeviceUnknown)
	}
	return out
}

// DeviceBitsOf is device d's bit in a Devices mask.
func DeviceBitsOf(d int8) uint64 { return deviceBit(d) } // exported for export/chrome
