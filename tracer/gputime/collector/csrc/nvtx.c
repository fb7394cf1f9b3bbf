/*
 * nvtx.c: the collector library is also cudatap's NVTX injection library.
 *
 * NVTX v3 is header-only (PyTorch, cuDNN, most CUDA code): at a process's
 * first NVTX call it loads the library NVTX_INJECTION64_PATH names, as
 * NVTX v2's libnvToolsExt does, and calls its InitializeInjectionNvtx2,
 * which fills NVTX's function tables (by module and callback id,
 * nvtxTypes.h). cudatap sets that variable for the commands it launches,
 * with GPU times or without: this file needs nothing of CUPTI nor of
 * collector.c, and the library may be loaded by NVTX alone. It connects to
 * cudatap's NVTX socket, nvtx.sock beside the library; without one (cudatap
 * is gone, or did not ask) it declines, and NVTX makes every call a no-op.
 *
 * Each range pushed or popped, started or ended, and each mark, of any
 * domain, becomes a record (wire.h, CT_NVTX) with its thread, time
 * (CLOCK_MONOTONIC) and message, appended to one buffer under a lock; a
 * thread of its own sends the buffer every FLUSH_MS, and a call that finds
 * it full sends it. It never harms the process: the buffer is bounded, a
 * send waits SEND_TIMEOUT_MS at most and what it could not send is counted
 * (the header's dropped); when cudatap says stop ('S') or its socket
 * closes, the last records go and every call is a no-op from then on. A
 * child forked after the first NVTX call records nothing: it shares its
 * parent's socket, which it closes.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>
#include <wchar.h>

#include "wire.h"

#define EXPORT __attribute__((visibility("default")))

enum {
	FLUSH_MS = 50,
	SEND_TIMEOUT_MS = 50,
	MAX_DOMAINS = 256,
	MAX_STRINGS = 4096, /* registered strings kept (nvtxDomainRegisterString) */
};

/* NVTX's types, as nvtxTypes.h and nvToolsExt.h lay them out. */
typedef void (*nvtx_fn)(void);
typedef nvtx_fn **nvtx_table;
typedef struct {
	size_t struct_size;
	int (*get_module_function_table)(int module, nvtx_table *out_table, unsigned int *out_size);
} nvtx_callbacks;
typedef const void *(*nvtx_get_export_table)(uint32_t id);

typedef struct {
	uint16_t version, size;
	uint32_t category;
	int32_t color_type;
	uint32_t color;
	int32_t payload_type, reserved0;
	uint64_t payload;
	int32_t message_type;
	const void *message;
} nvtx_attributes;

_Static_assert(sizeof(nvtx_attributes) == 48, "nvtxEventAttributes_t");

enum { MODULE_CORE = 1, MODULE_CORE2 = 5, ETID_CALLBACKS = 1 };
enum { MESSAGE_ASCII = 1, MESSAGE_UNICODE = 2, MESSAGE_REGISTERED = 3 };
enum {
	CORE_MarkEx = 1, CORE_MarkA, CORE_MarkW, CORE_RangeStartEx, CORE_RangeStartA, CORE_RangeStartW, CORE_RangeEnd,
	CORE_RangePushEx, CORE_RangePushA, CORE_RangePushW, CORE_RangePop,
};
enum {
	CORE2_DomainMarkEx = 1, CORE2_DomainRangeStartEx, CORE2_DomainRangeEnd, CORE2_DomainRangePushEx,
	CORE2_DomainRangePop, CORE2_DomainResourceCreate, CORE2_DomainResourceDestroy, CORE2_DomainNameCategoryA,
	CORE2_DomainNameCategoryW, CORE2_DomainRegisterStringA, CORE2_DomainRegisterStringW, CORE2_DomainCreateA,
	CORE2_DomainCreateW, CORE2_DomainDestroy,
};

/* The connection and the buffer. */
static int sock = -1;
static int live;                  /* records are taken (atomic) */
static pthread_mutex_t buf_mu = PTHREAD_MUTEX_INITIALIZER;
static char buf[CT_NVTX_BYTES];   /* under buf_mu */
static size_t buf_len;
static uint32_t buf_count;
static pthread_mutex_t send_mu = PTHREAD_MUTEX_INITIALIZER;
static char out[CT_NVTX_BYTES];   /* what is being sent, under send_mu */
static uint64_t dropped;          /* records not sent (atomic) */
static uint64_t next_id;          /* range ids (atomic) */
static __thread uint32_t self_tid;
static __thread int depth;        /* the thread's pushed ranges of the default domain */

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint32_t tid(void)
{
	if (!self_tid)
		self_tid = (uint32_t)syscall(SYS_gettid);
	return self_tid;
}

/* send_out sends n records of out, len bytes; under send_mu. */
static void send_out(uint32_t n, size_t len, int type)
{
	struct ct_msg_hdr h;
	memset(&h, 0, sizeof h);
	h.magic = CT_MAGIC;
	h.version = CT_VERSION;
	h.type = (uint16_t)type;
	h.count = n;
	h.pid = (uint32_t)getpid();
	h.time = h.cupti_time = now_ns();
	h.dropped = __atomic_load_n(&dropped, __ATOMIC_RELAXED);
	struct iovec iov[2] = {{&h, sizeof h}, {out, len}};
	struct msghdr msg = {.msg_iov = iov, .msg_iovlen = len ? 2 : 1};
	if (sock < 0 || sendmsg(sock, &msg, MSG_NOSIGNAL) < 0) {
		__atomic_add_fetch(&dropped, n, __ATOMIC_RELAXED);
		if (sock >= 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
			__atomic_store_n(&live, 0, __ATOMIC_RELAXED); /* cudatap is gone */
	}
}

/* flush sends what the buffer holds. */
static void flush(void)
{
	pthread_mutex_lock(&send_mu);
	pthread_mutex_lock(&buf_mu);
	uint32_t n = buf_count;
	size_t len = buf_len;
	memcpy(out, buf, len);
	buf_len = 0, buf_count = 0;
	pthread_mutex_unlock(&buf_mu);
	if (n)
		send_out(n, len, CT_NVTX);
	pthread_mutex_unlock(&send_mu);
}

/* record appends one call; a message of up to CT_NVTX_MESSAGE bytes
 * (ascii), or of wide characters (wide: as ASCII, others as '?'). */
static void record(uint8_t kind, uint64_t id, uint64_t domain, const char *ascii, const wchar_t *wide)
{
	if (!__atomic_load_n(&live, __ATOMIC_RELAXED))
		return;
	struct ct_nvtx r = {.kind = kind, .tid = tid(), .time = now_ns(), .id = id, .domain = domain};
	size_t n = 0;
	if (ascii)
		n = strnlen(ascii, CT_NVTX_MESSAGE);
	else if (wide)
		n = wcsnlen(wide, CT_NVTX_MESSAGE);
	r.len = (uint16_t)n;
	size_t size = (sizeof r + n + 7) & ~(size_t)7;
	for (int tries = 0; tries < 2; tries++) {
		pthread_mutex_lock(&buf_mu);
		if (buf_len + size <= sizeof buf) {
			char *p = buf + buf_len;
			memcpy(p, &r, sizeof r);
			if (ascii)
				memcpy(p + sizeof r, ascii, n);
			for (size_t i = 0; wide && i < n; i++)
				p[sizeof r + i] = wide[i] > 0 && wide[i] < 128 ? (char)wide[i] : '?';
			memset(p + sizeof r + n, 0, size - sizeof r - n);
			buf_len += size, buf_count++;
			pthread_mutex_unlock(&buf_mu);
			return;
		}
		pthread_mutex_unlock(&buf_mu);
		flush(); /* full: send it, then try again once */
	}
	__atomic_add_fetch(&dropped, 1, __ATOMIC_RELAXED);
}

/* ---- the messages NVTX passes ---- */

/* Registered strings: nvtxDomainRegisterString's handle is the string. */
static const char *strings[MAX_STRINGS];
static int nstrings; /* atomic */

static const char *registered(const char *s)
{
	int i = __atomic_fetch_add(&nstrings, 1, __ATOMIC_RELAXED);
	if (i >= MAX_STRINGS || !s)
		return NULL;
	return strings[i] = strdup(s);
}

static void message_of(const nvtx_attributes *a, const char **ascii, const wchar_t **wide)
{
	*ascii = NULL, *wide = NULL;
	if (!a)
		return;
	switch (a->message_type) {
	case MESSAGE_ASCII:
	case MESSAGE_REGISTERED:
		*ascii = a->message;
		break;
	case MESSAGE_UNICODE:
		*wide = a->message;
		break;
	}
}

/* Domains: a handle is its number, 1 and up (0 is the default domain). */
static int ndomains; /* atomic */

static uint64_t domain_of(const void *handle) { return (uint64_t)(uintptr_t)handle; }

/* ---- the handlers NVTX calls ---- */

static int push(uint64_t domain, const char *ascii, const wchar_t *wide)
{
	record(CT_NVTX_PUSH, 0, domain, ascii, wide);
	return domain ? 0 : depth++;
}

static int pop(uint64_t domain)
{
	record(CT_NVTX_POP, 0, domain, NULL, NULL);
	if (domain)
		return 0;
	return depth > 0 ? --depth : -1;
}

static uint64_t start(uint64_t domain, const char *ascii, const wchar_t *wide)
{
	uint64_t id = __atomic_add_fetch(&next_id, 1, __ATOMIC_RELAXED);
	record(CT_NVTX_START, id, domain, ascii, wide);
	return id;
}

static int range_push_a(const char *m) { return push(0, m, NULL); }
static int range_push_w(const wchar_t *m) { return push(0, NULL, m); }
static int range_pop(void) { return pop(0); }
static uint64_t range_start_a(const char *m) { return start(0, m, NULL); }
static uint64_t range_start_w(const wchar_t *m) { return start(0, NULL, m); }
static void range_end(uint64_t id) { record(CT_NVTX_END, id, 0, NULL, NULL); }
static void mark_a(const char *m) { record(CT_NVTX_MARK, 0, 0, m, NULL); }
static void mark_w(const wchar_t *m) { record(CT_NVTX_MARK, 0, 0, NULL, m); }

static int range_push_ex(const nvtx_attributes *a)
{
	const char *s;
	const wchar_t *w;
	message_of(a, &s, &w);
	return push(0, s, w);
}

static uint64_t range_start_ex(const nvtx_attributes *a)
{
	const char *s;
	const wchar_t *w;
	message_of(a, &s, &w);
	return start(0, s, w);
}

static void mark_ex(const nvtx_attributes *a)
{
	const char *s;
	const wchar_t *w;
	message_of(a, &s, &w);
	record(CT_NVTX_MARK, 0, 0, s, w);
}

static int domain_push_ex(const void *d, const nvtx_attributes *a)
{
	const char *s;
	const wchar_t *w;
	message_of(a, &s, &w);
	return push(domain_of(d), s, w);
}

static int domain_pop(const void *d) { return pop(domain_of(d)); }

static uint64_t domain_start_ex(const void *d, const nvtx_attributes *a)
{
	const char *s;
	const wchar_t *w;
	message_of(a, &s, &w);
	return start(domain_of(d), s, w);
}

static void domain_end(const void *d, uint64_t id) { record(CT_NVTX_END, id, domain_of(d), NULL, NULL); }

static void domain_mark_ex(const void *d, const nvtx_attributes *a)
{
	const char *s;
	const wchar_t *w;
	message_of(a, &s, &w);
	record(CT_NVTX_MARK, 0, domain_of(d), s, w);
}

static const void *domain_create(const void *name)
{
	(void)name;
	int n = __atomic_add_fetch(&ndomains, 1, __ATOMIC_RELAXED);
	return (const void *)(uintptr_t)(n <= MAX_DOMAINS ? n : MAX_DOMAINS);
}

static void domain_destroy(const void *d) { (void)d; }

static const void *register_string_a(const void *d, const char *s)
{
	(void)d;
	return registered(s);
}

static const void *register_string_w(const void *d, const wchar_t *w)
{
	(void)d;
	char s[CT_NVTX_MESSAGE + 1];
	size_t n = w ? wcsnlen(w, CT_NVTX_MESSAGE) : 0;
	for (size_t i = 0; i < n; i++)
		s[i] = w[i] > 0 && w[i] < 128 ? (char)w[i] : '?';
	s[n] = 0;
	return registered(w ? s : NULL);
}

/* ---- the connection ---- */

static int connect_nvtx(void)
{
	Dl_info info;
	if (!dladdr((void *)connect_nvtx, &info) || !info.dli_fname)
		return -1;
	struct sockaddr_un addr = {.sun_family = AF_UNIX};
	const char *slash = strrchr(info.dli_fname, '/');
	size_t dir = slash ? (size_t)(slash - info.dli_fname) : 0;
	static const char name[] = "/nvtx.sock";
	if (!slash || dir + sizeof name > sizeof addr.sun_path)
		return -1;
	memcpy(addr.sun_path, info.dli_fname, dir);
	memcpy(addr.sun_path + dir, name, sizeof name);
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	if (connect(fd, (struct sockaddr *)&addr, sizeof addr) < 0) {
		close(fd);
		return -1;
	}
	struct timeval tv = {.tv_sec = 0, .tv_usec = SEND_TIMEOUT_MS * 1000};
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
	int sndbuf = 1 << 20; /* capped by net.core.wmem_max */
	setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf);
	return fd;
}

/* stop sends the last records and says bye: nothing is taken after. */
static void stop(void)
{
	if (!__atomic_exchange_n(&live, 0, __ATOMIC_SEQ_CST))
		return;
	flush();
	pthread_mutex_lock(&send_mu);
	send_out(0, 0, CT_BYE);
	pthread_mutex_unlock(&send_mu);
}

/* The flusher: every FLUSH_MS, what the buffer holds; on cudatap's 'S',
 * or its socket closing, the last of it. */
static void *flush_loop(void *arg)
{
	(void)arg;
	while (__atomic_load_n(&live, __ATOMIC_RELAXED)) {
		struct pollfd p = {.fd = sock, .events = POLLIN};
		int n = poll(&p, 1, FLUSH_MS);
		if (n < 0 && errno != EINTR)
			break;
		if (n > 0) {
			char cmd[16];
			ssize_t got = recv(sock, cmd, sizeof cmd, MSG_DONTWAIT);
			if (got <= 0 || cmd[0] == 'S')
				break;
			continue;
		}
		flush();
	}
	stop();
	return NULL;
}

static void at_exit(void) { stop(); }

/* A child shares the parent's connection: it must not write to it. */
static void forked_child(void)
{
	__atomic_store_n(&live, 0, __ATOMIC_RELAXED);
	if (sock >= 0)
		close(sock);
	sock = -1;
	buf_len = 0, buf_count = 0;
	self_tid = 0;
}

/* fill puts handlers into an NVTX module's table, by callback id. */
static void fill(nvtx_table table, unsigned int size, const nvtx_fn *handlers, unsigned int n)
{
	for (unsigned int i = 1; i < size && i < n; i++)
		if (handlers[i] && table[i])
			*table[i] = handlers[i];
}

/* NVTX's injection entry point (NVTX_INJECTION64_PATH): 1 when cudatap
 * takes the process's annotations, 0 to leave NVTX a no-op. */
EXPORT int InitializeInjectionNvtx2(nvtx_get_export_table get)
{
	const nvtx_callbacks *cb = get ? get(ETID_CALLBACKS) : NULL;
	if (!cb || cb->struct_size < sizeof *cb || !cb->get_module_function_table)
		return 0;
	if ((sock = connect_nvtx()) < 0)
		return 0; /* cudatap is not listening: NVTX calls cost nothing */
	nvtx_fn core[CORE_RangePop + 1] = {
		[CORE_MarkEx] = (nvtx_fn)mark_ex, [CORE_MarkA] = (nvtx_fn)mark_a, [CORE_MarkW] = (nvtx_fn)mark_w,
		[CORE_RangeStartEx] = (nvtx_fn)range_start_ex, [CORE_RangeStartA] = (nvtx_fn)range_start_a,
		[CORE_RangeStartW] = (nvtx_fn)range_start_w, [CORE_RangeEnd] = (nvtx_fn)range_end,
		[CORE_RangePushEx] = (nvtx_fn)range_push_ex, [CORE_RangePushA] = (nvtx_fn)range_push_a,
		[CORE_RangePushW] = (nvtx_fn)range_push_w, [CORE_RangePop] = (nvtx_fn)range_pop,
	};
	nvtx_fn core2[CORE2_DomainDestroy + 1] = {
		[CORE2_DomainMarkEx] = (nvtx_fn)domain_mark_ex, [CORE2_DomainRangeStartEx] = (nvtx_fn)domain_start_ex,
		[CORE2_DomainRangeEnd] = (nvtx_fn)domain_end, [CORE2_DomainRangePushEx] = (nvtx_fn)domain_push_ex,
		[CORE2_DomainRangePop] = (nvtx_fn)domain_pop, [CORE2_DomainRegisterStringA] = (nvtx_fn)register_string_a,
		[CORE2_DomainRegisterStringW] = (nvtx_fn)register_string_w, [CORE2_DomainCreateA] = (nvtx_fn)domain_create,
		[CORE2_DomainCreateW] = (nvtx_fn)domain_create, [CORE2_DomainDestroy] = (nvtx_fn)domain_destroy,
	};
	nvtx_table table = NULL;
	unsigned int size = 0;
	if (!cb->get_module_function_table(MODULE_CORE, &table, &size) || !table) {
		close(sock);
		sock = -1;
		return 0;
	}
	fill(table, size, core, sizeof core / sizeof core[0]);
	if (cb->get_module_function_table(MODULE_CORE2, &table, &size) && table)
		fill(table, size, core2, sizeof core2 / sizeof core2[0]);
	__atomic_store_n(&live, 1, __ATOMIC_SEQ_CST);
	pthread_atfork(NULL, NULL, forked_child);
	atexit(at_exit);
	pthread_t t;
	pthread_attr_t attr;
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	if (pthread_create(&t, &attr, flush_loop, NULL) != 0) {
		/* Without the flusher, records go when the buffer fills and at
		 * exit: still every one. */
	}
	pthread_attr_destroy(&attr);
	return 1;
}
