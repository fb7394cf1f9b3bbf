/*
 * workload.c: drives the simulated CUDA runtime, driver and NCCL like a CUDA
 * application, then prints one JSON line with the exact number of calls it
 * made to each entry point, for tests to compare a tracer's counts against.
 *
 *   workload [--iters N] [--streams K] [--wait-stdin] [--wait-after-setup] [--wait-before-exit] [--wait-file PATH]
 *            [--warm-up]   (launch each kernel once first, as PyTorch's first step does)
 *            [--sleep-ms MS] [--scenario NAME]
 *            [--dlopen PATH]   (required by, and only in, the -DSIM_DLOPEN build)
 *
 * --iters: iterations (launches: kernel launches), default 10. --streams:
 * streams of scenario basic, default 2, at least 2. Before its first CUDA
 * call the workload waits for the go-ahead: with --wait-stdin it prints
 * "ready <pid>" and reads one line; with --wait-file it polls every 1 ms
 * until PATH exists; then it sleeps --sleep-ms. The scenarios are described
 * at their functions: basic (the default), launches, ptsz, timing, all and
 * graphs in every build, and the lint scenarios (lint-legacy-nonblocking,
 * lint-cross-stream, lint-kernel-race, lint-many-streams, lint-pageable-loop,
 * lint-sync-every-launch, lint-clean), each provoking one of cudatap's lints, oom and oom-exit (out of memory), train (a
 * training loop); driver, driver-all, driver-graphs, mixed and static-runtime in the -DSIM_DRIVER build; nccl
 * in the -DSIM_NCCL build; train-nvtx and nvtx-forms in the -DSIM_NVTX build.
 *
 * Built six ways: linked against libcudart.so.13 (workload); with
 * cudart_sim.c compiled in, symbols in .symtab only (workload-static); with
 * -DSIM_DLOPEN, where the runtime is dlopen()ed from --dlopen PATH after the
 * go-ahead and the sleep, to test late loading (workload-dlopen); with
 * -DSIM_DRIVER, linked against libcuda.so.1 only (workload-driver): its
 * driver scenarios run in a process without a runtime, like a program written
 * against the driver API, and its other scenarios (mixed among them)
 * dlopen() the libcudart.so.13 beside the executable after the go-ahead;
 * with -DSIM_NCCL, linked against libcudart.so.13 and libnccl.so.2
 * (workload-nccl); with -DSIM_NVTX, linked against libcudart.so.13 and
 * the simulated NVTX library libnvToolsExt.so.1 (workload-nvtx). The
 * runtime loads libcuda.so.1 itself at its first call that needs the
 * driver.
 *
 * The report: {"pid":P,"calls":{SYMBOL:N,...},"internal":{SYMBOL:N,...},
 * "busy_ns":{...},"meeting_wait_ns":NS}. calls counts the workload's own
 * calls, runtime, driver and NCCL, under the exact symbol called; internal
 * counts the driver calls made underneath by the runtime (libcuda's own
 * counters, less the workload's direct calls). Symbols with no calls are
 * left out. meeting_wait_ns: the host time blocked on NCCL ranks of other
 * processes (scenario nccl).
 */
#define _GNU_SOURCE
#include "cuda_sim.h"
#include "cuda_driver_sim.h"
#include "nccl_sim.h"
#ifdef SIM_NVTX
#include "nvtx_sim.h"
#else
#define NVTX_API_LIST(X)
#endif

#include <dlfcn.h>
#include <getopt.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

/* Every entry point of the simulated runtime. */
#define API_LIST(X)                                                                                \
	X(cudaStreamCreate) X(cudaStreamCreateWithFlags) X(cudaStreamCreateWithPriority)           \
	X(cudaStreamDestroy) X(cudaLaunchKernel) X(cudaLaunchKernel_ptsz) X(cudaLaunchKernelExC)   \
	X(cudaLaunchKernelExC_ptsz) X(cudaLaunchCooperativeKernel)                                 \
	X(cudaLaunchCooperativeKernel_ptsz) X(cudaMemcpy) X(cudaMemcpy_ptds) X(cudaMemcpyAsync)    \
	X(cudaMemcpyAsync_ptsz) X(cudaMemcpy2D) X(cudaMemcpy2D_ptds) X(cudaMemcpy2DAsync)          \
	X(cudaMemcpy2DAsync_ptsz) X(cudaMemset) X(cudaMemset_ptds) X(cudaMemsetAsync)              \
	X(cudaMemsetAsync_ptsz) X(cudaEventCreate) X(cudaEventCreateWithFlags) X(cudaEventDestroy) \
	X(cudaEventRecord) X(cudaEventRecord_ptsz) X(cudaEventRecordWithFlags)                     \
	X(cudaEventRecordWithFlags_ptsz) X(cudaStreamWaitEvent) X(cudaStreamWaitEvent_ptsz)        \
	X(cudaEventSynchronize) X(cudaEventQuery) X(cudaStreamSynchronize)                         \
	X(cudaStreamSynchronize_ptsz) X(cudaStreamQuery) X(cudaStreamQuery_ptsz)                   \
	X(cudaDeviceSynchronize) X(cudaMalloc) X(cudaFree) X(cudaMallocAsync)                      \
	X(cudaMallocAsync_ptsz) X(cudaFreeAsync) X(cudaFreeAsync_ptsz) X(cudaHostAlloc)            \
	X(cudaMallocHost) X(cudaFreeHost) X(cudaHostRegister) X(cudaHostUnregister)                \
	X(cudaGraphLaunch) X(cudaGraphLaunch_ptsz) X(cudaLaunchHostFunc)                           \
	X(cudaLaunchHostFunc_ptsz) X(cudaGetDevice) X(cudaSetDevice) X(cudaGetLastError)          \
	X(__cudaRegisterFunction) X(__cudaGetKernel) X(__cudaLaunchKernel) X(__cudaLaunchKernel_ptsz) \
	X(cudaMallocManaged) X(cudaMallocPitch) X(cudaMallocFromPoolAsync) X(cudaMallocFromPoolAsync_ptsz) \
	X(cudaStreamBeginCapture) X(cudaStreamBeginCapture_ptsz) X(cudaStreamEndCapture)          \
	X(cudaStreamEndCapture_ptsz) X(cudaGraphCreate) X(cudaGraphAddKernelNode)                 \
	X(cudaGraphInstantiate) X(cudaGraphInstantiateWithFlags) X(cudaGraphExecKernelNodeSetParams) \
	X(cudaGraphExecUpdate) X(cudaGraphExecDestroy) X(cudaGraphDestroy)

/* Every entry point the workload may call: runtime, driver, NCCL. */
#define ALL_API_LIST(X) API_LIST(X) DRIVER_API_LIST(X) NCCL_API_LIST(X) NVTX_API_LIST(X)

enum api {
#define X(name) API_##name,
	ALL_API_LIST(X)
#undef X
	API_COUNT
};

static const char *const api_names[API_COUNT] = {
#define X(name) #name,
	ALL_API_LIST(X)
#undef X
};

static unsigned long api_calls[API_COUNT];

#if defined(SIM_DLOPEN) || defined(SIM_DRIVER)
/* The runtime is dlopen()ed: calls go through api, where the driver build
 * also puts the driver's functions it links. */
#define RUNTIME_DLOPEN 1
#define PTR(name) __typeof__(name) *name;
#define LINKED(name) .name = name,
static struct {
	API_LIST(PTR)
#ifdef SIM_DRIVER
	DRIVER_API_LIST(PTR)
#endif
} api
#ifdef SIM_DRIVER
	= { DRIVER_API_LIST(LINKED) }
#endif
;
#undef PTR
#undef LINKED
#define CUDA(fn) api.fn
#else
#define CUDA(fn) fn
#endif

/* Counts one call of fn, then makes it; evaluates to its status. */
#define CALL(fn, ...) (__atomic_fetch_add(&api_calls[API_##fn], 1, __ATOMIC_RELAXED), CUDA(fn)(__VA_ARGS__))
/* A call that must succeed (runtime, driver and NCCL all return 0). */
#define CK(fn, ...) check(#fn, CALL(fn, __VA_ARGS__))

#define KiB 1024
#define MiB (1024 * 1024)
#define MS 1000000LL

static void die(const char *msg)
{
	fprintf(stderr, "workload: %s\n", msg);
	exit(1);
}

static void check(const char *fn, int err)
{
	if (err != 0) {
		fprintf(stderr, "workload: %s returned %d\n", fn, err);
		exit(1);
	}
}

static void expect(int ok, const char *what)
{
	if (!ok)
		die(what);
}

static void *xmalloc(size_t n)
{
	void *p = malloc(n);
	if (!p)
		die("out of memory");
	return p;
}

static int64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void sleep_ns(int64_t ns)
{
	struct timespec ts = { .tv_sec = ns / 1000000000, .tv_nsec = ns % 1000000000 };
	nanosleep(&ts, NULL);
}

/*
 * Host stubs of the modeled kernels. As with nvcc, the launch's func argument
 * is the stub's address, which a tracer resolves to these .symtab names. The
 * bodies differ so the compiler cannot fold them into one address.
 */
static volatile int kernel_sink;

__attribute__((noinline, used)) void sim_gemm_kernel(const float *a, const float *b, float *c, int n)
{
	kernel_sink = n + (a != b) + (c != NULL);
}

__attribute__((noinline, used)) void sim_relu_kernel(float *x, int n)
{
	kernel_sink = n * 2 + (x != NULL);
}

__attribute__((noinline, used)) void sim_reduce_kernel(const float *x, float *out, int n)
{
	kernel_sink = n * 3 + (x != out);
}

/* Kernel arguments as CUDA passes them: an array of pointers to each one. */
static const float *arg_a, *arg_b;
static float *arg_c;
static int arg_n = 1 << 20;
static void *gemm_args[] = { &arg_a, &arg_b, &arg_c, &arg_n };
static void *relu_args[] = { &arg_c, &arg_n };
static void *reduce_args[] = { &arg_a, &arg_c, &arg_n };

#define GEMM (const void *)sim_gemm_kernel
#define RELU (const void *)sim_relu_kernel
#define REDUCE (const void *)sim_reduce_kernel

struct options {
	long iters;
	int streams;
	int wait_stdin;
	int wait_setup;
	int warm_up;
	int wait_exit;
	const char *wait_file;
	long sleep_ms;
	void (*scenario)(const struct options *);
	const char *dlopen_path;
};

/*
 * basic: K streams (alternately blocking and non-blocking, the last one made
 * with priority -1); per iteration a gemm launch on every stream, a pinned
 * 1 MiB H2D copy on stream 0, a pageable 4 KiB D2H copy on stream 1 (host
 * blocking), an event edge stream 0 -> stream 1, a 64 KiB memset on stream 1,
 * a relu launch on the legacy default stream; every 10th iteration a sync of
 * stream 0 and a cudaMalloc/cudaFree pair.
 */
static void scenario_basic(const struct options *o)
{
	int k = o->streams;
	cudaStream_t *s = xmalloc(k * sizeof *s);
	for (int i = 0; i < k; i++) {
		unsigned flags = i % 2 ? cudaStreamNonBlocking : cudaStreamDefault;
		if (i == k - 1)
			CK(cudaStreamCreateWithPriority, &s[i], flags, -1);
		else
			CK(cudaStreamCreateWithFlags, &s[i], flags);
	}
	void *dev, *pinned, *tmp;
	char *pageable = xmalloc(4 * KiB);
	cudaEvent_t ev;
	CK(cudaMalloc, &dev, MiB);
	CK(cudaHostAlloc, &pinned, MiB, cudaHostAllocDefault);
	CK(cudaEventCreate, &ev);
	if (o->wait_setup) {
		/* Set up, not yet running: a tracer attaching now finds pinned
		 * memory and streams that exist already. */
		printf("setup %d\n", (int)getpid());
		fflush(stdout);
		char line[256];
		if (!fgets(line, sizeof line, stdin))
			die("stdin closed before the go-ahead line");
	}

	dim3 gemm_grid = { 20, 1, 1 }, gemm_block = { 256, 1, 1 };
	dim3 relu_grid = { 4, 1, 1 }, relu_block = { 128, 1, 1 };
	for (long it = 1; it <= o->iters; it++) {
		for (int i = 0; i < k; i++)
			CK(cudaLaunchKernel, GEMM, gemm_grid, gemm_block, gemm_args, 1024, s[i]);
		CK(cudaMemcpyAsync, dev, pinned, MiB, cudaMemcpyHostToDevice, s[0]);
		CK(cudaMemcpyAsync, pageable, dev, 4 * KiB, cudaMemcpyDeviceToHost, s[1]);
		CK(cudaEventRecord, ev, s[0]);
		CK(cudaStreamWaitEvent, s[1], ev, 0);
		CK(cudaMemsetAsync, dev, 0, 64 * KiB, s[1]);
		CK(cudaLaunchKernel, RELU, relu_grid, relu_block, relu_args, 0, NULL);
		if (it % 10 == 0) {
			CK(cudaStreamSynchronize, s[0]);
			CK(cudaMalloc, &tmp, MiB);
			CK(cudaFree, tmp);
		}
	}
	CK(cudaDeviceSynchronize);

	CK(cudaEventDestroy, ev);
	CK(cudaFreeHost, pinned);
	CK(cudaFree, dev);
	for (int i = 0; i < k; i++)
		CK(cudaStreamDestroy, s[i]);
	free(pageable);
	free(s);
}

/* handles: launches the way CUDA 13's generated host stubs do: each kernel's
 * handle is fetched once into a static variable (__cudaGetKernel), then
 * launched with __cudaLaunchKernel. N iterations of gemm and relu on the
 * legacy stream; with --wait-after-setup it waits after the first one, so
 * a tracer attaching then finds the handles already made. */
/* One per kernel, as nvcc 13 generates them: a static handle fetched at the
 * first launch, then __cudaLaunchKernel (noinline: the code stays the shape
 * of a generated stub, arguments loaded right before each call). */
static __attribute__((noinline)) void launch_gemm_13(void)
{
	static cudaKernel_t handle;
	dim3 one = { 1, 1, 1 };
	if (!handle)
		CK(__cudaGetKernel, &handle, GEMM);
	CK(__cudaLaunchKernel, handle, one, one, gemm_args, 0, NULL);
}

static __attribute__((noinline)) void launch_relu_13(void)
{
	static cudaKernel_t handle;
	dim3 one = { 1, 1, 1 };
	if (!handle)
		CK(__cudaGetKernel, &handle, RELU);
	CK(__cudaLaunchKernel, handle, one, one, relu_args, 0, NULL);
}

static void launch_handles(void)
{
	launch_gemm_13();
	launch_relu_13();
}

static void scenario_handles(const struct options *o)
{
	for (long i = 0; i < o->iters; i++) {
		launch_handles();
		if (i == 0 && o->wait_setup) {
			CK(cudaDeviceSynchronize);
			printf("setup %d\n", (int)getpid());
			fflush(stdout);
			char line[256];
			if (!fgets(line, sizeof line, stdin))
				die("stdin closed before the go-ahead line");
		}
	}
	CK(cudaDeviceSynchronize);
}

/* devices: work on two devices. On device 1: a stream created there, N
 * launches on it and 2N on the legacy stream; back on device 0: 3N launches
 * on the legacy stream, while the stream of device 1 gets N more. A failed
 * cudaSetDevice(7) changes nothing. Device 1 runs 4N ops, device 0 3N. */
static void scenario_devices(const struct options *o)
{
	dim3 one = { 1, 1, 1 };
	cudaStream_t s1;
	CK(cudaSetDevice, 1);
	CK(cudaStreamCreate, &s1);
	for (long i = 0; i < o->iters; i++)
		CK(cudaLaunchKernel, GEMM, one, one, gemm_args, 0, s1);
	for (long i = 0; i < 2 * o->iters; i++)
		CK(cudaLaunchKernel, GEMM, one, one, gemm_args, 0, NULL);
	CK(cudaDeviceSynchronize);
	CK(cudaSetDevice, 0);
	expect(CALL(cudaSetDevice, 7) == cudaErrorInvalidDevice, "cudaSetDevice(7) did not fail");
	for (long i = 0; i < 3 * o->iters; i++)
		CK(cudaLaunchKernel, GEMM, one, one, gemm_args, 0, NULL);
	for (long i = 0; i < o->iters; i++)
		CK(cudaLaunchKernel, GEMM, one, one, gemm_args, 0, s1);
	CK(cudaDeviceSynchronize);
	CK(cudaStreamDestroy, s1);
}

/* launches: N one-block launches on the legacy stream, a device sync every
 * 256 and at the end; nothing else, for overhead benchmarks. */
static void scenario_launches(const struct options *o)
{
	dim3 one = { 1, 1, 1 };
	for (long i = 1; i <= o->iters; i++) {
		CK(cudaLaunchKernel, GEMM, one, one, gemm_args, 0, NULL);
		if (i % 256 == 0)
			CK(cudaDeviceSynchronize);
	}
	if (o->iters % 256)
		CK(cudaDeviceSynchronize);
}

/* ptsz: the basic iteration through the _ptsz entry points with stream 0 (the
 * calling thread's per-thread default stream), from two threads; the relu
 * launch and the event wait go to cudaStreamLegacy. */
static void *ptsz_thread(void *arg)
{
	long iters = *(const long *)arg;
	void *dev, *pinned, *tmp;
	char *pageable = xmalloc(4 * KiB);
	cudaEvent_t ev;
	CK(cudaMalloc, &dev, MiB);
	CK(cudaHostAlloc, &pinned, MiB, cudaHostAllocDefault);
	CK(cudaEventCreate, &ev);

	dim3 gemm_grid = { 20, 1, 1 }, gemm_block = { 256, 1, 1 };
	dim3 relu_grid = { 4, 1, 1 }, relu_block = { 128, 1, 1 };
	for (long it = 1; it <= iters; it++) {
		CK(cudaLaunchKernel_ptsz, GEMM, gemm_grid, gemm_block, gemm_args, 1024, NULL);
		CK(cudaMemcpyAsync_ptsz, dev, pinned, MiB, cudaMemcpyHostToDevice, NULL);
		CK(cudaMemcpyAsync_ptsz, pageable, dev, 4 * KiB, cudaMemcpyDeviceToHost, NULL);
		CK(cudaEventRecord_ptsz, ev, NULL);
		CK(cudaStreamWaitEvent_ptsz, cudaStreamLegacy, ev, 0);
		CK(cudaMemsetAsync_ptsz, dev, 0, 64 * KiB, NULL);
		CK(cudaLaunchKernel_ptsz, RELU, relu_grid, relu_block, relu_args, 0, cudaStreamLegacy);
		if (it % 10 == 0) {
			CK(cudaStreamSynchronize_ptsz, NULL);
			CK(cudaMalloc, &tmp, MiB);
			CK(cudaFree, tmp);
		}
	}
	CK(cudaStreamSynchronize_ptsz, NULL);

	CK(cudaEventDestroy, ev);
	CK(cudaFreeHost, pinned);
	CK(cudaFree, dev);
	free(pageable);
	return NULL;
}

static void scenario_ptsz(const struct options *o)
{
	pthread_t t[2];
	for (int i = 0; i < 2; i++)
		if (pthread_create(&t[i], NULL, ptsz_thread, (void *)&o->iters))
			die("pthread_create failed");
	for (int i = 0; i < 2; i++)
		pthread_join(t[i], NULL);
	CK(cudaDeviceSynchronize);
}

/*
 * timing: checks the modeled GPU from the application's side and exits 1 on a
 * violation. A 20 ms kernel then a stream sync (>= 20 ms of wall time), then
 * the implicit dependencies of the legacy stream, an event edge, and which
 * copies and frees block the host. Checks that rely on the host outrunning a
 * kernel leave it 20 ms or more of margin.
 */
static void scenario_timing(const struct options *o)
{
	(void)o;
	cudaStream_t s, nb;
	cudaEvent_t ev;
	void *dev, *pinned;
	char pageable[64];
	CK(cudaStreamCreate, &s);
	CK(cudaStreamCreateWithFlags, &nb, cudaStreamNonBlocking);
	CK(cudaEventCreateWithFlags, &ev, cudaEventDisableTiming);
	CK(cudaMalloc, &dev, sizeof pageable);
	CK(cudaMallocHost, &pinned, sizeof pageable);

	dim3 grid20ms = { 20000, 1, 1 }, grid50ms = { 50000, 1, 1 };
	dim3 grid5ms = { 5000, 1, 1 }, one = { 1, 1, 1 }, block = { 256, 1, 1 };
	int64_t t0 = now_ns();
	CK(cudaLaunchKernel, REDUCE, grid20ms, block, reduce_args, 0, s);
	CK(cudaEventRecord, ev, s);
	expect(CALL(cudaStreamQuery, s) == cudaErrorNotReady, "stream ready during a 20 ms kernel");
	expect(CALL(cudaEventQuery, ev) == cudaErrorNotReady, "event ready during a 20 ms kernel");
	CK(cudaStreamSynchronize, s);
	expect(now_ns() - t0 >= 20 * MS, "cudaStreamSynchronize returned before the 20 ms kernel ended");
	expect(CALL(cudaStreamQuery, s) == cudaSuccess, "stream busy after cudaStreamSynchronize");
	expect(CALL(cudaEventQuery, ev) == cudaSuccess, "event pending after cudaStreamSynchronize");

	/* The legacy stream waits for blocking streams... */
	CK(cudaLaunchKernel, REDUCE, grid5ms, block, reduce_args, 0, s);
	CK(cudaLaunchKernel, RELU, one, one, relu_args, 0, NULL);
	CK(cudaStreamSynchronize, NULL);
	expect(CALL(cudaStreamQuery, s) == cudaSuccess, "a legacy-stream kernel did not wait for a blocking stream");
	/* ...non-blocking streams do not wait for it, blocking ones do. */
	CK(cudaLaunchKernel, REDUCE, grid50ms, block, reduce_args, 0, NULL);
	CK(cudaLaunchKernel, RELU, one, one, relu_args, 0, nb);
	CK(cudaStreamSynchronize, nb);
	expect(CALL(cudaStreamQuery, NULL) == cudaErrorNotReady, "a non-blocking stream waited for the legacy stream");
	CK(cudaLaunchKernel, RELU, one, one, relu_args, 0, s);
	CK(cudaStreamSynchronize, s);
	expect(CALL(cudaStreamQuery, NULL) == cudaSuccess, "a blocking stream did not wait for the legacy stream");

	/* An event edge orders a non-blocking stream after another stream. */
	CK(cudaLaunchKernel, REDUCE, grid5ms, block, reduce_args, 0, s);
	CK(cudaEventRecord, ev, s);
	CK(cudaStreamWaitEvent, nb, ev, 0);
	CK(cudaLaunchKernel, RELU, one, one, relu_args, 0, nb);
	CK(cudaStreamSynchronize, nb);
	expect(CALL(cudaEventQuery, ev) == cudaSuccess, "cudaStreamWaitEvent did not order the streams");

	/* An async copy to pageable memory blocks until the stream drains; one to
	 * pinned memory does not. */
	CK(cudaLaunchKernel, REDUCE, grid5ms, block, reduce_args, 0, nb);
	CK(cudaMemcpyAsync, pageable, dev, sizeof pageable, cudaMemcpyDeviceToHost, nb);
	expect(CALL(cudaStreamQuery, nb) == cudaSuccess, "an async copy to pageable memory did not block");
	CK(cudaLaunchKernel, REDUCE, grid20ms, block, reduce_args, 0, nb);
	CK(cudaMemcpyAsync, pinned, dev, sizeof pageable, cudaMemcpyDeviceToHost, nb);
	expect(CALL(cudaStreamQuery, nb) == cudaErrorNotReady, "an async copy to pinned memory blocked");

	/* cudaFree synchronizes the device. */
	CK(cudaLaunchKernel, REDUCE, grid5ms, block, reduce_args, 0, nb);
	CK(cudaFree, dev);
	expect(CALL(cudaStreamQuery, nb) == cudaSuccess, "cudaFree did not synchronize");

	CK(cudaFreeHost, pinned);
	CK(cudaEventDestroy, ev);
	CK(cudaStreamDestroy, nb);
	CK(cudaStreamDestroy, s);
}

/*
 * all: every entry point at least once, with these known argument values.
 * Launches: grid {7,3,2}, block {128,2,1}, sharedMem 4096; copies and sets
 * of ALL_BYTES; 2D copies of ALL_HEIGHT rows of ALL_WIDTH bytes at pitch
 * ALL_PITCH; memset value ALL_VALUE; graph handle ALL_GRAPH (launched as a
 * graph the simulator did not make: one kernel, not a graph of nodes), and
 * graphs captured, built, instantiated, updated and launched; stream priority
 * -1; event flags cudaEventDisableTiming. Managed and pool allocations are
 * of ALL_BYTES, the pitched one of ALL_HEIGHT rows of ALL_WIDTH bytes, all
 * freed with cudaFreeAsync (no synchronization).
 */
#define ALL_BYTES (64 * KiB)
#define ALL_WIDTH 256
#define ALL_HEIGHT 16
#define ALL_PITCH 512
#define ALL_VALUE 0x5a
#define ALL_SMEM 4096
#define ALL_GRAPH ((cudaGraphExec_t)0x6a6a0001)

static int hostfn_runs;

static void count_hostfn(void *runs)
{
	__atomic_fetch_add((int *)runs, 1, __ATOMIC_RELAXED);
}

static void scenario_all(const struct options *o)
{
	(void)o;
	int device = -1;
	CK(cudaSetDevice, 0);
	CK(cudaGetDevice, &device);
	expect(device == 0, "cudaGetDevice did not return device 0");
	CK(cudaGetLastError);

	cudaStream_t sb, snb, sp;
	cudaEvent_t e1, e2;
	CK(cudaStreamCreate, &sb);
	CK(cudaStreamCreateWithFlags, &snb, cudaStreamNonBlocking);
	CK(cudaStreamCreateWithPriority, &sp, cudaStreamNonBlocking, -1);
	CK(cudaEventCreate, &e1);
	CK(cudaEventCreateWithFlags, &e2, cudaEventDisableTiming);

	void *d1, *d2, *d3, *pinned, *pinned2;
	char *pageable = xmalloc(ALL_BYTES);
	char *registered = aligned_alloc(4 * KiB, ALL_BYTES);
	if (!registered)
		die("out of memory");
	CK(cudaMalloc, &d1, ALL_BYTES);
	CK(cudaMallocAsync, &d2, ALL_BYTES, snb);
	CK(cudaMallocAsync_ptsz, &d3, ALL_BYTES, NULL);
	CK(cudaHostAlloc, &pinned, ALL_BYTES, cudaHostAllocPortable);
	CK(cudaMallocHost, &pinned2, ALL_BYTES);
	CK(cudaHostRegister, registered, ALL_BYTES, cudaHostRegisterDefault);
	void *dm, *dpitch, *dpool, *dpool2;
	size_t pitch;
	CK(cudaMallocManaged, &dm, ALL_BYTES, 1 /* cudaMemAttachGlobal */);
	CK(cudaMallocPitch, &dpitch, &pitch, ALL_WIDTH, ALL_HEIGHT);
	CK(cudaMallocFromPoolAsync, &dpool, ALL_BYTES, NULL, snb);
	CK(cudaMallocFromPoolAsync_ptsz, &dpool2, ALL_BYTES, NULL, NULL);

	/* Launches. */
	dim3 grid = { 7, 3, 2 }, block = { 128, 2, 1 };
	cudaLaunchConfig_t cfg = { grid, block, ALL_SMEM, snb, NULL, 0 };
	CK(cudaLaunchKernel, GEMM, grid, block, gemm_args, ALL_SMEM, sb);
	CK(cudaLaunchKernel_ptsz, GEMM, grid, block, gemm_args, ALL_SMEM, NULL);
	CK(cudaLaunchKernelExC, &cfg, RELU, relu_args);
	cfg.stream = NULL;
	CK(cudaLaunchKernelExC_ptsz, &cfg, RELU, relu_args);
	CK(cudaLaunchCooperativeKernel, REDUCE, grid, block, reduce_args, ALL_SMEM, sp);
	CK(cudaLaunchCooperativeKernel_ptsz, REDUCE, grid, block, reduce_args, ALL_SMEM, NULL);
	CK(cudaGraphLaunch, ALL_GRAPH, sb);
	CK(cudaGraphLaunch_ptsz, ALL_GRAPH, NULL);
	CK(cudaLaunchHostFunc, sb, count_hostfn, &hostfn_runs);
	CK(cudaLaunchHostFunc_ptsz, NULL, count_hostfn, &hostfn_runs);

	/* Graphs: a launch and a set captured on sb, and again on the
	 * per-thread stream; the first graph's exec updated to the second and
	 * launched; a one-kernel graph built, its exec's node set, launched. */
	cudaGraph_t g1, g2, g3;
	cudaGraphExec_t x1, x2;
	cudaGraphNode_t node;
	struct cudaGraphExecUpdateResultInfo info;
	struct cudaKernelNodeParams kp = { RELU, grid, block, ALL_SMEM, relu_args, NULL };
	CK(cudaStreamBeginCapture, sb, cudaStreamCaptureModeGlobal);
	CK(cudaLaunchKernel, GEMM, grid, block, gemm_args, ALL_SMEM, sb);
	CK(cudaMemsetAsync, d1, ALL_VALUE, ALL_BYTES, sb);
	CK(cudaStreamEndCapture, sb, &g1);
	CK(cudaStreamBeginCapture_ptsz, NULL, cudaStreamCaptureModeThreadLocal);
	CK(cudaLaunchKernel_ptsz, GEMM, grid, block, gemm_args, ALL_SMEM, NULL);
	CK(cudaMemsetAsync_ptsz, d1, ALL_VALUE, ALL_BYTES, NULL);
	CK(cudaStreamEndCapture_ptsz, NULL, &g2);
	CK(cudaGraphInstantiate, &x1, g1, 0);
	CK(cudaGraphExecUpdate, x1, g2, &info);
	CK(cudaGraphLaunch, x1, sb);
	CK(cudaGraphCreate, &g3, 0);
	CK(cudaGraphAddKernelNode, &node, g3, NULL, 0, &kp);
	CK(cudaGraphInstantiateWithFlags, &x2, g3, 0);
	kp.func = (void *)REDUCE;
	CK(cudaGraphExecKernelNodeSetParams, x2, node, &kp);
	CK(cudaGraphLaunch_ptsz, x2, NULL);

	/* Copies and sets: synchronous, pinned async, pageable async (blocking). */
	memset(pinned, 0x11, ALL_BYTES);
	CK(cudaMemcpy, pinned2, pinned, ALL_BYTES, cudaMemcpyDefault);
	expect(memcmp(pinned, pinned2, ALL_BYTES) == 0, "host-to-host cudaMemcpy did not copy");
	CK(cudaMemcpy, d1, pageable, ALL_BYTES, cudaMemcpyHostToDevice);
	CK(cudaMemcpy_ptds, pageable, d1, ALL_BYTES, cudaMemcpyDeviceToHost);
	CK(cudaMemcpyAsync, d1, pinned, ALL_BYTES, cudaMemcpyHostToDevice, snb);
	CK(cudaMemcpyAsync_ptsz, registered, d1, ALL_BYTES, cudaMemcpyDefault, NULL);
	CK(cudaMemcpy2D, d2, ALL_PITCH, pageable, ALL_PITCH, ALL_WIDTH, ALL_HEIGHT, cudaMemcpyHostToDevice);
	CK(cudaMemcpy2D_ptds, pageable, ALL_PITCH, d2, ALL_PITCH, ALL_WIDTH, ALL_HEIGHT, cudaMemcpyDeviceToHost);
	CK(cudaMemcpy2DAsync, d2, ALL_PITCH, pinned, ALL_PITCH, ALL_WIDTH, ALL_HEIGHT, cudaMemcpyHostToDevice, sb);
	CK(cudaMemcpy2DAsync_ptsz, pinned, ALL_PITCH, d2, ALL_PITCH, ALL_WIDTH, ALL_HEIGHT,
	   cudaMemcpyDeviceToHost, NULL);
	CK(cudaMemset, d1, ALL_VALUE, ALL_BYTES);
	CK(cudaMemset_ptds, d1, ALL_VALUE, ALL_BYTES);
	CK(cudaMemsetAsync, d2, ALL_VALUE, ALL_BYTES, snb);
	CK(cudaMemsetAsync_ptsz, d3, ALL_VALUE, ALL_BYTES, NULL);

	/* Events and dependency edges. */
	CK(cudaEventRecord, e1, sb);
	CK(cudaStreamWaitEvent, snb, e1, 0);
	CK(cudaEventRecord_ptsz, e1, NULL);
	CK(cudaStreamWaitEvent_ptsz, NULL, e1, 0);
	CK(cudaEventRecordWithFlags, e2, snb, cudaEventRecordExternal);
	CK(cudaEventRecordWithFlags_ptsz, e2, NULL, 0);
	CK(cudaEventSynchronize, e2);

	/* Poll a 20 ms kernel to completion. */
	dim3 grid20ms = { 20000, 1, 1 };
	CK(cudaLaunchKernel, REDUCE, grid20ms, block, reduce_args, 0, sp);
	CK(cudaEventRecord, e2, sp);
	expect(CALL(cudaEventQuery, e2) == cudaErrorNotReady, "event ready during a 20 ms kernel");
	cudaError_t q;
	while ((q = CALL(cudaEventQuery, e2)) == cudaErrorNotReady)
		sleep_ns(MS);
	check("cudaEventQuery", q);
	CK(cudaStreamQuery, sp);
	q = CALL(cudaStreamQuery_ptsz, NULL);
	expect(q == cudaSuccess || q == cudaErrorNotReady, "cudaStreamQuery_ptsz failed");
	CK(cudaStreamSynchronize, sb);
	CK(cudaStreamSynchronize_ptsz, NULL);

	/* Teardown. */
	CK(cudaGraphExecDestroy, x2);
	CK(cudaGraphExecDestroy, x1);
	CK(cudaGraphDestroy, g3);
	CK(cudaGraphDestroy, g2);
	CK(cudaGraphDestroy, g1);
	CK(cudaFreeAsync, d2, snb);
	CK(cudaFreeAsync_ptsz, d3, NULL);
	CK(cudaFreeAsync, dm, snb);
	CK(cudaFreeAsync, dpitch, snb);
	CK(cudaFreeAsync, dpool, snb);
	CK(cudaFreeAsync_ptsz, dpool2, NULL);
	CK(cudaDeviceSynchronize);
	expect(__atomic_load_n(&hostfn_runs, __ATOMIC_RELAXED) == 2, "host functions did not run by the device sync");
	CK(cudaHostUnregister, registered);
	CK(cudaFreeHost, pinned2);
	CK(cudaFreeHost, pinned);
	CK(cudaFree, d1);
	CK(cudaEventDestroy, e2);
	CK(cudaEventDestroy, e1);
	CK(cudaStreamDestroy, sp);
	CK(cudaStreamDestroy, snb);
	CK(cudaStreamDestroy, sb);
	free(registered);
	free(pageable);
}

/*
 * graphs: CUDA graphs as torch.cuda.graphs captures and replays them, then
 * as a program builds one by hand. On a non-blocking stream s, a capture of
 * GRAPH_NODES kernels (graph_kernels: grid.x blocks of 1 µs each), the
 * third forked onto a side stream by an event and joined back, each from
 * a function of its own (capture_node0..4); the graph instantiated and
 * replayed --iters times on s, then cudaStreamSynchronize(s). A second
 * capture of the same
 * shape with other grids (graph_kernels2); cudaGraphExecUpdate of the exec to
 * it, --iters replays, sync. The exec destroyed and the second graph
 * instantiated anew, --iters replays, sync. Then a graph built with
 * cudaGraphAddKernelNode (built_kernels), instantiated, --iters replays;
 * its second node set to reduce {6} in the exec, --iters replays, sync.
 */
#define GRAPH_NODES 5
static const struct {
	const void *fn;
	void **args;
	unsigned blocks;
} graph_kernels[GRAPH_NODES] = { { GEMM, gemm_args, 20 }, { RELU, relu_args, 4 }, { REDUCE, reduce_args, 8 },
				 { GEMM, gemm_args, 16 }, { RELU, relu_args, 2 } },
  graph_kernels2[GRAPH_NODES] = { { GEMM, gemm_args, 40 }, { RELU, relu_args, 3 }, { REDUCE, reduce_args, 9 },
				  { GEMM, gemm_args, 12 }, { RELU, relu_args, 1 } },
  built_kernels[3] = { { GEMM, gemm_args, 10 }, { RELU, relu_args, 5 }, { REDUCE, reduce_args, 3 } };

/* The nodes of a capture, each launched from a function of its own (a
 * line of its own: a switch's identical cases may be merged into one call
 * by the compiler), so each node has a capture site of its own. */
#define CAPTURE_NODE(k)                                                                                       \
	static __attribute__((noinline)) void capture_node##k(const void *fn, void **args, unsigned blocks, cudaStream_t s) \
	{                                                                                                     \
		dim3 grid = { blocks, 1, 1 }, block = { 128, 1, 1 };                                          \
		CK(cudaLaunchKernel, fn, grid, block, args, k, s);                                            \
	}
CAPTURE_NODE(0)
CAPTURE_NODE(1)
CAPTURE_NODE(2)
CAPTURE_NODE(3)
CAPTURE_NODE(4)
static void (*const capture_node[GRAPH_NODES])(const void *, void **, unsigned, cudaStream_t) = {
	capture_node0, capture_node1, capture_node2, capture_node3, capture_node4,
};

static cudaGraph_t capture_graph(cudaStream_t s, cudaStream_t side, cudaEvent_t fork, cudaEvent_t join,
				 const __typeof__(graph_kernels[0]) *kernels)
{
	cudaGraph_t g;
	CK(cudaStreamBeginCapture, s, cudaStreamCaptureModeGlobal);
	for (int k = 0; k < GRAPH_NODES; k++) {
		if (k == 2) {
			CK(cudaEventRecord, fork, s);
			CK(cudaStreamWaitEvent, side, fork, 0);
			capture_node[k](kernels[k].fn, kernels[k].args, kernels[k].blocks, side);
			CK(cudaEventRecord, join, side);
			CK(cudaStreamWaitEvent, s, join, 0);
		} else {
			capture_node[k](kernels[k].fn, kernels[k].args, kernels[k].blocks, s);
		}
	}
	CK(cudaStreamEndCapture, s, &g);
	return g;
}

static void scenario_graphs(const struct options *o)
{
	cudaStream_t s, side;
	cudaEvent_t fork, join;
	CK(cudaStreamCreateWithFlags, &s, cudaStreamNonBlocking);
	CK(cudaStreamCreateWithFlags, &side, cudaStreamNonBlocking);
	CK(cudaEventCreateWithFlags, &fork, cudaEventDisableTiming);
	CK(cudaEventCreateWithFlags, &join, cudaEventDisableTiming);

	cudaGraph_t g = capture_graph(s, side, fork, join, graph_kernels);
	cudaGraphExec_t x;
	CK(cudaGraphInstantiate, &x, g, 0);
	for (long it = 0; it < o->iters; it++)
		CK(cudaGraphLaunch, x, s);
	CK(cudaStreamSynchronize, s);

	cudaGraph_t g2 = capture_graph(s, side, fork, join, graph_kernels2);
	struct cudaGraphExecUpdateResultInfo info;
	CK(cudaGraphExecUpdate, x, g2, &info);
	for (long it = 0; it < o->iters; it++)
		CK(cudaGraphLaunch, x, s);
	CK(cudaStreamSynchronize, s);

	CK(cudaGraphExecDestroy, x);
	CK(cudaGraphInstantiateWithFlags, &x, g2, 0);
	for (long it = 0; it < o->iters; it++)
		CK(cudaGraphLaunch, x, s);
	CK(cudaStreamSynchronize, s);

	cudaGraph_t g3;
	cudaGraphNode_t nodes[3];
	CK(cudaGraphCreate, &g3, 0);
	for (int k = 0; k < 3; k++) {
		struct cudaKernelNodeParams p = { (void *)built_kernels[k].fn, { built_kernels[k].blocks, 1, 1 }, { 128, 1, 1 }, 0,
						  built_kernels[k].args, NULL };
		CK(cudaGraphAddKernelNode, &nodes[k], g3, k ? &nodes[k - 1] : NULL, k ? 1 : 0, &p);
	}
	cudaGraphExec_t x3;
	CK(cudaGraphInstantiateWithFlags, &x3, g3, 0);
	for (long it = 0; it < o->iters; it++)
		CK(cudaGraphLaunch, x3, s);
	struct cudaKernelNodeParams p = { (void *)REDUCE, { 6, 1, 1 }, { 128, 1, 1 }, 0, reduce_args, NULL };
	CK(cudaGraphExecKernelNodeSetParams, x3, nodes[1], &p);
	for (long it = 0; it < o->iters; it++)
		CK(cudaGraphLaunch, x3, s);
	CK(cudaStreamSynchronize, s);

	CK(cudaGraphExecDestroy, x3);
	CK(cudaGraphExecDestroy, x);
	CK(cudaGraphDestroy, g3);
	CK(cudaGraphDestroy, g2);
	CK(cudaGraphDestroy, g);
	CK(cudaEventDestroy, join);
	CK(cudaEventDestroy, fork);
	CK(cudaStreamDestroy, side);
	CK(cudaStreamDestroy, s);
}

#ifdef SIM_DRIVER
/*
 * Driver-API workloads, like Triton: kernels come from modules and libraries
 * loaded with the driver, looked up by name, and launched with cuLaunchKernel
 * and cuLaunchKernelEx. The image is never read.
 */
static const char fake_image[] = "\x7f" "ELF simulated cubin";

#define DEVPTR(p) ((CUdeviceptr)(uintptr_t)(p))

/*
 * driver: only the driver API. cuInit; TRITON_MATMUL from cuModuleLoadData +
 * cuModuleGetFunction; TRITON_SOFTMAX from cuLibraryLoadData +
 * cuLibraryGetKernel + cuKernelGetFunction; a blocking stream s0 and a
 * non-blocking stream s1 from cuStreamCreate. Per iteration: matmul with
 * cuLaunchKernel (grid {20,1,1}, block {128,1,1}, no shared memory) on s0,
 * softmax with cuLaunchKernelEx (grid {4,1,1}, block {256,1,1}, 1024 bytes of
 * shared memory) on s1, a 1 MiB H2D copy from pinned memory (cuMemHostAlloc)
 * on s0, an event edge s0 -> s1 (cuEventRecord + cuStreamWaitEvent), a 4 KiB
 * D2H copy into pageable memory on s1 (host blocking); every 10th iteration
 * cuStreamSynchronize(s0). cuCtxSynchronize at the end.
 */
#define TRITON_MATMUL "triton_matmul_kernel"
#define TRITON_SOFTMAX "triton_softmax_kernel"
#define TORCH_GEMM "sm90_xmma_gemm_f32f32_tn_n_cublas"

static void scenario_driver(const struct options *o)
{
	CUmodule mod;
	CUlibrary lib;
	CUkernel kern;
	CUfunction matmul, softmax;
	CK(cuInit, 0);
	CK(cuModuleLoadData, &mod, fake_image);
	CK(cuModuleGetFunction, &matmul, mod, TRITON_MATMUL);
	CK(cuLibraryLoadData, &lib, fake_image, NULL, NULL, 0, NULL, NULL, 0);
	CK(cuLibraryGetKernel, &kern, lib, TRITON_SOFTMAX);
	CK(cuKernelGetFunction, &softmax, kern);

	CUstream s0, s1;
	CUdeviceptr dev;
	void *pinned;
	char *pageable = xmalloc(4 * KiB);
	CUevent ev;
	CK(cuStreamCreate, &s0, CU_STREAM_DEFAULT);
	CK(cuStreamCreate, &s1, CU_STREAM_NON_BLOCKING);
	CK(cuMemAlloc_v2, &dev, MiB);
	CK(cuMemHostAlloc, &pinned, MiB, 0);
	CK(cuEventCreate, &ev, CU_EVENT_DISABLE_TIMING);
	if (o->wait_setup) {
		/* Kernels loaded, not yet launched: a tracer attaching now never
		 * sees their names given. */
		printf("setup %d\n", (int)getpid());
		fflush(stdout);
		char line[256];
		if (!fgets(line, sizeof line, stdin))
			die("stdin closed before the go-ahead line");
	}

	for (long it = 1; it <= o->iters; it++) {
		CK(cuLaunchKernel, matmul, 20, 1, 1, 128, 1, 1, 0, s0, gemm_args, NULL);
		CUlaunchConfig cfg = { 4, 1, 1, 256, 1, 1, 1024, s1, NULL, 0 };
		CK(cuLaunchKernelEx, &cfg, softmax, relu_args, NULL);
		CK(cuMemcpyHtoDAsync_v2, dev, pinned, MiB, s0);
		CK(cuEventRecord, ev, s0);
		CK(cuStreamWaitEvent, s1, ev, 0);
		CK(cuMemcpyDtoHAsync_v2, pageable, dev, 4 * KiB, s1);
		if (it % 10 == 0)
			CK(cuStreamSynchronize, s0);
	}
	CK(cuCtxSynchronize);

	CK(cuEventDestroy_v2, ev);
	CK(cuMemFreeHost, pinned);
	CK(cuMemFree_v2, dev);
	CK(cuStreamDestroy_v2, s1);
	CK(cuStreamDestroy_v2, s0);
	free(pageable);
}

/*
 * driver-graphs: graphs through the driver only, as a Triton program (or
 * torch.compile's generated code) makes them: on a non-blocking stream, a
 * capture of TRITON_MATMUL {20} (cuLaunchKernel), TRITON_SOFTMAX {4}
 * (cuLaunchKernelEx), a 64 KiB cuMemsetD8Async and TRITON_MATMUL {8};
 * instantiated, --iters replays, cuStreamSynchronize. A second capture of
 * the same shape (matmul {30}, softmax {5}, memset, matmul {2}),
 * cuGraphExecUpdate_v2 to it, --iters replays, sync. Then a graph built
 * with cuGraphAddKernelNode_v2 (softmax {3}, matmul {7}), instantiated,
 * --iters replays; its first node set to matmul {9} in the exec, --iters
 * replays, sync.
 */
static CUgraph driver_capture(CUstream s, CUfunction matmul, CUfunction softmax, CUdeviceptr dev, unsigned b0, unsigned b1,
			      unsigned b3)
{
	CUgraph g;
	CK(cuStreamBeginCapture_v2, s, CU_STREAM_CAPTURE_MODE_GLOBAL);
	CK(cuLaunchKernel, matmul, b0, 1, 1, 128, 1, 1, 0, s, gemm_args, NULL);
	CUlaunchConfig cfg = { b1, 1, 1, 256, 1, 1, 0, s, NULL, 0 };
	CK(cuLaunchKernelEx, &cfg, softmax, relu_args, NULL);
	CK(cuMemsetD8Async, dev, 0, 64 * KiB, s);
	CK(cuLaunchKernel, matmul, b3, 1, 1, 128, 1, 1, 0, s, gemm_args, NULL);
	CK(cuStreamEndCapture, s, &g);
	return g;
}

static void scenario_driver_graphs(const struct options *o)
{
	CUmodule mod;
	CUfunction matmul, softmax;
	CK(cuInit, 0);
	CK(cuModuleLoadData, &mod, fake_image);
	CK(cuModuleGetFunction, &matmul, mod, TRITON_MATMUL);
	CK(cuModuleGetFunction, &softmax, mod, TRITON_SOFTMAX);
	CUstream s;
	CUdeviceptr dev;
	CK(cuStreamCreate, &s, CU_STREAM_NON_BLOCKING);
	CK(cuMemAlloc_v2, &dev, MiB);

	CUgraph g = driver_capture(s, matmul, softmax, dev, 20, 4, 8);
	CUgraphExec x;
	CK(cuGraphInstantiateWithFlags, &x, g, 0);
	for (long it = 0; it < o->iters; it++)
		CK(cuGraphLaunch, x, s);
	CK(cuStreamSynchronize, s);

	CUgraph g2 = driver_capture(s, matmul, softmax, dev, 30, 5, 2);
	CUgraphExecUpdateResultInfo info;
	CK(cuGraphExecUpdate_v2, x, g2, &info);
	for (long it = 0; it < o->iters; it++)
		CK(cuGraphLaunch, x, s);
	CK(cuStreamSynchronize, s);

	CUgraph g3;
	CUgraphNode nodes[2];
	CK(cuGraphCreate, &g3, 0);
	CUDA_KERNEL_NODE_PARAMS p = { softmax, 3, 1, 1, 256, 1, 1, 0, relu_args, NULL, NULL, NULL };
	CK(cuGraphAddKernelNode_v2, &nodes[0], g3, NULL, 0, &p);
	p = (CUDA_KERNEL_NODE_PARAMS){ matmul, 7, 1, 1, 128, 1, 1, 0, gemm_args, NULL, NULL, NULL };
	CK(cuGraphAddKernelNode_v2, &nodes[1], g3, &nodes[0], 1, &p);
	CUgraphExec x3;
	CK(cuGraphInstantiateWithFlags, &x3, g3, 0);
	for (long it = 0; it < o->iters; it++)
		CK(cuGraphLaunch, x3, s);
	p = (CUDA_KERNEL_NODE_PARAMS){ matmul, 9, 1, 1, 128, 1, 1, 0, gemm_args, NULL, NULL, NULL };
	CK(cuGraphExecKernelNodeSetParams_v2, x3, nodes[0], &p);
	for (long it = 0; it < o->iters; it++)
		CK(cuGraphLaunch, x3, s);
	CK(cuStreamSynchronize, s);

	CK(cuGraphExecDestroy, x3);
	CK(cuGraphExecDestroy, x);
	CK(cuGraphDestroy, g3);
	CK(cuGraphDestroy, g2);
	CK(cuGraphDestroy, g);
	CK(cuMemFree_v2, dev);
	CK(cuStreamDestroy_v2, s);
}

/*
 * mixed: both layers, like Triton kernels inside a PyTorch process (here
 * the runtime is dlopen()ed after the driver is mapped). A non-blocking stream and 1 MiB of device memory from the runtime; N
 * iterations of a gemm cudaLaunchKernel (grid {20,1,1}, block {256,1,1}) and
 * a 4 KiB pageable cudaMemcpyAsync D2H on it, then cudaStreamSynchronize;
 * then TRITON_MATMUL through cuModuleLoadData + cuModuleGetFunction and N
 * iterations of cuLaunchKernel (grid {20,1,1}, block {128,1,1}) and a 4 KiB
 * cuMemcpyDtoHAsync_v2 on the same stream, then cuStreamSynchronize; then
 * cudaDeviceSynchronize and teardown through the runtime.
 */
static void scenario_mixed(const struct options *o)
{
	cudaStream_t s;
	void *dev;
	char *pageable = xmalloc(4 * KiB);
	CK(cudaStreamCreateWithFlags, &s, cudaStreamNonBlocking);
	CK(cudaMalloc, &dev, MiB);
	dim3 grid = { 20, 1, 1 }, block = { 256, 1, 1 };
	for (long it = 1; it <= o->iters; it++) {
		CK(cudaLaunchKernel, GEMM, grid, block, gemm_args, 0, s);
		CK(cudaMemcpyAsync, pageable, dev, 4 * KiB, cudaMemcpyDeviceToHost, s);
	}
	CK(cudaStreamSynchronize, s);

	CUmodule mod;
	CUfunction matmul;
	CK(cuModuleLoadData, &mod, fake_image);
	CK(cuModuleGetFunction, &matmul, mod, TRITON_MATMUL);
	for (long it = 1; it <= o->iters; it++) {
		CK(cuLaunchKernel, matmul, 20, 1, 1, 128, 1, 1, 0, s, gemm_args, NULL);
		CK(cuMemcpyDtoHAsync_v2, pageable, DEVPTR(dev), 4 * KiB, s);
	}
	CK(cuStreamSynchronize, s);

	CK(cudaDeviceSynchronize);
	CK(cudaFree, dev);
	CK(cudaStreamDestroy, s);
	free(pageable);
}

/*
 * static-runtime: what cuBLASLt does in a PyTorch process. Its statically
 * linked runtime exports nothing a tracer can hook, and the driver calls it
 * makes are, but for launches, the ones a tracer leaves alone where a
 * runtime is present (it hooks the runtime's); PyTorch's autograd engine
 * makes them on a thread of its own. The runtime is loaded. The main thread
 * (the forward): N iterations of a gemm cudaLaunchKernel (grid {20,1,1},
 * block {256,1,1}) and a 4 KiB cudaMemsetAsync on a non-blocking stream.
 * Then a second thread (the backward, cuBLASLt inside), on the same stream:
 * N iterations of cuMemsetD32Async of 16 Ki words (a split-K workspace
 * zeroed), cuLaunchKernel of TRITON_MATMUL (grid {20,1,1}, block
 * {128,1,1}), cuLaunchKernelEx (grid {4,1,1}, block {256,1,1}: the split-K
 * reduce), cuMemsetD8Async of 256 bytes and cuMemcpyDtoDAsync_v2 of 4 KiB;
 * joined; then cudaStreamSynchronize. With SIM_CUPTI_RUNTIME_CALLS=1 the
 * simulated CUPTI reports each driver call inside a runtime call, as CUPTI
 * reports a static runtime's.
 */
struct backward {
	long iters;
	cudaStream_t s;
	void *dev;
	CUfunction matmul;
};

static void *backward_thread(void *arg)
{
	struct backward *b = arg;
	CUstream s = (CUstream)b->s;
	CUdeviceptr dev = DEVPTR(b->dev);
	for (long it = 1; it <= b->iters; it++) {
		CK(cuMemsetD32Async, dev, 0, 16 * KiB, s);
		CK(cuLaunchKernel, b->matmul, 20, 1, 1, 128, 1, 1, 0, s, gemm_args, NULL);
		CUlaunchConfig cfg = { 4, 1, 1, 256, 1, 1, 0, s, NULL, 0 };
		CK(cuLaunchKernelEx, &cfg, b->matmul, gemm_args, NULL);
		CK(cuMemsetD8Async, dev + 64 * KiB, 0, 256, s);
		CK(cuMemcpyDtoDAsync_v2, dev + 128 * KiB, dev, 4 * KiB, s);
	}
	return NULL;
}

static void scenario_static_runtime(const struct options *o)
{
	struct backward b = { .iters = o->iters };
	CK(cudaStreamCreateWithFlags, &b.s, cudaStreamNonBlocking);
	CK(cudaMalloc, &b.dev, MiB);
	dim3 grid = { 20, 1, 1 }, block = { 256, 1, 1 };
	for (long it = 1; it <= o->iters; it++) {
		CK(cudaLaunchKernel, GEMM, grid, block, gemm_args, 0, b.s);
		CK(cudaMemsetAsync, b.dev, 0, 4 * KiB, b.s);
	}
	CUmodule mod;
	CK(cuModuleLoadData, &mod, fake_image);
	CK(cuModuleGetFunction, &b.matmul, mod, TRITON_MATMUL);
	pthread_t t;
	if (pthread_create(&t, NULL, backward_thread, &b))
		die("pthread_create failed");
	pthread_join(t, NULL);
	CK(cudaStreamSynchronize, b.s);
	CK(cudaFree, b.dev);
	CK(cudaStreamDestroy, b.s);
}

/*
 * driver-all: every driver entry point at least once, with the constants of
 * scenario all: launches of grid {7,3,2}, block {128,2,1}, ALL_SMEM bytes of
 * shared memory; copies and sets of ALL_BYTES (cuMemsetD32Async:
 * ALL_BYTES / 4 words of ALL_VALUE32); 2D copies of ALL_HEIGHT rows of
 * ALL_WIDTH bytes at pitch ALL_PITCH; graph handle ALL_GRAPH; stream priority
 * -1; managed, pool and physical (cuMemCreate) allocations of ALL_BYTES, a
 * pitched one of ALL_HEIGHT rows of ALL_WIDTH bytes, freed stream-ordered
 * (cuMemFreeAsync) or released. Also checks that function lookups return
 * stable handles.
 */
#define ALL_VALUE32 0x5a5a5a5aU

static CUDA_MEMCPY2D copy2d(CUmemorytype dt, void *dst, CUmemorytype st, const void *src)
{
	return (CUDA_MEMCPY2D){
		.srcMemoryType = st, .srcHost = src, .srcDevice = DEVPTR(src), .srcPitch = ALL_PITCH,
		.dstMemoryType = dt, .dstHost = dst, .dstDevice = DEVPTR(dst), .dstPitch = ALL_PITCH,
		.WidthInBytes = ALL_WIDTH, .Height = ALL_HEIGHT,
	};
}

static void scenario_driver_all(const struct options *o)
{
	(void)o;
	CK(cuInit, 0);
	CUmodule mod;
	CUlibrary lib;
	CUkernel kern, kern2;
	CUfunction matmul, matmul2, softmax, softmax2;
	CK(cuModuleLoadData, &mod, fake_image);
	CK(cuModuleGetFunction, &matmul, mod, TRITON_MATMUL);
	CK(cuModuleGetFunction, &matmul2, mod, TRITON_MATMUL);
	expect(matmul == matmul2, "cuModuleGetFunction returned two handles for one name");
	CK(cuLibraryLoadData, &lib, fake_image, NULL, NULL, 0, NULL, NULL, 0);
	CK(cuLibraryGetKernel, &kern, lib, TRITON_SOFTMAX);
	CK(cuLibraryGetKernel, &kern2, lib, TRITON_SOFTMAX);
	CK(cuKernelGetFunction, &softmax, kern);
	CK(cuKernelGetFunction, &softmax2, kern2);
	expect(kern == kern2 && softmax == softmax2, "cuLibraryGetKernel returned two handles for one name");
	expect((void *)softmax != (void *)kern && softmax != matmul, "function handles are not distinct");

	CUstream sb, snb, sp;
	CUevent e1, e2;
	CK(cuStreamCreate, &sb, CU_STREAM_DEFAULT);
	CK(cuStreamCreate, &snb, CU_STREAM_NON_BLOCKING);
	CK(cuStreamCreateWithPriority, &sp, CU_STREAM_NON_BLOCKING, -1);
	CK(cuEventCreate, &e1, CU_EVENT_DEFAULT);
	CK(cuEventCreate, &e2, CU_EVENT_DISABLE_TIMING);

	CUdeviceptr d1, d2, d3;
	void *pinned, *pinned2;
	char *pageable = xmalloc(ALL_BYTES);
	char *registered = aligned_alloc(4 * KiB, ALL_BYTES);
	if (!registered)
		die("out of memory");
	CK(cuMemAlloc_v2, &d1, ALL_BYTES);
	CK(cuMemAllocAsync, &d2, ALL_BYTES, snb);
	CK(cuMemAllocAsync_ptsz, &d3, ALL_BYTES, NULL);
	CK(cuMemHostAlloc, &pinned, ALL_BYTES, CU_MEMHOSTALLOC_PORTABLE);
	CK(cuMemAllocHost_v2, &pinned2, ALL_BYTES);
	CK(cuMemHostRegister_v2, registered, ALL_BYTES, 0);
	CUdeviceptr dm, dpitch, dpool, dpool2;
	CUmemGenericAllocationHandle phys;
	size_t pitch;
	CK(cuMemAllocManaged, &dm, ALL_BYTES, 1 /* CU_MEM_ATTACH_GLOBAL */);
	CK(cuMemAllocPitch_v2, &dpitch, &pitch, ALL_WIDTH, ALL_HEIGHT, 4);
	CK(cuMemAllocFromPoolAsync, &dpool, ALL_BYTES, NULL, snb);
	CK(cuMemAllocFromPoolAsync_ptsz, &dpool2, ALL_BYTES, NULL, NULL);
	CK(cuMemCreate, &phys, ALL_BYTES, NULL, 0);

	/* Launches. */
	CUlaunchConfig cfg = { 7, 3, 2, 128, 2, 1, ALL_SMEM, snb, NULL, 0 };
	CK(cuLaunchKernel, matmul, 7, 3, 2, 128, 2, 1, ALL_SMEM, sb, gemm_args, NULL);
	CK(cuLaunchKernel_ptsz, matmul, 7, 3, 2, 128, 2, 1, ALL_SMEM, NULL, gemm_args, NULL);
	CK(cuLaunchKernelEx, &cfg, softmax, relu_args, NULL);
	cfg.hStream = NULL;
	CK(cuLaunchKernelEx_ptsz, &cfg, softmax, relu_args, NULL);
	CK(cuLaunchCooperativeKernel, matmul, 7, 3, 2, 128, 2, 1, ALL_SMEM, sp, reduce_args);
	CK(cuLaunchCooperativeKernel_ptsz, matmul, 7, 3, 2, 128, 2, 1, ALL_SMEM, NULL, reduce_args);
	CK(cuGraphLaunch, (CUgraphExec)ALL_GRAPH, sb);
	CK(cuGraphLaunch_ptsz, (CUgraphExec)ALL_GRAPH, NULL);
	CK(cuLaunchHostFunc, sb, count_hostfn, &hostfn_runs);
	CK(cuLaunchHostFunc_ptsz, NULL, count_hostfn, &hostfn_runs);

	/* Graphs, as scenario all makes them through the runtime. */
	CUgraph g1, g2, g3;
	CUgraphExec x1, x2;
	CUgraphNode node;
	CUgraphExecUpdateResultInfo info;
	CUDA_KERNEL_NODE_PARAMS kp = { softmax, 7, 3, 2, 128, 2, 1, ALL_SMEM, relu_args, NULL, NULL, NULL };
	CK(cuStreamBeginCapture_v2, sb, CU_STREAM_CAPTURE_MODE_GLOBAL);
	CK(cuLaunchKernel, matmul, 7, 3, 2, 128, 2, 1, ALL_SMEM, sb, gemm_args, NULL);
	CK(cuMemsetD8Async, d1, ALL_VALUE, ALL_BYTES, sb);
	CK(cuStreamEndCapture, sb, &g1);
	CK(cuStreamBeginCapture_v2_ptsz, NULL, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);
	CK(cuLaunchKernel_ptsz, softmax, 7, 3, 2, 128, 2, 1, ALL_SMEM, NULL, relu_args, NULL);
	CK(cuMemsetD8Async_ptsz, d1, ALL_VALUE, ALL_BYTES, NULL);
	CK(cuStreamEndCapture_ptsz, NULL, &g2);
	CK(cuGraphInstantiateWithFlags, &x1, g1, 0);
	CK(cuGraphExecUpdate_v2, x1, g2, &info);
	CK(cuGraphLaunch, x1, sb);
	CK(cuGraphCreate, &g3, 0);
	CK(cuGraphAddKernelNode_v2, &node, g3, NULL, 0, &kp);
	CK(cuGraphInstantiateWithFlags, &x2, g3, 0);
	kp.func = matmul;
	CK(cuGraphExecKernelNodeSetParams_v2, x2, node, &kp);
	CK(cuGraphLaunch_ptsz, x2, NULL);
	CK(cuGraphExecDestroy, x2);
	CK(cuGraphExecDestroy, x1);
	CK(cuGraphDestroy, g3);
	CK(cuGraphDestroy, g2);
	CK(cuGraphDestroy, g1);

	/* Synchronous copies. */
	memset(pinned, 0x11, ALL_BYTES);
	CK(cuMemcpy, DEVPTR(pinned2), DEVPTR(pinned), ALL_BYTES);
	expect(memcmp(pinned, pinned2, ALL_BYTES) == 0, "host-to-host cuMemcpy did not copy");
	CK(cuMemcpy_ptds, d1, DEVPTR(pinned), ALL_BYTES);
	CK(cuMemcpyHtoD_v2, d1, pageable, ALL_BYTES);
	CK(cuMemcpyHtoD_v2_ptds, d1, pageable, ALL_BYTES);
	CK(cuMemcpyDtoH_v2, pageable, d1, ALL_BYTES);
	CK(cuMemcpyDtoH_v2_ptds, pageable, d1, ALL_BYTES);
	CK(cuMemcpyDtoD_v2, d2, d1, ALL_BYTES);
	CK(cuMemcpyDtoD_v2_ptds, d2, d1, ALL_BYTES);
	/* Async copies: pinned, registered (both non-blocking) and device. */
	CK(cuMemcpyAsync, d1, DEVPTR(pinned), ALL_BYTES, snb);
	CK(cuMemcpyAsync_ptsz, DEVPTR(registered), d1, ALL_BYTES, NULL);
	CK(cuMemcpyHtoDAsync_v2, d1, pinned, ALL_BYTES, snb);
	CK(cuMemcpyHtoDAsync_v2_ptsz, d1, registered, ALL_BYTES, NULL);
	CK(cuMemcpyDtoHAsync_v2, pinned, d1, ALL_BYTES, snb);
	CK(cuMemcpyDtoHAsync_v2_ptsz, registered, d1, ALL_BYTES, NULL);
	CK(cuMemcpyDtoDAsync_v2, d2, d1, ALL_BYTES, snb);
	CK(cuMemcpyDtoDAsync_v2_ptsz, d3, d1, ALL_BYTES, NULL);
	/* 2D copies. */
	CUDA_MEMCPY2D c = copy2d(CU_MEMORYTYPE_DEVICE, (void *)(uintptr_t)d2, CU_MEMORYTYPE_HOST, pageable);
	CK(cuMemcpy2D_v2, &c);
	c = copy2d(CU_MEMORYTYPE_HOST, pageable, CU_MEMORYTYPE_DEVICE, (void *)(uintptr_t)d2);
	CK(cuMemcpy2D_v2_ptds, &c);
	c = copy2d(CU_MEMORYTYPE_DEVICE, (void *)(uintptr_t)d2, CU_MEMORYTYPE_HOST, pinned);
	CK(cuMemcpy2DAsync_v2, &c, sb);
	c = copy2d(CU_MEMORYTYPE_UNIFIED, pinned, CU_MEMORYTYPE_UNIFIED, (void *)(uintptr_t)d2);
	CK(cuMemcpy2DAsync_v2_ptsz, &c, NULL);
	/* Sets. */
	CK(cuMemsetD8_v2, d1, ALL_VALUE, ALL_BYTES);
	CK(cuMemsetD8_v2_ptds, d1, ALL_VALUE, ALL_BYTES);
	CK(cuMemsetD8Async, d2, ALL_VALUE, ALL_BYTES, snb);
	CK(cuMemsetD8Async_ptsz, d3, ALL_VALUE, ALL_BYTES, NULL);
	CK(cuMemsetD32Async, d2, ALL_VALUE32, ALL_BYTES / 4, snb);
	CK(cuMemsetD32Async_ptsz, d3, ALL_VALUE32, ALL_BYTES / 4, NULL);

	/* Events and dependency edges. */
	CK(cuEventRecord, e1, sb);
	CK(cuStreamWaitEvent, snb, e1, 0);
	CK(cuEventRecord_ptsz, e1, NULL);
	CK(cuStreamWaitEvent_ptsz, NULL, e1, 0);
	CK(cuEventRecordWithFlags, e2, snb, CU_EVENT_RECORD_EXTERNAL);
	CK(cuEventRecordWithFlags_ptsz, e2, NULL, 0);
	CK(cuEventSynchronize, e2);

	/* Poll a 20 ms kernel to completion. */
	CK(cuLaunchKernel, matmul, 20000, 1, 1, 128, 2, 1, 0, sp, gemm_args, NULL);
	CK(cuEventRecord, e2, sp);
	expect(CALL(cuEventQuery, e2) == CUDA_ERROR_NOT_READY, "event ready during a 20 ms kernel");
	CUresult q;
	while ((q = CALL(cuEventQuery, e2)) == CUDA_ERROR_NOT_READY)
		sleep_ns(MS);
	check("cuEventQuery", q);
	CK(cuStreamQuery, sp);
	q = CALL(cuStreamQuery_ptsz, NULL);
	expect(q == CUDA_SUCCESS || q == CUDA_ERROR_NOT_READY, "cuStreamQuery_ptsz failed");
	CK(cuStreamSynchronize, sb);
	CK(cuStreamSynchronize_ptsz, NULL);

	/* Teardown. */
	CK(cuMemFreeAsync, d2, snb);
	CK(cuMemFreeAsync_ptsz, d3, NULL);
	CK(cuMemFreeAsync, dm, snb);
	CK(cuMemFreeAsync, dpitch, snb);
	CK(cuMemFreeAsync, dpool, snb);
	CK(cuMemFreeAsync_ptsz, dpool2, NULL);
	CK(cuMemRelease, phys);
	CK(cuCtxSynchronize);
	expect(__atomic_load_n(&hostfn_runs, __ATOMIC_RELAXED) == 2, "host functions did not run by cuCtxSynchronize");
	CK(cuMemHostUnregister, registered);
	CK(cuMemFreeHost, pinned2);
	CK(cuMemFreeHost, pinned);
	CK(cuMemFree_v2, d1);
	CK(cuEventDestroy_v2, e2);
	CK(cuEventDestroy_v2, e1);
	CK(cuStreamDestroy_v2, sp);
	CK(cuStreamDestroy_v2, snb);
	CK(cuStreamDestroy_v2, sb);
	free(registered);
	free(pageable);
}
#endif /* SIM_DRIVER */

#ifdef SIM_NCCL
/*
 * nccl: a data-parallel training loop on one rank of a job: a communicator
 * (of SIM_NCCL_NRANKS ranks, 1 unless set); a non-blocking compute stream
 * and a non-blocking comm stream (runtime API). Per iteration: forward and
 * backward kernels (gemm, reduce; grid {20,1,1}, block {256,1,1}) on the
 * compute stream, an event edge compute -> comm, ncclAllReduce of
 * NCCL_GRAD_COUNT floats (25 MiB, ncclSum) in place on the comm stream, an
 * event edge comm -> compute, an optimizer kernel (relu) on the compute
 * stream. Then once, between ncclGroupStart and ncclGroupEnd, on the comm
 * stream: ncclBroadcast (root 0), ncclReduce (ncclSum, root 0),
 * ncclAllGather, ncclReduceScatter (ncclSum), ncclSend and ncclRecv (peer
 * 0), each of NCCL_COUNT floats; then cudaStreamSynchronize(comm) and
 * cudaDeviceSynchronize. Checks that the all-reduces took their modeled time
 * and that grouped work waits for ncclGroupEnd.
 *
 * Environment: SIM_NCCL_RANK and SIM_NCCL_NRANKS, the rank and world size
 * (0 of 1). SIM_NCCL_ID, the job's communicator id: processes started with
 * the same id and SIM_NCCL_NRANKS > 1 play the ranks of one job and wait for
 * each other at every collective (sends and receives aside), as NCCL's
 * ranks do (nccl_sim.c); without it the process plays its rank alone and
 * waits for nobody. SIM_NCCL_RUN (optional): a token naming the run, which
 * keeps it apart from what a killed run of the same id left behind.
 * SIM_NCCL_DELAY_US: a straggler, sleeping that long before each of its
 * collective calls (every all-reduce, and the closing group).
 * SIM_NCCL_STOP_AFTER=N (N <= --iters): a hung rank (stuck in data loading,
 * say), which makes N all-reduces and then, instead of its next collective,
 * sleeps outside CUDA until killed; the ranks waiting for it block in their
 * next synchronizing call until killed.
 */
#define NCCL_GRAD_COUNT 6553600 /* 25 MiB of float */
#define NCCL_COUNT (256 * 1024) /* 1 MiB of float */
#define ALLREDUCE_NS (5000 + (int64_t)NCCL_GRAD_COUNT * 4 / 20)

/* Before a collective call, made: the collectives this rank made so far. */
static void before_collective(long made)
{
	const char *stop = getenv("SIM_NCCL_STOP_AFTER");
	if (stop && made >= atol(stop))
		for (;;)
			pause();
	if (getenv("SIM_NCCL_DELAY_US"))
		usleep((useconds_t)atoi(getenv("SIM_NCCL_DELAY_US")));
}

static void scenario_nccl(const struct options *o)
{
	ncclUniqueId id;
	ncclComm_t comm;
	CK(ncclGetUniqueId, &id);
	/* A rank and world size a test can recognize (SIM_NCCL_RANK of
	 * SIM_NCCL_NRANKS). */
	int nranks = getenv("SIM_NCCL_NRANKS") ? atoi(getenv("SIM_NCCL_NRANKS")) : 1;
	int rank = getenv("SIM_NCCL_RANK") ? atoi(getenv("SIM_NCCL_RANK")) : 0;
	CK(ncclCommInitRank, &comm, nranks, id, rank);

	cudaStream_t compute, comm_stream;
	cudaEvent_t grads_ready, grads_reduced;
	void *grad, *buf;
	CK(cudaStreamCreateWithFlags, &compute, cudaStreamNonBlocking);
	CK(cudaStreamCreateWithFlags, &comm_stream, cudaStreamNonBlocking);
	CK(cudaEventCreateWithFlags, &grads_ready, cudaEventDisableTiming);
	CK(cudaEventCreateWithFlags, &grads_reduced, cudaEventDisableTiming);
	CK(cudaMalloc, &grad, (size_t)NCCL_GRAD_COUNT * sizeof(float));
	CK(cudaMalloc, &buf, 2 * NCCL_COUNT * sizeof(float));
	float *buf2 = (float *)buf + NCCL_COUNT;

	dim3 grid = { 20, 1, 1 }, block = { 256, 1, 1 };
	int64_t t0 = now_ns();
	for (long it = 1; it <= o->iters; it++) {
		CK(cudaLaunchKernel, GEMM, grid, block, gemm_args, 0, compute);
		CK(cudaLaunchKernel, REDUCE, grid, block, reduce_args, 0, compute);
		CK(cudaEventRecord, grads_ready, compute);
		CK(cudaStreamWaitEvent, comm_stream, grads_ready, 0);
		before_collective(it - 1);
		CK(ncclAllReduce, grad, grad, NCCL_GRAD_COUNT, ncclFloat, ncclSum, comm, comm_stream);
		CK(cudaEventRecord, grads_reduced, comm_stream);
		CK(cudaStreamWaitEvent, compute, grads_reduced, 0);
		CK(cudaLaunchKernel, RELU, grid, block, relu_args, 0, compute);
	}
	CK(cudaStreamSynchronize, comm_stream);
	expect(now_ns() - t0 >= o->iters * ALLREDUCE_NS, "the all-reduces ended before their modeled time");

	before_collective(o->iters);
	CK(ncclGroupStart);
	CK(ncclBroadcast, buf, buf, NCCL_COUNT, ncclFloat, 0, comm, comm_stream);
	CK(ncclReduce, buf, buf, NCCL_COUNT, ncclFloat, ncclSum, 0, comm, comm_stream);
	CK(ncclAllGather, buf, buf2, NCCL_COUNT, ncclFloat, comm, comm_stream);
	CK(ncclReduceScatter, buf2, buf, NCCL_COUNT, ncclFloat, ncclSum, comm, comm_stream);
	CK(ncclSend, buf, NCCL_COUNT, ncclFloat, 0, comm, comm_stream);
	CK(ncclRecv, buf2, NCCL_COUNT, ncclFloat, 0, comm, comm_stream);
	expect(CALL(cudaStreamQuery, comm_stream) == cudaSuccess, "grouped NCCL work was enqueued before ncclGroupEnd");
	CK(ncclGroupEnd);
	CK(cudaStreamSynchronize, comm_stream);
	CK(cudaDeviceSynchronize);

	CK(cudaFree, buf);
	CK(cudaFree, grad);
	CK(cudaEventDestroy, grads_reduced);
	CK(cudaEventDestroy, grads_ready);
	CK(cudaStreamDestroy, comm_stream);
	CK(cudaStreamDestroy, compute);
	CK(ncclCommDestroy, comm);
}
#endif /* SIM_NCCL */

/* stacktop: syncs made a few hundred bytes below the top of a stack whose
 * next page is unmapped (a coroutine's stack, or a thread's near its top):
 * a fixed-size copy of the user stack faults there. */
static long stacktop_iters;
static ucontext_t stacktop_main, stacktop_ctx;

__attribute__((noinline)) static void stacktop_sync(void)
{
	CK(cudaStreamSynchronize, NULL);
	CK(cudaDeviceSynchronize);
}

static void stacktop_fn(void)
{
	for (long i = 0; i < stacktop_iters; i++)
		stacktop_sync();
}

static void scenario_stacktop(const struct options *o)
{
	/* 64 KiB of stack, then a page that is not mapped. */
	size_t size = 64 * KiB, page = (size_t)sysconf(_SC_PAGESIZE);
	char *m = mmap(NULL, size + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED || munmap(m + size, page))
		die("mmap failed");
	stacktop_iters = o->iters;
	getcontext(&stacktop_ctx);
	stacktop_ctx.uc_stack.ss_sp = m;
	stacktop_ctx.uc_stack.ss_size = size;
	stacktop_ctx.uc_link = &stacktop_main;
	makecontext(&stacktop_ctx, stacktop_fn, 0);
	if (swapcontext(&stacktop_main, &stacktop_ctx))
		die("swapcontext failed");
	munmap(m, size);
}

/*
 * The lint scenarios: each provokes one of cudatap's lints (export/lint) and
 * nothing else, with its calls made from functions of their own so that a
 * tracer names each site; lint-clean provokes none. Buffers are allocated
 * and pinned up front; every scenario's last call is cudaDeviceSynchronize
 * (their number is given at each scenario).
 */
static struct {
	void *dev, *dev2, *pinned;
	char *pageable;
} lint_mem;

static void lint_setup(void)
{
	CK(cudaMalloc, &lint_mem.dev, 4 * MiB);
	CK(cudaMalloc, &lint_mem.dev2, MiB);
	CK(cudaHostAlloc, &lint_mem.pinned, 2 * MiB, cudaHostAllocDefault);
	lint_mem.pageable = xmalloc(MiB);
	memset(lint_mem.pageable, 1, MiB);
}

/* The last call of every lint scenario is a cudaDeviceSynchronize: a
 * tracer's test waits for it to know it has seen every call. */
static void lint_teardown(void)
{
	CK(cudaFreeHost, lint_mem.pinned);
	CK(cudaFree, lint_mem.dev2);
	CK(cudaFree, lint_mem.dev);
	free(lint_mem.pageable);
	CK(cudaDeviceSynchronize);
}

__attribute__((noinline, used)) void lint_upload(void)
{
	CK(cudaMemcpyAsync, lint_mem.dev, lint_mem.pinned, 64 * KiB, cudaMemcpyHostToDevice, NULL);
}

__attribute__((noinline, used)) void lint_upload_legacy(void)
{
	CK(cudaMemcpyAsync, lint_mem.dev, lint_mem.pinned, 4 * KiB, cudaMemcpyHostToDevice, cudaStreamLegacy);
}

__attribute__((noinline, used)) void lint_read_back(void)
{
	/* What .item() does: a copy, then at once a sync of its stream. */
	CK(cudaMemcpyAsync, (char *)lint_mem.pinned + MiB, lint_mem.dev, 4, cudaMemcpyDeviceToHost, NULL);
	CK(cudaStreamSynchronize, NULL);
}

/* lint-legacy-nonblocking: per iteration a non_blocking upload on the legacy
 * default stream (64 KiB H2D cudaMemcpyAsync from pinned memory on stream
 * NULL, in lint_upload), a gemm and a relu launch on it, and a read-back as
 * .item() makes it (lint_read_back: a 4-byte D2H copy followed at once by
 * cudaStreamSynchronize(NULL): a blocking copy, not a non_blocking one);
 * then one 4 KiB upload on cudaStreamLegacy (lint_upload_legacy) and a
 * launch. N+1 non_blocking copies from 2 sites; 1 cudaDeviceSynchronize. */
static void scenario_lint_legacy(const struct options *o)
{
	dim3 grid = { 4, 1, 1 }, block = { 128, 1, 1 };
	lint_setup();
	for (long it = 0; it < o->iters; it++) {
		lint_upload();
		CK(cudaLaunchKernel, GEMM, grid, block, gemm_args, 0, NULL);
		CK(cudaLaunchKernel, RELU, grid, block, relu_args, 0, NULL);
		lint_read_back();
	}
	lint_upload_legacy();
	CK(cudaLaunchKernel, RELU, grid, block, relu_args, 0, NULL);
	lint_teardown();
}

__attribute__((noinline, used)) void lint_produce(cudaStream_t s)
{
	CK(cudaMemcpyAsync, lint_mem.dev, lint_mem.pinned, 256 * KiB, cudaMemcpyHostToDevice, s);
}

__attribute__((noinline, used)) void lint_consume(cudaStream_t s)
{
	CK(cudaMemcpyAsync, lint_mem.dev2, lint_mem.dev, 4 * KiB, cudaMemcpyDeviceToDevice, s);
}

/* lint-cross-stream: a producer and a consumer stream, both non-blocking.
 * Per iteration the producer uploads 256 KiB into a device buffer
 * (lint_produce: H2D from pinned memory) and the consumer copies 4 KiB of
 * it into another buffer (lint_consume: D2D) with nothing between: a
 * possible race; cudaDeviceSynchronize. Then the same done right: the
 * producer uploads again, an event recorded on it is waited for by the
 * consumer, which copies; a 64 KiB memset on the consumer of a part of the
 * buffer nobody wrote; cudaDeviceSynchronize. N races, one pair of sites;
 * 2N+1 cudaDeviceSynchronize. */
static void scenario_lint_cross_stream(const struct options *o)
{
	cudaStream_t producer, consumer;
	cudaEvent_t ready;
	lint_setup();
	CK(cudaStreamCreateWithFlags, &producer, cudaStreamNonBlocking);
	CK(cudaStreamCreateWithFlags, &consumer, cudaStreamNonBlocking);
	CK(cudaEventCreateWithFlags, &ready, cudaEventDisableTiming);
	for (long it = 0; it < o->iters; it++) {
		lint_produce(producer);
		lint_consume(consumer);
		CK(cudaDeviceSynchronize);
		lint_produce(producer);
		CK(cudaEventRecord, ready, producer);
		CK(cudaStreamWaitEvent, consumer, ready, 0);
		lint_consume(consumer);
		CK(cudaMemsetAsync, (char *)lint_mem.dev + MiB, 0, 64 * KiB, consumer);
		CK(cudaDeviceSynchronize);
	}
	CK(cudaEventDestroy, ready);
	CK(cudaStreamDestroy, consumer);
	CK(cudaStreamDestroy, producer);
	lint_teardown();
}

#define LINT_STREAMS 10

/* lint-many-streams: LINT_STREAMS non-blocking streams. Per iteration a
 * 2 ms gemm (grid 2000) on each, enqueued back to back, then
 * cudaDeviceSynchronize: all ten are busy at once. Then per iteration the
 * same on four of them only. 2N+1 cudaDeviceSynchronize. */
static void scenario_lint_many_streams(const struct options *o)
{
	cudaStream_t s[LINT_STREAMS];
	dim3 grid = { 2000, 1, 1 }, block = { 256, 1, 1 };
	for (int i = 0; i < LINT_STREAMS; i++)
		CK(cudaStreamCreateWithFlags, &s[i], cudaStreamNonBlocking);
	for (long it = 0; it < o->iters; it++) {
		for (int i = 0; i < LINT_STREAMS; i++)
			CK(cudaLaunchKernel, GEMM, grid, block, gemm_args, 0, s[i]);
		CK(cudaDeviceSynchronize);
	}
	for (long it = 0; it < o->iters; it++) {
		for (int i = 0; i < 4; i++)
			CK(cudaLaunchKernel, GEMM, grid, block, gemm_args, 0, s[i]);
		CK(cudaDeviceSynchronize);
	}
	for (int i = 0; i < LINT_STREAMS; i++)
		CK(cudaStreamDestroy, s[i]);
	CK(cudaDeviceSynchronize);
}

__attribute__((noinline, used)) void lint_load_pageable(cudaStream_t s)
{
	CK(cudaMemcpyAsync, lint_mem.dev, lint_mem.pageable, 64 * KiB, cudaMemcpyHostToDevice, s);
}

__attribute__((noinline, used)) void lint_load_pinned(cudaStream_t s)
{
	CK(cudaMemcpyAsync, lint_mem.dev2, lint_mem.pinned, 64 * KiB, cudaMemcpyHostToDevice, s);
}

__attribute__((noinline, used)) void lint_load_once(cudaStream_t s)
{
	CK(cudaMemcpyAsync, lint_mem.dev2, lint_mem.pageable, 4 * KiB, cudaMemcpyHostToDevice, s);
}

/* lint-pageable-loop: a non-blocking stream; per iteration a 64 KiB H2D
 * copy from the same pageable buffer at one site (lint_load_pageable), one
 * from a pinned buffer (lint_load_pinned) and two launches; then a single
 * 4 KiB pageable copy at another site (lint_load_once). N pageable copies
 * at one site; 1 cudaDeviceSynchronize. */
static void scenario_lint_pageable_loop(const struct options *o)
{
	cudaStream_t s;
	dim3 grid = { 4, 1, 1 }, block = { 128, 1, 1 };
	lint_setup();
	CK(cudaStreamCreateWithFlags, &s, cudaStreamNonBlocking);
	for (long it = 0; it < o->iters; it++) {
		lint_load_pageable(s);
		lint_load_pinned(s);
		CK(cudaLaunchKernel, GEMM, grid, block, gemm_args, 0, s);
		CK(cudaLaunchKernel, RELU, grid, block, relu_args, 0, s);
	}
	lint_load_once(s);
	CK(cudaStreamSynchronize, s);
	CK(cudaStreamDestroy, s);
	lint_teardown();
}

__attribute__((noinline, used)) void lint_step_sync(cudaStream_t s)
{
	CK(cudaStreamSynchronize, s);
}

/* lint-sync-every-launch: a non-blocking stream; N launches, each followed
 * by cudaStreamSynchronize of the stream (lint_step_sync); then N pairs of
 * launches with one sync per pair (cudaDeviceSynchronize). One run of N
 * launches; N+1 cudaDeviceSynchronize. */
static void scenario_lint_sync_every_launch(const struct options *o)
{
	cudaStream_t s;
	dim3 grid = { 4, 1, 1 }, block = { 128, 1, 1 };
	CK(cudaStreamCreateWithFlags, &s, cudaStreamNonBlocking);
	for (long it = 0; it < o->iters; it++) {
		CK(cudaLaunchKernel, GEMM, grid, block, gemm_args, 0, s);
		lint_step_sync(s);
	}
	for (long it = 0; it < o->iters; it++) {
		CK(cudaLaunchKernel, GEMM, grid, block, gemm_args, 0, s);
		CK(cudaLaunchKernel, RELU, grid, block, relu_args, 0, s);
		CK(cudaDeviceSynchronize);
	}
	CK(cudaStreamDestroy, s);
	CK(cudaDeviceSynchronize);
}

/*
 * Kernels launched as nvcc's generated host stubs launch them: the
 * kernel's parameters are the stub's own, and kernelParams points at them
 * on its stack (inlined here, so that each launch's site is the function
 * that launches it). A tracer that copies the parameter values finds the
 * device pointers each kernel was given.
 */
static inline __attribute__((always_inline)) void launch_gemm(const float *a, const float *b, float *c, int n, cudaStream_t s)
{
	void *args[] = { &a, &b, &c, &n };
	dim3 grid = { 4, 1, 1 }, block = { 128, 1, 1 };
	CK(cudaLaunchKernel, GEMM, grid, block, args, 0, s);
}

static inline __attribute__((always_inline)) void launch_relu(float *x, int n, cudaStream_t s)
{
	void *args[] = { &x, &n };
	dim3 grid = { 4, 1, 1 }, block = { 128, 1, 1 };
	CK(cudaLaunchKernel, RELU, grid, block, args, 0, s);
}

/* y = x @ x: a gemm given x (lint_mem.dev) twice and y (lint_mem.dev2). */
__attribute__((noinline, used)) void race_produce(cudaStream_t s)
{
	launch_gemm(lint_mem.dev, lint_mem.dev, lint_mem.dev2, 256, s);
}

/* relu(y) */
__attribute__((noinline, used)) void race_consume(cudaStream_t s)
{
	launch_relu(lint_mem.dev2, 256, s);
}

/* relu(x) */
__attribute__((noinline, used)) void race_consume_input(cudaStream_t s)
{
	launch_relu(lint_mem.dev, 256, s);
}

/* y.cpu(): 4 KiB of y read back into pinned memory. */
__attribute__((noinline, used)) void race_read_back(cudaStream_t s)
{
	CK(cudaMemcpyAsync, (char *)lint_mem.pinned + MiB, lint_mem.dev2, 4 * KiB, cudaMemcpyDeviceToHost, s);
}

/* lint-kernel-race: a producer and a consumer stream, both non-blocking;
 * kernels given device buffers through their parameters. Per iteration,
 * each case followed by cudaDeviceSynchronize: kernel → kernel, the
 * producer computes y = x @ x (race_produce) and the consumer a relu of y
 * (race_consume) with nothing between; the same ordered by an event the
 * consumer waits for; copy → kernel, the producer uploads 256 KiB into x
 * (lint_produce) and the consumer runs a relu of x (race_consume_input);
 * kernel → copy, the producer computes y and the consumer reads 4 KiB of it
 * back (race_read_back). 3N races at 3 pairs of sites (none without the
 * kernels' parameter values); 4N+1 cudaDeviceSynchronize. */
static void scenario_lint_kernel_race(const struct options *o)
{
	cudaStream_t producer, consumer;
	cudaEvent_t ready;
	lint_setup();
	CK(cudaStreamCreateWithFlags, &producer, cudaStreamNonBlocking);
	CK(cudaStreamCreateWithFlags, &consumer, cudaStreamNonBlocking);
	CK(cudaEventCreateWithFlags, &ready, cudaEventDisableTiming);
	for (long it = 0; it < o->iters; it++) {
		race_produce(producer);
		race_consume(consumer);
		CK(cudaDeviceSynchronize);
		race_produce(producer);
		CK(cudaEventRecord, ready, producer);
		CK(cudaStreamWaitEvent, consumer, ready, 0);
		race_consume(consumer);
		CK(cudaDeviceSynchronize);
		lint_produce(producer);
		race_consume_input(consumer);
		CK(cudaDeviceSynchronize);
		race_produce(producer);
		race_read_back(consumer);
		CK(cudaDeviceSynchronize);
	}
	CK(cudaEventDestroy, ready);
	CK(cudaStreamDestroy, consumer);
	CK(cudaStreamDestroy, producer);
	lint_teardown();
}

#ifdef SIM_DRIVER
/*
 * torch-race: testdata/gpu/race.py as PyTorch 2.11 on CUDA 13 makes its
 * calls, for the race lint with kernel arguments. The elementwise kernels
 * are PyTorch's vectorized_elementwise_kernel<4, F, std::array<char*, 2>>
 * (int N, F f, std::array<char*, 2> data), launched as nvcc 13 compiles
 * `kernel<<<grid, block, 0, stream>>>(N, f, data)`: the configuration
 * pushed, the kernel's host function called with its parameters by value
 * (data, 16 bytes, and f, 8, in registers), which hands references to its
 * copies to the generated stub; the stub builds void *args[] = {&N, &f,
 * &data}, pops the configuration and calls __cudaLaunchKernel with the
 * kernel's handle (cudart then calls cuLaunchKernel). F is
 * CUDAFunctorOnSelf_add<float> {other, alpha} for `t + 1`, AUnaryFunctor
 * <float, float, float, MulFunctor<float>> {an empty functor, the scalar}
 * for `t * 3`. The matmul is cuBLASLt's: its kernel takes one Params struct
 * of TORCH_GEMM_PARAMS bytes by value, the output pointer TORCH_GEMM_D
 * bytes into it, launched by cuBLASLt's static runtime straight into the
 * driver (cuLaunchKernelEx, nothing in libcudart.so). Memory comes as
 * PyTorch's caching allocator hands it out: x and d in a 20 MiB segment of
 * the default stream's pool made at setup, everything made on the side
 * stream in a segment of its own pool, cudaMalloc'd at its first use.
 *
 * The side stream s is non-blocking (torch.cuda.Stream()), the default
 * stream the legacy one. Per iteration, each case on its own line of
 * torch_race_step, s first waiting for the default stream (s.wait_stream:
 * an event recorded there, waited for on s), then cudaDeviceSynchronize:
 *   matmul  y = x @ x on s (cuBLASLt), z = y + 1 on the default stream
 *   copy    d.copy_(pinned, non_blocking=True) on s, u = d * 3
 *   cpu     q = x + 2 on s, q.cpu() on the default stream (a pageable D2H
 *           copy of 4 MiB, then cudaStreamSynchronize)
 *   mul     w = x * 2 on s, v = w + 1
 * 4N races, 4N+1 cudaDeviceSynchronize.
 */
#define TORCH_N (1 << 20) /* floats in each 4 MiB tensor */
#define TORCH_SEGMENT (20 * MiB)
#define TORCH_GEMM_PARAMS 1024
#define TORCH_GEMM_D 600

struct torch_ptrs {
	char *p[2];
}; /* std::array<char*, 2> */
struct torch_add {
	float other, alpha;
}; /* CUDAFunctorOnSelf_add<float> */
struct torch_mul {
	unsigned char op;
	float b;
}; /* AUnaryFunctor<float, float, float, MulFunctor<float>> */

void torch_add_kernel(int n, struct torch_add f, struct torch_ptrs data);
void torch_mul_kernel(int n, struct torch_mul f, struct torch_ptrs data);

/* The caching allocator's segments: the default stream's, the side stream's. */
static struct {
	char *main, *side;
	void *pinned;
	char *host;
} torch_mem;

/* cudart's __cudaPushCallConfiguration and __cudaPopCallConfiguration:
 * <<<>>> pushes, the stub pops. */
static __thread struct {
	dim3 grid, block;
	size_t shmem;
	cudaStream_t stream;
} torch_pushed;

static __attribute__((noinline)) unsigned torch_push(dim3 grid, dim3 block, size_t shmem, cudaStream_t stream)
{
	torch_pushed.grid = grid;
	torch_pushed.block = block;
	torch_pushed.shmem = shmem;
	torch_pushed.stream = stream;
	return 0;
}

static __attribute__((noinline)) cudaError_t torch_pop(dim3 *grid, dim3 *block, size_t *shmem, cudaStream_t *stream)
{
	*grid = torch_pushed.grid;
	*block = torch_pushed.block;
	*shmem = torch_pushed.shmem;
	*stream = torch_pushed.stream;
	return cudaSuccess;
}

/* The generated stub (nvcc's __device_stub__, its launch inlined): it
 * takes references to the kernel's parameters, wherever the caller keeps
 * them, and passes their addresses. kernelParams has no end: past the
 * three entries lie the stub's other locals, as on the H200 (race.py's
 * launches, PyTorch 2.11): a stack address, a heap one, a code one, then
 * a dim3's x and y (4 and 1: no address). */
#define TORCH_STUB(functor)                                                                          \
	static __attribute__((noinline)) void torch_##functor##_stub(const void *kernel, int *n, struct torch_##functor *f, \
								     struct torch_ptrs *data)                 \
	{                                                                                            \
		struct {                                                                             \
			void *args[3];                                                               \
			void *after[5];                                                              \
		} a;                                                                                 \
		dim3 grid, block;                                                                    \
		size_t shmem;                                                                        \
		cudaStream_t stream;                                                                 \
		int idx = 0;                                                                         \
		a.args[idx++] = n;                                                                   \
		a.args[idx++] = f;                                                                   \
		a.args[idx++] = data;                                                                \
		a.after[0] = &grid;                                                                  \
		a.after[1] = torch_mem.host;                                                         \
		a.after[2] = (void *)torch_##functor##_kernel;                                       \
		a.after[3] = (void *)0x100000004ULL;                                                 \
		a.after[4] = NULL;                                                                   \
		static cudaKernel_t handle;                                                          \
		if (!handle)                                                                         \
			CK(__cudaGetKernel, &handle, kernel);                                        \
		if (torch_pop(&grid, &block, &shmem, &stream) != cudaSuccess)                        \
			return;                                                                      \
		CK(__cudaLaunchKernel, handle, grid, block, a.args, shmem, stream);                  \
	}

TORCH_STUB(add)
TORCH_STUB(mul)

/* The kernels' host functions, parameters by value. gcc inlines PyTorch's
 * into its launcher, whose frame holds each kernel's parameter copies
 * among the other branches' locals, as the compiler lays them out: for the
 * add kernel N below the non-contiguous branch's OffsetCalculator (604
 * bytes), f and data above it; for the mul kernel as the H200 showed
 * (race.py's w = x * 2): f 40 bytes above N, data 1,632 bytes above f. */
__attribute__((noinline, used)) void torch_add_kernel(int n, struct torch_add f, struct torch_ptrs data)
{
	struct {
		int n;
		unsigned char offset_calc[604];
		struct torch_add f;
		struct torch_ptrs data;
	} frame;
	memset(&frame, 0, sizeof frame);
	frame.n = n;
	frame.f = f;
	frame.data = data;
	torch_add_stub((const void *)torch_add_kernel, &frame.n, &frame.f, &frame.data);
}

__attribute__((noinline, used)) void torch_mul_kernel(int n, struct torch_mul f, struct torch_ptrs data)
{
	struct {
		int n;
		unsigned char below[36];
		struct torch_mul f;
		unsigned char between[1624];
		struct torch_ptrs data;
	} frame;
	memset(&frame, 0, sizeof frame);
	frame.n = n;
	frame.f = f;
	frame.data = data;
	torch_mul_stub((const void *)torch_mul_kernel, &frame.n, &frame.f, &frame.data);
}

static cudaStream_t torch_stream; /* the current stream: NULL, the legacy default */

/* launch_vectorized_kernel: out = a + other, or a * b. */
static __attribute__((noinline)) void torch_add(char *out, char *a, float other)
{
	dim3 grid = { TORCH_N / 1024, 1, 1 }, block = { 128, 1, 1 };
	struct torch_add f = { other, 1 };
	struct torch_ptrs data = { { out, a } };
	if (!torch_push(grid, block, 0, torch_stream))
		torch_add_kernel(TORCH_N, f, data);
}

static __attribute__((noinline)) void torch_mul(char *out, char *a, float b)
{
	dim3 grid = { TORCH_N / 1024, 1, 1 }, block = { 128, 1, 1 };
	struct torch_mul f = { 0, b };
	struct torch_ptrs data = { { out, a } };
	if (!torch_push(grid, block, 0, torch_stream))
		torch_mul_kernel(TORCH_N, f, data);
}

/* cuBLASLt's gemm: D = A @ B, its Params by value, from its static runtime. */
static CUfunction torch_gemm_kernel;

static __attribute__((noinline)) void torch_gemm(char *d, char *a, char *b)
{
	unsigned char params[TORCH_GEMM_PARAMS];
	memset(params, 0, sizeof params);
	memcpy(params + 16, &a, sizeof a);
	memcpy(params + 24, &b, sizeof b);
	memcpy(params + TORCH_GEMM_D, &d, sizeof d);
	void *args[] = { params };
	CUlaunchConfig cfg = { 128, 1, 1, 256, 1, 1, 0, (CUstream)torch_stream, NULL, 0 };
	CK(cuLaunchKernelEx, &cfg, torch_gemm_kernel, args, NULL);
}

/* A 4 MiB block of the current stream's pool, at slot i of its segment. */
static char *torch_block(int i)
{
	if (torch_stream && !torch_mem.side)
		CK(cudaMalloc, (void **)&torch_mem.side, TORCH_SEGMENT);
	return (torch_stream ? torch_mem.side : torch_mem.main) + i * 4 * MiB;
}

/* s.wait_stream(torch.cuda.current_stream()) */
static void torch_wait_stream(cudaStream_t s)
{
	cudaEvent_t e;
	CK(cudaEventCreateWithFlags, &e, cudaEventDisableTiming);
	CK(cudaEventRecord, e, NULL);
	CK(cudaStreamWaitEvent, s, e, 0);
	CK(cudaEventDestroy, e);
}

__attribute__((noinline, used)) void torch_race_step(cudaStream_t s)
{
	char *x = torch_mem.main, *d = torch_mem.main + 4 * MiB;
	torch_wait_stream(s);

	torch_stream = s;
	char *y = torch_block(0);
	torch_gemm(y, x, x); /* matmul-write */
	torch_stream = NULL;
	torch_add(torch_block(2), y, 1); /* matmul-read */
	CK(cudaDeviceSynchronize);

	torch_stream = s;
	CK(cudaMemcpyAsync, d, torch_mem.pinned, 4 * MiB, cudaMemcpyHostToDevice, s); /* copy-write */
	torch_stream = NULL;
	torch_mul(torch_block(2), d, 3); /* copy-read */
	CK(cudaDeviceSynchronize);

	torch_stream = s;
	char *q = torch_block(1);
	torch_add(q, x, 2); /* cpu-write */
	torch_stream = NULL;
	CK(cudaMemcpyAsync, torch_mem.host, q, 4 * MiB, cudaMemcpyDeviceToHost, NULL); /* cpu-read */
	CK(cudaStreamSynchronize, NULL);
	CK(cudaDeviceSynchronize);

	torch_stream = s;
	char *w = torch_block(0);
	torch_mul(w, x, 2); /* mul-write */
	torch_stream = NULL;
	torch_add(torch_block(2), w, 1); /* mul-read */
	CK(cudaDeviceSynchronize);
}

static void scenario_torch_race(const struct options *o)
{
	CALL(__cudaRegisterFunction, NULL, (const char *)torch_add_kernel, "torch_add_kernel", "torch_add_kernel", -1,
	     NULL, NULL, NULL, NULL, NULL);
	CALL(__cudaRegisterFunction, NULL, (const char *)torch_mul_kernel, "torch_mul_kernel", "torch_mul_kernel", -1,
	     NULL, NULL, NULL, NULL, NULL);
	CUmodule mod;
	CK(cuModuleLoadData, &mod, fake_image);
	CK(cuModuleGetFunction, &torch_gemm_kernel, mod, TORCH_GEMM);
	cudaStream_t s;
	CK(cudaStreamCreateWithPriority, &s, cudaStreamNonBlocking, 0);
	CK(cudaMalloc, (void **)&torch_mem.main, TORCH_SEGMENT);
	CK(cudaHostAlloc, &torch_mem.pinned, 4 * MiB, cudaHostAllocDefault);
	torch_mem.host = xmalloc(4 * MiB);
	for (long it = 0; it < o->iters; it++)
		torch_race_step(s);
	CK(cudaFreeHost, torch_mem.pinned);
	CK(cudaFree, torch_mem.side);
	CK(cudaFree, torch_mem.main);
	free(torch_mem.host);
	CK(cudaStreamDestroy, s);
	CK(cudaDeviceSynchronize);
}
#endif /* SIM_DRIVER */

/* lint-clean: what the lints ask for. A copy stream and a compute stream,
 * both non-blocking, pinned host buffers and two device buffers used in
 * turn. Per iteration: the copy stream waits until compute is done with
 * the buffer (an event recorded after its last use), uploads 1 MiB into it
 * and records an event the compute stream waits for; the compute stream
 * runs four launches, copies 4 KiB out of the buffer (D2D), records the
 * buffer's done event, reads 4 KiB back into pinned memory; one
 * cudaStreamSynchronize of the compute stream. 1 cudaDeviceSynchronize. */
static void scenario_lint_clean(const struct options *o)
{
	cudaStream_t copy, compute;
	cudaEvent_t ready, done[2];
	dim3 grid = { 4, 1, 1 }, block = { 128, 1, 1 };
	lint_setup();
	CK(cudaStreamCreateWithFlags, &copy, cudaStreamNonBlocking);
	CK(cudaStreamCreateWithFlags, &compute, cudaStreamNonBlocking);
	CK(cudaEventCreateWithFlags, &ready, cudaEventDisableTiming);
	CK(cudaEventCreateWithFlags, &done[0], cudaEventDisableTiming);
	CK(cudaEventCreateWithFlags, &done[1], cudaEventDisableTiming);
	for (long it = 0; it < o->iters; it++) {
		char *buf = (char *)lint_mem.dev + (it % 2) * 2 * MiB;
		CK(cudaStreamWaitEvent, copy, done[it % 2], 0);
		CK(cudaMemcpyAsync, buf, lint_mem.pinned, MiB, cudaMemcpyHostToDevice, copy);
		CK(cudaEventRecord, ready, copy);
		CK(cudaStreamWaitEvent, compute, ready, 0);
		for (int k = 0; k < 4; k++)
			CK(cudaLaunchKernel, GEMM, grid, block, gemm_args, 0, compute);
		CK(cudaMemcpyAsync, lint_mem.dev2, buf, 4 * KiB, cudaMemcpyDeviceToDevice, compute);
		CK(cudaEventRecord, done[it % 2], compute);
		CK(cudaMemcpyAsync, (char *)lint_mem.pinned + MiB, lint_mem.dev2, 4 * KiB, cudaMemcpyDeviceToHost, compute);
		CK(cudaStreamSynchronize, compute);
	}
	CK(cudaEventDestroy, done[1]);
	CK(cudaEventDestroy, done[0]);
	CK(cudaEventDestroy, ready);
	CK(cudaStreamDestroy, compute);
	CK(cudaStreamDestroy, copy);
	lint_teardown();
}

/*
 * profiler: a program that profiles itself for a while, as torch.profiler
 * does, with the process's CUPTI (the simulated one, found like the
 * runtime, next to the program). Three phases of --iters iterations, each
 * a gemm launch, a pinned 1 MiB H2D copy and a 64 KiB memset on one
 * stream, then a sync: before the profiler, under it, after it. The
 * profiler subscribes (cuptiSubscribe: a tracer holding CUPTI must let it
 * go first), takes every kernel, copy and memset record in its own buffers,
 * and at its end unsubscribes and finalizes CUPTI; it reports what it got
 * ("profiler" in the report). When CUPTI was held by another client before
 * (a tracer's collector), the third phase waits until that client holds it
 * again (taken back), so that all of the phase is measured.
 */
static struct {
	int ran, subscribe_status, held_before, resumed;
	long ops, records;
} profiler;

static void profiler_buffer_requested(uint8_t **buffer, size_t *size, size_t *max)
{
	*buffer = xmalloc(64 * KiB);
	*size = 64 * KiB;
	*max = 0;
}

static int (*profiler_next_record)(uint8_t *, size_t, void **);

static void profiler_buffer_completed(void *ctx, uint32_t stream, uint8_t *buffer, size_t size, size_t valid)
{
	(void)ctx, (void)stream, (void)size;
	void *r = NULL;
	while (profiler_next_record(buffer, valid, &r) == 0)
		profiler.records++;
	free(buffer);
}

static void profiler_callback(void *ud, int domain, unsigned cbid, const void *data)
{
	(void)ud, (void)domain, (void)cbid, (void)data;
}

static void profiler_phase(const struct options *o, cudaStream_t s, void *dev, void *pinned)
{
	dim3 grid = { 8, 1, 1 }, block = { 128, 1, 1 };
	for (long it = 0; it < o->iters; it++) {
		CK(cudaLaunchKernel, GEMM, grid, block, gemm_args, 0, s);
		CK(cudaMemcpyAsync, dev, pinned, MiB, cudaMemcpyHostToDevice, s);
		CK(cudaMemsetAsync, dev, 0, 64 * KiB, s);
	}
	CK(cudaStreamSynchronize, s);
}

static void scenario_profiler(const struct options *o)
{
	void *cupti = dlopen("libcupti.so.13", RTLD_NOW | RTLD_LOCAL);
	if (!cupti)
		die("profiler: cannot load libcupti.so.13 beside the program");
	int (*subscribed)(void) = (int (*)(void))dlsym(cupti, "sim_cupti_subscribed");
	int (*subscribe)(void **, void *, void *) = (int (*)(void **, void *, void *))dlsym(cupti, "cuptiSubscribe");
	int (*unsubscribe)(void *) = (int (*)(void *))dlsym(cupti, "cuptiUnsubscribe");
	int (*finalize)(void) = (int (*)(void))dlsym(cupti, "cuptiFinalize");
	int (*register_callbacks)(void *, void *) = (int (*)(void *, void *))dlsym(cupti, "cuptiActivityRegisterCallbacks");
	int (*enable)(int) = (int (*)(int))dlsym(cupti, "cuptiActivityEnable");
	int (*disable)(int) = (int (*)(int))dlsym(cupti, "cuptiActivityDisable");
	int (*flush)(uint32_t) = (int (*)(uint32_t))dlsym(cupti, "cuptiActivityFlushAll");
	profiler_next_record = (int (*)(uint8_t *, size_t, void **))dlsym(cupti, "cuptiActivityGetNextRecord");
	if (!subscribed || !subscribe || !unsubscribe || !finalize || !register_callbacks || !enable || !disable || !flush ||
	    !profiler_next_record)
		die("profiler: libcupti.so.13 lacks an entry point");
	static const int kinds[] = { 10 /* CONCURRENT_KERNEL */, 1 /* MEMCPY */, 2 /* MEMSET */ };

	cudaStream_t s;
	void *dev, *pinned;
	CK(cudaStreamCreateWithFlags, &s, cudaStreamNonBlocking);
	CK(cudaMalloc, &dev, MiB);
	CK(cudaHostAlloc, &pinned, MiB, cudaHostAllocDefault);

	profiler_phase(o, s, dev, pinned);

	profiler.ran = 1;
	profiler.held_before = subscribed();
	void *sub = NULL;
	profiler.subscribe_status = subscribe(&sub, (void *)profiler_callback, NULL);
	if (profiler.subscribe_status == 0) {
		check("cuptiActivityRegisterCallbacks",
		      register_callbacks((void *)profiler_buffer_requested, (void *)profiler_buffer_completed));
		for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
			check("cuptiActivityEnable", enable(kinds[i]));
	}
	profiler_phase(o, s, dev, pinned);
	profiler.ops = 3 * o->iters;
	if (profiler.subscribe_status == 0) {
		check("cuptiActivityFlushAll", flush(1));
		for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
			disable(kinds[i]);
		check("cuptiUnsubscribe", unsubscribe(sub));
		check("cuptiFinalize", finalize());
	}
	if (profiler.held_before) {
		/* Until the client before is back, or 10 s: the report says which. */
		for (int i = 0; i < 10000 && !(profiler.resumed = subscribed()); i++)
			sleep_ns(MS);
	}

	profiler_phase(o, s, dev, pinned);
	CK(cudaFreeHost, pinned);
	CK(cudaFree, dev);
	CK(cudaStreamDestroy, s);
}

/*
 * oom, oom-exit: out of memory, as a training job meets it, on a device of
 * SIM_DEVICE_MEMORY bytes (1 GiB unless set). Memory is held at four
 * places, each a function of its own: oom_hold_params 400 MiB (cudaMalloc),
 * oom_hold_grads 300 MiB (cudaMallocPitch, 1024 rows of 300 KiB),
 * oom_hold_acts 30 × 8 MiB (cudaMallocManaged), oom_hold_segment 64 MiB
 * (cuMemCreate, as PyTorch's expandable segments make memory), and
 * oom_hold_cache a 4 MiB cached block (cudaMallocFromPoolAsync on the
 * legacy stream). Then oom_ask asks for 2 GiB with cudaMalloc: it fails
 * for want of memory; the cache is let go (cudaFreeAsync) and oom_ask asks
 * again, as PyTorch's caching allocator does, and fails again. oom: it
 * recovers: frees the params, allocates 100 MiB (oom_recover), frees
 * everything and makes its last call, cudaDeviceSynchronize. oom-exit:
 * after the second failure it prints its report and exits with status 3,
 * as a job dies of it.
 */
#define OOM_PARAMS (400 * (size_t)MiB)
#define OOM_GRAD_ROW (300 * (size_t)KiB)
#define OOM_GRAD_ROWS 1024
#define OOM_ACTS 30
#define OOM_ACT (8 * (size_t)MiB)
#define OOM_SEGMENT (64 * (size_t)MiB)
#define OOM_CACHE (4 * (size_t)MiB)
#define OOM_ASK (2048 * (size_t)MiB)

static struct {
	void *params, *grads, *acts[OOM_ACTS], *cache, *more;
	CUmemGenericAllocationHandle segment;
	__typeof__(cuMemCreate) *create;
	__typeof__(cuMemRelease) *release;
} oom;

__attribute__((noinline, used)) void oom_hold_params(void)
{
	CK(cudaMalloc, &oom.params, OOM_PARAMS);
}

__attribute__((noinline, used)) void oom_hold_grads(void)
{
	size_t pitch;
	CK(cudaMallocPitch, &oom.grads, &pitch, OOM_GRAD_ROW, OOM_GRAD_ROWS);
}

__attribute__((noinline, used)) void oom_hold_acts(void)
{
	for (int i = 0; i < OOM_ACTS; i++)
		CK(cudaMallocManaged, &oom.acts[i], OOM_ACT, 1 /* cudaMemAttachGlobal */);
}

/* The driver's physical memory, called as a program that loaded the
 * driver's entry points itself does (the runtime has no such call). */
__attribute__((noinline, used)) void oom_hold_segment(void)
{
	void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
	oom.create = h ? (__typeof__(cuMemCreate) *)dlsym(h, "cuMemCreate") : NULL;
	oom.release = h ? (__typeof__(cuMemRelease) *)dlsym(h, "cuMemRelease") : NULL;
	if (!oom.create || !oom.release)
		die("oom: the driver is not loaded or lacks cuMemCreate");
	__atomic_fetch_add(&api_calls[API_cuMemCreate], 1, __ATOMIC_RELAXED);
	check("cuMemCreate", oom.create(&oom.segment, OOM_SEGMENT, NULL, 0));
}

__attribute__((noinline, used)) void oom_hold_cache(void)
{
	CK(cudaMallocFromPoolAsync, &oom.cache, OOM_CACHE, NULL, NULL);
}

/* Returns cudaMalloc's status: out of memory is expected. */
__attribute__((noinline, used)) int oom_ask(void)
{
	void *p;
	return CALL(cudaMalloc, &p, OOM_ASK);
}

__attribute__((noinline, used)) void oom_recover(void)
{
	CK(cudaMalloc, &oom.more, 100 * (size_t)MiB);
}

static void print_report(void);

static void scenario_oom_run(int recover)
{
	setenv("SIM_DEVICE_MEMORY", "1073741824", 0);
	oom_hold_params();
	oom_hold_grads();
	oom_hold_acts();
	oom_hold_segment();
	oom_hold_cache();
	expect(oom_ask() == cudaErrorMemoryAllocation, "oom: 2 GiB fit in the device");
	CK(cudaFreeAsync, oom.cache, NULL);
	expect(oom_ask() == cudaErrorMemoryAllocation, "oom: 2 GiB fit once the cache was let go");
	if (!recover) {
		print_report();
		exit(3);
	}
	CK(cudaFree, oom.params);
	oom_recover();
	CK(cudaFree, oom.more);
	CK(cudaFree, oom.grads);
	for (int i = 0; i < OOM_ACTS; i++)
		CK(cudaFree, oom.acts[i]);
	__atomic_fetch_add(&api_calls[API_cuMemRelease], 1, __ATOMIC_RELAXED);
	check("cuMemRelease", oom.release(oom.segment));
	CK(cudaDeviceSynchronize);
}

static void scenario_oom(const struct options *o)
{
	(void)o;
	scenario_oom_run(1);
}

static void scenario_oom_exit(const struct options *o)
{
	(void)o;
	scenario_oom_run(0);
}

/*
 * train: a training loop, --iters N iterations, as an eager PyTorch loop
 * makes its CUDA calls. Setup: buffers allocated and the weights copied in
 * synchronously (a sync of its own). Each iteration, on one non-blocking
 * stream: the batch copied in (64 KiB, pinned: no sync), a forward (gemm,
 * relu), a backward (two gemms), an optimizer launch (reduce), then the
 * loss read back as .item() does (train_read_loss: a 4-byte D2H copy into
 * pinned memory and a sync of the stream, which waits for the iteration's
 * work); every 4th iteration the accuracy is logged too (train_log: the
 * same, at another line). Last, a cudaDeviceSynchronize. A tracer should
 * find N steps, each ending where train_read_loss's sync returned.
 */
static struct {
	cudaStream_t s;
	void *dev, *pinned;
} train;

__attribute__((noinline, used)) void train_read_loss(void)
{
	CK(cudaMemcpyAsync, train.pinned, train.dev, 4, cudaMemcpyDeviceToHost, train.s);
	CK(cudaStreamSynchronize, train.s);
}

__attribute__((noinline, used)) void train_log(void)
{
	CK(cudaMemcpyAsync, (char *)train.pinned + 64, train.dev, 4, cudaMemcpyDeviceToHost, train.s);
	CK(cudaStreamSynchronize, train.s);
}

static void train_setup(void)
{
	char *weights = xmalloc(256 * KiB);
	memset(weights, 1, 256 * KiB);
	CK(cudaStreamCreateWithFlags, &train.s, cudaStreamNonBlocking);
	CK(cudaMalloc, &train.dev, MiB);
	CK(cudaHostAlloc, &train.pinned, MiB, cudaHostAllocDefault);
	CK(cudaMemcpy, train.dev, weights, 256 * KiB, cudaMemcpyHostToDevice);
	free(weights);
}

static void train_forward(void)
{
	dim3 big = { 200, 1, 1 }, small = { 20, 1, 1 }, block = { 256, 1, 1 };
	CK(cudaMemcpyAsync, train.dev, train.pinned, 64 * KiB, cudaMemcpyHostToDevice, train.s);
	CK(cudaLaunchKernel, GEMM, big, block, gemm_args, 0, train.s);
	CK(cudaLaunchKernel, RELU, small, block, relu_args, 0, train.s);
}

static void train_backward_and_step(void)
{
	dim3 big = { 200, 1, 1 }, small = { 20, 1, 1 }, block = { 256, 1, 1 };
	CK(cudaLaunchKernel, GEMM, big, block, gemm_args, 0, train.s);
	CK(cudaLaunchKernel, GEMM, big, block, gemm_args, 0, train.s);
	CK(cudaLaunchKernel, REDUCE, small, block, reduce_args, 0, train.s);
}

static void train_teardown(void)
{
	CK(cudaDeviceSynchronize);
	CK(cudaFreeHost, train.pinned);
	CK(cudaFree, train.dev);
	CK(cudaStreamDestroy, train.s);
}

static void scenario_train(const struct options *o)
{
	train_setup();
	for (long it = 1; it <= o->iters; it++) {
		train_forward();
		train_backward_and_step();
		train_read_loss();
		if (it % 4 == 0)
			train_log();
	}
	train_teardown();
}

#ifdef SIM_NVTX
/*
 * train-nvtx: train, annotated with NVTX through the simulated NVTX library
 * (its calls reach the injection library NVTX_INJECTION64_PATH names, or
 * nothing): each iteration is the range "train step IT" (pushed), with
 * "forward" nested in it; the batch copy is a range of the domain "data"
 * (nvtxDomainRangePushEx, its message registered); the whole loop is a
 * started range "epoch"; a mark "checkpoint" after it. A tracer should
 * find N steps, one per "train step" range.
 */
static void scenario_train_nvtx(const struct options *o)
{
	train_setup();
	nvtxDomainHandle_t data = CALL(nvtxDomainCreateA, "data");
	nvtxEventAttributes_t batch = { .version = NVTX_VERSION, .size = sizeof batch,
					.messageType = NVTX_MESSAGE_TYPE_REGISTERED };
	batch.message.registered = CALL(nvtxDomainRegisterStringA, data, "batch");
	nvtxRangeId_t epoch = CALL(nvtxRangeStartA, "epoch");
	for (long it = 1; it <= o->iters; it++) {
		char name[64];
		snprintf(name, sizeof name, "train step %ld", it);
		CALL(nvtxRangePushA, name);
		CALL(nvtxDomainRangePushEx, data, &batch);
		CALL(nvtxDomainRangePop, data);
		nvtxEventAttributes_t fwd = { .version = NVTX_VERSION, .size = sizeof fwd, .messageType = NVTX_MESSAGE_TYPE_ASCII };
		fwd.message.ascii = "forward";
		CALL(nvtxRangePushEx, &fwd);
		train_forward();
		CALL(nvtxRangePop);
		train_backward_and_step();
		train_read_loss();
		CALL(nvtxRangePop);
	}
	CALL(nvtxRangeEnd, epoch);
	CALL(nvtxMarkA, "checkpoint");
	train_teardown();
}

/* nvtx_attr is an nvtxEventAttributes_t with an ASCII or a wide message. */
static nvtxEventAttributes_t nvtx_attr(const char *ascii, const wchar_t *wide)
{
	nvtxEventAttributes_t a = { .version = NVTX_VERSION, .size = sizeof a, .colorType = 1, .color = 0xff76b900 };
	if (wide)
		a.messageType = NVTX_MESSAGE_TYPE_UNICODE, a.message.unicode = wide;
	else
		a.messageType = NVTX_MESSAGE_TYPE_ASCII, a.message.ascii = ascii;
	return a;
}

/*
 * nvtx-forms: train, annotated through every form of NVTX's C API for
 * ranges and marks (A, W, Ex with an ASCII or a wide message, a domain's),
 * with plain ASCII messages, so that a tracer hooking the library and one
 * serving as its injection library must draw the same. Around the loop the
 * started range "epoch" (nvtxRangeStartA), after it the mark "checkpoint"
 * (nvtxMarkA); per iteration:
 *
 *   "train step IT" (nvtxRangePushA), holding, one after the other,
 *     "forward" (nvtxRangePushW), holding the mark "forward mark" (nvtxMarkW),
 *     "backward" (nvtxRangePushEx, wide);
 *   "batch" of the domain "data" (nvtxDomainRangePushEx, ASCII), during
 *     the forward, holding the mark "batch mark" (nvtxDomainMarkEx, wide):
 *     the default domain's ranges nest apart from it;
 *   started and ended by id: "async io" (nvtxRangeStartEx, ASCII) from the
 *     forward into the backward, "read-back" (nvtxRangeStartW) around the
 *     loss's read-back, "optimizer" of "data" (nvtxDomainRangeStartEx, wide;
 *     nvtxDomainRangeEnd) around the backward;
 *   the mark "step done" (nvtxMarkEx, ASCII) after the step's pop.
 */
static void scenario_nvtx_forms(const struct options *o)
{
	train_setup();
	nvtxDomainHandle_t data = CALL(nvtxDomainCreateA, "data");
	nvtxRangeId_t epoch = CALL(nvtxRangeStartA, "epoch");
	for (long it = 1; it <= o->iters; it++) {
		char name[64];
		snprintf(name, sizeof name, "train step %ld", it);
		CALL(nvtxRangePushA, name);
		CALL(nvtxRangePushW, L"forward");
		nvtxEventAttributes_t batch = nvtx_attr("batch", NULL), batch_mark = nvtx_attr(NULL, L"batch mark");
		CALL(nvtxDomainRangePushEx, data, &batch);
		CALL(nvtxDomainMarkEx, data, &batch_mark);
		nvtxEventAttributes_t io = nvtx_attr("async io", NULL);
		nvtxRangeId_t async_io = CALL(nvtxRangeStartEx, &io);
		CALL(nvtxMarkW, L"forward mark");
		train_forward();
		CALL(nvtxDomainRangePop, data);
		CALL(nvtxRangePop);
		nvtxEventAttributes_t backward = nvtx_attr(NULL, L"backward"), opt = nvtx_attr(NULL, L"optimizer");
		nvtxRangeId_t optimizer = CALL(nvtxDomainRangeStartEx, data, &opt);
		CALL(nvtxRangePushEx, &backward);
		train_backward_and_step();
		CALL(nvtxRangeEnd, async_io);
		CALL(nvtxRangePop);
		CALL(nvtxDomainRangeEnd, data, optimizer);
		nvtxRangeId_t read_back = CALL(nvtxRangeStartW, L"read-back");
		train_read_loss();
		CALL(nvtxRangeEnd, read_back);
		CALL(nvtxRangePop);
		nvtxEventAttributes_t done = nvtx_attr("step done", NULL);
		CALL(nvtxMarkEx, &done);
	}
	CALL(nvtxRangeEnd, epoch);
	CALL(nvtxMarkA, "checkpoint");
	train_teardown();
}
#endif

static const struct {
	const char *name;
	void (*run)(const struct options *);
} scenarios[] = {
	{ "basic", scenario_basic },   { "launches", scenario_launches }, { "ptsz", scenario_ptsz },
	{ "devices", scenario_devices }, { "handles", scenario_handles },
	{ "timing", scenario_timing }, { "all", scenario_all },   { "stacktop", scenario_stacktop },
	{ "profiler", scenario_profiler },
	{ "lint-legacy-nonblocking", scenario_lint_legacy }, { "lint-cross-stream", scenario_lint_cross_stream },
	{ "lint-many-streams", scenario_lint_many_streams }, { "lint-pageable-loop", scenario_lint_pageable_loop },
	{ "lint-sync-every-launch", scenario_lint_sync_every_launch }, { "lint-clean", scenario_lint_clean },
	{ "lint-kernel-race", scenario_lint_kernel_race },
	{ "oom", scenario_oom }, { "oom-exit", scenario_oom_exit }, { "train", scenario_train },
	{ "graphs", scenario_graphs },
#ifdef SIM_DRIVER
	{ "driver", scenario_driver }, { "driver-all", scenario_driver_all }, { "mixed", scenario_mixed },
	{ "static-runtime", scenario_static_runtime }, { "torch-race", scenario_torch_race },
	{ "driver-graphs", scenario_driver_graphs },
#endif
#ifdef SIM_NCCL
	{ "nccl", scenario_nccl },
#endif
#ifdef SIM_NVTX
	{ "train-nvtx", scenario_train_nvtx }, { "nvtx-forms", scenario_nvtx_forms },
#endif
};

/* What nvcc's generated code does at startup: tell the runtime each kernel's
 * host stub and name (here the C name; real ones are mangled C++). */
static void register_kernels(void)
{
	CALL(__cudaRegisterFunction, NULL, (const char *)sim_gemm_kernel, "sim_gemm_kernel", "sim_gemm_kernel", -1, NULL,
	     NULL, NULL, NULL, NULL);
	CALL(__cudaRegisterFunction, NULL, (const char *)sim_relu_kernel, "sim_relu_kernel", "sim_relu_kernel", -1, NULL,
	     NULL, NULL, NULL, NULL);
	CALL(__cudaRegisterFunction, NULL, (const char *)sim_reduce_kernel, "sim_reduce_kernel", "sim_reduce_kernel", -1,
	     NULL, NULL, NULL, NULL, NULL);
}

#ifdef RUNTIME_DLOPEN
static void load_runtime(const char *path)
{
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		fprintf(stderr, "workload: %s\n", dlerror());
		exit(1);
	}
#define X(name)                                                      \
	if (!(api.name = (__typeof__(api.name))dlsym(h, #name))) { \
		fprintf(stderr, "workload: %s: no %s\n", path, #name); \
		exit(1);                                             \
	}
	API_LIST(X)
#undef X
}
#endif

#ifdef SIM_DRIVER
/* The driver build's runtime: libcudart.so.13 beside the executable. */
static void load_runtime_beside(void)
{
	char path[4096];
	ssize_t n = readlink("/proc/self/exe", path, sizeof path - sizeof "libcudart.so.13");
	char *slash = n > 0 ? memrchr(path, '/', n) : NULL;
	if (!slash)
		die("cannot find the executable's directory");
	strcpy(slash + 1, "libcudart.so.13");
	load_runtime(path);
}
#endif

__attribute__((noreturn)) static void usage(void)
{
	fprintf(stderr, "usage: workload [--iters N] [--streams K] [--wait-stdin] [--wait-after-setup] [--wait-before-exit] [--wait-file PATH]\n"
			"                [--sleep-ms MS] [--scenario ");
	for (size_t i = 0; i < sizeof scenarios / sizeof scenarios[0]; i++)
		fprintf(stderr, "%s%s", i ? "|" : "", scenarios[i].name);
	fprintf(stderr, "]%s\n",
#ifdef SIM_DLOPEN
		" --dlopen PATH"
#else
		""
#endif
	);
	exit(2);
}

static void (*find_scenario(const char *name))(const struct options *)
{
	for (size_t i = 0; i < sizeof scenarios / sizeof scenarios[0]; i++)
		if (strcmp(scenarios[i].name, name) == 0)
			return scenarios[i].run;
	usage();
}

static long parse_long(const char *s, long min)
{
	char *end;
	long v = strtol(s, &end, 10);
	if (*s == '\0' || *end != '\0' || v < min)
		usage();
	return v;
}

static struct options parse(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "iters", required_argument, NULL, 'i' },
		{ "streams", required_argument, NULL, 'k' },
		{ "wait-stdin", no_argument, NULL, 'w' },
		{ "wait-after-setup", no_argument, NULL, 'a' },
		{ "warm-up", no_argument, NULL, 'u' },
		{ "wait-before-exit", no_argument, NULL, 'e' },
		{ "wait-file", required_argument, NULL, 'f' },
		{ "sleep-ms", required_argument, NULL, 's' },
		{ "scenario", required_argument, NULL, 'c' },
		{ "dlopen", required_argument, NULL, 'd' },
		{ 0 },
	};
	struct options o = { .iters = 10, .streams = 2, .scenario = scenario_basic };
	int c;
	while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		switch (c) {
		case 'i': o.iters = parse_long(optarg, 0); break;
		case 'k': o.streams = (int)parse_long(optarg, 2); break; /* basic uses streams 0 and 1 */
		case 'w': o.wait_stdin = 1; break;
		case 'a': o.wait_setup = 1; break;
		case 'u': o.warm_up = 1; break;
		case 'e': o.wait_exit = 1; break;
		case 'f': o.wait_file = optarg; break;
		case 's': o.sleep_ms = parse_long(optarg, 0); break;
		case 'c': o.scenario = find_scenario(optarg); break;
		case 'd': o.dlopen_path = optarg; break;
		default: usage();
		}
	}
	if (optind != argc || o.streams > 1024)
		usage();
#ifdef SIM_DLOPEN
	if (!o.dlopen_path)
		usage();
#else
	if (o.dlopen_path)
		die("--dlopen needs the dlopen build (workload-dlopen)");
#endif
	return o;
}

/* The index of the workload's counter for a symbol, or -1. */
static int api_index(const char *name)
{
	for (int i = 0; i < API_COUNT; i++)
		if (strcmp(api_names[i], name) == 0)
			return i;
	return -1;
}

/* Prints "internal":{...}: the driver calls nobody in the workload made
 * directly, from libcuda's own counters (when the runtime loaded it). */
static void print_internal(void)
{
	printf(",\"internal\":{");
	void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
	__typeof__(sim_driver_calls) *calls = h ? (__typeof__(sim_driver_calls) *)dlsym(h, "sim_driver_calls") : NULL;
	const char *sep = "", *name;
	unsigned long n;
	for (int i = 0; calls && (name = calls(i, &n)); i++) {
		int own = api_index(name);
		if (own >= 0)
			n -= api_calls[own];
		if (n) {
			printf("%s\"%s\":%lu", sep, name, n);
			sep = ",";
		}
	}
	/* "busy_ns":{"HANDLE":NS,...}: the modeled GPU time of each stream
	 * (handle 0: the legacy stream), which a tracer's bounds must contain. */
	__typeof__(sim_stream_busy) *busy = h ? (__typeof__(sim_stream_busy) *)dlsym(h, "sim_stream_busy") : NULL;
	printf("},\"busy_ns\":{");
	const void *handle;
	int owner;
	long long ns;
	sep = "";
	for (int i = 0; busy && busy(i, &handle, &owner, &ns); i++) {
		if (owner)
			printf("%s\"ptds:%d\":%lld", sep, owner, ns); /* the thread's per-thread default stream */
		else
			printf("%s\"%#lx\":%lld", sep, (unsigned long)(uintptr_t)handle, ns);
		sep = ",";
	}
	printf("}");
	__typeof__(sim_meeting_wait_ns) *wait = h ? (__typeof__(sim_meeting_wait_ns) *)dlsym(h, "sim_meeting_wait_ns") : NULL;
	if (wait)
		printf(",\"meeting_wait_ns\":%lld", wait());
	if (h)
		dlclose(h);
}

static void print_report(void)
{
	printf("{\"pid\":%d,\"calls\":{", (int)getpid());
	const char *sep = "";
	for (int i = 0; i < API_COUNT; i++) {
		if (api_calls[i]) {
			printf("%s\"%s\":%lu", sep, api_names[i], api_calls[i]);
			sep = ",";
		}
	}
	printf("}");
	print_internal();
	if (profiler.ran)
		printf(",\"profiler\":{\"subscribe_status\":%d,\"held_before\":%s,\"resumed\":%s,\"ops\":%ld,\"records\":%ld}",
		       profiler.subscribe_status, profiler.held_before ? "true" : "false", profiler.resumed ? "true" : "false",
		       profiler.ops, profiler.records);
	printf("}\n");
	fflush(stdout);
}

int main(int argc, char **argv)
{
	struct options o = parse(argc, argv);

	/* Hold off every CUDA call until a tracer has attached. */
	if (o.wait_stdin) {
		printf("ready %d\n", (int)getpid());
		fflush(stdout);
		char line[256];
		if (!fgets(line, sizeof line, stdin))
			die("stdin closed before the go-ahead line");
	}
	if (o.wait_file)
		while (access(o.wait_file, F_OK) != 0)
			sleep_ns(MS);
	sleep_ns(o.sleep_ms * MS);
#ifdef SIM_DLOPEN
	load_runtime(o.dlopen_path);
#endif
#ifdef SIM_DRIVER
	/* Only the driver scenarios run without a runtime in the process. */
	if (o.scenario != scenario_driver && o.scenario != scenario_driver_all && o.scenario != scenario_driver_graphs) {
		load_runtime_beside();
		register_kernels();
	}
#else
	register_kernels();
#endif
	if (o.warm_up) {
		/* Each kernel launched once: the runtime turns it into a CUfunction
		 * now, so a tracer attaching later sees no kernel loading. */
		dim3 one = { 1, 1, 1 };
		CK(cudaLaunchKernel, GEMM, one, one, gemm_args, 0, NULL);
		CK(cudaLaunchKernel, RELU, one, one, relu_args, 0, NULL);
		CK(cudaDeviceSynchronize);
	}

	o.scenario(&o);
	if (o.wait_exit) {
		/* Done, still alive: a tracer can name everything it saw. */
		printf("done %d\n", (int)getpid());
		fflush(stdout);
		char line[256];
		if (!fgets(line, sizeof line, stdin))
			die("stdin closed before the exit line");
	}

	print_report();
	return 0;
}
