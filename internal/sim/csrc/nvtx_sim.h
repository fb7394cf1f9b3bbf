/*
 * nvtx_sim.h: the NVTX C API the simulated NVTX library (nvtx_sim.c,
 * libnvToolsExt.so.1) exports, with NVTX's prototypes and event attribute
 * layout (nvToolsExt.h, v3).
 */
#ifndef NVTX_SIM_H
#define NVTX_SIM_H

#include <stddef.h>
#include <stdint.h>
#include <wchar.h>

typedef uint64_t nvtxRangeId_t;
typedef struct nvtxDomainRegistration_st *nvtxDomainHandle_t;
typedef struct nvtxStringRegistration_st *nvtxStringHandle_t;

enum { NVTX_VERSION = 3, NVTX_MESSAGE_TYPE_ASCII = 1, NVTX_MESSAGE_TYPE_UNICODE = 2, NVTX_MESSAGE_TYPE_REGISTERED = 3 };

typedef struct nvtxEventAttributes_v2 {
	uint16_t version;
	uint16_t size;
	uint32_t category;
	int32_t colorType;
	uint32_t color;
	int32_t payloadType;
	int32_t reserved0;
	union {
		uint64_t ullValue;
		int64_t llValue;
		double dValue;
	} payload;
	int32_t messageType;
	union {
		const char *ascii;
		const wchar_t *unicode;
		nvtxStringHandle_t registered;
	} message;
} nvtxEventAttributes_t;

int nvtxRangePushA(const char *message);
int nvtxRangePushW(const wchar_t *message);
int nvtxRangePushEx(const nvtxEventAttributes_t *attr);
int nvtxRangePop(void);
nvtxRangeId_t nvtxRangeStartA(const char *message);
nvtxRangeId_t nvtxRangeStartW(const wchar_t *message);
nvtxRangeId_t nvtxRangeStartEx(const nvtxEventAttributes_t *attr);
void nvtxRangeEnd(nvtxRangeId_t id);
void nvtxMarkA(const char *message);
void nvtxMarkW(const wchar_t *message);
void nvtxMarkEx(const nvtxEventAttributes_t *attr);
nvtxDomainHandle_t nvtxDomainCreateA(const char *name);
nvtxStringHandle_t nvtxDomainRegisterStringA(nvtxDomainHandle_t domain, const char *string);
int nvtxDomainRangePushEx(nvtxDomainHandle_t domain, const nvtxEventAttributes_t *attr);
int nvtxDomainRangePop(nvtxDomainHandle_t domain);
nvtxRangeId_t nvtxDomainRangeStartEx(nvtxDomainHandle_t domain, const nvtxEventAttributes_t *attr);
void nvtxDomainRangeEnd(nvtxDomainHandle_t domain, nvtxRangeId_t id);
void nvtxDomainMarkEx(nvtxDomainHandle_t domain, const nvtxEventAttributes_t *attr);

/* The entry points a workload may call, for its report's counts. */
#define NVTX_API_LIST(X)                                                                           \
	X(nvtxRangePushA) X(nvtxRangePushW) X(nvtxRangePushEx) X(nvtxRangePop) X(nvtxRangeStartA) \
	X(nvtxRangeStartW) X(nvtxRangeStartEx) X(nvtxRangeEnd) X(nvtxMarkA) X(nvtxMarkW)          \
	X(nvtxMarkEx) X(nvtxDomainCreateA) X(nvtxDomainRegisterStringA) X(nvtxDomainRangePushEx)  \
	X(nvtxDomainRangePop) X(nvtxDomainRangeStartEx) X(nvtxDomainRangeEnd) X(nvtxDomainMarkEx)

#endif
