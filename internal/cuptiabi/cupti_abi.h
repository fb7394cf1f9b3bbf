/*
 * cupti_abi.h: the part of CUPTI's binary interface the collector uses,
 * declared from the published ABI so that the collector builds without the
 * CUDA toolkit and never links CUPTI (it dlopen()s the target's own).
 *
 * Every offset and value here was printed from CUDA 13.0's cupti.h on the
 * H200 machine (testdata/gpu/cupti_abi.sh; RESULTS-cupti-abi-h200.txt), but
 * graphNodeId and graphId, taken from the published cupti_activity.h
 * (CUpti_ActivityKernel5 on, Memcpy4, Memset3: unchanged since; cupti_abi.sh
 * prints them too); the record prefixes read here have kept these offsets
 * since CUDA 11. The
 * simulated CUPTI (internal/sim/csrc/cupti_sim.c) writes its records with
 * these same declarations.
 */
#ifndef CUDATAP_CUPTI_ABI_H
#define CUDATAP_CUPTI_ABI_H

#include <stddef.h>
#include <stdint.h>

typedef int CUptiResult; /* CUPTI_SUCCESS = 0 */
#define CUPTI_SUCCESS 0
#define CUPTI_ERROR_INVALID_PARAMETER 1
#define CUPTI_ERROR_MAX_LIMIT_REACHED 12
#define CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED 39

typedef int CUpti_ActivityKind;
#define CUPTI_ACTIVITY_KIND_MEMCPY 1
#define CUPTI_ACTIVITY_KIND_MEMSET 2
#define CUPTI_ACTIVITY_KIND_DRIVER 4
#define CUPTI_ACTIVITY_KIND_RUNTIME 5
#define CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL 10

#define CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM 1 /* threadId = gettid() */
#define CUPTI_ACTIVITY_FLAG_FLUSH_FORCED 1

/* Callback domains and sites (cupti_callbacks.h). */
typedef int CUpti_CallbackDomain;
#define CUPTI_CB_DOMAIN_DRIVER_API 1
#define CUPTI_CB_DOMAIN_RUNTIME_API 2
#define CUPTI_API_ENTER 0
#define CUPTI_API_EXIT 1

typedef struct CUctx_st *CUcontext;
typedef void *CUpti_SubscriberHandle;
typedef void (*CUpti_CallbackFunc)(void *userdata, int domain, unsigned cbid, const void *cbdata);
typedef void (*CUpti_BuffersCallbackRequestFunc)(uint8_t **buffer, size_t *size, size_t *maxNumRecords);
typedef void (*CUpti_BuffersCallbackCompleteFunc)(CUcontext context, uint32_t streamId, uint8_t *buffer, size_t size, size_t validSize);
typedef uint64_t (*CUpti_TimestampCallbackFunc)(void);

/* CUpti_CallbackData: what a runtime or driver API callback gets. Its
 * layout has not changed since CUPTI 4.1 added correlationId; the H200 run
 * of cupti_abi.sh prints these offsets too. */
typedef struct {
	int callbackSite;             /* 0: CUPTI_API_ENTER or CUPTI_API_EXIT */
	const char *functionName;     /* 8 */
	const void *functionParams;   /* 16 */
	void *functionReturnValue;    /* 24 */
	const char *symbolName;       /* 32 */
	CUcontext context;            /* 40 */
	uint32_t contextUid;          /* 48 */
	uint64_t *correlationData;    /* 56 */
	uint32_t correlationId;       /* 64: the id the call's GPU records carry */
} ct_cupti_cbdata;

/* Every record starts with its kind. */
typedef struct {
	CUpti_ActivityKind kind;
} CUpti_Activity;

/* CUpti_ActivityAPI: runtime and driver calls (40 bytes). */
typedef struct {
	CUpti_ActivityKind kind; /* 0 */
	uint32_t cbid;           /* 4 */
	uint64_t start;          /* 8 */
	uint64_t end;            /* 16 */
	uint32_t processId;      /* 24 */
	uint32_t threadId;       /* 28 */
	uint32_t correlationId;  /* 32 */
	uint32_t returnValue;    /* 36 */
} ct_cupti_api;

/* The prefix of CUpti_ActivityKernel10 (216 bytes in CUDA 13). */
typedef struct {
	CUpti_ActivityKind kind; /* 0 */
	uint8_t pad0[12];
	uint64_t start;          /* 16 */
	uint64_t end;            /* 24 */
	uint64_t completed;      /* 32 */
	uint32_t deviceId;       /* 40 */
	uint32_t contextId;      /* 44 */
	uint32_t streamId;       /* 48 */
	int32_t gridX, gridY, gridZ;    /* 52 */
	int32_t blockX, blockY, blockZ; /* 64 */
	uint8_t pad1[16];
	uint32_t correlationId;  /* 92 */
	int64_t gridId;          /* 96 */
	const char *name;        /* 104 */
	uint8_t pad2[144 - 112];
	uint64_t graphNodeId;    /* 144: the graph node that ran it (a graph launch's), else 0 */
	uint32_t shmemLimitConfig;
	uint32_t graphId;        /* 156 */
	uint8_t pad3[216 - 160];
} ct_cupti_kernel;

/* The prefix of CUpti_ActivityMemcpy6 (96 bytes). */
typedef struct {
	CUpti_ActivityKind kind; /* 0 */
	uint8_t copyKind;        /* 4 */
	uint8_t srcKind, dstKind, flags;
	uint64_t bytes;          /* 8 */
	uint64_t start;          /* 16 */
	uint64_t end;            /* 24 */
	uint32_t deviceId;       /* 32 */
	uint32_t contextId;      /* 36 */
	uint32_t streamId;       /* 40 */
	uint32_t correlationId;  /* 44 */
	uint8_t pad[64 - 48];
	uint64_t graphNodeId;    /* 64 */
	uint32_t graphId;        /* 72 */
	uint8_t pad2[96 - 76];
} ct_cupti_memcpy;

/* The prefix of CUpti_ActivityMemset4 (88 bytes). */
typedef struct {
	CUpti_ActivityKind kind; /* 0 */
	uint32_t value;          /* 4 */
	uint64_t bytes;          /* 8 */
	uint64_t start;          /* 16 */
	uint64_t end;            /* 24 */
	uint32_t deviceId;       /* 32 */
	uint32_t contextId;      /* 36 */
	uint32_t streamId;       /* 40 */
	uint32_t correlationId;  /* 44 */
	uint8_t pad[64 - 48];
	uint64_t graphNodeId;    /* 64 */
	uint32_t graphId;        /* 72 */
	uint8_t pad2[88 - 76];
} ct_cupti_memset;

_Static_assert(offsetof(ct_cupti_cbdata, correlationId) == 64, "CUpti_CallbackData correlationId");
_Static_assert(sizeof(ct_cupti_api) == 40, "CUpti_ActivityAPI");
_Static_assert(offsetof(ct_cupti_kernel, correlationId) == 92, "kernel correlationId");
_Static_assert(offsetof(ct_cupti_kernel, name) == 104, "kernel name");
_Static_assert(offsetof(ct_cupti_kernel, graphNodeId) == 144, "kernel graphNodeId");
_Static_assert(offsetof(ct_cupti_kernel, graphId) == 156, "kernel graphId");
_Static_assert(sizeof(ct_cupti_kernel) == 216, "CUpti_ActivityKernel10");
_Static_assert(offsetof(ct_cupti_memcpy, correlationId) == 44, "memcpy correlationId");
_Static_assert(offsetof(ct_cupti_memcpy, graphNodeId) == 64, "memcpy graphNodeId");
_Static_assert(sizeof(ct_cupti_memcpy) == 96, "CUpti_ActivityMemcpy6");
_Static_assert(offsetof(ct_cupti_memset, graphNodeId) == 64, "memset graphNodeId");
_Static_assert(sizeof(ct_cupti_memset) == 88, "CUpti_ActivityMemset4");

#endif
