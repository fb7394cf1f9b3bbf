/*
 * nvtx_sim.c: a simulated NVTX library, libnvToolsExt.so.1. It exports the
 * NVTX C API (nvtx_sim.h) and behaves as NVTX v3's header-only code (and
 * v2's library) does: at the first call, once, it loads the injection
 * library NVTX_INJECTION64_PATH names, calls its InitializeInjectionNvtx2
 * with the export table, through which the tool fills the function tables
 * (NVTX_CB_MODULE_CORE and CORE2, by callback id), and from then on calls
 * what the tool put there. Without a tool, or one that declines (returns
 * 0), every call does nothing. Its exported symbols, every form NVTX's C
 * API has for ranges and marks (A, W, Ex, a domain's), are what a tracer
 * can hook with uprobes in a process it did not start.
 */
#define _GNU_SOURCE
#include "nvtx_sim.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>

#define EXPORT __attribute__((visibility("default")))

typedef void (*NvtxFunctionPointer)(void);
typedef NvtxFunctionPointer **NvtxFunctionTable;

typedef struct {
	size_t struct_size;
	int (*GetModuleFunctionTable)(int module, NvtxFunctionTable *out_table, unsigned int *out_size);
} NvtxExportTableCallbacks;

typedef const void *(*NvtxGetExportTableFunc_t)(uint32_t exportTableId);
typedef int (*NvtxInitializeInjectionNvtxFunc_t)(NvtxGetExportTableFunc_t exportTable);

/* Modules and callback ids, as nvtxTypes.h numbers them. */
enum { MODULE_CORE = 1, MODULE_CORE2 = 5, ETID_CALLBACKS = 1 };
enum {
	CORE_MarkEx = 1, CORE_MarkA, CORE_MarkW, CORE_RangeStartEx, CORE_RangeStartA, CORE_RangeStartW, CORE_RangeEnd,
	CORE_RangePushEx, CORE_RangePushA, CORE_RangePushW, CORE_RangePop, CORE_SIZE = 16
};
enum {
	CORE2_DomainMarkEx = 1, CORE2_DomainRangeStartEx, CORE2_DomainRangeEnd, CORE2_DomainRangePushEx, CORE2_DomainRangePop,
	CORE2_DomainRegisterStringA = 10, CORE2_DomainCreateA = 12, CORE2_SIZE = 16
};

static NvtxFunctionPointer core[CORE_SIZE], core2[CORE2_SIZE];
static NvtxFunctionPointer *core_table[CORE_SIZE], *core2_table[CORE2_SIZE];

static int get_module_function_table(int module, NvtxFunctionTable *out_table, unsigned int *out_size)
{
	switch (module) {
	case MODULE_CORE:
		*out_table = core_table;
		*out_size = CORE_SIZE;
		return 1;
	case MODULE_CORE2:
		*out_table = core2_table;
		*out_size = CORE2_SIZE;
		return 1;
	}
	return 0;
}

static const NvtxExportTableCallbacks callbacks = { sizeof callbacks, get_module_function_table };

static const void *get_export_table(uint32_t id)
{
	return id == ETID_CALLBACKS ? &callbacks : NULL;
}

static pthread_once_t once = PTHREAD_ONCE_INIT;

static void init(void)
{
	for (int i = 0; i < CORE_SIZE; i++)
		core_table[i] = &core[i];
	for (int i = 0; i < CORE2_SIZE; i++)
		core2_table[i] = &core2[i];
	const char *path = getenv("NVTX_INJECTION64_PATH");
	void *lib = path ? dlopen(path, RTLD_LAZY) : NULL;
	NvtxInitializeInjectionNvtxFunc_t fn = lib ? (NvtxInitializeInjectionNvtxFunc_t)dlsym(lib, "InitializeInjectionNvtx2") : NULL;
	if (!fn || !fn(get_export_table)) {
		/* No tool: every call is a no-op. */
		for (int i = 0; i < CORE_SIZE; i++)
			core[i] = NULL;
		for (int i = 0; i < CORE2_SIZE; i++)
			core2[i] = NULL;
	}
}

#define TOOL(table, id, type) (pthread_once(&once, init), (type)table[id])

EXPORT int nvtxRangePushA(const char *message)
{
	int (*f)(const char *) = TOOL(core, CORE_RangePushA, int (*)(const char *));
	return f ? f(message) : -1;
}

EXPORT int nvtxRangePushW(const wchar_t *message)
{
	int (*f)(const wchar_t *) = TOOL(core, CORE_RangePushW, int (*)(const wchar_t *));
	return f ? f(message) : -1;
}

EXPORT int nvtxRangePushEx(const nvtxEventAttributes_t *attr)
{
	int (*f)(const nvtxEventAttributes_t *) = TOOL(core, CORE_RangePushEx, int (*)(const nvtxEventAttributes_t *));
	return f ? f(attr) : -1;
}

EXPORT int nvtxRangePop(void)
{
	int (*f)(void) = TOOL(core, CORE_RangePop, int (*)(void));
	return f ? f() : -1;
}

EXPORT nvtxRangeId_t nvtxRangeStartA(const char *message)
{
	nvtxRangeId_t (*f)(const char *) = TOOL(core, CORE_RangeStartA, nvtxRangeId_t (*)(const char *));
	return f ? f(message) : 0;
}

EXPORT nvtxRangeId_t nvtxRangeStartW(const wchar_t *message)
{
	nvtxRangeId_t (*f)(const wchar_t *) = TOOL(core, CORE_RangeStartW, nvtxRangeId_t (*)(const wchar_t *));
	return f ? f(message) : 0;
}

EXPORT nvtxRangeId_t nvtxRangeStartEx(const nvtxEventAttributes_t *attr)
{
	nvtxRangeId_t (*f)(const nvtxEventAttributes_t *) =
		TOOL(core, CORE_RangeStartEx, nvtxRangeId_t (*)(const nvtxEventAttributes_t *));
	return f ? f(attr) : 0;
}

EXPORT void nvtxRangeEnd(nvtxRangeId_t id)
{
	void (*f)(nvtxRangeId_t) = TOOL(core, CORE_RangeEnd, void (*)(nvtxRangeId_t));
	if (f)
		f(id);
}

EXPORT void nvtxMarkA(const char *message)
{
	void (*f)(const char *) = TOOL(core, CORE_MarkA, void (*)(const char *));
	if (f)
		f(message);
}

EXPORT void nvtxMarkW(const wchar_t *message)
{
	void (*f)(const wchar_t *) = TOOL(core, CORE_MarkW, void (*)(const wchar_t *));
	if (f)
		f(message);
}

EXPORT void nvtxMarkEx(const nvtxEventAttributes_t *attr)
{
	void (*f)(const nvtxEventAttributes_t *) = TOOL(core, CORE_MarkEx, void (*)(const nvtxEventAttributes_t *));
	if (f)
		f(attr);
}

EXPORT nvtxDomainHandle_t nvtxDomainCreateA(const char *name)
{
	nvtxDomainHandle_t (*f)(const char *) = TOOL(core2, CORE2_DomainCreateA, nvtxDomainHandle_t (*)(const char *));
	return f ? f(name) : NULL;
}

EXPORT nvtxStringHandle_t nvtxDomainRegisterStringA(nvtxDomainHandle_t domain, const char *string)
{
	nvtxStringHandle_t (*f)(nvtxDomainHandle_t, const char *) =
		TOOL(core2, CORE2_DomainRegisterStringA, nvtxStringHandle_t (*)(nvtxDomainHandle_t, const char *));
	return f ? f(domain, string) : NULL;
}

EXPORT int nvtxDomainRangePushEx(nvtxDomainHandle_t domain, const nvtxEventAttributes_t *attr)
{
	int (*f)(nvtxDomainHandle_t, const nvtxEventAttributes_t *) =
		TOOL(core2, CORE2_DomainRangePushEx, int (*)(nvtxDomainHandle_t, const nvtxEventAttributes_t *));
	return f ? f(domain, attr) : -1;
}

EXPORT int nvtxDomainRangePop(nvtxDomainHandle_t domain)
{
	int (*f)(nvtxDomainHandle_t) = TOOL(core2, CORE2_DomainRangePop, int (*)(nvtxDomainHandle_t));
	return f ? f(domain) : -1;
}

EXPORT nvtxRangeId_t nvtxDomainRangeStartEx(nvtxDomainHandle_t domain, const nvtxEventAttributes_t *attr)
{
	nvtxRangeId_t (*f)(nvtxDomainHandle_t, const nvtxEventAttributes_t *) =
		TOOL(core2, CORE2_DomainRangeStartEx, nvtxRangeId_t (*)(nvtxDomainHandle_t, const nvtxEventAttributes_t *));
	return f ? f(domain, attr) : 0;
}

EXPORT void nvtxDomainRangeEnd(nvtxDomainHandle_t domain, nvtxRangeId_t id)
{
	void (*f)(nvtxDomainHandle_t, nvtxRangeId_t) = TOOL(core2, CORE2_DomainRangeEnd, void (*)(nvtxDomainHandle_t, nvtxRangeId_t));
	if (f)
		f(domain, id);
}

EXPORT void nvtxDomainMarkEx(nvtxDomainHandle_t domain, const nvtxEventAttributes_t *attr)
{
	void (*f)(nvtxDomainHandle_t, const nvtxEventAttributes_t *) =
		TOOL(core2, CORE2_DomainMarkEx, void (*)(nvtxDomainHandle_t, const nvtxEventAttributes_t *));
	if (f)
		f(domain, attr);
}
