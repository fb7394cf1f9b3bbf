/*
 * cupti_sim.c: a simulated CUPTI, libcupti.so.13, with the activity-API
 * entry points cudatap's collector uses, on top of the simulated driver's
 * modeled GPU: while any activity kind is enabled, the driver reports every
 * operation and the API call that enqueued it (sim_set_activity), and this
 * library keeps them as CUPTI records (cupti_abi.h layouts) until a flush
 * hands them to the client's buffers.
 *
 * Like CUPTI it allows one subscriber at a time (another's cuptiSubscribe
 * fails until the first unsubscribes), calls the subscriber back at the
 * entry and exit of the calls it enabled (cuptiEnableCallback; the calls
 * that enqueue work, in the driver domain, named by cuptiGetCallbackName),
 * keeps what finds no room as dropped (cuptiActivityGetNumDroppedRecords),
 * and stamps records with its own clock unless the client registers a
 * timestamp callback. Its own clock is CLOCK_MONOTONIC plus
 * SIM_CUPTI_CLOCK_OFFSET, so a client that forgot to convert is caught.
 * Test knobs, read at the first call:
 *   SIM_CUPTI_NO_TIMESTAMP_CALLBACK=1  cuptiActivityRegisterTimestampCallback
 *                                      is not supported (older CUPTI);
 *   SIM_CUPTI_NO_CALLBACK_NAMES=1      cuptiGetCallbackName is not supported;
 *   SIM_CUPTI_SUBSCRIBED=1             another client already subscribed;
 *   SIM_CUPTI_MAX_RECORDS=N            room for N records between flushes;
 *   SIM_CUPTI_RUNTIME_CALLS=1          each enqueuing call is reported as a
 *                                      runtime call around the driver's, as
 *                                      a runtime (cuBLASLt's static one too)
 *                                      reports its calls: runtime entry,
 *                                      driver entry and exit (an id of its
 *                                      own), runtime exit; the GPU record
 *                                      carries the runtime call's id;
 *   SIM_CUPTI_RECORD_NS=N              what CUPTI's work costs, spun on the
 *   SIM_CUPTI_API_NS=N                 calling thread: N ns per GPU record
 *   SIM_CUPTI_CALLBACK_NS=N            (kernel, copy, memset), per API
 *                                      record, per callback it makes (all
 *                                      0 by default: benchmarks set them,
 *                                      from what the H200 measured);
 *   SIM_CUPTI_OTHER_CALLS=N            before each enqueuing call, N runtime
 *                                      calls that enqueue nothing
 *                                      (cudaGetDevice, as PyTorch makes three
 *                                      per launch): API records and
 *                                      callbacks like any call.
 * API records (kinds RUNTIME and DRIVER) can be left out call by call
 * (cuptiActivityEnableRuntimeApi, cuptiActivityEnableDriverApi); enabling
 * a kind again records every call of it, as CUPTI does.
 * sim_cupti_subscribed() (not CUPTI's) says whether a client holds it, with
 * kernel activity on.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "cuda_driver_sim.h"
#include "cupti_abi.h"

#define EXPORT __attribute__((visibility("default")))
#define SIM_CUPTI_CLOCK_OFFSET 1000000000000ll /* 1000 s */

/* One stored record: the largest layout. */
union record {
	CUpti_Activity any;
	ct_cupti_api api;
	ct_cupti_kernel kernel;
	ct_cupti_memcpy memcpy;
	ct_cupti_memset memset;
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static union record *records; /* guarded by mu */
static size_t nrecords, max_records;
static size_t dropped;
static unsigned enabled_kinds; /* bit per CUpti_ActivityKind */
static int subscribed;
static CUpti_BuffersCallbackRequestFunc requested;
static CUpti_BuffersCallbackCompleteFunc completed;
static CUpti_TimestampCallbackFunc timestamp_cb;
static int no_timestamp_cb, no_callback_names, preexisting_subscriber, runtime_calls;
static long record_ns, api_ns, callback_ns; /* the modeled costs (SIM_CUPTI_*_NS) */
static int other_calls;                      /* SIM_CUPTI_OTHER_CALLS */
static unsigned api_off[2];                  /* API records left out: a bit per cbid; [0] driver, [1] runtime (atomic) */
static uint32_t other_corr;                  /* the other calls' correlation ids (atomic) */
static __thread int call_kind;               /* the enqueuing call this thread is in (its API records' cbid) */
static __thread uint32_t self_tid;
static int driver_hooked;

/* The subscriber's callback and the calls it enabled, by callback id in
 * the driver domain (the simulated runtime reports nothing of its own:
 * its calls reach the driver's, as their records show). */
static CUpti_CallbackFunc subscriber_cb; /* written under mu, read atomically */
static void *subscriber_data;
static unsigned enabled_callbacks; /* bit per cbid (atomic) */

/* The callback ids of the driver domain: the enqueuing calls the modeled
 * GPU reports (one per kind of operation) and a few that enqueue nothing,
 * which a client must not take for enqueuing ones. */
enum { CBID_INIT = 1, CBID_LAUNCH, CBID_MEMCPY, CBID_MEMSET, CBID_SYNC, CBID_HOSTFN, CBID_GRAPH_LAUNCH, CBID_COUNT };
static const char *const driver_cbids[CBID_COUNT] = {
	[CBID_INIT] = "cuInit", [CBID_LAUNCH] = "cuLaunchKernel", [CBID_MEMCPY] = "cuMemcpyAsync",
	[CBID_MEMSET] = "cuMemsetD8Async", [CBID_SYNC] = "cuStreamSynchronize", [CBID_HOSTFN] = "cuLaunchHostFunc",
	[CBID_GRAPH_LAUNCH] = "cuGraphLaunch",
};
/* The runtime domain: a call that enqueues nothing, then the enqueuing
 * ones, issued only with SIM_CUPTI_RUNTIME_CALLS (real CUPTI's ids differ). */
enum { RT_CBID_GET_DEVICE = 1, RT_CBID_LAUNCH, RT_CBID_MEMCPY, RT_CBID_MEMSET, RT_CBID_GRAPH_LAUNCH, RT_CBID_COUNT };
static const char *const runtime_cbids[RT_CBID_COUNT] = {
	[RT_CBID_GET_DEVICE] = "cudaGetDevice_v3020", [RT_CBID_LAUNCH] = "cudaLaunchKernelExC_v11060",
	[RT_CBID_MEMCPY] = "cudaMemcpyAsync_v3020", [RT_CBID_MEMSET] = "cudaMemsetAsync_v3020",
	[RT_CBID_GRAPH_LAUNCH] = "cudaGraphLaunch_v10000",
};
static unsigned enabled_runtime_callbacks; /* bit per runtime cbid (atomic) */

static void init_knobs(void)
{
	no_timestamp_cb = getenv("SIM_CUPTI_NO_TIMESTAMP_CALLBACK") != NULL;
	no_callback_names = getenv("SIM_CUPTI_NO_CALLBACK_NAMES") != NULL;
	preexisting_subscriber = getenv("SIM_CUPTI_SUBSCRIBED") != NULL;
	runtime_calls = getenv("SIM_CUPTI_RUNTIME_CALLS") != NULL;
	const char *c;
	record_ns = (c = getenv("SIM_CUPTI_RECORD_NS")) ? strtol(c, NULL, 10) : 0;
	api_ns = (c = getenv("SIM_CUPTI_API_NS")) ? strtol(c, NULL, 10) : 0;
	callback_ns = (c = getenv("SIM_CUPTI_CALLBACK_NS")) ? strtol(c, NULL, 10) : 0;
	other_calls = (c = getenv("SIM_CUPTI_OTHER_CALLS")) ? atoi(c) : 0;
	const char *m = getenv("SIM_CUPTI_MAX_RECORDS");
	max_records = m ? strtoul(m, NULL, 10) : 1 << 16;
	records = calloc(max_records ? max_records : 1, sizeof *records);
}

static void knobs(void)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	pthread_once(&once, init_knobs);
}

/* spin burns ns of the calling thread's time: CUPTI's work, modeled. */
static void spin(long ns)
{
	if (ns <= 0)
		return;
	struct timespec a, b;
	clock_gettime(CLOCK_MONOTONIC, &a);
	do
		clock_gettime(CLOCK_MONOTONIC, &b);
	while ((b.tv_sec - a.tv_sec) * 1000000000L + (b.tv_nsec - a.tv_nsec) < ns);
}

/* The driver's times are CLOCK_MONOTONIC; CUPTI's own clock is offset. */
static uint64_t stamp(int64_t mono) { return timestamp_cb ? (uint64_t)mono : (uint64_t)(mono + SIM_CUPTI_CLOCK_OFFSET); }

static int on(int kind) { return (enabled_kinds >> kind) & 1; }

/* store appends a record (mu held); with no room, it is dropped. */
static union record *store(void)
{
	if (nrecords >= max_records) {
		dropped++;
		return NULL;
	}
	union record *r = &records[nrecords++];
	memset(r, 0, sizeof *r);
	return r;
}

static void on_op(int kind, uint32_t corr, int64_t start, int64_t end, uint32_t stream, uint64_t bytes, int copy_kind,
		  const char *name, int device, uint64_t graph_node, uint32_t graph)
{
	pthread_mutex_lock(&mu);
	union record *r = NULL;
	switch (kind) {
	case 1:
		if (on(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) && (r = store())) {
			r->kernel.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
			r->kernel.start = stamp(start), r->kernel.end = stamp(end);
			r->kernel.streamId = stream, r->kernel.correlationId = corr;
			r->kernel.name = name;
			r->kernel.deviceId = (uint32_t)device;
			r->kernel.graphNodeId = graph_node, r->kernel.graphId = graph;
		}
		break;
	case 2:
		if (on(CUPTI_ACTIVITY_KIND_MEMCPY) && (r = store())) {
			r->memcpy.kind = CUPTI_ACTIVITY_KIND_MEMCPY;
			r->memcpy.copyKind = (uint8_t)copy_kind;
			r->memcpy.bytes = bytes;
			r->memcpy.start = stamp(start), r->memcpy.end = stamp(end);
			r->memcpy.streamId = stream, r->memcpy.correlationId = corr;
			r->memcpy.deviceId = (uint32_t)device;
			r->memcpy.graphNodeId = graph_node, r->memcpy.graphId = graph;
		}
		break;
	case 3:
		if (on(CUPTI_ACTIVITY_KIND_MEMSET) && (r = store())) {
			r->memset.kind = CUPTI_ACTIVITY_KIND_MEMSET;
			r->memset.bytes = bytes;
			r->memset.start = stamp(start), r->memset.end = stamp(end);
			r->memset.streamId = stream, r->memset.correlationId = corr;
			r->memset.deviceId = (uint32_t)device;
			r->memset.graphNodeId = graph_node, r->memset.graphId = graph;
		}
		break;
	}
	pthread_mutex_unlock(&mu);
	if (r)
		spin(record_ns);
}

/* api_record keeps an API record of call cbid of kind (RUNTIME or DRIVER),
 * if that kind is on and the call not left out. */
static void api_record(int kind, unsigned cbid, uint32_t corr, int64_t start, int64_t end, uint32_t tid)
{
	int rt = kind == CUPTI_ACTIVITY_KIND_RUNTIME;
	pthread_mutex_lock(&mu);
	union record *r = NULL;
	if (on(kind) && !((__atomic_load_n(&api_off[rt], __ATOMIC_RELAXED) >> cbid) & 1) && (r = store())) {
		r->api.kind = kind;
		r->api.cbid = cbid;
		r->api.start = stamp(start), r->api.end = stamp(end);
		r->api.processId = (uint32_t)getpid(), r->api.threadId = tid, r->api.correlationId = corr;
	}
	pthread_mutex_unlock(&mu);
	if (r)
		spin(api_ns);
}

static const unsigned kind_cbids[] = { 0, CBID_LAUNCH, CBID_MEMCPY, CBID_MEMSET, CBID_GRAPH_LAUNCH };
static const unsigned kind_rt_cbids[] = { 0, RT_CBID_LAUNCH, RT_CBID_MEMCPY, RT_CBID_MEMSET, RT_CBID_GRAPH_LAUNCH };

/* on_api records the enqueuing call this thread is in; with runtime calls,
 * the runtime call (its id the GPU record's) and the driver call inside. */
static void on_api(uint32_t corr, int64_t start, int64_t end, uint32_t tid)
{
	int k = call_kind;
	if (!runtime_calls) {
		api_record(CUPTI_ACTIVITY_KIND_DRIVER, kind_cbids[k], corr, start, end, tid);
		return;
	}
	api_record(CUPTI_ACTIVITY_KIND_DRIVER, kind_cbids[k], corr | 0x80000000u, start, end, tid);
	api_record(CUPTI_ACTIVITY_KIND_RUNTIME, kind_rt_cbids[k], corr, start, end, tid);
}

static int64_t mono(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* callback calls the subscriber back, if it enabled cbid of domain. */
static void callback(int domain, unsigned cbid, int site, uint32_t corr)
{
	const unsigned *enabled = domain == CUPTI_CB_DOMAIN_RUNTIME_API ? &enabled_runtime_callbacks : &enabled_callbacks;
	if (!((__atomic_load_n(enabled, __ATOMIC_ACQUIRE) >> cbid) & 1))
		return;
	CUpti_CallbackFunc cb = __atomic_load_n(&subscriber_cb, __ATOMIC_ACQUIRE);
	void *ud = __atomic_load_n(&subscriber_data, __ATOMIC_ACQUIRE);
	if (!cb)
		return;
	const char *name = domain == CUPTI_CB_DOMAIN_RUNTIME_API ? runtime_cbids[cbid] : driver_cbids[cbid];
	ct_cupti_cbdata d = {.callbackSite = site, .functionName = name, .correlationId = corr};
	spin(callback_ns);
	cb(ud, domain, cbid, &d);
}

/* on_call calls the subscriber back at the entry and exit of an enqueuing
 * call it enabled, on the calling thread; with SIM_CUPTI_RUNTIME_CALLS the
 * driver call is inside a runtime call, whose id the GPU record carries. */
static void on_call(int site, int kind, uint32_t corr)
{
	if (kind < 1 || kind > 4)
		return;
	if (site == CUPTI_API_ENTER) {
		call_kind = kind;
		/* The calls that enqueue nothing, before it. */
		if (!self_tid && other_calls > 0)
			self_tid = (uint32_t)syscall(SYS_gettid);
		for (int i = 0; i < other_calls; i++) {
			uint32_t c = 0x40000000u | (__atomic_add_fetch(&other_corr, 1, __ATOMIC_RELAXED) & 0x3fffffffu);
			callback(CUPTI_CB_DOMAIN_RUNTIME_API, RT_CBID_GET_DEVICE, CUPTI_API_ENTER, c);
			int64_t t = mono();
			api_record(CUPTI_ACTIVITY_KIND_RUNTIME, RT_CBID_GET_DEVICE, c, t, t, self_tid);
			callback(CUPTI_CB_DOMAIN_RUNTIME_API, RT_CBID_GET_DEVICE, CUPTI_API_EXIT, c);
		}
	}
	unsigned cbid = kind_cbids[kind];
	if (!runtime_calls) {
		callback(CUPTI_CB_DOMAIN_DRIVER_API, cbid, site, corr);
		return;
	}
	unsigned rt = kind_rt_cbids[kind];
	uint32_t driver_corr = corr | 0x80000000u; /* the driver call's own id: no GPU record carries it */
	if (site == CUPTI_API_ENTER) {
		callback(CUPTI_CB_DOMAIN_RUNTIME_API, rt, site, corr);
		callback(CUPTI_CB_DOMAIN_DRIVER_API, cbid, site, driver_corr);
	} else {
		callback(CUPTI_CB_DOMAIN_DRIVER_API, cbid, site, driver_corr);
		callback(CUPTI_CB_DOMAIN_RUNTIME_API, rt, site, corr);
	}
}

static const struct sim_activity hooks = {on_op, on_api, on_call};

/* hook_driver tells the simulated driver (already loaded: CUPTI needs a
 * CUDA process) to report to this library, or to stop. */
static void hook_driver(int on)
{
	if (driver_hooked == on)
		return;
	void *drv = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
	if (!drv)
		return;
	void (*set)(const struct sim_activity *) = (void (*)(const struct sim_activity *))dlsym(drv, "sim_set_activity");
	if (set)
		set(on ? &hooks : NULL);
	driver_hooked = on;
	dlclose(drv);
}

/* Whether the driver must report to this library: while activity or a
 * callback is on. */
static void rehook(void)
{
	pthread_mutex_lock(&mu);
	int want = enabled_kinds || __atomic_load_n(&enabled_callbacks, __ATOMIC_RELAXED);
	pthread_mutex_unlock(&mu);
	hook_driver(want);
}

EXPORT CUptiResult cuptiSubscribe(CUpti_SubscriberHandle *s, CUpti_CallbackFunc cb, void *ud)
{
	knobs();
	pthread_mutex_lock(&mu);
	int taken = subscribed || preexisting_subscriber;
	if (!taken) {
		subscribed = 1;
		__atomic_store_n(&subscriber_data, ud, __ATOMIC_RELEASE);
		__atomic_store_n(&subscriber_cb, cb, __ATOMIC_RELEASE);
	}
	pthread_mutex_unlock(&mu);
	if (taken)
		return CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED;
	*s = (CUpti_SubscriberHandle)&subscribed;
	return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiUnsubscribe(CUpti_SubscriberHandle s)
{
	(void)s;
	pthread_mutex_lock(&mu);
	subscribed = 0;
	__atomic_store_n(&subscriber_cb, NULL, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&mu);
	__atomic_store_n(&enabled_callbacks, 0, __ATOMIC_RELEASE); /* the subscriber's callbacks go with it */
	__atomic_store_n(&enabled_runtime_callbacks, 0, __ATOMIC_RELEASE);
	rehook();
	return CUPTI_SUCCESS;
}

/* sim_cupti_subscribed says whether a client holds CUPTI with kernel
 * activity on (a collector enables it last). */
EXPORT int sim_cupti_subscribed(void)
{
	pthread_mutex_lock(&mu);
	int s = subscribed && on(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
	pthread_mutex_unlock(&mu);
	return s;
}

EXPORT CUptiResult cuptiGetCallbackName(CUpti_CallbackDomain domain, uint32_t cbid, const char **name)
{
	knobs();
	if (no_callback_names)
		return 22; /* CUPTI_ERROR_NOT_SUPPORTED */
	*name = NULL;
	if (domain == CUPTI_CB_DOMAIN_DRIVER_API && cbid > 0 && cbid < CBID_COUNT)
		*name = driver_cbids[cbid];
	else if (domain == CUPTI_CB_DOMAIN_RUNTIME_API && cbid > 0 && cbid < RT_CBID_COUNT)
		*name = runtime_cbids[cbid];
	return *name ? CUPTI_SUCCESS : CUPTI_ERROR_INVALID_PARAMETER;
}

EXPORT CUptiResult cuptiEnableCallback(uint32_t enable, CUpti_SubscriberHandle s, CUpti_CallbackDomain domain, uint32_t cbid)
{
	pthread_mutex_lock(&mu);
	int valid = subscribed && s == (CUpti_SubscriberHandle)&subscribed;
	pthread_mutex_unlock(&mu);
	if (!valid)
		return CUPTI_ERROR_INVALID_PARAMETER;
	unsigned *enabled = NULL;
	if (domain == CUPTI_CB_DOMAIN_DRIVER_API && cbid > 0 && cbid < CBID_COUNT)
		enabled = &enabled_callbacks;
	else if (domain == CUPTI_CB_DOMAIN_RUNTIME_API && cbid > 0 && cbid < RT_CBID_COUNT)
		enabled = &enabled_runtime_callbacks;
	if (!enabled)
		return CUPTI_ERROR_INVALID_PARAMETER;
	if (enable)
		__atomic_or_fetch(enabled, 1u << cbid, __ATOMIC_RELEASE);
	else
		__atomic_and_fetch(enabled, ~(1u << cbid), __ATOMIC_RELEASE);
	rehook();
	return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiActivityRegisterCallbacks(CUpti_BuffersCallbackRequestFunc req, CUpti_BuffersCallbackCompleteFunc comp)
{
	knobs();
	if (!req || !comp)
		return 1; /* CUPTI_ERROR_INVALID_PARAMETER */
	requested = req, completed = comp;
	return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiActivityRegisterTimestampCallback(CUpti_TimestampCallbackFunc f)
{
	knobs();
	if (no_timestamp_cb)
		return 22; /* CUPTI_ERROR_NOT_SUPPORTED */
	timestamp_cb = f;
	return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiSetThreadIdType(int type)
{
	return type == CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM ? CUPTI_SUCCESS : 1;
}

EXPORT CUptiResult cuptiActivityEnable(CUpti_ActivityKind kind)
{
	knobs();
	if (kind < 0 || kind >= 32)
		return 1;
	pthread_mutex_lock(&mu);
	enabled_kinds |= 1u << kind;
	pthread_mutex_unlock(&mu);
	if (kind == CUPTI_ACTIVITY_KIND_RUNTIME || kind == CUPTI_ACTIVITY_KIND_DRIVER)
		__atomic_store_n(&api_off[kind == CUPTI_ACTIVITY_KIND_RUNTIME], 0, __ATOMIC_RELAXED); /* every call recorded again */
	hook_driver(1);
	return CUPTI_SUCCESS;
}

/* record_api leaves call cbid of a domain's API records out (enable 0) or
 * in. */
static CUptiResult record_api(int rt, uint32_t cbid, uint8_t enable)
{
	if (cbid == 0 || cbid >= (rt ? RT_CBID_COUNT : CBID_COUNT))
		return CUPTI_ERROR_INVALID_PARAMETER;
	if (enable)
		__atomic_and_fetch(&api_off[rt], ~(1u << cbid), __ATOMIC_RELAXED);
	else
		__atomic_or_fetch(&api_off[rt], 1u << cbid, __ATOMIC_RELAXED);
	return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiActivityEnableRuntimeApi(uint32_t cbid, uint8_t enable) { return record_api(1, cbid, enable); }
EXPORT CUptiResult cuptiActivityEnableDriverApi(uint32_t cbid, uint8_t enable) { return record_api(0, cbid, enable); }

EXPORT CUptiResult cuptiActivityDisable(CUpti_ActivityKind kind)
{
	if (kind < 0 || kind >= 32)
		return 1;
	pthread_mutex_lock(&mu);
	enabled_kinds &= ~(1u << kind);
	pthread_mutex_unlock(&mu);
	rehook();
	return CUPTI_SUCCESS;
}

static size_t record_size(int kind)
{
	switch (kind) {
	case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
		return sizeof(ct_cupti_kernel);
	case CUPTI_ACTIVITY_KIND_MEMCPY:
		return sizeof(ct_cupti_memcpy);
	case CUPTI_ACTIVITY_KIND_MEMSET:
		return sizeof(ct_cupti_memset);
	default:
		return sizeof(ct_cupti_api);
	}
}

/* Flushing hands every stored record to the client's buffers, on the
 * calling thread, as CUPTI does for a forced flush. */
EXPORT CUptiResult cuptiActivityFlushAll(uint32_t flag)
{
	(void)flag;
	if ((enabled_kinds || __atomic_load_n(&enabled_callbacks, __ATOMIC_RELAXED)) && !driver_hooked)
		hook_driver(1); /* the driver was not loaded yet when enabled */
	if (!requested || !completed)
		return CUPTI_SUCCESS;
	pthread_mutex_lock(&mu);
	size_t n = nrecords;
	union record *taken = malloc((n ? n : 1) * sizeof *taken);
	if (taken)
		memcpy(taken, records, n * sizeof *taken);
	else
		dropped += n;
	nrecords = 0;
	pthread_mutex_unlock(&mu);
	size_t i = 0;
	while (taken && i < n) {
		uint8_t *buf = NULL;
		size_t size = 0, max = 0;
		requested(&buf, &size, &max);
		if (!buf || !size) {
			pthread_mutex_lock(&mu);
			dropped += n - i;
			pthread_mutex_unlock(&mu);
			break;
		}
		size_t used = 0;
		while (i < n) {
			size_t sz = record_size(taken[i].any.kind);
			if (used + sz > size)
				break;
			memcpy(buf + used, &taken[i], sz);
			used += sz;
			i++;
		}
		completed(NULL, 0, buf, size, used);
	}
	free(taken);
	return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiActivityGetNextRecord(uint8_t *buffer, size_t valid, CUpti_Activity **record)
{
	size_t off = 0;
	if (*record)
		off = (size_t)((uint8_t *)*record - buffer) + record_size((*record)->kind);
	if (off + sizeof(CUpti_Activity) > valid)
		return CUPTI_ERROR_MAX_LIMIT_REACHED;
	*record = (CUpti_Activity *)(buffer + off);
	return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiActivityGetNumDroppedRecords(CUcontext ctx, uint32_t stream, size_t *n)
{
	(void)ctx, (void)stream;
	pthread_mutex_lock(&mu);
	*n = dropped;
	dropped = 0;
	pthread_mutex_unlock(&mu);
	return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiGetTimestamp(uint64_t *t)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	*t = stamp((int64_t)ts.tv_sec * 1000000000ll + ts.tv_nsec);
	return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiFinalize(void)
{
	pthread_mutex_lock(&mu);
	enabled_kinds = 0;
	nrecords = 0;
	subscribed = 0;
	__atomic_store_n(&subscriber_cb, NULL, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&mu);
	__atomic_store_n(&enabled_callbacks, 0, __ATOMIC_RELEASE);
	__atomic_store_n(&enabled_runtime_callbacks, 0, __ATOMIC_RELEASE);
	hook_driver(0);
	requested = NULL, completed = NULL, timestamp_cb = NULL;
	return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiGetResultString(CUptiResult r, const char **s)
{
	*s = r == CUPTI_SUCCESS ? "CUPTI_SUCCESS" : "CUPTI_ERROR (simulated)";
	return CUPTI_SUCCESS;
}
