/*
 * cuda_driver_sim.h: the slice of the CUDA 13 driver API that the simulated
 * libcuda.so.1 (cuda_driver_sim.c) exports, with the real types, prototypes
 * and symbol names (the _v2, _ptsz and _ptds names are the real symbols), so
 * the x86-64 argument locations match a real libcuda.so.1 exactly. Also
 * declares the driver's private sim_* helpers, which the simulated runtime
 * and NCCL call and a tracer does not hook.
 */
#ifndef CUDA_DRIVER_SIM_H
#define CUDA_DRIVER_SIM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef int CUresult;

enum {
	CUDA_SUCCESS = 0,
	CUDA_ERROR_INVALID_VALUE = 1,
	CUDA_ERROR_OUT_OF_MEMORY = 2,
	CUDA_ERROR_NOT_FOUND = 500,
	CUDA_ERROR_INVALID_HANDLE = 400,
	CUDA_ERROR_NOT_READY = 600,
	CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED = 712,
	CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED = 713,
};

typedef unsigned long long CUdeviceptr;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;
typedef struct CUfunc_st *CUfunction;
typedef struct CUmod_st *CUmodule;
typedef struct CUlib_st *CUlibrary;
typedef struct CUkern_st *CUkernel;
typedef struct CUgraph_st *CUgraph;
typedef struct CUgraphNode_st *CUgraphNode;
typedef struct CUgraphExec_st *CUgraphExec;
typedef struct CUarray_st *CUarray;
typedef void (*CUhostFn)(void *userData);
typedef struct CUmemPoolHandle_st *CUmemoryPool;
typedef unsigned long long CUmemGenericAllocationHandle;
typedef struct CUmemAllocationProp_st CUmemAllocationProp; /* read by no simulated call */
typedef int CUjit_option;
typedef int CUlibraryOption;

/* Special stream handles: the same values as cudaStreamLegacy and
 * cudaStreamPerThread. */
#define CU_STREAM_LEGACY ((CUstream)0x1)
#define CU_STREAM_PER_THREAD ((CUstream)0x2)

#define CU_STREAM_DEFAULT 0x0
#define CU_STREAM_NON_BLOCKING 0x1
#define CU_EVENT_DEFAULT 0x0
#define CU_EVENT_DISABLE_TIMING 0x2
#define CU_EVENT_RECORD_EXTERNAL 0x1
#define CU_MEMHOSTALLOC_PORTABLE 0x1
#define CU_MEMHOSTREGISTER_PORTABLE 0x1

typedef enum CUmemorytype_enum {
	CU_MEMORYTYPE_HOST = 1,
	CU_MEMORYTYPE_DEVICE = 2,
	CU_MEMORYTYPE_ARRAY = 3,
	CU_MEMORYTYPE_UNIFIED = 4,
} CUmemorytype;

typedef struct CUDA_MEMCPY2D_st {
	size_t srcXInBytes;
	size_t srcY;
	CUmemorytype srcMemoryType;
	const void *srcHost;
	CUdeviceptr srcDevice;
	CUarray srcArray;
	size_t srcPitch;
	size_t dstXInBytes;
	size_t dstY;
	CUmemorytype dstMemoryType;
	void *dstHost;
	CUdeviceptr dstDevice;
	CUarray dstArray;
	size_t dstPitch;
	size_t WidthInBytes;
	size_t Height;
} CUDA_MEMCPY2D;

typedef struct CUlaunchAttribute_st CUlaunchAttribute;

typedef enum CUstreamCaptureMode_enum {
	CU_STREAM_CAPTURE_MODE_GLOBAL = 0,
	CU_STREAM_CAPTURE_MODE_THREAD_LOCAL = 1,
	CU_STREAM_CAPTURE_MODE_RELAXED = 2,
} CUstreamCaptureMode;

/* CUDA_KERNEL_NODE_PARAMS_v2: the runtime's cudaKernelNodeParams has the
 * same layout up to extra (func, grid, block at offsets 0, 8, 20). */
typedef struct CUDA_KERNEL_NODE_PARAMS_v2_st {
	CUfunction func;
	unsigned int gridDimX, gridDimY, gridDimZ;
	unsigned int blockDimX, blockDimY, blockDimZ;
	unsigned int sharedMemBytes;
	void **kernelParams;
	void **extra;
	CUkernel kern;
	void *ctx;
} CUDA_KERNEL_NODE_PARAMS;

typedef struct CUgraphExecUpdateResultInfo_st {
	int result; /* CU_GRAPH_EXEC_UPDATE_SUCCESS = 0, ERROR = 1, ERROR_TOPOLOGY_CHANGED = 2, ... */
	CUgraphNode errorNode;
	CUgraphNode errorFromNode;
} CUgraphExecUpdateResultInfo;

/* hStream is at offset 32 on x86-64. */
typedef struct CUlaunchConfig_st {
	unsigned int gridDimX, gridDimY, gridDimZ;
	unsigned int blockDimX, blockDimY, blockDimZ;
	unsigned int sharedMemBytes;
	CUstream hStream;
	CUlaunchAttribute *attrs;
	unsigned int numAttrs;
} CUlaunchConfig;

/* Every exported cu* entry point, for the driver's own call counters and the
 * workload's report. */
#define DRIVER_API_LIST(X)                                                                         \
	X(cuInit) X(cuModuleLoadData) X(cuModuleGetFunction) X(cuLibraryLoadData)                  \
	X(cuLibraryGetKernel) X(cuKernelGetFunction) X(cuStreamCreate)                             \
	X(cuStreamCreateWithPriority) X(cuStreamDestroy_v2) X(cuStreamSynchronize)                 \
	X(cuStreamSynchronize_ptsz) X(cuStreamQuery) X(cuStreamQuery_ptsz) X(cuCtxSynchronize)     \
	X(cuLaunchKernel) X(cuLaunchKernel_ptsz) X(cuLaunchKernelEx) X(cuLaunchKernelEx_ptsz)      \
	X(cuLaunchCooperativeKernel) X(cuLaunchCooperativeKernel_ptsz) X(cuGraphLaunch)            \
	X(cuGraphLaunch_ptsz) X(cuLaunchHostFunc) X(cuLaunchHostFunc_ptsz) X(cuMemcpy)            \
	X(cuMemcpy_ptds) X(cuMemcpyHtoD_v2) X(cuMemcpyHtoD_v2_ptds) X(cuMemcpyDtoH_v2)             \
	X(cuMemcpyDtoH_v2_ptds) X(cuMemcpyDtoD_v2) X(cuMemcpyDtoD_v2_ptds) X(cuMemcpyAsync)        \
	X(cuMemcpyAsync_ptsz) X(cuMemcpyHtoDAsync_v2) X(cuMemcpyHtoDAsync_v2_ptsz)                 \
	X(cuMemcpyDtoHAsync_v2) X(cuMemcpyDtoHAsync_v2_ptsz) X(cuMemcpyDtoDAsync_v2)               \
	X(cuMemcpyDtoDAsync_v2_ptsz) X(cuMemcpy2D_v2) X(cuMemcpy2D_v2_ptds) X(cuMemcpy2DAsync_v2)  \
	X(cuMemcpy2DAsync_v2_ptsz) X(cuMemsetD8_v2) X(cuMemsetD8_v2_ptds) X(cuMemsetD8Async)       \
	X(cuMemsetD8Async_ptsz) X(cuMemsetD32Async) X(cuMemsetD32Async_ptsz) X(cuEventCreate)      \
	X(cuEventDestroy_v2) X(cuEventRecord) X(cuEventRecord_ptsz) X(cuEventRecordWithFlags)      \
	X(cuEventRecordWithFlags_ptsz) X(cuStreamWaitEvent) X(cuStreamWaitEvent_ptsz)              \
	X(cuEventSynchronize) X(cuEventQuery) X(cuMemAlloc_v2) X(cuMemFree_v2) X(cuMemAllocAsync)  \
	X(cuMemAllocAsync_ptsz) X(cuMemFreeAsync) X(cuMemFreeAsync_ptsz) X(cuMemHostAlloc)         \
	X(cuMemAllocHost_v2) X(cuMemFreeHost) X(cuMemHostRegister_v2) X(cuMemHostUnregister)       \
	X(cuMemAllocManaged) X(cuMemAllocPitch_v2) X(cuMemAllocFromPoolAsync)                      \
	X(cuMemAllocFromPoolAsync_ptsz) X(cuMemCreate) X(cuMemRelease)                             \
	X(cuStreamBeginCapture_v2) X(cuStreamBeginCapture_v2_ptsz) X(cuStreamEndCapture)          \
	X(cuStreamEndCapture_ptsz) X(cuGraphCreate) X(cuGraphAddKernelNode_v2)                    \
	X(cuGraphInstantiateWithFlags) X(cuGraphExecKernelNodeSetParams_v2) X(cuGraphExecUpdate_v2) \
	X(cuGraphExecDestroy) X(cuGraphDestroy)

CUresult cuInit(unsigned int Flags);

CUresult cuModuleLoadData(CUmodule *module, const void *image);
CUresult cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name);
CUresult cuLibraryLoadData(CUlibrary *library, const void *code, CUjit_option *jitOptions,
			   void **jitOptionsValues, unsigned int numJitOptions, CUlibraryOption *libraryOptions,
			   void **libraryOptionValues, unsigned int numLibraryOptions);
CUresult cuLibraryGetKernel(CUkernel *pKernel, CUlibrary library, const char *name);
CUresult cuKernelGetFunction(CUfunction *pFunc, CUkernel kernel);

CUresult cuStreamCreate(CUstream *phStream, unsigned int Flags);
CUresult cuStreamCreateWithPriority(CUstream *phStream, unsigned int flags, int priority);
CUresult cuStreamDestroy_v2(CUstream hStream);
CUresult cuStreamSynchronize(CUstream hStream);
CUresult cuStreamSynchronize_ptsz(CUstream hStream);
CUresult cuStreamQuery(CUstream hStream);
CUresult cuStreamQuery_ptsz(CUstream hStream);
CUresult cuCtxSynchronize(void);

CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
			unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
			unsigned int sharedMemBytes, CUstream hStream, void **kernelParams, void **extra);
CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
			     unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
			     unsigned int sharedMemBytes, CUstream hStream, void **kernelParams, void **extra);
CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **kernelParams, void **extra);
CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f, void **kernelParams, void **extra);
CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
				   unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
				   unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
				   void **kernelParams);
CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
					unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
					unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
					void **kernelParams);
CUresult cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream);
CUresult cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream);

CUresult cuStreamBeginCapture_v2(CUstream hStream, CUstreamCaptureMode mode);
CUresult cuStreamBeginCapture_v2_ptsz(CUstream hStream, CUstreamCaptureMode mode);
CUresult cuStreamEndCapture(CUstream hStream, CUgraph *phGraph);
CUresult cuStreamEndCapture_ptsz(CUstream hStream, CUgraph *phGraph);
CUresult cuGraphCreate(CUgraph *phGraph, unsigned int flags);
CUresult cuGraphAddKernelNode_v2(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
				 size_t numDependencies, const CUDA_KERNEL_NODE_PARAMS *nodeParams);
CUresult cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph hGraph, unsigned long long flags);
CUresult cuGraphExecKernelNodeSetParams_v2(CUgraphExec hGraphExec, CUgraphNode hNode,
					   const CUDA_KERNEL_NODE_PARAMS *nodeParams);
CUresult cuGraphExecUpdate_v2(CUgraphExec hGraphExec, CUgraph hGraph, CUgraphExecUpdateResultInfo *resultInfo);
CUresult cuGraphExecDestroy(CUgraphExec hGraphExec);
CUresult cuGraphDestroy(CUgraph hGraph);
CUresult cuLaunchHostFunc(CUstream hStream, CUhostFn fn, void *userData);
CUresult cuLaunchHostFunc_ptsz(CUstream hStream, CUhostFn fn, void *userData);

CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount);
CUresult cuMemcpy_ptds(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount);
CUresult cuMemcpyHtoD_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount);
CUresult cuMemcpyHtoD_v2_ptds(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount);
CUresult cuMemcpyDtoH_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount);
CUresult cuMemcpyDtoH_v2_ptds(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount);
CUresult cuMemcpyDtoD_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount);
CUresult cuMemcpyDtoD_v2_ptds(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount);
CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream);
CUresult cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream);
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount, CUstream hStream);
CUresult cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount, CUstream hStream);
CUresult cuMemcpyDtoHAsync_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream);
CUresult cuMemcpyDtoHAsync_v2_ptsz(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream);
CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream);
CUresult cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream);
CUresult cuMemcpy2D_v2(const CUDA_MEMCPY2D *pCopy);
CUresult cuMemcpy2D_v2_ptds(const CUDA_MEMCPY2D *pCopy);
CUresult cuMemcpy2DAsync_v2(const CUDA_MEMCPY2D *pCopy, CUstream hStream);
CUresult cuMemcpy2DAsync_v2_ptsz(const CUDA_MEMCPY2D *pCopy, CUstream hStream);
CUresult cuMemsetD8_v2(CUdeviceptr dstDevice, unsigned char uc, size_t N);
CUresult cuMemsetD8_v2_ptds(CUdeviceptr dstDevice, unsigned char uc, size_t N);
CUresult cuMemsetD8Async(CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream);
CUresult cuMemsetD8Async_ptsz(CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream);
CUresult cuMemsetD32Async(CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream hStream);
CUresult cuMemsetD32Async_ptsz(CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream hStream);

CUresult cuEventCreate(CUevent *phEvent, unsigned int Flags);
CUresult cuEventDestroy_v2(CUevent hEvent);
CUresult cuEventRecord(CUevent hEvent, CUstream hStream);
CUresult cuEventRecord_ptsz(CUevent hEvent, CUstream hStream);
CUresult cuEventRecordWithFlags(CUevent hEvent, CUstream hStream, unsigned int flags);
CUresult cuEventRecordWithFlags_ptsz(CUevent hEvent, CUstream hStream, unsigned int flags);
CUresult cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int Flags);
CUresult cuStreamWaitEvent_ptsz(CUstream hStream, CUevent hEvent, unsigned int Flags);
CUresult cuEventSynchronize(CUevent hEvent);
CUresult cuEventQuery(CUevent hEvent);

CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize);
CUresult cuMemFree_v2(CUdeviceptr dptr);
CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream);
CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream);
CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream);
CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream);
CUresult cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags);
CUresult cuMemAllocHost_v2(void **pp, size_t bytesize);
CUresult cuMemFreeHost(void *p);
CUresult cuMemHostRegister_v2(void *p, size_t bytesize, unsigned int Flags);
CUresult cuMemHostUnregister(void *p);
CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags);
CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes, size_t Height,
			    unsigned int ElementSizeBytes);
CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream);
CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream);
CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
		     unsigned long long flags);
CUresult cuMemRelease(CUmemGenericAllocationHandle handle);

/* ---- private helpers (not part of the CUDA ABI; no cu prefix) ---- */

/* The CUfunction of a runtime kernel host stub: one stable handle per stub,
 * standing in for what real cudart gets from cuLibraryGetKernel and
 * cuKernelGetFunction at registration. NULL if out of memory. */
CUfunction sim_function_for_stub(const void *stub);

/* Enqueues duration_ns of GPU work on a stream (0 = the legacy stream): how
 * the simulated NCCL launches its kernels. Returns CUDA_SUCCESS. */
CUresult sim_enqueue(CUstream hStream, long long duration_ns);

/* A meeting of the ranks of a communicator at one collective, for NCCL's
 * collectives whose ranks live in other processes (nccl_sim.c): the driver
 * asks met() whether every rank has arrived. It returns the time the last
 * rank arrived (CLOCK_MONOTONIC ns) once all have, and never changes that
 * answer; -1 while a rank is missing. blocking: the host is waiting for the
 * meeting now. met() may be called with the driver's lock held: it must not
 * block or call into the driver. A host waiting for the meeting sleeps in
 * wait() between two questions, until something changed (a few ms at
 * most), without the driver's lock. */
struct sim_meeting {
	long long (*met)(struct sim_meeting *m, int blocking);
	void (*wait)(struct sim_meeting *m);
};

/* The most meetings a process may have enqueued and not yet seen met: a time
 * on the modeled GPU can wait for that many. NCCL holds a further collective
 * back, in its call, until one is met, as a real NCCL's bounded queue of
 * work does. */
#define SIM_MEETINGS_MAX 32

/* Enqueues duration_ns of GPU work on a stream (0 = the legacy stream) that
 * starts once the stream is ready and the meeting m is met: it ends at
 * max(ready, the time m was met) + duration_ns, and whatever follows it on
 * the stream, or waits for it through events, waits too. Synchronizing calls
 * block, and queries report not ready, until then. *ready: when the stream
 * is ready for the work as far as known now (leaving out readiness that
 * itself waits for meetings not met yet). The driver keeps m for as long as
 * a time may name it. Returns CUDA_SUCCESS. */
CUresult sim_enqueue_meeting(CUstream hStream, long long duration_ns, struct sim_meeting *m, long long *ready);

/* The host time (ns) the process has spent blocked in synchronizing calls
 * on meetings not met yet: waiting for other ranks. */
long long sim_meeting_wait_ns(void);

/* What the simulated CUPTI (cupti_sim.c) gets from the modeled GPU while it
 * records: every operation (kind 1 kernel, 2 copy, 3 memset; start and end
 * on the modeled GPU clock, CLOCK_MONOTONIC; for one a graph launch ran,
 * the ids of its graph node and graph, as CUPTI's graphNodeId and graphId,
 * else 0) and the API call that enqueued it (an interval inside the call,
 * on thread tid). A graph launch is one call, kind 4, whose operations all
 * carry its correlation id. */
struct sim_activity {
	void (*op)(int kind, uint32_t corr, int64_t start, int64_t end, uint32_t stream, uint64_t bytes, int copy_kind,
		   const char *name, /* a kernel's name: lives as long as its module */
		   int device, uint64_t graph_node, uint32_t graph);
	void (*api)(uint32_t corr, int64_t start, int64_t end, uint32_t tid);
	/* The entry (site 0) and exit (site 1) of the call that enqueues an
	 * operation of kind (4: a graph launch), on the calling thread:
	 * CUPTI's API callbacks. */
	void (*call)(int site, int kind, uint32_t corr);
};
void sim_set_activity(const struct sim_activity *a);

/* The i-th exported cu* entry point, with in *calls the number of times it
 * has been called in this process; NULL once i is past the last one. */
const char *sim_driver_calls(int i, unsigned long *calls);
int sim_stream_busy(int i, const void **handle, int *owner, long long *ns);

#ifdef __cplusplus
}
#endif

#endif /* CUDA_DRIVER_SIM_H */
