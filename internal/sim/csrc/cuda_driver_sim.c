/*
 * cuda_driver_sim.c: a simulated CUDA driver, libcuda.so.1, that exports the
 * real driver entry points (names, prototypes; unversioned symbols, like the
 * real library) on top of a modeled GPU. The simulated runtime (cudart_sim.c)
 * is a thin layer that dlopen()s this library and calls it, as real cudart
 * does, and the simulated NCCL (nccl_sim.c) enqueues its collectives here, so
 * all three layers share one GPU.
 *
 * The modeled GPU: under one mutex, every stream keeps a clock, the
 * CLOCK_MONOTONIC time (ns) at which the last operation enqueued on it
 * completes. Enqueuing an operation of duration d starts it at
 * max(now, stream clock, implicit dependencies) and moves the clock to
 * start + d. The legacy default stream (handle 0 / CU_STREAM_LEGACY) waits for
 * every blocking stream and every blocking stream waits for it; non-blocking
 * streams are independent. Synchronizing calls sleep until the relevant clock.
 * Device memory is a range of fake addresses that is never dereferenced.
 *
 * Collectives whose ranks live in other processes (sim_enqueue_meeting, for
 * the simulated NCCL) end only once every rank has arrived, which is known
 * later, so a time of the model is max(t, met(m1) + o1, met(m2) + o2, ...)
 * over the meetings it waits for that are not met yet (struct when): every
 * enqueue, event edge and implicit dependency carries those terms along, as
 * the GPU would carry the wait, and a term folds into t once its meeting is
 * met. Synchronizing calls wait (asking, and sleeping in the meeting's
 * wait() between two questions) until their time has no terms left, then
 * sleep until it; queries report not ready while it has any. With no such
 * collective every time is a plain t and the model is as described above.
 *
 * Every exported function is its own noinline entry point (a tracer probes the
 * first instruction); none calls another exported function, so one API call
 * fires exactly one probe. Shared logic lives in static helpers. Each entry
 * point counts its calls, which sim_driver_calls reports, so a workload can
 * tell the calls it made from those its runtime made underneath.
 */
#define _GNU_SOURCE
#include "cuda_driver_sim.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Every entry point is its own function. GCC's noipa also keeps entry points
 * with identical bodies from being folded into one address by identical-code
 * folding. */
#if defined(__GNUC__) && !defined(__clang__)
#define API __attribute__((noinline, noipa, used, visibility("default")))
#else
#define API __attribute__((noinline, used, visibility("default")))
#endif
#define PRIVATE __attribute__((visibility("default")))

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
#define PITCH_ALIGN 512
/* cuMemCreate's handles: small values, far from device addresses. */
#define HANDLE_BASE ((uintptr_t)0x5a5a0000ULL)
#define PAGE_SIZE 4096

/* ---- call counters ---- */

enum driver_api {
#define X(name) DRV_##name,
	DRIVER_API_LIST(X)
#undef X
	DRV_COUNT
};

static const char *const driver_api_names[DRV_COUNT] = {
#define X(name) #name,
	DRIVER_API_LIST(X)
#undef X
};

static unsigned long driver_api_calls[DRV_COUNT];

/* A function, not an inline atomic: an entry point must not begin with a
 * LOCK-prefixed instruction, where the kernel refuses uprobes (ENOTSUPP). */
static __attribute__((noinline)) void count_call(enum driver_api i)
{
	__atomic_fetch_add(&driver_api_calls[i], 1, __ATOMIC_RELAXED);
}

#define COUNT(fn) count_call(DRV_##fn)

PRIVATE const char *sim_driver_calls(int i, unsigned long *calls)
{
	if (i < 0 || i >= DRV_COUNT)
		return NULL;
	if (calls)
		*calls = __atomic_load_n(&driver_api_calls[i], __ATOMIC_RELAXED);
	return driver_api_names[i];
}

/* ---- times that wait for meetings ---- */

/* max(t, met(term[i].m) + term[i].off) over n meetings not met yet, at most
 * one term per meeting. */
struct when {
	int64_t t;
	int n;
	struct term {
		struct sim_meeting *m;
		int64_t off;
	} term[SIM_MEETINGS_MAX];
};

static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

static void when_copy(struct when *dst, const struct when *src)
{
	dst->t = src->t;
	dst->n = src->n;
	memcpy(dst->term, src->term, (size_t)src->n * sizeof src->term[0]);
}

/* Folds the terms whose meetings are met into t. */
static void when_settle(struct when *w, int blocking)
{
	for (int i = 0; i < w->n;) {
		long long met = w->term[i].m->met(w->term[i].m, blocking);
		if (met < 0) {
			i++;
			continue;
		}
		w->t = max64(w->t, met + w->term[i].off);
		w->term[i] = w->term[--w->n];
	}
}

/* Whether w is known; then *t is it. */
static int when_known(struct when *w, int64_t *t)
{
	when_settle(w, 0);
	*t = w->t;
	return w->n == 0;
}

/* w = max(w, x). */
static void when_max(struct when *w, const struct when *x)
{
	w->t = max64(w->t, x->t);
	if (x->n == 0)
		return;
	when_settle(w, 0);
	for (int j = 0; j < x->n; j++) {
		const struct term *xt = &x->term[j];
		long long met = xt->m->met(xt->m, 0);
		if (met >= 0) {
			w->t = max64(w->t, met + xt->off);
			continue;
		}
		int i = 0;
		while (i < w->n && w->term[i].m != xt->m)
			i++;
		if (i < w->n) {
			w->term[i].off = max64(w->term[i].off, xt->off);
			continue;
		}
		/* Unmet terms name distinct meetings that this process enqueued
		 * and has not seen met: NCCL keeps them below SIM_MEETINGS_MAX. */
		if (w->n == SIM_MEETINGS_MAX)
			abort();
		w->term[w->n++] = *xt;
	}
}

/* w += d. */
static void when_add(struct when *w, int64_t d)
{
	w->t += d;
	for (int i = 0; i < w->n; i++)
		w->term[i].off += d;
}

/* ---- the model's state ---- */

struct CUstream_st {
	struct when clock; /* completion time of the last enqueued operation */
	int64_t busy;   /* modeled GPU time of the operations enqueued on it */
	int owner;      /* per-thread default stream: its thread's tid; else 0 */
	int device;     /* created stream: the runtime's current device then; else -1 */
	unsigned flags; /* CU_STREAM_NON_BLOCKING or not */
	struct CUgraph_st *capture; /* the graph its work is captured into, or NULL */
	struct CUstream_st *prev, *next; /* live-stream list, for implicit syncs */
};

struct CUevent_st {
	struct when time; /* completion time of the recorded work; 0 = never recorded */
	struct CUgraph_st *capture; /* recorded on a capturing stream: a wait on it joins the capture */
};

/* A page-locked host range: made by cuMemHostAlloc/cuMemAllocHost (owned, so
 * cuMemFreeHost frees it) or by cuMemHostRegister (not owned). */
struct pinned_range {
	uintptr_t start;
	size_t len;
	int owned;
};

/* A cuLaunchHostFunc callback that has not returned yet. */
struct hostfn {
	CUhostFn fn;
	void *data;
	struct when start, end; /* its slot on the modeled stream */
	struct hostfn *next;
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t hostfn_returned = PTHREAD_COND_INITIALIZER;

/* Everything below is guarded by mu. */
static struct CUstream_st legacy_stream;
static struct CUstream_st *streams; /* created and per-thread streams */
static struct when retired_clock; /* latest clock of a destroyed stream */
/* The busy time of destroyed streams, by handle, for sim_stream_busy. */
static struct retired_busy {
	const void *handle;
	int64_t busy;
	int owner;
} retired_busy[1024];
static int nretired_busy;
static uintptr_t device_next = DEVICE_BASE;
static uintptr_t handle_next = HANDLE_BASE;
/* With a memory budget (SIM_DEVICE_MEMORY), the live allocations and
 * cuMemCreate handles, and the bytes they hold. */
static struct device_block {
	uintptr_t p;
	size_t size;
} *device_blocks;
static size_t nblocks, cap_blocks, device_in_use;
static struct pinned_range *pinned;
static size_t npinned, cap_pinned;
static struct hostfn *hostfns;

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

/* The runtime's current device on the calling thread, where there is a
 * runtime (the driver has no per-thread device of its own), else 0. */
static int runtime_device(void)
{
	int (*device)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "sim_current_device");
	return device ? device() : 0;
}

static struct CUstream_st *stream_new(unsigned flags)
{
	struct CUstream_st *s = calloc(1, sizeof *s);
	if (!s)
		return NULL;
	s->flags = flags & CU_STREAM_NON_BLOCKING;
	s->device = runtime_device(); /* a created stream belongs to its device */
	pthread_mutex_lock(&mu);
	s->next = streams;
	if (streams)
		streams->prev = s;
	streams = s;
	pthread_mutex_unlock(&mu);
	return s;
}

/* Destroying a stream does not wait for its work (as in CUDA); its clock is
 * kept so cuCtxSynchronize still waits for that work. */
static void stream_retire(struct CUstream_st *s)
{
	pthread_mutex_lock(&mu);
	if (s->prev)
		s->prev->next = s->next;
	else
		streams = s->next;
	if (s->next)
		s->next->prev = s->prev;
	when_max(&retired_clock, &s->clock);
	if (nretired_busy < (int)(sizeof retired_busy / sizeof retired_busy[0]))
		retired_busy[nretired_busy++] = (struct retired_busy){ s, s->busy, s->owner };
	pthread_mutex_unlock(&mu);
	free(s);
}

/* The per-thread default stream (CU_STREAM_PER_THREAD, or 0 in _ptsz/_ptds
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
		thread_stream = stream_new(CU_STREAM_DEFAULT);
		if (!thread_stream)
			abort(); /* no stream to return: the caller has nowhere to report it */
		thread_stream->owner = (int)syscall(SYS_gettid);
		pthread_setspecific(thread_stream_key, thread_stream);
	}
	return thread_stream;
}

/* Maps a stream handle to its model; ptsz: the call is a _ptsz/_ptds form, in
 * which handle 0 names the per-thread default stream. */
static struct CUstream_st *stream_of(CUstream h, int ptsz)
{
	if (h == NULL)
		return ptsz ? per_thread_stream() : &legacy_stream;
	if (h == CU_STREAM_LEGACY)
		return &legacy_stream;
	if (h == CU_STREAM_PER_THREAD)
		return per_thread_stream();
	return h;
}

static int is_special_stream(CUstream h)
{
	return h == NULL || h == CU_STREAM_LEGACY || h == CU_STREAM_PER_THREAD;
}

/* ---- activity for the simulated CUPTI (cupti_sim.c) ---- */

/* While the simulated CUPTI records activity, every operation enqueued on
 * the modeled GPU is reported to it with its modeled start and end, and the
 * API call that enqueued it with a correlation id, the calling thread and
 * an interval inside the call, as real CUPTI reports them. */
static const struct sim_activity *activity;
static uint32_t activity_corr;

PRIVATE void sim_set_activity(const struct sim_activity *a)
{
	__atomic_store_n(&activity, a, __ATOMIC_RELEASE);
}

/* The kinds of operation, as sim_activity.op reports them; OP_GRAPH is a
 * graph launch's call (sim_activity.call). */
enum { OP_NONE, OP_KERNEL, OP_MEMCPY, OP_MEMSET, OP_GRAPH };

/* Enqueues an operation of dur ns on s, with mu held: s->clock becomes its
 * end. With a meeting m it starts no earlier than m is met, and *ready is
 * when it could start otherwise, as far as known now. */
static void enqueue_locked(struct CUstream_st *s, int64_t dur, struct sim_meeting *m, int64_t *ready)
{
	struct when *c = &s->clock;
	c->t = max64(c->t, now_ns());
	if (s == &legacy_stream) {
		for (struct CUstream_st *b = streams; b; b = b->next)
			if (!(b->flags & CU_STREAM_NON_BLOCKING))
				when_max(c, &b->clock);
	} else if (!(s->flags & CU_STREAM_NON_BLOCKING)) {
		when_max(c, &legacy_stream.clock);
	}
	if (m) {
		when_settle(c, 0);
		*ready = c->t;
		struct when after = { .t = c->t, .n = 1, .term = { { m, 0 } } };
		when_max(c, &after);
	}
	when_add(c, dur);
	s->busy += dur;
}

/* The modeled busy time of stream i (0: the legacy stream, then the live
 * streams, then destroyed ones), for workloads to report what a tracer's
 * bounds must contain; its handle in *handle, and for a per-thread default
 * stream its thread's tid in *owner (else 0). 0 past the last. */
PRIVATE int sim_stream_busy(int i, const void **handle, int *owner, long long *ns)
{
	int found = 0;
	pthread_mutex_lock(&mu);
	*owner = 0;
	if (i == 0) {
		*handle = NULL, *ns = legacy_stream.busy, found = 1;
	} else {
		int k = 1;
		for (struct CUstream_st *s = streams; s && !found; s = s->next, k++)
			if (k == i)
				*handle = s, *ns = s->busy, *owner = s->owner, found = 1;
		if (!found && i - k >= 0 && i - k < nretired_busy) {
			struct retired_busy *r = &retired_busy[i - k];
			*handle = r->handle, *ns = r->busy, *owner = r->owner, found = 1;
		}
	}
	pthread_mutex_unlock(&mu);
	return found;
}

/* An operation's record that waits for its time: CUPTI reports an operation
 * once it completes, so one whose end waits for a meeting is held here until
 * that end is known (the list is guarded by mu). */
struct late_op {
	const struct sim_activity *a;
	int kind, copy_kind, device;
	uint32_t corr, stream, graph;
	uint64_t bytes, node;
	int64_t dur;
	const char *name;
	struct late_op *next;
	struct when end;
};
static struct late_op *late_ops;

/* Reports the held records whose ends are known now. */
static void report_late_ops(void)
{
	if (!__atomic_load_n(&late_ops, __ATOMIC_ACQUIRE))
		return;
	struct late_op *known = NULL;
	pthread_mutex_lock(&mu);
	for (struct late_op **pp = &late_ops; *pp;) {
		struct late_op *l = *pp;
		int64_t t;
		if (!when_known(&l->end, &t)) {
			pp = &l->next;
			continue;
		}
		__atomic_store_n(pp, l->next, __ATOMIC_RELEASE);
		l->next = known;
		known = l;
	}
	pthread_mutex_unlock(&mu);
	while (known) {
		struct late_op *l = known;
		known = l->next;
		if (l->a == __atomic_load_n(&activity, __ATOMIC_ACQUIRE))
			l->a->op(l->kind, l->corr, l->end.t - l->dur, l->end.t, l->stream, l->bytes, l->copy_kind, l->name,
				 l->device, l->node, l->graph);
		free(l);
	}
}

/* A call that enqueues work, as the simulated CUPTI sees it while it
 * records (a == NULL: it does not): its correlation id, where its API
 * interval starts, and the device its work goes to. */
struct activity_call {
	const struct sim_activity *a;
	int64_t api_start;
	uint32_t corr;
	int device, kind;
};

/* activity_begin starts the call (kind OP_*) that enqueues on s: the
 * API interval starts here, inside the call. */
static void activity_begin(struct activity_call *c, struct CUstream_st *s, int kind)
{
	*c = (struct activity_call){ .a = __atomic_load_n(&activity, __ATOMIC_ACQUIRE), .kind = kind };
	if (!c->a || kind == OP_NONE) {
		c->a = NULL;
		return;
	}
	c->api_start = now_ns();
	report_late_ops();
	c->corr = __atomic_add_fetch(&activity_corr, 1, __ATOMIC_RELAXED);
	/* A created stream's device; a default stream's is the caller's. */
	c->device = s->owner || s == &legacy_stream ? runtime_device() : s->device;
	c->a->call(0, kind, c->corr);
}

/* activity_end ends it: the API interval ends when its work is queued. */
static void activity_end(struct activity_call *c)
{
	if (!c->a)
		return;
	c->a->api(c->corr, c->api_start, now_ns(), (uint32_t)syscall(SYS_gettid));
	c->a->call(1, c->kind, c->corr);
}

/* A graph being built (captured, or made node by node), an executable
 * graph, and their nodes: what each runs on the modeled GPU. Node ids are
 * unique in the process and handed out as nodes are made, as CUPTI's
 * graphNodeId is; instantiation clones every node in node order, and a
 * launch's records carry the clones' ids. */
struct CUgraphNode_st {
	int kind; /* OP_KERNEL, OP_MEMCPY, OP_MEMSET */
	int copy_kind;
	int64_t dur;
	uint64_t bytes;
	const char *name;
	uint64_t id;
};

struct CUgraph_st {
	struct CUgraphNode_st **nodes;
	int n, cap;
	uint32_t id;
	int capturing; /* a capture is recording into it */
};

struct exec_node {
	struct CUgraphNode_st *orig; /* the graph's node it was made of (cuGraphExecKernelNodeSetParams names it) */
	struct CUgraphNode_st run;   /* what it runs; run.id is the clone's */
};

struct CUgraphExec_st {
	struct exec_node *nodes;
	int n;
	uint32_t id;
	struct CUgraphExec_st *next; /* every live exec, under mu */
};

static uint64_t graph_node_ids; /* atomic */
static uint32_t graph_ids;      /* atomic */
static struct CUgraphExec_st *execs; /* guarded by mu */

/* graph_add appends a node that runs what node says (mu held); its handle,
 * or NULL out of memory. */
static struct CUgraphNode_st *graph_add_locked(struct CUgraph_st *g, const struct CUgraphNode_st *node)
{
	if (g->n == g->cap) {
		int cap = g->cap ? 2 * g->cap : 16;
		struct CUgraphNode_st **grown = realloc(g->nodes, cap * sizeof *grown);
		if (!grown)
			return NULL;
		g->nodes = grown;
		g->cap = cap;
	}
	struct CUgraphNode_st *x = malloc(sizeof *x);
	if (!x)
		return NULL;
	*x = *node;
	x->id = __atomic_add_fetch(&graph_node_ids, 1, __ATOMIC_RELAXED);
	g->nodes[g->n++] = x;
	return x;
}

/* op_locked enqueues an operation of dur ns on s (mu held), after meeting
 * m if not NULL (see enqueue_locked), and reports it for call c, as graph
 * node node (0: none) of graph: at once if its end is known, else once it
 * is. end, if not NULL, receives its end time; *t its end, if known. */
static int op_locked(struct activity_call *c, struct CUstream_st *s, int64_t dur, int kind, uint64_t bytes,
		     int copy_kind, const char *name, uint64_t node, uint32_t graph, struct sim_meeting *m,
		     int64_t *ready, struct when *end, int64_t *t)
{
	uint32_t stream = (uint32_t)((uintptr_t)s >> 4);
	enqueue_locked(s, dur, m, ready);
	if (end)
		when_copy(end, &s->clock);
	int known = 1;
	if (c->a && !(known = when_known(&s->clock, t))) {
		struct late_op *l = malloc(sizeof *l); /* out of memory: the record is lost */
		if (l) {
			*l = (struct late_op){ c->a, kind, copy_kind, c->device, c->corr, stream, graph, bytes, node, dur, name,
					       late_ops, { 0 } };
			when_copy(&l->end, &s->clock);
			__atomic_store_n(&late_ops, l, __ATOMIC_RELEASE);
		}
	}
	return known;
}

/* enqueue_op enqueues an operation of kind (OP_*), after meeting m if not
 * NULL (see enqueue_locked), and reports it to the simulated CUPTI when it
 * records: the API interval starts here, inside the API call, and ends when
 * the operation is queued. end, if not NULL, receives its end time. On a
 * capturing stream the operation is recorded into the graph instead (CUPTI
 * sees the call, not the operation). */
static void enqueue_op(struct CUstream_st *s, int64_t dur, int kind, uint64_t bytes, int copy_kind, const char *name,
		       struct sim_meeting *m, int64_t *ready, struct when *end)
{
	struct activity_call c;
	activity_begin(&c, s, kind);
	uint32_t stream = (uint32_t)((uintptr_t)s >> 4);
	int64_t t = 0;
	int known = 0;
	pthread_mutex_lock(&mu);
	if (s->capture && kind != OP_NONE) {
		struct CUgraphNode_st node = { .kind = kind, .copy_kind = copy_kind, .dur = dur, .bytes = bytes, .name = name };
		graph_add_locked(s->capture, &node); /* out of memory: the node is lost */
		if (end)
			when_copy(end, &s->clock);
		if (ready)
			*ready = s->clock.t;
	} else {
		known = op_locked(&c, s, dur, kind, bytes, copy_kind, name, 0, 0, m, ready, end, &t);
	}
	pthread_mutex_unlock(&mu);
	if (c.a && known)
		c.a->op(kind, c.corr, t - dur, t, stream, bytes, copy_kind, name, c.device, 0, 0);
	activity_end(&c);
}

/* NCCL's collectives run as kernels. */
#define NCCL_KERNEL "ncclDevKernel_AllReduce_Sum_f32_RING_LL"

PRIVATE CUresult sim_enqueue(CUstream hStream, long long duration_ns)
{
	enqueue_op(stream_of(hStream, 0), duration_ns > 0 ? duration_ns : 0, OP_KERNEL, 0, 0, NCCL_KERNEL, NULL, NULL,
		   NULL);
	return CUDA_SUCCESS;
}

PRIVATE CUresult sim_enqueue_meeting(CUstream hStream, long long duration_ns, struct sim_meeting *m, long long *ready)
{
	int64_t r = 0;
	enqueue_op(stream_of(hStream, 0), duration_ns > 0 ? duration_ns : 0, OP_KERNEL, 0, 0, NCCL_KERNEL, m, &r, NULL);
	*ready = r;
	return CUDA_SUCCESS;
}

/* ---- host callbacks and host-side waiting ---- */

/* Whether a callback due by time t has not returned yet (mu held). One
 * whose slot waits for a meeting is not due yet. */
static int hostfn_pending_locked(int64_t t)
{
	for (struct hostfn *h = hostfns; h; h = h->next) {
		int64_t end;
		if (when_known(&h->end, &end) && end <= t)
			return 1;
	}
	return 0;
}

static int64_t meeting_wait_ns; /* see sim_meeting_wait_ns */

PRIVATE long long sim_meeting_wait_ns(void)
{
	return __atomic_load_n(&meeting_wait_ns, __ATOMIC_RELAXED);
}

/* Waits until every meeting w waits for is met; returns w's time then.
 * blocking: the calling thread is the host's, blocked in an API call. */
static int64_t await_meetings(struct when *w, int blocking)
{
	when_settle(w, blocking);
	if (w->n == 0)
		return w->t;
	int64_t start = now_ns();
	while (w->n) {
		w->term[0].m->wait(w->term[0].m);
		when_settle(w, blocking);
	}
	if (blocking)
		__atomic_fetch_add(&meeting_wait_ns, now_ns() - start, __ATOMIC_RELAXED);
	return w->t;
}

/* Blocks the host until the modeled GPU reaches time w, including host
 * callbacks scheduled to finish by then. */
static void host_wait(const struct when *w)
{
	struct when until;
	when_copy(&until, w);
	int64_t t = await_meetings(&until, 1);
	sleep_until(t);
	pthread_mutex_lock(&mu);
	while (hostfn_pending_locked(t))
		pthread_cond_wait(&hostfn_returned, &mu);
	pthread_mutex_unlock(&mu);
	report_late_ops();
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
	sleep_until(await_meetings(&h->start, 0));
	h->fn(h->data);
	pthread_mutex_lock(&mu);
	hostfn_unlink_locked(h);
	pthread_cond_broadcast(&hostfn_returned);
	pthread_mutex_unlock(&mu);
	free(h);
	return NULL;
}

static CUresult launch_host_func(struct CUstream_st *s, CUhostFn fn, void *data)
{
	if (!fn)
		return CUDA_ERROR_INVALID_VALUE;
	struct hostfn *h = malloc(sizeof *h);
	if (!h)
		return CUDA_ERROR_OUT_OF_MEMORY;
	h->fn = fn;
	h->data = data;
	pthread_mutex_lock(&mu);
	enqueue_locked(s, HOSTFN_NS, NULL, NULL);
	when_copy(&h->end, &s->clock);
	when_copy(&h->start, &s->clock);
	when_add(&h->start, -HOSTFN_NS);
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
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	return CUDA_SUCCESS;
}

/* Latest completion time over every stream, destroyed ones included. */
static void device_clock(struct when *w)
{
	pthread_mutex_lock(&mu);
	when_copy(w, &legacy_stream.clock);
	when_max(w, &retired_clock);
	for (struct CUstream_st *s = streams; s; s = s->next)
		when_max(w, &s->clock);
	pthread_mutex_unlock(&mu);
}

static void device_wait(void)
{
	struct when w;
	device_clock(&w);
	host_wait(&w);
	pthread_mutex_lock(&mu);
	while (hostfns)
		pthread_cond_wait(&hostfn_returned, &mu);
	pthread_mutex_unlock(&mu);
}

/* ---- memory ---- */

static int is_device_locked(uintptr_t p)
{
	return p >= DEVICE_BASE && p < device_next;
}

/* The pinned range containing p, or NULL (mu held). */
static struct pinned_range *pinned_find_locked(uintptr_t p)
{
	for (size_t i = 0; i < npinned; i++)
		if (p - pinned[i].start < pinned[i].len)
			return &pinned[i];
	return NULL;
}

static CUresult pinned_add_locked(void *p, size_t len, int owned)
{
	for (size_t i = 0; i < npinned; i++)
		if ((uintptr_t)p < pinned[i].start + pinned[i].len && pinned[i].start < (uintptr_t)p + len)
			return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
	if (npinned == cap_pinned) {
		size_t cap = cap_pinned ? 2 * cap_pinned : 16;
		struct pinned_range *grown = realloc(pinned, cap * sizeof *grown);
		if (!grown)
			return CUDA_ERROR_OUT_OF_MEMORY;
		pinned = grown;
		cap_pinned = cap;
	}
	pinned[npinned++] = (struct pinned_range){ (uintptr_t)p, len, owned };
	return CUDA_SUCCESS;
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

/*
 * The device's memory: SIM_DEVICE_MEMORY=BYTES gives it that much, and an
 * allocation (or cuMemCreate) that does not fit in what is left fails with
 * CUDA_ERROR_OUT_OF_MEMORY, as on a real device; frees give it back. Read
 * at each allocation, so a program may set it before its first. Unset (or
 * 0), memory is unlimited and not followed.
 */
static size_t device_budget(void)
{
	const char *v = getenv("SIM_DEVICE_MEMORY");
	return v ? strtoull(v, NULL, 0) : 0;
}

/* Takes len bytes for the address or handle *next, which moves on by step
 * (mu held). */
static CUresult take_locked(uintptr_t *next, size_t len, size_t step, uintptr_t *p)
{
	size_t budget = device_budget();
	if (budget) {
		if (len > budget - (device_in_use < budget ? device_in_use : budget))
			return CUDA_ERROR_OUT_OF_MEMORY;
		if (nblocks == cap_blocks) {
			size_t cap = cap_blocks ? 2 * cap_blocks : 64;
			struct device_block *b = realloc(device_blocks, cap * sizeof *b);
			if (!b)
				return CUDA_ERROR_OUT_OF_MEMORY;
			device_blocks = b;
			cap_blocks = cap;
		}
		device_blocks[nblocks++] = (struct device_block){ *next, len };
		device_in_use += len;
	}
	*p = *next;
	*next += step;
	return CUDA_SUCCESS;
}

/* Size 0 gives address 0, as cudaMalloc does. */
static CUresult device_alloc(CUdeviceptr *p, size_t size)
{
	if (!p)
		return CUDA_ERROR_INVALID_VALUE;
	if (size == 0) {
		*p = 0;
		return CUDA_SUCCESS;
	}
	uintptr_t at;
	pthread_mutex_lock(&mu);
	size_t len = (size + DEVICE_ALIGN - 1) / DEVICE_ALIGN * DEVICE_ALIGN;
	CUresult err = take_locked(&device_next, len, len, &at);
	pthread_mutex_unlock(&mu);
	if (!err)
		*p = at;
	return err;
}

/* Gives back the allocation or handle p, when memory is followed. */
static void device_release(uintptr_t p)
{
	pthread_mutex_lock(&mu);
	for (size_t i = 0; i < nblocks; i++) {
		if (device_blocks[i].p == p) {
			device_in_use -= device_blocks[i].size;
			device_blocks[i] = device_blocks[--nblocks];
			break;
		}
	}
	pthread_mutex_unlock(&mu);
}

static CUresult host_alloc(void **p, size_t size)
{
	if (!p)
		return CUDA_ERROR_INVALID_VALUE;
	size_t len = size ? (size + PAGE_SIZE - 1) / PAGE_SIZE * PAGE_SIZE : PAGE_SIZE;
	/* Shared anonymous memory, as the real driver maps pinned host memory:
	 * /proc/PID/maps shows it as "/dev/zero (deleted)", rw-s. */
	void *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED)
		return CUDA_ERROR_OUT_OF_MEMORY;
	pthread_mutex_lock(&mu);
	CUresult err = pinned_add_locked(m, len, 1);
	pthread_mutex_unlock(&mu);
	if (err) {
		munmap(m, len);
		return err;
	}
	*p = m;
	return CUDA_SUCCESS;
}

/* cuMemFreeHost synchronizes the device: in-flight copies may still be
 * reading the pages. */
static CUresult host_free(void *p)
{
	if (!p)
		return CUDA_SUCCESS;
	device_wait();
	pthread_mutex_lock(&mu);
	size_t len = 0;
	for (size_t i = 0; i < npinned; i++)
		if (pinned[i].start == (uintptr_t)p && pinned[i].owned)
			len = pinned[i].len;
	int found = pinned_remove_locked(p, 1);
	pthread_mutex_unlock(&mu);
	if (!found)
		return CUDA_ERROR_INVALID_VALUE;
	munmap(p, len);
	return CUDA_SUCCESS;
}

static CUresult host_register(void *p, size_t size)
{
	if (!p || !size)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&mu);
	CUresult err = pinned_add_locked(p, size, 0);
	pthread_mutex_unlock(&mu);
	return err;
}

static CUresult host_unregister(void *p)
{
	pthread_mutex_lock(&mu);
	int found = pinned_remove_locked(p, 0);
	pthread_mutex_unlock(&mu);
	return found ? CUDA_SUCCESS : CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
}

/* ---- copies and sets ---- */

/* Where each side of a copy lives: host or device memory. UNIFIED sides are
 * resolved by address (mu held). */
static int on_device_locked(CUmemorytype t, uintptr_t p)
{
	return t == CU_MEMORYTYPE_UNIFIED ? is_device_locked(p) : t == CU_MEMORYTYPE_DEVICE;
}

/* A (2D) copy of height rows of width bytes on s, between memories of types
 * dt and st (host, device or unified). sync: the API call is synchronous. An
 * async copy whose host side is pageable is synchronous for the host too, as
 * in CUDA (it goes through a staging buffer). */
static CUresult copy(CUmemorytype dt, uintptr_t dst, size_t dpitch, CUmemorytype st, uintptr_t src,
		     size_t spitch, size_t width, size_t height, struct CUstream_st *s, int sync)
{
	if (dt < CU_MEMORYTYPE_HOST || dt > CU_MEMORYTYPE_UNIFIED || dt == CU_MEMORYTYPE_ARRAY ||
	    st < CU_MEMORYTYPE_HOST || st > CU_MEMORYTYPE_UNIFIED || st == CU_MEMORYTYPE_ARRAY)
		return CUDA_ERROR_INVALID_VALUE;
	if (width > dpitch || width > spitch)
		return CUDA_ERROR_INVALID_VALUE;
	if ((!dst || !src) && width && height)
		return CUDA_ERROR_INVALID_VALUE;

	pthread_mutex_lock(&mu);
	int dst_dev = on_device_locked(dt, dst), src_dev = on_device_locked(st, src);
	int pageable = (!src_dev && !pinned_find_locked(src)) || (!dst_dev && !pinned_find_locked(dst));
	pthread_mutex_unlock(&mu);
	/* CUPTI's copy kinds: 1 HtoD, 2 DtoH, 8 DtoD, 10 HtoH. */
	int kind = src_dev ? (dst_dev ? 8 : 2) : (dst_dev ? 1 : 10);
	struct when end;
	enqueue_op(s, MEMCPY_BASE_NS + (int64_t)(width * height / MEMCPY_BYTES_PER_NS), OP_MEMCPY, width * height, kind,
		   NULL, NULL, NULL, sync || pageable ? &end : NULL);
	if (sync || pageable)
		host_wait(&end);

	/* Host memory is real: write what a copy would leave there. Device memory
	 * holds nothing, so reads from it come back as zeros. */
	if (dst_dev)
		return CUDA_SUCCESS;
	for (size_t row = 0; row < height; row++) {
		char *d = (char *)dst + row * dpitch;
		if (src_dev)
			memset(d, 0, width);
		else
			memmove(d, (const char *)src + row * spitch, width);
	}
	return CUDA_SUCCESS;
}

/* A 1D copy: a 2D copy of one row. */
static CUresult copy1(CUmemorytype dt, uintptr_t dst, CUmemorytype st, uintptr_t src, size_t n,
		      struct CUstream_st *s, int sync)
{
	return copy(dt, dst, n, st, src, n, n, 1, s, sync);
}

static CUresult copy2d(const CUDA_MEMCPY2D *c, struct CUstream_st *s, int sync)
{
	if (!c)
		return CUDA_ERROR_INVALID_VALUE;
	uintptr_t src = c->srcMemoryType == CU_MEMORYTYPE_HOST ? (uintptr_t)c->srcHost : (uintptr_t)c->srcDevice;
	uintptr_t dst = c->dstMemoryType == CU_MEMORYTYPE_HOST ? (uintptr_t)c->dstHost : (uintptr_t)c->dstDevice;
	src += c->srcY * c->srcPitch + c->srcXInBytes;
	dst += c->dstY * c->dstPitch + c->dstXInBytes;
	return copy(c->dstMemoryType, dst, c->dstPitch, c->srcMemoryType, src, c->srcPitch, c->WidthInBytes,
		    c->Height, s, sync);
}

static CUresult set(size_t bytes, struct CUstream_st *s, int sync)
{
	struct when end;
	enqueue_op(s, MEMSET_BASE_NS + (int64_t)(bytes / MEMSET_BYTES_PER_NS), OP_MEMSET, bytes, 0, NULL, NULL, NULL,
		   sync ? &end : NULL);
	if (sync)
		host_wait(&end);
	return CUDA_SUCCESS;
}

/* ---- launches ---- */

static const char *func_name(CUfunction f); /* for the simulated CUPTI */

/* SIM_LAUNCH_HOST_US: host time each launch takes at least (a busy wait,
 * as a real launch spends in the driver), so that tests can tell a launch
 * timed from one not: its measured time is never below it. */
static int64_t launch_host_ns(void)
{
	static int64_t ns = -1;
	if (ns < 0) {
		const char *v = getenv("SIM_LAUNCH_HOST_US");
		ns = v ? (int64_t)atoi(v) * 1000 : 0;
	}
	return ns;
}

static CUresult launch(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
		       unsigned bz, struct CUstream_st *s)
{
	if (!f)
		return CUDA_ERROR_INVALID_HANDLE;
	if (!gx || !gy || !gz || !bx || !by || !bz)
		return CUDA_ERROR_INVALID_VALUE;
	if (launch_host_ns() > 0) {
		int64_t until = now_ns() + launch_host_ns();
		while (now_ns() < until)
			;
	}
	enqueue_op(s, (int64_t)gx * gy * gz * KERNEL_NS_PER_BLOCK, OP_KERNEL, 0, 0, func_name(f), NULL, NULL, NULL);
	return CUDA_SUCCESS;
}

static CUresult launch_ex(const CUlaunchConfig *c, CUfunction f, int ptsz)
{
	if (!c)
		return CUDA_ERROR_INVALID_VALUE;
	return launch(f, c->gridDimX, c->gridDimY, c->gridDimZ, c->blockDimX, c->blockDimY, c->blockDimZ,
		      stream_of(c->hStream, ptsz));
}

/* graph_launch runs exec x's nodes on s, in node order, under one call:
 * every record carries its correlation id and its node's clone id, as
 * CUPTI's do. A handle the simulator did not make runs one GRAPH_NS kernel
 * (a graph nothing here built, as scenario all launches). */
static CUresult graph_launch(CUgraphExec x, struct CUstream_st *s)
{
	if (!x)
		return CUDA_ERROR_INVALID_HANDLE;
	pthread_mutex_lock(&mu);
	struct CUgraphExec_st *e = execs;
	while (e && e != x)
		e = e->next;
	pthread_mutex_unlock(&mu);
	if (!e) {
		enqueue_op(s, GRAPH_NS, OP_KERNEL, 0, 0, "sim_graph_kernel", NULL, NULL, NULL);
		return CUDA_SUCCESS;
	}
	struct activity_call c;
	activity_begin(&c, s, OP_GRAPH);
	uint32_t stream = (uint32_t)((uintptr_t)s >> 4);
	pthread_mutex_lock(&mu);
	if (s->capture) {
		/* Launched into a capture: its nodes join the graph. */
		for (int i = 0; i < x->n; i++)
			graph_add_locked(s->capture, &x->nodes[i].run);
		pthread_mutex_unlock(&mu);
		activity_end(&c);
		return CUDA_SUCCESS;
	}
	for (int i = 0; i < x->n; i++) {
		const struct CUgraphNode_st *n = &x->nodes[i].run;
		int64_t t = 0;
		int known = op_locked(&c, s, n->dur, n->kind, n->bytes, n->copy_kind, n->name, n->id, x->id, NULL, NULL,
				      NULL, &t);
		if (c.a && known) {
			/* Reported under mu: the records of one launch stay in
			 * node order (CUPTI's client may see them in any). */
			c.a->op(n->kind, c.corr, t - n->dur, t, stream, n->bytes, n->copy_kind, n->name, c.device, n->id,
				x->id);
		}
	}
	pthread_mutex_unlock(&mu);
	activity_end(&c);
	return CUDA_SUCCESS;
}

/* ---- graphs: capture, explicit construction, instantiation, update ---- */

static struct CUgraph_st *graph_new(void)
{
	struct CUgraph_st *g = calloc(1, sizeof *g);
	if (g)
		g->id = __atomic_add_fetch(&graph_ids, 1, __ATOMIC_RELAXED);
	return g;
}

static void graph_free(struct CUgraph_st *g)
{
	for (int i = 0; i < g->n; i++)
		free(g->nodes[i]);
	free(g->nodes);
	free(g);
}

/* Capture: work enqueued on s is recorded into a new graph until
 * cuStreamEndCapture; a stream that waits on an event recorded on it joins
 * the capture. */
static CUresult begin_capture(struct CUstream_st *s)
{
	struct CUgraph_st *g = graph_new();
	if (!g)
		return CUDA_ERROR_OUT_OF_MEMORY;
	pthread_mutex_lock(&mu);
	CUresult err = CUDA_SUCCESS;
	if (s->capture) {
		err = CUDA_ERROR_INVALID_VALUE; /* cudaErrorStreamCaptureUnsupported and the like */
	} else {
		g->capturing = 1;
		s->capture = g;
	}
	pthread_mutex_unlock(&mu);
	if (err)
		free(g);
	return err;
}

static CUresult end_capture(struct CUstream_st *s, CUgraph *phGraph)
{
	if (!phGraph)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&mu);
	struct CUgraph_st *g = s->capture;
	if (g) {
		g->capturing = 0;
		if (legacy_stream.capture == g)
			legacy_stream.capture = NULL;
		for (struct CUstream_st *o = streams; o; o = o->next)
			if (o->capture == g)
				o->capture = NULL;
	}
	pthread_mutex_unlock(&mu);
	if (!g)
		return CUDA_ERROR_INVALID_VALUE; /* not capturing */
	*phGraph = g;
	return CUDA_SUCCESS;
}

/* A kernel node's run: its duration from the grid, as a launch's. */
static CUresult kernel_node(struct CUgraphNode_st *n, const CUDA_KERNEL_NODE_PARAMS *p)
{
	if (!p || !p->func)
		return CUDA_ERROR_INVALID_VALUE;
	if (!p->gridDimX || !p->gridDimY || !p->gridDimZ || !p->blockDimX || !p->blockDimY || !p->blockDimZ)
		return CUDA_ERROR_INVALID_VALUE;
	*n = (struct CUgraphNode_st){ .kind = OP_KERNEL, .name = func_name(p->func),
				      .dur = (int64_t)p->gridDimX * p->gridDimY * p->gridDimZ * KERNEL_NS_PER_BLOCK };
	return CUDA_SUCCESS;
}

static CUresult add_kernel_node(CUgraphNode *phNode, CUgraph g, const CUDA_KERNEL_NODE_PARAMS *p)
{
	if (!phNode || !g)
		return CUDA_ERROR_INVALID_VALUE;
	struct CUgraphNode_st n;
	CUresult err = kernel_node(&n, p);
	if (err)
		return err;
	pthread_mutex_lock(&mu);
	struct CUgraphNode_st *x = graph_add_locked(g, &n);
	pthread_mutex_unlock(&mu);
	if (!x)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*phNode = x;
	return CUDA_SUCCESS;
}

static CUresult instantiate(CUgraphExec *phExec, CUgraph g)
{
	if (!phExec || !g || g->capturing)
		return CUDA_ERROR_INVALID_VALUE;
	struct CUgraphExec_st *x = calloc(1, sizeof *x);
	if (!x || (g->n && !(x->nodes = calloc(g->n, sizeof *x->nodes)))) {
		free(x);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	pthread_mutex_lock(&mu);
	x->n = g->n;
	x->id = __atomic_add_fetch(&graph_ids, 1, __ATOMIC_RELAXED);
	for (int i = 0; i < g->n; i++) {
		x->nodes[i].orig = g->nodes[i];
		x->nodes[i].run = *g->nodes[i];
		x->nodes[i].run.id = __atomic_add_fetch(&graph_node_ids, 1, __ATOMIC_RELAXED);
	}
	x->next = execs;
	execs = x;
	pthread_mutex_unlock(&mu);
	*phExec = x;
	return CUDA_SUCCESS;
}

/* exec_set_kernel gives the exec's clone of node its new parameters. */
static CUresult exec_set_kernel(CUgraphExec x, CUgraphNode node, const CUDA_KERNEL_NODE_PARAMS *p)
{
	struct CUgraphNode_st n;
	CUresult err = kernel_node(&n, p);
	if (err)
		return err;
	if (!x || !node)
		return CUDA_ERROR_INVALID_VALUE;
	err = CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&mu);
	for (int i = 0; i < x->n; i++) {
		if (x->nodes[i].orig == node && x->nodes[i].run.kind == OP_KERNEL) {
			n.id = x->nodes[i].run.id;
			x->nodes[i].run = n;
			err = CUDA_SUCCESS;
		}
	}
	pthread_mutex_unlock(&mu);
	return err;
}

/* exec_update gives the exec the parameters of g's nodes: g must have the
 * exec's topology (here: as many nodes, of the same kinds, in order). The
 * clones keep their ids. */
static CUresult exec_update(CUgraphExec x, CUgraph g, CUgraphExecUpdateResultInfo *info)
{
	if (!x || !g || !info)
		return CUDA_ERROR_INVALID_VALUE;
	int ok = x->n == g->n;
	pthread_mutex_lock(&mu);
	for (int i = 0; ok && i < x->n; i++)
		ok = x->nodes[i].run.kind == g->nodes[i]->kind;
	for (int i = 0; ok && i < x->n; i++) {
		uint64_t id = x->nodes[i].run.id;
		x->nodes[i].orig = g->nodes[i];
		x->nodes[i].run = *g->nodes[i];
		x->nodes[i].run.id = id;
	}
	pthread_mutex_unlock(&mu);
	*info = (CUgraphExecUpdateResultInfo){ .result = ok ? 0 : 2 /* CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED */ };
	return ok ? CUDA_SUCCESS : 910; /* CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE */
}

static CUresult exec_destroy(CUgraphExec x)
{
	pthread_mutex_lock(&mu);
	struct CUgraphExec_st **pp = &execs;
	while (*pp && *pp != x)
		pp = &(*pp)->next;
	if (*pp)
		*pp = x->next;
	pthread_mutex_unlock(&mu);
	if (!x)
		return CUDA_ERROR_INVALID_VALUE;
	free(x->nodes);
	free(x);
	return CUDA_SUCCESS;
}

static CUresult graph_destroy(CUgraph g)
{
	if (!g || g->capturing)
		return CUDA_ERROR_INVALID_VALUE;
	/* An exec made of it keeps its clones; cuGraphExecUpdate no longer
	 * names its nodes. */
	pthread_mutex_lock(&mu);
	for (struct CUgraphExec_st *x = execs; x; x = x->next)
		for (int i = 0; i < x->n; i++)
			for (int j = 0; j < g->n; j++)
				if (x->nodes[i].orig == g->nodes[j])
					x->nodes[i].orig = NULL;
	pthread_mutex_unlock(&mu);
	graph_free(g);
	return CUDA_SUCCESS;
}

/* ---- events ---- */

static CUresult event_create(CUevent *e)
{
	if (!e)
		return CUDA_ERROR_INVALID_VALUE;
	*e = calloc(1, sizeof **e);
	return *e ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

/* Recording is a zero-length operation, so it inherits the stream's implicit
 * dependencies (an event on the legacy stream covers the blocking streams). */
static CUresult event_record(CUevent e, struct CUstream_st *s)
{
	if (!e)
		return CUDA_ERROR_INVALID_HANDLE;
	pthread_mutex_lock(&mu);
	e->capture = s->capture;
	if (!s->capture) {
		enqueue_locked(s, 0, NULL, NULL);
		when_copy(&e->time, &s->clock);
	}
	pthread_mutex_unlock(&mu);
	return CUDA_SUCCESS;
}

/* A wait on an event recorded in a capture joins the capture (CUDA's
 * fork): the stream's work goes into the graph until the capture ends. */
static CUresult stream_wait_event(struct CUstream_st *s, CUevent e)
{
	if (!e)
		return CUDA_ERROR_INVALID_HANDLE;
	pthread_mutex_lock(&mu);
	if (e->capture && e->capture->capturing)
		s->capture = e->capture;
	else if (!s->capture)
		when_max(&s->clock, &e->time);
	pthread_mutex_unlock(&mu);
	return CUDA_SUCCESS;
}

/* Ready once the meetings w waits for are met, the GPU passed w and the
 * host callbacks due by then returned. */
static CUresult query(struct when *w)
{
	int64_t t;
	pthread_mutex_lock(&mu);
	int busy = !when_known(w, &t) || now_ns() < t || hostfn_pending_locked(t);
	pthread_mutex_unlock(&mu);
	if (!busy)
		report_late_ops();
	return busy ? CUDA_ERROR_NOT_READY : CUDA_SUCCESS;
}

static void stream_clock(struct CUstream_st *s, struct when *w)
{
	pthread_mutex_lock(&mu);
	when_copy(w, &s->clock);
	pthread_mutex_unlock(&mu);
}

static void event_time(CUevent e, struct when *w)
{
	pthread_mutex_lock(&mu);
	when_copy(w, &e->time);
	pthread_mutex_unlock(&mu);
}

/* ---- modules, libraries, kernels, functions ---- */

/* Handles live until exit: the model never unloads code. */
struct CUmod_st {
	int unused;
};

struct CUlib_st {
	int unused;
};

/* A function: looked up by name in a module or library, or standing for a
 * runtime host stub. */
struct CUfunc_st {
	const void *owner; /* module, library, or the stub */
	char *name;        /* NULL for a stub */
	struct CUfunc_st *next;
};

struct CUkern_st {
	CUlibrary lib;
	char *name;
	struct CUfunc_st *func; /* what cuKernelGetFunction returns */
	struct CUkern_st *next;
};

/* The name CUPTI would give a kernel: its module's name for it; a runtime
 * stub's kernel has the stub's symbol there, not known here. */
static const char *func_name(CUfunction f) { return f->name ? f->name : "sim_stub_kernel"; }

static pthread_mutex_t handles_mu = PTHREAD_MUTEX_INITIALIZER;
static struct CUfunc_st *functions; /* guarded by handles_mu */
static struct CUkern_st *kernels;   /* guarded by handles_mu */

/* The function of owner named name (NULL: the stub owner), made on first
 * use, so repeated lookups return the same handle (handles_mu held). */
static struct CUfunc_st *function_locked(const void *owner, const char *name)
{
	for (struct CUfunc_st *f = functions; f; f = f->next)
		if (f->owner == owner && (f->name == name || (f->name && name && strcmp(f->name, name) == 0)))
			return f;
	struct CUfunc_st *f = calloc(1, sizeof *f);
	if (!f)
		return NULL;
	if (name && !(f->name = strdup(name))) {
		free(f);
		return NULL;
	}
	f->owner = owner;
	f->next = functions;
	functions = f;
	return f;
}

PRIVATE CUfunction sim_function_for_stub(const void *stub)
{
	if (!stub)
		return NULL;
	pthread_mutex_lock(&handles_mu);
	struct CUfunc_st *f = function_locked(stub, NULL);
	pthread_mutex_unlock(&handles_mu);
	return f;
}

static CUresult module_get_function(CUfunction *hfunc, CUmodule hmod, const char *name)
{
	if (!hfunc || !name)
		return CUDA_ERROR_INVALID_VALUE;
	if (!hmod)
		return CUDA_ERROR_INVALID_HANDLE;
	pthread_mutex_lock(&handles_mu);
	*hfunc = function_locked(hmod, name);
	pthread_mutex_unlock(&handles_mu);
	return *hfunc ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

static CUresult library_get_kernel(CUkernel *pKernel, CUlibrary lib, const char *name)
{
	if (!pKernel || !name)
		return CUDA_ERROR_INVALID_VALUE;
	if (!lib)
		return CUDA_ERROR_INVALID_HANDLE;
	CUresult err = CUDA_SUCCESS;
	pthread_mutex_lock(&handles_mu);
	struct CUkern_st *k;
	for (k = kernels; k; k = k->next)
		if (k->lib == lib && strcmp(k->name, name) == 0)
			break;
	if (!k) {
		/* The kernel's function is a handle of its own, as in CUDA. */
		k = calloc(1, sizeof *k);
		if (k && (k->name = strdup(name)) && (k->func = function_locked(lib, name))) {
			k->lib = lib;
			k->next = kernels;
			kernels = k;
		} else {
			if (k)
				free(k->name);
			free(k);
			k = NULL;
			err = CUDA_ERROR_OUT_OF_MEMORY;
		}
	}
	pthread_mutex_unlock(&handles_mu);
	*pKernel = k;
	return err;
}

/* ---- exported API: initialization and code loading ---- */

/* The injection mechanism of the real driver: the library named by
 * CUDA_INJECTION64_PATH is loaded at the first cuInit and its
 * InitializeInjection called, before any work reaches the GPU. */
static void load_injection(void)
{
	const char *path = getenv("CUDA_INJECTION64_PATH");
	if (!path || !*path)
		return;
	void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!lib)
		return;
	int (*init)(void) = (int (*)(void))dlsym(lib, "InitializeInjection");
	if (init)
		init();
}

API CUresult cuInit(unsigned int Flags)
{
	static pthread_once_t injection = PTHREAD_ONCE_INIT;
	COUNT(cuInit);
	pthread_once(&injection, load_injection);
	return Flags == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* The image is not read: every module holds every kernel name. */
API CUresult cuModuleLoadData(CUmodule *module, const void *image)
{
	COUNT(cuModuleLoadData);
	if (!module || !image)
		return CUDA_ERROR_INVALID_VALUE;
	*module = calloc(1, sizeof **module);
	return *module ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

API CUresult cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name)
{
	COUNT(cuModuleGetFunction);
	return module_get_function(hfunc, hmod, name);
}

API CUresult cuLibraryLoadData(CUlibrary *library, const void *code, CUjit_option *jitOptions,
			       void **jitOptionsValues, unsigned int numJitOptions, CUlibraryOption *libraryOptions,
			       void **libraryOptionValues, unsigned int numLibraryOptions)
{
	COUNT(cuLibraryLoadData);
	(void)jitOptions;
	(void)jitOptionsValues;
	(void)numJitOptions;
	(void)libraryOptions;
	(void)libraryOptionValues;
	(void)numLibraryOptions;
	if (!library || !code)
		return CUDA_ERROR_INVALID_VALUE;
	*library = calloc(1, sizeof **library);
	return *library ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

API CUresult cuLibraryGetKernel(CUkernel *pKernel, CUlibrary library, const char *name)
{
	COUNT(cuLibraryGetKernel);
	return library_get_kernel(pKernel, library, name);
}

API CUresult cuKernelGetFunction(CUfunction *pFunc, CUkernel kernel)
{
	COUNT(cuKernelGetFunction);
	if (!pFunc)
		return CUDA_ERROR_INVALID_VALUE;
	if (!kernel)
		return CUDA_ERROR_INVALID_HANDLE;
	*pFunc = kernel->func;
	return CUDA_SUCCESS;
}

/* ---- exported API: streams ---- */

/* Priorities do not change the model: streams never compete for the GPU. */
static CUresult stream_create(CUstream *p, unsigned flags)
{
	if (!p)
		return CUDA_ERROR_INVALID_VALUE;
	*p = stream_new(flags);
	return *p ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

API CUresult cuStreamCreate(CUstream *phStream, unsigned int Flags)
{
	COUNT(cuStreamCreate);
	return stream_create(phStream, Flags);
}

API CUresult cuStreamCreateWithPriority(CUstream *phStream, unsigned int flags, int priority)
{
	COUNT(cuStreamCreateWithPriority);
	(void)priority;
	return stream_create(phStream, flags);
}

API CUresult cuStreamDestroy_v2(CUstream hStream)
{
	COUNT(cuStreamDestroy_v2);
	if (is_special_stream(hStream))
		return CUDA_ERROR_INVALID_HANDLE;
	stream_retire(hStream);
	return CUDA_SUCCESS;
}

API CUresult cuStreamSynchronize(CUstream hStream)
{
	COUNT(cuStreamSynchronize);
	struct when w;
	stream_clock(stream_of(hStream, 0), &w);
	host_wait(&w);
	return CUDA_SUCCESS;
}

API CUresult cuStreamSynchronize_ptsz(CUstream hStream)
{
	COUNT(cuStreamSynchronize_ptsz);
	struct when w;
	stream_clock(stream_of(hStream, 1), &w);
	host_wait(&w);
	return CUDA_SUCCESS;
}

API CUresult cuStreamQuery(CUstream hStream)
{
	COUNT(cuStreamQuery);
	struct when w;
	stream_clock(stream_of(hStream, 0), &w);
	return query(&w);
}

API CUresult cuStreamQuery_ptsz(CUstream hStream)
{
	COUNT(cuStreamQuery_ptsz);
	struct when w;
	stream_clock(stream_of(hStream, 1), &w);
	return query(&w);
}

API CUresult cuCtxSynchronize(void)
{
	COUNT(cuCtxSynchronize);
	device_wait();
	return CUDA_SUCCESS;
}

/* ---- exported API: launches ---- */

API CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
			    unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
			    unsigned int sharedMemBytes, CUstream hStream, void **kernelParams, void **extra)
{
	COUNT(cuLaunchKernel);
	(void)sharedMemBytes;
	(void)kernelParams;
	(void)extra;
	return launch(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, stream_of(hStream, 0));
}

API CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
				 unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
				 unsigned int sharedMemBytes, CUstream hStream, void **kernelParams, void **extra)
{
	COUNT(cuLaunchKernel_ptsz);
	(void)sharedMemBytes;
	(void)kernelParams;
	(void)extra;
	return launch(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, stream_of(hStream, 1));
}

API CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **kernelParams, void **extra)
{
	COUNT(cuLaunchKernelEx);
	(void)kernelParams;
	(void)extra;
	return launch_ex(config, f, 0);
}

API CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f, void **kernelParams, void **extra)
{
	COUNT(cuLaunchKernelEx_ptsz);
	(void)kernelParams;
	(void)extra;
	return launch_ex(config, f, 1);
}

API CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
				       unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
				       unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
				       void **kernelParams)
{
	COUNT(cuLaunchCooperativeKernel);
	(void)sharedMemBytes;
	(void)kernelParams;
	return launch(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, stream_of(hStream, 0));
}

API CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
					    unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
					    unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
					    void **kernelParams)
{
	COUNT(cuLaunchCooperativeKernel_ptsz);
	(void)sharedMemBytes;
	(void)kernelParams;
	return launch(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, stream_of(hStream, 1));
}

API CUresult cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream)
{
	COUNT(cuGraphLaunch);
	return graph_launch(hGraphExec, stream_of(hStream, 0));
}

API CUresult cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream)
{
	COUNT(cuGraphLaunch_ptsz);
	return graph_launch(hGraphExec, stream_of(hStream, 1));
}

API CUresult cuStreamBeginCapture_v2(CUstream hStream, CUstreamCaptureMode mode)
{
	COUNT(cuStreamBeginCapture_v2);
	(void)mode;
	return begin_capture(stream_of(hStream, 0));
}

API CUresult cuStreamBeginCapture_v2_ptsz(CUstream hStream, CUstreamCaptureMode mode)
{
	COUNT(cuStreamBeginCapture_v2_ptsz);
	(void)mode;
	return begin_capture(stream_of(hStream, 1));
}

API CUresult cuStreamEndCapture(CUstream hStream, CUgraph *phGraph)
{
	COUNT(cuStreamEndCapture);
	return end_capture(stream_of(hStream, 0), phGraph);
}

API CUresult cuStreamEndCapture_ptsz(CUstream hStream, CUgraph *phGraph)
{
	COUNT(cuStreamEndCapture_ptsz);
	return end_capture(stream_of(hStream, 1), phGraph);
}

API CUresult cuGraphCreate(CUgraph *phGraph, unsigned int flags)
{
	COUNT(cuGraphCreate);
	if (!phGraph || flags)
		return CUDA_ERROR_INVALID_VALUE;
	*phGraph = graph_new();
	return *phGraph ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

/* Dependencies are not modeled: nodes run in the order they were added. */
API CUresult cuGraphAddKernelNode_v2(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
				     size_t numDependencies, const CUDA_KERNEL_NODE_PARAMS *nodeParams)
{
	COUNT(cuGraphAddKernelNode_v2);
	(void)dependencies;
	(void)numDependencies;
	return add_kernel_node(phGraphNode, hGraph, nodeParams);
}

API CUresult cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph hGraph, unsigned long long flags)
{
	COUNT(cuGraphInstantiateWithFlags);
	(void)flags;
	return instantiate(phGraphExec, hGraph);
}

API CUresult cuGraphExecKernelNodeSetParams_v2(CUgraphExec hGraphExec, CUgraphNode hNode,
					       const CUDA_KERNEL_NODE_PARAMS *nodeParams)
{
	COUNT(cuGraphExecKernelNodeSetParams_v2);
	return exec_set_kernel(hGraphExec, hNode, nodeParams);
}

API CUresult cuGraphExecUpdate_v2(CUgraphExec hGraphExec, CUgraph hGraph, CUgraphExecUpdateResultInfo *resultInfo)
{
	COUNT(cuGraphExecUpdate_v2);
	return exec_update(hGraphExec, hGraph, resultInfo);
}

API CUresult cuGraphExecDestroy(CUgraphExec hGraphExec)
{
	COUNT(cuGraphExecDestroy);
	return exec_destroy(hGraphExec);
}

API CUresult cuGraphDestroy(CUgraph hGraph)
{
	COUNT(cuGraphDestroy);
	return graph_destroy(hGraph);
}

API CUresult cuLaunchHostFunc(CUstream hStream, CUhostFn fn, void *userData)
{
	COUNT(cuLaunchHostFunc);
	return launch_host_func(stream_of(hStream, 0), fn, userData);
}

API CUresult cuLaunchHostFunc_ptsz(CUstream hStream, CUhostFn fn, void *userData)
{
	COUNT(cuLaunchHostFunc_ptsz);
	return launch_host_func(stream_of(hStream, 1), fn, userData);
}

/* ---- exported API: copies and sets ---- */

#define H CU_MEMORYTYPE_HOST
#define D CU_MEMORYTYPE_DEVICE
#define U CU_MEMORYTYPE_UNIFIED

API CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount)
{
	COUNT(cuMemcpy);
	return copy1(U, dst, U, src, ByteCount, &legacy_stream, 1);
}

API CUresult cuMemcpy_ptds(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount)
{
	COUNT(cuMemcpy_ptds);
	return copy1(U, dst, U, src, ByteCount, per_thread_stream(), 1);
}

API CUresult cuMemcpyHtoD_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount)
{
	COUNT(cuMemcpyHtoD_v2);
	return copy1(D, dstDevice, H, (uintptr_t)srcHost, ByteCount, &legacy_stream, 1);
}

API CUresult cuMemcpyHtoD_v2_ptds(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount)
{
	COUNT(cuMemcpyHtoD_v2_ptds);
	return copy1(D, dstDevice, H, (uintptr_t)srcHost, ByteCount, per_thread_stream(), 1);
}

API CUresult cuMemcpyDtoH_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount)
{
	COUNT(cuMemcpyDtoH_v2);
	return copy1(H, (uintptr_t)dstHost, D, srcDevice, ByteCount, &legacy_stream, 1);
}

API CUresult cuMemcpyDtoH_v2_ptds(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount)
{
	COUNT(cuMemcpyDtoH_v2_ptds);
	return copy1(H, (uintptr_t)dstHost, D, srcDevice, ByteCount, per_thread_stream(), 1);
}

API CUresult cuMemcpyDtoD_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount)
{
	COUNT(cuMemcpyDtoD_v2);
	return copy1(D, dstDevice, D, srcDevice, ByteCount, &legacy_stream, 1);
}

API CUresult cuMemcpyDtoD_v2_ptds(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount)
{
	COUNT(cuMemcpyDtoD_v2_ptds);
	return copy1(D, dstDevice, D, srcDevice, ByteCount, per_thread_stream(), 1);
}

API CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream)
{
	COUNT(cuMemcpyAsync);
	return copy1(U, dst, U, src, ByteCount, stream_of(hStream, 0), 0);
}

API CUresult cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream)
{
	COUNT(cuMemcpyAsync_ptsz);
	return copy1(U, dst, U, src, ByteCount, stream_of(hStream, 1), 0);
}

API CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount, CUstream hStream)
{
	COUNT(cuMemcpyHtoDAsync_v2);
	return copy1(D, dstDevice, H, (uintptr_t)srcHost, ByteCount, stream_of(hStream, 0), 0);
}

API CUresult cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount,
				       CUstream hStream)
{
	COUNT(cuMemcpyHtoDAsync_v2_ptsz);
	return copy1(D, dstDevice, H, (uintptr_t)srcHost, ByteCount, stream_of(hStream, 1), 0);
}

API CUresult cuMemcpyDtoHAsync_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream)
{
	COUNT(cuMemcpyDtoHAsync_v2);
	return copy1(H, (uintptr_t)dstHost, D, srcDevice, ByteCount, stream_of(hStream, 0), 0);
}

API CUresult cuMemcpyDtoHAsync_v2_ptsz(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream)
{
	COUNT(cuMemcpyDtoHAsync_v2_ptsz);
	return copy1(H, (uintptr_t)dstHost, D, srcDevice, ByteCount, stream_of(hStream, 1), 0);
}

API CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream)
{
	COUNT(cuMemcpyDtoDAsync_v2);
	return copy1(D, dstDevice, D, srcDevice, ByteCount, stream_of(hStream, 0), 0);
}

API CUresult cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount,
				       CUstream hStream)
{
	COUNT(cuMemcpyDtoDAsync_v2_ptsz);
	return copy1(D, dstDevice, D, srcDevice, ByteCount, stream_of(hStream, 1), 0);
}

API CUresult cuMemcpy2D_v2(const CUDA_MEMCPY2D *pCopy)
{
	COUNT(cuMemcpy2D_v2);
	return copy2d(pCopy, &legacy_stream, 1);
}

API CUresult cuMemcpy2D_v2_ptds(const CUDA_MEMCPY2D *pCopy)
{
	COUNT(cuMemcpy2D_v2_ptds);
	return copy2d(pCopy, per_thread_stream(), 1);
}

API CUresult cuMemcpy2DAsync_v2(const CUDA_MEMCPY2D *pCopy, CUstream hStream)
{
	COUNT(cuMemcpy2DAsync_v2);
	return copy2d(pCopy, stream_of(hStream, 0), 0);
}

API CUresult cuMemcpy2DAsync_v2_ptsz(const CUDA_MEMCPY2D *pCopy, CUstream hStream)
{
	COUNT(cuMemcpy2DAsync_v2_ptsz);
	return copy2d(pCopy, stream_of(hStream, 1), 0);
}

#undef H
#undef D
#undef U

/* Device memory holds nothing, so a set only takes modeled time. The
 * synchronous forms block the host, as cudaMemset does. */
API CUresult cuMemsetD8_v2(CUdeviceptr dstDevice, unsigned char uc, size_t N)
{
	COUNT(cuMemsetD8_v2);
	(void)dstDevice;
	(void)uc;
	return set(N, &legacy_stream, 1);
}

API CUresult cuMemsetD8_v2_ptds(CUdeviceptr dstDevice, unsigned char uc, size_t N)
{
	COUNT(cuMemsetD8_v2_ptds);
	(void)dstDevice;
	(void)uc;
	return set(N, per_thread_stream(), 1);
}

API CUresult cuMemsetD8Async(CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream)
{
	COUNT(cuMemsetD8Async);
	(void)dstDevice;
	(void)uc;
	return set(N, stream_of(hStream, 0), 0);
}

API CUresult cuMemsetD8Async_ptsz(CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream)
{
	COUNT(cuMemsetD8Async_ptsz);
	(void)dstDevice;
	(void)uc;
	return set(N, stream_of(hStream, 1), 0);
}

/* N counts 32-bit words. */
API CUresult cuMemsetD32Async(CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream hStream)
{
	COUNT(cuMemsetD32Async);
	(void)dstDevice;
	(void)ui;
	return set(4 * N, stream_of(hStream, 0), 0);
}

API CUresult cuMemsetD32Async_ptsz(CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream hStream)
{
	COUNT(cuMemsetD32Async_ptsz);
	(void)dstDevice;
	(void)ui;
	return set(4 * N, stream_of(hStream, 1), 0);
}

/* ---- exported API: events ---- */

/* Flags (timing, blocking sync) do not change the model. */
API CUresult cuEventCreate(CUevent *phEvent, unsigned int Flags)
{
	COUNT(cuEventCreate);
	(void)Flags;
	return event_create(phEvent);
}

API CUresult cuEventDestroy_v2(CUevent hEvent)
{
	COUNT(cuEventDestroy_v2);
	if (!hEvent)
		return CUDA_ERROR_INVALID_HANDLE;
	free(hEvent);
	return CUDA_SUCCESS;
}

API CUresult cuEventRecord(CUevent hEvent, CUstream hStream)
{
	COUNT(cuEventRecord);
	return event_record(hEvent, stream_of(hStream, 0));
}

API CUresult cuEventRecord_ptsz(CUevent hEvent, CUstream hStream)
{
	COUNT(cuEventRecord_ptsz);
	return event_record(hEvent, stream_of(hStream, 1));
}

API CUresult cuEventRecordWithFlags(CUevent hEvent, CUstream hStream, unsigned int flags)
{
	COUNT(cuEventRecordWithFlags);
	(void)flags;
	return event_record(hEvent, stream_of(hStream, 0));
}

API CUresult cuEventRecordWithFlags_ptsz(CUevent hEvent, CUstream hStream, unsigned int flags)
{
	COUNT(cuEventRecordWithFlags_ptsz);
	(void)flags;
	return event_record(hEvent, stream_of(hStream, 1));
}

API CUresult cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int Flags)
{
	COUNT(cuStreamWaitEvent);
	(void)Flags;
	return stream_wait_event(stream_of(hStream, 0), hEvent);
}

API CUresult cuStreamWaitEvent_ptsz(CUstream hStream, CUevent hEvent, unsigned int Flags)
{
	COUNT(cuStreamWaitEvent_ptsz);
	(void)Flags;
	return stream_wait_event(stream_of(hStream, 1), hEvent);
}

API CUresult cuEventSynchronize(CUevent hEvent)
{
	COUNT(cuEventSynchronize);
	if (!hEvent)
		return CUDA_ERROR_INVALID_HANDLE;
	struct when w;
	event_time(hEvent, &w);
	host_wait(&w);
	return CUDA_SUCCESS;
}

API CUresult cuEventQuery(CUevent hEvent)
{
	COUNT(cuEventQuery);
	if (!hEvent)
		return CUDA_ERROR_INVALID_HANDLE;
	struct when w;
	event_time(hEvent, &w);
	return query(&w);
}

/* ---- exported API: memory ---- */

API CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
	COUNT(cuMemAlloc_v2);
	return device_alloc(dptr, bytesize);
}

/* cuMemFree synchronizes the device, as in CUDA. Addresses are never
 * reused; the memory is given back to the budget. */
API CUresult cuMemFree_v2(CUdeviceptr dptr)
{
	COUNT(cuMemFree_v2);
	device_wait();
	device_release(dptr);
	return CUDA_SUCCESS;
}

/* Stream-ordered allocation: no synchronization. */
API CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
	COUNT(cuMemAllocAsync);
	(void)hStream;
	return device_alloc(dptr, bytesize);
}

API CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
	COUNT(cuMemAllocAsync_ptsz);
	(void)hStream;
	return device_alloc(dptr, bytesize);
}

API CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream)
{
	COUNT(cuMemFreeAsync);
	(void)hStream;
	device_release(dptr);
	return CUDA_SUCCESS;
}

API CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream)
{
	COUNT(cuMemFreeAsync_ptsz);
	(void)hStream;
	device_release(dptr);
	return CUDA_SUCCESS;
}

/* Managed memory is device memory here. */
API CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
	COUNT(cuMemAllocManaged);
	(void)flags;
	return device_alloc(dptr, bytesize);
}

/* Rows of WidthInBytes rounded up to the pitch. */
API CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes, size_t Height,
				unsigned int ElementSizeBytes)
{
	COUNT(cuMemAllocPitch_v2);
	(void)ElementSizeBytes;
	if (!pPitch)
		return CUDA_ERROR_INVALID_VALUE;
	size_t pitch = (WidthInBytes + PITCH_ALIGN - 1) / PITCH_ALIGN * PITCH_ALIGN;
	CUresult err = device_alloc(dptr, pitch * Height);
	if (!err)
		*pPitch = pitch;
	return err;
}

/* Pools are not modeled: the allocation comes from the device. */
API CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream)
{
	COUNT(cuMemAllocFromPoolAsync);
	(void)pool;
	(void)hStream;
	return device_alloc(dptr, bytesize);
}

API CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream)
{
	COUNT(cuMemAllocFromPoolAsync_ptsz);
	(void)pool;
	(void)hStream;
	return device_alloc(dptr, bytesize);
}

/* Physical memory by handle (mapped with cuMemMap, not modeled): it counts
 * against the budget until released. */
API CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
			 unsigned long long flags)
{
	COUNT(cuMemCreate);
	(void)prop;
	(void)flags;
	if (!handle || size == 0)
		return CUDA_ERROR_INVALID_VALUE;
	uintptr_t h;
	pthread_mutex_lock(&mu);
	CUresult err = take_locked(&handle_next, (size + DEVICE_ALIGN - 1) / DEVICE_ALIGN * DEVICE_ALIGN, 16, &h);
	pthread_mutex_unlock(&mu);
	if (!err)
		*handle = h;
	return err;
}

API CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
	COUNT(cuMemRelease);
	device_release(handle);
	return CUDA_SUCCESS;
}

API CUresult cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags)
{
	COUNT(cuMemHostAlloc);
	(void)Flags;
	return host_alloc(pp, bytesize);
}

API CUresult cuMemAllocHost_v2(void **pp, size_t bytesize)
{
	COUNT(cuMemAllocHost_v2);
	return host_alloc(pp, bytesize);
}

API CUresult cuMemFreeHost(void *p)
{
	COUNT(cuMemFreeHost);
	return host_free(p);
}

API CUresult cuMemHostRegister_v2(void *p, size_t bytesize, unsigned int Flags)
{
	COUNT(cuMemHostRegister_v2);
	(void)Flags;
	return host_register(p, bytesize);
}

API CUresult cuMemHostUnregister(void *p)
{
	COUNT(cuMemHostUnregister);
	return host_unregister(p);
}
