package event

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// outPointerArg is, for every API that returns a handle or an address
// through a pointer argument, that argument's index (CUDA_API.md).
var outPointerArg = map[API]int{
	CudaStreamCreate:              0, // cudaStream_t *pStream
	CudaStreamCreateWithFlags:     0,
	CudaStreamCreateWithPriority:  0,
	CudaEventCreate:               0, // cudaEvent_t *event
	CudaEventCreateWithFlags:      0,
	CudaMalloc:                    0, // void **devPtr
	CudaMallocAsync:               0,
	CudaHostAlloc:                 0, // void **pHost
	CudaMallocHost:                0,
	CuStreamCreate:                0, // CUstream *phStream
	CuStreamCreateWithPriority:    0,
	CuMemAlloc:                    0, // CUdeviceptr *dptr
	CuMemAllocAsync:               0,
	CuMemHostAlloc:                0, // void **pp
	CuMemAllocHost:                0,
	CuModuleGetFunction:           0, // CUfunction *hfunc
	CuLibraryGetKernel:            0, // CUkernel *pKernel
	CuKernelGetFunction:           0, // CUfunction *pFunc
	CudaStreamEndCapture:          1, // cudaGraph_t *pGraph
	CuStreamEndCapture:            1, // CUgraph *phGraph
	CudaGraphInstantiate:          0, // cudaGraphExec_t *pGraphExec
	CudaGraphInstantiateWithFlags: 0,
	NcclCommInitRank:              0, // ncclComm_t *comm
	CuGraphInstantiate:            0, // CUgraphExec *phGraphExec
	CudaMallocManaged:             0, // void **devPtr
	CudaMallocPitch:               0,
	CudaMallocFromPoolAsync:       0,
	CuMemAllocManaged:             0, // CUdeviceptr *dptr
	CuMemAllocPitch:               0,
	CuMemAllocFromPoolAsync:       0,
	CuMemCreate:                   0, // CUmemGenericAllocationHandle *handle
	CudaGraphCreate:               0, // cudaGraph_t *pGraph
	CuGraphCreate:                 0, // CUgraph *phGraph
	CudaGraphAddKernelNode:        0, // cudaGraphNode_t *pGraphNode
	CuGraphAddKernelNode:          0, // CUgraphNode *phGraphNode
}

// strArg is, for the load-time calls that name a kernel, the index of the
// const char *name argument.
// derefArg is the index of the pointer argument whose struct the probe
// copies.
var derefArg = map[API]int{
	CudaLaunchKernelExC:              0, // (const cudaLaunchConfig_t *, func, args)
	CuLaunchKernelEx:                 0, // (const CUlaunchConfig *, f, params, extra)
	CudaGraphAddKernelNode:           4, // (node *, graph, deps, n, const cudaKernelNodeParams *)
	CuGraphAddKernelNode:             4,
	CudaGraphExecKernelNodeSetParams: 2, // (exec, node, const cudaKernelNodeParams *)
	CuGraphExecKernelNodeSetParams:   2,
}

var strArg = map[API]int{
	CuModuleGetFunction: 2, // (CUfunction *, CUmodule, const char *name)
	CuLibraryGetKernel:  2, // (CUkernel *, CUlibrary, const char *name)
	NvtxRangePushA:      0, // (const char *message)
	NvtxRangeStartA:     0,
	NvtxMarkA:           0,
}

// stubArg is, for launches, the index of the kernel argument (host stub or
// CUfunction) when it is not the first.
var stubArg = map[API]int{
	CudaLaunchKernelExC: 1, // (config, func, args)
	CuLaunchKernelEx:    1, // (config, f, params, extra)
}

// slots is, for the APIs whose decoded arguments go past the six x86-64
// passes in registers, how many argument slots Decode reads (a dim3 by
// value takes two).
var slots = map[API]int{
	NcclCommInitRank:            7, // x86-64: the unique id's first word
	CudaLaunchKernel:            8, // sharedMem, stream
	CudaLaunchCooperativeKernel: 8,
	CudaMemcpy2D:                7, // kind
	CudaMemcpy2DAsync:           8, // kind, stream
	CuLaunchKernel:              9, // blockDimZ, sharedMemBytes, hStream
	CuLaunchCooperativeKernel:   9,
	NcclAllReduce:               7, // stream
	NcclBroadcast:               7, // stream
	NcclReduce:                  8, // comm, stream
	NcclReduceScatter:           7, // stream
}

var abis = []ABI{SysV, AAPCS64}

// nvtxForm is where an NVTX entry point's message is (nvToolsExt.h): in
// its string argument str (1 + the index; wide: of wchar_t), or behind its
// nvtxEventAttributes_t argument attr (1 + the index); the domain forms
// take the domain handle first.
type nvtxForm struct {
	api       API
	str, attr int
	wide      bool
}

// nvtxForms are the NVTX entry points hooked, by symbol: each is one of
// the five APIs the injection library reports too.
var nvtxForms = map[string]nvtxForm{
	"nvtxRangePushA":         {api: NvtxRangePushA, str: 1},
	"nvtxRangePushW":         {api: NvtxRangePushA, str: 1, wide: true},
	"nvtxRangePushEx":        {api: NvtxRangePushA, attr: 1},
	"nvtxDomainRangePushEx":  {api: NvtxRangePushA, attr: 2},
	"nvtxRangePop":           {api: NvtxRangePop},
	"nvtxDomainRangePop":     {api: NvtxRangePop},
	"nvtxRangeStartA":        {api: NvtxRangeStartA, str: 1},
	"nvtxRangeStartW":        {api: NvtxRangeStartA, str: 1, wide: true},
	"nvtxRangeStartEx":       {api: NvtxRangeStartA, attr: 1},
	"nvtxDomainRangeStartEx": {api: NvtxRangeStartA, attr: 2},
	"nvtxRangeEnd":           {api: NvtxRangeEnd},
	"nvtxDomainRangeEnd":     {api: NvtxRangeEnd},
	"nvtxMarkA":              {api: NvtxMarkA, str: 1},
	"nvtxMarkW":              {api: NvtxMarkA, str: 1, wide: true},
	"nvtxMarkEx":             {api: NvtxMarkA, attr: 1},
	"nvtxDomainMarkEx":       {api: NvtxMarkA, attr: 2},
}

var layerPrefix = map[Layer]string{Runtime: "cuda", Driver: "cu", NCCL: "nccl", NVTX: "nvtx"}

func TestSpecTable(t *testing.T) {
	if int(numAPIs)-1 != len(specs) {
		t.Fatalf("%d API ids, %d specs", numAPIs-1, len(specs))
	}
	names := map[string]API{}
	symbols := map[string]API{}
	for i := range specs {
		s := &specs[i]
		if s.API != API(i+1) {
			t.Errorf("specs[%d] is %v (id %d), want id %d", i, s.Name, s.API, i+1)
		}
		if Lookup(s.API) != s {
			t.Errorf("Lookup(%d) does not return %s's spec", s.API, s.Name)
		}
		if s.API.String() != s.Name {
			t.Errorf("API(%d).String() = %q, want %q", s.API, s.API.String(), s.Name)
		}
		if prev, dup := names[s.Name]; dup {
			t.Errorf("name %s used by ids %d and %d", s.Name, prev, s.API)
		}
		names[s.Name] = s.API
		prefix, ok := layerPrefix[s.Layer]
		if !ok || !strings.HasPrefix(s.Name, prefix) || (s.Layer == Driver && strings.HasPrefix(s.Name, "cuda")) {
			t.Errorf("%s: name does not fit layer %v", s.Name, s.Layer)
		}
		if len(s.Symbols) == 0 || len(s.Symbols) > 256 {
			t.Errorf("%s: %d symbols, want 1..256 (8 cookie bits)", s.Name, len(s.Symbols))
		}
		// The first symbol is the default build's: the plain name, or the
		// driver's _v2 where the plain one is a legacy ABI.
		if s.Symbols[0] != s.Name && s.Symbols[0] != s.Name+"_v2" {
			t.Errorf("%s: first symbol %q, want the plain name", s.Name, s.Symbols[0])
		}
		for j, sym := range s.Symbols {
			if prev, dup := symbols[sym]; dup {
				t.Errorf("symbol %s hooked for both %v and %v", sym, prev, s.API)
			}
			symbols[sym] = s.API
			if s.Symbol(j) != sym {
				t.Errorf("%s.Symbol(%d) = %q, want %q", s.Name, j, s.Symbol(j), sym)
			}
			// CUDA 13's generated stubs call the runtime's launch as
			// "__cudaLaunchKernel".
			switch strings.TrimPrefix(strings.TrimPrefix(sym, "__"), s.Name) {
			case "", "_v2", "_ptsz", "_ptds", "_v2_ptsz":
			default:
				// NVTX: its other forms (W, Ex, a domain's).
				if f, ok := nvtxForms[sym]; !ok || f.api != s.API {
					t.Errorf("%s: unexpected variant %q", s.Name, sym)
				}
			}
			// PerThreadDefault exactly for the _ptsz/_ptds variants.
			wantPT := strings.HasSuffix(sym, "_ptsz") || strings.HasSuffix(sym, "_ptds")
			if s.PerThreadDefault(j) != wantPT {
				t.Errorf("%s.PerThreadDefault(%d) [%s] = %v, want %v", s.Name, j, sym, s.PerThreadDefault(j), wantPT)
			}
		}
		// Out-of-range symbol indices fall back to the plain name.
		if s.Symbol(len(s.Symbols)) != s.Name || s.Symbol(-1) != s.Name || s.PerThreadDefault(len(s.Symbols)) {
			t.Errorf("%s: out-of-range symbol index not answered by the plain name", s.Name)
		}
		if s.Slots != slots[s.API] {
			t.Errorf("%s: Slots %d, want %d", s.Name, s.Slots, slots[s.API])
		}
		for _, abi := range abis {
			// 2 cookie bits; the BPF side copies the stack words into args[]
			// behind the registers.
			if n := s.stackWords(abi); n > 3 || abi.registers()+n > NArgs {
				t.Errorf("%s: %d stack words on %v: more than args[] holds", s.Name, n, abi)
			}
		}
		if (s.MemArg != 0) != (s.API == NcclCommInitRank) || (s.MemArg != 0 && s.DerefArg != 0) {
			t.Errorf("%s: MemArg %d (DerefArg %d): only ncclCommInitRank passes a struct larger than 16 bytes", s.Name, s.MemArg, s.DerefArg)
		}
		// An out pointer is read at return, so only return-probed APIs may have one,
		// and it must be the pointer argument the call writes through.
		want, hasOut := outPointerArg[s.API]
		switch {
		case s.OutArg != 0 && !s.Return:
			t.Errorf("%s: OutArg %d without Return: the out pointer is read at return", s.Name, s.OutArg)
		case s.OutArg != 0 && !hasOut:
			t.Errorf("%s: OutArg %d, but the API has no out-pointer argument", s.Name, s.OutArg)
		case hasOut && s.OutArg != want+1:
			t.Errorf("%s: OutArg %d, want %d (argument %d is the out pointer)", s.Name, s.OutArg, want+1, want)
		}
		if s.OutArg < 0 || s.OutArg > 6 {
			t.Errorf("%s: OutArg %d outside the register arguments", s.Name, s.OutArg)
		}
		// A call that may block needs its duration: it must be return-probed.
		if s.Sync && !s.Return {
			t.Errorf("%s: Sync without Return", s.Name)
		}
		// DerefArg only for the launch config structs (argument 0) and a
		// graph kernel node's parameters.
		if w, has := derefArg[s.API]; (has && s.DerefArg != w+1) || (!has && s.DerefArg != 0) {
			t.Errorf("%s: DerefArg = %d", s.Name, s.DerefArg)
		}
		// The kernel name argument of load-time calls, and NVTX messages,
		// copied as a string.
		if w, has := strArg[s.API]; (has && s.StrArg != w+1) || (!has && s.StrArg != 0) {
			t.Errorf("%s: StrArg %d, want %d", s.Name, s.StrArg, w+1)
		}
		if s.StrArg != 0 && (s.StrArg-1 >= 6 || (s.Class != ClassFuncName && s.Class != ClassAnnotation)) {
			t.Errorf("%s: StrArg %d is not a copied argument of a load-time call or an annotation", s.Name, s.StrArg)
		}
		// Launches hand their kernel argument between the layers.
		if s.StubArg != stubArg[s.API] || (s.StubArg != 0 && s.Class != ClassLaunch) {
			t.Errorf("%s: StubArg %d, want %d", s.Name, s.StubArg, stubArg[s.API])
		}
	}
	// The calls that block and the queries need their return value or duration.
	// Every NVTX form is hooked.
	for sym, f := range nvtxForms {
		if symbols[sym] != f.api {
			t.Errorf("NVTX's %s is not hooked as %v", sym, f.api)
		}
	}
	for _, api := range []API{CudaMemcpy, CudaMemcpy2D, CudaMemset, CudaEventSynchronize, CudaStreamSynchronize,
		CudaDeviceSynchronize, CudaFree, CudaEventQuery, CudaStreamQuery, CudaMemcpyAsync, CudaMemcpy2DAsync,
		CudaHostRegister, CuMemcpyHtoD, CuMemcpyDtoH, CuEventSynchronize, CuStreamSynchronize, CuCtxSynchronize,
		CuMemFree, CuEventQuery, CuStreamQuery, CuMemcpyHtoDAsync, CuMemcpyDtoHAsync, CuMemcpyAsync, CuMemHostRegister} {
		if !Lookup(api).Return {
			t.Errorf("%v is not return-probed", api)
		}
	}
	for _, api := range []API{CudaMemcpy, CudaMemcpy2D, CudaMemset, CudaEventSynchronize, CudaStreamSynchronize,
		CudaDeviceSynchronize, CudaFree, CuMemcpyHtoD, CuMemcpyDtoH, CuEventSynchronize, CuStreamSynchronize,
		CuCtxSynchronize, CuMemFree} {
		if !Lookup(api).Sync {
			t.Errorf("%v is not marked Sync", api)
		}
	}
	// Hot calls must stay entry-only: a uretprobe doubles their cost.
	for _, api := range []API{CudaLaunchKernel, CudaLaunchKernelExC, CudaEventRecord, CudaStreamWaitEvent, CudaMemsetAsync,
		CuLaunchKernel, CuLaunchKernelEx, CuEventRecord, CuEventRecordWithFlags, CuStreamWaitEvent, CuMemsetD8Async,
		NcclAllReduce, NcclAllGather, NcclSend, NcclRecv, NcclGroupStart} {
		if Lookup(api).Return {
			t.Errorf("hot call %v is return-probed", api)
		}
	}
	// Synchronous calls have _ptds variants, stream calls _ptsz.
	for sym, variant := range map[string]string{"cudaMemcpy": "cudaMemcpy_ptds", "cudaMemset": "cudaMemset_ptds",
		"cudaLaunchKernel": "cudaLaunchKernel_ptsz", "cudaStreamSynchronize": "cudaStreamSynchronize_ptsz",
		"cudaMemcpyAsync": "cudaMemcpyAsync_ptsz", "cudaEventRecord": "cudaEventRecord_ptsz",
		"cuLaunchKernel": "cuLaunchKernel_ptsz", "cuMemcpyDtoHAsync_v2": "cuMemcpyDtoHAsync_v2_ptsz"} {
		api := symbols[sym]
		if symbols[variant] != api || api == 0 {
			t.Errorf("%s is not a variant of %s", variant, sym)
		}
	}
}

func TestLookup(t *testing.T) {
	for _, a := range []API{0, numAPIs, numAPIs + 1, LibraryLoad, 0xffff} {
		if Lookup(a) != nil {
			t.Errorf("Lookup(%d) = %v, want nil", a, Lookup(a).Name)
		}
	}
	if got := API(999).String(); got != "api#999" {
		t.Errorf("API(999).String() = %q", got)
	}
	// Every spec is in exactly one layer's list, in id order.
	seen := map[API]bool{}
	for _, l := range Layers {
		got := Specs(l)
		if len(got) == 0 {
			t.Errorf("no %v specs", l)
		}
		for i, s := range got {
			if s.Layer != l || s != Lookup(s.API) || seen[s.API] || (i > 0 && s.API <= got[i-1].API) {
				t.Errorf("Specs(%v)[%d] = %s (layer %v)", l, i, s.Name, s.Layer)
			}
			seen[s.API] = true
		}
	}
	if len(seen) != len(specs) {
		t.Errorf("layers list %d specs of %d", len(seen), len(specs))
	}
	if len(Specs(0)) != 0 {
		t.Error("specs without a layer")
	}
	// Ids are part of the recording format: a few pinned values.
	for api, id := range map[API]int{CudaStreamCreate: 1, CudaLaunchKernel: 5, CudaLaunchHostFunc: 35, CuLaunchKernel: 36, NcclAllReduce: 71} {
		if int(api) != id {
			t.Errorf("%v has id %d, recordings say %d", api, api, id)
		}
	}
}

func TestLayer(t *testing.T) {
	tests := []struct {
		l                   Layer
		name, cat, probeSym string
	}{
		{Runtime, "runtime", "cuda_runtime", "cudaLaunchKernel"},
		{Driver, "driver", "cuda_driver", "cuLaunchKernel"},
		{NCCL, "nccl", "nccl", "ncclAllReduce"},
		{NVTX, "nvtx", "user_annotation", "nvtxRangePushA"},
		{0, "unknown", "cuda_runtime", ""},
		{9, "unknown", "cuda_runtime", ""},
	}
	for _, tc := range tests {
		if tc.l.String() != tc.name || tc.l.Category() != tc.cat || tc.l.ProbeSymbol() != tc.probeSym {
			t.Errorf("Layer %d: %q %q %q, want %q %q %q", tc.l, tc.l.String(), tc.l.Category(), tc.l.ProbeSymbol(),
				tc.name, tc.cat, tc.probeSym)
		}
	}
}

func TestCookie(t *testing.T) {
	for i := range specs {
		s := &specs[i]
		for _, abi := range abis {
			for sym := range s.Symbols {
				c := s.cookie(abi, sym)
				if CookieAPI(c) != s.API || CookieSymbol(c) != sym || CookieHasStack(c) || CookieABI(c) != abi {
					t.Errorf("%s/%d: %v cookie %#x decodes to api %d sym %d stack %v abi %v", s.Name, sym, abi, c,
						CookieAPI(c), CookieSymbol(c), CookieHasStack(c), CookieABI(c))
				}
				// The BPF side's view (bpf/cudatap.h).
				if got := int(c>>24) & 3; got != s.stackWords(abi) {
					t.Errorf("%s: %v COOKIE_NSTACK = %d, want %d", s.Name, abi, got, s.stackWords(abi))
				}
				if got := c&(1<<26) != 0; got != s.Return {
					t.Errorf("%s: COOKIE_RET = %v, want %v", s.Name, got, s.Return)
				}
				if got := int(c>>27) & 7; got != s.OutArg {
					t.Errorf("%s: COOKIE_OUT = %d, want %d", s.Name, got, s.OutArg)
				}
				// Behind a pointer argument (a launch config, a node's
				// parameters), or on arm64 behind the pointer to a struct
				// passed by value.
				wantDeref, wantArg := s.DerefArg != 0, max(0, s.DerefArg-1)
				if abi == AAPCS64 && s.MemArg != 0 {
					wantDeref, wantArg = true, s.MemArg-1
				}
				wantStr, wantAttr, wantWide := s.StrArg, false, false
				if f, ok := nvtxForms[s.Symbol(sym)]; ok {
					// An Ex form's attributes are copied, the message read
					// behind them (COOKIE_STR_ATTR).
					wantDeref, wantArg, wantAttr = f.attr != 0, max(0, f.attr-1), f.attr != 0
					wantStr, wantWide = f.str, f.wide
				}
				if got, arg := c&(1<<30) != 0, int(c>>50)&7; got != wantDeref || arg != wantArg {
					t.Errorf("%s: %v COOKIE_DEREF = %v behind argument %d, want %v behind %d", s.Symbol(sym), abi, got, arg, wantDeref, wantArg)
				}
				if got := int(c>>33) & 7; got != wantStr {
					t.Errorf("%s: COOKIE_STRARG = %d, want %d", s.Symbol(sym), got, wantStr)
				}
				if got, wide := c&(1<<60) != 0, c&(1<<61) != 0; got != wantAttr || wide != wantWide {
					t.Errorf("%s: COOKIE_STR_ATTR %v, COOKIE_STR_WIDE %v; want %v, %v", s.Symbol(sym), got, wide, wantAttr, wantWide)
				}
				c &^= 3 << 60
				if got := c&(1<<37) != 0; got != (s.Layer == Driver && s.Class == ClassLaunch) {
					t.Errorf("%s: COOKIE_TAKE_STUB = %v", s.Name, got)
				}
				// A capture's begin and end count the process capturing.
				if got := c & (3 << 57) >> 57; got != map[Class]uint64{ClassCaptureBegin: 1, ClassCaptureEnd: 2}[s.Class] {
					t.Errorf("%s: capture bits %d", s.Name, got)
				}
				c &^= 3 << 57
				if c&(1<<31|1<<32|1<<36) != 0 || c>>38&^(1<<11|7<<12) != 0 || (abi == SysV && c>>49&^(7<<1) != 0) || CookieHasKernelArgs(c) {
					t.Errorf("%s: %v cookie %#x sets stack, stop, pair or unknown bits", s.Name, abi, c)
				}
				if s.Layer == Runtime && s.Class == ClassLaunch {
					pc := s.pairCookie(abi, sym)
					if pc&^(uint64(7)<<33|CookiePair) != c || int(pc>>33)&7 != s.StubArg+1 || pc&CookiePair == 0 {
						t.Errorf("%s/%d: pair cookie %#x from %#x", s.Name, sym, pc, c)
					}
				}
				// The kernel-args bits (53..56) are apart from every other field.
				if k := s.kernelArgsCookie(abi); k&^(0xf<<53) != 0 || (k != 0) != (s.ParamsArg != 0) ||
					CookieAPI(c|k) != s.API || CookieSymbol(c|k) != sym || CookieABI(c|k) != abi {
					t.Errorf("%s/%d: %v kernel-args cookie %#x", s.Name, sym, abi, k)
				}
				// The tracer ORs in the stack bit; nothing else moves.
				cs := c | CookieStack
				if CookieAPI(cs) != s.API || CookieSymbol(cs) != sym || !CookieHasStack(cs) {
					t.Errorf("%s/%d: stack cookie %#x decodes to api %d sym %d", s.Name, sym, cs, CookieAPI(cs), CookieSymbol(cs))
				}
			}
		}
	}
	// Hand-built cookies: every field at its extreme.
	s := Spec{API: 0xffff, Slots: 9, Return: true, OutArg: 7, DerefArg: 8, StrArg: 7}
	if c := s.cookie(SysV, 255); c != 0xffff|0xff<<16|3<<24|1<<26|7<<27|1<<30|7<<33|7<<50 {
		t.Errorf("cookie with every field set = %#x", c)
	}
	s = Spec{API: 0xffff, Slots: 9, Return: true, OutArg: 7, MemArg: 8, StrArg: 7}
	if c := s.cookie(AAPCS64, 255); c != 0xffff|0xff<<16|1<<24|1<<26|7<<27|1<<30|7<<33|1<<49|7<<50 {
		t.Errorf("arm64 cookie with every field set = %#x", c)
	}
	// Out-of-range fields are masked, never bleed into neighbours.
	s = Spec{API: 5, Slots: 6 + 4 /* masked to 0 */, OutArg: 8 /* masked to 0 */, StrArg: 8 /* masked to 0 */, MemArg: 9 /* masked to 0 */}
	if c := s.cookie(SysV, 256+3); c != 5|3<<16 {
		t.Errorf("masked cookie = %#x, want %#x", c, 5|3<<16)
	}
	if c := s.cookie(AAPCS64, 256+3); c != 5|3<<16|2<<24|1<<30|1<<49 {
		t.Errorf("masked arm64 cookie = %#x, want %#x", c, 5|3<<16|2<<24|1<<30|1<<49)
	}
	if CookieStop != 1<<32 || CookieStack != 1<<31 || CookiePair != 1<<36 || cookieTakeStub != 1<<37 || cookieStrArg != 33 {
		t.Errorf("CookieStop %#x CookieStack %#x", uint64(CookieStop), uint64(CookieStack))
	}
	if CookieAPI(uint64(LibraryLoad)|CookieStop) != LibraryLoad {
		t.Error("stop bit changes the library-load cookie's API")
	}
}

// TestCookieMatchesBPFHeader reads the bit layout from bpf/cudatap.h, which
// the BPF programs compile against.
func TestCookieMatchesBPFHeader(t *testing.T) {
	src, err := os.ReadFile("../../bpf/cudatap.h")
	if err != nil {
		t.Skipf("bpf header: %v", err)
	}
	defs := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^#define\s+(\w+)(\([^)]*\))?\s+(.+)$`).FindAllStringSubmatch(string(src), -1) {
		defs[m[1]] = strings.TrimSpace(m[3])
	}
	bit := func(name string) uint64 {
		m := regexp.MustCompile(`^\(1ULL << (\d+)\)$`).FindStringSubmatch(defs[name])
		if m == nil {
			t.Fatalf("%s = %q, not a (1ULL << n) bit", name, defs[name])
		}
		n, _ := strconv.Atoi(m[1])
		return 1 << n
	}
	if got := bit("COOKIE_RET"); got != cookieRet {
		t.Errorf("COOKIE_RET %#x, Go %#x", got, cookieRet)
	}
	if got := bit("COOKIE_DEREF"); got != cookieDeref {
		t.Errorf("COOKIE_DEREF %#x, Go %#x", got, cookieDeref)
	}
	if got := bit("COOKIE_ARM64"); got != CookieARM64 {
		t.Errorf("COOKIE_ARM64 %#x, Go %#x", got, uint64(CookieARM64))
	}
	if got := bit("COOKIE_STACK"); got != CookieStack {
		t.Errorf("COOKIE_STACK %#x, Go %#x", got, uint64(CookieStack))
	}
	if got := bit("COOKIE_STOP"); got != CookieStop {
		t.Errorf("COOKIE_STOP %#x, Go %#x", got, uint64(CookieStop))
	}
	if got := bit("COOKIE_PAIR"); got != CookiePair {
		t.Errorf("COOKIE_PAIR %#x, Go %#x", got, uint64(CookiePair))
	}
	if got := bit("COOKIE_TAKE_STUB"); got != cookieTakeStub {
		t.Errorf("COOKIE_TAKE_STUB %#x, Go %#x", got, uint64(cookieTakeStub))
	}
	for name, want := range map[string]uint64{"COOKIE_CAPTURE_BEGIN": cookieCaptureBegin, "COOKIE_CAPTURE_END": cookieCaptureEnd,
		"COOKIE_CAPTURE_STACK": CookieCaptureStack, "COOKIE_STR_ATTR": cookieStrAttr, "COOKIE_STR_WIDE": cookieStrWide} {
		if got := bit(name); got != want {
			t.Errorf("%s %#x, Go %#x", name, got, want)
		}
	}
	for name, want := range map[string]string{
		"COOKIE_KARGS":      "(((c) >> " + strconv.Itoa(cookieKernelArgs) + ") & 0xf)",
		"KARG_PARAMS":       strconv.Itoa(KernelParams),
		"KARG_ONE":          strconv.Itoa(KernelValueMax),
		"KARG_START":        strconv.Itoa(kernelStart),
		"EV_KARGS_FAULT":    "0x" + strconv.FormatUint(FlagKernelArgsFault, 16),
		"COOKIE_API":        "((c) & 0xffff)",
		"COOKIE_NSTACK":     "(((c) >> 24) & 0x3)",
		"COOKIE_OUT":        "(((c) >> 27) & 0x7)",
		"COOKIE_STRARG":     "(((c) >> 33) & 0x7)",
		"COOKIE_DEREF_ARG":  "(((c) >> " + strconv.Itoa(cookieDerefArg) + ") & 0x7)",
		"MAX_PY":            strconv.Itoa(MaxPy),
		"STACK_COPY":        strconv.Itoa(StackCopy),
		"EV_PY_TRUNCATED":   "0x" + strconv.FormatUint(FlagPyTruncated, 16),
		"NARGS":             strconv.Itoa(NArgs),
		"NEXT":              strconv.Itoa(NExt),
		"MAX_STACK":         strconv.Itoa(MaxStack),
		"EV_STACKARG_FAULT": "0x" + strconv.FormatUint(FlagStackArgFault, 16),
		"EV_DEREF_FAULT":    "0x" + strconv.FormatUint(FlagDerefFault, 16),
		"EV_OUT_FAULT":      "0x" + strconv.FormatUint(FlagOutFault, 16),
		"EV_HAS_RET":        "0x" + strconv.FormatUint(FlagHasRet, 16),
		// The messageType Decode reads a wide Ex message by.
		"NVTX_MESSAGE_UNICODE": strconv.Itoa(nvtxMessageUnicode),
	} {
		got := defs[name]
		if i := strings.Index(got, "/*"); i >= 0 {
			got = strings.TrimSpace(got[:i])
		}
		if got != want {
			t.Errorf("bpf/cudatap.h: %s = %q, Go expects %q", name, got, want)
		}
	}
}
