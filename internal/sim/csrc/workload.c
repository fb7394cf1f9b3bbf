/*
 * workload.c: drives the simulated libcudart like a CUDA application, then
 * prints one JSON line with the exact number of calls it made to each entry
 * point, for tests to compare a tracer's counts against.
 *
 *   workload [--iters N] [--streams K] [--wait-stdin] [--wait-file PATH]
 *            [--sleep-ms MS] [--scenario basic|launches|ptsz|timing|all]
 *            [--dlopen PATH]   (required by, and only in, the -DSIM_DLOPEN build)
 *
 * --iters: iterations (launches: kernel launches), default 10. --streams:
 * streams of scenario basic, default 2, at least 2. Before its first CUDA
 * call the workload waits for the go-ahead: with --wait-stdin it prints
 * "ready <pid>" and reads one line; with --wait-file it polls every 1 ms
 * until PATH exists; then it sleeps --sleep-ms. The scenarios are described
 * at their functions.
 *
 * Built three ways: linked against libcudart.so.13, with cudart_sim.c compiled
 * in (symbols in .symtab only), and with -DSIM_DLOPEN, where the runtime is
 * dlopen()ed from --dlopen PATH after the go-ahead and the sleep, to test
 * late loading.
 */
#define _GNU_SOURCE
#include "cuda_sim.h"

#include <getopt.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#ifdef SIM_DLOPEN
#include <dlfcn.h>
#endif

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
	X(cudaLaunchHostFunc_ptsz) X(cudaGetDevice) X(cudaSetDevice) X(cudaGetLastError)

enum api {
#define X(name) API_##name,
	API_LIST(X)
#undef X
	API_COUNT
};

static const char *const api_names[API_COUNT] = {
#define X(name) #name,
	API_LIST(X)
#undef X
};

static unsigned long api_calls[API_COUNT];

#ifdef SIM_DLOPEN
static struct {
#define X(name) __typeof__(name) *name;
	API_LIST(X)
#undef X
} api;
#define CUDA(fn) api.fn
#else
#define CUDA(fn) fn
#endif

/* Counts one call of fn, then makes it; evaluates to its status. */
#define CALL(fn, ...) (__atomic_fetch_add(&api_calls[API_##fn], 1, __ATOMIC_RELAXED), CUDA(fn)(__VA_ARGS__))
/* A call that must succeed. */
#define CK(fn, ...) check(#fn, CALL(fn, __VA_ARGS__))

#define KiB 1024
#define MiB (1024 * 1024)
#define MS 1000000LL

static void die(const char *msg)
{
	fprintf(stderr, "workload: %s\n", msg);
	exit(1);
}

static void check(const char *fn, cudaError_t err)
{
	if (err != cudaSuccess) {
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
 * ALL_PITCH; memset value ALL_VALUE; graph handle ALL_GRAPH; stream priority
 * -1; event flags cudaEventDisableTiming.
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
	CK(cudaFreeAsync, d2, snb);
	CK(cudaFreeAsync_ptsz, d3, NULL);
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

static const struct {
	const char *name;
	void (*run)(const struct options *);
} scenarios[] = {
	{ "basic", scenario_basic },   { "launches", scenario_launches }, { "ptsz", scenario_ptsz },
	{ "timing", scenario_timing }, { "all", scenario_all },
};

#ifdef SIM_DLOPEN
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

__attribute__((noreturn)) static void usage(void)
{
	fprintf(stderr, "usage: workload [--iters N] [--streams K] [--wait-stdin] [--wait-file PATH]\n"
			"                [--sleep-ms MS] [--scenario basic|launches|ptsz|timing|all]%s\n",
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
	printf("}}\n");
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

	o.scenario(&o);

	print_report();
	return 0;
}
