//go:build ignore

/*
 * cudatap's uprobe programs. One entry and one return program serve every
 * hooked CUDA symbol: the attach cookie (see cudatap.h) says which API it is
 * and what to copy, so adding an API never means adding a program.
 *
 * Hot calls (launches, enqueues) are entry-only: one trap, one ring-buffer
 * record. Calls whose duration or result matters (synchronizations, copies
 * that may block, allocations, creations whose handle comes back through an
 * out pointer) save their entry per thread and emit one record at return.
 */
#include <linux/types.h>
#include <linux/bpf.h>
#include <linux/ptrace.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <stdbool.h>

#include "cudatap.h"
#include "python.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/*
 * Where a call's arguments are at a function-entry uprobe. A record's
 * args[] are argument slots: the integer argument registers in order, then
 * the stack words past them. For every hooked call slot i is its i-th
 * argument eightbyte on both ABIs (a dim3 by value takes two: x|y, then
 * z), so user space decodes the same slots; the one exception is a struct
 * larger than 16 bytes by value (ncclCommInitRank's ncclUniqueId), which
 * x86-64 passes on the stack, taking no register, and arm64 as a pointer to
 * a copy (tracer/event, docs/arm64.md).
 *
 * x86-64 (System V): rdi rsi rdx rcx r8 r9; at entry rsp points at the
 * return address and stack word k (1-based) is at rsp + 8k.
 * arm64 (AAPCS64): x0..x7; stack word k is at sp + 8(k-1), and the return
 * address is in the link register x30.
 */
#if defined(__TARGET_ARCH_x86)
#define STACK_WORD(ctx, k) (PT_REGS_SP(ctx) + 8 * (k))
#elif defined(__TARGET_ARCH_arm64)
#define STACK_WORD(ctx, k) (PT_REGS_SP(ctx) + 8 * ((k) - 1))
#define ARG_REGS(ctx) (((const struct user_pt_regs *)(ctx))->regs)
#else
#error "cudatap's programs read arguments as x86-64 or arm64 pass them: compile with bpf2go -target amd64 or arm64"
#endif

/* Size of the ring buffer; the loader overrides max_entries. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 24);
} events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, STAT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} stats SEC(".maps");

struct inflight_key {
	__u32 tid;
	__u32 api;
};

struct inflight {
	__u64 start_ns;
	__u64 args[NARGS];
	__u64 ext[NEXT];
	__u32 flags;
	__u32 _pad;
};

/* Entries waiting for their return, per thread and API. A plain hash, not
 * an LRU: on many-CPU machines the LRU evicted live entries long before it
 * was full (free nodes stranded on other CPUs' lists), losing ~2% of the
 * returns on a 16-CPU H200 host. Entries of threads that died inside a call
 * are pruned from user space (Tracer.PruneInflight); a full table is counted
 * (STAT_INFLIGHT_FULL). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, struct inflight_key);
	__type(value, struct inflight);
} inflight SEC(".maps");

/*
 * Runtime launches and the driver launches they make underneath. The driver
 * sees every launch (Triton, cuBLAS and torch.compile launch there directly),
 * so it is the layer that counts them. A runtime launch probe, where one is
 * attached, leaves its kernel stub (an ELF symbol: the kernel's name) for the
 * driver launch that follows on the same thread, and emits the launch itself
 * only until the process's driver launches are known to be hooked; the
 * driver probe then stays silent for that one launch. No launch is lost or
 * counted twice while libcuda gets hooked after libcudart.
 */
#define STUB_EMITTED (1ULL << 63)

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);   /* tid */
	__type(value, __u64); /* stub | STUB_EMITTED */
} pending_stub SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 8192);
	__type(key, __u32);  /* tgid */
	__type(value, __u8);
} driver_live SEC(".maps");

/* How many runtime launch attachments exist (user space keeps it). While
 * none does, driver launches skip the two lookups above. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} pairing SEC(".maps");

static __always_inline bool pairing_active(void)
{
	__u32 zero = 0;
	__u32 *n = bpf_map_lookup_elem(&pairing, &zero);
	return n && *n;
}

/*
 * The processes capturing a CUDA graph (stream captures begun and not yet
 * ended, by count; COOKIE_CAPTURE_BEGIN/END), and how many captures are
 * open in all. While one is, the calls of its process that enqueue work
 * carry a stack (COOKIE_CAPTURE_STACK): the capture site of the node each
 * becomes, whatever the stacks asked for launches. A program captures once,
 * at warm-up; a replay costs nothing more, and a launch outside captures
 * one array lookup. A count left open (a process gone mid-capture, an
 * entry evicted) costs the other processes' launches a hash lookup, no
 * stack.
 */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);   /* tgid */
	__type(value, __u32); /* captures open */
} capturing SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} captures_open SEC(".maps");

static __always_inline void capture_mark(__u32 tgid, bool begin)
{
	__u32 zero = 0;
	__u32 *open = bpf_map_lookup_elem(&captures_open, &zero);
	__u32 *n = bpf_map_lookup_elem(&capturing, &tgid);
	if (begin) {
		if (n) {
			__sync_fetch_and_add(n, 1);
		} else {
			__u32 one = 1;
			if (bpf_map_update_elem(&capturing, &tgid, &one, BPF_NOEXIST) < 0)
				return;
		}
		if (open)
			__sync_fetch_and_add(open, 1);
		return;
	}
	if (!n || *n == 0)
		return;
	/* An add, its result unused: the atomic -mcpu=v1 has (no fetch). */
	__sync_fetch_and_add(n, (__u32)-1);
	if (open && *open)
		__sync_fetch_and_add(open, (__u32)-1);
}

/* cookie, with a stack asked for if it asks for one while its process
 * captures a graph and it does. */
static __always_inline __u64 capture_stack(__u64 cookie, __u32 tgid)
{
	if (!(cookie & COOKIE_CAPTURE_STACK) || (cookie & COOKIE_STACK))
		return cookie;
	__u32 zero = 0;
	__u32 *open = bpf_map_lookup_elem(&captures_open, &zero);
	if (!open || !*open)
		return cookie;
	__u32 *n = bpf_map_lookup_elem(&capturing, &tgid);
	return n && *n ? cookie | COOKIE_STACK : cookie;
}

/*
 * Shared probes (one link per library file, for every process: --all and
 * --container) cost nothing per process: a process that maps a library
 * already hooked is traced from its first call, and one that exits leaves
 * nothing behind to detach. Which of its calls count is decided here, per
 * process, with the rule per-process attachments follow (tracer/policy.go):
 * in a process with a runtime, the driver counts only launches and kernel
 * loads. A process is known to have a runtime from its first runtime call
 * (or from user space, which reads its mappings); the driver calls a
 * runtime makes underneath come after that call's entry.
 */
#define PROC_HAS_RUNTIME 1

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, __u32);  /* tgid */
	__type(value, __u8); /* PROC_* */
} proc_flags SEC(".maps");

/* --container: the cgroups (v2 ids) whose processes are traced. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u64);
	__type(value, __u8);
} cgroups SEC(".maps");

/* The agent's per-process sampling: the processes that sit the window (or
 * interval) out: none of their calls count; user space weighs the windows
 * they are traced in by 1/p. A map of its own, written by user space only:
 * proc_flags is read, changed and written back by both sides, and a bit
 * set in between would be lost. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u32);  /* tgid */
	__type(value, __u8);
} sampled_out SEC(".maps");

/* Set by user space while some process is sampled out: only then does a
 * launch probe look its process up (a launch is the hot path; an array
 * lookup is a few instructions once the JIT inlines it). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} sampling SEC(".maps");

static __always_inline bool sampling_active(void)
{
	__u32 zero = 0;
	__u32 *on = bpf_map_lookup_elem(&sampling, &zero);
	return on && *on;
}

/*
 * record follows the processes its command starts (and -p --follow those
 * a running process starts): the tree, every process descended from the
 * roots user space puts here, kept up to date in the kernel (a process
 * joins at fork, before it runs; it leaves when its last thread exits), so
 * that a worker is traced from its first instruction, however short it
 * lives. A bitmap by tgid (the loader sizes it to the kernel's pid_max): a
 * probe's hit tests its bit with an array lookup the JIT inlines, where a
 * hash lookup cost a tenth of a traced launch.
 */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1 << 16); /* pid_max / 64 */
	__type(key, __u32);           /* tgid / 64 */
	__type(value, __u64);         /* bit tgid % 64 */
} tree SEC(".maps");

/* FOLLOW_ON: the fork and exec tracepoints look at the tree;
 * FOLLOW_HOLD_EXEC: a process of the tree that executes a program is
 * stopped there until user space has hooked what it maps. */
#define FOLLOW_ON 1
#define FOLLOW_HOLD_EXEC 2

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} follow SEC(".maps");

static __always_inline __u32 follow_flags(void)
{
	__u32 zero = 0;
	__u32 *f = bpf_map_lookup_elem(&follow, &zero);
	return f ? *f : 0;
}

static __always_inline bool in_tree(__u32 tgid)
{
	__u32 word = tgid >> 6;
	__u64 *w = bpf_map_lookup_elem(&tree, &word);
	return w && (*w & (1ULL << (tgid & 63)));
}

/* Adds tgid to the tree (false: beyond the table: pid_max grew). */
static __always_inline bool tree_add(__u32 tgid)
{
	__u32 word = tgid >> 6;
	__u64 *w = bpf_map_lookup_elem(&tree, &word);
	if (!w)
		return false;
	__sync_fetch_and_or(w, 1ULL << (tgid & 63));
	return true;
}

static __always_inline void tree_remove(__u32 tgid)
{
	__u32 word = tgid >> 6;
	__u64 *w = bpf_map_lookup_elem(&tree, &word);
	if (w)
		__sync_fetch_and_and(w, ~(1ULL << (tgid & 63)));
}

/* Whether a shared probe's hit counts for the calling process. */
static __always_inline bool admit(__u64 cookie, __u32 tgid)
{
	if ((cookie & COOKIE_TREE) && !in_tree(tgid))
		return false;
	if (cookie & COOKIE_CGROUP) {
		__u64 cg = bpf_get_current_cgroup_id();
		if (!bpf_map_lookup_elem(&cgroups, &cg))
			return false;
	}
	if (sampling_active() && bpf_map_lookup_elem(&sampled_out, &tgid))
		return false;
	if (!(cookie & (COOKIE_RUNTIME | COOKIE_SHADOWED)))
		return true;
	__u8 *f = bpf_map_lookup_elem(&proc_flags, &tgid);
	__u8 v = f ? *f : 0;
	if (cookie & COOKIE_RUNTIME) {
		if (!(v & PROC_HAS_RUNTIME)) {
			v |= PROC_HAS_RUNTIME;
			bpf_map_update_elem(&proc_flags, &tgid, &v, BPF_ANY);
		}
	} else if ((cookie & COOKIE_SHADOWED) && (v & PROC_HAS_RUNTIME)) {
		return false;
	}
	return true;
}

/* Scratch space for building an inflight entry (too big for the BPF stack). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct inflight);
} scratch SEC(".maps");

/*
 * Waking the reader for every record costs more than the record itself (an
 * irq_work, a self-interrupt: some 9 us of the traced thread's system time
 * in a VM, and a context switch). Records are submitted without a wakeup;
 * the reader polls on a short timer, and the record that takes the unread
 * backlog past a multiple of wakeup_bytes forces one, so that a ring
 * filling up is read at once. Once per wakeup_bytes, not for every record
 * past it: a reader that far behind is awake and reading, and a wakeup per
 * record cost a flood of 2 M launches 3 s of system time. A crossing two
 * CPUs' records hide from each other is caught at the next multiple, or by
 * the timer. Set by the loader.
 */
volatile const __u64 wakeup_bytes = 1 << 20;

static __always_inline __u64 wakeup_flags(__u32 size)
{
	/* The record's span in the ring: its header, then its data 8-byte aligned. */
	__u64 span = BPF_RINGBUF_HDR_SZ + ((size + 7) & ~7);
	__u64 avail = bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA);
	if (avail >= span && avail / wakeup_bytes != (avail - span) / wakeup_bytes)
		return BPF_RB_FORCE_WAKEUP;
	return BPF_RB_NO_WAKEUP;
}

/* Returns without their entry, per API id (low 8 bits): which calls lose
 * their entry tells why. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 256);
	__type(key, __u32);
	__type(value, __u64);
} orphans SEC(".maps");

static __always_inline void count(__u32 which)
{
	__u64 *v = bpf_map_lookup_elem(&stats, &which);
	if (v)
		*v += 1;
}

/*
 * Aggregate mode (the agent): a launch probe with COOKIE_AGG adds one to
 * its process's counter for its API and stream here, per CPU, and writes no
 * ring-buffer record: a launch costs a map lookup and one 8-byte read of
 * its stream on top of the trap. User space sums the CPUs' counters. With
 * no room for a new key, the launch goes to the ring buffer as usual
 * (counted): never lost.
 */
struct agg_key {
	__u32 tgid;
	__u32 api;
	__u64 stream; /* the handle; AGG_STREAM_UNKNOWN when unreadable */
};

#define AGG_STREAM_UNKNOWN (~0ULL)

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct agg_key);
	__type(value, __u64);
} launch_counts SEC(".maps");

static __always_inline __u64 launch_stream(struct pt_regs *ctx, __u64 cookie)
{
	__u64 where = COOKIE_AGG_STREAM(cookie), stream = 0;
	if (!where)
		return AGG_STREAM_UNKNOWN;
#if defined(__TARGET_ARCH_arm64)
	if (where >= 4 && where < 8) {
		/* A register (cudaLaunchKernel's stream is x7). Read all four:
		 * the verifier rejects a computed offset into ctx. */
		__u64 x4 = ARG_REGS(ctx)[4], x5 = ARG_REGS(ctx)[5], x6 = ARG_REGS(ctx)[6], x7 = ARG_REGS(ctx)[7];
		asm volatile("" : "+r"(x4), "+r"(x5), "+r"(x6), "+r"(x7));
		return where == 4 ? x4 : where == 5 ? x5 : where == 6 ? x6 : x7;
	}
#endif
	void *at = where < 8 ? (void *)(STACK_WORD(ctx, where)) : (void *)(PT_REGS_PARM1(ctx) + 8 * (where - 8));
	if (bpf_probe_read_user(&stream, sizeof stream, at) < 0)
		return AGG_STREAM_UNKNOWN;
	return stream;
}

/*
 * Launch times (COOKIE_AGG_TIME): the host time of each counted launch, in
 * a log2 histogram per process and API (bucket b: [2^b, 2^(b+1)) ns) with
 * the nanoseconds summed per bucket. The entry keeps its time per thread;
 * a return probe on the same symbol adds the call. A second trap per
 * launch (the return), so the agent asks for it only with --launch-times.
 * Entries of threads that died inside a launch are pruned from user space
 * (Tracer.PruneInflight), like `inflight`'s, and for the same reason this
 * is a plain hash, not an LRU.
 */
struct launch_start {
	__u64 start_ns; /* 0: none waiting */
	__u32 api;
	__u32 _pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32); /* tid */
	__type(value, struct launch_start);
} launch_started SEC(".maps");

struct launch_time_key {
	__u32 tgid;
	__u16 api;
	__u16 bucket; /* floor(log2(ns)) */
};

struct launch_time {
	__u64 count;
	__u64 ns;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct launch_time_key);
	__type(value, struct launch_time);
} launch_times SEC(".maps");

static __always_inline void launch_began(__u64 pid_tgid, __u32 api, __u64 now)
{
	__u32 tid = (__u32)pid_tgid;
	struct launch_start *s = bpf_map_lookup_elem(&launch_started, &tid);
	if (s) {
		s->start_ns = now;
		s->api = api;
		return;
	}
	struct launch_start v = { .start_ns = now, .api = api };
	if (bpf_map_update_elem(&launch_started, &tid, &v, BPF_ANY) < 0)
		count(STAT_AGG_TIME_LOST);
}

static __always_inline __u32 log2_u64(__u64 v)
{
	__u32 r = 0;
	if (v >> 32) { v >>= 32; r += 32; }
	if (v >> 16) { v >>= 16; r += 16; }
	if (v >> 8) { v >>= 8; r += 8; }
	if (v >> 4) { v >>= 4; r += 4; }
	if (v >> 2) { v >>= 2; r += 2; }
	if (v >> 1) r += 1;
	return r;
}

static __always_inline int launch_ended(__u64 cookie, __u64 pid_tgid, __u64 now)
{
	__u32 tid = (__u32)pid_tgid;
	struct launch_start *s = bpf_map_lookup_elem(&launch_started, &tid);
	/* None waiting: the entry went to the ring buffer (counters full), or
	 * came before the probes (a launch cudatap attached in the middle of). */
	if (!s || !s->start_ns || s->api != COOKIE_API(cookie))
		return 0;
	__u64 d = now - s->start_ns;
	s->start_ns = 0;
	struct launch_time_key k = { .tgid = pid_tgid >> 32, .api = COOKIE_API(cookie), .bucket = log2_u64(d) };
	struct launch_time *t = bpf_map_lookup_elem(&launch_times, &k);
	if (!t) {
		struct launch_time zero = {};
		bpf_map_update_elem(&launch_times, &k, &zero, BPF_NOEXIST);
		t = bpf_map_lookup_elem(&launch_times, &k);
		if (!t) {
			count(STAT_AGG_TIME_LOST);
			return 0;
		}
	}
	t->count += 1;
	t->ns += d;
	return 0;
}

static __always_inline bool aggregate(struct pt_regs *ctx, __u64 cookie, __u64 pid_tgid)
{
	struct agg_key k = { .tgid = pid_tgid >> 32, .api = COOKIE_API(cookie), .stream = launch_stream(ctx, cookie) };
	__u64 *n = bpf_map_lookup_elem(&launch_counts, &k);
	if (n) {
		*n += 1;
		return true;
	}
	__u64 one = 1;
	if (bpf_map_update_elem(&launch_counts, &k, &one, BPF_NOEXIST) == 0)
		return true;
	n = bpf_map_lookup_elem(&launch_counts, &k); /* another CPU made it */
	if (n) {
		*n += 1;
		return true;
	}
	count(STAT_AGG_FULL);
	return false;
}

#include "pycode.h"

/* Copy the argument slots per the cookie (the registers, then the stack
 * words it asks for); for a driver launch also the return address
 * (*caller): whether the runtime called it tells which API the program
 * used. */
#if defined(__TARGET_ARCH_x86)
static __always_inline __u32 read_slots(struct pt_regs *ctx, __u64 cookie, __u64 *args, __u64 *caller)
{
	__u32 flags = 0;
	args[0] = PT_REGS_PARM1(ctx);
	args[1] = PT_REGS_PARM2(ctx);
	args[2] = PT_REGS_PARM3(ctx);
	args[3] = PT_REGS_PARM4(ctx);
	args[4] = PT_REGS_PARM5(ctx);
	args[5] = ctx->r9;

	__u32 nstack = COOKIE_NSTACK(cookie);
	/* The return address sits below the stack words: one read takes
	 * both where stack words are copied anyway. */
	__u64 sp = PT_REGS_SP(ctx);
	if (nstack && caller && (cookie & COOKIE_TAKE_STUB)) {
		__u64 words[4] = {};
		if (bpf_probe_read_user(words, 8 * 3 < 8 * nstack ? 32 : 8 + 8 * nstack, (void *)sp) < 0)
			flags |= EV_STACKARG_FAULT;
		*caller = words[0];
		args[6] = words[1];
		args[7] = words[2];
		args[8] = words[3];
	} else if (nstack) {
		if (bpf_probe_read_user(&args[6], 8 * 3 < 8 * nstack ? 24 : 8 * nstack, (void *)STACK_WORD(ctx, 1)) < 0)
			flags |= EV_STACKARG_FAULT;
	} else if (caller && (cookie & COOKIE_TAKE_STUB)) {
		bpf_probe_read_user(caller, 8, (void *)sp);
	}
	return flags;
}
#elif defined(__TARGET_ARCH_arm64)
static __always_inline __u32 read_slots(struct pt_regs *ctx, __u64 cookie, __u64 *args, __u64 *caller)
{
	__u32 flags = 0;
	const __u64 *x = ARG_REGS(ctx);
	args[0] = x[0];
	args[1] = x[1];
	args[2] = x[2];
	args[3] = x[3];
	args[4] = x[4];
	args[5] = x[5];
	args[6] = x[6];
	args[7] = x[7];
	/* One stack word fits behind the eight registers: cuLaunchKernel's
	 * hStream, its ninth argument. */
	if (COOKIE_NSTACK(cookie)) {
		if (bpf_probe_read_user(&args[8], 8, (void *)STACK_WORD(ctx, 1)) < 0)
			flags |= EV_STACKARG_FAULT;
	}
	if (caller && (cookie & COOKIE_TAKE_STUB))
		*caller = PT_REGS_RET(ctx); /* the link register, x30 */
	return flags;
}
#endif

/* The slots, and the 48 bytes behind an argument (a launch config). */
static __always_inline __u32 read_args(struct pt_regs *ctx, __u64 cookie, __u64 *args, __u64 *ext, __u64 *caller)
{
	__u32 flags = read_slots(ctx, cookie, args, caller);
	if (cookie & COOKIE_DEREF) {
		if (bpf_probe_read_user(ext, 8 * NEXT, (void *)args[COOKIE_DEREF_ARG(cookie)]) < 0)
			flags |= EV_DEREF_FAULT;
	}
	if (flags)
		count(STAT_READ_FAULT);
	return flags;
}

/* The end of user space on x86-64 and arm64 (48-bit addresses). */
#define USER_TOP (1ULL << 48)

/*
 * One parameter value of at most want bytes, from at, into bytes[used]:
 * the bytes copied. A value that ends past its mapping (a struct at the top
 * of a stack) gets its first 64 bytes, or its first word.
 */
static __always_inline __u32 read_value(__u8 *bytes, __u32 used, __u64 at, __u64 want)
{
	if (used >= KARG_START)
		return 0;
	/* Masked after an opaque step (KARG_START is a power of two): clang
	 * drops a check it knows redundant, and the verifier loses the bound
	 * on the way. */
	asm volatile("" : "+r"(used));
	__u8 *dst = bytes + (used & (KARG_START - 1));
	__u32 n = want < KARG_ONE ? (__u32)want : KARG_ONE;
	if (n == 0)
		return 0;
	if (bpf_probe_read_user(dst, n, (void *)at) == 0)
		return n;
	if (n > 64 && bpf_probe_read_user(dst, 64, (void *)at) == 0)
		return 64;
	if (n > 8 && bpf_probe_read_user(dst, 8, (void *)at) == 0)
		return 8;
	return 0;
}

/*
 * A launch's parameter values (COOKIE_KARGS; struct kernel_args says what
 * is taken and why), into k: the entries of kernelParams, then each one's
 * value. Returns EV_KARGS_FAULT when kernelParams could not be read.
 */
static __always_inline __u32 read_kernel_args(struct pt_regs *ctx, __u64 cookie, const __u64 *args, struct kernel_args *k)
{
	__u32 where = COOKIE_KARGS(cookie);
	__u64 params = 0;
	k->params = 0;
	k->used = 0;
	k->size = sizeof(*k);
	__builtin_memset(k->entry, 0, sizeof(k->entry));
	__builtin_memset(k->off, 0, sizeof(k->off));
	__builtin_memset(k->len, 0, sizeof(k->len));
	if (where >= 1 && where <= NARGS)
		params = args[where - 1];
	else if (where > NARGS && bpf_probe_read_user(&params, sizeof params, (void *)STACK_WORD(ctx, where - NARGS)) < 0)
		return EV_KARGS_FAULT;
	if (!params)
		return 0; /* no kernelParams: the parameters came in `extra`, or there are none */
	k->params = params;
	if (bpf_probe_read_user(k->entry, sizeof(k->entry), (void *)params) < 0) {
		/* An array that ends within KARG_PARAMS entries of the end of its
		 * mapping: the first entry alone. */
		__builtin_memset(k->entry, 0, sizeof(k->entry));
		if (bpf_probe_read_user(k->entry, 8, (void *)params) < 0)
			return EV_KARGS_FAULT;
	}
	/* The parameters: the leading entries that point at readable user
	 * memory. Past the last one the array holds what the stack held:
	 * small numbers (grid sizes), unmapped values, code and heap
	 * addresses, the stack. */
	int n = 0;
	for (; n < KARG_PARAMS; n++) {
		__u64 at = k->entry[n];
		__u8 probe;
		if (at < 4096 || at >= USER_TOP || bpf_probe_read_user(&probe, 1, (void *)at) < 0)
			break;
	}
	/* Each value runs up to the nearest entry above it, KARG_ONE bytes at
	 * most (len[i]), and every value after it is promised its first
	 * KARG_FLOOR bytes (off[i], the sum of those promises): the leading
	 * entries are the parameters, so a value whose length is a guess (a
	 * scalar far below the next one) or a word of the stack past the last
	 * parameter never crowds a parameter out. Both go through the record,
	 * read back as values the verifier does not know: one state on, not
	 * one per path taken. */
	__u32 promised = 0;
	for (int r = 0; r < KARG_PARAMS; r++) {
		int i = KARG_PARAMS - 1 - r;
		if (i >= n)
			continue;
		__u64 at = k->entry[i];
		__u64 want = KARG_ONE;
		for (int j = 0; j < n && j < KARG_PARAMS; j++) {
			__u64 e = k->entry[j];
			if (e > at && e - at < want)
				want = e - at;
		}
		*(volatile __u16 *)&k->len[i] = (__u16)want;
		*(volatile __u16 *)&k->off[i] = (__u16)promised;
		/* the last one is promised a start within KARG_START */
		promised += i == n - 1 ? 1 : want < KARG_FLOOR ? (__u32)want : KARG_FLOOR;
	}
	/* In order: each value gets what it wants, less what the values after
	 * it were promised; the last one starts within KARG_START and gets
	 * what it wants. An entry whose value cannot be read after all is
	 * no parameter: neither is any after it. */
	__u32 used = 0;
	for (int i = 0; i < n && i < KARG_PARAMS; i++) {
		volatile __u16 *len = &k->len[i];
		volatile __u16 *off = &k->off[i];
		__u32 want = *len, later = *off;
		if (later && used + later <= KARG_START && want > KARG_START - used - later)
			want = KARG_START - used - later;
		*off = (__u16)used;
		*len = (__u16)read_value(k->bytes, used, k->entry[i], want);
		if (!*len) {
			n = i;
			break;
		}
		used += *len;
	}
	for (int i = 0; i < KARG_PARAMS; i++)
		if (i >= n) {
			k->len[i] = 0;
			k->off[i] = 0;
		}
	k->used = used;
	return 0;
}

/*
 * Records come in three sizes: small ones end at stack[]; a string (a
 * kernel name, an NVTX message) ends STR_COPY bytes into copy[]; a stack
 * is full size. A launch's parameter values (kargs) follow a small or full
 * one. Each size gets its own inlined copy of the emit code, with `body`
 * and `kargs` compile-time constants: the verifier then knows, on every
 * path that writes the big fields, how big the reservation is.
 */
enum body { BODY_SMALL, BODY_STRING, BODY_FULL };

static __always_inline __u32 body_size(const enum body body)
{
	switch (body) {
	case BODY_STRING:
		return __builtin_offsetof(struct event, copy) + STR_COPY;
	case BODY_FULL:
		return sizeof(struct event);
	default:
		return __builtin_offsetof(struct event, stack);
	}
}

/* A string wins over a stack: both would go into copy[]. */
#define COOKIE_BODY(c) (COOKIE_STRING(c) ? BODY_STRING : ((c) & COOKIE_STACK) ? BODY_FULL : BODY_SMALL)

/* What reserve asks of the ring for a record. */
static __always_inline __u32 record_size(const enum body body, const bool kargs)
{
	return body_size(body) + (kargs ? sizeof(struct kernel_args) : 0);
}

static __always_inline struct event *reserve(const enum body body, const bool kargs)
{
	struct event *e = bpf_ringbuf_reserve(&events, record_size(body, kargs), 0);
	if (!e)
		count(STAT_RINGBUF_FULL);
	return e;
}

static __always_inline void fill_common(struct event *e, __u64 cookie, __u64 pid_tgid)
{
	e->cookie = cookie;
	e->pid = pid_tgid >> 32;
	e->tid = (__u32)pid_tgid;
	e->caller = 0;
	e->cpu = bpf_get_smp_processor_id();
	e->nstack = 0;
	e->_pad = 0;
}

/*
 * A string: the C string argument COOKIE_STRARG names (a kernel name passed
 * to a load-time call, an NVTX message), or the message of the
 * nvtxEventAttributes_t in ext[] (COOKIE_STR_ATTR). A wide one (wchar_t:
 * NVTX's W forms, an Ex message of type UNICODE) is copied as bytes, as far
 * as its memory reads, STR_COPY bytes at most: user space stops at its NUL.
 */
static __always_inline void fill_string(struct event *e, __u64 cookie)
{
	e->rip = e->rsp = e->rbp = 0;
	e->npy = 0;
	e->copy_len = 0;
	bool wide = cookie & COOKIE_STR_WIDE;
	__u64 ptr = e->args[(COOKIE_STRARG(cookie) - 1) & 7];
	if (cookie & COOKIE_STR_ATTR) {
		__u32 type = (__u32)e->ext[4];
		if (type != NVTX_MESSAGE_ASCII && type != NVTX_MESSAGE_UNICODE)
			return; /* no message, or a registered one */
		wide = type == NVTX_MESSAGE_UNICODE;
		ptr = e->ext[5];
	}
	if (!ptr)
		return;
	if (!wide) {
		long n = bpf_probe_read_user_str(e->copy, STR_COPY, (void *)ptr);
		e->copy_len = n > 0 ? n : 0;
		return;
	}
	/* A string near the end of its mapping: shorter reads. */
	if (bpf_probe_read_user(e->copy, STR_COPY, (void *)ptr) == 0)
		e->copy_len = STR_COPY;
	else if (bpf_probe_read_user(e->copy, STR_COPY / 4, (void *)ptr) == 0)
		e->copy_len = STR_COPY / 4;
	else if (bpf_probe_read_user(e->copy, STR_COPY / 16, (void *)ptr) == 0)
		e->copy_len = STR_COPY / 16;
	else if (bpf_probe_read_user(e->copy, STR_COPY / 64, (void *)ptr) == 0)
		e->copy_len = STR_COPY / 64;
}

/*
 * A stack: a frame-pointer walk (enough for code built with frame
 * pointers), plus the registers and a copy of the top of the user stack so
 * that user space can unwind code built without them (CPython, PyTorch)
 * with .eh_frame.
 *
 * On arm64 a stack is the frame-pointer walk and the registers (pc, sp,
 * x29) only: user space unwinds with .eh_frame, and the Python walk finds
 * its thread (python.h), on x86-64 only so far (docs/arm64.md).
 */
static __always_inline void fill_stack(struct pt_regs *ctx, struct event *e)
{
	e->rip = e->rsp = e->rbp = 0;
	e->npy = 0;
	e->copy_len = 0;
	long n = bpf_get_stack(ctx, e->stack, sizeof(e->stack), BPF_F_USER_STACK);
	if (n > 0)
		e->nstack = n / 8;
	e->rip = PT_REGS_IP(ctx);
	e->rsp = PT_REGS_SP(ctx);
	e->rbp = PT_REGS_FP(ctx);
#if defined(__TARGET_ARCH_x86)
	/* The Python line that led here, when the process runs CPython, and
	 * a copy of each code object not seen before. */
	walk_python(e, e->pid, e->tid);
	py_snapshot_frames(e);
	/* A thread's stack may end less than STACK_COPY above rsp (the main
	 * thread near its top, a small thread stack): the read of the whole
	 * copy then faults. Halve until a read fits, down to 256 bytes, so the
	 * copy goes as far as the stack does (within a factor of two). */
	void *sp = (void *)e->rsp;
	if (bpf_probe_read_user(e->copy, STACK_COPY, sp) == 0)
		e->copy_len = STACK_COPY;
	else if (bpf_probe_read_user(e->copy, STACK_COPY / 2, sp) == 0)
		e->copy_len = STACK_COPY / 2;
	else if (bpf_probe_read_user(e->copy, STACK_COPY / 4, sp) == 0)
		e->copy_len = STACK_COPY / 4;
	else if (bpf_probe_read_user(e->copy, STACK_COPY / 8, sp) == 0)
		e->copy_len = STACK_COPY / 8;
	else if (bpf_probe_read_user(e->copy, STACK_COPY / 16, sp) == 0)
		e->copy_len = STACK_COPY / 16;
	else if (bpf_probe_read_user(e->copy, STACK_COPY / 32, sp) == 0)
		e->copy_len = STACK_COPY / 32;
#endif
}

/* The big fields a record of body's size carries. */
static __always_inline void fill_body(struct pt_regs *ctx, struct event *e, __u64 cookie, const enum body body)
{
	if (body == BODY_STRING)
		fill_string(e, cookie);
	else if (body == BODY_FULL)
		fill_stack(ctx, e);
}

/* Stacks are resolved (Python code objects read, frames symbolized) while
 * the process lives: hand them over at once. They are rare. */
static __always_inline __u64 submit_flags(const enum body body, const bool kargs)
{
	return body == BODY_FULL ? BPF_RB_FORCE_WAKEUP : wakeup_flags(record_size(body, kargs));
}

static __always_inline int emit_entry(struct pt_regs *ctx, __u64 cookie, __u64 pid_tgid, __u64 now, __u64 stub,
				      const enum body body, const bool kargs)
{
	struct event *e = reserve(body, kargs);
	if (!e)
		return 0;
	fill_common(e, cookie, pid_tgid);
	e->start_ns = now;
	e->end_ns = 0;
	e->ret = 0;
	e->out = stub;
	e->args[6] = e->args[7] = e->args[8] = 0;
	__builtin_memset(e->ext, 0, sizeof(e->ext));
	e->flags = read_args(ctx, cookie, e->args, e->ext, &e->caller);
	if (kargs) {
		__u32 fault = read_kernel_args(ctx, cookie, e->args, (struct kernel_args *)((void *)e + body_size(body)));
		if (fault) {
			e->flags |= fault;
			count(STAT_READ_FAULT);
		}
	}
	fill_body(ctx, e, cookie, body);
	bpf_ringbuf_submit(e, submit_flags(body, kargs));
	count(STAT_SUBMITTED);
	return 0;
}

static __always_inline int on_entry(struct pt_regs *ctx)
{
	__u64 cookie = bpf_get_attach_cookie(ctx);
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u64 now = bpf_ktime_get_ns();

	if ((cookie & COOKIE_SHARED) && !admit(cookie, pid_tgid >> 32))
		return 0;
	if (cookie & COOKIE_RET) {
		__u32 zero = 0;
		struct inflight *in = bpf_map_lookup_elem(&scratch, &zero);
		if (!in)
			return 0;
		in->start_ns = now;
		in->ext[0] = in->ext[1] = in->ext[2] = in->ext[3] = in->ext[4] = in->ext[5] = 0;
		in->args[6] = in->args[7] = in->args[8] = 0;
		in->flags = read_args(ctx, cookie, in->args, in->ext, NULL);
		struct inflight_key key = { .tid = (__u32)pid_tgid, .api = COOKIE_API(cookie) };
		if (bpf_map_lookup_elem(&inflight, &key))
			count(STAT_ENTRY_REPLACED);
		if (bpf_map_update_elem(&inflight, &key, in, BPF_ANY) < 0)
			count(STAT_INFLIGHT_FULL);
		return 0;
	}

	__u64 stub = 0;
	if (cookie & COOKIE_PAIR) {
		__u32 tid = (__u32)pid_tgid, tgid = pid_tgid >> 32;
		/* Read both: the verifier rejects a computed offset into ctx. */
		__u64 a1 = PT_REGS_PARM1(ctx), a2 = PT_REGS_PARM2(ctx);
		asm volatile("" : "+r"(a1), "+r"(a2));
		__u64 v = COOKIE_STRARG(cookie) == 2 ? a2 : a1;
		bool live = bpf_map_lookup_elem(&driver_live, &tgid) != NULL;
		if (!live)
			v |= STUB_EMITTED;
		bpf_map_update_elem(&pending_stub, &tid, &v, BPF_ANY);
		if (live)
			return 0;
	}
	if ((cookie & COOKIE_TAKE_STUB) && pairing_active()) {
		__u32 tid = (__u32)pid_tgid, tgid = pid_tgid >> 32;
		if (!bpf_map_lookup_elem(&driver_live, &tgid)) {
			__u8 one = 1;
			bpf_map_update_elem(&driver_live, &tgid, &one, BPF_ANY);
		}
		__u64 *p = bpf_map_lookup_elem(&pending_stub, &tid);
		if (p) {
			__u64 v = *p;
			bpf_map_delete_elem(&pending_stub, &tid);
			if (v & STUB_EMITTED) {
				count(STAT_NESTED);
				return 0;
			}
			stub = v;
		}
	}
	if ((cookie & COOKIE_AGG) && aggregate(ctx, cookie, pid_tgid)) {
		if (cookie & COOKIE_AGG_TIME)
			launch_began(pid_tgid, COOKIE_API(cookie), now);
		return 0;
	}
	cookie = capture_stack(cookie, pid_tgid >> 32);
	/* Launches carry no string: a launch record is small or full. */
	if (COOKIE_KARGS(cookie)) {
		if (cookie & COOKIE_STACK)
			return emit_entry(ctx, cookie, pid_tgid, now, stub, BODY_FULL, true);
		return emit_entry(ctx, cookie, pid_tgid, now, stub, BODY_SMALL, true);
	}
	switch (COOKIE_BODY(cookie)) {
	case BODY_STRING:
		return emit_entry(ctx, cookie, pid_tgid, now, stub, BODY_STRING, false);
	case BODY_FULL:
		return emit_entry(ctx, cookie, pid_tgid, now, stub, BODY_FULL, false);
	default:
		return emit_entry(ctx, cookie, pid_tgid, now, stub, BODY_SMALL, false);
	}
}

static __always_inline int emit_return(struct pt_regs *ctx, struct inflight *in, struct inflight_key *key,
				       __u64 cookie, __u64 pid_tgid, __u64 now, const enum body body)
{
	struct event *e = reserve(body, false);
	if (!e) {
		bpf_map_delete_elem(&inflight, key);
		return 0;
	}
	fill_common(e, cookie, pid_tgid);
	e->start_ns = in->start_ns;
	e->end_ns = now;
	e->ret = PT_REGS_RC(ctx);
	e->flags = in->flags | EV_HAS_RET;
	__builtin_memcpy(e->args, in->args, sizeof(e->args));
	__builtin_memcpy(e->ext, in->ext, sizeof(e->ext));
	bpf_map_delete_elem(&inflight, key);

	e->out = 0;
	__u32 out = COOKIE_OUT(cookie);
	if (out >= 1 && out <= NARGS) {
		/* The handle or pointer the call wrote back (stream, event, allocation). */
		__u64 ptr = e->args[(out - 1) & 7];
		if (e->ret == 0 && bpf_probe_read_user(&e->out, sizeof(e->out), (void *)ptr) < 0) {
			e->flags |= EV_OUT_FAULT;
			count(STAT_READ_FAULT);
		}
	}
	fill_body(ctx, e, cookie, body);
	bpf_ringbuf_submit(e, submit_flags(body, false));
	count(STAT_SUBMITTED);
	return 0;
}

static __always_inline int on_return(struct pt_regs *ctx)
{
	__u64 cookie = bpf_get_attach_cookie(ctx);
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u64 now = bpf_ktime_get_ns();
	/* A timed launch has a start only if its entry was admitted: no need
	 * to decide again. */
	if (cookie & COOKIE_AGG)
		return launch_ended(cookie, pid_tgid, now);
	/* The same decision as at entry, so that a call skipped there is no
	 * orphan here. */
	if ((cookie & COOKIE_SHARED) && !admit(cookie, pid_tgid >> 32))
		return 0;
	struct inflight_key key = { .tid = (__u32)pid_tgid, .api = COOKIE_API(cookie) };

	struct inflight *in = bpf_map_lookup_elem(&inflight, &key);
	if (!in) {
		count(STAT_ORPHAN_RETURN);
		__u32 api = COOKIE_API(cookie) & 0xff;
		__u64 *n = bpf_map_lookup_elem(&orphans, &api);
		if (n)
			*n += 1;
		return 0;
	}
	if ((cookie & COOKIE_CAPTURE_BEGIN) && (int)PT_REGS_RC(ctx) == 0)
		capture_mark(pid_tgid >> 32, true);
	if (cookie & COOKIE_CAPTURE_END)
		capture_mark(pid_tgid >> 32, false);
	cookie = capture_stack(cookie, pid_tgid >> 32);
	switch (COOKIE_BODY(cookie)) {
	case BODY_STRING:
		return emit_return(ctx, in, &key, cookie, pid_tgid, now, BODY_STRING);
	case BODY_FULL:
		return emit_return(ctx, in, &key, cookie, pid_tgid, now, BODY_FULL);
	default:
		return emit_return(ctx, in, &key, cookie, pid_tgid, now, BODY_SMALL);
	}
}

/*
 * The dynamic linker calls _dl_debug_state() before and after it maps or
 * unmaps libraries (the r_brk protocol debuggers use). A hit tells user space
 * to rescan the process's mappings for CUDA libraries. When the tracer
 * launched the process itself it asks (cookie bit) to stop the process right
 * there, so the new library is hooked before any call into it can run.
 */
static __always_inline int on_ldso(struct pt_regs *ctx)
{
	__u64 cookie = bpf_get_attach_cookie(ctx);
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	if ((cookie & COOKIE_TREE) && !in_tree(pid_tgid >> 32))
		return 0;
	struct event *e = bpf_ringbuf_reserve(&events, __builtin_offsetof(struct event, stack), 0);
	if (!e) {
		count(STAT_RINGBUF_FULL);
		return 0;
	}
	__builtin_memset(e, 0, __builtin_offsetof(struct event, stack));
	fill_common(e, cookie, pid_tgid);
	e->start_ns = bpf_ktime_get_ns();
	/* The process's name, in args[0..1]: a short-lived process may be gone
	 * before user space reads /proc, and library loads come before any
	 * CUDA call. */
	bpf_get_current_comm(e->args, 16);
	/* The stop before the record: user space continues the process once
	 * it has read the record, and a SIGCONT sent before the SIGSTOP is
	 * pending would leave it stopped for good. (No record, no stop: a
	 * full ring buffer returned above.) */
	if (cookie & COOKIE_STOP)
		bpf_send_signal(19 /* SIGSTOP */);
	bpf_ringbuf_submit(e, BPF_RB_FORCE_WAKEUP);
	count(STAT_SUBMITTED);
	return 0;
}

SEC("uprobe.multi")
int ldso_multi(struct pt_regs *ctx) { return on_ldso(ctx); }

/* The kernel fields the tree programs read (CO-RE, matched by name). */
struct signal_struct___tree {
	struct {
		int counter;
	} live; /* atomic_t */
} __attribute__((preserve_access_index));

struct task_struct___tree {
	int pid;
	int tgid;
	struct signal_struct___tree *signal;
} __attribute__((preserve_access_index));

/* A small record of the tree: who, whose child, its comm; with stop, the
 * current process stopped first (see on_ldso: the SIGSTOP must be pending
 * before user space can read the record and continue it). */
static __always_inline void emit_tree(__u64 cookie, __u32 tgid, __u32 tid, __u32 parent, const bool stop)
{
	struct event *e = bpf_ringbuf_reserve(&events, __builtin_offsetof(struct event, stack), 0);
	if (!e) {
		count(STAT_RINGBUF_FULL);
		return;
	}
	__builtin_memset(e, 0, __builtin_offsetof(struct event, stack));
	e->cookie = cookie;
	e->pid = tgid;
	e->tid = tid;
	e->cpu = bpf_get_smp_processor_id();
	e->start_ns = bpf_ktime_get_ns();
	e->args[0] = parent;
	bpf_get_current_comm(&e->args[1], 16);
	if (stop)
		bpf_send_signal(19 /* SIGSTOP */);
	bpf_ringbuf_submit(e, BPF_RB_FORCE_WAKEUP);
	count(STAT_SUBMITTED);
}

/* A process of the tree started one: it joins the tree before it runs. */
SEC("raw_tp/sched_process_fork")
int tree_fork(struct bpf_raw_tracepoint_args *ctx)
{
	if (!(follow_flags() & FOLLOW_ON))
		return 0;
	struct task_struct___tree *parent = (void *)ctx->args[0], *child = (void *)ctx->args[1];
	__u32 ptgid = BPF_CORE_READ(parent, tgid), ctgid = BPF_CORE_READ(child, tgid);
	if (ptgid == ctgid || !in_tree(ptgid))
		return 0; /* a thread, or not ours */
	if (!tree_add(ctgid)) {
		count(STAT_TREE_FULL);
		return 0;
	}
	emit_tree(API_PROCESS_FORK, ctgid, BPF_CORE_READ(child, pid), ptgid, false);
	return 0;
}

/* A process of the tree ended (its last thread): it leaves the tree, so
 * that its pid, reused, is not taken for it. (do_exit has counted the
 * thread out of signal->live by the time of this tracepoint.) */
SEC("raw_tp/sched_process_exit")
int tree_exit(struct bpf_raw_tracepoint_args *ctx)
{
	if (!(follow_flags() & FOLLOW_ON))
		return 0;
	struct task_struct___tree *p = (void *)ctx->args[0];
	__u32 tgid = BPF_CORE_READ(p, tgid);
	if (!in_tree(tgid))
		return 0;
	int live = BPF_CORE_READ(p, signal, live.counter);
	if (live == 0)
		tree_remove(tgid);
	return 0;
}

/* A process of the tree executed a program: say so, and stop it there
 * until what it maps is hooked (its first instruction is still to come). */
SEC("raw_tp/sched_process_exec")
int tree_exec(struct bpf_raw_tracepoint_args *ctx)
{
	__u32 flags = follow_flags();
	if (!(flags & FOLLOW_ON))
		return 0;
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	if (!in_tree(pid_tgid >> 32))
		return 0;
	__u64 cookie = API_PROCESS_EXEC;
	if (flags & FOLLOW_HOLD_EXEC)
		cookie |= COOKIE_STOP;
	if (flags & FOLLOW_HOLD_EXEC)
		emit_tree(cookie, pid_tgid >> 32, (__u32)pid_tgid, 0, true);
	else
		emit_tree(cookie, pid_tgid >> 32, (__u32)pid_tgid, 0, false);
	return 0;
}

SEC("uprobe")
int ldso(struct pt_regs *ctx) { return on_ldso(ctx); }

SEC("uprobe.multi")
int cuda_entry_multi(struct pt_regs *ctx) { return on_entry(ctx); }

SEC("uretprobe.multi")
int cuda_return_multi(struct pt_regs *ctx) { return on_return(ctx); }

/* Fallbacks for kernels without uprobe_multi (before 6.6). */
SEC("uprobe")
int cuda_entry(struct pt_regs *ctx) { return on_entry(ctx); }

SEC("uretprobe")
int cuda_return(struct pt_regs *ctx) { return on_return(ctx); }

/* Referenced so that bpf2go can export the types to Go. */
const struct event *unused_event __attribute__((unused));
const enum stat *unused_stat __attribute__((unused));
const struct py_code *unused_py_code __attribute__((unused));
const struct kernel_args *unused_kernel_args __attribute__((unused));
