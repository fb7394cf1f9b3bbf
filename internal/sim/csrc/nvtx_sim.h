/*
 * nvtx_sim.h: the NVTX C API the simulated NVTX library (nvtx_sim.c,
 * libnvToolsExt.so.1) exports, with NVTX's prototypes and event attribute
 * layout (nvToolsExt.h, v3).
 */
#ifndef NVTX_SIM_H
#define NVTX_SIM_H

#include <stddef.h>
#include <stdint.h>

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
int nvtxRangePushEx(const nvtxEventAttributes_t *attr);
int nvtxRangePop(void);
nvtxRangeId_t nvtxRangeStartA(const char *message);
void nvtxRangeEnd(nvtxRangeId_t id);
void nvtxMarkA(const char *message);
nvtxDomainHandle_t nvtxDomainCreateA(const char *name);
nvtxStringHandle_t nvtxDomainRegisterStringA(nvtxDomainHandle_t domain, const char *string);
int nvtxDomainRangePushEx(nvtxDomainHandle_t domain, const nvtxEventAttributes_t *attr);
int nvtxDomainRangePop(nvtxDomainHandle_t domain);

/* The entry points a workload may call, for its report's counts. */
#define NVTX_API_LIST(X)                                                                         \
	X(nvtxRangePushA) X(nvtxRangePushEx) X(nvtxRangePop) X(nvtxRangeStartA) X(nvtxRangeEnd) \
	X(nvtxMarkA) X(nvtxDomainCreateA) X(nvtxDomainRegisterStringA) X(nvtxDomainRangePushEx) \
	X(nvtxDomainRangePop)

#endif
