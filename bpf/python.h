/*
 * Python frames of the calling thread, read from a CPython 3.9–3.13 target
 * at a uprobe without stopping or changing it.
 *
 * User space (symbolize/python) finds the interpreter of a process, fills a
 * struct py_config with the layout of that exact version and puts it into
 * py_configs under the process's tgid. walk_python then
 *
 *   1. finds the calling thread's PyThreadState in the main interpreter's
 *      thread list (_PyRuntime.interpreters.head->threads.head, ->next, ...),
 *   2. follows its current frame and the frames' back links, and
 *   3. stores (code object, instruction) pairs, innermost first, into the
 *      event: e->py[2i] is the PyCodeObject *, e->py[2i+1] the instruction:
 *      f_lasti (a C int, zero-extended) for 3.9/3.10, the frame's
 *      prev_instr (3.11/3.12) or instr_ptr (3.13) pointer otherwise, with
 *      two flags in its top bits (above any user-space pointer):
 *      PY_INSTR_ENTRY_KNOWN on every frame whose "entry" bit is known and
 *      PY_INSTR_ENTRY on a frame entered from C, the outermost Python frame
 *      of one activation of the evaluation loop (_PyEval_EvalFrameDefault):
 *      py-spy's "entry" frames. Up to 3.10 every frame is one; 3.11 marks
 *      them (_PyInterpreterFrame.is_entry); from 3.12 an activation pushes
 *      a shim frame owned by the C stack behind its first frame.
 *
 * User space turns a pair into "file:line function" by reading the code
 * object (python.Interpreter.Frame), or from the copy pycode.h made of it
 * while the call ran. Nothing is written to the target and nothing is
 * counted here; a read that faults ends the walk with what was collected
 * so far.
 *
 * Needs: <linux/bpf.h>, <bpf/bpf_helpers.h> and cudatap.h (struct event,
 * MAX_PY, EV_PY_TRUNCATED) included before this file. Uses CO-RE for one
 * kernel field (task_struct->thread.fsbase, x86-64), so the kernel must
 * have BTF (/sys/kernel/btf/vmlinux).
 */
#ifndef CUDATAP_PYTHON_H
#define CUDATAP_PYTHON_H

#include <bpf/bpf_core_read.h>

#define NO_OFFSET 0xffffffff

/*
 * Per-process interpreter layout, filled by user space (symbolize/python:
 * Config, whose MarshalBinary gives exactly these 80 bytes). All offsets
 * are byte offsets into the named CPython structure.
 */
struct py_config {
	__u64 runtime_addr;            /* address of _PyRuntime in the target */
	__u32 version;                 /* PY_VERSION_HEX >> 16, e.g. 0x030c */
	__u32 off_runtime_interp_head; /* _PyRuntimeState.interpreters.head */
	__u32 off_interp_threads_head; /* PyInterpreterState.threads.head (tstate_head before 3.11) */
	__u32 off_tstate_next;         /* PyThreadState.next */
	__u32 off_tstate_native_tid;   /* PyThreadState.native_thread_id (3.11+, the tid in the
	                                * target's pid namespace); NO_OFFSET before 3.11 */
	__u32 off_tstate_frame;        /* ->frame (3.9/3.10), ->cframe (3.11/3.12), ->current_frame (3.13) */
	__u32 off_cframe_current;      /* _PyCFrame.current_frame (3.11/3.12); NO_OFFSET otherwise */
	__u32 off_frame_back;          /* PyFrameObject.f_back / _PyInterpreterFrame.previous */
	__u32 off_frame_code;          /* f_code / f_executable */
	__u32 off_frame_instr;         /* f_lasti (int) or prev_instr / instr_ptr (pointer) */
	__u32 off_frame_owner;         /* _PyInterpreterFrame.owner (char), 3.12+: frames owned by
	                                * the C stack (3) are skipped; NO_OFFSET otherwise */
	__u32 instr_is_ptr;            /* 1: off_frame_instr is a pointer; 0: a C int */
	__u32 off_tstate_thread_id;    /* PyThreadState.thread_id (pthread_self() of the thread);
	                                * NO_OFFSET to match native_thread_id instead */
	__u32 off_code_filename;       /* PyCodeObject.co_filename */
	__u32 off_code_name;           /* co_qualname (3.11+), else co_name */
	__u32 off_code_linetable;      /* co_lnotab (3.9) / co_linetable */
	__u32 off_frame_is_entry;      /* _PyInterpreterFrame.is_entry (bool), 3.11 only; NO_OFFSET
	                                * otherwise */
};

/* How the calling thread is recognised:
 *  - off_tstate_thread_id set (user space sets it for every version):
 *    thread_id == the task's x86-64 fs base, which is what glibc and musl
 *    return from pthread_self(). Independent of pid namespaces.
 *  - else native_thread_id == tid, the host tid the caller passes: right
 *    only for targets in the initial pid namespace.
 * There is no tid -> PyThreadState cache: C threads that call into Python
 * through PyGILState_Ensure/Release get a new thread state each time (the
 * old one is freed), so a cached pointer could be stale; the list costs two
 * reads per thread state. The whole walk verifies in about 25k instructions
 * (kernel 6.18, clang-19 -mcpu=v1; 18k before the entry flags); the test
 * program that wraps it uses 48 bytes of BPF stack. */

#define PY_OWNED_BY_CSTACK 3
#define PY_INSTR_ENTRY (1ULL << 63)       /* entered from C: the first frame of an evaluation */
#define PY_INSTR_ENTRY_KNOWN (1ULL << 62) /* PY_INSTR_ENTRY is set as it applies */
#define PY_MAX_THREADS 128           /* PyThreadStates looked at per walk */
#define PY_MAX_WALK (MAX_PY * 2 + 16) /* frames looked at, C-stack shims included */

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32); /* tgid */
	__type(value, struct py_config);
} py_configs SEC(".maps");

/* Just the kernel fields we read; CO-RE matches them by name against the
 * kernel's BTF (the ___py suffix is ignored there). */
struct thread_struct___py {
	unsigned long fsbase;
} __attribute__((preserve_access_index));

struct task_struct___py {
	struct thread_struct___py thread;
} __attribute__((preserve_access_index));

/* The calling thread's PyThreadState, or 0. */
static __always_inline __u64 py_find_tstate(const struct py_config *c, __u32 tid)
{
	__u64 want = tid;
	__u32 id_off = c->off_tstate_native_tid;
	if (c->off_tstate_thread_id != NO_OFFSET) {
		struct task_struct___py *task = (void *)bpf_get_current_task();
		want = BPF_CORE_READ(task, thread.fsbase);
		id_off = c->off_tstate_thread_id;
	}
	if (id_off == NO_OFFSET || want == 0)
		return 0;

	__u64 interp = 0, ts = 0;
	if (bpf_probe_read_user(&interp, sizeof(interp), (void *)(c->runtime_addr + c->off_runtime_interp_head)) || !interp)
		return 0;
	if (bpf_probe_read_user(&ts, sizeof(ts), (void *)(interp + c->off_interp_threads_head)))
		return 0;
	for (int i = 0; i < PY_MAX_THREADS; i++) {
		if (!ts)
			return 0;
		/* thread_id and native_thread_id are both unsigned long. */
		__u64 id = 0;
		if (bpf_probe_read_user(&id, sizeof(id), (void *)(ts + id_off)))
			return 0;
		if (id == want)
			return ts;
		if (bpf_probe_read_user(&ts, sizeof(ts), (void *)(ts + c->off_tstate_next)))
			return 0;
	}
	return 0;
}

/*
 * Fill e->npy and e->py[] with the calling thread's Python frames,
 * innermost first, and set EV_PY_TRUNCATED in e->flags when frames beyond
 * MAX_PY (or beyond PY_MAX_WALK looked at) were left out. tgid and tid are
 * the host ids (bpf_get_current_pid_tgid). e->npy is 0 when the process has
 * no py_configs entry or the thread has no Python frames.
 */
static __always_inline void walk_python(struct event *e, __u32 tgid, __u32 tid)
{
	e->npy = 0;
	const struct py_config *c = bpf_map_lookup_elem(&py_configs, &tgid);
	if (!c)
		return;
	__u64 ts = py_find_tstate(c, tid);
	if (!ts)
		return;

	__u64 f = 0;
	if (bpf_probe_read_user(&f, sizeof(f), (void *)(ts + c->off_tstate_frame)))
		return;
	if (c->off_cframe_current != NO_OFFSET && f) {
		if (bpf_probe_read_user(&f, sizeof(f), (void *)(f + c->off_cframe_current)))
			return;
	}

	/*
	 * The count lives in e->npy and is re-read (volatile) each time: the
	 * verifier then sees an unknown value bounded by the check below,
	 * instead of one exact count per path, and the loop's states prune.
	 */
	volatile __u32 *npy = &e->npy;
	for (int i = 0; i < PY_MAX_WALK; i++) {
		if (!f)
			break;
		__u64 v = 0;
		if (c->off_frame_owner != NO_OFFSET &&
		    bpf_probe_read_user(&v, 1, (void *)(f + c->off_frame_owner)))
			break;
		if (v == PY_OWNED_BY_CSTACK) {
			/* 3.12+: the shim behind the first frame of an evaluation
			 * loop's activation; that frame was recorded last. */
			__u64 j = (__u64)*npy - 1; /* 64 bits: no zero extension to lose the bound */
			if (j < MAX_PY)
				e->py[2 * j + 1] |= PY_INSTR_ENTRY;
		} else {
			__u32 k = *npy;
			if (k >= MAX_PY) {
				e->flags |= EV_PY_TRUNCATED;
				break;
			}
			if (bpf_probe_read_user(&e->py[2 * k], 8, (void *)(f + c->off_frame_code)))
				break;
			/* f_lasti is a C int: read it into the low half, zero-extended. */
			e->py[2 * k + 1] = 0;
			if (bpf_probe_read_user(&e->py[2 * k + 1], c->instr_is_ptr ? 8 : 4, (void *)(f + c->off_frame_instr)))
				break;
			__u64 flags = PY_INSTR_ENTRY_KNOWN;
			if (c->version < 0x030b) {
				flags |= PY_INSTR_ENTRY; /* a frame per activation */
			} else if (c->off_frame_is_entry != NO_OFFSET) {
				__u8 entry = 0;
				if (bpf_probe_read_user(&entry, 1, (void *)(f + c->off_frame_is_entry)))
					flags = 0;
				else if (entry)
					flags |= PY_INSTR_ENTRY;
			}
			e->py[2 * k + 1] |= flags;
			*npy = k + 1;
		}
		if (bpf_probe_read_user(&f, sizeof(f), (void *)(f + c->off_frame_back)))
			break;
		if (i == PY_MAX_WALK - 1 && f) {
			e->flags |= EV_PY_TRUNCATED;
			/* 3.12+: whether a shim follows the last frame recorded
			 * is not known. */
			__u64 j = (__u64)*npy - 1; /* 64 bits: no zero extension to lose the bound */
			if (c->off_frame_owner != NO_OFFSET && j < MAX_PY)
				e->py[2 * j + 1] &= ~PY_INSTR_ENTRY_KNOWN;
		}
	}
}

#endif
