/*
 * nccl_sim.c: a simulated NCCL, libnccl.so.2, with the real entry points and
 * prototypes. As in real NCCL, each entry point is defined as pncclX (the
 * profiling interface) and ncclX is a weak alias of it: one address, two
 * names, so a probe on either fires once per call.
 *
 * Nothing is copied: a collective enqueues GPU work of 5 us + bytes / 20
 * GB/s on its stream in the simulated driver's model (libcuda.so.1, through
 * its private sim_enqueue), so it shares clocks, event edges and implicit
 * legacy-stream dependencies with the runtime's and driver's work. The bytes
 * of a collective are those of its larger buffer: count elements for
 * all-reduce, broadcast, reduce, send and receive, nranks * count for
 * all-gather and reduce-scatter. Between ncclGroupStart and ncclGroupEnd
 * (per thread, nestable) operations are held back and enqueued, in call
 * order, by the outermost ncclGroupEnd, as NCCL launches a group's work at
 * its end.
 *
 * Ranks in other processes. A unique id made with SIM_NCCL_ID set is a job's
 * (its first word is SIM_NCCL_ID, the other words 0, as rank 0 would hand it
 * to the others): a communicator of 2 or more ranks on such an id couples
 * the processes that play its ranks on this machine, as NCCL does. Any
 * other communicator spans this process only and waits for nobody (a
 * process may play one rank of a larger job alone). The ranks share a file
 * in /dev/shm, cudatap-sim-nccl-[RUN-]ID (ID as 0x%lx; RUN: SIM_NCCL_RUN if
 * set), made by whichever rank comes first, sized for the world (struct
 * seg; NCCLSegment and ReadNCCLSegment in internal/sim read it). Under a
 * lock on the file, a rank joining takes it for a leftover of a killed run,
 * and replaces it, when its own slot is taken already or another slot's
 * process is dead or has left. ncclCommInitRank returns once every rank has
 * joined; ncclCommDestroy first waits for the communicator's collectives to
 * be met; the last rank to leave removes the file.
 *
 * Each collective is a meeting, numbered per rank in call order (sends and
 * receives pair two ranks, not all, and the simulated jobs do not pair them
 * up, every rank naming peer 0: they are no meetings and wait for nobody).
 * Rank r arrives at meeting k when it makes its k-th collective, at the
 * time its stream is ready for it (as far as known then: no earlier than
 * the call), and the meeting is met once every rank has arrived. The
 * collective's GPU work ends at max(ready, the last rank's arrival) + its
 * duration in the driver's model (sim_enqueue_meeting), and what follows it
 * on its stream or waits for it through events ends later still: so
 * cudaStreamSynchronize, cudaEventSynchronize, cudaDeviceSynchronize and
 * every other synchronizing call block, and queries report not ready, until
 * the last rank arrived. A late rank holds the others up; a rank that stops
 * arriving hangs them. The host does not wait in the collective call itself
 * unless the process has SIM_MEETINGS_MAX meetings not met yet (NCCL's
 * queue of work is full). The driver keeps the time hosts block on meetings
 * (sim_meeting_wait_ns); a rank's blocked_on in the file is the first
 * meeting not met when its host last blocked on one (1-based), for tests to
 * see a hang.
 *
 * Environment: SIM_NCCL_ID (ncclGetUniqueId): the job's id, shared by the
 * processes of its ranks; SIM_NCCL_RUN (ncclCommInitRank): a token naming
 * one run of a job, which keeps it apart from what a killed run left
 * behind. The workload's scenario nccl also reads SIM_NCCL_RANK,
 * SIM_NCCL_NRANKS, SIM_NCCL_DELAY_US (a straggler) and SIM_NCCL_STOP_AFTER
 * (a hung rank): see workload.c.
 */
#define _GNU_SOURCE
#include "nccl_sim.h"
#include "cuda_driver_sim.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#if defined(__GNUC__) && !defined(__clang__)
#define API __attribute__((noinline, noipa, used, visibility("default")))
#else
#define API __attribute__((noinline, used, visibility("default")))
#endif

/* ncclX: a weak alias of pncclX, declared after pncclX's definition. */
#define WEAK_ALIAS(ret, name, ...) \
	__attribute__((weak, alias("p" #name), visibility("default"))) ret name(__VA_ARGS__)

#define BASE_NS 5000
#define BYTES_PER_NS 20 /* 20 GB/s */

struct shared;

struct ncclComm {
	int nranks, rank;
	struct shared *sh; /* ranks in other processes; NULL: none */
};

static const size_t type_size[ncclNumTypes] = {
	[ncclInt8] = 1,	   [ncclUint8] = 1,   [ncclInt32] = 4,	 [ncclUint32] = 4,  [ncclInt64] = 8,
	[ncclUint64] = 8,  [ncclFloat16] = 2, [ncclFloat32] = 4, [ncclFloat64] = 8, [ncclBfloat16] = 2,
};

/* Work held back by an open group on this thread. */
struct pending {
	struct shared *sh; /* a meeting of ranks in other processes; or NULL */
	cudaStream_t stream;
	int64_t ns;
};
static __thread int group_depth;
static __thread struct pending *group_ops;
static __thread size_t group_len, group_cap;

static int64_t duration_ns(size_t bytes)
{
	return BASE_NS + (int64_t)(bytes / BYTES_PER_NS);
}

/* ---- ranks in other processes ---- */

/* The arrival times a rank keeps in the file, by meeting modulo RING. A rank
 * overwrites the slot of meeting k - RING only once every rank's process
 * has taken that meeting's time (cached), which the queue limit
 * (SIM_MEETINGS_MAX) makes the case already. */
#define RING (2 * SIM_MEETINGS_MAX)
#define SEG_MAGIC 0x6c63636e6d697363ULL /* "csimnccl" */
/* Waits sleep on the file's generation word, which every change moves (a
 * futex wake). WAKE_NS bounds such a sleep anyway, for a change it cannot
 * see: in the file of another communicator of the process, or a file
 * replaced. POLL_NS paces the waits on the queue limit, which are rare. */
#define WAKE_NS 2000000
#define POLL_NS 1000000

enum { SLOT_FREE, SLOT_JOINED, SLOT_LEFT };

/* The file: 64-bit words (gen and pad share one). */
struct seg_rank {
	uint64_t pid;        /* the process playing the rank */
	uint64_t state;      /* SLOT_* */
	uint64_t arrived;    /* collectives it made: meetings it arrived at */
	uint64_t cached;     /* meetings its process took the times of */
	uint64_t blocked_on; /* see the header comment; 0 = none */
	int64_t arrival[RING];
};
struct seg {
	uint64_t magic, nranks;
	uint32_t gen, pad; /* gen: bumped (a futex wake) at every join, arrival and leave */
	struct seg_rank rank[];
};

/* A communicator's link to the file, in this process. */
struct shared {
	pthread_mutex_t mu;
	struct seg *seg;
	size_t size;
	int fd, rank, nranks;
	char path[128];
	uint64_t arrived; /* meetings this rank arrived at */
	uint64_t done;    /* the meetings met, which are met in order */
	struct meeting *at[RING]; /* meeting k at k % RING, until met */
	struct shared *next;
};

/* One meeting, as the driver's model sees it. Never freed: a time of the
 * model may name it for as long as the process lives (a few dozen bytes per
 * collective of a communicator with ranks elsewhere). */
struct meeting {
	struct sim_meeting base;
	struct shared *sh; /* until met */
	int64_t time;      /* the last rank's arrival; -1 until met */
};

/* The linked communicators, for the queue limit; unmet: meetings enqueued
 * by this process and not met yet. */
static pthread_mutex_t shared_mu = PTHREAD_MUTEX_INITIALIZER;
static struct shared *shared_list;
static int unmet;

static void nap(void)
{
	struct timespec ts = { 0, POLL_NS };
	nanosleep(&ts, NULL);
}

/* Sleeps until the file's generation moves from gen, at most WAKE_NS. */
static void seg_wait(struct seg *g, uint32_t gen)
{
	struct timespec ts = { 0, WAKE_NS };
	syscall(SYS_futex, &g->gen, FUTEX_WAIT, gen, &ts, NULL, 0);
}

/* Wakes every process waiting on the file: something changed. */
static void seg_bump(struct seg *g)
{
	__atomic_add_fetch(&g->gen, 1, __ATOMIC_SEQ_CST);
	syscall(SYS_futex, &g->gen, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

/* Takes the times of the meetings met since the last look, in order (sh->mu
 * held). */
static void advance_locked(struct shared *sh)
{
	struct seg *g = sh->seg;
	while (sh->done < sh->arrived) {
		uint64_t k = sh->done;
		int64_t last = 0;
		for (int r = 0; r < sh->nranks; r++) {
			if (__atomic_load_n(&g->rank[r].arrived, __ATOMIC_ACQUIRE) <= k)
				goto out;
			int64_t t = __atomic_load_n(&g->rank[r].arrival[k % RING], __ATOMIC_RELAXED);
			last = last > t ? last : t;
		}
		struct meeting *m = sh->at[k % RING];
		sh->at[k % RING] = NULL;
		__atomic_store_n(&m->time, last, __ATOMIC_RELEASE);
		sh->done++;
		__atomic_fetch_sub(&unmet, 1, __ATOMIC_RELAXED);
	}
out:
	__atomic_store_n(&g->rank[sh->rank].cached, sh->done, __ATOMIC_RELEASE);
}

static void advance(struct shared *sh)
{
	pthread_mutex_lock(&sh->mu);
	advance_locked(sh);
	pthread_mutex_unlock(&sh->mu);
}

/* The driver's question (struct sim_meeting). */
static long long meeting_met(struct sim_meeting *base, int blocking)
{
	struct meeting *m = (struct meeting *)base;
	int64_t t = __atomic_load_n(&m->time, __ATOMIC_ACQUIRE);
	if (t >= 0)
		return t;
	struct shared *sh = m->sh;
	pthread_mutex_lock(&sh->mu);
	advance_locked(sh);
	t = m->time;
	if (t < 0 && blocking)
		__atomic_store_n(&sh->seg->rank[sh->rank].blocked_on, sh->done + 1, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&sh->mu);
	return t;
}

/* The driver's wait between two questions (struct sim_meeting). */
static void meeting_wait(struct sim_meeting *base)
{
	struct meeting *m = (struct meeting *)base;
	if (__atomic_load_n(&m->time, __ATOMIC_ACQUIRE) >= 0)
		return;
	struct seg *g = m->sh->seg;
	uint32_t gen = __atomic_load_n(&g->gen, __ATOMIC_SEQ_CST);
	if (meeting_met(base, 0) < 0)
		seg_wait(g, gen);
}

/* Waits until this process has fewer than SIM_MEETINGS_MAX meetings not met,
 * and takes a place for one more. */
static void reserve_meeting(void)
{
	for (;;) {
		int u = __atomic_load_n(&unmet, __ATOMIC_RELAXED);
		if (u < SIM_MEETINGS_MAX) {
			if (__atomic_compare_exchange_n(&unmet, &u, u + 1, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
				return;
			continue;
		}
		pthread_mutex_lock(&shared_mu);
		for (struct shared *sh = shared_list; sh; sh = sh->next)
			advance(sh);
		pthread_mutex_unlock(&shared_mu);
		nap();
	}
}

/* Whether every rank still in the job took the time of meeting k - RING,
 * whose arrival slot meeting k reuses (sh->mu held). */
static int slot_free_locked(struct shared *sh, uint64_t k)
{
	for (int r = 0; r < sh->nranks; r++) {
		struct seg_rank *sr = &sh->seg->rank[r];
		if (__atomic_load_n(&sr->state, __ATOMIC_ACQUIRE) == SLOT_JOINED &&
		    __atomic_load_n(&sr->cached, __ATOMIC_ACQUIRE) + RING <= k)
			return 0;
	}
	return 1;
}

/* Enqueues a collective of ns on stream as this rank's next meeting. */
static ncclResult_t meet(struct shared *sh, cudaStream_t stream, int64_t ns)
{
	struct meeting *m = malloc(sizeof *m);
	if (!m)
		return ncclSystemError;
	m->base.met = meeting_met;
	m->base.wait = meeting_wait;
	m->sh = sh;
	m->time = -1;
	reserve_meeting();
	pthread_mutex_lock(&sh->mu);
	uint64_t k = sh->arrived;
	while (!slot_free_locked(sh, k)) {
		pthread_mutex_unlock(&sh->mu);
		nap();
		pthread_mutex_lock(&sh->mu);
	}
	sh->at[k % RING] = m;
	pthread_mutex_unlock(&sh->mu);
	/* Not under sh->mu: the driver asks meetings whether they are met
	 * under its own lock. Meeting k is not looked at before it is
	 * counted in sh->arrived. */
	long long ready;
	sim_enqueue_meeting(stream, ns, &m->base, &ready);
	pthread_mutex_lock(&sh->mu);
	struct seg_rank *me = &sh->seg->rank[sh->rank];
	__atomic_store_n(&me->arrival[k % RING], ready, __ATOMIC_RELAXED);
	__atomic_store_n(&me->arrived, k + 1, __ATOMIC_SEQ_CST);
	sh->arrived = k + 1;
	advance_locked(sh);
	pthread_mutex_unlock(&sh->mu);
	seg_bump(sh->seg);
	return ncclSuccess;
}

/* Enqueues work of ns on stream: a meeting of sh's ranks, or no meeting
 * (sh NULL). */
static ncclResult_t enqueue(struct shared *sh, cudaStream_t stream, int64_t ns)
{
	if (sh)
		return meet(sh, stream, ns);
	return sim_enqueue(stream, ns) == CUDA_SUCCESS ? ncclSuccess : ncclUnhandledCudaError;
}

static int alive(uint64_t pid)
{
	return pid && (kill((pid_t)pid, 0) == 0 || errno != ESRCH);
}

/* Whether the file is an earlier run's, for rank to join anew (under the
 * file's lock). */
static int leftover(const struct seg *g, int nranks, int rank)
{
	if (g->magic != SEG_MAGIC || g->nranks != (uint64_t)nranks || g->rank[rank].state != SLOT_FREE)
		return 1;
	for (int r = 0; r < nranks; r++)
		if (g->rank[r].state == SLOT_LEFT || (g->rank[r].state == SLOT_JOINED && !alive(g->rank[r].pid)))
			return 1;
	return 0;
}

/* Whether path still names the file open as fd. */
static int same_file(const char *path, int fd)
{
	struct stat a, b;
	return stat(path, &a) == 0 && fstat(fd, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

static void close_shared(struct shared *sh)
{
	munmap(sh->seg, sh->size);
	close(sh->fd);
	sh->seg = NULL;
	sh->fd = -1;
}

/* Takes rank's slot in the job's file (see the header comment). */
static ncclResult_t join(struct shared *sh)
{
	for (;;) {
		int fd = open(sh->path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
		if (fd < 0)
			return ncclSystemError;
		flock(fd, LOCK_EX);
		struct stat st;
		if (!same_file(sh->path, fd) || fstat(fd, &st) != 0) {
			close(fd); /* replaced or removed meanwhile: again */
			continue;
		}
		int fresh = st.st_size == 0;
		if (fresh && ftruncate(fd, (off_t)sh->size) != 0) {
			close(fd);
			return ncclSystemError;
		}
		if (!fresh && (size_t)st.st_size != sh->size) {
			unlink(sh->path); /* another world size: a leftover */
			close(fd);
			continue;
		}
		struct seg *g = mmap(NULL, sh->size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		if (g == MAP_FAILED) {
			close(fd);
			return ncclSystemError;
		}
		if (fresh) {
			g->magic = SEG_MAGIC;
			g->nranks = (uint64_t)sh->nranks;
		} else if (leftover(g, sh->nranks, sh->rank)) {
			unlink(sh->path);
			seg_bump(g); /* ranks of this run that joined it join anew */
			munmap(g, sh->size);
			close(fd);
			continue;
		}
		struct seg_rank *me = &g->rank[sh->rank];
		memset(me, 0, sizeof *me);
		me->pid = (uint64_t)getpid();
		__atomic_store_n(&me->state, SLOT_JOINED, __ATOMIC_SEQ_CST);
		seg_bump(g);
		flock(fd, LOCK_UN);
		sh->seg = g;
		sh->fd = fd;
		return ncclSuccess;
	}
}

/* Waits until every rank joined. A rank that came later may have found the
 * file a leftover and replaced it: then this one joins the new one. */
static ncclResult_t wait_joined(struct shared *sh)
{
	for (;;) {
		uint32_t gen = __atomic_load_n(&sh->seg->gen, __ATOMIC_SEQ_CST);
		int all = 1;
		for (int r = 0; r < sh->nranks && all; r++)
			all = __atomic_load_n(&sh->seg->rank[r].state, __ATOMIC_SEQ_CST) != SLOT_FREE;
		if (all)
			return ncclSuccess;
		if (!same_file(sh->path, sh->fd)) {
			close_shared(sh);
			ncclResult_t res = join(sh);
			if (res != ncclSuccess)
				return res;
			continue;
		}
		seg_wait(sh->seg, gen);
	}
}

/* Links c to the processes of the other ranks of job id: takes its slot in
 * the job's file and waits for every rank to take theirs. */
static ncclResult_t join_ranks(struct ncclComm *c, long id)
{
	struct shared *sh = calloc(1, sizeof *sh);
	if (!sh)
		return ncclSystemError;
	pthread_mutex_init(&sh->mu, NULL);
	sh->rank = c->rank;
	sh->nranks = c->nranks;
	sh->fd = -1;
	sh->size = sizeof(struct seg) + (size_t)c->nranks * sizeof(struct seg_rank);
	char run[64] = "";
	const char *env = getenv("SIM_NCCL_RUN");
	if (env && *env) {
		/* Only characters safe in a file name; others become '_'. */
		size_t n = 0;
		for (; env[n] && n < sizeof run - 2; n++) {
			char ch = env[n];
			int ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
				 ch == '-' || ch == '_' || ch == '.';
			run[n] = ok ? ch : '_';
		}
		run[n++] = '-';
		run[n] = 0;
	}
	snprintf(sh->path, sizeof sh->path, "/dev/shm/cudatap-sim-nccl-%s%#lx", run, (unsigned long)id);
	ncclResult_t res = join(sh);
	if (res == ncclSuccess)
		res = wait_joined(sh);
	if (res != ncclSuccess) {
		if (sh->seg)
			close_shared(sh);
		free(sh);
		return res;
	}
	pthread_mutex_lock(&shared_mu);
	sh->next = shared_list;
	shared_list = sh;
	pthread_mutex_unlock(&shared_mu);
	c->sh = sh;
	return ncclSuccess;
}

/* Waits for the communicator's meetings, leaves the file (the last rank
 * out removes it) and unlinks the communicator from it. */
static void leave_ranks(struct shared *sh)
{
	for (;;) {
		uint32_t gen = __atomic_load_n(&sh->seg->gen, __ATOMIC_SEQ_CST);
		pthread_mutex_lock(&sh->mu);
		advance_locked(sh);
		int pending = sh->done < sh->arrived;
		pthread_mutex_unlock(&sh->mu);
		if (!pending)
			break;
		seg_wait(sh->seg, gen);
	}
	pthread_mutex_lock(&shared_mu);
	for (struct shared **pp = &shared_list; *pp; pp = &(*pp)->next)
		if (*pp == sh) {
			*pp = sh->next;
			break;
		}
	pthread_mutex_unlock(&shared_mu);
	flock(sh->fd, LOCK_EX);
	__atomic_store_n(&sh->seg->rank[sh->rank].state, SLOT_LEFT, __ATOMIC_SEQ_CST);
	seg_bump(sh->seg);
	int all = 1;
	for (int r = 0; r < sh->nranks; r++)
		all &= sh->seg->rank[r].state == SLOT_LEFT;
	if (all && same_file(sh->path, sh->fd))
		unlink(sh->path);
	flock(sh->fd, LOCK_UN);
	close_shared(sh);
	pthread_mutex_destroy(&sh->mu);
	free(sh);
}

/* Checks a collective's arguments and enqueues (or, in a group, holds back)
 * its work. elems: elements of the larger buffer; op < 0: no reduction;
 * peer < 0: no root or peer; p2p: a send or a receive, not a meeting. */
static ncclResult_t collective(const void *send, const void *recv, size_t elems, ncclDataType_t type, int op,
			       int peer, ncclComm_t comm, cudaStream_t stream, int p2p)
{
	if (!comm)
		return ncclInvalidArgument;
	if ((unsigned)type >= ncclNumTypes || op >= ncclNumOps || peer >= comm->nranks)
		return ncclInvalidArgument;
	if (elems && (!send || !recv))
		return ncclInvalidArgument;
	int64_t ns = duration_ns(elems * type_size[type]);
	struct shared *sh = p2p ? NULL : comm->sh;
	if (group_depth == 0)
		return enqueue(sh, stream, ns);
	if (group_len == group_cap) {
		size_t cap = group_cap ? 2 * group_cap : 16;
		struct pending *grown = realloc(group_ops, cap * sizeof *grown);
		if (!grown)
			return ncclSystemError;
		group_ops = grown;
		group_cap = cap;
	}
	group_ops[group_len++] = (struct pending){ sh, stream, ns };
	return ncclSuccess;
}

API ncclResult_t pncclGetUniqueId(ncclUniqueId *uniqueId)
{
	if (!uniqueId)
		return ncclInvalidArgument;
	static unsigned long next;
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	unsigned long seq = __atomic_fetch_add(&next, 1, __ATOMIC_RELAXED);
	long words[4] = { (long)getpid(), (long)ts.tv_sec, ts.tv_nsec, (long)seq };
	/* A job's ranks share one id (rank 0 makes it and sends it to the
	 * others); processes that play ranks of one job get it from here,
	 * marked as a job's by its other words being 0. */
	if (getenv("SIM_NCCL_ID"))
		words[0] = strtol(getenv("SIM_NCCL_ID"), NULL, 0), words[1] = words[2] = words[3] = 0;
	memset(uniqueId, 0, sizeof *uniqueId);
	memcpy(uniqueId->internal, words, sizeof words);
	return ncclSuccess;
}
WEAK_ALIAS(ncclResult_t, ncclGetUniqueId, ncclUniqueId *uniqueId);

/* A job's id (SIM_NCCL_ID) links the ranks of other processes, as the
 * header comment says; returns once every rank has joined. */
API ncclResult_t pncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank)
{
	if (!comm || nranks < 1 || rank < 0 || rank >= nranks)
		return ncclInvalidArgument;
	struct ncclComm *c = malloc(sizeof *c);
	if (!c)
		return ncclSystemError;
	c->nranks = nranks;
	c->rank = rank;
	c->sh = NULL;
	long words[4];
	memcpy(words, commId.internal, sizeof words);
	if (nranks > 1 && words[0] && !words[1] && !words[2] && !words[3]) {
		ncclResult_t res = join_ranks(c, words[0]);
		if (res != ncclSuccess) {
			free(c);
			return res;
		}
	}
	*comm = c;
	return ncclSuccess;
}
WEAK_ALIAS(ncclResult_t, ncclCommInitRank, ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank);

API ncclResult_t pncclCommDestroy(ncclComm_t comm)
{
	if (comm && comm->sh)
		leave_ranks(comm->sh);
	free(comm);
	return ncclSuccess;
}
WEAK_ALIAS(ncclResult_t, ncclCommDestroy, ncclComm_t comm);

API ncclResult_t pncclAllReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
				ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream)
{
	return collective(sendbuff, recvbuff, count, datatype, op, -1, comm, stream, 0);
}
WEAK_ALIAS(ncclResult_t, ncclAllReduce, const void *sendbuff, void *recvbuff, size_t count,
	   ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream);

API ncclResult_t pncclBroadcast(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
				int root, ncclComm_t comm, cudaStream_t stream)
{
	if (root < 0)
		return ncclInvalidArgument;
	/* Only the root's sendbuff is read. */
	return collective(comm && comm->rank == root ? sendbuff : recvbuff, recvbuff, count, datatype, -1, root,
			  comm, stream, 0);
}
WEAK_ALIAS(ncclResult_t, ncclBroadcast, const void *sendbuff, void *recvbuff, size_t count,
	   ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream);

API ncclResult_t pncclReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
			     ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream)
{
	if (root < 0)
		return ncclInvalidArgument;
	/* Only the root's recvbuff is written. */
	return collective(sendbuff, comm && comm->rank == root ? recvbuff : sendbuff, count, datatype, op, root,
			  comm, stream, 0);
}
WEAK_ALIAS(ncclResult_t, ncclReduce, const void *sendbuff, void *recvbuff, size_t count,
	   ncclDataType_t datatype, ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream);

API ncclResult_t pncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount, ncclDataType_t datatype,
				ncclComm_t comm, cudaStream_t stream)
{
	if (!comm)
		return ncclInvalidArgument;
	return collective(sendbuff, recvbuff, sendcount * comm->nranks, datatype, -1, -1, comm, stream, 0);
}
WEAK_ALIAS(ncclResult_t, ncclAllGather, const void *sendbuff, void *recvbuff, size_t sendcount,
	   ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream);

API ncclResult_t pncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount,
				    ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream)
{
	if (!comm)
		return ncclInvalidArgument;
	return collective(sendbuff, recvbuff, recvcount * comm->nranks, datatype, op, -1, comm, stream, 0);
}
WEAK_ALIAS(ncclResult_t, ncclReduceScatter, const void *sendbuff, void *recvbuff, size_t recvcount,
	   ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream);

API ncclResult_t pncclSend(const void *sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
			   cudaStream_t stream)
{
	if (peer < 0)
		return ncclInvalidArgument;
	return collective(sendbuff, sendbuff, count, datatype, -1, peer, comm, stream, 1);
}
WEAK_ALIAS(ncclResult_t, ncclSend, const void *sendbuff, size_t count, ncclDataType_t datatype, int peer,
	   ncclComm_t comm, cudaStream_t stream);

API ncclResult_t pncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
			   cudaStream_t stream)
{
	if (peer < 0)
		return ncclInvalidArgument;
	return collective(recvbuff, recvbuff, count, datatype, -1, peer, comm, stream, 1);
}
WEAK_ALIAS(ncclResult_t, ncclRecv, void *recvbuff, size_t count, ncclDataType_t datatype, int peer,
	   ncclComm_t comm, cudaStream_t stream);

API ncclResult_t pncclGroupStart(void)
{
	group_depth++;
	return ncclSuccess;
}
WEAK_ALIAS(ncclResult_t, ncclGroupStart, void);

API ncclResult_t pncclGroupEnd(void)
{
	if (group_depth == 0)
		return ncclInvalidUsage;
	if (--group_depth > 0)
		return ncclSuccess;
	ncclResult_t res = ncclSuccess;
	for (size_t i = 0; i < group_len; i++) {
		ncclResult_t r = enqueue(group_ops[i].sh, group_ops[i].stream, group_ops[i].ns);
		if (r != ncclSuccess)
			res = r;
	}
	group_len = 0;
	return res;
}
WEAK_ALIAS(ncclResult_t, ncclGroupEnd, void);
