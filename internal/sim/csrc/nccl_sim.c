/*
 * nccl_sim.c: a simulated NCCL, libnccl.so.2, with the real entry points and
 * prototypes. As in real NCCL, each entry point is defined as pncclX (the
 * profiling interface) and ncclX is a weak alias of it: one address, two
 * names, so a probe on either fires once per call.
 *
 * Communicators span ranks of this process only and nothing is copied: a
 * collective enqueues GPU work of 5 us + bytes / 20 GB/s on its stream in the
 * simulated driver's model (libcuda.so.1, through its private sim_enqueue),
 * so it shares clocks, event edges and implicit legacy-stream dependencies
 * with the runtime's and driver's work. The bytes of a collective are those
 * of its larger buffer: count elements for all-reduce, broadcast, reduce,
 * send and receive, nranks * count for all-gather and reduce-scatter.
 * Between ncclGroupStart and ncclGroupEnd (per thread, nestable) operations
 * are held back and enqueued, in call order, by the outermost ncclGroupEnd,
 * as NCCL launches a group's work at its end.
 */
#define _GNU_SOURCE
#include "nccl_sim.h"
#include "cuda_driver_sim.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
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

struct ncclComm {
	int nranks, rank;
};

static const size_t type_size[ncclNumTypes] = {
	[ncclInt8] = 1,	   [ncclUint8] = 1,   [ncclInt32] = 4,	 [ncclUint32] = 4,  [ncclInt64] = 8,
	[ncclUint64] = 8,  [ncclFloat16] = 2, [ncclFloat32] = 4, [ncclFloat64] = 8, [ncclBfloat16] = 2,
};

/* Work held back by an open group on this thread. */
struct pending {
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

/* Checks a collective's arguments and enqueues (or, in a group, holds back)
 * its work. elems: elements of the larger buffer; op < 0: no reduction;
 * peer < 0: no root or peer. */
static ncclResult_t collective(const void *send, const void *recv, size_t elems, ncclDataType_t type, int op,
			       int peer, ncclComm_t comm, cudaStream_t stream)
{
	if (!comm)
		return ncclInvalidArgument;
	if ((unsigned)type >= ncclNumTypes || op >= ncclNumOps || peer >= comm->nranks)
		return ncclInvalidArgument;
	if (elems && (!send || !recv))
		return ncclInvalidArgument;
	int64_t ns = duration_ns(elems * type_size[type]);
	if (group_depth == 0)
		return sim_enqueue(stream, ns) == CUDA_SUCCESS ? ncclSuccess : ncclUnhandledCudaError;
	if (group_len == group_cap) {
		size_t cap = group_cap ? 2 * group_cap : 16;
		struct pending *grown = realloc(group_ops, cap * sizeof *grown);
		if (!grown)
			return ncclSystemError;
		group_ops = grown;
		group_cap = cap;
	}
	group_ops[group_len++] = (struct pending){ stream, ns };
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
	 * others); processes that play ranks of one job get it from here. */
	if (getenv("SIM_NCCL_ID"))
		words[0] = strtol(getenv("SIM_NCCL_ID"), NULL, 0), words[1] = words[2] = words[3] = 0;
	memset(uniqueId, 0, sizeof *uniqueId);
	memcpy(uniqueId->internal, words, sizeof words);
	return ncclSuccess;
}
WEAK_ALIAS(ncclResult_t, ncclGetUniqueId, ncclUniqueId *uniqueId);

/* The id is not read: ranks of one process never meet. */
API ncclResult_t pncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank)
{
	(void)commId;
	if (!comm || nranks < 1 || rank < 0 || rank >= nranks)
		return ncclInvalidArgument;
	struct ncclComm *c = malloc(sizeof *c);
	if (!c)
		return ncclSystemError;
	c->nranks = nranks;
	c->rank = rank;
	*comm = c;
	return ncclSuccess;
}
WEAK_ALIAS(ncclResult_t, ncclCommInitRank, ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank);

API ncclResult_t pncclCommDestroy(ncclComm_t comm)
{
	free(comm);
	return ncclSuccess;
}
WEAK_ALIAS(ncclResult_t, ncclCommDestroy, ncclComm_t comm);

API ncclResult_t pncclAllReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
				ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream)
{
	return collective(sendbuff, recvbuff, count, datatype, op, -1, comm, stream);
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
			  comm, stream);
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
			  comm, stream);
}
WEAK_ALIAS(ncclResult_t, ncclReduce, const void *sendbuff, void *recvbuff, size_t count,
	   ncclDataType_t datatype, ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream);

API ncclResult_t pncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount, ncclDataType_t datatype,
				ncclComm_t comm, cudaStream_t stream)
{
	if (!comm)
		return ncclInvalidArgument;
	return collective(sendbuff, recvbuff, sendcount * comm->nranks, datatype, -1, -1, comm, stream);
}
WEAK_ALIAS(ncclResult_t, ncclAllGather, const void *sendbuff, void *recvbuff, size_t sendcount,
	   ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream);

API ncclResult_t pncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount,
				    ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream)
{
	if (!comm)
		return ncclInvalidArgument;
	return collective(sendbuff, recvbuff, recvcount * comm->nranks, datatype, op, -1, comm, stream);
}
WEAK_ALIAS(ncclResult_t, ncclReduceScatter, const void *sendbuff, void *recvbuff, size_t recvcount,
	   ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream);

API ncclResult_t pncclSend(const void *sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
			   cudaStream_t stream)
{
	if (peer < 0)
		return ncclInvalidArgument;
	return collective(sendbuff, sendbuff, count, datatype, -1, peer, comm, stream);
}
WEAK_ALIAS(ncclResult_t, ncclSend, const void *sendbuff, size_t count, ncclDataType_t datatype, int peer,
	   ncclComm_t comm, cudaStream_t stream);

API ncclResult_t pncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
			   cudaStream_t stream)
{
	if (peer < 0)
		return ncclInvalidArgument;
	return collective(recvbuff, recvbuff, count, datatype, -1, peer, comm, stream);
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
	for (size_t i = 0; i < group_len; i++)
		if (sim_enqueue(group_ops[i].stream, group_ops[i].ns) != CUDA_SUCCESS)
			res = ncclUnhandledCudaError;
	group_len = 0;
	return res;
}
WEAK_ALIAS(ncclResult_t, ncclGroupEnd, void);
