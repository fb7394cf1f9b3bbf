package event

import (
	"encoding/binary"
	"unicode/utf8"
)

// Dim3 is CUDA's dim3.
type Dim3 struct{ X, Y, Z uint32 }

// MemcpyKind is cudaMemcpyKind.
type MemcpyKind uint8

const (
	HostToHost MemcpyKind = iota
	HostToDevice
	DeviceToHost
	DeviceToDevice
	DefaultKind // direction inferred from pointers (UVA)
)

func (k MemcpyKind) String() string {
	switch k {
	case HostToHost:
		return "HtoH"
	case HostToDevice:
		return "HtoD"
	case DeviceToHost:
		return "DtoH"
	case DeviceToDevice:
		return "DtoD"
	case DefaultKind:
		return "Default"
	}
	return "unknown"
}

// Args are the arguments of a call, named. Which fields mean anything
// depends on the API's Class; HasStream says whether the call takes a stream.
// The small fields come last: every modeled call keeps its Args, so padding
// costs memory bandwidth on the hot path.
type Args struct {
	Stream    uint64
	Func      uint64 // kernel host stub or host function
	Grid      Dim3
	Block     Dim3
	SharedMem uint64
	Dst, Src  uint64
	Bytes     uint64
	Event     uint64 // a CUDA event; NVTX: the id of a started range
	Flags     uint32
	Priority  int32
	Ptr       uint64 // allocation, pinned range, graph exec; the handle a load-time call names; NVTX: the message (MessageKey)
	Graph     uint64 // the graph a capture made or an instantiation used; the graph a graph call names
	Node      uint64 // a graph node: the one cudaGraphAddKernelNode made, or the one a set names
	Size      uint64 // allocation or pinned-range size; NCCL: element count
	// NCCL
	Comm     uint64 // the communicator; NVTX: the domain (0: the default one)
	Peer     int32  // root (broadcast, reduce) or peer (send, recv); -1 = none
	DataType uint8
	RedOp    uint8

	Device int32  // cudaSetDevice
	CommID uint64 // ncclCommInitRank: the unique id's first word, shared by the communicator's ranks

	HasStream bool
	Kind      MemcpyKind
}

// ncclTypeSize is sizeof(ncclDataType_t) per NCCL's enum: int8, uint8,
// int32, uint32, int64, uint64, float16, float32, float64, bfloat16, fp8e4m3, fp8e5m2.
var ncclTypeSize = [...]uint64{1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1}

// NCCLTypeName names ncclDataType_t values.
var NCCLTypeName = [...]string{"int8", "uint8", "int32", "uint32", "int64", "uint64", "float16", "float32", "float64", "bfloat16", "fp8e4m3", "fp8e5m2"}

func ncclBytes(count, typ uint64) uint64 {
	if typ < uint64(len(ncclTypeSize)) {
		return count * ncclTypeSize[typ]
	}
	return count
}

func dim3(xy, z uint64) Dim3 { return Dim3{X: uint32(xy), Y: uint32(xy >> 32), Z: uint32(z)} }

// Decode names the raw arguments of e: its argument slots (ABI), in the
// positions CUDA_API.md gives for x86-64 System V, which are the same on
// arm64 (docs/arm64.md) but for ncclCommInitRank's.
func (e *Event) Decode(a *Args) {
	*a = Args{}
	r := &e.Args
	switch e.API() {
	case CudaStreamCreate:
		a.Ptr, a.Stream, a.HasStream = r[0], e.Out, true
	case CudaStreamCreateWithFlags:
		a.Ptr, a.Stream, a.HasStream, a.Flags = r[0], e.Out, true, uint32(r[1])
	case CudaStreamCreateWithPriority:
		a.Ptr, a.Stream, a.HasStream, a.Flags, a.Priority = r[0], e.Out, true, uint32(r[1]), int32(r[2])
	case CudaStreamDestroy, CudaStreamSynchronize, CudaStreamQuery:
		a.Stream, a.HasStream = r[0], true
	case CudaSetDevice:
		a.Device = int32(r[0])
	case CudaLaunchKernel, CudaLaunchCooperativeKernel:
		// dim3 by value takes two registers: x|y, then z.
		a.Func, a.Grid, a.Block = r[0], dim3(r[1], r[2]), dim3(r[3], r[4])
		a.SharedMem, a.Stream, a.HasStream = r[6], r[7], true
	case CudaLaunchKernelExC:
		// cudaLaunchConfig_t {dim3 grid; dim3 block; size_t smem; stream; attrs; n}
		x := &e.Ext
		a.Func = r[1]
		a.Grid = Dim3{X: uint32(x[0]), Y: uint32(x[0] >> 32), Z: uint32(x[1])}
		a.Block = Dim3{X: uint32(x[1] >> 32), Y: uint32(x[2]), Z: uint32(x[2] >> 32)}
		a.SharedMem, a.Stream, a.HasStream = x[3], x[4], true
	case CudaMemcpy:
		a.Dst, a.Src, a.Bytes, a.Kind = r[0], r[1], r[2], MemcpyKind(r[3])
	case CudaMemcpyAsync:
		a.Dst, a.Src, a.Bytes, a.Kind = r[0], r[1], r[2], MemcpyKind(r[3])
		a.Stream, a.HasStream = r[4], true
	case CudaMemcpy2D:
		a.Dst, a.Src, a.Bytes, a.Kind = r[0], r[2], r[4]*r[5], MemcpyKind(r[6])
	case CudaMemcpy2DAsync:
		a.Dst, a.Src, a.Bytes, a.Kind = r[0], r[2], r[4]*r[5], MemcpyKind(r[6])
		a.Stream, a.HasStream = r[7], true
	case CudaMemset:
		a.Dst, a.Bytes = r[0], r[2]
	case CudaMemsetAsync:
		a.Dst, a.Bytes, a.Stream, a.HasStream = r[0], r[2], r[3], true
	case CudaEventCreate:
		a.Ptr, a.Event = r[0], e.Out
	case CudaEventCreateWithFlags:
		a.Ptr, a.Event, a.Flags = r[0], e.Out, uint32(r[1])
	case CudaEventDestroy, CudaEventSynchronize, CudaEventQuery:
		a.Event = r[0]
	case CudaEventRecord:
		a.Event, a.Stream, a.HasStream = r[0], r[1], true
	case CudaEventRecordWithFlags:
		a.Event, a.Stream, a.HasStream, a.Flags = r[0], r[1], true, uint32(r[2])
	case CudaStreamWaitEvent:
		a.Stream, a.HasStream, a.Event, a.Flags = r[0], true, r[1], uint32(r[2])
	case CudaMalloc:
		a.Ptr, a.Size = e.Out, r[1]
	case CudaMallocAsync:
		a.Ptr, a.Size, a.Stream, a.HasStream = e.Out, r[1], r[2], true
	case CudaMallocManaged, CuMemAllocManaged:
		a.Ptr, a.Size, a.Flags = e.Out, r[1], uint32(r[2])
	case CudaMallocPitch, CuMemAllocPitch:
		// (ptr *, size_t *pitch, width in bytes, height): what was asked;
		// the pitch may round each row up.
		a.Ptr, a.Size = e.Out, r[2]*r[3]
	case CudaMallocFromPoolAsync, CuMemAllocFromPoolAsync:
		a.Ptr, a.Size, a.Stream, a.HasStream = e.Out, r[1], r[3], true // (ptr *, size, pool, stream)
	case CuMemCreate:
		a.Ptr, a.Size = e.Out, r[1] // (handle *, size, prop *, flags)
	case CuMemRelease:
		a.Ptr = r[0]
	case CudaFree, CudaFreeHost, CudaHostUnregister:
		a.Ptr = r[0]
	case CudaFreeAsync:
		a.Ptr, a.Stream, a.HasStream = r[0], r[1], true
	case CudaHostAlloc:
		a.Ptr, a.Size, a.Flags = e.Out, r[1], uint32(r[2])
	case CudaMallocHost:
		a.Ptr, a.Size = e.Out, r[1]
	case CudaHostRegister:
		a.Ptr, a.Size, a.Flags = r[0], r[1], uint32(r[2])
	case CudaGraphLaunch:
		a.Ptr, a.Stream, a.HasStream = r[0], r[1], true
	case CudaLaunchHostFunc:
		a.Stream, a.HasStream, a.Func = r[0], true, r[1]

	case CuLaunchKernel, CuLaunchCooperativeKernel:
		a.Func = r[0]
		a.Grid = Dim3{X: uint32(r[1]), Y: uint32(r[2]), Z: uint32(r[3])}
		a.Block = Dim3{X: uint32(r[4]), Y: uint32(r[5]), Z: uint32(r[6])}
		a.SharedMem, a.Stream, a.HasStream = uint64(uint32(r[7])), r[8], true
	case CuLaunchKernelEx:
		// CUlaunchConfig {gridDimX,Y,Z, blockDimX,Y,Z, sharedMemBytes; hStream at 32; ...}
		x := &e.Ext
		a.Func = r[1]
		a.Grid = Dim3{X: uint32(x[0]), Y: uint32(x[0] >> 32), Z: uint32(x[1])}
		a.Block = Dim3{X: uint32(x[1] >> 32), Y: uint32(x[2]), Z: uint32(x[2] >> 32)}
		a.SharedMem, a.Stream, a.HasStream = uint64(uint32(x[3])), x[4], true
	case CuMemcpyHtoDAsync, CuMemcpyDtoHAsync, CuMemcpyDtoDAsync, CuMemcpyAsync:
		a.Dst, a.Src, a.Bytes, a.Stream, a.HasStream = r[0], r[1], r[2], r[3], true
		a.Kind = driverCopyKind(e.API())
	case CuMemcpyHtoD, CuMemcpyDtoH:
		a.Dst, a.Src, a.Bytes = r[0], r[1], r[2]
		a.Kind = driverCopyKind(e.API())
	case CuMemsetD8Async:
		a.Dst, a.Bytes, a.Stream, a.HasStream = r[0], r[2], r[3], true
	case CuMemsetD32Async:
		a.Dst, a.Bytes, a.Stream, a.HasStream = r[0], 4*r[2], r[3], true
	case CuEventRecord:
		a.Event, a.Stream, a.HasStream = r[0], r[1], true
	case CuEventRecordWithFlags:
		a.Event, a.Stream, a.HasStream, a.Flags = r[0], r[1], true, uint32(r[2])
	case CuStreamWaitEvent:
		a.Stream, a.HasStream, a.Event, a.Flags = r[0], true, r[1], uint32(r[2])
	case CuEventSynchronize, CuEventQuery:
		a.Event = r[0]
	case CuStreamCreate:
		a.Ptr, a.Stream, a.HasStream, a.Flags = r[0], e.Out, true, uint32(r[1])
	case CuStreamCreateWithPriority:
		a.Ptr, a.Stream, a.HasStream, a.Flags, a.Priority = r[0], e.Out, true, uint32(r[1]), int32(r[2])
	case CuStreamDestroy, CuStreamSynchronize, CuStreamQuery:
		a.Stream, a.HasStream = r[0], true
	case CuMemAlloc:
		a.Ptr, a.Size = e.Out, r[1]
	case CuMemAllocAsync:
		a.Ptr, a.Size, a.Stream, a.HasStream = e.Out, r[1], r[2], true
	case CuMemFree, CuMemFreeHost, CuMemHostUnregister:
		a.Ptr = r[0]
	case CuMemFreeAsync:
		a.Ptr, a.Stream, a.HasStream = r[0], r[1], true
	case CuMemHostAlloc:
		a.Ptr, a.Size, a.Flags = e.Out, r[1], uint32(r[2])
	case CuMemAllocHost:
		a.Ptr, a.Size = e.Out, r[1]
	case CuMemHostRegister:
		a.Ptr, a.Size, a.Flags = r[0], r[1], uint32(r[2])
	case CuGraphLaunch:
		a.Ptr, a.Stream, a.HasStream = r[0], r[1], true
	case CuModuleGetFunction, CuLibraryGetKernel:
		a.Ptr = e.Out // the new CUfunction / CUkernel; its name is in e.Copy
	case CuKernelGetFunction:
		a.Ptr, a.Func = e.Out, r[1] // CUfunction of kernel r[1]

	case CudaStreamBeginCapture, CuStreamBeginCapture:
		a.Stream, a.HasStream, a.Flags = r[0], true, uint32(r[1])
	case CudaStreamEndCapture, CuStreamEndCapture:
		a.Stream, a.HasStream, a.Graph = r[0], true, e.Out
	case CudaGraphInstantiate, CudaGraphInstantiateWithFlags, CuGraphInstantiate:
		a.Ptr, a.Graph = e.Out, r[1]
	case CudaGraphCreate, CuGraphCreate:
		a.Graph = e.Out
	case CudaGraphAddKernelNode, CuGraphAddKernelNode:
		a.Node, a.Graph = e.Out, r[1]
		e.kernelNode(a)
	case CudaGraphExecKernelNodeSetParams, CuGraphExecKernelNodeSetParams:
		a.Ptr, a.Node = r[0], r[1]
		e.kernelNode(a)
	case CudaGraphExecUpdate, CuGraphExecUpdate:
		a.Ptr, a.Graph = r[0], r[1]
	case CudaGraphDestroy, CuGraphDestroy:
		a.Graph = r[0]
	case CudaGraphExecDestroy, CuGraphExecDestroy:
		a.Ptr = r[0]

	case NcclAllReduce, NcclReduceScatter:
		// (send, recv, count, type, op, comm, stream)
		a.Src, a.Dst, a.Size, a.DataType, a.RedOp, a.Comm = r[0], r[1], r[2], uint8(r[3]), uint8(r[4]), r[5]
		a.Stream, a.HasStream, a.Peer = r[6], true, -1
		a.Bytes = ncclBytes(r[2], r[3])
	case NcclBroadcast:
		// (send, recv, count, type, root, comm, stream)
		a.Src, a.Dst, a.Size, a.DataType, a.Peer, a.Comm = r[0], r[1], r[2], uint8(r[3]), int32(r[4]), r[5]
		a.Stream, a.HasStream = r[6], true
		a.Bytes = ncclBytes(r[2], r[3])
	case NcclReduce:
		// (send, recv, count, type, op, root, comm, stream)
		a.Src, a.Dst, a.Size, a.DataType, a.RedOp, a.Peer = r[0], r[1], r[2], uint8(r[3]), uint8(r[4]), int32(r[5])
		a.Comm, a.Stream, a.HasStream = r[6], r[7], true
		a.Bytes = ncclBytes(r[2], r[3])
	case NcclAllGather:
		// (send, recv, sendcount, type, comm, stream)
		a.Src, a.Dst, a.Size, a.DataType, a.Comm, a.Stream, a.HasStream = r[0], r[1], r[2], uint8(r[3]), r[4], r[5], true
		a.Peer = -1
		a.Bytes = ncclBytes(r[2], r[3])
	case NcclCommInitRank:
		// (comm *, nranks, ncclUniqueId by value, rank): the id on the
		// stack, or (arm64) behind x2 (Spec.MemArg).
		a.Comm, a.Size = e.Out, r[1]
		if e.ABI() == AAPCS64 {
			a.Peer, a.CommID = int32(r[3]), e.Ext[0]
		} else {
			a.Peer, a.CommID = int32(r[2]), r[6]
		}
	case NvtxRangePushA, NvtxMarkA:
		a.Ptr, a.Comm = MessageKey(e.message()), e.nvtxDomain()
	case NvtxRangeStartA:
		a.Ptr, a.Comm = MessageKey(e.message()), e.nvtxDomain()
		if e.HasReturn() {
			a.Event = uint64(e.Ret) // the range's id, which nvtxRangeEnd is given
		}
	case NvtxRangePop:
		a.Comm = e.nvtxDomain()
	case NvtxRangeEnd:
		// (id), or nvtxDomainRangeEnd(domain, id)
		a.Event, a.Comm = r[0], e.nvtxDomain()
		if e.Flags&FlagInjected == 0 && e.nvtxDomainForm() {
			a.Event = r[1]
		}
	case NcclSend, NcclRecv:
		// (buf, count, type, peer, comm, stream): send reads buf, recv writes it.
		a.Size, a.DataType, a.Peer, a.Comm, a.Stream, a.HasStream = r[1], uint8(r[2]), int32(r[3]), r[4], r[5], true
		if e.API() == NcclSend {
			a.Src = r[0]
		} else {
			a.Dst = r[0]
		}
		a.Bytes = ncclBytes(r[1], r[2])
	}
}

func driverCopyKind(a API) MemcpyKind {
	switch a {
	case CuMemcpyHtoDAsync, CuMemcpyHtoD:
		return HostToDevice
	case CuMemcpyDtoHAsync, CuMemcpyDtoH:
		return DeviceToHost
	case CuMemcpyDtoDAsync:
		return DeviceToDevice
	}
	return DefaultKind
}

// FlagInjected marks an NVTX record the tracer made from what cudatap's
// NVTX injection library reported (tracer/gputime) rather than a probe's:
// Ext[0] holds the call's domain. Recorded with the event.
const FlagInjected = 0x20000

// NVTXUnnamedDomain is the domain of a probed nvtxDomain* call whose
// handle is NULL: NVTX gives every domain that handle while no tool is
// loaded (nvtxDomainCreateA returns what the tool does), so without one
// the domains of a process cannot be told apart, only from the default
// domain. The model numbers domains per process (model.Process).
const NVTXUnnamedDomain = ^uint64(0)

// nvtxDomain is the domain of an NVTX record: the injection library's
// number (1, 2, … in creation order; FlagInjected), or a probed call's
// handle (nvtxDomain* forms), NVTXUnnamedDomain for a NULL one; 0 for the
// default domain.
func (e *Event) nvtxDomain() uint64 {
	switch {
	case e.Flags&FlagInjected != 0:
		return e.Ext[0]
	case !e.nvtxDomainForm():
		return 0
	case e.Args[0] == 0:
		return NVTXUnnamedDomain
	}
	return e.Args[0]
}

// nvtxDomainForm reports whether a probed NVTX record is of an
// nvtxDomain* symbol (the domain handle its first argument).
func (e *Event) nvtxDomainForm() bool {
	s := e.Spec()
	return s != nil && nvtxDomainForm(s.Symbol(e.SymbolIndex()))
}

// nvtxMessageUnicode is nvtxMessageType_t's NVTX_MESSAGE_TYPE_UNICODE
// (nvToolsExt.h): the message is of wchar_t.
const nvtxMessageUnicode = 2

// message is the string a record copied, as UTF-8: a wide NVTX message
// (a W form's, an Ex form's of type UNICODE: UTF-32 on Linux) converted up
// to its NUL, anything else as copied.
func (e *Event) message() []byte {
	wide := e.Cookie&cookieStrWide != 0 ||
		(e.Cookie&cookieStrAttr != 0 && uint32(e.Ext[4]) == nvtxMessageUnicode) // messageType, offset 32
	if !wide {
		return e.Copy
	}
	var out []byte
	for i := 0; i+4 <= len(e.Copy); i += 4 {
		c := rune(binary.LittleEndian.Uint32(e.Copy[i:]))
		if c == 0 {
			break
		}
		out = utf8.AppendRune(out, c)
	}
	return out
}

// MessageKey is the key of an NVTX message (Args.Ptr of its calls): FNV-1a
// of its bytes up to the first NUL, never 0; 0 for an empty one. The model
// names it (model.Process.Messages).
func MessageKey(s []byte) uint64 {
	h := uint64(14695981039346656037)
	n := 0
	for _, c := range s {
		if c == 0 {
			break
		}
		h = (h ^ uint64(c)) * 1099511628211
		n++
	}
	if n == 0 {
		return 0
	}
	return max(h, 1)
}

// String returns the C string a call named (cuModuleGetFunction's kernel
// name, an NVTX message), copied by the BPF side into the record.
func (e *Event) String() string {
	b := e.message()
	for i, c := range b {
		if c == 0 {
			b = b[:i]
			break
		}
	}
	return string(b)
}

// kernelNode reads a kernel node's parameters from Ext: cudaKernelNodeParams
// and CUDA_KERNEL_NODE_PARAMS begin {func; grid x, y, z; block x, y, z;
// sharedMemBytes}.
func (e *Event) kernelNode(a *Args) {
	x := &e.Ext
	a.Func = x[0]
	a.Grid = Dim3{X: uint32(x[1]), Y: uint32(x[1] >> 32), Z: uint32(x[2])}
	a.Block = Dim3{X: uint32(x[2] >> 32), Y: uint32(x[3]), Z: uint32(x[3] >> 32)}
	a.SharedMem = uint64(uint32(x[4]))
}
