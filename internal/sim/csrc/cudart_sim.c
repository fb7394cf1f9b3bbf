/*
 * cudart_sim.c: a simulated CUDA runtime that exports the real libcudart.so.13
 * entry points (names, prototypes, symbol versions) on top of a modeled GPU, so
 * a tracer's uprobes see the same ABI and the same host-blocking behaviour as
 * on real hardware, without a GPU.
 *
 * The modeled GPU: under one mutex, every stream keeps a clock, the
 * CLOCK_MONOTONIC time (ns) at which the last operation enqueued on it
 * completes. Enqueuing an operation of duration d starts it at
 * max(now, stream clock, implicit dependencies) and moves the clock to
 * start + d. The legacy default stream (handle 0 / cudaStreamLegacy) waits for
 * every blocking stream and every blocking stream waits for it; non-blocking
 * streams are independent. Synchronizing calls sleep until the relevant clock.
 * Device memory is a range of fake addresses that is never dereferenced.
 *
 * Every exported function is its own noinline entry point (a tracer probes the
 * first instruction); none calls another exported function, so one API call
 * fires exactly one probe. Shared logic lives in static helpers.
 */
#define _GNU_SOURCE
#include "cuda_sim.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Every entry point is its own function. GCC's noipa also keeps entry points
 * with identical bodies (cudaFreeAsync, cudaFreeAsync_ptsz) from being folded
 * into one address by identical-code folding. */
#if defined(__GNUC__) && !defined(__clang__)
#define API __attribute__((noinline, noipa, used, visibility("default")))
#else
#define API __attribute__((noinline, used, visibility("default")))
#endif

/* Modeled costs in ns: workloads choose kernel durations through the grid. */
#define KERNEL_NS_PER_BLOCK 1000
#define MEMCPY_BASE_NS 2000
#define MEMCPY_BYTES_PER_NS 10 /* 10 GB/s */
#define MEMSET_BASE_NS 1000
#define MEMSET_BYTES_PER_NS 100
#define GRAPH_NS 50000
#define HOSTFN_NS 1000

#define DEVICE_BASE ((uintptr_t)0x7e0000000000ULL)
#define DEVICE_ALIGN 256
#define PAGE_SIZE 4096

struct CUstream_st {
	int64_t clock;  /* completion time of the last enqueued operation */
	unsigned flags; /* cudaStreamNonBlocking or not */
	struct CUstream_st *prev, *next; /* live-stream list, for implicit syncs */
};

struct CUevent_st {
	int64_t time; /* completion time of the recorded work; 0 = never recorded */
};

/* A page-locked host range: made by cudaHostAlloc/cudaMallocHost (owned, so
 * cudaFreeHost frees it) or by cudaHostRegister (not owned). */
struct pinned_range {
	uintptr_t start;
	size_t len;
	int owned;
};

/* A cudaLaunchHostFunc callback that has not returned yet. */
struct hostfn {
	cudaHostFn_t fn;
	void *data;
	int64_t start, end; /* its slot on the modeled stream */
	struct hostfn *next;
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t hostfn_returned = PTHREAD_COND_INITIALIZER;

/* Everything below is guarded by mu. */
static struct CUstream_st legacy_stream;
static struct CUstream_st *streams; /* created and per-thread streams */
static int64_t retired_clock; /* latest clock of a destroyed stream */
static uintptr_t device_next = DEVICE_BASE;
static struct pinned_range *pinned;
static size_t npinned, cap_pinned;
static struct hostfn *hostfns;

static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

static int64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void sleep_until(int64_t t)
{
	struct timespec ts = { .tv_sec = t / 1000000000, .tv_nsec = t % 1000000000 };
	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
		;
}

/* ---- streams ---- */

static struct CUstream_st *stream_new(unsigned flags)
{
	struct CUstream_st *s = calloc(1, sizeof *s);
	if (!s)
		return NULL;
	s->flags = flags & cudaStreamNonBlocking;
	pthread_mutex_lock(&mu);
	s->next = streams;
	if (streams)
		streams->prev = s;
	streams = s;
	pthread_mutex_unlock(&mu);
	return s;
}

/* Destroying a stream does not wait for its work (as in CUDA); its clock is
 * kept so cudaDeviceSynchronize still waits for that work. */
static void stream_retire(struct CUstream_st *s)
{
	pthread_mutex_lock(&mu);
	if (s->prev)
		s->prev->next = s->next;
	else
		streams = s->next;
	if (s->next)
		s->next->prev = s->prev;
	retired_clock = max64(retired_clock, s->clock);
	pthread_mutex_unlock(&mu);
	free(s);
}

/* The per-thread default stream (cudaStreamPerThread, or 0 in _ptsz/_ptds
 * calls): a blocking stream created on the thread's first use and retired at
 * thread exit. */
static __thread struct CUstream_st *thread_stream;
static pthread_key_t thread_stream_key;
static pthread_once_t thread_stream_once = PTHREAD_ONCE_INIT;

static void thread_stream_exit(void *s)
{
	stream_retire(s);
	thread_stream = NULL;
}

static void thread_stream_key_init(void)
{
	if (pthread_key_create(&thread_stream_key, thread_stream_exit))
		abort();
}

static struct CUstream_st *per_thread_stream(void)
{
	if (!thread_stream) {
		pthread_once(&thread_stream_once, thread_stream_key_init);
		thread_stream = stream_new(cudaStreamDefault);
		if (!thread_stream)
			abort(); /* no stream to return: the caller has nowhere to report it */
		pthread_setspecific(thread_stream_key, thread_stream);
	}
	return thread_stream;
}

/* Maps a stream handle to its model; ptsz: the call is a _ptsz/_ptds form, in
 * which handle 0 names the per-thread default stream. */
static struct CUstream_st *stream_of(cudaStream_t h, int ptsz)
{
	if (h == NULL)
		return ptsz ? per_thread_stream() : &legacy_stream;
	if (h == cudaStreamLegacy)
		return &legacy_stream;
	if (h == cudaStreamPerThread)
		return per_thread_stream();
	return h;
}

static int is_special_stream(cudaStream_t h)
{
	return h == NULL || h == cudaStreamLegacy || h == cudaStreamPerThread;
}

/* Enqueues an operation of dur ns on s, with mu held; returns its end time. */
static int64_t enqueue_locked(struct CUstream_st *s, int64_t dur)
{
	int64_t start = max64(now_ns(), s->clock);
	if (s == &legacy_stream) {
		for (struct CUstream_st *b = streams; b; b = b->next)
			if (!(b->flags & cudaStreamNonBlocking))
				start = max64(start, b->clock);
	} else if (!(s->flags & cudaStreamNonBlocking)) {
		start = max64(start, legacy_stream.clock);
	}
	s->clock = start + dur;
	return s->clock;
}

static int64_t enqueue(struct CUstream_st *s, int64_t dur)
{
	pthread_mutex_lock(&mu);
	int64_t end = enqueue_locked(s, dur);
	pthread_mutex_unlock(&mu);
	return end;
}

/* ---- host callbacks and host-side waiting ---- */

/* Whether a callback due by time t has not returned yet (mu held). */
static int hostfn_pending_locked(int64_t t)
{
	for (struct hostfn *h = hostfns; h; h = h->next)
		if (h->end <= t)
			return 1;
	return 0;
}

/* Blocks the host until the modeled GPU reaches time t, including host
 * callbacks scheduled to finish by then. */
static void host_wait(int64_t t)
{
	sleep_until(t);
	pthread_mutex_lock(&mu);
	while (hostfn_pending_locked(t))
		pthread_cond_wait(&hostfn_returned, &mu);
	pthread_mutex_unlock(&mu);
}

static void hostfn_unlink_locked(struct hostfn *h)
{
	for (struct hostfn **pp = &hostfns; *pp; pp = &(*pp)->next) {
		if (*pp == h) {
			*pp = h->next;
			return;
		}
	}
}

/* CUDA runs host functions on an internal thread once the stream reaches
 * them; so does the model, at the operation's start. Unlike CUDA, a callback
 * that outlasts its HOSTFN_NS slot does not delay later work on the stream,
 * but synchronizing calls still wait for it to return. */
static void *hostfn_thread(void *arg)
{
	struct hostfn *h = arg;
	sleep_until(h->start);
	h->fn(h->data);
	pthread_mutex_lock(&mu);
	hostfn_unlink_locked(h);
	pthread_cond_broadcast(&hostfn_returned);
	pthread_mutex_unlock(&mu);
	free(h);
	return NULL;
}

static cudaError_t launch_host_func(struct CUstream_st *s, cudaHostFn_t fn, void *data)
{
	if (!fn)
		return cudaErrorInvalidValue;
	struct hostfn *h = malloc(sizeof *h);
	if (!h)
		return cudaErrorMemoryAllocation;
	h->fn = fn;
	h->data = data;
	pthread_mutex_lock(&mu);
	h->end = enqueue_locked(s, HOSTFN_NS);
	h->start = h->end - HOSTFN_NS;
	h->next = hostfns;
	hostfns = h;
	pthread_mutex_unlock(&mu);

	pthread_attr_t attr;
	pthread_t tid;
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	int err = pthread_create(&tid, &attr, hostfn_thread, h);
	pthread_attr_destroy(&attr);
	if (err) {
		pthread_mutex_lock(&mu);
		hostfn_unlink_locked(h);
		pthread_mutex_unlock(&mu);
		free(h);
		return cudaErrorMemoryAllocation;
	}
	return cudaSuccess;
}

/* Latest completion time over every stream, destroyed ones included. */
static int64_t device_clock(void)
{
	pthread_mutex_lock(&mu);
	int64_t t = max64(legacy_stream.clock, retired_clock);
	for (struct CUstream_st *s = streams; s; s = s->next)
		t = max64(t, s->clock);
	pthread_mutex_unlock(&mu);
	return t;
}

static void device_wait(void)
{
	host_wait(device_clock());
	pthread_mutex_lock(&mu);
	while (hostfns)
		pthread_cond_wait(&hostfn_returned, &mu);
	pthread_mutex_unlock(&mu);
}

/* ---- memory ---- */

static int is_device_locked(const void *p)
{
	return (uintptr_t)p >= DEVICE_BASE && (uintptr_t)p < device_next;
}

/* The pinned range containing p, or NULL (mu held). */
static struct pinned_range *pinned_find_locked(const void *p)
{
	for (size_t i = 0; i < npinned; i++)
		if ((uintptr_t)p - pinned[i].start < pinned[i].len)
			return &pinned[i];
	return NULL;
}

static cudaError_t pinned_add_locked(void *p, size_t len, int owned)
{
	for (size_t i = 0; i < npinned; i++)
		if ((uintptr_t)p < pinned[i].start + pinned[i].len && pinned[i].start < (uintptr_t)p + len)
			return cudaErrorHostMemoryAlreadyRegistered;
	if (npinned == cap_pinned) {
		size_t cap = cap_pinned ? 2 * cap_pinned : 16;
		struct pinned_range *grown = realloc(pinned, cap * sizeof *grown);
		if (!grown)
			return cudaErrorMemoryAllocation;
		pinned = grown;
		cap_pinned = cap;
	}
	pinned[npinned++] = (struct pinned_range){ (uintptr_t)p, len, owned };
	return cudaSuccess;
}

/* Removes the range starting exactly at p with the given ownership; returns
 * whether there was one (mu held). */
static int pinned_remove_locked(const void *p, int owned)
{
	for (size_t i = 0; i < npinned; i++) {
		if (pinned[i].start == (uintptr_t)p && pinned[i].owned == owned) {
			pinned[i] = pinned[--npinned];
			return 1;
		}
	}
	return 0;
}

static cudaError_t device_alloc(void **p, size_t size)
{
	if (!p)
		return cudaErrorInvalidValue;
	if (size == 0) {
		*p = NULL;
		return cudaSuccess;
	}
	pthread_mutex_lock(&mu);
	*p = (void *)device_next;
	device_next += (size + DEVICE_ALIGN - 1) / DEVICE_ALIGN * DEVICE_ALIGN;
	pthread_mutex_unlock(&mu);
	return cudaSuccess;
}

static cudaError_t host_alloc(void **p, size_t size)
{
	if (!p)
		return cudaErrorInvalidValue;
	size_t len = size ? (size + PAGE_SIZE - 1) / PAGE_SIZE * PAGE_SIZE : PAGE_SIZE;
	void *m = aligned_alloc(PAGE_SIZE, len);
	if (!m)
		return cudaErrorMemoryAllocation;
	pthread_mutex_lock(&mu);
	cudaError_t err = pinned_add_locked(m, len, 1);
	pthread_mutex_unlock(&mu);
	if (err) {
		free(m);
		return err;
	}
	*p = m;
	return cudaSuccess;
}

/* ---- copies, sets, launches ---- */

/* Resolves cudaMemcpyDefault by where the pointers live (mu held). */
static int direction_locked(const void *dst, const void *src, int kind)
{
	if (kind != cudaMemcpyDefault)
		return kind;
	if (is_device_locked(dst))
		return is_device_locked(src) ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice;
	return is_device_locked(src) ? cudaMemcpyDeviceToHost : cudaMemcpyHostToHost;
}

/* A (2D) copy of height rows of width bytes on s. sync: the API call is
 * synchronous. An async copy whose host side is pageable is synchronous for
 * the host too, as in CUDA (it goes through a staging buffer). */
static cudaError_t copy(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
			size_t height, int kind, struct CUstream_st *s, int sync)
{
	if (kind < cudaMemcpyHostToHost || kind > cudaMemcpyDefault)
		return cudaErrorInvalidMemcpyDirection;
	if (width > dpitch || width > spitch)
		return cudaErrorInvalidPitchValue;
	if ((!dst || !src) && width && height)
		return cudaErrorInvalidValue;

	pthread_mutex_lock(&mu);
	int dir = direction_locked(dst, src, kind);
	int pageable = 0;
	if (dir == cudaMemcpyHostToDevice || dir == cudaMemcpyHostToHost)
		pageable |= !pinned_find_locked(src);
	if (dir == cudaMemcpyDeviceToHost || dir == cudaMemcpyHostToHost)
		pageable |= !pinned_find_locked(dst);
	int64_t end = enqueue_locked(s, MEMCPY_BASE_NS + (int64_t)(width * height / MEMCPY_BYTES_PER_NS));
	pthread_mutex_unlock(&mu);

	if (sync || pageable)
		host_wait(end);

	/* Host memory is real: write what a copy would leave there. Device memory
	 * holds nothing, so reads from it come back as zeros. */
	for (size_t row = 0; row < height; row++) {
		char *d = (char *)dst + row * dpitch;
		const char *sr = (const char *)src + row * spitch;
		if (dir == cudaMemcpyDeviceToHost)
			memset(d, 0, width);
		else if (dir == cudaMemcpyHostToHost)
			memmove(d, sr, width);
	}
	return cudaSuccess;
}

static cudaError_t set(size_t count, struct CUstream_st *s, int sync)
{
	int64_t end = enqueue(s, MEMSET_BASE_NS + (int64_t)(count / MEMSET_BYTES_PER_NS));
	if (sync)
		host_wait(end);
	return cudaSuccess;
}

static cudaError_t launch(const void *func, dim3 grid, dim3 block, struct CUstream_st *s)
{
	if (!func)
		return cudaErrorInvalidDeviceFunction;
	if (!grid.x || !grid.y || !grid.z || !block.x || !block.y || !block.z)
		return cudaErrorInvalidConfiguration;
	enqueue(s, (int64_t)grid.x * grid.y * grid.z * KERNEL_NS_PER_BLOCK);
	return cudaSuccess;
}

static cudaError_t launch_ex(const cudaLaunchConfig_t *config, const void *func, int ptsz)
{
	if (!config)
		return cudaErrorInvalidValue;
	return launch(func, config->gridDim, config->blockDim, stream_of(config->stream, ptsz));
}

static cudaError_t graph_launch(cudaGraphExec_t graph, struct CUstream_st *s)
{
	if (!graph)
		return cudaErrorInvalidResourceHandle;
	enqueue(s, GRAPH_NS);
	return cudaSuccess;
}

/* ---- events ---- */

static cudaError_t event_create(cudaEvent_t *e)
{
	if (!e)
		return cudaErrorInvalidValue;
	*e = calloc(1, sizeof **e);
	return *e ? cudaSuccess : cudaErrorMemoryAllocation;
}

/* Recording is a zero-length operation, so it inherits the stream's implicit
 * dependencies (an event on the legacy stream covers the blocking streams). */
static cudaError_t event_record(cudaEvent_t e, struct CUstream_st *s)
{
	if (!e)
		return cudaErrorInvalidResourceHandle;
	pthread_mutex_lock(&mu);
	e->time = enqueue_locked(s, 0);
	pthread_mutex_unlock(&mu);
	return cudaSuccess;
}

static cudaError_t stream_wait_event(struct CUstream_st *s, cudaEvent_t e)
{
	if (!e)
		return cudaErrorInvalidResourceHandle;
	pthread_mutex_lock(&mu);
	s->clock = max64(s->clock, e->time);
	pthread_mutex_unlock(&mu);
	return cudaSuccess;
}

/* Ready once the GPU passed t and the host callbacks due by t returned. */
static cudaError_t query(int64_t t)
{
	pthread_mutex_lock(&mu);
	int busy = now_ns() < t || hostfn_pending_locked(t);
	pthread_mutex_unlock(&mu);
	return busy ? cudaErrorNotReady : cudaSuccess;
}

static int64_t stream_clock(struct CUstream_st *s)
{
	pthread_mutex_lock(&mu);
	int64_t t = s->clock;
	pthread_mutex_unlock(&mu);
	return t;
}

static int64_t event_time(cudaEvent_t e)
{
	pthread_mutex_lock(&mu);
	int64_t t = e->time;
	pthread_mutex_unlock(&mu);
	return t;
}

/* ---- exported API: streams ---- */

/* Priorities do not change the model: streams never compete for the GPU. */
static cudaError_t stream_create(cudaStream_t *p, unsigned flags)
{
	if (!p)
		return cudaErrorInvalidValue;
	*p = stream_new(flags);
	return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}

API cudaError_t cudaStreamCreate(cudaStream_t *pStream)
{
	return stream_create(pStream, cudaStreamDefault);
}

API cudaError_t cudaStreamCreateWithFlags(cudaStream_t *pStream, unsigned int flags)
{
	return stream_create(pStream, flags);
}

API cudaError_t cudaStreamCreateWithPriority(cudaStream_t *pStream, unsigned int flags, int priority)
{
	(void)priority;
	return stream_create(pStream, flags);
}

API cudaError_t cudaStreamDestroy(cudaStream_t stream)
{
	if (is_special_stream(stream))
		return cudaErrorInvalidResourceHandle;
	stream_retire(stream);
	return cudaSuccess;
}

API cudaError_t cudaStreamSynchronize(cudaStream_t stream)
{
	host_wait(stream_clock(stream_of(stream, 0)));
	return cudaSuccess;
}

API cudaError_t cudaStreamSynchronize_ptsz(cudaStream_t stream)
{
	host_wait(stream_clock(stream_of(stream, 1)));
	return cudaSuccess;
}

API cudaError_t cudaStreamQuery(cudaStream_t stream)
{
	return query(stream_clock(stream_of(stream, 0)));
}

API cudaError_t cudaStreamQuery_ptsz(cudaStream_t stream)
{
	return query(stream_clock(stream_of(stream, 1)));
}

API cudaError_t cudaDeviceSynchronize(void)
{
	device_wait();
	return cudaSuccess;
}

/* ---- exported API: launches ---- */

API cudaError_t cudaLaunchKernel(const void *func, dim3 gridDim, dim3 blockDim, void **args,
				 size_t sharedMem, cudaStream_t stream)
{
	(void)args;
	(void)sharedMem;
	return launch(func, gridDim, blockDim, stream_of(stream, 0));
}

API cudaError_t cudaLaunchKernel_ptsz(const void *func, dim3 gridDim, dim3 blockDim, void **args,
				      size_t sharedMem, cudaStream_t stream)
{
	(void)args;
	(void)sharedMem;
	return launch(func, gridDim, blockDim, stream_of(stream, 1));
}

API cudaError_t cudaLaunchKernelExC(const cudaLaunchConfig_t *config, const void *func, void **args)
{
	(void)args;
	return launch_ex(config, func, 0);
}

API cudaError_t cudaLaunchKernelExC_ptsz(const cudaLaunchConfig_t *config, const void *func, void **args)
{
	(void)args;
	return launch_ex(config, func, 1);
}

API cudaError_t cudaLaunchCooperativeKernel(const void *func, dim3 gridDim, dim3 blockDim, void **args,
					    size_t sharedMem, cudaStream_t stream)
{
	(void)args;
	(void)sharedMem;
	return launch(func, gridDim, blockDim, stream_of(stream, 0));
}

API cudaError_t cudaLaunchCooperativeKernel_ptsz(const void *func, dim3 gridDim, dim3 blockDim,
						 void **args, size_t sharedMem, cudaStream_t stream)
{
	(void)args;
	(void)sharedMem;
	return launch(func, gridDim, blockDim, stream_of(stream, 1));
}

API cudaError_t cudaGraphLaunch(cudaGraphExec_t graphExec, cudaStream_t stream)
{
	return graph_launch(graphExec, stream_of(stream, 0));
}

API cudaError_t cudaGraphLaunch_ptsz(cudaGraphExec_t graphExec, cudaStream_t stream)
{
	return graph_launch(graphExec, stream_of(stream, 1));
}

API cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void *userData)
{
	return launch_host_func(stream_of(stream, 0), fn, userData);
}

API cudaError_t cudaLaunchHostFunc_ptsz(cudaStream_t stream, cudaHostFn_t fn, void *userData)
{
	return launch_host_func(stream_of(stream, 1), fn, userData);
}

/* ---- exported API: copies and sets ---- */

API cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind)
{
	return copy(dst, count, src, count, count, 1, kind, &legacy_stream, 1);
}

API cudaError_t cudaMemcpy_ptds(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind)
{
	return copy(dst, count, src, count, count, 1, kind, per_thread_stream(), 1);
}

API cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind,
				cudaStream_t stream)
{
	return copy(dst, count, src, count, count, 1, kind, stream_of(stream, 0), 0);
}

API cudaError_t cudaMemcpyAsync_ptsz(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind,
				     cudaStream_t stream)
{
	return copy(dst, count, src, count, count, 1, kind, stream_of(stream, 1), 0);
}

API cudaError_t cudaMemcpy2D(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
			     size_t height, enum cudaMemcpyKind kind)
{
	return copy(dst, dpitch, src, spitch, width, height, kind, &legacy_stream, 1);
}

API cudaError_t cudaMemcpy2D_ptds(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
				  size_t height, enum cudaMemcpyKind kind)
{
	return copy(dst, dpitch, src, spitch, width, height, kind, per_thread_stream(), 1);
}

API cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
				  size_t height, enum cudaMemcpyKind kind, cudaStream_t stream)
{
	return copy(dst, dpitch, src, spitch, width, height, kind, stream_of(stream, 0), 0);
}

API cudaError_t cudaMemcpy2DAsync_ptsz(void *dst, size_t dpitch, const void *src, size_t spitch,
				       size_t width, size_t height, enum cudaMemcpyKind kind,
				       cudaStream_t stream)
{
	return copy(dst, dpitch, src, spitch, width, height, kind, stream_of(stream, 1), 0);
}

API cudaError_t cudaMemset(void *devPtr, int value, size_t count)
{
	(void)devPtr;
	(void)value;
	return set(count, &legacy_stream, 1);
}

API cudaError_t cudaMemset_ptds(void *devPtr, int value, size_t count)
{
	(void)devPtr;
	(void)value;
	return set(count, per_thread_stream(), 1);
}

API cudaError_t cudaMemsetAsync(void *devPtr, int value, size_t count, cudaStream_t stream)
{
	(void)devPtr;
	(void)value;
	return set(count, stream_of(stream, 0), 0);
}

API cudaError_t cudaMemsetAsync_ptsz(void *devPtr, int value, size_t count, cudaStream_t stream)
{
	(void)devPtr;
	(void)value;
	return set(count, stream_of(stream, 1), 0);
}

/* ---- exported API: events ---- */

API cudaError_t cudaEventCreate(cudaEvent_t *event)
{
	return event_create(event);
}

/* Flags (timing, blocking sync) do not change the model. */
API cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags)
{
	(void)flags;
	return event_create(event);
}

API cudaError_t cudaEventDestroy(cudaEvent_t event)
{
	if (!event)
		return cudaErrorInvalidResourceHandle;
	free(event);
	return cudaSuccess;
}

API cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream)
{
	return event_record(event, stream_of(stream, 0));
}

API cudaError_t cudaEventRecord_ptsz(cudaEvent_t event, cudaStream_t stream)
{
	return event_record(event, stream_of(stream, 1));
}

API cudaError_t cudaEventRecordWithFlags(cudaEvent_t event, cudaStream_t stream, unsigned int flags)
{
	(void)flags;
	return event_record(event, stream_of(stream, 0));
}

API cudaError_t cudaEventRecordWithFlags_ptsz(cudaEvent_t event, cudaStream_t stream, unsigned int flags)
{
	(void)flags;
	return event_record(event, stream_of(stream, 1));
}

API cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags)
{
	(void)flags;
	return stream_wait_event(stream_of(stream, 0), event);
}

API cudaError_t cudaStreamWaitEvent_ptsz(cudaStream_t stream, cudaEvent_t event, unsigned int flags)
{
	(void)flags;
	return stream_wait_event(stream_of(stream, 1), event);
}

API cudaError_t cudaEventSynchronize(cudaEvent_t event)
{
	if (!event)
		return cudaErrorInvalidResourceHandle;
	host_wait(event_time(event));
	return cudaSuccess;
}

API cudaError_t cudaEventQuery(cudaEvent_t event)
{
	if (!event)
		return cudaErrorInvalidResourceHandle;
	return query(event_time(event));
}

/* ---- exported API: memory ---- */

API cudaError_t cudaMalloc(void **devPtr, size_t size)
{
	return device_alloc(devPtr, size);
}

/* cudaFree synchronizes the device, as in CUDA. Addresses are never reused. */
API cudaError_t cudaFree(void *devPtr)
{
	(void)devPtr;
	device_wait();
	return cudaSuccess;
}

/* Stream-ordered allocation: no synchronization. */
API cudaError_t cudaMallocAsync(void **devPtr, size_t size, cudaStream_t hStream)
{
	(void)hStream;
	return device_alloc(devPtr, size);
}

API cudaError_t cudaMallocAsync_ptsz(void **devPtr, size_t size, cudaStream_t hStream)
{
	(void)hStream;
	return device_alloc(devPtr, size);
}

API cudaError_t cudaFreeAsync(void *devPtr, cudaStream_t hStream)
{
	(void)devPtr;
	(void)hStream;
	return cudaSuccess;
}

API cudaError_t cudaFreeAsync_ptsz(void *devPtr, cudaStream_t hStream)
{
	(void)devPtr;
	(void)hStream;
	return cudaSuccess;
}

API cudaError_t cudaHostAlloc(void **pHost, size_t size, unsigned int flags)
{
	(void)flags;
	return host_alloc(pHost, size);
}

API cudaError_t cudaMallocHost(void **ptr, size_t size)
{
	return host_alloc(ptr, size);
}

/* Like cudaFree, cudaFreeHost synchronizes the device: in-flight copies may
 * still be reading the pages. */
API cudaError_t cudaFreeHost(void *ptr)
{
	if (!ptr)
		return cudaSuccess;
	device_wait();
	pthread_mutex_lock(&mu);
	int found = pinned_remove_locked(ptr, 1);
	pthread_mutex_unlock(&mu);
	if (!found)
		return cudaErrorInvalidValue;
	free(ptr);
	return cudaSuccess;
}

API cudaError_t cudaHostRegister(void *ptr, size_t size, unsigned int flags)
{
	(void)flags;
	if (!ptr || !size)
		return cudaErrorInvalidValue;
	pthread_mutex_lock(&mu);
	cudaError_t err = pinned_add_locked(ptr, size, 0);
	pthread_mutex_unlock(&mu);
	return err;
}

API cudaError_t cudaHostUnregister(void *ptr)
{
	pthread_mutex_lock(&mu);
	int found = pinned_remove_locked(ptr, 0);
	pthread_mutex_unlock(&mu);
	return found ? cudaSuccess : cudaErrorHostMemoryNotRegistered;
}

/* ---- exported API: device ---- */

/* One modeled device, number 0. */
API cudaError_t cudaGetDevice(int *device)
{
	if (!device)
		return cudaErrorInvalidValue;
	*device = 0;
	return cudaSuccess;
}

API cudaError_t cudaSetDevice(int device)
{
	return device == 0 ? cudaSuccess : cudaErrorInvalidDevice;
}

/* No call leaves a sticky error behind. */
API cudaError_t cudaGetLastError(void)
{
	return cudaSuccess;
}
