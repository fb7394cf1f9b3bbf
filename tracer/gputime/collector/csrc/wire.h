/*
 * wire.h: the messages the collector sends cudatap over its socket
 * (SOCK_SEQPACKET: one message per send, in order). tracer/gputime/gputime.go
 * reads the same layout; little-endian x86-64.
 *
 * cudatap sends the collector one byte at a time: 'A' after CT_HELLO, once
 * it watches for other CUPTI clients (the program waits for it, a while at
 * most), 'S' flush and stop for good, 'H' hand CUPTI over to another client
 * of the process (answered CT_HANDED_OVER), 'T' take it back once that
 * client is done (answered CT_RESUMED, or CT_KEPT while another client
 * still holds it).
 */
#ifndef CUDATAP_WIRE_H
#define CUDATAP_WIRE_H

#include <stdint.h>

#define CT_MAGIC 0x50415443u /* "CTAP" */
#define CT_VERSION 3

enum ct_msg_type {
	CT_HELLO = 1,   /* text: what CUPTI the collector uses and how */
	CT_RECORDS = 2, /* count × struct ct_record */
	CT_MARK = 3,    /* a flush of the full buffers began at time */
	CT_BYE = 4,     /* stopped: nothing follows */
	CT_ERROR = 5,   /* text: why the collector is not collecting; nothing follows */
	CT_NAME = 6,    /* u64 hash, then a kernel's (mangled) name: records carry the hash */
	CT_HANDED_OVER = 7, /* CUPTI released at time, every record before it sent: nothing measured until CT_RESUMED */
	CT_RESUMED = 8,     /* CUPTI taken back at time: measuring again (correlation ids may start over) */
	CT_KEPT = 9,        /* text: CUPTI could not be taken back (another client still holds it) */
	CT_NVTX = 10,       /* count NVTX records (struct ct_nvtx, each followed by its message), on
			     * the NVTX side's own connection (nvtx.c, socket nvtx.sock) */
};

struct ct_msg_hdr {
	uint32_t magic;
	uint16_t version;
	uint16_t type;
	uint32_t count;         /* records, or text bytes */
	uint32_t pid;           /* getpid() in the process's own namespace */
	uint64_t time;          /* CLOCK_MONOTONIC when sent (MARK: when the flush began) */
	uint64_t cupti_time;    /* cuptiGetTimestamp() next to time */
	uint64_t dropped;       /* records the collector could not send, so far */
	uint64_t cupti_dropped; /* records CUPTI dropped (no buffer), so far */
};

enum ct_record_kind {
	CT_API = 1,    /* a runtime (sub 1) or driver (sub 0) call: a = thread id, b = cbid;
			* start..end its CUPTI API record, or its callbacks' entry and exit */
	CT_KERNEL = 2, /* a = device, b = CUPTI stream id, bytes = name hash (0: none) */
	CT_MEMCPY = 3, /* a = device, b = stream, sub = copy kind */
	CT_MEMSET = 4, /* a = device, b = stream */
};

/* ct_record.flags */
enum {
	CT_FLAG_MONOTONIC = 1, /* stamped by the collector with CLOCK_MONOTONIC, whatever CUPTI's clock */
};

struct ct_record {
	uint8_t kind;
	uint8_t sub;
	uint16_t flags;
	uint32_t correlation;
	uint64_t start, end; /* CLOCK_MONOTONIC ns (see HELLO: clock=) */
	uint32_t a, b;
	uint64_t bytes;
	uint64_t graph_node; /* GPU records: CUPTI's graphNodeId, the graph node that ran it (0: not a graph launch's) */
};

_Static_assert(sizeof(struct ct_msg_hdr) == 48, "header");
_Static_assert(sizeof(struct ct_record) == 48, "record");

#define CT_MAX_RECORDS 1024 /* per message: 48 KiB */

/* An NVTX call (nvtx.c): a range pushed or popped (per thread and domain),
 * started or ended (by id, from any thread), or a mark. Its message, len
 * bytes (no NUL), follows; the next record starts at the next multiple of
 * 8 bytes. Time is CLOCK_MONOTONIC; tid is gettid() in the process's
 * namespace; domain 0 is NVTX's default one. */
enum ct_nvtx_kind {
	CT_NVTX_PUSH = 1,
	CT_NVTX_POP = 2,
	CT_NVTX_START = 3, /* id: the range's, as nvtxRangeStart returned it */
	CT_NVTX_END = 4,
	CT_NVTX_MARK = 5,
};

struct ct_nvtx {
	uint8_t kind;
	uint8_t pad;
	uint16_t len;
	uint32_t tid;
	uint64_t time;
	uint64_t id;
	uint64_t domain;
};

_Static_assert(sizeof(struct ct_nvtx) == 32, "nvtx record");

#define CT_NVTX_BYTES (64 << 10) /* NVTX records' bytes per message, at most */
#define CT_NVTX_MESSAGE 1024     /* an NVTX message's bytes, at most (longer ones are cut) */

#endif
