// Package event defines the CUDA APIs cudatap hooks and decodes the records
// the BPF programs write. It is pure Go: no cilium/ebpf, no cgo.
package event

import (
	"runtime"
	"strconv"
	"strings"
)

// API identifies one hooked CUDA call (all its symbol variants together).
type API uint16

// Layer is the library an API belongs to.
type Layer uint8

const (
	Runtime Layer = iota + 1 // libcudart (shared or linked statically)
	Driver                   // libcuda.so.1
	NCCL                     // libnccl.so.2
	// NVTX is the NVIDIA Tools Extension: annotations a program makes
	// (ranges, marks), hooked where a library exports them (NVTX v2's
	// libnvToolsExt.so.1, CUDA 13's libnvtx3interop.so.1) or keeps them
	// in .symtab (PyTorch's torch.cuda.nvtx: probe.Discover); NVTX v3,
	// header-only, reaches cudatap through its injection library instead
	// (tracer/gputime, launch mode).
	NVTX
)

// Layers lists every layer, in id order.
var Layers = []Layer{Runtime, Driver, NCCL, NVTX}

func (l Layer) String() string {
	switch l {
	case Runtime:
		return "runtime"
	case Driver:
		return "driver"
	case NCCL:
		return "nccl"
	case NVTX:
		return "nvtx"
	}
	return "unknown"
}

// Category is the Chrome-trace category of a layer's host calls.
func (l Layer) Category() string {
	switch l {
	case Driver:
		return "cuda_driver"
	case NCCL:
		return "nccl"
	case NVTX:
		return AnnotationCategory
	}
	return "cuda_runtime"
}

// AnnotationCategory is the Chrome-trace category of NVTX ranges and
// marks: Kineto's for the program's own annotations (record_function,
// ProfilerStep#N), which HTA reads as such.
const AnnotationCategory = "user_annotation"

// Class says what a call does to the stream model.
type Class uint8

const (
	ClassOther Class = iota
	ClassStreamCreate
	ClassStreamDestroy
	ClassLaunch
	ClassMemcpy
	ClassMemset
	ClassEventCreate
	ClassEventDestroy
	ClassEventRecord
	ClassStreamWaitEvent
	ClassEventSync
	ClassEventQuery
	ClassStreamSync
	ClassStreamQuery
	ClassDeviceSync
	ClassMalloc
	ClassFree
	ClassHostAlloc
	ClassHostFree
	ClassHostRegister
	ClassHostUnregister
	ClassGraphLaunch
	ClassHostFunc
	ClassFuncName   // load-time calls that name a kernel handle (cuModuleGetFunction, ...)
	ClassCollective // NCCL collectives and point-to-point
	ClassGroup      // ncclGroupStart / ncclGroupEnd
	ClassCaptureBegin
	ClassCaptureEnd
	ClassGraphInstantiate
	ClassSetDevice // the calling thread's current device
	ClassCommInit  // an NCCL communicator made: rank and world size
	// ClassAnnotation: an NVTX range pushed or popped, started or ended, or
	// a mark: the program's own annotation, no CUDA work.
	ClassAnnotation
	// ClassGraph: a graph made, given a kernel node, changed or destroyed,
	// or an executable graph changed or destroyed (model: graphs.go).
	ClassGraph
)

// ABI is a calling convention the BPF programs read arguments by. A
// record's Args are argument slots: the integer argument registers in
// order, then the stack words past them. For every hooked call slot i is
// its i-th argument eightbyte on both ABIs (a dim3 by value takes two: x|y,
// then z), so Decode reads the same slots; the one exception is a struct
// larger than 16 bytes passed by value (Spec.MemArg).
type ABI uint8

const (
	// SysV is x86-64's System V ABI: rdi rsi rdx rcx r8 r9, then stack
	// word k (1-based) at [rsp+8k], above the return address at [rsp].
	SysV ABI = iota
	// AAPCS64 is arm64's: x0..x7, then stack word k at [sp+8(k-1)]; the
	// return address is in the link register x30.
	AAPCS64
)

// HostABI is the ABI of this build's BPF object: the machine's.
func HostABI() ABI {
	if runtime.GOARCH == "arm64" {
		return AAPCS64
	}
	return SysV
}

func (a ABI) String() string {
	if a == AAPCS64 {
		return "arm64 AAPCS64"
	}
	return "x86-64 System V"
}

// registers is how many integer arguments a passes in registers.
func (a ABI) registers() int {
	if a == AAPCS64 {
		return 8
	}
	return 6
}

// Spec describes one hooked API: its symbols and how the BPF side reads it.
type Spec struct {
	API     API
	Name    string // plain API name, the Chrome slice name
	Layer   Layer
	Class   Class
	Symbols []string // exact symbols; index is carried in the cookie
	// BPF behaviour, encoded into the cookie.
	//
	// Slots is how many argument slots Decode reads where that is more
	// than the six x86-64 passes in registers (0: six or fewer): the
	// probes copy the slots past an ABI's registers from the stack.
	Slots int
	// MemArg is 1 + the index of an argument passed by value that is
	// larger than 16 bytes (ncclUniqueId): x86-64 passes it on the stack,
	// in no register (the arguments after it take the registers it would
	// have), arm64 in a register that points to a copy, whose first 48
	// bytes the arm64 probe copies into Ext.
	MemArg int
	Return bool // emit at return with duration and result
	OutArg int  // 1 + index of an out-pointer read at return; 0 = none
	// DerefArg is 1 + the index of a pointer argument whose first 48
	// bytes are copied at entry, into Ext (a launch config, a graph
	// kernel node's parameters); 0 = none.
	DerefArg int
	StrArg   int // 1 + index of a C-string argument copied at entry; 0 = none
	StubArg  int // launches: index of the kernel (stub or CUfunction) argument
	// ParamsArg: launches: 1 + the slot of kernelParams, whose parameter
	// values a launch record can carry (KernelArgsCookie); 0 = none.
	ParamsArg int
	Sync      bool // the call itself may block the host on the GPU
	// Handle: the allocation is a handle to physical memory (cuMemCreate,
	// cuMemRelease), not a device address.
	Handle bool
	// DriverOnly: a driver API no runtime call makes, hooked in the driver
	// also in a process with a runtime (where the runtime covers the rest).
	DriverOnly bool
}

// stackWords is how many stack words the probes copy on abi: the slots
// Decode reads past abi's argument registers.
func (s *Spec) stackWords(abi ABI) int { return max(0, s.Slots-abi.registers()) }

// Cookie bits; keep in sync with bpf/cudatap.h.
const (
	cookieRet    = 1 << 26
	cookieDeref  = 1 << 30 // behind the argument bits 50..52 name
	CookieStack  = 1 << 31
	cookieStrArg = 33 // bits 33..35: 1 + index of a string argument
	// CookiePair makes a runtime launch probe hand its kernel stub (argument
	// StubArg) to the driver launch underneath, and emit the launch only
	// while the process's driver launches are not hooked (see the BPF side).
	CookiePair     = 1 << 36
	cookieTakeStub = 1 << 37
	// Shared probes (one link per library file for every process): the BPF
	// side decides per process whether a hit counts (see bpf/cudatap.bpf.c,
	// admit). CookieShadowed marks a driver API the runtime covers (skipped
	// in a process with a runtime), CookieRuntime a runtime API (its hit
	// marks the process as having one), CookieCgroup a probe that counts
	// only processes in the traced cgroups.
	CookieShared   = 1 << 38
	CookieShadowed = 1 << 39
	CookieRuntime  = 1 << 40
	CookieCgroup   = 1 << 41
	// CookieAggregate: a launch probe that counts the launch in BPF
	// (probe.Tracer.LaunchCounts) instead of writing a record: the agent's
	// aggregate mode.
	CookieAggregate = 1 << 42
	cookieAggStream = 43 // bits 43..46: where a launch's stream is (LaunchStreamSlot)
	// CookieAggregateTime (with CookieAggregate) also times each counted
	// launch, through a return probe on the same symbol, into a log2
	// histogram per process and API (probe.Tracer.LaunchTimes).
	CookieAggregateTime = 1 << 47
	// CookieTree: a shared probe (or the library-load hook) that counts
	// only the processes of the followed tree (record follows what its
	// command starts; probe.Tracer.AddToTree).
	CookieTree = 1 << 48
	// CookieARM64: the arm64 programs wrote the record (user space only:
	// Decode reads its slots as AAPCS64 lays them out).
	CookieARM64    = 1 << 49
	cookieDerefArg = 50 // bits 50..52: the argument cookieDeref copies behind
	// Bits 53..56: where a launch's kernelParams is (KernelArgsCookie):
	// 1..NArgs slot v-1, past that stack word v-NArgs.
	cookieKernelArgs = 53
	// A stream capture's begin and end count the process in and out of
	// capturing a CUDA graph (BPF); while it captures, a probe with
	// CookieCaptureStack takes the stack of the call, the capture site
	// of the node it becomes, whatever the stacks asked for.
	cookieCaptureBegin = 1 << 57
	cookieCaptureEnd   = 1 << 58
	CookieCaptureStack = 1 << 59
	// NVTX's Ex forms: the string is the message of the
	// nvtxEventAttributes_t copied into Ext (cookieDeref), ASCII or wide
	// as its messageType says (nvtxAttrMessage); W forms: the string
	// argument is of wchar_t, copied as bytes.
	cookieStrAttr = 1 << 60
	cookieStrWide = 1 << 61
)

// cookieHasString reports whether a record with cookie c carries a string
// in its copy[] (bpf/cudatap.h, COOKIE_STRING).
func cookieHasString(c uint64) bool {
	return c>>cookieStrArg&7 != 0 && c&CookiePair == 0 || c&cookieStrAttr != 0
}

// CookieABI is the ABI a record's arguments were read by.
func CookieABI(c uint64) ABI {
	if c&CookieARM64 != 0 {
		return AAPCS64
	}
	return SysV
}

// AggregateCookie is what a launch probe's cookie adds to count the launch
// in BPF: CookieAggregate, and where its stream is.
func (s *Spec) AggregateCookie() uint64 { return s.aggregateCookie(HostABI()) }

func (s *Spec) aggregateCookie(abi ABI) uint64 {
	return CookieAggregate | s.launchStream(abi)<<cookieAggStream
}

// launchStream says where a launch API's stream argument is at entry on
// abi, for the BPF side (bpf/cudatap.h, COOKIE_AGG_STREAM): 1..3 the k-th
// stack word, 4..7 register x4..x7 (arm64), 8+w the w-th word behind
// argument 0 (its launch config), 0 not known. Decode reads the same
// places (TestLaunchStream).
func (s *Spec) launchStream(abi ABI) uint64 {
	slot := 0
	switch s.API {
	case CudaLaunchKernel, CudaLaunchCooperativeKernel:
		slot = 7 // func, grid (2 slots), block (2), args, sharedMem, stream
	case CuLaunchKernel, CuLaunchCooperativeKernel:
		slot = 8 // f, grid x y z, block x y z, sharedMem, hStream
	case CudaLaunchKernelExC, CuLaunchKernelEx:
		return 8 + 4 // the config: grid, block, sharedMem (7 × 4 bytes, padded), then the stream
	default:
		return 0
	}
	switch regs := abi.registers(); {
	case slot >= regs:
		return uint64(slot - regs + 1) // stack word k
	case abi == AAPCS64 && slot >= 4:
		return uint64(slot) // register x4..x7
	}
	return 0
}

// AggregateUnknownStream is the stream of an aggregated launch whose stream
// could not be read.
const AggregateUnknownStream = ^uint64(0)

// LaunchKey is what launches counted in BPF are counted by.
type LaunchKey struct {
	API    API
	Stream uint64 // the handle (0 legacy, 2 per-thread), or AggregateUnknownStream
}

// TimeHistogram is a log2 histogram of call times kept in BPF: Count[b]
// calls took [2^b, 2^(b+1)) ns (bucket 0 also holds 0 and 1 ns), Ns[b]
// nanoseconds in all.
type TimeHistogram struct {
	Count, Ns [64]uint64
}

// Sub takes o out of h (o: an earlier reading of the same histogram).
func (h *TimeHistogram) Sub(o *TimeHistogram) {
	for b := range h.Count {
		h.Count[b] -= min(h.Count[b], o.Count[b])
		h.Ns[b] -= min(h.Ns[b], o.Ns[b])
	}
}

// Aggregates is what BPF counted in aggregate mode since the probes were
// loaded, per process: launches per API and stream, and, when asked,
// launch times per API. TimesLost counts launches whose time found no room
// (counted, their time not kept).
type Aggregates struct {
	Launches  map[uint32]map[LaunchKey]uint64
	Times     map[uint32]map[API]*TimeHistogram
	TimesLost uint64
	// Final lists the processes (exited) whose counts these are for the
	// last time: BPF forgets them next, and their PIDs may come back as
	// new processes counting from zero.
	Final []uint32
}

// PairCookie is the cookie of runtime launch symbol sym when the driver
// counts launches.
func (s *Spec) PairCookie(sym int) uint64 { return s.pairCookie(HostABI(), sym) }

func (s *Spec) pairCookie(abi ABI, sym int) uint64 {
	return s.cookie(abi, sym) | CookiePair | uint64(s.StubArg+1)<<cookieStrArg
}

// Cookie returns the attach cookie for symbol index sym of s, for this
// build's BPF object.
func (s *Spec) Cookie(sym int) uint64 { return s.cookie(HostABI(), sym) }

// cookie is Cookie for the BPF object that reads arguments as abi passes
// them.
func (s *Spec) cookie(abi ABI, sym int) uint64 {
	c := uint64(s.API) | uint64(sym&0xff)<<16 | uint64(s.stackWords(abi)&3)<<24 | uint64(s.OutArg&7)<<27
	if s.Return {
		c |= cookieRet
	}
	if s.DerefArg != 0 {
		c |= cookieDeref | uint64((s.DerefArg-1)&7)<<cookieDerefArg
	}
	if abi == AAPCS64 {
		c |= CookieARM64
		if s.MemArg != 0 {
			c |= cookieDeref | uint64((s.MemArg-1)&7)<<cookieDerefArg
		}
	}
	c |= uint64(s.StrArg&7) << cookieStrArg
	if s.Layer == NVTX {
		c = c&^(7<<cookieStrArg) | nvtxCookie(s.Symbol(sym))
	}
	if s.Layer == Driver && s.Class == ClassLaunch {
		c |= cookieTakeStub
	}
	switch s.Class {
	case ClassCaptureBegin:
		c |= cookieCaptureBegin
	case ClassCaptureEnd:
		c |= cookieCaptureEnd
	}
	return c
}

// Enqueues reports whether a call of s may enqueue GPU work, which a
// stream capture records as a graph node (CookieCaptureStack).
func (s *Spec) Enqueues() bool {
	switch s.Class {
	case ClassLaunch, ClassMemcpy, ClassMemset, ClassCollective, ClassHostFunc, ClassGraphLaunch:
		return true
	}
	return false
}

// KernelArgsCookie is what a launch probe's cookie adds to copy the
// kernel's parameter values behind the record (KernelArgs), for this
// build's BPF object; 0 for an API without kernelParams.
func (s *Spec) KernelArgsCookie() uint64 { return s.kernelArgsCookie(HostABI()) }

func (s *Spec) kernelArgsCookie(abi ABI) uint64 {
	if s.ParamsArg == 0 {
		return 0
	}
	slot := s.ParamsArg - 1
	where := slot + 1 // a register, in args[]
	if slot >= abi.registers() {
		where = NArgs + slot - abi.registers() + 1 // a stack word past the registers
	}
	return uint64(where&0xf) << cookieKernelArgs
}

// CookieHasKernelArgs reports whether a record with cookie c ends with its
// kernel's parameter values.
func CookieHasKernelArgs(c uint64) bool { return c>>cookieKernelArgs&0xf != 0 }

// CookieAPI and CookieSymbol take a cookie apart.
func CookieAPI(c uint64) API       { return API(c & 0xffff) }
func CookieSymbol(c uint64) int    { return int(c>>16) & 0xff }
func CookieHasStack(c uint64) bool { return c&CookieStack != 0 }

// Runtime API ids. Values are part of the recording format: append only.
const (
	CudaStreamCreate API = iota + 1
	CudaStreamCreateWithFlags
	CudaStreamCreateWithPriority
	CudaStreamDestroy
	CudaLaunchKernel
	CudaLaunchKernelExC
	CudaLaunchCooperativeKernel
	CudaMemcpy
	CudaMemcpyAsync
	CudaMemcpy2D
	CudaMemcpy2DAsync
	CudaMemset
	CudaMemsetAsync
	CudaEventCreate
	CudaEventCreateWithFlags
	CudaEventDestroy
	CudaEventRecord
	CudaEventRecordWithFlags
	CudaStreamWaitEvent
	CudaEventSynchronize
	CudaEventQuery
	CudaStreamSynchronize
	CudaStreamQuery
	CudaDeviceSynchronize
	CudaMalloc
	CudaFree
	CudaMallocAsync
	CudaFreeAsync
	CudaHostAlloc
	CudaMallocHost
	CudaFreeHost
	CudaHostRegister
	CudaHostUnregister
	CudaGraphLaunch
	CudaLaunchHostFunc

	// Driver API (libcuda.so.1).
	CuLaunchKernel
	CuLaunchKernelEx
	CuLaunchCooperativeKernel
	CuMemcpyHtoDAsync
	CuMemcpyDtoHAsync
	CuMemcpyDtoDAsync
	CuMemcpyAsync
	CuMemcpyHtoD
	CuMemcpyDtoH
	CuMemsetD8Async
	CuMemsetD32Async
	CuEventRecord
	CuEventRecordWithFlags
	CuStreamWaitEvent
	CuEventSynchronize
	CuEventQuery
	CuStreamCreate
	CuStreamCreateWithPriority
	CuStreamDestroy
	CuStreamSynchronize
	CuStreamQuery
	CuCtxSynchronize
	CuMemAlloc
	CuMemFree
	CuMemAllocAsync
	CuMemFreeAsync
	CuMemHostAlloc
	CuMemAllocHost
	CuMemFreeHost
	CuMemHostRegister
	CuMemHostUnregister
	CuGraphLaunch
	CuModuleGetFunction
	CuLibraryGetKernel
	CuKernelGetFunction

	// NCCL (libnccl.so.2).
	NcclAllReduce
	NcclBroadcast
	NcclReduce
	NcclAllGather
	NcclReduceScatter
	NcclSend
	NcclRecv
	NcclGroupStart
	NcclGroupEnd

	// CUDA graph capture (appended: ids are part of the recording format).
	CudaStreamBeginCapture
	CudaStreamEndCapture
	CudaGraphInstantiate
	CudaGraphInstantiateWithFlags
	CuStreamBeginCapture
	CuStreamEndCapture
	CuGraphInstantiate

	// The calling thread's device (appended).
	CudaSetDevice

	// NCCL communicators (appended).
	NcclCommInitRank

	// Device allocations besides cudaMalloc and cuMemAlloc (appended):
	// managed, pitched, from a memory pool, and the driver's physical
	// memory (cuMemCreate: PyTorch's expandable segments, NCCL's buffers).
	CudaMallocManaged
	CudaMallocPitch
	CudaMallocFromPoolAsync
	CuMemAllocManaged
	CuMemAllocPitch
	CuMemAllocFromPoolAsync
	CuMemCreate
	CuMemRelease

	// NVTX (appended): the program's annotations. A message is copied as
	// a string (Args.Ptr keys it: MessageKey); the injection library's
	// records (tracer/gputime) carry the same APIs, with the domain in
	// Ext[0] and the message of any NVTX call (Ex, W and domain variants).
	NvtxRangePushA
	NvtxRangePop
	NvtxRangeStartA
	NvtxRangeEnd
	NvtxMarkA

	// Graphs built node by node, changed and destroyed (appended): with
	// stream capture (above), what the model needs to follow the nodes a
	// graph launch runs.
	CudaGraphCreate
	CudaGraphAddKernelNode
	CudaGraphExecKernelNodeSetParams
	CudaGraphExecUpdate
	CudaGraphDestroy
	CudaGraphExecDestroy
	CuGraphCreate
	CuGraphAddKernelNode
	CuGraphExecKernelNodeSetParams
	CuGraphExecUpdate
	CuGraphDestroy
	CuGraphExecDestroy
	numAPIs
)

var specs = [...]Spec{
	{API: CudaStreamCreate, Name: "cudaStreamCreate", Class: ClassStreamCreate, Return: true, OutArg: 1},
	{API: CudaStreamCreateWithFlags, Name: "cudaStreamCreateWithFlags", Class: ClassStreamCreate, Return: true, OutArg: 1},
	{API: CudaStreamCreateWithPriority, Name: "cudaStreamCreateWithPriority", Class: ClassStreamCreate, Return: true, OutArg: 1},
	{API: CudaStreamDestroy, Name: "cudaStreamDestroy", Class: ClassStreamDestroy},
	// CUDA 13's generated host stubs launch through __cudaLaunchKernel, with
	// the same arguments but a kernel handle (from __cudaGetKernel) for the
	// stub.
	{API: CudaLaunchKernel, Name: "cudaLaunchKernel", Class: ClassLaunch, Slots: 8, ParamsArg: 1 + 5,
		Symbols: []string{"cudaLaunchKernel", "cudaLaunchKernel_ptsz", "__cudaLaunchKernel", "__cudaLaunchKernel_ptsz"}},
	{API: CudaLaunchKernelExC, Name: "cudaLaunchKernelExC", Class: ClassLaunch, DerefArg: 1, StubArg: 1, ParamsArg: 1 + 2, Symbols: ptsz("cudaLaunchKernelExC")},
	{API: CudaLaunchCooperativeKernel, Name: "cudaLaunchCooperativeKernel", Class: ClassLaunch, Slots: 8, ParamsArg: 1 + 5, Symbols: ptsz("cudaLaunchCooperativeKernel")},
	{API: CudaMemcpy, Name: "cudaMemcpy", Class: ClassMemcpy, Return: true, Sync: true, Symbols: ptds("cudaMemcpy")},
	{API: CudaMemcpyAsync, Name: "cudaMemcpyAsync", Class: ClassMemcpy, Return: true, Symbols: ptsz("cudaMemcpyAsync")},
	{API: CudaMemcpy2D, Name: "cudaMemcpy2D", Class: ClassMemcpy, Return: true, Sync: true, Slots: 7, Symbols: ptds("cudaMemcpy2D")},
	{API: CudaMemcpy2DAsync, Name: "cudaMemcpy2DAsync", Class: ClassMemcpy, Return: true, Slots: 8, Symbols: ptsz("cudaMemcpy2DAsync")},
	{API: CudaMemset, Name: "cudaMemset", Class: ClassMemset, Return: true, Sync: true, Symbols: ptds("cudaMemset")},
	{API: CudaMemsetAsync, Name: "cudaMemsetAsync", Class: ClassMemset, Symbols: ptsz("cudaMemsetAsync")},
	{API: CudaEventCreate, Name: "cudaEventCreate", Class: ClassEventCreate, Return: true, OutArg: 1},
	{API: CudaEventCreateWithFlags, Name: "cudaEventCreateWithFlags", Class: ClassEventCreate, Return: true, OutArg: 1},
	{API: CudaEventDestroy, Name: "cudaEventDestroy", Class: ClassEventDestroy},
	{API: CudaEventRecord, Name: "cudaEventRecord", Class: ClassEventRecord, Symbols: ptsz("cudaEventRecord")},
	{API: CudaEventRecordWithFlags, Name: "cudaEventRecordWithFlags", Class: ClassEventRecord, Symbols: ptsz("cudaEventRecordWithFlags")},
	{API: CudaStreamWaitEvent, Name: "cudaStreamWaitEvent", Class: ClassStreamWaitEvent, Symbols: ptsz("cudaStreamWaitEvent")},
	{API: CudaEventSynchronize, Name: "cudaEventSynchronize", Class: ClassEventSync, Return: true, Sync: true},
	{API: CudaEventQuery, Name: "cudaEventQuery", Class: ClassEventQuery, Return: true},
	{API: CudaStreamSynchronize, Name: "cudaStreamSynchronize", Class: ClassStreamSync, Return: true, Sync: true, Symbols: ptsz("cudaStreamSynchronize")},
	{API: CudaStreamQuery, Name: "cudaStreamQuery", Class: ClassStreamQuery, Return: true, Symbols: ptsz("cudaStreamQuery")},
	{API: CudaDeviceSynchronize, Name: "cudaDeviceSynchronize", Class: ClassDeviceSync, Return: true, Sync: true},
	{API: CudaMalloc, Name: "cudaMalloc", Class: ClassMalloc, Return: true, OutArg: 1},
	{API: CudaFree, Name: "cudaFree", Class: ClassFree, Return: true, Sync: true},
	{API: CudaMallocAsync, Name: "cudaMallocAsync", Class: ClassMalloc, Return: true, OutArg: 1, Symbols: ptsz("cudaMallocAsync")},
	{API: CudaFreeAsync, Name: "cudaFreeAsync", Class: ClassFree, Symbols: ptsz("cudaFreeAsync")},
	{API: CudaHostAlloc, Name: "cudaHostAlloc", Class: ClassHostAlloc, Return: true, OutArg: 1},
	{API: CudaMallocHost, Name: "cudaMallocHost", Class: ClassHostAlloc, Return: true, OutArg: 1},
	{API: CudaFreeHost, Name: "cudaFreeHost", Class: ClassHostFree, Return: true},
	{API: CudaHostRegister, Name: "cudaHostRegister", Class: ClassHostRegister, Return: true},
	{API: CudaHostUnregister, Name: "cudaHostUnregister", Class: ClassHostUnregister},
	{API: CudaGraphLaunch, Name: "cudaGraphLaunch", Class: ClassGraphLaunch, Symbols: ptsz("cudaGraphLaunch")},
	{API: CudaLaunchHostFunc, Name: "cudaLaunchHostFunc", Class: ClassHostFunc, Symbols: ptsz("cudaLaunchHostFunc")},

	// cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shmem, stream, params, extra): the
	// stream is slot 8 (x86-64: bz, shmem and stream are stack words 1..3;
	// arm64: stream is stack word 1); params, slot 9, is read only for the
	// parameter values behind it (stack word 4 / 2); extra is not read.
	{API: CuLaunchKernel, Name: "cuLaunchKernel", Layer: Driver, Class: ClassLaunch, Slots: 9, ParamsArg: 1 + 9, Symbols: ptsz("cuLaunchKernel")},
	{API: CuLaunchKernelEx, Name: "cuLaunchKernelEx", Layer: Driver, Class: ClassLaunch, DerefArg: 1, StubArg: 1, ParamsArg: 1 + 2, Symbols: ptsz("cuLaunchKernelEx")},
	{API: CuLaunchCooperativeKernel, Name: "cuLaunchCooperativeKernel", Layer: Driver, Class: ClassLaunch, Slots: 9, ParamsArg: 1 + 9, Symbols: ptsz("cuLaunchCooperativeKernel")},
	{API: CuMemcpyHtoDAsync, Name: "cuMemcpyHtoDAsync", Layer: Driver, Class: ClassMemcpy, Return: true, Symbols: v2ptsz("cuMemcpyHtoDAsync")},
	{API: CuMemcpyDtoHAsync, Name: "cuMemcpyDtoHAsync", Layer: Driver, Class: ClassMemcpy, Return: true, Symbols: v2ptsz("cuMemcpyDtoHAsync")},
	{API: CuMemcpyDtoDAsync, Name: "cuMemcpyDtoDAsync", Layer: Driver, Class: ClassMemcpy, Return: true, Symbols: v2ptsz("cuMemcpyDtoDAsync")},
	{API: CuMemcpyAsync, Name: "cuMemcpyAsync", Layer: Driver, Class: ClassMemcpy, Return: true, Symbols: ptsz("cuMemcpyAsync")},
	{API: CuMemcpyHtoD, Name: "cuMemcpyHtoD", Layer: Driver, Class: ClassMemcpy, Return: true, Sync: true, Symbols: []string{"cuMemcpyHtoD_v2"}},
	{API: CuMemcpyDtoH, Name: "cuMemcpyDtoH", Layer: Driver, Class: ClassMemcpy, Return: true, Sync: true, Symbols: []string{"cuMemcpyDtoH_v2"}},
	{API: CuMemsetD8Async, Name: "cuMemsetD8Async", Layer: Driver, Class: ClassMemset, Symbols: ptsz("cuMemsetD8Async")},
	{API: CuMemsetD32Async, Name: "cuMemsetD32Async", Layer: Driver, Class: ClassMemset, Symbols: ptsz("cuMemsetD32Async")},
	{API: CuEventRecord, Name: "cuEventRecord", Layer: Driver, Class: ClassEventRecord, Symbols: ptsz("cuEventRecord")},
	{API: CuEventRecordWithFlags, Name: "cuEventRecordWithFlags", Layer: Driver, Class: ClassEventRecord, Symbols: ptsz("cuEventRecordWithFlags")},
	{API: CuStreamWaitEvent, Name: "cuStreamWaitEvent", Layer: Driver, Class: ClassStreamWaitEvent, Symbols: ptsz("cuStreamWaitEvent")},
	{API: CuEventSynchronize, Name: "cuEventSynchronize", Layer: Driver, Class: ClassEventSync, Return: true, Sync: true},
	{API: CuEventQuery, Name: "cuEventQuery", Layer: Driver, Class: ClassEventQuery, Return: true},
	{API: CuStreamCreate, Name: "cuStreamCreate", Layer: Driver, Class: ClassStreamCreate, Return: true, OutArg: 1},
	{API: CuStreamCreateWithPriority, Name: "cuStreamCreateWithPriority", Layer: Driver, Class: ClassStreamCreate, Return: true, OutArg: 1},
	{API: CuStreamDestroy, Name: "cuStreamDestroy", Layer: Driver, Class: ClassStreamDestroy, Symbols: []string{"cuStreamDestroy_v2"}},
	{API: CuStreamSynchronize, Name: "cuStreamSynchronize", Layer: Driver, Class: ClassStreamSync, Return: true, Sync: true, Symbols: ptsz("cuStreamSynchronize")},
	{API: CuStreamQuery, Name: "cuStreamQuery", Layer: Driver, Class: ClassStreamQuery, Return: true, Symbols: ptsz("cuStreamQuery")},
	{API: CuCtxSynchronize, Name: "cuCtxSynchronize", Layer: Driver, Class: ClassDeviceSync, Return: true, Sync: true},
	{API: CuMemAlloc, Name: "cuMemAlloc", Layer: Driver, Class: ClassMalloc, Return: true, OutArg: 1, Symbols: []string{"cuMemAlloc_v2"}},
	{API: CuMemFree, Name: "cuMemFree", Layer: Driver, Class: ClassFree, Return: true, Sync: true, Symbols: []string{"cuMemFree_v2"}},
	{API: CuMemAllocAsync, Name: "cuMemAllocAsync", Layer: Driver, Class: ClassMalloc, Return: true, OutArg: 1, Symbols: ptsz("cuMemAllocAsync")},
	{API: CuMemFreeAsync, Name: "cuMemFreeAsync", Layer: Driver, Class: ClassFree, Symbols: ptsz("cuMemFreeAsync")},
	{API: CuMemHostAlloc, Name: "cuMemHostAlloc", Layer: Driver, Class: ClassHostAlloc, Return: true, OutArg: 1},
	{API: CuMemAllocHost, Name: "cuMemAllocHost", Layer: Driver, Class: ClassHostAlloc, Return: true, OutArg: 1, Symbols: []string{"cuMemAllocHost_v2"}},
	{API: CuMemFreeHost, Name: "cuMemFreeHost", Layer: Driver, Class: ClassHostFree, Return: true},
	{API: CuMemHostRegister, Name: "cuMemHostRegister", Layer: Driver, Class: ClassHostRegister, Return: true, Symbols: []string{"cuMemHostRegister_v2"}},
	{API: CuMemHostUnregister, Name: "cuMemHostUnregister", Layer: Driver, Class: ClassHostUnregister},
	{API: CuGraphLaunch, Name: "cuGraphLaunch", Layer: Driver, Class: ClassGraphLaunch, Symbols: ptsz("cuGraphLaunch")},
	{API: CuModuleGetFunction, Name: "cuModuleGetFunction", Layer: Driver, Class: ClassFuncName, Return: true, OutArg: 1, StrArg: 3},
	{API: CuLibraryGetKernel, Name: "cuLibraryGetKernel", Layer: Driver, Class: ClassFuncName, Return: true, OutArg: 1, StrArg: 3},
	{API: CuKernelGetFunction, Name: "cuKernelGetFunction", Layer: Driver, Class: ClassFuncName, Return: true, OutArg: 1},

	// NCCL: nccl* are weak aliases of pnccl*; one probe serves both.
	{API: NcclAllReduce, Name: "ncclAllReduce", Layer: NCCL, Class: ClassCollective, Slots: 7},
	{API: NcclBroadcast, Name: "ncclBroadcast", Layer: NCCL, Class: ClassCollective, Slots: 7},
	{API: NcclReduce, Name: "ncclReduce", Layer: NCCL, Class: ClassCollective, Slots: 8},
	{API: NcclAllGather, Name: "ncclAllGather", Layer: NCCL, Class: ClassCollective},
	{API: NcclReduceScatter, Name: "ncclReduceScatter", Layer: NCCL, Class: ClassCollective, Slots: 7},
	{API: NcclSend, Name: "ncclSend", Layer: NCCL, Class: ClassCollective},
	{API: NcclRecv, Name: "ncclRecv", Layer: NCCL, Class: ClassCollective},
	{API: NcclGroupStart, Name: "ncclGroupStart", Layer: NCCL, Class: ClassGroup},
	{API: NcclGroupEnd, Name: "ncclGroupEnd", Layer: NCCL, Class: ClassGroup},

	// Graph capture: work enqueued on a capturing stream is recorded into a
	// graph, not executed; a graph launch replays it.
	{API: CudaStreamBeginCapture, Name: "cudaStreamBeginCapture", Class: ClassCaptureBegin, Return: true, Symbols: ptsz("cudaStreamBeginCapture")},
	{API: CudaStreamEndCapture, Name: "cudaStreamEndCapture", Class: ClassCaptureEnd, Return: true, OutArg: 2, Symbols: ptsz("cudaStreamEndCapture")},
	{API: CudaGraphInstantiate, Name: "cudaGraphInstantiate", Class: ClassGraphInstantiate, Return: true, OutArg: 1},
	{API: CudaGraphInstantiateWithFlags, Name: "cudaGraphInstantiateWithFlags", Class: ClassGraphInstantiate, Return: true, OutArg: 1},
	{API: CuStreamBeginCapture, Name: "cuStreamBeginCapture", Layer: Driver, Class: ClassCaptureBegin, Return: true,
		Symbols: []string{"cuStreamBeginCapture_v2", "cuStreamBeginCapture_v2_ptsz"}},
	{API: CuStreamEndCapture, Name: "cuStreamEndCapture", Layer: Driver, Class: ClassCaptureEnd, Return: true, OutArg: 2, Symbols: ptsz("cuStreamEndCapture")},
	{API: CuGraphInstantiate, Name: "cuGraphInstantiateWithFlags", Layer: Driver, Class: ClassGraphInstantiate, Return: true, OutArg: 1},

	// Streams created, and work enqueued on the default streams, belong to
	// the calling thread's current device. Rare; its result matters.
	{API: CudaSetDevice, Name: "cudaSetDevice", Class: ClassSetDevice, Return: true},

	// NCCL communicators: (comm*, nranks, ncclUniqueId by value — 128
	// bytes —, rank). The id's first word, a random magic every rank of
	// the communicator shares, tells communicators apart across processes.
	// x86-64 passes the id on the stack (its first word is slot 6, stack
	// word 1) and the rank in the third register; arm64 a pointer to a
	// copy of the id in x2 (copied into Ext) and the rank in x3. The new
	// comm is read at return.
	{API: NcclCommInitRank, Name: "ncclCommInitRank", Layer: NCCL, Class: ClassCommInit, Return: true, OutArg: 1, Slots: 7, MemArg: 3},

	// Device allocations: each may fail for want of memory, and the
	// model tells the out-of-memory failures (its ret) apart.
	{API: CudaMallocManaged, Name: "cudaMallocManaged", Class: ClassMalloc, Return: true, OutArg: 1},
	{API: CudaMallocPitch, Name: "cudaMallocPitch", Class: ClassMalloc, Return: true, OutArg: 1},
	{API: CudaMallocFromPoolAsync, Name: "cudaMallocFromPoolAsync", Class: ClassMalloc, Return: true, OutArg: 1, Symbols: ptsz("cudaMallocFromPoolAsync")},
	{API: CuMemAllocManaged, Name: "cuMemAllocManaged", Layer: Driver, Class: ClassMalloc, Return: true, OutArg: 1},
	{API: CuMemAllocPitch, Name: "cuMemAllocPitch", Layer: Driver, Class: ClassMalloc, Return: true, OutArg: 1, Symbols: []string{"cuMemAllocPitch_v2"}},
	{API: CuMemAllocFromPoolAsync, Name: "cuMemAllocFromPoolAsync", Layer: Driver, Class: ClassMalloc, Return: true, OutArg: 1, Symbols: ptsz("cuMemAllocFromPoolAsync")},
	// Physical memory by handle, mapped with cuMemMap: no runtime API
	// makes these, so they are hooked under a runtime too.
	{API: CuMemCreate, Name: "cuMemCreate", Layer: Driver, Class: ClassMalloc, Return: true, OutArg: 1, Handle: true, DriverOnly: true},
	{API: CuMemRelease, Name: "cuMemRelease", Layer: Driver, Class: ClassFree, Handle: true, DriverOnly: true},

	// NVTX: nvtxRangePushA(message), nvtxRangePop(), nvtxRangeStartA(message)
	// → id (read at return), nvtxRangeEnd(id), nvtxMarkA(message). Each
	// API's other symbols are its other forms (nvtxCookie): W (a wchar_t
	// message), Ex (an nvtxEventAttributes_t *), and the domain's (the
	// domain handle first). They are one API each, as the injection
	// library reports every form: a pop closes the range any push form
	// opened.
	{API: NvtxRangePushA, Name: "nvtxRangePushA", Layer: NVTX, Class: ClassAnnotation, StrArg: 1,
		Symbols: []string{"nvtxRangePushA", "nvtxRangePushW", "nvtxRangePushEx", "nvtxDomainRangePushEx"}},
	{API: NvtxRangePop, Name: "nvtxRangePop", Layer: NVTX, Class: ClassAnnotation,
		Symbols: []string{"nvtxRangePop", "nvtxDomainRangePop"}},
	{API: NvtxRangeStartA, Name: "nvtxRangeStartA", Layer: NVTX, Class: ClassAnnotation, Return: true, StrArg: 1,
		Symbols: []string{"nvtxRangeStartA", "nvtxRangeStartW", "nvtxRangeStartEx", "nvtxDomainRangeStartEx"}},
	{API: NvtxRangeEnd, Name: "nvtxRangeEnd", Layer: NVTX, Class: ClassAnnotation,
		Symbols: []string{"nvtxRangeEnd", "nvtxDomainRangeEnd"}},
	{API: NvtxMarkA, Name: "nvtxMarkA", Layer: NVTX, Class: ClassAnnotation, StrArg: 1,
		Symbols: []string{"nvtxMarkA", "nvtxMarkW", "nvtxMarkEx", "nvtxDomainMarkEx"}},

	// Graphs: cudaGraphCreate(cudaGraph_t *, flags) → the graph;
	// cudaGraphAddKernelNode(cudaGraphNode_t *, graph, deps, n, const
	// cudaKernelNodeParams *) → the node, and the parameters (func, grid,
	// block: the driver's CUDA_KERNEL_NODE_PARAMS has the same prefix);
	// cudaGraphExecKernelNodeSetParams(exec, node, params *);
	// cudaGraphExecUpdate(exec, graph, resultInfo *); the destroys. The
	// driver's v1 symbols take the same arguments as far as they are read.
	{API: CudaGraphCreate, Name: "cudaGraphCreate", Class: ClassGraph, Return: true, OutArg: 1},
	{API: CudaGraphAddKernelNode, Name: "cudaGraphAddKernelNode", Class: ClassGraph, Return: true, OutArg: 1, DerefArg: 1 + 4},
	{API: CudaGraphExecKernelNodeSetParams, Name: "cudaGraphExecKernelNodeSetParams", Class: ClassGraph, Return: true, DerefArg: 1 + 2},
	{API: CudaGraphExecUpdate, Name: "cudaGraphExecUpdate", Class: ClassGraph, Return: true},
	{API: CudaGraphDestroy, Name: "cudaGraphDestroy", Class: ClassGraph},
	{API: CudaGraphExecDestroy, Name: "cudaGraphExecDestroy", Class: ClassGraph},
	{API: CuGraphCreate, Name: "cuGraphCreate", Layer: Driver, Class: ClassGraph, Return: true, OutArg: 1},
	{API: CuGraphAddKernelNode, Name: "cuGraphAddKernelNode", Layer: Driver, Class: ClassGraph, Return: true, OutArg: 1, DerefArg: 1 + 4,
		Symbols: []string{"cuGraphAddKernelNode_v2", "cuGraphAddKernelNode"}},
	{API: CuGraphExecKernelNodeSetParams, Name: "cuGraphExecKernelNodeSetParams", Layer: Driver, Class: ClassGraph, Return: true, DerefArg: 1 + 2,
		Symbols: []string{"cuGraphExecKernelNodeSetParams_v2", "cuGraphExecKernelNodeSetParams"}},
	{API: CuGraphExecUpdate, Name: "cuGraphExecUpdate", Layer: Driver, Class: ClassGraph, Return: true,
		Symbols: []string{"cuGraphExecUpdate_v2", "cuGraphExecUpdate"}},
	{API: CuGraphDestroy, Name: "cuGraphDestroy", Layer: Driver, Class: ClassGraph},
	{API: CuGraphExecDestroy, Name: "cuGraphExecDestroy", Layer: Driver, Class: ClassGraph},
}

// nvtxCookie is what the cookie of NVTX symbol sym says about its form:
// where its message is. nvtxDomain* take the domain handle first.
func nvtxCookie(sym string) uint64 {
	msg := uint64(0) // the argument the message is in, or behind
	if nvtxDomainForm(sym) {
		msg = 1
	}
	switch {
	case strings.HasSuffix(sym, "Ex"):
		return cookieDeref | msg<<cookieDerefArg | cookieStrAttr
	case strings.HasSuffix(sym, "W"):
		return (msg+1)<<cookieStrArg | cookieStrWide
	case strings.HasSuffix(sym, "A"):
		return (msg + 1) << cookieStrArg
	}
	return 0
}

// nvtxDomainForm reports whether NVTX symbol sym takes a domain handle
// as its first argument.
func nvtxDomainForm(sym string) bool { return strings.HasPrefix(sym, "nvtxDomain") }

// The per-thread-default-stream builds export each stream call twice.
func ptsz(name string) []string { return []string{name, name + "_ptsz"} }
func ptds(name string) []string { return []string{name, name + "_ptds"} }

// The driver's copies exist as name_v2 (the real symbol) and name_v2_ptsz.
func v2ptsz(name string) []string { return []string{name + "_v2", name + "_v2_ptsz"} }

func init() {
	for i := range specs {
		s := &specs[i]
		if s.API != API(i+1) {
			panic("event: spec table out of order at " + s.Name)
		}
		if s.Layer == 0 {
			s.Layer = Runtime
		}
		if s.Symbols == nil {
			s.Symbols = []string{s.Name}
		}
	}
}

// Lookup returns the spec of an API, or nil for an unknown id (a corrupt or
// newer recording).
func Lookup(a API) *Spec {
	if a == 0 || int(a) > len(specs) {
		return nil
	}
	return &specs[a-1]
}

// Specs returns every hooked API of a layer, in id order.
func Specs(l Layer) []*Spec {
	var out []*Spec
	for i := range specs {
		if specs[i].Layer == l {
			out = append(out, &specs[i])
		}
	}
	return out
}

// Name of the API, or "api#N" for an unknown id.
func (a API) String() string {
	if s := Lookup(a); s != nil {
		return s.Name
	}
	return "api#" + strconv.Itoa(int(a))
}

// Symbol returns the exact symbol name for a cookie's symbol index.
func (s *Spec) Symbol(i int) string {
	if i >= 0 && i < len(s.Symbols) {
		return s.Symbols[i]
	}
	return s.Name
}

// PerThreadDefault reports whether symbol index i is a per-thread default
// stream variant (_ptsz/_ptds), where stream handle 0 means the calling
// thread's own default stream.
func (s *Spec) PerThreadDefault(i int) bool {
	sym := s.Symbol(i)
	n := len(sym)
	return n > 5 && (sym[n-5:] == "_ptsz" || sym[n-5:] == "_ptds")
}

// LibraryLoad is the pseudo-API of the dynamic linker hook (_dl_debug_state):
// its records tell the tracer to rescan a process for new CUDA libraries and
// never reach the model.
const LibraryLoad API = 0xfff0

// ProcessFork and ProcessExec are the pseudo-APIs of the followed tree's
// records: a process of the tree started one (Args[0]: its parent's pid;
// Args[1:3]: its comm), or executed a program (Args[0:2]: the new comm;
// CookieStop when it is stopped there until the tracer hooked what it
// maps). Like LibraryLoad, they never reach the model as calls.
const (
	ProcessFork API = 0xfff2
	ProcessExec API = 0xfff3
)

// CUPTIClient and CUPTIReleased are the pseudo-APIs of the watch on a
// libcupti cudatap's collector holds (probe.AttachCUPTIWatch): a thread
// entered cuptiSubscribe or cuptiActivityRegisterCallbacks, the process
// stopped there (CookieStop) until the tracer let CUPTI go; a thread
// returned from cuptiFinalize. They never reach the model as calls.
const (
	CUPTIClient   API = 0xfff4
	CUPTIReleased API = 0xfff5
)

// Auxiliary reports whether api is a pseudo-API (a library load, the
// followed tree's records, the CUPTI watch's): records the tracer acts
// on, never CUDA calls.
func Auxiliary(api API) bool {
	return api == LibraryLoad || api == ProcessFork || api == ProcessExec || api == CUPTIClient || api == CUPTIReleased
}

// RuntimeLaunch is the runtime API that makes driver launch api underneath
// (cuLaunchKernelEx: cudaLaunchKernelExC), 0 when api is none.
func RuntimeLaunch(api API) API {
	switch api {
	case CuLaunchKernel:
		return CudaLaunchKernel
	case CuLaunchKernelEx:
		return CudaLaunchKernelExC
	case CuLaunchCooperativeKernel:
		return CudaLaunchCooperativeKernel
	}
	return 0
}

// CookieStop asks the library-load hook to stop the process until the
// tracer has hooked what was loaded (used for processes cudatap launches).
const CookieStop = 1 << 32

// ProbeSymbol is the symbol whose presence identifies a layer's library.
func (l Layer) ProbeSymbol() string {
	switch l {
	case Runtime:
		return "cudaLaunchKernel"
	case Driver:
		return "cuLaunchKernel"
	case NCCL:
		return "ncclAllReduce"
	case NVTX:
		return "nvtxRangePushA"
	}
	return ""
}
