package sim

import (
	"bufio"
	"debug/elf"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// The entry points the tracer hooks, which the runtime must export.
var required = []string{
	"cudaStreamCreate", "cudaStreamCreateWithFlags", "cudaStreamCreateWithPriority", "cudaStreamDestroy",
	"cudaLaunchKernel", "cudaLaunchKernelExC", "cudaLaunchCooperativeKernel",
	"cudaMemcpy", "cudaMemcpyAsync", "cudaMemcpy2D", "cudaMemcpy2DAsync", "cudaMemset", "cudaMemsetAsync",
	"cudaEventCreate", "cudaEventCreateWithFlags", "cudaEventDestroy", "cudaEventRecord",
	"cudaEventRecordWithFlags", "cudaStreamWaitEvent", "cudaEventSynchronize", "cudaEventQuery",
	"cudaStreamSynchronize", "cudaStreamQuery", "cudaDeviceSynchronize",
	"cudaMalloc", "cudaFree", "cudaMallocAsync", "cudaFreeAsync",
	"cudaHostAlloc", "cudaMallocHost", "cudaFreeHost", "cudaHostRegister", "cudaHostUnregister",
	"cudaGraphLaunch", "cudaLaunchHostFunc", "cudaGetDevice", "cudaGetLastError", "cudaSetDevice",
	"cudaLaunchKernel_ptsz", "cudaLaunchKernelExC_ptsz", "cudaMemcpyAsync_ptsz", "cudaMemcpy2DAsync_ptsz",
	"cudaMemsetAsync_ptsz", "cudaEventRecord_ptsz", "cudaEventRecordWithFlags_ptsz",
	"cudaStreamWaitEvent_ptsz", "cudaStreamSynchronize_ptsz", "cudaStreamQuery_ptsz",
	"cudaMallocAsync_ptsz", "cudaFreeAsync_ptsz", "cudaGraphLaunch_ptsz", "cudaLaunchHostFunc_ptsz",
	"cudaMemcpy_ptds", "cudaMemset_ptds", "cudaMemcpy2D_ptds",
}

// The driver entry points the tracer hooks, which the driver must export.
var requiredDriver = []string{
	"cuInit", "cuLaunchKernel", "cuLaunchKernel_ptsz", "cuLaunchKernelEx", "cuLaunchKernelEx_ptsz",
	"cuLaunchCooperativeKernel", "cuLaunchCooperativeKernel_ptsz",
	"cuMemcpyHtoDAsync_v2", "cuMemcpyDtoHAsync_v2", "cuMemcpyDtoDAsync_v2", "cuMemcpyAsync",
	"cuMemcpyHtoDAsync_v2_ptsz", "cuMemcpyDtoHAsync_v2_ptsz", "cuMemcpyDtoDAsync_v2_ptsz", "cuMemcpyAsync_ptsz",
	"cuMemcpyHtoD_v2", "cuMemcpyDtoH_v2", "cuMemsetD8Async", "cuMemsetD32Async", "cuMemsetD8Async_ptsz",
	"cuMemsetD32Async_ptsz", "cuEventCreate", "cuEventRecord", "cuEventRecordWithFlags", "cuEventRecord_ptsz",
	"cuEventRecordWithFlags_ptsz", "cuStreamWaitEvent", "cuStreamWaitEvent_ptsz", "cuEventSynchronize",
	"cuEventQuery", "cuStreamCreate", "cuStreamCreateWithPriority", "cuStreamDestroy_v2",
	"cuStreamSynchronize", "cuStreamSynchronize_ptsz", "cuStreamQuery", "cuStreamQuery_ptsz",
	"cuCtxSynchronize", "cuMemAlloc_v2", "cuMemFree_v2", "cuMemAllocAsync", "cuMemAllocAsync_ptsz",
	"cuMemFreeAsync", "cuMemFreeAsync_ptsz", "cuMemHostAlloc", "cuMemAllocHost_v2", "cuMemFreeHost",
	"cuMemHostRegister_v2", "cuMemHostUnregister", "cuGraphLaunch", "cuGraphLaunch_ptsz",
	"cuModuleLoadData", "cuModuleGetFunction", "cuLibraryLoadData", "cuLibraryGetKernel", "cuKernelGetFunction",
}

// The NCCL entry points, each exported as ncclX and pncclX.
var ncclEntries = []string{
	"ncclGetUniqueId", "ncclCommInitRank", "ncclCommDestroy", "ncclAllReduce", "ncclBroadcast", "ncclReduce",
	"ncclAllGather", "ncclReduceScatter", "ncclSend", "ncclRecv", "ncclGroupStart", "ncclGroupEnd",
}

var (
	buildOnce sync.Once
	shared    *Build
	buildErr  error
	buildDir  string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// build compiles once for the whole package (a few hundred ms of cc).
func build(t *testing.T) *Build {
	t.Helper()
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "cudatap-sim-")
		if buildErr == nil {
			shared, buildErr = Compile(buildDir)
		}
	})
	if errors.Is(buildErr, ErrNoCompiler) {
		t.Skip(buildErr)
	}
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return shared
}

// runReport runs a driver to completion and parses its report.
func runReport(t *testing.T, name string, args ...string) *Report {
	t.Helper()
	cmd := exec.Command(name, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %v: %v\n%s", filepath.Base(name), args, err, stderr.String())
	}
	r, err := ParseReport(out)
	if err != nil {
		t.Fatalf("%s %v: %v\n%s", filepath.Base(name), args, err, out)
	}
	if r.PID <= 0 {
		t.Errorf("%s %v: pid %d", filepath.Base(name), args, r.PID)
	}
	return r
}

// lazyLoading are the calls of kernel registration (__cudaRegisterFunction,
// made by every workload with a runtime) and lazy module loading (the
// runtime's driver calls at a kernel's first launch). assertCalls leaves
// them out unless want names them; TestLazyKernelLoading checks them.
var lazyLoading = []string{"__cudaRegisterFunction", "cuLibraryLoadData", "cuLibraryGetKernel", "cuKernelGetFunction"}

func assertCalls(t *testing.T, what string, got, want map[string]int) {
	t.Helper()
	got = maps.Clone(got)
	for _, k := range lazyLoading {
		if _, ok := want[k]; !ok {
			delete(got, k)
		}
	}
	if !maps.Equal(got, want) {
		t.Errorf("%s calls:\n got %v\nwant %v", what, got, want)
	}
}

// basicCalls is what scenario basic must report for iters iterations on k
// streams.
func basicCalls(iters, k int) map[string]int {
	return map[string]int{
		"cudaStreamCreateWithFlags":    k - 1,
		"cudaStreamCreateWithPriority": 1,
		"cudaStreamDestroy":            k,
		"cudaLaunchKernel":             iters * (k + 1),
		"cudaMemcpyAsync":              2 * iters,
		"cudaEventRecord":              iters,
		"cudaStreamWaitEvent":          iters,
		"cudaMemsetAsync":              iters,
		"cudaStreamSynchronize":        iters / 10,
		"cudaMalloc":                   1 + iters/10,
		"cudaFree":                     1 + iters/10,
		"cudaHostAlloc":                1,
		"cudaFreeHost":                 1,
		"cudaEventCreate":              1,
		"cudaEventDestroy":             1,
		"cudaDeviceSynchronize":        1,
	}
}

// trainCalls is what scenario train must report for iters iterations:
// setup, per iteration the batch copy, five launches and a read-back (a
// copy and a sync), every 4th a logged one too, and teardown.
func trainCalls(iters int) map[string]int {
	return map[string]int{
		"cudaStreamCreateWithFlags": 1, "cudaMalloc": 1, "cudaHostAlloc": 1, "cudaMemcpy": 1,
		"cudaMemcpyAsync": 2*iters + iters/4, "cudaLaunchKernel": 5 * iters, "cudaStreamSynchronize": iters + iters/4,
		"cudaDeviceSynchronize": 1, "cudaFreeHost": 1, "cudaFree": 1, "cudaStreamDestroy": 1,
	}
}

// basicInternal is the driver calls the runtime makes underneath scenario
// basic: one per runtime call that reaches the GPU, and cuInit once.
func basicInternal(iters, k int) map[string]int {
	return map[string]int{
		"cuInit":                     1,
		"cuStreamCreate":             k - 1,
		"cuStreamCreateWithPriority": 1,
		"cuStreamDestroy_v2":         k,
		"cuLaunchKernel":             iters * (k + 1),
		"cuMemcpyHtoDAsync_v2":       iters,
		"cuMemcpyDtoHAsync_v2":       iters,
		"cuEventRecordWithFlags":     iters,
		"cuStreamWaitEvent":          iters,
		"cuMemsetD8Async":            iters,
		"cuStreamSynchronize":        iters / 10,
		"cuMemAlloc_v2":              1 + iters/10,
		"cuMemFree_v2":               1 + iters/10,
		"cuMemHostAlloc":             1,
		"cuMemFreeHost":              1,
		"cuEventCreate":              1,
		"cuEventDestroy_v2":          1,
		"cuCtxSynchronize":           1,
	}
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

func TestScenarios(t *testing.T) {
	b := build(t)
	t.Run("basic", func(t *testing.T) {
		r := runReport(t, b.Workload, "--iters", "20", "--streams", "3")
		assertCalls(t, "basic", r.Calls, basicCalls(20, 3))
		assertCalls(t, "basic internal", r.Internal, basicInternal(20, 3))
	})
	t.Run("launches", func(t *testing.T) {
		r := runReport(t, b.Workload, "--scenario", "launches", "--iters", "600")
		assertCalls(t, "launches", r.Calls, map[string]int{"cudaLaunchKernel": 600, "cudaDeviceSynchronize": 3})
	})
	t.Run("ptsz", func(t *testing.T) {
		r := runReport(t, b.Workload, "--scenario", "ptsz", "--iters", "10")
		// Two threads, each 10 iterations.
		assertCalls(t, "ptsz", r.Calls, map[string]int{
			"cudaLaunchKernel_ptsz":      40,
			"cudaMemcpyAsync_ptsz":       40,
			"cudaMemsetAsync_ptsz":       20,
			"cudaEventRecord_ptsz":       20,
			"cudaStreamWaitEvent_ptsz":   20,
			"cudaStreamSynchronize_ptsz": 4,
			"cudaMalloc":                 4,
			"cudaFree":                   4,
			"cudaHostAlloc":              2,
			"cudaFreeHost":               2,
			"cudaEventCreate":            2,
			"cudaEventDestroy":           2,
			"cudaDeviceSynchronize":      1,
		})
	})
	t.Run("graphs", func(t *testing.T) {
		r := runReport(t, b.Workload, "--scenario", "graphs", "--iters", "10")
		assertCalls(t, "graphs", r.Calls, map[string]int{
			"cudaStreamCreateWithFlags": 2, "cudaEventCreateWithFlags": 2, "cudaStreamBeginCapture": 2,
			"cudaLaunchKernel": 10, "cudaEventRecord": 4, "cudaStreamWaitEvent": 4, "cudaStreamEndCapture": 2,
			"cudaGraphInstantiate": 1, "cudaGraphLaunch": 50, "cudaStreamSynchronize": 4, "cudaGraphExecUpdate": 1,
			"cudaGraphExecDestroy": 3, "cudaGraphInstantiateWithFlags": 2, "cudaGraphCreate": 1,
			"cudaGraphAddKernelNode": 3, "cudaGraphExecKernelNodeSetParams": 1, "cudaGraphDestroy": 3,
			"cudaEventDestroy": 2, "cudaStreamDestroy": 2,
		})
		// Replays run their nodes on the launch stream, captures nothing:
		// 10 × (50 + 65 + 65 + 18 + 19) µs, the side stream idle.
		var busy []int64
		for _, ns := range r.BusyNs {
			if ns > 0 {
				busy = append(busy, ns)
			}
		}
		if len(busy) != 1 || busy[0] != 10*(50+65+65+18+19)*1000 {
			t.Errorf("busy streams %v ns, want one of %d", busy, 10*(50+65+65+18+19)*1000)
		}
	})
	t.Run("train", func(t *testing.T) {
		r := runReport(t, b.Workload, "--scenario", "train", "--iters", "8")
		assertCalls(t, "train", r.Calls, trainCalls(8))
	})
	t.Run("train-nvtx", func(t *testing.T) {
		// Without NVTX_INJECTION64_PATH the NVTX calls do nothing.
		r := runReport(t, b.NVTXWorkload, "--scenario", "train-nvtx", "--iters", "8")
		want := trainCalls(8)
		want["cudaMemcpyAsync"], want["cudaStreamSynchronize"] = 16, 8 // no logging
		maps.Copy(want, map[string]int{"nvtxDomainCreateA": 1, "nvtxDomainRegisterStringA": 1, "nvtxRangeStartA": 1,
			"nvtxRangePushA": 8, "nvtxDomainRangePushEx": 8, "nvtxDomainRangePop": 8, "nvtxRangePushEx": 8,
			"nvtxRangePop": 16, "nvtxRangeEnd": 1, "nvtxMarkA": 1})
		assertCalls(t, "train-nvtx", r.Calls, want)
	})
	t.Run("nvtx-forms", func(t *testing.T) {
		r := runReport(t, b.NVTXWorkload, "--scenario", "nvtx-forms", "--iters", "3")
		want := trainCalls(3)
		want["cudaMemcpyAsync"], want["cudaStreamSynchronize"] = 6, 3 // no logging
		maps.Copy(want, map[string]int{"nvtxDomainCreateA": 1, "nvtxRangeStartA": 1, "nvtxRangeEnd": 1 + 3 + 3, "nvtxMarkA": 1,
			"nvtxRangePushA": 3, "nvtxRangePushW": 3, "nvtxRangePushEx": 3, "nvtxRangePop": 9,
			"nvtxDomainRangePushEx": 3, "nvtxDomainRangePop": 3, "nvtxDomainMarkEx": 3, "nvtxMarkW": 3, "nvtxMarkEx": 3,
			"nvtxRangeStartEx": 3, "nvtxRangeStartW": 3, "nvtxDomainRangeStartEx": 3, "nvtxDomainRangeEnd": 3})
		assertCalls(t, "nvtx-forms", r.Calls, want)
	})
	t.Run("all", func(t *testing.T) {
		r := runReport(t, b.Workload, "--scenario", "all")
		exported := runtimeExports(t, b.Runtime)
		called := maps.Clone(r.Calls)
		delete(called, "__cudaRegisterFunction") // registration, not an API call
		if got := slices.Sorted(maps.Keys(called)); !slices.Equal(got, exported) {
			t.Errorf("scenario all called\n%v\nthe runtime exports\n%v", got, exported)
		}
		if n := r.Calls["cudaEventQuery"]; n < 2 {
			t.Errorf("cudaEventQuery polled %d times, want at least 2 (pending, then ready)", n)
		}
		// Every runtime call but the three device ones and registration
		// makes exactly one driver call; the runtime initializes the driver
		// once and loads each kernel lazily (lazyLoading).
		want := sum(r.Calls) - r.Calls["cudaGetDevice"] - r.Calls["cudaSetDevice"] - r.Calls["cudaGetLastError"] - r.Calls["__cudaRegisterFunction"]
		lazy := r.Internal["cuLibraryLoadData"] + r.Internal["cuLibraryGetKernel"] + r.Internal["cuKernelGetFunction"]
		if got := sum(r.Internal) - r.Internal["cuInit"] - lazy; got != want || r.Internal["cuInit"] != 1 {
			t.Errorf("%d runtime calls made %d driver calls (cuInit %d), want one each\n%v", want, got, r.Internal["cuInit"], r.Internal)
		}
		for rt, drv := range map[string]string{
			"cudaLaunchKernel":                 "cuLaunchKernel",
			"cudaLaunchKernel_ptsz":            "cuLaunchKernel_ptsz",
			"cudaLaunchKernelExC":              "cuLaunchKernelEx",
			"cudaLaunchKernelExC_ptsz":         "cuLaunchKernelEx_ptsz",
			"cudaLaunchCooperativeKernel":      "cuLaunchCooperativeKernel",
			"cudaLaunchCooperativeKernel_ptsz": "cuLaunchCooperativeKernel_ptsz",
			"cudaGraphLaunch":                  "cuGraphLaunch",
			"cudaEventQuery":                   "cuEventQuery",
			"cudaDeviceSynchronize":            "cuCtxSynchronize",
		} {
			if r.Internal[drv] != r.Calls[rt] {
				t.Errorf("%d %s calls entered %s %d times", r.Calls[rt], rt, drv, r.Internal[drv])
			}
		}
	})
}

// TestDriverScenarios runs the scenarios that call the driver directly.
func TestDriverScenarios(t *testing.T) {
	b := build(t)
	t.Run("driver", func(t *testing.T) {
		r := runReport(t, b.DriverWorkload, "--scenario", "driver", "--iters", "20")
		assertCalls(t, "driver", r.Calls, map[string]int{
			"cuInit":               1,
			"cuModuleLoadData":     1,
			"cuModuleGetFunction":  1,
			"cuLibraryLoadData":    1,
			"cuLibraryGetKernel":   1,
			"cuKernelGetFunction":  1,
			"cuStreamCreate":       2,
			"cuMemAlloc_v2":        1,
			"cuMemHostAlloc":       1,
			"cuEventCreate":        1,
			"cuLaunchKernel":       20,
			"cuLaunchKernelEx":     20,
			"cuMemcpyHtoDAsync_v2": 20,
			"cuEventRecord":        20,
			"cuStreamWaitEvent":    20,
			"cuMemcpyDtoHAsync_v2": 20,
			"cuStreamSynchronize":  2,
			"cuCtxSynchronize":     1,
			"cuEventDestroy_v2":    1,
			"cuMemFreeHost":        1,
			"cuMemFree_v2":         1,
			"cuStreamDestroy_v2":   2,
		})
		assertCalls(t, "driver internal", r.Internal, map[string]int{})
	})
	t.Run("driver-all", func(t *testing.T) {
		r := runReport(t, b.DriverWorkload, "--scenario", "driver-all")
		exported := driverExports(t, b.Driver)
		if got := slices.Sorted(maps.Keys(r.Calls)); !slices.Equal(got, exported) {
			t.Errorf("scenario driver-all called\n%v\nthe driver exports\n%v", got, exported)
		}
		assertCalls(t, "driver-all internal", r.Internal, map[string]int{})
	})
	t.Run("driver-graphs", func(t *testing.T) {
		r := runReport(t, b.DriverWorkload, "--scenario", "driver-graphs", "--iters", "10")
		assertCalls(t, "driver-graphs", r.Calls, map[string]int{
			"cuInit": 1, "cuModuleLoadData": 1, "cuModuleGetFunction": 2, "cuStreamCreate": 1, "cuMemAlloc_v2": 1,
			"cuStreamBeginCapture_v2": 2, "cuLaunchKernel": 4, "cuLaunchKernelEx": 2, "cuMemsetD8Async": 2,
			"cuStreamEndCapture": 2, "cuGraphInstantiateWithFlags": 2, "cuGraphLaunch": 40, "cuStreamSynchronize": 3,
			"cuGraphExecUpdate_v2": 1, "cuGraphCreate": 1, "cuGraphAddKernelNode_v2": 2,
			"cuGraphExecKernelNodeSetParams_v2": 1, "cuGraphExecDestroy": 2, "cuGraphDestroy": 3, "cuMemFree_v2": 1,
			"cuStreamDestroy_v2": 1,
		})
		assertCalls(t, "driver-graphs internal", r.Internal, map[string]int{})
	})
	t.Run("mixed", func(t *testing.T) {
		r := runReport(t, b.DriverWorkload, "--scenario", "mixed", "--iters", "7")
		assertCalls(t, "mixed", r.Calls, map[string]int{
			"cudaStreamCreateWithFlags": 1,
			"cudaMalloc":                1,
			"cudaLaunchKernel":          7,
			"cudaMemcpyAsync":           7,
			"cudaStreamSynchronize":     1,
			"cuModuleLoadData":          1,
			"cuModuleGetFunction":       1,
			"cuLaunchKernel":            7,
			"cuMemcpyDtoHAsync_v2":      7,
			"cuStreamSynchronize":       1,
			"cudaDeviceSynchronize":     1,
			"cudaFree":                  1,
			"cudaStreamDestroy":         1,
		})
		// The same driver symbols, called by the runtime: counted apart.
		assertCalls(t, "mixed internal", r.Internal, map[string]int{
			"cuInit":               1,
			"cuStreamCreate":       1,
			"cuMemAlloc_v2":        1,
			"cuLaunchKernel":       7,
			"cuMemcpyDtoHAsync_v2": 7,
			"cuStreamSynchronize":  1,
			"cuCtxSynchronize":     1,
			"cuMemFree_v2":         1,
			"cuStreamDestroy_v2":   1,
		})
	})
	t.Run("static-runtime", func(t *testing.T) {
		r := runReport(t, b.DriverWorkload, "--scenario", "static-runtime", "--iters", "4")
		assertCalls(t, "static-runtime", r.Calls, map[string]int{
			"cudaStreamCreateWithFlags": 1, "cudaMalloc": 1, "cudaLaunchKernel": 4, "cudaMemsetAsync": 4,
			"cuModuleLoadData": 1, "cuModuleGetFunction": 1, "cuMemsetD32Async": 4, "cuLaunchKernel": 4,
			"cuLaunchKernelEx": 4, "cuMemsetD8Async": 4, "cuMemcpyDtoDAsync_v2": 4, "cudaStreamSynchronize": 1,
			"cudaFree": 1, "cudaStreamDestroy": 1,
		})
		assertCalls(t, "static-runtime internal", r.Internal, map[string]int{
			"cuInit": 1, "cuStreamCreate": 1, "cuMemAlloc_v2": 1, "cuLaunchKernel": 4, "cuMemsetD8Async": 4,
			"cuStreamSynchronize": 1, "cuMemFree_v2": 1, "cuStreamDestroy_v2": 1,
		})
	})
	t.Run("nccl", func(t *testing.T) {
		r := runReport(t, b.NCCLWorkload, "--scenario", "nccl", "--iters", "5")
		assertCalls(t, "nccl", r.Calls, ncclCalls(5))
		// NCCL enqueues through the driver's model, not its API.
		assertCalls(t, "nccl internal", r.Internal, map[string]int{
			"cuInit":                 1,
			"cuStreamCreate":         2,
			"cuEventCreate":          2,
			"cuMemAlloc_v2":          2,
			"cuLaunchKernel":         15,
			"cuEventRecordWithFlags": 10,
			"cuStreamWaitEvent":      10,
			"cuStreamSynchronize":    2,
			"cuStreamQuery":          1,
			"cuCtxSynchronize":       1,
			"cuMemFree_v2":           2,
			"cuEventDestroy_v2":      2,
			"cuStreamDestroy_v2":     2,
		})
	})
	t.Run("unavailable", func(t *testing.T) {
		// Each build runs only the scenarios it links the libraries for.
		for _, c := range [][]string{{b.Workload, "driver"}, {b.Workload, "nccl"}, {b.NCCLWorkload, "mixed"}} {
			if err := exec.Command(c[0], "--scenario", c[1]).Run(); err == nil {
				t.Errorf("%s ran scenario %s", filepath.Base(c[0]), c[1])
			}
		}
	})
}

// ncclCalls are the calls of scenario nccl.
func ncclCalls(iters int) map[string]int {
	return map[string]int{
		"ncclGetUniqueId":           1,
		"ncclCommInitRank":          1,
		"cudaStreamCreateWithFlags": 2,
		"cudaEventCreateWithFlags":  2,
		"cudaMalloc":                2,
		"cudaLaunchKernel":          3 * iters,
		"cudaEventRecord":           2 * iters,
		"cudaStreamWaitEvent":       2 * iters,
		"ncclAllReduce":             iters,
		"cudaStreamSynchronize":     2,
		"ncclGroupStart":            1,
		"ncclBroadcast":             1,
		"ncclReduce":                1,
		"ncclAllGather":             1,
		"ncclReduceScatter":         1,
		"ncclSend":                  1,
		"ncclRecv":                  1,
		"cudaStreamQuery":           1,
		"ncclGroupEnd":              1,
		"cudaDeviceSynchronize":     1,
		"cudaFree":                  2,
		"cudaEventDestroy":          2,
		"cudaStreamDestroy":         2,
		"ncclCommDestroy":           1,
	}
}

// TestTiming checks the modeled GPU: scenario timing makes the host wait for
// a 20 ms kernel and exits 1 when a blocking or readiness rule is broken.
func TestTiming(t *testing.T) {
	b := build(t)
	start := time.Now()
	r := runReport(t, b.Workload, "--scenario", "timing")
	if wall := time.Since(start); wall < 19*time.Millisecond {
		t.Errorf("a 20 ms kernel and cudaStreamSynchronize took %v of wall time", wall)
	}
	if r.Calls["cudaStreamSynchronize"] == 0 || r.Calls["cudaLaunchKernel"] == 0 {
		t.Errorf("timing calls: %v", r.Calls)
	}
}

// TestBuilds runs the static and dlopen builds (plain and hashed runtime
// names): the same scenario makes the same calls.
func TestBuilds(t *testing.T) {
	b := build(t)
	want, internal := basicCalls(10, 2), basicInternal(10, 2)
	// The static runtime dlopen()s libcuda.so.1 from the executable's
	// directory, as real static cudart loads the driver.
	r := runReport(t, b.StaticWorkload)
	assertCalls(t, "static", r.Calls, want)
	assertCalls(t, "static internal", r.Internal, internal)
	for _, lib := range []string{b.Runtime, b.HashedRuntime} {
		r := runReport(t, b.DlopenWorkload, "--sleep-ms", "5", "--dlopen", lib)
		assertCalls(t, "dlopen "+filepath.Base(lib), r.Calls, want)
		assertCalls(t, "dlopen "+filepath.Base(lib)+" internal", r.Internal, internal)
	}
	if err := exec.Command(b.DlopenWorkload).Run(); err == nil {
		t.Error("the dlopen build ran without --dlopen")
	}
}

// TestRuntimeCopiedElsewhere runs the workload and runtime from a directory
// without the driver: the runtime falls back to the build's driver, as a
// real runtime finds the system's libcuda.so.1.
func TestRuntimeCopiedElsewhere(t *testing.T) {
	b := build(t)
	dir := t.TempDir()
	for _, path := range []string{b.Workload, b.Runtime} {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(path)), data, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	r := runReport(t, filepath.Join(dir, "workload"), "--iters", "10")
	assertCalls(t, "copied", r.Calls, basicCalls(10, 2))
	assertCalls(t, "copied internal", r.Internal, basicInternal(10, 2))
}

func TestWaitStdin(t *testing.T) {
	b := build(t)
	cmd := exec.Command(b.Workload, "--wait-stdin", "--scenario", "launches", "--iters", "3")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	out := bufio.NewReader(stdout)
	line, err := out.ReadString('\n')
	if want := fmt.Sprintf("ready %d\n", cmd.Process.Pid); err != nil || line != want {
		t.Fatalf("first line %q (%v), want %q", line, err, want)
	}
	// The runtime loads the driver at its first call, not at startup.
	maps, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(maps), RuntimeSoname) || strings.Contains(string(maps), DriverSoname) {
		t.Errorf("before the first CUDA call the workload maps %s: %v, %s: %v; want only the runtime",
			RuntimeSoname, strings.Contains(string(maps), RuntimeSoname), DriverSoname, strings.Contains(string(maps), DriverSoname))
	}
	fmt.Fprintln(stdin, "go")
	rest, _ := out.ReadString(0)
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	r, err := ParseReport([]byte(rest))
	if err != nil {
		t.Fatal(err)
	}
	if r.PID != cmd.Process.Pid || r.Calls["cudaLaunchKernel"] != 3 || r.Internal["cuLaunchKernel"] != 3 {
		t.Errorf("report %+v", r)
	}
}

func TestWaitFile(t *testing.T) {
	b := build(t)
	flag := filepath.Join(t.TempDir(), "go")
	cmd := exec.Command(b.Workload, "--wait-file", flag, "--scenario", "launches", "--iters", "1")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		t.Fatalf("exited before %s existed: %v", flag, err)
	case <-time.After(30 * time.Millisecond):
	}
	if err := os.WriteFile(flag, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// runtimeExports returns the cuda* entry points the runtime exports, checking
// each is versioned as the default version libcudart.so.13 and has an address
// of its own (a probe on one never fires for another).
func runtimeExports(t *testing.T, path string) []string {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.DynamicSymbols()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	byAddr := map[uint64]string{}
	for _, s := range syms {
		if !strings.HasPrefix(s.Name, "cuda") || s.Section == elf.SHN_UNDEF {
			continue
		}
		if elf.ST_TYPE(s.Info) != elf.STT_FUNC || elf.ST_BIND(s.Info) != elf.STB_GLOBAL {
			t.Errorf("%s: not a global function", s.Name)
		}
		if s.Version != RuntimeSoname || !s.HasVersion || s.VersionIndex.IsHidden() {
			t.Errorf("%s: version %q (hidden %v), want %s@@%s", s.Name, s.Version, s.VersionIndex.IsHidden(), s.Name, RuntimeSoname)
		}
		if other, ok := byAddr[s.Value]; ok {
			t.Errorf("%s and %s share address %#x", s.Name, other, s.Value)
		}
		byAddr[s.Value] = s.Name
		names = append(names, s.Name)
	}
	slices.Sort(names)
	return names
}

// driverExports returns the cu* entry points the driver exports, checking
// each is an unversioned global function at an address of its own.
func driverExports(t *testing.T, path string) []string {
	t.Helper()
	syms, err := openELF(t, path).DynamicSymbols()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	byAddr := map[uint64]string{}
	for _, s := range syms {
		if !strings.HasPrefix(s.Name, "cu") || s.Section == elf.SHN_UNDEF {
			continue
		}
		if elf.ST_TYPE(s.Info) != elf.STT_FUNC || elf.ST_BIND(s.Info) != elf.STB_GLOBAL {
			t.Errorf("%s: not a global function", s.Name)
		}
		if s.Version != "" || s.Library != "" {
			t.Errorf("%s: versioned %q, want unversioned like the real libcuda", s.Name, s.Version)
		}
		if other, ok := byAddr[s.Value]; ok {
			t.Errorf("%s and %s share address %#x", s.Name, other, s.Value)
		}
		byAddr[s.Value] = s.Name
		names = append(names, s.Name)
	}
	slices.Sort(names)
	return names
}

func TestDriverSymbols(t *testing.T) {
	b := build(t)
	exported := driverExports(t, b.Driver)
	for _, name := range requiredDriver {
		if _, ok := slices.BinarySearch(exported, name); !ok {
			t.Errorf("the driver does not export %s", name)
		}
	}
	drv := openELF(t, b.Driver)
	if got := dynString(t, drv, elf.DT_SONAME); !slices.Equal(got, []string{DriverSoname}) {
		t.Errorf("driver soname %v, want %s", got, DriverSoname)
	}
	ds := dynsym(t, drv)
	for _, helper := range []string{"sim_function_for_stub", "sim_enqueue", "sim_driver_calls"} {
		if !ds[helper] {
			t.Errorf("the driver does not export its private helper %s", helper)
		}
	}
	for _, lib := range []string{b.Driver, b.NCCL} {
		if fi, err := os.Stat(lib); err != nil || fi.Mode().Perm() != 0o644 {
			t.Errorf("%s: mode %v (%v), want 0644", lib, fi.Mode().Perm(), err)
		}
	}

	// The runtime loads the driver itself (dlopen); programs that call the
	// driver link it.
	for _, path := range []string{b.Runtime, b.HashedRuntime, b.Workload, b.StaticWorkload} {
		if libs, _ := openELF(t, path).ImportedLibraries(); slices.Contains(libs, DriverSoname) {
			t.Errorf("%s links %s; the runtime should dlopen it", filepath.Base(path), DriverSoname)
		}
	}
	if libs, _ := openELF(t, b.DriverWorkload).ImportedLibraries(); slices.Contains(libs, RuntimeSoname) {
		t.Errorf("workload-driver links %s: its driver scenarios must run without a runtime", RuntimeSoname)
	}
	for path, want := range map[string][]string{
		b.DriverWorkload: {DriverSoname},
		b.NCCLWorkload:   {RuntimeSoname, NCCLSoname},
		b.NCCL:           {DriverSoname},
	} {
		f := openELF(t, path)
		libs, _ := f.ImportedLibraries()
		for _, lib := range want {
			if !slices.Contains(libs, lib) {
				t.Errorf("%s needs %v, want %s", filepath.Base(path), libs, lib)
			}
		}
		if got := dynString(t, f, elf.DT_RUNPATH); !slices.Equal(got, []string{"$ORIGIN"}) {
			t.Errorf("%s runpath %v, want $ORIGIN", filepath.Base(path), got)
		}
	}
	st := symtab(t, openELF(t, b.DriverWorkload))
	for _, stub := range KernelStubs {
		if !st[stub] {
			t.Errorf("workload-driver: no kernel stub %s in .symtab", stub)
		}
	}
}

// TestNCCLSymbols checks NCCL's exports: as in real NCCL, ncclX is a weak
// alias of the global pncclX.
func TestNCCLSymbols(t *testing.T) {
	b := build(t)
	f := openELF(t, b.NCCL)
	if got := dynString(t, f, elf.DT_SONAME); !slices.Equal(got, []string{NCCLSoname}) {
		t.Errorf("NCCL soname %v, want %s", got, NCCLSoname)
	}
	syms, err := f.DynamicSymbols()
	if err != nil {
		t.Fatal(err)
	}
	defined := map[string]elf.Symbol{}
	for _, s := range syms {
		if s.Section != elf.SHN_UNDEF {
			defined[s.Name] = s
		}
	}
	addrs := map[uint64]string{}
	for _, name := range ncclEntries {
		weak, ok1 := defined[name]
		strong, ok2 := defined["p"+name]
		if !ok1 || !ok2 {
			t.Errorf("%s exported %v, p%s exported %v", name, ok1, name, ok2)
			continue
		}
		if weak.Value != strong.Value {
			t.Errorf("%s at %#x, p%s at %#x: want one address", name, weak.Value, name, strong.Value)
		}
		if elf.ST_BIND(weak.Info) != elf.STB_WEAK || elf.ST_TYPE(weak.Info) != elf.STT_FUNC {
			t.Errorf("%s: bind %v type %v, want a weak function", name, elf.ST_BIND(weak.Info), elf.ST_TYPE(weak.Info))
		}
		if elf.ST_BIND(strong.Info) != elf.STB_GLOBAL || elf.ST_TYPE(strong.Info) != elf.STT_FUNC {
			t.Errorf("p%s: bind %v type %v, want a global function", name, elf.ST_BIND(strong.Info), elf.ST_TYPE(strong.Info))
		}
		if other, ok := addrs[weak.Value]; ok {
			t.Errorf("%s and %s share address %#x", name, other, weak.Value)
		}
		addrs[weak.Value] = name
	}
}

// TestProbeableEntries checks that no exported function of the libraries
// begins with an instruction the kernel refuses to put a uprobe on (x86-64: a
// LOCK or ES/CS/SS/DS segment prefix, as an inlined atomic counter makes).
func TestProbeableEntries(t *testing.T) {
	b := build(t)
	for _, path := range []string{b.Runtime, b.Driver, b.NCCL, b.NVTX} {
		f := openELF(t, path)
		if f.Machine != elf.EM_X86_64 {
			t.Skipf("%v: the check knows x86-64 prefixes only", f.Machine)
		}
		syms, err := f.DynamicSymbols()
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range syms {
			if s.Section == elf.SHN_UNDEF || elf.ST_TYPE(s.Info) != elf.STT_FUNC {
				continue
			}
			code := entryBytes(t, f, s.Value)
		prefixes:
			for _, c := range code {
				switch {
				case c == 0xf0 || c == 0x26 || c == 0x2e || c == 0x36 || c == 0x3e:
					t.Errorf("%s: %s begins with prefix %#x: uprobes refuse it", filepath.Base(path), s.Name, c)
					break prefixes
				case c == 0x66 || c == 0x67 || c == 0xf2 || c == 0xf3 || c == 0x64 || c == 0x65 || c&0xf0 == 0x40:
					continue // other prefixes and REX
				default:
					break prefixes
				}
			}
		}
	}
}

// entryBytes returns up to 16 bytes of code at addr.
func entryBytes(t *testing.T, f *elf.File, addr uint64) []byte {
	t.Helper()
	for _, sec := range f.Sections {
		if sec.Type == elf.SHT_PROGBITS && sec.Flags&elf.SHF_EXECINSTR != 0 && addr >= sec.Addr && addr < sec.Addr+sec.Size {
			data, err := sec.Data()
			if err != nil {
				t.Fatal(err)
			}
			off := addr - sec.Addr
			return data[off:min(off+16, uint64(len(data)))]
		}
	}
	t.Fatalf("no code at %#x", addr)
	return nil
}

func symtab(t *testing.T, f *elf.File) map[string]bool {
	t.Helper()
	syms, err := f.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]bool{}
	for _, s := range syms {
		if s.Section != elf.SHN_UNDEF {
			m[s.Name] = true
		}
	}
	return m
}

func dynsym(t *testing.T, f *elf.File) map[string]bool {
	t.Helper()
	syms, err := f.DynamicSymbols()
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]bool{}
	for _, s := range syms {
		m[s.Name] = true
	}
	return m
}

func openELF(t *testing.T, path string) *elf.File {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func dynString(t *testing.T, f *elf.File, tag elf.DynTag) []string {
	t.Helper()
	s, err := f.DynString(tag)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestSymbols(t *testing.T) {
	b := build(t)

	exported := runtimeExports(t, b.Runtime)
	for _, name := range required {
		if _, ok := slices.BinarySearch(exported, name); !ok {
			t.Errorf("the runtime does not export %s", name)
		}
	}
	for lib, soname := range map[string]string{b.Runtime: RuntimeSoname, b.HashedRuntime: HashedRuntimeName} {
		if got := dynString(t, openELF(t, lib), elf.DT_SONAME); !slices.Equal(got, []string{soname}) {
			t.Errorf("%s: soname %v, want %s", lib, got, soname)
		}
		if fi, err := os.Stat(lib); err != nil || fi.Mode().Perm() != 0o644 {
			t.Errorf("%s: mode %v (%v), want 0644", lib, fi.Mode().Perm(), err)
		}
	}
	if got := runtimeExports(t, b.HashedRuntime); !slices.Equal(got, exported) {
		t.Errorf("the hashed runtime exports %v", got)
	}

	dyn := openELF(t, b.Workload)
	if libs, _ := dyn.ImportedLibraries(); !slices.Contains(libs, RuntimeSoname) {
		t.Errorf("workload needs %v, want %s", libs, RuntimeSoname)
	}
	if got := dynString(t, dyn, elf.DT_RUNPATH); !slices.Equal(got, []string{"$ORIGIN"}) {
		t.Errorf("workload runpath %v, want $ORIGIN", got)
	}

	static := openELF(t, b.StaticWorkload)
	st, ds := symtab(t, static), dynsym(t, static)
	for _, name := range []string{"cudaLaunchKernel", "cudaStreamSynchronize", "cudaLaunchKernel_ptsz"} {
		if !st[name] || ds[name] {
			t.Errorf("static workload: %s in .symtab %v, in .dynsym %v; want only .symtab", name, st[name], ds[name])
		}
	}

	dl := openELF(t, b.DlopenWorkload)
	if libs, _ := dl.ImportedLibraries(); slices.Contains(libs, RuntimeSoname) {
		t.Errorf("the dlopen workload links %s", RuntimeSoname)
	}

	for path, f := range map[string]*elf.File{b.Workload: dyn, b.StaticWorkload: static, b.DlopenWorkload: dl} {
		st := symtab(t, f)
		for _, stub := range KernelStubs {
			if !st[stub] {
				t.Errorf("%s: no kernel stub %s in .symtab", filepath.Base(path), stub)
			}
		}
	}
}

func TestPySync(t *testing.T) {
	b := build(t)
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3")
	}
	r := runReport(t, python, b.PySync, b.Runtime, "5")
	assertCalls(t, "pysync", r.Calls, map[string]int{
		"cudaMalloc":            1,
		"cudaMemcpyAsync":       10,
		"cudaStreamSynchronize": 5,
		"cudaLaunchKernel":      5,
		"cudaDeviceSynchronize": 5,
		"cudaFree":              1,
	})
	assertCalls(t, "pysync internal", r.Internal, map[string]int{
		"cuInit":               1,
		"cuMemAlloc_v2":        1,
		"cuMemcpyDtoHAsync_v2": 5,
		"cuMemcpyHtoDAsync_v2": 5,
		"cuStreamSynchronize":  5,
		"cuLaunchKernel":       5,
		"cuCtxSynchronize":     5,
		"cuMemFree_v2":         1,
	})
	src, err := os.ReadFile(b.PySync)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(src), "\n")
	for fn, call := range map[string]string{
		"step_item":     "LIB.cudaStreamSynchronize(",
		"pageable_copy": "LIB.cudaMemcpyAsync(",
		"device_sync":   "LIB.cudaDeviceSynchronize(",
	} {
		n := r.Lines[fn]
		if n < 1 || n > len(lines) || !strings.Contains(lines[n-1], call) {
			t.Errorf("lines[%s] = %d, which is not the line of %s", fn, n, call)
		}
	}
}

func TestMissingCompiler(t *testing.T) {
	t.Setenv("CC", "/nonexistent/cc")
	_, err := Compile(t.TempDir())
	if !errors.Is(err, ErrNoCompiler) || !strings.Contains(err.Error(), "install gcc") {
		t.Errorf("Compile without a compiler: %v, want %v", err, ErrNoCompiler)
	}
}

// TestLazyKernelLoading: kernels are registered at startup and become
// CUfunctions at their first launch through the driver, by name, as with
// real cudart's lazy loading.
func TestLazyKernelLoading(t *testing.T) {
	b := build(t)
	r := runReport(t, b.Workload, "--scenario", "basic", "--iters", "20", "--streams", "3")
	if n := r.Calls["__cudaRegisterFunction"]; n != 3 {
		t.Errorf("__cudaRegisterFunction: %d calls, want 3", n)
	}
	// basic launches gemm and relu: two kernels, each loaded once.
	want := map[string]int{"cuLibraryLoadData": 1, "cuLibraryGetKernel": 2, "cuKernelGetFunction": 2}
	for k, n := range want {
		if r.Internal[k] != n {
			t.Errorf("internal %s: %d calls, want %d", k, r.Internal[k], n)
		}
	}
}
