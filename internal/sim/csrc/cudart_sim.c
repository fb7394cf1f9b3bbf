/*
 * cudart_sim.c: a simulated CUDA runtime that exports the real libcudart.so.13
 * entry points (names, prototypes, symbol versions) as a thin layer over the
 * simulated driver, libcuda.so.1 (cuda_driver_sim.c), which holds the modeled
 * GPU. As real cudart does, it dlopen()s libcuda.so.1 at its first call that
 * needs the driver (so a tracer sees libcuda loaded late) and resolves the
 * driver's functions with dlsym; it looks in its own directory first (linked
 * into an executable, like nvcc's static cudart, the executable's), then in
 * the directory the sim was built in (SIM_DRIVER_DIR), then on the default
 * search path.
 *
 * Every exported function is its own noinline entry point (a tracer probes the
 * first instruction); none calls another exported function. A runtime call
 * that reaches the GPU model makes exactly one driver call underneath, as
 * real cudart does: cudaLaunchKernel enters cuLaunchKernel once,
 * cudaMemcpyAsync enters cuMemcpyHtoDAsync_v2, cuMemcpyDtoHAsync_v2,
 * cuMemcpyDtoDAsync_v2 or cuMemcpyAsync by its kind, cudaEventRecord enters
 * cuEventRecordWithFlags, and so on. Arguments the runtime rejects (a null
 * kernel, an empty grid, a bad copy kind or pitch) return before any driver
 * call. cudaGetDevice, cudaSetDevice and cudaGetLastError do not reach the
 * driver.
 */
#define _GNU_SOURCE
#include "cuda_sim.h"
#include "cuda_driver_sim.h"

#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* Every entry point is its own function. GCC's noipa also keeps entry points
 * with identical bodies (cudaFreeAsync, cudaFreeAsync_ptsz) from being folded
 * into one address by identical-code folding. */
#if defined(__GNUC__) && !defined(__clang__)
#define API __attribute__((noinline, noipa, used, visibility("default")))
#else
#define API __attribute__((noinline, used, visibility("default")))
#endif

#define DRIVER_SONAME "libcuda.so.1"

/* ---- the driver, loaded at first use ---- */

static struct {
#define X(name) __typeof__(name) *name;
	DRIVER_API_LIST(X)
	X(sim_function_for_stub)
#undef X
} drv;

static pthread_once_t driver_once = PTHREAD_ONCE_INIT;
static int driver_ok;

/* The directory the sim was built in: its stand-in for the system library
 * directory where the real driver lives, for a runtime copied elsewhere. */
#ifndef SIM_DRIVER_DIR
#define SIM_DRIVER_DIR ""
#endif

/* dlopen()s path if it is the simulated driver (a real libcuda.so.1 on the
 * default path of a GPU machine is not). */
static void *open_sim_driver(const char *path)
{
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (h && !dlsym(h, "sim_driver_calls")) {
		dlclose(h);
		h = NULL;
	}
	return h;
}

/* Opens DRIVER_SONAME from the directory of the object holding this code
 * (the runtime library, or the executable it is linked into), else from
 * SIM_DRIVER_DIR, else from the default search path. */
static void *open_driver(void)
{
	Dl_info info;
	char exe[PATH_MAX], path[PATH_MAX + sizeof DRIVER_SONAME];
	void *h = NULL;
	if (dladdr((void *)open_driver, &info) && info.dli_fname) {
		const char *self = info.dli_fname;
		if (!strchr(self, '/')) {
			/* The executable, named as it was run: ask the kernel. */
			ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
			exe[n > 0 ? n : 0] = '\0';
			self = exe;
		}
		const char *slash = strrchr(self, '/');
		if (slash) {
			snprintf(path, sizeof path, "%.*s/%s", (int)(slash - self), self, DRIVER_SONAME);
			h = open_sim_driver(path);
		}
	}
	if (!h && SIM_DRIVER_DIR[0]) {
		snprintf(path, sizeof path, "%s/%s", SIM_DRIVER_DIR, DRIVER_SONAME);
		h = open_sim_driver(path);
	}
	return h ? h : open_sim_driver(DRIVER_SONAME);
}

static void load_driver(void)
{
	void *h = open_driver();
	if (!h)
		return;
#define X(name)                                                      \
	if (!(drv.name = (__typeof__(drv.name))dlsym(h, #name))) \
		return;
	DRIVER_API_LIST(X)
	X(sim_function_for_stub)
#undef X
	driver_ok = drv.cuInit(0) == CUDA_SUCCESS;
}

/* Whether the driver is loaded and initialized; loads it on first use. */
static int driver(void)
{
	pthread_once(&driver_once, load_driver);
	return driver_ok;
}

/* The driver's codes that the model returns have the runtime's numbers:
 * 0, 1 (invalid value), 2 (out of memory), 400 (invalid handle), 600 (not
 * ready), 712 and 713 (host memory already / not registered). */
#define DRIVER(fn, ...) (driver() ? (cudaError_t)drv.fn(__VA_ARGS__) : cudaErrorInsufficientDriver)

#define DEVPTR(p) ((CUdeviceptr)(uintptr_t)(p))

/* ---- launches ---- */

/* Kernels registered by __cudaRegisterFunction, and their CUfunctions once
 * launched. */
struct registered {
	const void *stub;
	char *name;
	CUfunction func;
	struct registered *next;
};
static pthread_mutex_t kernels_mu = PTHREAD_MUTEX_INITIALIZER;
static struct registered *registered; /* guarded by kernels_mu */
static CUlibrary library;             /* guarded by kernels_mu */

/* Checks what the runtime checks before it reaches the driver. */
static cudaError_t launch_check(const void *func, dim3 grid, dim3 block)
{
	if (!func)
		return cudaErrorInvalidDeviceFunction;
	if (!grid.x || !grid.y || !grid.z || !block.x || !block.y || !block.z)
		return cudaErrorInvalidConfiguration;
	return driver() ? cudaSuccess : cudaErrorInsufficientDriver;
}

/* Real cudart maps a kernel's host stub to its CUfunction at registration;
 * the simulated driver keeps that map. */
static CUfunction function_of(const void *func)
{
	/* Like real cudart with lazy loading: a registered kernel becomes a
	 * CUfunction on its first launch through cuLibraryGetKernel (by name)
	 * and cuKernelGetFunction; unregistered stubs get an anonymous handle. */
	pthread_mutex_lock(&kernels_mu);
	struct registered *r = registered;
	while (r && r->stub != func)
		r = r->next;
	if (r && !r->func && driver()) {
		if (!library)
			drv.cuLibraryLoadData(&library, "sim fatbin", NULL, NULL, 0, NULL, NULL, 0);
		CUkernel k;
		if (library && drv.cuLibraryGetKernel(&k, library, r->name) == CUDA_SUCCESS)
			drv.cuKernelGetFunction(&r->func, k);
	}
	CUfunction f = r && r->func ? r->func : NULL;
	pthread_mutex_unlock(&kernels_mu);
	return f ? f : drv.sim_function_for_stub(func);
}

API void __cudaRegisterFunction(void **fatCubinHandle, const char *hostFun, char *deviceFun, const char *deviceName,
				int thread_limit, void *tid, void *bid, void *bDim, void *gDim, int *wSize)
{
	(void)fatCubinHandle, (void)deviceName, (void)thread_limit, (void)tid, (void)bid, (void)bDim, (void)gDim, (void)wSize;
	struct registered *r = calloc(1, sizeof *r);
	if (!r || !hostFun || !deviceFun || !(r->name = strdup(deviceFun))) {
		free(r);
		return;
	}
	r->stub = hostFun;
	pthread_mutex_lock(&kernels_mu);
	r->next = registered;
	registered = r;
	pthread_mutex_unlock(&kernels_mu);
}

/* CUDA 13's launch path: the handle is the registration itself. */
API cudaError_t __cudaGetKernel(cudaKernel_t *kernel, const void *hostFun)
{
	if (!kernel)
		return cudaErrorInvalidValue;
	pthread_mutex_lock(&kernels_mu);
	struct registered *r = registered;
	while (r && r->stub != hostFun)
		r = r->next;
	pthread_mutex_unlock(&kernels_mu);
	if (!r)
		return cudaErrorInvalidDeviceFunction;
	*kernel = (cudaKernel_t)r;
	return cudaSuccess;
}

static cudaError_t launch_handle(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim, void **args, size_t sharedMem,
				 cudaStream_t stream, int ptsz)
{
	if (!kernel)
		return cudaErrorInvalidDeviceFunction;
	const void *func = ((struct registered *)kernel)->stub;
	cudaError_t err = launch_check(func, gridDim, blockDim);
	if (err)
		return err;
	return (ptsz ? drv.cuLaunchKernel_ptsz : drv.cuLaunchKernel)(function_of(func), gridDim.x, gridDim.y, gridDim.z,
								     blockDim.x, blockDim.y, blockDim.z,
								     (unsigned)sharedMem, stream, args, NULL);
}

API cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim, void **args, size_t sharedMem,
				   cudaStream_t stream)
{
	return launch_handle(kernel, gridDim, blockDim, args, sharedMem, stream, 0);
}

API cudaError_t __cudaLaunchKernel_ptsz(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim, void **args,
					size_t sharedMem, cudaStream_t stream)
{
	return launch_handle(kernel, gridDim, blockDim, args, sharedMem, stream, 1);
}

static CUlaunchConfig driver_config(const cudaLaunchConfig_t *c)
{
	return (CUlaunchConfig){
		.gridDimX = c->gridDim.x,
		.gridDimY = c->gridDim.y,
		.gridDimZ = c->gridDim.z,
		.blockDimX = c->blockDim.x,
		.blockDimY = c->blockDim.y,
		.blockDimZ = c->blockDim.z,
		.sharedMemBytes = (unsigned)c->dynamicSmemBytes,
		.hStream = c->stream,
		.attrs = (CUlaunchAttribute *)c->attrs,
		.numAttrs = c->numAttrs,
	};
}

API cudaError_t cudaLaunchKernel(const void *func, dim3 gridDim, dim3 blockDim, void **args,
				 size_t sharedMem, cudaStream_t stream)
{
	cudaError_t err = launch_check(func, gridDim, blockDim);
	if (err)
		return err;
	return drv.cuLaunchKernel(function_of(func), gridDim.x, gridDim.y, gridDim.z, blockDim.x, blockDim.y,
				  blockDim.z, (unsigned)sharedMem, stream, args, NULL);
}

API cudaError_t cudaLaunchKernel_ptsz(const void *func, dim3 gridDim, dim3 blockDim, void **args,
				      size_t sharedMem, cudaStream_t stream)
{
	cudaError_t err = launch_check(func, gridDim, blockDim);
	if (err)
		return err;
	return drv.cuLaunchKernel_ptsz(function_of(func), gridDim.x, gridDim.y, gridDim.z, blockDim.x,
				       blockDim.y, blockDim.z, (unsigned)sharedMem, stream, args, NULL);
}

API cudaError_t cudaLaunchKernelExC(const cudaLaunchConfig_t *config, const void *func, void **args)
{
	if (!config)
		return cudaErrorInvalidValue;
	cudaError_t err = launch_check(func, config->gridDim, config->blockDim);
	if (err)
		return err;
	/* Tail-calls the driver, as real cudart does here: the driver sees the
	 * program's return address, not the runtime's (the config lives in
	 * thread storage so that nothing on this frame outlives it). */
	static __thread CUlaunchConfig c;
	c = driver_config(config);
	return drv.cuLaunchKernelEx(&c, function_of(func), args, NULL);
}

API cudaError_t cudaLaunchKernelExC_ptsz(const cudaLaunchConfig_t *config, const void *func, void **args)
{
	if (!config)
		return cudaErrorInvalidValue;
	cudaError_t err = launch_check(func, config->gridDim, config->blockDim);
	if (err)
		return err;
	CUlaunchConfig c = driver_config(config);
	return drv.cuLaunchKernelEx_ptsz(&c, function_of(func), args, NULL);
}

API cudaError_t cudaLaunchCooperativeKernel(const void *func, dim3 gridDim, dim3 blockDim, void **args,
					    size_t sharedMem, cudaStream_t stream)
{
	cudaError_t err = launch_check(func, gridDim, blockDim);
	if (err)
		return err;
	return drv.cuLaunchCooperativeKernel(function_of(func), gridDim.x, gridDim.y, gridDim.z, blockDim.x,
					     blockDim.y, blockDim.z, (unsigned)sharedMem, stream, args);
}

API cudaError_t cudaLaunchCooperativeKernel_ptsz(const void *func, dim3 gridDim, dim3 blockDim,
						 void **args, size_t sharedMem, cudaStream_t stream)
{
	cudaError_t err = launch_check(func, gridDim, blockDim);
	if (err)
		return err;
	return drv.cuLaunchCooperativeKernel_ptsz(function_of(func), gridDim.x, gridDim.y, gridDim.z, blockDim.x,
						  blockDim.y, blockDim.z, (unsigned)sharedMem, stream, args);
}

API cudaError_t cudaGraphLaunch(cudaGraphExec_t graphExec, cudaStream_t stream)
{
	return DRIVER(cuGraphLaunch, graphExec, stream);
}

API cudaError_t cudaGraphLaunch_ptsz(cudaGraphExec_t graphExec, cudaStream_t stream)
{
	return DRIVER(cuGraphLaunch_ptsz, graphExec, stream);
}

/* ---- graphs ---- */

API cudaError_t cudaStreamBeginCapture(cudaStream_t stream, enum cudaStreamCaptureMode mode)
{
	return DRIVER(cuStreamBeginCapture_v2, stream, (CUstreamCaptureMode)mode);
}

API cudaError_t cudaStreamBeginCapture_ptsz(cudaStream_t stream, enum cudaStreamCaptureMode mode)
{
	return DRIVER(cuStreamBeginCapture_v2_ptsz, stream, (CUstreamCaptureMode)mode);
}

API cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t *pGraph)
{
	return DRIVER(cuStreamEndCapture, stream, pGraph);
}

API cudaError_t cudaStreamEndCapture_ptsz(cudaStream_t stream, cudaGraph_t *pGraph)
{
	return DRIVER(cuStreamEndCapture_ptsz, stream, pGraph);
}

API cudaError_t cudaGraphCreate(cudaGraph_t *pGraph, unsigned int flags)
{
	return DRIVER(cuGraphCreate, pGraph, flags);
}

/* The driver's node parameters of the runtime's: the stub's CUfunction. */
static cudaError_t kernel_params(CUDA_KERNEL_NODE_PARAMS *out, const struct cudaKernelNodeParams *p)
{
	if (!p)
		return cudaErrorInvalidValue;
	cudaError_t err = launch_check(p->func, p->gridDim, p->blockDim);
	if (err)
		return err;
	*out = (CUDA_KERNEL_NODE_PARAMS){ .func = function_of(p->func), .gridDimX = p->gridDim.x, .gridDimY = p->gridDim.y,
					  .gridDimZ = p->gridDim.z, .blockDimX = p->blockDim.x, .blockDimY = p->blockDim.y,
					  .blockDimZ = p->blockDim.z, .sharedMemBytes = p->sharedMemBytes,
					  .kernelParams = p->kernelParams, .extra = p->extra };
	return cudaSuccess;
}

API cudaError_t cudaGraphAddKernelNode(cudaGraphNode_t *pGraphNode, cudaGraph_t graph, const cudaGraphNode_t *pDependencies,
				       size_t numDependencies, const struct cudaKernelNodeParams *pNodeParams)
{
	CUDA_KERNEL_NODE_PARAMS p;
	cudaError_t err = kernel_params(&p, pNodeParams);
	if (err)
		return err;
	return (cudaError_t)drv.cuGraphAddKernelNode_v2(pGraphNode, graph, pDependencies, numDependencies, &p);
}

API cudaError_t cudaGraphInstantiate(cudaGraphExec_t *pGraphExec, cudaGraph_t graph, unsigned long long flags)
{
	return DRIVER(cuGraphInstantiateWithFlags, pGraphExec, graph, flags);
}

API cudaError_t cudaGraphInstantiateWithFlags(cudaGraphExec_t *pGraphExec, cudaGraph_t graph, unsigned long long flags)
{
	return DRIVER(cuGraphInstantiateWithFlags, pGraphExec, graph, flags);
}

API cudaError_t cudaGraphExecKernelNodeSetParams(cudaGraphExec_t hGraphExec, cudaGraphNode_t node,
						 const struct cudaKernelNodeParams *pNodeParams)
{
	CUDA_KERNEL_NODE_PARAMS p;
	cudaError_t err = kernel_params(&p, pNodeParams);
	if (err)
		return err;
	return (cudaError_t)drv.cuGraphExecKernelNodeSetParams_v2(hGraphExec, node, &p);
}

API cudaError_t cudaGraphExecUpdate(cudaGraphExec_t hGraphExec, cudaGraph_t hGraph,
				    struct cudaGraphExecUpdateResultInfo *resultInfo)
{
	return DRIVER(cuGraphExecUpdate_v2, hGraphExec, hGraph, (CUgraphExecUpdateResultInfo *)resultInfo);
}

API cudaError_t cudaGraphExecDestroy(cudaGraphExec_t graphExec)
{
	return DRIVER(cuGraphExecDestroy, graphExec);
}

API cudaError_t cudaGraphDestroy(cudaGraph_t graph)
{
	return DRIVER(cuGraphDestroy, graph);
}

API cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void *userData)
{
	return DRIVER(cuLaunchHostFunc, stream, fn, userData);
}

API cudaError_t cudaLaunchHostFunc_ptsz(cudaStream_t stream, cudaHostFn_t fn, void *userData)
{
	return DRIVER(cuLaunchHostFunc_ptsz, stream, fn, userData);
}

/* ---- copies and sets ---- */

/* Checks what the runtime checks before it reaches the driver. */
static cudaError_t copy_check(const void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
			      size_t height, int kind)
{
	if (kind < cudaMemcpyHostToHost || kind > cudaMemcpyDefault)
		return cudaErrorInvalidMemcpyDirection;
	if (width > dpitch || width > spitch)
		return cudaErrorInvalidPitchValue;
	if ((!dst || !src) && width && height)
		return cudaErrorInvalidValue;
	return driver() ? cudaSuccess : cudaErrorInsufficientDriver;
}

/* A synchronous copy through the driver call for its kind; ptds: on the
 * per-thread default stream. Host-to-host and default copies go through
 * cuMemcpy, which resolves each side by address. */
static cudaError_t copy_sync(void *dst, const void *src, size_t n, int kind, int ptds)
{
	cudaError_t err = copy_check(dst, n, src, n, n, 1, kind);
	if (err)
		return err;
	switch (kind) {
	case cudaMemcpyHostToDevice:
		return (ptds ? drv.cuMemcpyHtoD_v2_ptds : drv.cuMemcpyHtoD_v2)(DEVPTR(dst), src, n);
	case cudaMemcpyDeviceToHost:
		return (ptds ? drv.cuMemcpyDtoH_v2_ptds : drv.cuMemcpyDtoH_v2)(dst, DEVPTR(src), n);
	case cudaMemcpyDeviceToDevice:
		return (ptds ? drv.cuMemcpyDtoD_v2_ptds : drv.cuMemcpyDtoD_v2)(DEVPTR(dst), DEVPTR(src), n);
	default:
		return (ptds ? drv.cuMemcpy_ptds : drv.cuMemcpy)(DEVPTR(dst), DEVPTR(src), n);
	}
}

/* An async copy through the driver call for its kind; ptsz: a _ptsz call. */
static cudaError_t copy_async(void *dst, const void *src, size_t n, int kind, cudaStream_t s, int ptsz)
{
	cudaError_t err = copy_check(dst, n, src, n, n, 1, kind);
	if (err)
		return err;
	switch (kind) {
	case cudaMemcpyHostToDevice:
		return (ptsz ? drv.cuMemcpyHtoDAsync_v2_ptsz : drv.cuMemcpyHtoDAsync_v2)(DEVPTR(dst), src, n, s);
	case cudaMemcpyDeviceToHost:
		return (ptsz ? drv.cuMemcpyDtoHAsync_v2_ptsz : drv.cuMemcpyDtoHAsync_v2)(dst, DEVPTR(src), n, s);
	case cudaMemcpyDeviceToDevice:
		return (ptsz ? drv.cuMemcpyDtoDAsync_v2_ptsz : drv.cuMemcpyDtoDAsync_v2)(DEVPTR(dst), DEVPTR(src), n, s);
	default:
		return (ptsz ? drv.cuMemcpyAsync_ptsz : drv.cuMemcpyAsync)(DEVPTR(dst), DEVPTR(src), n, s);
	}
}

/* The driver's description of a 2D copy of the given kind. */
static CUDA_MEMCPY2D copy2d_params(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
				   size_t height, int kind)
{
	static const CUmemorytype src_type[] = {
		[cudaMemcpyHostToHost] = CU_MEMORYTYPE_HOST,	  [cudaMemcpyHostToDevice] = CU_MEMORYTYPE_HOST,
		[cudaMemcpyDeviceToHost] = CU_MEMORYTYPE_DEVICE,   [cudaMemcpyDeviceToDevice] = CU_MEMORYTYPE_DEVICE,
		[cudaMemcpyDefault] = CU_MEMORYTYPE_UNIFIED,
	};
	static const CUmemorytype dst_type[] = {
		[cudaMemcpyHostToHost] = CU_MEMORYTYPE_HOST,	  [cudaMemcpyHostToDevice] = CU_MEMORYTYPE_DEVICE,
		[cudaMemcpyDeviceToHost] = CU_MEMORYTYPE_HOST,	  [cudaMemcpyDeviceToDevice] = CU_MEMORYTYPE_DEVICE,
		[cudaMemcpyDefault] = CU_MEMORYTYPE_UNIFIED,
	};
	return (CUDA_MEMCPY2D){
		.srcMemoryType = src_type[kind],
		.srcHost = src,
		.srcDevice = DEVPTR(src),
		.srcPitch = spitch,
		.dstMemoryType = dst_type[kind],
		.dstHost = dst,
		.dstDevice = DEVPTR(dst),
		.dstPitch = dpitch,
		.WidthInBytes = width,
		.Height = height,
	};
}

API cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind)
{
	return copy_sync(dst, src, count, kind, 0);
}

API cudaError_t cudaMemcpy_ptds(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind)
{
	return copy_sync(dst, src, count, kind, 1);
}

API cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind,
				cudaStream_t stream)
{
	return copy_async(dst, src, count, kind, stream, 0);
}

API cudaError_t cudaMemcpyAsync_ptsz(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind,
				     cudaStream_t stream)
{
	return copy_async(dst, src, count, kind, stream, 1);
}

API cudaError_t cudaMemcpy2D(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
			     size_t height, enum cudaMemcpyKind kind)
{
	cudaError_t err = copy_check(dst, dpitch, src, spitch, width, height, kind);
	if (err)
		return err;
	CUDA_MEMCPY2D c = copy2d_params(dst, dpitch, src, spitch, width, height, kind);
	return drv.cuMemcpy2D_v2(&c);
}

API cudaError_t cudaMemcpy2D_ptds(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
				  size_t height, enum cudaMemcpyKind kind)
{
	cudaError_t err = copy_check(dst, dpitch, src, spitch, width, height, kind);
	if (err)
		return err;
	CUDA_MEMCPY2D c = copy2d_params(dst, dpitch, src, spitch, width, height, kind);
	return drv.cuMemcpy2D_v2_ptds(&c);
}

API cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
				  size_t height, enum cudaMemcpyKind kind, cudaStream_t stream)
{
	cudaError_t err = copy_check(dst, dpitch, src, spitch, width, height, kind);
	if (err)
		return err;
	CUDA_MEMCPY2D c = copy2d_params(dst, dpitch, src, spitch, width, height, kind);
	return drv.cuMemcpy2DAsync_v2(&c, stream);
}

API cudaError_t cudaMemcpy2DAsync_ptsz(void *dst, size_t dpitch, const void *src, size_t spitch,
				       size_t width, size_t height, enum cudaMemcpyKind kind,
				       cudaStream_t stream)
{
	cudaError_t err = copy_check(dst, dpitch, src, spitch, width, height, kind);
	if (err)
		return err;
	CUDA_MEMCPY2D c = copy2d_params(dst, dpitch, src, spitch, width, height, kind);
	return drv.cuMemcpy2DAsync_v2_ptsz(&c, stream);
}

API cudaError_t cudaMemset(void *devPtr, int value, size_t count)
{
	return DRIVER(cuMemsetD8_v2, DEVPTR(devPtr), (unsigned char)value, count);
}

API cudaError_t cudaMemset_ptds(void *devPtr, int value, size_t count)
{
	return DRIVER(cuMemsetD8_v2_ptds, DEVPTR(devPtr), (unsigned char)value, count);
}

API cudaError_t cudaMemsetAsync(void *devPtr, int value, size_t count, cudaStream_t stream)
{
	return DRIVER(cuMemsetD8Async, DEVPTR(devPtr), (unsigned char)value, count, stream);
}

API cudaError_t cudaMemsetAsync_ptsz(void *devPtr, int value, size_t count, cudaStream_t stream)
{
	return DRIVER(cuMemsetD8Async_ptsz, DEVPTR(devPtr), (unsigned char)value, count, stream);
}

/* ---- streams ---- */

API cudaError_t cudaStreamCreate(cudaStream_t *pStream)
{
	return DRIVER(cuStreamCreate, pStream, CU_STREAM_DEFAULT);
}

API cudaError_t cudaStreamCreateWithFlags(cudaStream_t *pStream, unsigned int flags)
{
	return DRIVER(cuStreamCreate, pStream, flags);
}

API cudaError_t cudaStreamCreateWithPriority(cudaStream_t *pStream, unsigned int flags, int priority)
{
	return DRIVER(cuStreamCreateWithPriority, pStream, flags, priority);
}

API cudaError_t cudaStreamDestroy(cudaStream_t stream)
{
	return DRIVER(cuStreamDestroy_v2, stream);
}

API cudaError_t cudaStreamSynchronize(cudaStream_t stream)
{
	return DRIVER(cuStreamSynchronize, stream);
}

API cudaError_t cudaStreamSynchronize_ptsz(cudaStream_t stream)
{
	return DRIVER(cuStreamSynchronize_ptsz, stream);
}

API cudaError_t cudaStreamQuery(cudaStream_t stream)
{
	return DRIVER(cuStreamQuery, stream);
}

API cudaError_t cudaStreamQuery_ptsz(cudaStream_t stream)
{
	return DRIVER(cuStreamQuery_ptsz, stream);
}

API cudaError_t cudaDeviceSynchronize(void)
{
	return DRIVER(cuCtxSynchronize);
}

/* ---- events ---- */

API cudaError_t cudaEventCreate(cudaEvent_t *event)
{
	return DRIVER(cuEventCreate, event, CU_EVENT_DEFAULT);
}

API cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags)
{
	return DRIVER(cuEventCreate, event, flags);
}

API cudaError_t cudaEventDestroy(cudaEvent_t event)
{
	return DRIVER(cuEventDestroy_v2, event);
}

/* As in CUDA 13, cudaEventRecord goes through cuEventRecordWithFlags. */
API cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream)
{
	return DRIVER(cuEventRecordWithFlags, event, stream, 0);
}

API cudaError_t cudaEventRecord_ptsz(cudaEvent_t event, cudaStream_t stream)
{
	return DRIVER(cuEventRecordWithFlags_ptsz, event, stream, 0);
}

API cudaError_t cudaEventRecordWithFlags(cudaEvent_t event, cudaStream_t stream, unsigned int flags)
{
	return DRIVER(cuEventRecordWithFlags, event, stream, flags);
}

API cudaError_t cudaEventRecordWithFlags_ptsz(cudaEvent_t event, cudaStream_t stream, unsigned int flags)
{
	return DRIVER(cuEventRecordWithFlags_ptsz, event, stream, flags);
}

API cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags)
{
	return DRIVER(cuStreamWaitEvent, stream, event, flags);
}

API cudaError_t cudaStreamWaitEvent_ptsz(cudaStream_t stream, cudaEvent_t event, unsigned int flags)
{
	return DRIVER(cuStreamWaitEvent_ptsz, stream, event, flags);
}

API cudaError_t cudaEventSynchronize(cudaEvent_t event)
{
	return DRIVER(cuEventSynchronize, event);
}

API cudaError_t cudaEventQuery(cudaEvent_t event)
{
	return DRIVER(cuEventQuery, event);
}

/* ---- memory ---- */

API cudaError_t cudaMalloc(void **devPtr, size_t size)
{
	if (!devPtr)
		return cudaErrorInvalidValue;
	CUdeviceptr p;
	cudaError_t err = DRIVER(cuMemAlloc_v2, &p, size);
	if (!err)
		*devPtr = (void *)(uintptr_t)p;
	return err;
}

/* cudaFree synchronizes the device, as in CUDA. */
API cudaError_t cudaFree(void *devPtr)
{
	return DRIVER(cuMemFree_v2, DEVPTR(devPtr));
}

/* Stream-ordered allocation: no synchronization. */
API cudaError_t cudaMallocAsync(void **devPtr, size_t size, cudaStream_t hStream)
{
	if (!devPtr)
		return cudaErrorInvalidValue;
	CUdeviceptr p;
	cudaError_t err = DRIVER(cuMemAllocAsync, &p, size, hStream);
	if (!err)
		*devPtr = (void *)(uintptr_t)p;
	return err;
}

API cudaError_t cudaMallocAsync_ptsz(void **devPtr, size_t size, cudaStream_t hStream)
{
	if (!devPtr)
		return cudaErrorInvalidValue;
	CUdeviceptr p;
	cudaError_t err = DRIVER(cuMemAllocAsync_ptsz, &p, size, hStream);
	if (!err)
		*devPtr = (void *)(uintptr_t)p;
	return err;
}

API cudaError_t cudaFreeAsync(void *devPtr, cudaStream_t hStream)
{
	return DRIVER(cuMemFreeAsync, DEVPTR(devPtr), hStream);
}

API cudaError_t cudaFreeAsync_ptsz(void *devPtr, cudaStream_t hStream)
{
	return DRIVER(cuMemFreeAsync_ptsz, DEVPTR(devPtr), hStream);
}

/* The other allocations: each made by its driver call. */
API cudaError_t cudaMallocManaged(void **devPtr, size_t size, unsigned int flags)
{
	if (!devPtr)
		return cudaErrorInvalidValue;
	CUdeviceptr p;
	cudaError_t err = DRIVER(cuMemAllocManaged, &p, size, flags);
	if (!err)
		*devPtr = (void *)(uintptr_t)p;
	return err;
}

API cudaError_t cudaMallocPitch(void **devPtr, size_t *pitch, size_t width, size_t height)
{
	if (!devPtr)
		return cudaErrorInvalidValue;
	CUdeviceptr p;
	cudaError_t err = DRIVER(cuMemAllocPitch_v2, &p, pitch, width, height, 4);
	if (!err)
		*devPtr = (void *)(uintptr_t)p;
	return err;
}

API cudaError_t cudaMallocFromPoolAsync(void **ptr, size_t size, cudaMemPool_t memPool, cudaStream_t stream)
{
	if (!ptr)
		return cudaErrorInvalidValue;
	CUdeviceptr p;
	cudaError_t err = DRIVER(cuMemAllocFromPoolAsync, &p, size, (CUmemoryPool)memPool, stream);
	if (!err)
		*ptr = (void *)(uintptr_t)p;
	return err;
}

API cudaError_t cudaMallocFromPoolAsync_ptsz(void **ptr, size_t size, cudaMemPool_t memPool, cudaStream_t stream)
{
	if (!ptr)
		return cudaErrorInvalidValue;
	CUdeviceptr p;
	cudaError_t err = DRIVER(cuMemAllocFromPoolAsync_ptsz, &p, size, (CUmemoryPool)memPool, stream);
	if (!err)
		*ptr = (void *)(uintptr_t)p;
	return err;
}

API cudaError_t cudaHostAlloc(void **pHost, size_t size, unsigned int flags)
{
	return DRIVER(cuMemHostAlloc, pHost, size, flags);
}

API cudaError_t cudaMallocHost(void **ptr, size_t size)
{
	return DRIVER(cuMemAllocHost_v2, ptr, size);
}

/* Like cudaFree, cudaFreeHost synchronizes the device. */
API cudaError_t cudaFreeHost(void *ptr)
{
	return DRIVER(cuMemFreeHost, ptr);
}

API cudaError_t cudaHostRegister(void *ptr, size_t size, unsigned int flags)
{
	return DRIVER(cuMemHostRegister_v2, ptr, size, flags);
}

API cudaError_t cudaHostUnregister(void *ptr)
{
	return DRIVER(cuMemHostUnregister, ptr);
}

/* ---- device ---- */

/* Two devices to choose from, per thread as in CUDA; both share the one
 * modeled GPU clock (a tracer only needs to attribute work to them). */
#define SIM_DEVICES 2
static __thread int current_device;

/* The calling thread's current device, for the simulated CUPTI's records
 * (the driver asks: it has no per-thread device of its own). */
__attribute__((visibility("default"))) int sim_current_device(void) { return current_device; }

API cudaError_t cudaGetDevice(int *device)
{
	if (!device)
		return cudaErrorInvalidValue;
	*device = current_device;
	return cudaSuccess;
}

API cudaError_t cudaSetDevice(int device)
{
	if (device < 0 || device >= SIM_DEVICES)
		return cudaErrorInvalidDevice;
	current_device = device;
	return cudaSuccess;
}

/* No call leaves a sticky error behind. */
API cudaError_t cudaGetLastError(void)
{
	return cudaSuccess;
}
