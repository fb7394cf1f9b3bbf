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
 * It never harms the process: CUPTI is the process's own (already mapped,
 * next to its libcudart, or the toolkit's), never bundled; another CUPTI
 * subscriber (a profiler) means it does nothing; buffers are bounded
 * (CUPTI counts what found no buffer), sends wait at most SEND_TIMEOUT_MS
 * and drop (counted) past it; when cudatap says stop, or its socket
 * closes because cudatap died, it flushes, disables every activity kind,
 * finalizes CUPTI and its thread ends.
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
	CUptiResult (*register_timestamp)(CUpti_TimestampCallbackFunc);
	CUptiResult (*thread_id_type)(int);
	CUptiResult (*result_string)(CUptiResult, const char **);
} cupti;

/* Runtime and driver calls both: a kernel launched through the runtime
 * carries the runtime call's correlation id (with the driver's alone, the
 * H200 joined almost none), one launched by the driver API the driver's. */
static const CUpti_ActivityKind kinds[] = {
	CUPTI_ACTIVITY_KIND_RUNTIME, CUPTI_ACTIVITY_KIND_DRIVER, CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
	CUPTI_ACTIVITY_KIND_MEMCPY, CUPTI_ACTIVITY_KIND_MEMSET,
};

static char dir[4096];         /* where this library and its config are */
static char socket_path[4096];
static char cupti_path[4096];  /* from the config, else found */
static int flush_ms = DEFAULT_FLUSH_MS;
static int attach_mode;        /* config mode=attach: loaded by dlopen, not by the driver */
static int cupti_clock;        /* config clock=cupti: keep CUPTI's own timestamps */
static int sock = -1;
static int started;            /* setup ran (once per process) */
static int enabled;            /* activity kinds on */
static int finalized;
static int own_clock;          /* CUPTI stamps with CLOCK_MONOTONIC */
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

static void send_text(int type, const char *fmt, ...)
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
	send_msg(type, text, (uint32_t)n, (size_t)n, mono_ns());
}

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
		break;
	}
	case CUPTI_ACTIVITY_KIND_MEMSET: {
		const ct_cupti_memset *x = (const void *)a;
		r->kind = CT_MEMSET;
		r->correlation = x->correlationId;
		r->start = x->start, r->end = x->end;
		r->a = x->deviceId, r->b = x->streamId;
		r->bytes = x->bytes;
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
	if (missing) {
		memset(&cupti, 0, sizeof cupti);
		snprintf(why, cap, "%s lacks the activity API entry points cudatap needs (CUDA 11 or later)", cupti_path);
		return why;
	}
	return NULL;
}

static void dummy_callback(void *u, int d, unsigned c, const void *x) { (void)u, (void)d, (void)c, (void)x; }

/* setup subscribes to CUPTI and enables the activity kinds; NULL on
 * success, else why not (and nothing is left enabled). */
static const char *setup(char *why, size_t cap)
{
	const char *err = load_cupti(why, cap);
	if (err)
		return err;
	/* One subscriber per process: a profiler already in (PyTorch's,
	 * Nsight's) keeps it, and cudatap stays out of its way. */
	CUptiResult r = cupti.subscribe(&subscriber, dummy_callback, NULL);
	if (r != CUPTI_SUCCESS) {
		subscriber = NULL;
		if (r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED)
			snprintf(why, cap, "another CUPTI client (a profiler) is active in this process: GPU times left to it");
		else
			snprintf(why, cap, "cuptiSubscribe: %s (%d)", result(r), r);
		return why;
	}
	if (!cupti_clock && cupti.register_timestamp && cupti.register_timestamp(mono_ns) == CUPTI_SUCCESS)
		own_clock = 1;
	if (cupti.thread_id_type)
		cupti.thread_id_type(CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM);
	if ((r = cupti.register_callbacks(buffer_requested, buffer_completed)) != CUPTI_SUCCESS) {
		snprintf(why, cap, "cuptiActivityRegisterCallbacks: %s (%d)", result(r), r);
		cupti.unsubscribe(subscriber);
		subscriber = NULL;
		return why;
	}
	for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
		if ((r = cupti.enable(kinds[i])) != CUPTI_SUCCESS) {
			for (size_t j = 0; j < i; j++)
				cupti.disable(kinds[j]);
			snprintf(why, cap, "cuptiActivityEnable(%d): %s (%d)", kinds[i], result(r), r);
			cupti.unsubscribe(subscriber);
			subscriber = NULL;
			return why;
		}
	}
	enabled = 1;
	return NULL;
}

/* teardown flushes what is buffered, then leaves CUPTI as it found it;
 * once, whoever calls it first: the flusher, or the exit of the process. */
static pthread_mutex_t cupti_mu = PTHREAD_MUTEX_INITIALIZER; /* enabled, flushes */

static void teardown(void)
{
	pthread_mutex_lock(&cupti_mu);
	if (enabled) {
		/* The mark goes after the last records: nothing may follow it. */
		cupti.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
		for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
			cupti.disable(kinds[i]);
		uint64_t t = mono_ns();
		cupti.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
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
	pthread_mutex_unlock(&cupti_mu);
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

/* The flusher: every flush_ms a flush of the full buffers, then a mark
 * (the model holds ops for their records a while past it); on "stop" from
 * cudatap, or its socket closing, teardown. */
static void *flush_loop(void *arg)
{
	(void)arg;
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
			continue;
		}
		if (__atomic_load_n(&peer_gone, __ATOMIC_RELAXED))
			break;
		pthread_mutex_lock(&cupti_mu);
		int on = enabled;
		if (on) {
			/* Not forced: a forced flush hands over the records of work
			 * still running with zero times, and CUPTI never sends them
			 * again (a fifth of a GPT-2 step's kernels on the H200). */
			uint64_t t = mono_ns();
			cupti.flush_all(0);
			send_msg(CT_MARK, NULL, 0, 0, t);
		}
		pthread_mutex_unlock(&cupti_mu);
		if (!on)
			break; /* the process is exiting: at_exit took over */
	}
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
	char why[3072];
	const char *err = setup(why, sizeof why);
	if (err) {
		send_text(CT_ERROR, "%s", err);
		close(sock);
		sock = -1;
		return;
	}
	send_text(CT_HELLO, "cupti=%s clock=%s", cupti_path, own_clock ? "monotonic" : "cupti");
	atexit(at_exit);
	pthread_attr_t attr;
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	if (pthread_create(&flusher, &attr, flush_loop, NULL) != 0) {
		teardown();
		send_text(CT_ERROR, "cannot start the collector's thread");
		close(sock);
		sock = -1;
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
