package event

import (
	"encoding/binary"
	"strings"
	"testing"
)

// Argument locations on both ABIs, end to end for every hooked call: each
// call of argsCases (written as x86-64 passes it) is passed again as each
// ABI passes its C prototype — argument registers, a stack image, the
// memory its pointers point to —, read as the BPF programs read it with
// the cookie Go computes for that ABI (probe: a model of read_slots,
// read_args and launch_stream in bpf/cudatap.bpf.c), and Decode must name
// every argument as the case says.

// prototypes are the hooked calls' C prototypes (CUDA 13's and NCCL's
// headers), by the API's name. Only the parameter types matter: a dim3 is
// a 12-byte struct by value, an ncclUniqueId a 128-byte one, anything else
// one integer or pointer eightbyte.
var prototypes = []string{
	"cudaStreamCreate(cudaStream_t *pStream)",
	"cudaStreamCreateWithFlags(cudaStream_t *pStream, unsigned int flags)",
	"cudaStreamCreateWithPriority(cudaStream_t *pStream, unsigned int flags, int priority)",
	"cudaStreamDestroy(cudaStream_t stream)",
	"cudaLaunchKernel(const void *func, dim3 gridDim, dim3 blockDim, void **args, size_t sharedMem, cudaStream_t stream)",
	"cudaLaunchKernelExC(const cudaLaunchConfig_t *config, const void *func, void **args)",
	"cudaLaunchCooperativeKernel(const void *func, dim3 gridDim, dim3 blockDim, void **args, size_t sharedMem, cudaStream_t stream)",
	"cudaMemcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind)",
	"cudaMemcpyAsync(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind, cudaStream_t stream)",
	"cudaMemcpy2D(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height, enum cudaMemcpyKind kind)",
	"cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height, enum cudaMemcpyKind kind, cudaStream_t stream)",
	"cudaMemset(void *devPtr, int value, size_t count)",
	"cudaMemsetAsync(void *devPtr, int value, size_t count, cudaStream_t stream)",
	"cudaEventCreate(cudaEvent_t *event)",
	"cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags)",
	"cudaEventDestroy(cudaEvent_t event)",
	"cudaEventRecord(cudaEvent_t event, cudaStream_t stream)",
	"cudaEventRecordWithFlags(cudaEvent_t event, cudaStream_t stream, unsigned int flags)",
	"cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags)",
	"cudaEventSynchronize(cudaEvent_t event)",
	"cudaEventQuery(cudaEvent_t event)",
	"cudaStreamSynchronize(cudaStream_t stream)",
	"cudaStreamQuery(cudaStream_t stream)",
	"cudaDeviceSynchronize(void)",
	"cudaMalloc(void **devPtr, size_t size)",
	"cudaFree(void *devPtr)",
	"cudaMallocAsync(void **devPtr, size_t size, cudaStream_t hStream)",
	"cudaFreeAsync(void *devPtr, cudaStream_t hStream)",
	"cudaHostAlloc(void **pHost, size_t size, unsigned int flags)",
	"cudaMallocHost(void **ptr, size_t size)",
	"cudaFreeHost(void *ptr)",
	"cudaHostRegister(void *ptr, size_t size, unsigned int flags)",
	"cudaHostUnregister(void *ptr)",
	"cudaGraphLaunch(cudaGraphExec_t graphExec, cudaStream_t stream)",
	"cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void *userData)",
	"cudaStreamBeginCapture(cudaStream_t stream, enum cudaStreamCaptureMode mode)",
	"cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t *pGraph)",
	"cudaGraphInstantiate(cudaGraphExec_t *pGraphExec, cudaGraph_t graph, unsigned long long flags)",
	"cudaGraphInstantiateWithFlags(cudaGraphExec_t *pGraphExec, cudaGraph_t graph, unsigned long long flags)",
	"cudaSetDevice(int device)",
	"cudaGraphCreate(cudaGraph_t *pGraph, unsigned int flags)",
	"cudaGraphAddKernelNode(cudaGraphNode_t *pGraphNode, cudaGraph_t graph, const cudaGraphNode_t *pDependencies, size_t numDependencies, const struct cudaKernelNodeParams *pNodeParams)",
	"cudaGraphExecKernelNodeSetParams(cudaGraphExec_t hGraphExec, cudaGraphNode_t node, const struct cudaKernelNodeParams *pNodeParams)",
	"cudaGraphExecUpdate(cudaGraphExec_t hGraphExec, cudaGraph_t hGraph, cudaGraphExecUpdateResultInfo *resultInfo)",
	"cudaGraphDestroy(cudaGraph_t graph)",
	"cudaGraphExecDestroy(cudaGraphExec_t graphExec)",
	"cudaMallocManaged(void **devPtr, size_t size, unsigned int flags)",
	"cudaMallocPitch(void **devPtr, size_t *pitch, size_t width, size_t height)",
	"cudaMallocFromPoolAsync(void **ptr, size_t size, cudaMemPool_t memPool, cudaStream_t stream)",

	"cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream, void **kernelParams, void **extra)",
	"cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **kernelParams, void **extra)",
	"cuLaunchCooperativeKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream, void **kernelParams)",
	"cuMemcpyHtoDAsync(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount, CUstream hStream)",
	"cuMemcpyDtoHAsync(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream)",
	"cuMemcpyDtoDAsync(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream)",
	"cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream)",
	"cuMemcpyHtoD(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount)",
	"cuMemcpyDtoH(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount)",
	"cuMemsetD8Async(CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream)",
	"cuMemsetD32Async(CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream hStream)",
	"cuEventRecord(CUevent hEvent, CUstream hStream)",
	"cuEventRecordWithFlags(CUevent hEvent, CUstream hStream, unsigned int flags)",
	"cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int Flags)",
	"cuEventSynchronize(CUevent hEvent)",
	"cuEventQuery(CUevent hEvent)",
	"cuStreamCreate(CUstream *phStream, unsigned int Flags)",
	"cuStreamCreateWithPriority(CUstream *phStream, unsigned int flags, int priority)",
	"cuStreamDestroy(CUstream hStream)",
	"cuStreamSynchronize(CUstream hStream)",
	"cuStreamQuery(CUstream hStream)",
	"cuCtxSynchronize(void)",
	"cuMemAlloc(CUdeviceptr *dptr, size_t bytesize)",
	"cuMemFree(CUdeviceptr dptr)",
	"cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)",
	"cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream)",
	"cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags)",
	"cuMemAllocHost(void **pp, size_t bytesize)",
	"cuMemFreeHost(void *p)",
	"cuMemHostRegister(void *p, size_t bytesize, unsigned int Flags)",
	"cuMemHostUnregister(void *p)",
	"cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream)",
	"cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name)",
	"cuLibraryGetKernel(CUkernel *pKernel, CUlibrary library, const char *name)",
	"cuKernelGetFunction(CUfunction *pFunc, CUkernel kernel)",
	"cuStreamBeginCapture(CUstream hStream, CUstreamCaptureMode mode)",
	"cuStreamEndCapture(CUstream hStream, CUgraph *phGraph)",
	"cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph hGraph, unsigned long long flags)",
	"cuGraphCreate(CUgraph *phGraph, unsigned int flags)",
	"cuGraphAddKernelNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies, size_t numDependencies, const CUDA_KERNEL_NODE_PARAMS *nodeParams)",
	"cuGraphExecKernelNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode, const CUDA_KERNEL_NODE_PARAMS *nodeParams)",
	"cuGraphExecUpdate(CUgraphExec hGraphExec, CUgraph hGraph, CUgraphExecUpdateResultInfo *resultInfo)",
	"cuGraphDestroy(CUgraph hGraph)",
	"cuGraphExecDestroy(CUgraphExec hGraphExec)",
	"cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)",
	"cuMemAllocPitch(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes, size_t Height, unsigned int ElementSizeBytes)",
	"cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream)",
	"cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop, unsigned long long flags)",
	"cuMemRelease(CUmemGenericAllocationHandle handle)",
	"nvtxRangePushA(const char *message)",
	"nvtxRangePop(void)",
	"nvtxRangeStartA(const char *message)",
	"nvtxRangeEnd(nvtxRangeId_t id)",
	"nvtxMarkA(const char *message)",
	// NVTX's other forms, hooked as the five above (nvToolsExt.h).
	"nvtxRangePushW(const wchar_t *message)",
	"nvtxRangePushEx(const nvtxEventAttributes_t *eventAttrib)",
	"nvtxDomainRangePushEx(nvtxDomainHandle_t domain, const nvtxEventAttributes_t *eventAttrib)",
	"nvtxDomainRangePop(nvtxDomainHandle_t domain)",
	"nvtxRangeStartW(const wchar_t *message)",
	"nvtxRangeStartEx(const nvtxEventAttributes_t *eventAttrib)",
	"nvtxDomainRangeStartEx(nvtxDomainHandle_t domain, const nvtxEventAttributes_t *eventAttrib)",
	"nvtxDomainRangeEnd(nvtxDomainHandle_t domain, nvtxRangeId_t id)",
	"nvtxMarkW(const wchar_t *message)",
	"nvtxMarkEx(const nvtxEventAttributes_t *eventAttrib)",
	"nvtxDomainMarkEx(nvtxDomainHandle_t domain, const nvtxEventAttributes_t *eventAttrib)",

	"ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream)",
	"ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream)",
	"ncclReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream)",
	"ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount, ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream)",
	"ncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount, ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream)",
	"ncclSend(const void *sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm, cudaStream_t stream)",
	"ncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm, cudaStream_t stream)",
	"ncclGroupStart(void)",
	"ncclGroupEnd(void)",
	"ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank)",
}

// param is how an ABI sees a parameter's type.
type param uint8

const (
	word     param = iota // an integer, enum or pointer: one eightbyte
	dim3Val               // dim3 by value: 12 bytes, two eightbytes (x|y, z)
	uniqueID              // ncclUniqueId by value: 128 bytes
)

func (p param) words() int {
	switch p {
	case dim3Val:
		return 2
	case uniqueID:
		return 16
	}
	return 1
}

// parsePrototypes returns the parameters of each prototype by name.
func parsePrototypes(t *testing.T) map[string][]param {
	t.Helper()
	out := map[string][]param{}
	for _, p := range prototypes {
		open := strings.IndexByte(p, '(')
		if open < 0 || !strings.HasSuffix(p, ")") {
			t.Fatalf("prototype %q", p)
		}
		var params []param
		if inner := p[open+1 : len(p)-1]; inner != "void" {
			for _, decl := range strings.Split(inner, ",") {
				f := strings.Fields(strings.ReplaceAll(decl, "*", " * "))
				typ := f[:len(f)-1] // without the parameter's name
				switch {
				case len(f) < 2 || strings.Contains(decl, "*"):
					params = append(params, word)
				case typ[len(typ)-1] == "dim3":
					params = append(params, dim3Val)
				case typ[len(typ)-1] == "ncclUniqueId":
					params = append(params, uniqueID)
				default:
					params = append(params, word)
				}
			}
		}
		out[p[:open]] = params
	}
	return out
}

// place is where an ABI puts one eightbyte of an argument at entry: an
// argument register, or a stack word (0-based, the first stack argument's
// first); -1 where not.
type place struct{ reg, stack int }

// passed is where an ABI puts one argument: its eightbytes' places, or
// (byRef) one place that holds a pointer to a copy of it.
type passed struct {
	words []place
	byRef bool
}

// layout places params as abi passes them. Both: an argument of one or two
// eightbytes goes into the next registers when they hold it whole, else
// onto the stack, eight bytes a word. x86-64: a struct larger than 16
// bytes is copied onto the stack (class MEMORY) and takes no register; an
// argument that does not fit leaves the remaining registers to the next.
// AAPCS64: a struct larger than 16 bytes is replaced by a pointer to a
// copy (B.4); once an argument goes onto the stack no later one takes a
// register (C.13).
func layout(abi ABI, params []param) []passed {
	regs := abi.registers()
	reg, stack := 0, 0
	var out []passed
	for _, p := range params {
		var a passed
		n := p.words()
		if n > 2 && abi == SysV {
			for range n {
				a.words = append(a.words, place{-1, stack})
				stack++
			}
			out = append(out, a)
			continue
		}
		if n > 2 {
			a.byRef, n = true, 1
		}
		if reg+n <= regs {
			for range n {
				a.words = append(a.words, place{reg, -1})
				reg++
			}
		} else {
			if abi == AAPCS64 {
				reg = regs
			}
			for range n {
				a.words = append(a.words, place{-1, stack})
				stack++
			}
		}
		out = append(out, a)
	}
	return out
}

const (
	returnAddress = 0x7f00_cafe_0123 // where the call returns: the caller
	copyAddress   = 0x7ffd_c0de_0000 // arm64: the copy of a struct passed by reference
	garbage       = 0x5afe_0000_0000_0000
)

// machine is a thread at a function-entry probe.
type machine struct {
	regs  [8]uint64         // the argument registers: rdi rsi rdx rcx r8 r9 or x0..x7
	stack []uint64          // from the stack pointer up: on x86-64 the return address first
	lr    uint64            // arm64's link register
	mem   map[uint64][]byte // what the arguments point to
}

// call passes values (each argument's eightbytes) as abi does. Registers
// no argument takes, and the caller's frame above the arguments, hold
// garbage.
func call(abi ABI, params []param, values [][]uint64, mem map[uint64][]byte) *machine {
	m := &machine{mem: map[uint64][]byte{}}
	for a, b := range mem {
		m.mem[a] = b
	}
	for i := range m.regs {
		m.regs[i] = garbage | 0xee00 | uint64(i)
	}
	var stack []uint64
	for i, a := range layout(abi, params) {
		v := values[i]
		if a.byRef {
			m.mem[copyAddress] = wordBytes(v)
			v = []uint64{copyAddress}
		}
		for j, w := range a.words {
			if w.reg >= 0 {
				m.regs[w.reg] = v[j]
				continue
			}
			for len(stack) <= w.stack {
				stack = append(stack, 0)
			}
			stack[w.stack] = v[j]
		}
	}
	stack = append(stack, garbage|0xf00, garbage|0xf01, garbage|0xf02)
	if abi == SysV {
		m.stack = append([]uint64{returnAddress}, stack...)
	} else {
		m.stack, m.lr = stack, returnAddress
	}
	return m
}

// sysVValues reads each argument's eightbytes back from an x86-64 case's
// slots (the stack words past args[] read as zero).
func sysVValues(params []param, slots [NArgs]uint64) [][]uint64 {
	var out [][]uint64
	for _, a := range layout(SysV, params) {
		var v []uint64
		for _, w := range a.words {
			switch {
			case w.reg >= 0:
				v = append(v, slots[w.reg])
			case 6+w.stack < NArgs:
				v = append(v, slots[6+w.stack])
			default:
				v = append(v, 0)
			}
		}
		out = append(out, v)
	}
	return out
}

func wordBytes(v []uint64) []byte {
	b := make([]byte, 8*len(v))
	for i, w := range v {
		binary.LittleEndian.PutUint64(b[8*i:], w)
	}
	return b
}

// readWord is the eightbyte at addr+off, or garbage where m has no memory.
func (m *machine) readWord(addr uint64, off int) uint64 {
	b := m.mem[addr]
	if len(b) < off+8 {
		return garbage | 0xbad
	}
	return binary.LittleEndian.Uint64(b[off:])
}

// probe reads m as abi's BPF programs do at entry with cookie c (read_slots
// and read_args), and at return for the out pointer and the string;
// what they copy nothing into holds fill (the programs leave zero: the
// decoder must not look).
func probe(abi ABI, c uint64, m *machine, fill uint64) Event {
	e := Event{Cookie: c, Out: fill}
	for i := range e.Args {
		e.Args[i] = fill
	}
	for i := range e.Ext {
		e.Ext[i] = fill
	}
	regs := abi.registers()
	copy(e.Args[:regs], m.regs[:regs])
	n := int(c>>24) & 3
	switch abi {
	case SysV:
		for k := 1; k <= n; k++ {
			e.Args[5+k] = m.stack[k] // [rsp+8k]
		}
		if c&cookieTakeStub != 0 {
			e.Caller = m.stack[0] // [rsp]
		}
	case AAPCS64:
		if n > 0 {
			e.Args[8] = m.stack[0] // [sp]: one word fits behind x0..x7
		}
		if c&cookieTakeStub != 0 {
			e.Caller = m.lr
		}
	}
	if c&cookieDeref != 0 {
		arg := int(c>>cookieDerefArg) & 7
		for w := range e.Ext {
			e.Ext[w] = m.readWord(e.Args[arg], 8*w)
		}
	}
	if out := int(c>>27) & 7; out != 0 {
		e.Out = m.readWord(e.Args[out-1], 0)
	}
	if s := int(c>>cookieStrArg) & 7; s != 0 {
		e.Copy = m.mem[e.Args[s-1]]
	}
	// An Ex form's message, behind the attributes copied into Ext: ASCII
	// or wide by its messageType (fill_string).
	if typ := uint32(e.Ext[4]); c&cookieStrAttr != 0 && (typ == 1 || typ == 2) {
		e.Copy = m.mem[e.Ext[5]]
	}
	return e
}

// launchStreamAt reads a launch's stream where the cookie's
// COOKIE_AGG_STREAM says, as launch_stream does.
func launchStreamAt(abi ABI, c uint64, m *machine) uint64 {
	where := int(c>>cookieAggStream) & 0xf
	switch {
	case where >= 1 && where <= 3 && abi == SysV:
		return m.stack[where]
	case where >= 1 && where <= 3:
		return m.stack[where-1]
	case where >= 4 && where < 8 && abi == AAPCS64:
		return m.regs[where]
	case where >= 8:
		return m.readWord(m.regs[0], 8*(where-8))
	}
	return AggregateUnknownStream
}

// kernelParamsAt reads a launch's kernelParams where the cookie's
// COOKIE_KARGS says, as read_kernel_args does: a slot the probe copied
// (args[]), or a stack word past the registers.
func kernelParamsAt(abi ABI, c uint64, m *machine, e *Event) uint64 {
	where := int(c>>cookieKernelArgs) & 0xf
	switch {
	case where >= 1 && where <= NArgs:
		return e.Args[where-1]
	case where > NArgs && abi == SysV:
		return m.stack[where-NArgs] // [rsp+8k]
	case where > NArgs:
		return m.stack[where-NArgs-1] // [sp+8(k-1)]
	}
	return 0
}

// TestKernelParamsOnEachABI: every launch's kernelParams, passed as each
// ABI passes its prototype, is what its kernel-args cookie points the
// probe at; ParamsArg names the prototype's `args` or `kernelParams`.
func TestKernelParamsOnEachABI(t *testing.T) {
	protos := parsePrototypes(t)
	const params = 0x7ffc_9a9a_0000
	for i := range specs {
		s := &specs[i]
		if s.Class != ClassLaunch {
			if s.ParamsArg != 0 || s.kernelArgsCookie(SysV) != 0 {
				t.Errorf("%s: ParamsArg %d on an API that launches no kernel", s.Name, s.ParamsArg)
			}
			continue
		}
		types := protos[s.Name]
		proto := ""
		for _, p := range prototypes {
			if strings.HasPrefix(p, s.Name+"(") {
				proto = p
			}
		}
		names := strings.Split(proto[strings.IndexByte(proto, '(')+1:len(proto)-1], ",")
		arg, slot := -1, 0
		for j, decl := range names {
			if strings.HasSuffix(decl, "**args") || strings.HasSuffix(decl, "**kernelParams") {
				arg = j
				break
			}
			slot += types[j].words()
		}
		if arg < 0 || s.ParamsArg != slot+1 {
			t.Errorf("%s: ParamsArg %d, the prototype's kernelParams is argument %d, slot %d", s.Name, s.ParamsArg, arg, slot)
			continue
		}
		values := make([][]uint64, len(types))
		for j, p := range types {
			for w := range p.words() {
				values[j] = append(values[j], garbage|uint64(j<<4|w))
			}
		}
		values[arg] = []uint64{params}
		for _, abi := range abis {
			m := call(abi, types, values, nil)
			c := s.cookie(abi, 0) | s.kernelArgsCookie(abi)
			e := probe(abi, c, m, 0)
			if got := kernelParamsAt(abi, c, m, &e); got != params || !CookieHasKernelArgs(c) {
				t.Errorf("%s on %v: the probe reads kernelParams %#x, want %#x", s.Name, abi, got, uint64(params))
			}
		}
	}
}

const kernelName = "_Z6kernelPf\x00"

// nvtxString is kernelName as an NVTX message: its bytes, or (wide) its
// wchar_t characters as Linux lays them out (UTF-32), NUL included.
func nvtxString(wide bool) []byte {
	if !wide {
		return []byte(kernelName)
	}
	var b []byte
	for _, r := range kernelName {
		b = binary.LittleEndian.AppendUint32(b, uint32(r))
	}
	return b
}

// TestArgsOnEachABI passes every argsCases call as each ABI does and
// decodes what the probe reads with that ABI's cookie.
func TestArgsOnEachABI(t *testing.T) {
	protos := parsePrototypes(t)
	for i := range specs {
		s := &specs[i]
		params, ok := protos[s.Name]
		if !ok {
			t.Errorf("%s: no prototype", s.Name)
			continue
		}
		// Slots never reach past the prototype's arguments on x86-64.
		n := 0
		for _, a := range layout(SysV, params) {
			for _, w := range a.words {
				n = max(n, w.reg+1, 6+w.stack+1)
			}
		}
		if s.Slots > n {
			t.Errorf("%s: Slots %d, but x86-64 passes it in %d", s.Name, s.Slots, n)
		}
	}
	for _, tc := range argsCases {
		spec := Lookup(tc.api)
		params, ok := protos[spec.Symbol(tc.sym)] // an NVTX form's own
		if !ok {
			params, ok = protos[spec.Name]
		}
		if !ok {
			continue
		}
		values := sysVValues(params, tc.args)
		// The memory the arguments point to: a launch config behind
		// argument 0, the handle an out pointer gets, a kernel's name.
		mem := map[uint64][]byte{}
		form, nvtx := nvtxForms[spec.Symbol(tc.sym)]
		if spec.DerefArg != 0 && !nvtx {
			mem[values[spec.DerefArg-1][0]] = wordBytes(tc.ext[:])
		}
		if spec.OutArg != 0 {
			mem[values[spec.OutArg-1][0]] = wordBytes([]uint64{tc.out})
		}
		message := false // the probe copies a message, or a kernel's name
		switch {
		case nvtx && form.str != 0:
			mem[values[form.str-1][0]], message = nvtxString(form.wide), true
		case nvtx && form.attr != 0:
			mem[values[form.attr-1][0]] = wordBytes(tc.ext[:])
			typ := uint32(tc.ext[4])
			mem[tc.ext[5]], message = nvtxString(typ == 2), typ == 1 || typ == 2
		case spec.StrArg != 0:
			mem[values[spec.StrArg-1][0]], message = []byte(kernelName), true
		}
		for _, abi := range abis {
			m := call(abi, params, values, mem)
			c := spec.cookie(abi, tc.sym)
			name := spec.Symbol(tc.sym) + " on " + abi.String()
			for _, fill := range []uint64{0, garbage | 0xf111} {
				e := probe(abi, c, m, fill)
				var a Args
				e.Decode(&a)
				want := tc.want
				if spec.Class == ClassAnnotation && message {
					want.Ptr = MessageKey([]byte(kernelName)) // the probe copied the message
				}
				if a != want {
					t.Errorf("%s (what the probe does not copy = %#x): decoded\n  %+v\nwant\n  %+v", name, fill, a, want)
				}
				// A driver launch knows its caller; nothing else reads one.
				if want := uint64(0); e.Caller != want && c&cookieTakeStub == 0 || c&cookieTakeStub != 0 && e.Caller != returnAddress {
					t.Errorf("%s: caller %#x, want the return address %#x (take stub %v)", name, e.Caller, uint64(returnAddress), c&cookieTakeStub != 0)
				}
				if message && e.String() != strings.TrimRight(kernelName, "\x00") {
					t.Errorf("%s: name %q", name, e.String())
				}
			}
			if spec.Class != ClassLaunch {
				continue
			}
			var a Args
			e := probe(abi, c, m, 0)
			e.Decode(&a)
			// A runtime launch hands its kernel stub (argument 0 or 1, in a
			// register on both ABIs) to the driver launch underneath.
			if spec.Layer == Runtime {
				pc := spec.pairCookie(abi, tc.sym)
				stub := m.regs[0]
				if int(pc>>cookieStrArg)&7 == 2 {
					stub = m.regs[1]
				}
				if stub != a.Func {
					t.Errorf("%s: hands over stub %#x, decodes %#x", name, stub, a.Func)
				}
			}
			// Aggregate mode reads the stream where Decode finds it.
			if got := launchStreamAt(abi, spec.aggregateCookie(abi), m); !a.HasStream || got != a.Stream {
				t.Errorf("%s: aggregate mode reads stream %#x, Decode finds %#x", name, got, a.Stream)
			}
		}
	}
}

// TestAAPCS64ByHand: the calls whose arguments go past six registers or
// pass a struct larger than 16 bytes, as arm64 passes them, written by hand
// from AAPCS64 (not through layout), decoded from what the arm64 probe reads.
func TestAAPCS64ByHand(t *testing.T) {
	id := wordBytes([]uint64{0x5eed, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15})
	for _, tc := range []struct {
		api   API
		regs  [8]uint64
		stack []uint64
		mem   map[uint64][]byte
		want  Args
	}{
		// cudaLaunchKernel(func, dim3 grid, dim3 block, args, sharedMem, stream):
		// x0 func, x1 grid x|y, x2 grid z, x3 block x|y, x4 block z, x5 args,
		// x6 sharedMem, x7 stream: nothing on the stack.
		{api: CudaLaunchKernel, regs: [8]uint64{0x401000, xy(1024, 2), 3, xy(256, 4), 1, 0x7ffe0000, 4096, 0x5500aa},
			stack: []uint64{garbage},
			want: Args{Func: 0x401000, Grid: Dim3{1024, 2, 3}, Block: Dim3{256, 4, 1}, SharedMem: 4096,
				Stream: 0x5500aa, HasStream: true}},
		// cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shmem, hStream, params, extra):
		// x0..x7 f..shmem, then hStream [sp], params [sp+8], extra [sp+16].
		{api: CuLaunchKernel, regs: [8]uint64{0x55f000, 120, 2, 3, 256, 4, 2, 0xc000},
			stack: []uint64{0x5500aa, 0x7ffe1000, 0},
			want: Args{Func: 0x55f000, Grid: Dim3{120, 2, 3}, Block: Dim3{256, 4, 2}, SharedMem: 0xc000,
				Stream: 0x5500aa, HasStream: true}},
		// cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, height, kind, stream): x0..x7.
		{api: CudaMemcpy2DAsync, regs: [8]uint64{0x600000, 1024, 0x7f0000000000, 1000, 1000, 7, 1, 0x5500aa},
			want: Args{Dst: 0x600000, Src: 0x7f0000000000, Bytes: 7000, Kind: HostToDevice, Stream: 0x5500aa, HasStream: true}},
		// ncclReduce(send, recv, count, type, op, root, comm, stream): comm x6, stream x7.
		{api: NcclReduce, regs: [8]uint64{0x7f1000, 0x7f2000, 5, 8, 2, 1, 0xc0, 0x5500aa},
			want: Args{Src: 0x7f1000, Dst: 0x7f2000, Size: 5, DataType: 8, RedOp: 2, Peer: 1, Comm: 0xc0, Stream: 0x5500aa,
				HasStream: true, Bytes: 40}},
		// ncclAllReduce(send, recv, count, type, op, comm, stream): stream x6.
		{api: NcclAllReduce, regs: [8]uint64{0x7f1000, 0x7f2000, 1000, 7, 0, 0xc0, 0x5500aa, garbage},
			want: Args{Src: 0x7f1000, Dst: 0x7f2000, Size: 1000, DataType: 7, Comm: 0xc0, Stream: 0x5500aa,
				HasStream: true, Peer: -1, Bytes: 4000}},
		// ncclCommInitRank(comm *, nranks, ncclUniqueId by value, rank): x2
		// points to the caller's copy of the id, the rank is x3.
		{api: NcclCommInitRank, regs: [8]uint64{0x7ffd00, 8, 0x7ffdd000, 5, garbage, garbage, garbage, garbage},
			mem:  map[uint64][]byte{0x7ffdd000: id, 0x7ffd00: wordBytes([]uint64{0xc0})},
			want: Args{Comm: 0xc0, Size: 8, Peer: 5, CommID: 0x5eed}},
	} {
		spec := Lookup(tc.api)
		m := &machine{regs: tc.regs, stack: append(tc.stack, garbage), lr: returnAddress, mem: tc.mem}
		e := probe(AAPCS64, spec.cookie(AAPCS64, 0), m, garbage|0xf111)
		var a Args
		e.Decode(&a)
		if a != tc.want {
			t.Errorf("%s on arm64: decoded\n  %+v\nwant\n  %+v", spec.Name, a, tc.want)
		}
		if spec.Class == ClassLaunch {
			if got := launchStreamAt(AAPCS64, spec.aggregateCookie(AAPCS64), m); got != tc.want.Stream {
				t.Errorf("%s on arm64: aggregate mode reads stream %#x", spec.Name, got)
			}
		}
	}
}

// TestLayoutByHand pins the layout model on a few prototypes.
func TestLayoutByHand(t *testing.T) {
	protos := parsePrototypes(t)
	places := func(abi ABI, name string) (regs, stack int, byRef bool) {
		for _, a := range layout(abi, protos[name]) {
			byRef = byRef || a.byRef
			for _, w := range a.words {
				if w.reg >= 0 {
					regs++
				} else {
					stack++
				}
			}
		}
		return regs, stack, byRef
	}
	for _, tc := range []struct {
		abi         ABI
		name        string
		regs, stack int
		byRef       bool
	}{
		{SysV, "cudaLaunchKernel", 6, 2, false}, // func, grid x|y z, block x|y z, args; smem, stream
		{AAPCS64, "cudaLaunchKernel", 8, 0, false},
		{SysV, "cuLaunchKernel", 6, 5, false},    // f..by; bz, shmem, hStream, params, extra
		{AAPCS64, "cuLaunchKernel", 8, 3, false}, // f..shmem; hStream, params, extra
		{SysV, "ncclCommInitRank", 3, 16, false}, // comm, nranks, rank; the id's 16 words
		{AAPCS64, "ncclCommInitRank", 4, 0, true},
		{SysV, "cudaDeviceSynchronize", 0, 0, false},
	} {
		regs, stack, byRef := places(tc.abi, tc.name)
		if regs != tc.regs || stack != tc.stack || byRef != tc.byRef {
			t.Errorf("%s on %v: %d registers, %d stack words, by reference %v; want %d, %d, %v",
				tc.name, tc.abi, regs, stack, byRef, tc.regs, tc.stack, tc.byRef)
		}
	}
	// A dim3 that does not fit in the registers left goes whole onto the
	// stack; x86-64 still gives later arguments the registers, AAPCS64 not.
	p := []param{word, word, word, word, word, dim3Val, word}
	if got := layout(SysV, p); got[5].words[0] != (place{-1, 0}) || got[6].words[0] != (place{5, -1}) {
		t.Errorf("x86-64: dim3 after five words at %v, then %v", got[5].words, got[6].words)
	}
	p = []param{word, word, word, word, word, word, word, dim3Val, word}
	if got := layout(AAPCS64, p); got[7].words[0] != (place{-1, 0}) || got[8].words[0] != (place{-1, 2}) {
		t.Errorf("arm64: dim3 after seven words at %v, then %v", got[7].words, got[8].words)
	}
}

// TestHostABI: the cookies this build attaches say its ABI.
func TestHostABI(t *testing.T) {
	s := Lookup(CuLaunchKernel)
	if got := CookieABI(s.Cookie(0)); got != HostABI() {
		t.Errorf("Cookie on %v says %v", HostABI(), got)
	}
	if s.Cookie(0) != s.cookie(HostABI(), 0) || s.AggregateCookie() != s.aggregateCookie(HostABI()) {
		t.Error("exported cookies differ from the host ABI's")
	}
	if SysV.String() == AAPCS64.String() {
		t.Error("ABIs named alike")
	}
}
