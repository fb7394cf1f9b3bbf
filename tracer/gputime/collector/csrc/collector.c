/*
 * collector.c: cudatap's GPU-time collector, a small library loaded into a
 * CUDA process that subscribes to CUPTI's activity API and hands the
 * records to cudatap over a socket.
 *
 * How it gets in:
 *  - launch mode: cudatap sets CUDA_INJECTION64_PATH to this library; the
 *    CUDA driver loads it in cuInit and calls InitializeInjection, before
 *    any work reaches the GPU;
 *  - attach mode (--gpu-times on a running process): cudatap makes the
 *    process dlopen() it (ptrace); the constructor starts a thread that
 *    sets CUPTI up, so the borrowed thread returns at once.
 * Either way it reads "config" next to itself (the directory cudatap made
 * for it): the socket to connect to, and an optional CUPTI path.
 *
 * What it measures: CUPTI's kernel, copy and memset records. Each carries
 * the correlation id of the API call that enqueued it; the collector learns
 * which thread made that call, and when (entry to exit), from CUPTI
 * callbacks on the enqueuing calls only (launches, copies, memsets, graph
 * launches: join=callbacks, the default), or from CUPTI's API records of
 * those same calls (join=api; a CUPTI that cannot record single calls,
 * before CUDA 12's cuptiActivityEnableRuntimeApi, records every call, which
 * costs more: cudaGetDevice alone comes three times per PyTorch launch; a
 * CUPTI without callback names gets it too). join=none sends GPU records
 * only, to measure what CUPTI's kernel records alone cost.
 *
 * It never harms the process: CUPTI is the process's own (already mapped,
 * next to its libcudart, or the toolkit's), never bundled; another CUPTI
 * subscriber (a profiler) means it does nothing; buffers are bounded
 * (CUPTI counts what found no buffer), sends wait at most SEND_TIMEOUT_MS
 * and drop (counted) past it; when cudatap says stop, or its socket
 * closes because cudatap died, it flushes, disables every activity kind,
 * finalizes CUPTI and its thread ends. When another client of the process
 * wants CUPTI (cudatap holds that client's thread at its cuptiSubscribe and
 * says 'H'), it flushes and lets CUPTI go the same way, and subscribes
 * again when cudatap says 'T' (that client finalized CUPTI).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "cupti_abi.h"
#include "wire.h"

#define EXPORT __attribute__((visibility("default")))

enum {
	/* Small buffers: a periodic flush hands over full ones only, so their
	 * size sets how late a record can come (~600 kernel records). */
	BUFFER_BYTES = 128 << 10,
	MAX_BUFFERS = 128, /* at most this many outstanding: 16 MiB */
	SEND_TIMEOUT_MS = 50,
	DEFAULT_FLUSH_MS = 100,
	/* Callback records: CHUNK_RECORDS per chunk (one message), at most
	 * MAX_CHUNKS chunks written and not yet sent (10 MiB). */
	CHUNK_RECORDS = CT_MAX_RECORDS,
	MAX_CHUNKS = 256,
	MAX_CBID = 4096, /* callback ids probed for names, per domain */
	TAKE_BACK_TRIES = 50,
	TAKE_BACK_WAIT_MS = 20,
	ARM_WAIT_MS = 5000, /* at most this long for cudatap's word after hello */
};

/* CUPTI, resolved from the process's own library. */
static struct {
	CUptiResult (*subscribe)(CUpti_SubscriberHandle *, CUpti_CallbackFunc, void *);
	CUptiResult (*unsubscribe)(CUpti_SubscriberHandle);
	CUptiResult (*register_callbacks)(CUpti_BuffersCallbackRequestFunc, CUpti_BuffersCallbackCompleteFunc);
	CUptiResult (*enable)(CUpti_ActivityKind);
	CUptiResult (*disable)(CUpti_ActivityKind);
	CUptiResult (*flush_all)(uint32_t);
	CUptiResult (*next_record)(uint8_t *, size_t, CUpti_Activity **);
	CUptiResult (*num_dropped)(CUcontext, uint32_t, size_t *);
	CUptiResult (*timestamp)(uint64_t *);
	CUptiResult (*finalize)(void);
	/* optional */
	CUptiResult (*enable_callback)(uint32_t, CUpti_SubscriberHandle, CUpti_CallbackDomain, uint32_t);
	CUptiResult (*callback_name)(CUpti_CallbackDomain, uint32_t, const char **);
	CUptiResult (*register_timestamp)(CUpti_TimestampCallbackFunc);
	CUptiResult (*thread_id_type)(int);
	CUptiResult (*result_string)(CUptiResult, const char **);
	CUptiResult (*record_runtime_api)(uint32_t, uint8_t); /* cuptiActivityEnableRuntimeApi (CUDA 12) */
	CUptiResult (*record_driver_api)(uint32_t, uint8_t);  /* cuptiActivityEnableDriverApi */
} cupti;

/* The GPU records (kernels last: once they are on, all is); join=api adds
 * the runtime and driver API records. */
static const CUpti_ActivityKind gpu_kinds[] = {
	CUPTI_ACTIVITY_KIND_MEMCPY, CUPTI_ACTIVITY_KIND_MEMSET, CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
};
/* Runtime and driver calls both: a kernel launched through the runtime
 * carries the runtime call's correlation id (with the driver's alone, the
 * H200 joined almost none), one launched by the driver API the driver's. */
static const CUpti_ActivityKind api_kinds[] = {
	CUPTI_ACTIVITY_KIND_RUNTIME, CUPTI_ACTIVITY_KIND_DRIVER,
};

enum join { JOIN_CALLBACKS, JOIN_API, JOIN_NONE };
static const char *const join_names[] = {"callbacks", "api", "none"};

/* The calls whose callbacks give the thread and time of the call behind a
 * GPU record: every runtime and driver call that enqueues a kernel, copy
 * or memset (callback names start with these; CUPTI appends a version).
 * Host functions are left out: CUPTI does not time them. */
static const char *const enqueuing[] = {
	"cudaLaunchKernel", "cudaLaunchCooperativeKernel", "cudaGraphLaunch", "cudaMemcpy", "cudaMemset",
	"cuLaunchKernel", "cuLaunchCooperativeKernel", "cuLaunchGrid", "cuGraphLaunch", "cuMemcpy", "cuMemset",
};

static char dir[4096];         /* where this library and its config are */
static char socket_path[4096];
static char cupti_path[4096];  /* from the config, else found */
static int flush_ms = DEFAULT_FLUSH_MS;
static int attach_mode;        /* config mode=attach: loaded by dlopen, not by the driver */
static int cupti_clock;        /* config clock=cupti: keep CUPTI's own timestamps */
static enum join join_wanted;  /* config join= */
static enum join join;         /* what setup could do */
static int api_filtered;       /* join=api: CUPTI records the enqueuing calls only */

/* What the hello adds about the API records of join=api. */
static const char *api_every_call(void) { return join == JOIN_API && !api_filtered ? " api_records=every_call" : ""; }
static int sock = -1;
static int started;            /* setup ran (once per process) */
static int enabled;            /* activity kinds on */
static int finalized;
static int own_clock;          /* CUPTI stamps with CLOCK_MONOTONIC */
static int handed_over;        /* CUPTI let go to another client ('H') */
static int armed;              /* cudatap answered hello ('A'), or gave up: under arm_mu */
static pthread_mutex_t arm_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t arm_cond = PTHREAD_COND_INITIALIZER;
static uint64_t since;         /* when the last subscribe began */
static CUpti_SubscriberHandle subscriber;
static pthread_mutex_t send_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_t flusher;
static int buffers_out;        /* outstanding CUPTI buffers (atomic) */
static uint64_t dropped;       /* records not sent (atomic) */
static uint64_t cupti_dropped; /* records CUPTI had no buffer for (atomic) */
static int peer_gone;          /* a send found cudatap gone (atomic) */

static uint64_t mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ---- the socket ---- */

static void fill_header(struct ct_msg_hdr *h, int type, uint32_t count, uint64_t t)
{
	memset(h, 0, sizeof *h);
	h->magic = CT_MAGIC;
	h->version = CT_VERSION;
	h->type = (uint16_t)type;
	h->count = count;
	h->pid = (uint32_t)getpid();
	h->time = t;
	uint64_t ct = t;
	if (cupti.timestamp)
		cupti.timestamp(&ct);
	h->cupti_time = ct;
	h->dropped = __atomic_load_n(&dropped, __ATOMIC_RELAXED);
	h->cupti_dropped = __atomic_load_n(&cupti_dropped, __ATOMIC_RELAXED);
}

/* send_msg sends one message; 0 on success. A full socket past the send
 * timeout loses the message (the caller counts it); a closed one means
 * cudatap is gone. */
static int send_msg(int type, const void *payload, uint32_t count, size_t payload_bytes, uint64_t t)
{
	struct ct_msg_hdr h;
	struct iovec iov[2];
	struct msghdr msg = {.msg_iov = iov, .msg_iovlen = payload_bytes ? 2 : 1};
	int rc = 0;
	pthread_mutex_lock(&send_mu);
	if (sock < 0) {
		rc = -1;
	} else {
		fill_header(&h, type, count, t);
		iov[0] = (struct iovec){&h, sizeof h};
		iov[1] = (struct iovec){(void *)payload, payload_bytes};
		if (sendmsg(sock, &msg, MSG_NOSIGNAL) < 0) {
			rc = -1;
			if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
				__atomic_store_n(&peer_gone, 1, __ATOMIC_RELAXED);
		}
	}
	pthread_mutex_unlock(&send_mu);
	return rc;
}

/* send_text sends a message of text, stamped t (0: now). */
static void send_text_at(int type, uint64_t t, const char *fmt, ...)
{
	char text[1024];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(text, sizeof text, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if ((size_t)n >= sizeof text)
		n = sizeof text - 1;
	send_msg(type, text, (uint32_t)n, (size_t)n, t ? t : mono_ns());
}
#define send_text(type, ...) send_text_at(type, 0, __VA_ARGS__)

static int connect_socket(void)
{
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	struct sockaddr_un addr = {.sun_family = AF_UNIX};
	if (strlen(socket_path) >= sizeof addr.sun_path) {
		close(fd);
		return -1;
	}
	strcpy(addr.sun_path, socket_path);
	if (connect(fd, (struct sockaddr *)&addr, sizeof addr) < 0) {
		close(fd);
		return -1;
	}
	struct timeval tv = {.tv_sec = 0, .tv_usec = SEND_TIMEOUT_MS * 1000};
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
	int sndbuf = 4 << 20; /* capped by net.core.wmem_max */
	setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf);
	return fd;
}

/* ---- CUPTI's buffers ---- */

static void buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records)
{
	*max_records = 0;
	*buffer = NULL;
	*size = 0;
	/* Bounded: with every buffer out, CUPTI drops records and counts them. */
	if (__atomic_add_fetch(&buffers_out, 1, __ATOMIC_RELAXED) > MAX_BUFFERS) {
		__atomic_sub_fetch(&buffers_out, 1, __ATOMIC_RELAXED);
		return;
	}
	uint8_t *b = NULL;
	if (posix_memalign((void **)&b, 8, BUFFER_BYTES) != 0) {
		__atomic_sub_fetch(&buffers_out, 1, __ATOMIC_RELAXED);
		return;
	}
	*buffer = b;
	*size = BUFFER_BYTES;
}

/* Kernel names go once per process: a record carries a hash of its name
 * and a CT_NAME message the name, sent before the first record with it.
 * The table of names sent is small and lossy: a collision sends again. */
static uint64_t names_sent[4096];

static uint64_t name_hash(const char *s)
{
	uint64_t h = 1469598103934665603ull; /* FNV-1a */
	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 1099511628211ull;
	return h ? h : 1;
}

static void send_name(uint64_t h, const char *name)
{
	uint64_t *slot = &names_sent[h % (sizeof names_sent / sizeof names_sent[0])];
	if (__atomic_load_n(slot, __ATOMIC_RELAXED) == h)
		return;
	char msg[8 + 1024];
	size_t n = strnlen(name, sizeof msg - 8);
	memcpy(msg, &h, 8);
	memcpy(msg + 8, name, n);
	if (send_msg(CT_NAME, msg, (uint32_t)(8 + n), 8 + n, mono_ns()) == 0)
		__atomic_store_n(slot, h, __ATOMIC_RELAXED);
}

static void translate(const CUpti_Activity *a, struct ct_record *r)
{
	memset(r, 0, sizeof *r);
	switch (a->kind) {
	case CUPTI_ACTIVITY_KIND_RUNTIME:
	case CUPTI_ACTIVITY_KIND_DRIVER: {
		const ct_cupti_api *x = (const void *)a;
		r->kind = CT_API;
		r->sub = a->kind == CUPTI_ACTIVITY_KIND_RUNTIME;
		r->correlation = x->correlationId;
		r->start = x->start, r->end = x->end;
		r->a = x->threadId, r->b = x->cbid;
		break;
	}
	case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
		const ct_cupti_kernel *x = (const void *)a;
		r->kind = CT_KERNEL;
		r->correlation = x->correlationId;
		r->start = x->start, r->end = x->end;
		r->a = x->deviceId, r->b = x->streamId;
		r->graph_node = x->graphNodeId;
		if (x->name && *x->name) {
			r->bytes = name_hash(x->name);
			send_name(r->bytes, x->name);
		}
		break;
	}
	case CUPTI_ACTIVITY_KIND_MEMCPY: {
		const ct_cupti_memcpy *x = (const void *)a;
		r->kind = CT_MEMCPY;
		r->sub = x->copyKind;
		r->correlation = x->correlationId;
		r->start = x->start, r->end = x->end;
		r->a = x->deviceId, r->b = x->streamId;
		r->bytes = x->bytes;
		r->graph_node = x->graphNodeId;
		break;
	}
	case CUPTI_ACTIVITY_KIND_MEMSET: {
		const ct_cupti_memset *x = (const void *)a;
		r->kind = CT_MEMSET;
		r->correlation = x->correlationId;
		r->start = x->start, r->end = x->end;
		r->a = x->deviceId, r->b = x->streamId;
		r->bytes = x->bytes;
		r->graph_node = x->graphNodeId;
		break;
	}
	}
}

static void send_records(struct ct_record *batch, uint32_t n)
{
	if (n && send_msg(CT_RECORDS, batch, n, n * sizeof *batch, mono_ns()) != 0)
		__atomic_add_fetch(&dropped, n, __ATOMIC_RELAXED);
}

static void buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size, size_t valid)
{
	(void)size;
	static __thread struct ct_record batch[CT_MAX_RECORDS];
	uint32_t n = 0;
	CUpti_Activity *a = NULL;
	while (buffer && cupti.next_record(buffer, valid, &a) == CUPTI_SUCCESS) {
		translate(a, &batch[n]);
		if (batch[n].kind == 0)
			continue;
		if (++n == CT_MAX_RECORDS) {
			send_records(batch, n);
			n = 0;
		}
	}
	send_records(batch, n);
	size_t lost = 0;
	if (cupti.num_dropped && cupti.num_dropped(ctx, stream, &lost) == CUPTI_SUCCESS && lost)
		__atomic_add_fetch(&cupti_dropped, lost, __ATOMIC_RELAXED);
	if (buffer) {
		free(buffer);
		__atomic_sub_fetch(&buffers_out, 1, __ATOMIC_RELAXED);
	}
}

/* ---- callback records: who enqueued what, and when ---- */

/* Each thread that makes an enqueuing call writes one record per call (its
 * entry: correlation id, thread, CLOCK_MONOTONIC time) into a chunk of its
 * own; the flusher sends what is new in every chunk before each CUPTI
 * flush, so a call's record goes out before the GPU records that carry its
 * correlation id. A chunk has one writer and one reader (the flusher):
 * count is published with release, read with acquire. Full chunks are
 * freed once sent; a thread's last chunk once the thread has ended. */
struct chunk {
	struct chunk *next;  /* every live chunk, under chunks_mu */
	uint32_t sent;       /* records sent (the flusher's) */
	uint32_t count;      /* records written (atomic) */
	int done;            /* no more will be written: full, or its thread ended (atomic) */
	struct ct_record r[CHUNK_RECORDS];
};

static pthread_mutex_t chunks_mu = PTHREAD_MUTEX_INITIALIZER;
static struct chunk *chunks;
static int nchunks;               /* under chunks_mu */
static uint64_t callbacks_lost;   /* records that found no chunk (atomic) */
static pthread_key_t chunk_key;   /* a thread's chunk, retired when it ends */
static int chunk_key_made;

/* Per thread: its chunk, its kernel thread id, and the enqueuing calls it
 * is inside (entered, not yet returned). A call's record is written when it
 * returns and spans it, entry to exit: a statically linked runtime's call
 * (cuBLASLt's) starts before the driver call cudatap traces inside it, so
 * its entry alone would point at the thread's previous op. The driver calls
 * a runtime call makes are not recorded: the GPU records carry the runtime
 * call's correlation id. A generation number resets the state when CUPTI
 * is taken back (an exit callback missed while CUPTI was away). */
enum { MAX_OPEN = 8 }; /* calls open at once per thread; deeper ones get their entry only */
struct open_call {
	uint32_t corr, cbid;
	uint64_t start;
};
struct thread_state {
	struct chunk *chunk;
	uint32_t tid;
	int depth; /* runtime calls open */
	int nopen;
	unsigned gen;
	struct open_call open[MAX_OPEN];
};
static __thread struct thread_state ts_self;
static unsigned cb_gen = 1; /* atomic */

static void chunk_retire(void *c)
{
	if (c)
		__atomic_store_n(&((struct chunk *)c)->done, 1, __ATOMIC_RELEASE);
}

static struct chunk *chunk_new(void)
{
	struct chunk *c = NULL;
	pthread_mutex_lock(&chunks_mu);
	if (nchunks < MAX_CHUNKS && (c = malloc(sizeof *c))) {
		c->sent = 0;
		c->count = 0;
		c->done = 0;
		c->next = chunks;
		chunks = c;
		nchunks++;
	}
	pthread_mutex_unlock(&chunks_mu);
	return c;
}

/* callback_record writes one record on the calling thread; the callback
 * path, so no lock, no system call but the first per thread. */
static void callback_record(struct thread_state *t, int runtime, uint32_t corr, uint32_t cbid, uint64_t start, uint64_t end)
{
	struct chunk *c = t->chunk;
	uint32_t n = c ? c->count : CHUNK_RECORDS; /* only this thread writes count */
	if (n == CHUNK_RECORDS) {
		if (c)
			chunk_retire(c);
		c = t->chunk = chunk_new();
		if (chunk_key_made)
			pthread_setspecific(chunk_key, c);
		if (!c) {
			__atomic_add_fetch(&callbacks_lost, 1, __ATOMIC_RELAXED);
			return;
		}
		n = 0;
	}
	struct ct_record *r = &c->r[n];
	*r = (struct ct_record){.kind = CT_API, .sub = (uint8_t)runtime, .flags = CT_FLAG_MONOTONIC, .correlation = corr,
				.start = start, .end = end, .a = t->tid, .b = cbid};
	__atomic_store_n(&c->count, n + 1, __ATOMIC_RELEASE);
}

/* The callback on the enqueuing calls: at the entry of a runtime call, or
 * of a driver call outside any, the call is opened; at its exit its record
 * is written. */
static void on_call(void *userdata, int domain, unsigned cbid, const void *data)
{
	(void)userdata;
	const ct_cupti_cbdata *d = data;
	struct thread_state *t = &ts_self;
	unsigned gen = __atomic_load_n(&cb_gen, __ATOMIC_RELAXED);
	if (t->gen != gen) {
		t->gen = gen;
		t->depth = t->nopen = 0;
		if (!t->tid)
			t->tid = (uint32_t)syscall(SYS_gettid);
	}
	int runtime = domain == CUPTI_CB_DOMAIN_RUNTIME_API;
	if (!runtime && t->depth > 0)
		return; /* inside a runtime call: its record stands for both */
	if (d->callbackSite != CUPTI_API_EXIT) {
		t->depth += runtime;
		uint64_t now = mono_ns();
		if (t->nopen < MAX_OPEN)
			t->open[t->nopen++] = (struct open_call){d->correlationId, cbid, now};
		else
			callback_record(t, runtime, d->correlationId, cbid, now, now);
		return;
	}
	if (runtime && t->depth > 0)
		t->depth--;
	/* Its entry is the innermost open call, unless an entry was missed
	 * (CUPTI taken while the call ran): those above it are dropped. */
	int i = t->nopen;
	while (i > 0 && t->open[i - 1].corr != d->correlationId)
		i--;
	if (i == 0)
		return; /* entered before CUPTI was ours, or past MAX_OPEN: written at entry */
	struct open_call *o = &t->open[i - 1];
	t->nopen = i - 1;
	callback_record(t, runtime, o->corr, o->cbid, o->start, mono_ns());
}

/* A forked child is another thread: its tid is its own. */
static void forked_child(void) { ts_self.tid = 0, ts_self.gen = 0, ts_self.nopen = 0, ts_self.chunk = NULL; }

/* send_callbacks sends every callback record written so far and frees
 * the chunks done with; the flusher's (and the last teardown's). */
static void send_callbacks(void)
{
	pthread_mutex_lock(&chunks_mu);
	struct chunk **pp = &chunks;
	while (*pp) {
		struct chunk *c = *pp;
		int done = __atomic_load_n(&c->done, __ATOMIC_ACQUIRE);
		uint32_t n = __atomic_load_n(&c->count, __ATOMIC_ACQUIRE);
		if (n > c->sent) {
			/* A record that cannot be sent goes uncounted here: the
			 * GPU records waiting for it are counted when they give up. */
			send_msg(CT_RECORDS, &c->r[c->sent], n - c->sent, (n - c->sent) * sizeof c->r[0], mono_ns());
			c->sent = n;
		}
		if (done && c->sent == __atomic_load_n(&c->count, __ATOMIC_ACQUIRE)) {
			*pp = c->next;
			nchunks--;
			free(c);
			continue;
		}
		pp = &c->next;
	}
	pthread_mutex_unlock(&chunks_mu);
}

/* is_enqueuing says whether CUPTI's name for a call is one of an
 * enqueuing call. */
static int is_enqueuing(const char *name)
{
	for (size_t i = 0; i < sizeof enqueuing / sizeof enqueuing[0]; i++)
		if (strncmp(name, enqueuing[i], strlen(enqueuing[i])) == 0)
			return 1;
	return 0;
}

static const CUpti_CallbackDomain domains[] = {CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_CB_DOMAIN_DRIVER_API};

/* enable_callbacks turns the callbacks on for every enqueuing call CUPTI
 * names (or off); the number of calls turned on. */
static int enable_callbacks(int on)
{
	int n = 0;
	for (size_t d = 0; d < sizeof domains / sizeof domains[0]; d++) {
		for (uint32_t cbid = 1; cbid < MAX_CBID; cbid++) {
			const char *name = NULL;
			if (cupti.callback_name(domains[d], cbid, &name) != CUPTI_SUCCESS || !name || !is_enqueuing(name))
				continue;
			if (cupti.enable_callback(on, subscriber, domains[d], cbid) == CUPTI_SUCCESS)
				n++;
		}
	}
	return n;
}

/* record_enqueuing_only has CUPTI's API records (their kinds on) left out
 * for every call but the enqueuing ones: as CUPTI does on the H200, a
 * call switched off is not recorded while its kind is on, and enabling
 * the kind again switches every call back on, so this follows each
 * enable. Without CUPTI's switches, or its names, every call is recorded.
 * The number of calls left recorded (0: all are). */
static int record_enqueuing_only(void)
{
	if (!cupti.record_runtime_api || !cupti.record_driver_api || !cupti.callback_name)
		return 0;
	int kept = 0;
	for (size_t d = 0; d < sizeof domains / sizeof domains[0]; d++) {
		CUptiResult (*record)(uint32_t, uint8_t) =
			domains[d] == CUPTI_CB_DOMAIN_RUNTIME_API ? cupti.record_runtime_api : cupti.record_driver_api;
		for (uint32_t cbid = 1; cbid < MAX_CBID; cbid++) {
			const char *name = NULL;
			if (cupti.callback_name(domains[d], cbid, &name) != CUPTI_SUCCESS || !name)
				continue;
			int keep = is_enqueuing(name);
			if (record(cbid, (uint8_t)keep) == CUPTI_SUCCESS)
				kept += keep;
		}
	}
	return kept;
}

/* ---- finding CUPTI ---- */

/* The directory of a library the process has loaded whose file name starts
 * with prefix, in out; 0 when found. */
struct find_lib {
	const char *prefix;
	char *out;
	size_t cap;
	int found;
};

static int find_lib_cb(struct dl_phdr_info *info, size_t sz, void *data)
{
	(void)sz;
	struct find_lib *f = data;
	const char *name = info->dlpi_name;
	if (!name || !*name)
		return 0;
	const char *base = strrchr(name, '/');
	base = base ? base + 1 : name;
	if (strncmp(base, f->prefix, strlen(f->prefix)) != 0)
		return 0;
	snprintf(f->out, f->cap, "%s", name);
	f->found = 1;
	return 1;
}

static int loaded(const char *prefix, char *out, size_t cap)
{
	struct find_lib f = {prefix, out, cap, 0};
	dl_iterate_phdr(find_lib_cb, &f);
	return f.found;
}

static int readable(const char *path) { return access(path, R_OK) == 0; }

/* find_cupti picks the process's own CUPTI: the configured path, one it
 * has loaded already (PyTorch links it), one next to its libcudart (pip's
 * NVIDIA wheels), the toolkit's. Never a copy of cudatap's. */
static int find_cupti(char *searched, size_t cap)
{
	char path[4096];
	if (cupti_path[0])
		return readable(cupti_path) ? 0 : (snprintf(searched, cap, "%s (--cupti)", cupti_path), -1);
	if (loaded("libcupti.so", path, sizeof path)) {
		snprintf(cupti_path, sizeof cupti_path, "%s", path);
		return 0;
	}
	size_t used = 0;
	searched[0] = 0;
	const char *candidates[8];
	int nc = 0;
	char next_to_cudart[3][4096];
	if (loaded("libcudart.so", path, sizeof path)) {
		char *slash = strrchr(path, '/');
		if (slash) {
			*slash = 0;
			snprintf(next_to_cudart[0], sizeof next_to_cudart[0], "%s/libcupti.so.13", path);
			snprintf(next_to_cudart[1], sizeof next_to_cudart[1], "%s/libcupti.so.12", path);
			/* nvidia/cuda_runtime/lib → nvidia/cuda_cupti/lib (CUDA 12 wheels) */
			snprintf(next_to_cudart[2], sizeof next_to_cudart[2], "%s/../../cuda_cupti/lib/libcupti.so.12", path);
			for (int i = 0; i < 3; i++)
				candidates[nc++] = next_to_cudart[i];
		}
	}
	candidates[nc++] = "/usr/local/cuda/extras/CUPTI/lib64/libcupti.so";
	candidates[nc++] = "/usr/local/cuda/lib64/libcupti.so";
	candidates[nc++] = "/usr/lib/x86_64-linux-gnu/libcupti.so";
	for (int i = 0; i < nc; i++) {
		if (readable(candidates[i])) {
			snprintf(cupti_path, sizeof cupti_path, "%s", candidates[i]);
			return 0;
		}
		used += snprintf(searched + used, used < cap ? cap - used : 0, "%s%s", i ? ", " : "", candidates[i]);
		if (used >= cap)
			used = cap - 1;
	}
	return -1;
}

static const char *result(CUptiResult r)
{
	const char *s = NULL;
	if (cupti.result_string && cupti.result_string(r, &s) == CUPTI_SUCCESS && s)
		return s;
	return "CUPTI error";
}

static void *sym(void *lib, const char *name, int *missing)
{
	void *p = dlsym(lib, name);
	if (!p && missing)
		*missing = 1;
	return p;
}

/* load_cupti resolves CUPTI's entry points; NULL on success, else why not. */
static const char *load_cupti(char *why, size_t cap)
{
	char searched[2048];
	if (find_cupti(searched, sizeof searched) != 0) {
		snprintf(why, cap, "no CUPTI found for this process (looked for %s): install the CUDA toolkit's CUPTI or pip's nvidia-cuda-cupti, or give --cupti PATH", searched);
		return why;
	}
	void *lib = dlopen(cupti_path, RTLD_NOW | RTLD_LOCAL);
	if (!lib) {
		snprintf(why, cap, "load %s: %s", cupti_path, dlerror());
		return why;
	}
	int missing = 0;
	cupti.subscribe = sym(lib, "cuptiSubscribe", &missing);
	cupti.unsubscribe = sym(lib, "cuptiUnsubscribe", &missing);
	cupti.register_callbacks = sym(lib, "cuptiActivityRegisterCallbacks", &missing);
	cupti.enable = sym(lib, "cuptiActivityEnable", &missing);
	cupti.disable = sym(lib, "cuptiActivityDisable", &missing);
	cupti.flush_all = sym(lib, "cuptiActivityFlushAll", &missing);
	cupti.next_record = sym(lib, "cuptiActivityGetNextRecord", &missing);
	cupti.num_dropped = sym(lib, "cuptiActivityGetNumDroppedRecords", &missing);
	cupti.timestamp = sym(lib, "cuptiGetTimestamp", &missing);
	cupti.finalize = sym(lib, "cuptiFinalize", &missing);
	cupti.register_timestamp = sym(lib, "cuptiActivityRegisterTimestampCallback", NULL);
	cupti.thread_id_type = sym(lib, "cuptiSetThreadIdType", NULL);
	cupti.result_string = sym(lib, "cuptiGetResultString", NULL);
	cupti.enable_callback = sym(lib, "cuptiEnableCallback", NULL);
	cupti.callback_name = sym(lib, "cuptiGetCallbackName", NULL);
	cupti.record_runtime_api = sym(lib, "cuptiActivityEnableRuntimeApi", NULL);
	cupti.record_driver_api = sym(lib, "cuptiActivityEnableDriverApi", NULL);
	if (missing) {
		memset(&cupti, 0, sizeof cupti);
		snprintf(why, cap, "%s lacks the activity API entry points cudatap needs (CUDA 11 or later)", cupti_path);
		return why;
	}
	return NULL;
}

static int enable_kinds(const CUpti_ActivityKind *k, size_t n, char *why, size_t cap)
{
	for (size_t i = 0; i < n; i++) {
		CUptiResult r = cupti.enable(k[i]);
		if (r != CUPTI_SUCCESS) {
			for (size_t j = 0; j < i; j++)
				cupti.disable(k[j]);
			snprintf(why, cap, "cuptiActivityEnable(%d): %s (%d)", k[i], result(r), r);
			return -1;
		}
	}
	return 0;
}

static void disable_kinds(void)
{
	for (size_t i = 0; i < sizeof gpu_kinds / sizeof gpu_kinds[0]; i++)
		cupti.disable(gpu_kinds[i]);
	if (join == JOIN_API)
		for (size_t i = 0; i < sizeof api_kinds / sizeof api_kinds[0]; i++)
			cupti.disable(api_kinds[i]);
}

/* subscribe takes CUPTI and enables what the join needs; NULL on success,
 * else why not (and nothing is left enabled). */
static const char *subscribe(char *why, size_t cap)
{
	/* Ops enqueued from here on are measured: an op enqueued while the
	 * kinds are being enabled may find no record, and waits for one only
	 * until the end (counted); one enqueued before would be unmatched. */
	uint64_t t0 = mono_ns();
	/* One subscriber per process: a profiler already in (PyTorch's,
	 * Nsight's) keeps it, and cudatap stays out of its way. */
	CUptiResult r = cupti.subscribe(&subscriber, (CUpti_CallbackFunc)on_call, NULL);
	if (r != CUPTI_SUCCESS) {
		subscriber = NULL;
		if (r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED)
			snprintf(why, cap, "another CUPTI client (a profiler) is active in this process: GPU times left to it");
		else
			snprintf(why, cap, "cuptiSubscribe: %s (%d)", result(r), r);
		return why;
	}
	own_clock = 0;
	if (!cupti_clock && cupti.register_timestamp && cupti.register_timestamp(mono_ns) == CUPTI_SUCCESS)
		own_clock = 1;
	if (cupti.thread_id_type)
		cupti.thread_id_type(CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM);
	if ((r = cupti.register_callbacks(buffer_requested, buffer_completed)) != CUPTI_SUCCESS) {
		snprintf(why, cap, "cuptiActivityRegisterCallbacks: %s (%d)", result(r), r);
		goto fail;
	}
	join = join_wanted;
	__atomic_add_fetch(&cb_gen, 1, __ATOMIC_RELAXED);
	if (join == JOIN_CALLBACKS && (!cupti.callback_name || !cupti.enable_callback || enable_callbacks(1) == 0))
		join = JOIN_API; /* a CUPTI that names no callback: its API records instead */
	if (join == JOIN_API) {
		if (enable_kinds(api_kinds, sizeof api_kinds / sizeof api_kinds[0], why, cap) != 0)
			goto fail;
		api_filtered = record_enqueuing_only() > 0;
	}
	if (enable_kinds(gpu_kinds, sizeof gpu_kinds / sizeof gpu_kinds[0], why, cap) != 0) {
		if (join == JOIN_API)
			for (size_t i = 0; i < sizeof api_kinds / sizeof api_kinds[0]; i++)
				cupti.disable(api_kinds[i]);
		goto fail;
	}
	enabled = 1;
	finalized = 0;
	since = t0;
	return NULL;
fail:
	cupti.unsubscribe(subscriber); /* its callbacks go with it */
	subscriber = NULL;
	return why;
}

/* setup finds and loads CUPTI and subscribes; NULL on success, else why not. */
static const char *setup(char *why, size_t cap)
{
	const char *err = load_cupti(why, cap);
	return err ? err : subscribe(why, cap);
}

/* cupti_mu orders what changes CUPTI's state (enabled, subscriber) and
 * the flushes. */
static pthread_mutex_t cupti_mu = PTHREAD_MUTEX_INITIALIZER;

/* release flushes what is buffered, then leaves CUPTI as it found it, cupti_mu held.
 * The mark goes after the last records: nothing may follow it. */
static void release(void)
{
	if (enabled) {
		send_callbacks();
		cupti.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
		disable_kinds();
		uint64_t t = mono_ns();
		cupti.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
		send_callbacks();
		send_msg(CT_MARK, NULL, 0, 0, t);
		enabled = 0;
	}
	if (subscriber) {
		cupti.unsubscribe(subscriber);
		subscriber = NULL;
	}
	if (cupti.finalize && !finalized) {
		finalized = 1;
		cupti.finalize();
	}
}

/* teardown releases CUPTI for good; whoever calls it first: the flusher,
 * or the exit of the process. */
static void teardown(void)
{
	pthread_mutex_lock(&cupti_mu);
	release();
	handed_over = 0;
	pthread_mutex_unlock(&cupti_mu);
}

/* hand_over lets CUPTI go to another client of the process, whose thread
 * cudatap holds at its call into CUPTI until the answer. */
static void hand_over(void)
{
	pthread_mutex_lock(&cupti_mu);
	if (enabled) {
		release();
		handed_over = 1;
		send_msg(CT_HANDED_OVER, NULL, 0, 0, mono_ns());
	}
	pthread_mutex_unlock(&cupti_mu);
}

/* take_back subscribes again once the other client finalized CUPTI; its
 * finalize may still be on its way out, so a refusal is tried again a few
 * times. */
static void take_back(void)
{
	char why[1024] = "";
	pthread_mutex_lock(&cupti_mu);
	int was = handed_over;
	pthread_mutex_unlock(&cupti_mu);
	if (!was)
		return;
	for (int i = 0; i < TAKE_BACK_TRIES; i++) {
		pthread_mutex_lock(&cupti_mu);
		const char *err = subscribe(why, sizeof why);
		if (!err) {
			handed_over = 0;
			send_text_at(CT_RESUMED, since, "cupti=%s clock=%s join=%s%s", cupti_path, own_clock ? "monotonic" : "cupti",
				     join_names[join], api_every_call());
		}
		pthread_mutex_unlock(&cupti_mu);
		if (!err)
			return;
		struct timespec ts = {0, TAKE_BACK_WAIT_MS * 1000000L};
		nanosleep(&ts, NULL);
	}
	send_text(CT_KEPT, "%s", why);
}

static void arm(void)
{
	pthread_mutex_lock(&arm_mu);
	armed = 1;
	pthread_cond_broadcast(&arm_cond);
	pthread_mutex_unlock(&arm_mu);
}

/* wait_armed waits until cudatap answered hello: it watches for another
 * CUPTI client of the process from then on (its hand-over), so the
 * program goes on only once it does. Bounded: a cudatap that never
 * answers delays the program ARM_WAIT_MS once. */
static void wait_armed(void)
{
	struct timespec until;
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += ARM_WAIT_MS / 1000;
	pthread_mutex_lock(&arm_mu);
	while (!armed)
		if (pthread_cond_timedwait(&arm_cond, &arm_mu, &until) != 0)
			break;
	pthread_mutex_unlock(&arm_mu);
}

/* A process that exits sends what CUPTI still holds: the last flush period
 * of a short program is not lost. */
static void at_exit(void)
{
	if (__atomic_load_n(&sock, __ATOMIC_RELAXED) < 0)
		return;
	teardown();
	send_msg(CT_BYE, NULL, 0, 0, mono_ns());
}

/* The flusher: says hello (with its thread, which cudatap never holds),
 * then every flush_ms sends the new callback records and a flush of the
 * full buffers, then a mark (every record of work complete before it was
 * sent, except those CUPTI still keeps in a buffer not full yet); hands
 * CUPTI over and takes it back when cudatap says so; on "stop" from
 * cudatap, or its socket closing, teardown. */
static void *flush_loop(void *arg)
{
	(void)arg;
	send_text(CT_HELLO, "cupti=%s clock=%s join=%s%s tid=%ld since=%llu", cupti_path, own_clock ? "monotonic" : "cupti",
		  join_names[join], api_every_call(), (long)syscall(SYS_gettid), (unsigned long long)since);
	for (;;) {
		struct pollfd p = {.fd = sock, .events = POLLIN};
		int n = poll(&p, 1, flush_ms);
		if (n < 0 && errno != EINTR)
			break;
		if (n > 0) {
			char cmd[16];
			ssize_t got = recv(sock, cmd, sizeof cmd, MSG_DONTWAIT);
			if (got <= 0 || cmd[0] == 'S')
				break; /* stop, or cudatap is gone */
			if (cmd[0] == 'A')
				arm();
			else if (cmd[0] == 'H')
				hand_over();
			else if (cmd[0] == 'T')
				take_back();
			continue;
		}
		if (__atomic_load_n(&peer_gone, __ATOMIC_RELAXED))
			break;
		pthread_mutex_lock(&cupti_mu);
		int on = enabled, away = handed_over;
		if (on) {
			/* Not forced: a forced flush hands over the records of work
			 * still running with zero times, and CUPTI never sends them
			 * again (a fifth of a GPT-2 step's kernels on the H200). */
			uint64_t t = mono_ns();
			send_callbacks();
			cupti.flush_all(0);
			send_msg(CT_MARK, NULL, 0, 0, t);
		}
		pthread_mutex_unlock(&cupti_mu);
		if (!on && !away)
			break; /* the process is exiting: at_exit took over */
	}
	arm(); /* no one waits for a word that cannot come */
	teardown();
	send_msg(CT_BYE, NULL, 0, 0, mono_ns());
	pthread_mutex_lock(&send_mu);
	close(sock);
	sock = -1;
	pthread_mutex_unlock(&send_mu);
	return NULL;
}

/* ---- configuration and start ---- */

static int read_config(void)
{
	Dl_info info;
	if (!dladdr((void *)read_config, &info) || !info.dli_fname)
		return -1;
	snprintf(dir, sizeof dir, "%s", info.dli_fname);
	char *slash = strrchr(dir, '/');
	if (!slash)
		return -1;
	*slash = 0;
	char path[4200];
	snprintf(path, sizeof path, "%s/config", dir);
	FILE *f = fopen(path, "re");
	if (!f)
		return -1;
	char line[4200];
	while (fgets(line, sizeof line, f)) {
		line[strcspn(line, "\n")] = 0;
		char *eq = strchr(line, '=');
		if (!eq)
			continue;
		*eq = 0;
		const char *v = eq + 1;
		if (!strcmp(line, "socket"))
			snprintf(socket_path, sizeof socket_path, "%s", v);
		else if (!strcmp(line, "cupti"))
			snprintf(cupti_path, sizeof cupti_path, "%s", v);
		else if (!strcmp(line, "flush_ms") && atoi(v) > 0)
			flush_ms = atoi(v);
		else if (!strcmp(line, "mode"))
			attach_mode = !strcmp(v, "attach");
		else if (!strcmp(line, "clock"))
			cupti_clock = !strcmp(v, "cupti");
		else if (!strcmp(line, "join"))
			for (size_t i = 0; i < sizeof join_names / sizeof join_names[0]; i++)
				if (!strcmp(v, join_names[i]))
					join_wanted = (enum join)i;
	}
	fclose(f);
	return socket_path[0] ? 0 : -1;
}

/* start connects to cudatap and sets CUPTI up; it runs once per process. */
static void start(void)
{
	if (__atomic_exchange_n(&started, 1, __ATOMIC_SEQ_CST))
		return;
	if ((!socket_path[0] && read_config() != 0) || (sock = connect_socket()) < 0)
		return; /* cudatap is not there: stay inert */
	chunk_key_made = pthread_key_create(&chunk_key, chunk_retire) == 0;
	pthread_atfork(NULL, NULL, forked_child);
	char why[3072];
	const char *err = setup(why, sizeof why);
	if (err) {
		send_text(CT_ERROR, "%s", err);
		close(sock);
		sock = -1;
		return;
	}
	atexit(at_exit);
	pthread_attr_t attr;
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	if (pthread_create(&flusher, &attr, flush_loop, NULL) != 0) {
		teardown();
		send_text(CT_ERROR, "cannot start the collector's thread");
		close(sock);
		sock = -1;
	} else {
		wait_armed();
	}
	pthread_attr_destroy(&attr);
}

static void *start_thread(void *arg)
{
	(void)arg;
	start();
	return NULL;
}

/* The CUDA driver's injection entry point (CUDA_INJECTION64_PATH), called
 * in cuInit on the application's thread: set up before any GPU work. */
EXPORT int InitializeInjection(void)
{
	start();
	return 1;
}

/* Loaded by cudatap into a running process: set up on a thread of its own,
 * so that the thread cudatap borrowed returns at once. */
__attribute__((constructor)) static void loaded_by_attach(void)
{
	if (read_config() == 0 && attach_mode) {
		pthread_t t;
		pthread_attr_t attr;
		pthread_attr_init(&attr);
		pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
		pthread_create(&t, &attr, start_thread, NULL);
		pthread_attr_destroy(&attr);
	}
}
