/* Types shared by the BPF programs and Go (exported through bpf2go -type). */
#ifndef CUDATAP_H
#define CUDATAP_H

/*
 * The attach cookie tells the generic programs what to read for each symbol,
 * so one entry and one return program serve every hooked API:
 *
 *   bits  0..15  API id (tracer/event.API)
 *   bits 16..23  index of the exact symbol in the API's symbol list (_ptsz, _v2, ...)
 *   bits 24..25  number of stack words to copy past the argument registers
 *                (x86-64: [rsp+8], [rsp+16], [rsp+24]; arm64: [sp])
 *   bit  26      emit at return: entry is saved, one event carries start, end and ret
 *   bits 27..29  1 + index of an out-pointer argument dereferenced at return (0 = none)
 *   bit  30      copy 48 bytes behind argument COOKIE_DEREF_ARG at entry
 *                (launch config structs, argument 0; graph kernel node
 *                parameters)
 *   bit  31      capture the user stack (frame pointers)
 *   bit  32      (library-load hook) stop the process until user space resumes it
 *   bits 33..35  1 + index of a C-string argument copied (at return) into copy[],
 *                or, with bit 36, of the kernel stub argument to remember
 *   bit  36      (runtime launch) hand the kernel stub to the driver launch
 *                underneath; emit only while the driver's launches are not hooked
 *   bit  37      (driver launch) take the stub a runtime launch left, into out;
 *                stay silent if that runtime launch was already emitted
 *   bit  38      shared probe: one link per library file for every process
 *                (--all, --container); the bits below decide per process
 *   bit  39      (shared, driver) an API the runtime covers: skip it in a
 *                process that has a runtime
 *   bit  40      (shared, runtime) mark the process as having a runtime
 *   bit  41      (shared) only processes in a cgroup of the `cgroups` map
 *   bit  42      (launch) count the launch in `launch_counts`, write no record
 *   bits 43..46  (with 42) where the launch's stream is: 0 nowhere, 1..3 stack
 *                word k (x86-64 [rsp+8k], arm64 [sp+8(k-1)]), 4..7 register
 *                x4..x7 (arm64), 8+w word w behind argument 0 (a config)
 *   bit  47      (with 42) time the launch: the entry keeps its time per
 *                thread, a return probe adds the call to `launch_times`
 *   bit  48      (shared, and the library-load hook) only processes of the
 *                followed tree (`tree`: record follows what its command
 *                starts)
 *   bit  49      (user space only) the arm64 programs read the record's
 *                arguments: its slots are as AAPCS64 lays them out
 *   bits 50..52  index of the argument bit 30 copies behind: a pointer
 *                argument, or (arm64) the pointer AAPCS64 passes for a
 *                struct larger than 16 bytes (ncclCommInitRank's
 *                ncclUniqueId)
 *   bits 53..56  (launch) where its kernelParams is, to copy the kernel's
 *                parameter values (struct kernel_args) behind the record:
 *                0 nowhere, 1..9 slot v-1 (args[]), 10..15 stack word
 *                v-9 (STACK_WORD)
 *   bit  57      (stream capture begins) at a successful return, count the
 *                process as capturing a CUDA graph
 *   bit  58      (stream capture ends) at return, one capture fewer
 *   bit  59      (a call that enqueues work) capture the user stack, as
 *                bit 31 does, while the process captures a graph: the
 *                capture site of the node the call becomes
 *   bit  60      (NVTX's Ex forms) the string is the message of the
 *                nvtxEventAttributes_t bit 30 copied into ext[]: its
 *                messageType at offset 32 (the low half of ext[4]) says
 *                ASCII or wide, its message at offset 40 (ext[5]) points to
 *                it (nvToolsExt.h, struct nvtxEventAttributes_v2)
 *   bit  61      the string (bits 33..35) is of wchar_t (NVTX's W forms):
 *                its bytes are copied, user space reads them up to a NUL
 *                character
 */
#define COOKIE_API(c) ((c) & 0xffff)
#define COOKIE_NSTACK(c) (((c) >> 24) & 0x3)
#define COOKIE_RET (1ULL << 26)
#define COOKIE_OUT(c) (((c) >> 27) & 0x7)
#define COOKIE_DEREF (1ULL << 30)
#define COOKIE_STACK (1ULL << 31)
#define COOKIE_STOP (1ULL << 32)
#define COOKIE_STRARG(c) (((c) >> 33) & 0x7)
#define COOKIE_PAIR (1ULL << 36)
#define COOKIE_TAKE_STUB (1ULL << 37)
#define COOKIE_SHARED (1ULL << 38)
#define COOKIE_SHADOWED (1ULL << 39)
#define COOKIE_RUNTIME (1ULL << 40)
#define COOKIE_CGROUP (1ULL << 41)
#define COOKIE_AGG (1ULL << 42)
#define COOKIE_AGG_STREAM(c) (((c) >> 43) & 0xf)
#define COOKIE_AGG_TIME (1ULL << 47)
#define COOKIE_TREE (1ULL << 48)
/* COOKIE_ARM64 is for user space: the programs need not look. */
#define COOKIE_ARM64 (1ULL << 49)
#define COOKIE_DEREF_ARG(c) (((c) >> 50) & 0x7)
#define COOKIE_KARGS(c) (((c) >> 53) & 0xf)
#define COOKIE_CAPTURE_BEGIN (1ULL << 57)
#define COOKIE_CAPTURE_END (1ULL << 58)
#define COOKIE_CAPTURE_STACK (1ULL << 59)
#define COOKIE_STR_ATTR (1ULL << 60)
#define COOKIE_STR_WIDE (1ULL << 61)
/* A record that carries a string: a kernel name, an NVTX message. */
#define COOKIE_STRING(c) ((COOKIE_STRARG(c) && !((c) & COOKIE_PAIR)) || ((c) & COOKIE_STR_ATTR))

/* NVTX's messageType values (nvToolsExt.h, nvtxMessageType_t); a
 * registered message (3) is a handle only an NVTX tool can name. */
#define NVTX_MESSAGE_ASCII 1
#define NVTX_MESSAGE_UNICODE 2

/* Argument slots: the integer argument registers, then the stack words
 * past them (x86-64: rdi rsi rdx rcx r8 r9 + up to 3 words; arm64: x0..x7
 * + 1 word). */
#define NARGS 9
#define NEXT 6    /* 48 bytes copied from behind an argument (COOKIE_DEREF) */
#define MAX_STACK 32
#define MAX_PY 24         /* Python frames kept, innermost first */
#define STACK_COPY 8192   /* bytes of user stack copied for .eh_frame unwinding */
#define STR_COPY 4096     /* bytes of a string copied (kernel names, NVTX messages) */

/* event.flags: what could not be read (each is also counted in stats). */
#define EV_STACKARG_FAULT 0x1
#define EV_DEREF_FAULT 0x2
#define EV_OUT_FAULT 0x4
#define EV_HAS_RET 0x8
#define EV_PY_TRUNCATED 0x10  /* more Python frames than MAX_PY */
#define EV_KARGS_FAULT 0x20   /* kernelParams or the parameter values could not be read */

struct event {
	__u64 start_ns;  /* CLOCK_MONOTONIC at entry */
	__u64 end_ns;    /* CLOCK_MONOTONIC at return; 0 for entry-only probes */
	__u64 cookie;
	__u32 pid;       /* tgid, host namespace */
	__u32 tid;
	__s64 ret;       /* return value when EV_HAS_RET */
	__u64 out;       /* *(u64 *)out_arg read at return */
	__u64 args[NARGS];
	__u64 ext[NEXT];
	__u64 caller;    /* (driver launches) the return address: which library called */
	__u32 cpu;
	__u32 flags;
	__u32 nstack;    /* frames in stack[] (only when the cookie asks) */
	__u32 _pad;
	/* Everything from here on is present only when the cookie asks for a
	 * stack (COOKIE_STACK) or a string (COOKIE_STRING): a record with a
	 * string ends STR_COPY bytes into copy[], other records end at
	 * stack[]. */
	__u64 stack[MAX_STACK];   /* frame-pointer walk (bpf_get_stack) */
	__u64 rip, rsp, rbp;      /* user registers where the stack was taken (arm64: pc, sp, x29) */
	__u32 npy;                /* Python frames in py[] (x86-64 only so far) */
	__u32 copy_len;           /* bytes of copy[] that hold the user stack from rsp (x86-64 only:
	                           * user space unwinds with .eh_frame on x86-64 only), or the string */
	__u64 py[MAX_PY * 2];     /* (code object, instruction pointer or lasti) pairs, innermost first */
	__u8 copy[STACK_COPY];    /* the user stack from rsp upwards */
};

/*
 * The parameter values of a launch (COOKIE_KARGS), behind its record: a
 * launch record that carries them ends with this struct, whatever its size
 * (right after the header, or after copy[] in a record with a stack).
 *
 * kernelParams is an array of pointers, one per kernel parameter, to its
 * value. How many parameters there are and how big each is only the driver
 * knows (cuFuncGetParamInfo, callable only in the process), and the values
 * lie wherever the launching code keeps them: a generated host stub points
 * at the copies its caller made, which the compiler places among its other
 * locals, at times hundreds of bytes apart (PyTorch's elementwise kernels
 * on the H200). So each of the leading entries (up to the first that does
 * not point at readable user memory, KARG_PARAMS at most) is followed on its
 * own: its value is copied from where it points up to the nearest entry
 * above it, at most KARG_ONE bytes, less the KARG_FLOOR bytes promised to
 * each entry after it, the values one after the other in bytes[] while they
 * start within its first KARG_START. Past the last parameter the array holds
 * whatever the stack held; user space takes every aligned word of the
 * values inside a live device allocation for a pointer the kernel may read
 * or write.
 */
#define KARG_PARAMS 16
#define KARG_ONE 1024
#define KARG_START 1024 /* a power of two */
#define KARG_FLOOR 64   /* promised to each parameter: KARG_PARAMS * KARG_FLOOR <= KARG_START */

struct kernel_args {
	__u64 params;                  /* kernelParams as passed (0: none) */
	__u64 entry[KARG_PARAMS];      /* its first entries as read (0: past its readable end) */
	__u16 off[KARG_PARAMS];        /* where entry i's value starts in bytes[] */
	__u16 len[KARG_PARAMS];        /* bytes of entry i's value copied (0: none) */
	__u8 bytes[KARG_START + KARG_ONE];
	__u32 used;                    /* bytes of bytes[] filled */
	__u32 size;                    /* bytes of this struct as written (a recording keeps bytes[] up to used) */
};

/*
 * A copy of one Python code object and what naming a frame of it needs
 * (file name, function name, line table), taken in BPF the first time a
 * stack record refers to it, so that its frames are named exactly even when
 * the code object, or the whole process, is gone a moment later (a script's
 * module level, code compiled and freed). Shares the first 32 bytes with
 * struct event: cookie carries API_PY_CODE. addr[i] and len[i] say where
 * each copied object lives in the target and how many bytes of it were
 * read (0: not read); user space reads the objects from the copies as it
 * would from the live process.
 */
#define API_PY_CODE 0xfff1

/* Records of the followed tree (not CUDA calls): a process started by one
 * of the tree (args[0]: its parent's tgid; args[1..2]: its comm), and a
 * program executed by one (args[0..1]: the new comm; cookie bit 32 when
 * the process is stopped there until user space hooks what it maps). */
#define API_PROCESS_FORK 0xfff2
#define API_PROCESS_EXEC 0xfff3
#define PY_CODE_HEAD 256   /* bytes of the code object */
#define PY_STR_COPY 512    /* bytes of a str object (header and characters) */
#define PY_TABLE_COPY 8192 /* bytes of the line table's bytes object */

struct py_code {
	__u64 start_ns;
	__u64 end_ns;   /* 0 */
	__u64 cookie;   /* API_PY_CODE */
	__u32 pid;
	__u32 tid;
	__u64 code;     /* address of the code object */
	__u64 addr[3];  /* filename, name (qualname from 3.11), line table */
	__u32 len[3];
	__u32 head_len; /* bytes of head[] */
	__u8 head[PY_CODE_HEAD];
	__u8 filename[PY_STR_COPY];
	__u8 name[PY_STR_COPY];
	__u8 table[PY_TABLE_COPY];
};

/* Per-CPU counters; index with enum stat. */
enum stat {
	STAT_SUBMITTED = 0,  /* events handed to the ring buffer */
	STAT_RINGBUF_FULL,   /* bpf_ringbuf_reserve failed: event lost */
	STAT_INFLIGHT_FULL,  /* no room to save an entry: its event is lost */
	STAT_ORPHAN_RETURN,  /* return without a saved entry: event lost */
	STAT_READ_FAULT,     /* a user-memory read failed: event kept, field zero */
	STAT_NESTED,         /* a launch seen by both layers, counted once (not a loss) */
	STAT_ENTRY_REPLACED, /* an entry saved over one still waiting: a nested call of the same API */
	STAT_PY_CODE_LOST,   /* no room for a code object's copy: its frames are named from the live process */
	STAT_AGG_FULL,       /* no room in the launch counters: the launch went to the ring buffer instead */
	STAT_AGG_TIME_LOST,  /* no room for a launch's start or its histogram bucket: counted, its time not kept */
	STAT_TREE_FULL,      /* a process of the followed tree found no room in `tree`: it is not traced */
	STAT_MAX,
};

#endif
