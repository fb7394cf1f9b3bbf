/*
 * Copies of the Python code objects that stack records refer to.
 *
 * walk_python (python.h) records (code object, instruction) pairs; user
 * space names them by reading the code objects. A code object may be freed
 * right after the call, and the process may be gone (a script's module
 * level just before it exits, code compiled and run once): then nothing is
 * left to read. py_snapshot_frames therefore copies each code object the
 * first time a record of its process refers to it, with its file name,
 * function name and line table, into a struct py_code record (cudatap.h)
 * that follows the event in the ring buffer. Costs one map lookup and three
 * 8-byte reads per frame of a stack record; stack records are the rare
 * ones (synchronizations, copies, allocations).
 *
 * Needs: cudatap.h, python.h, the `events` ring buffer and count() defined
 * before this file.
 */
#ifndef CUDATAP_PYCODE_H
#define CUDATAP_PYCODE_H

/*
 * Code objects already copied, per process, with the object addresses that
 * identify them: a code object freed and another allocated at the same
 * address has other name and file objects, and is copied anew. An LRU:
 * forgetting one only costs a second copy.
 */
struct py_code_key {
	__u32 tgid;
	__u32 _pad;
	__u64 code;
};

struct py_code_ids {
	__u64 filename, name, table;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct py_code_key);
	__type(value, struct py_code_ids);
} py_code_seen SEC(".maps");

/* Read up to max bytes of a Python object at src into dst, halving the size
 * when the read faults (an object near the end of its mapping); returns the
 * bytes read, 0 when even 64 would not read. */
static __always_inline __u32 py_copy(void *dst, __u32 max, const void *src)
{
	if (max >= 512 && bpf_probe_read_user(dst, 512, src) == 0)
		return 512;
	if (max >= 256 && bpf_probe_read_user(dst, 256, src) == 0)
		return 256;
	if (bpf_probe_read_user(dst, 128, src) == 0)
		return 128;
	if (bpf_probe_read_user(dst, 64, src) == 0)
		return 64;
	return 0;
}

/*
 * Copy code object `code` of process tgid into a py_code record, unless it
 * was copied before. A global function: the verifier checks it once, not
 * once per frame of the caller's loop.
 */
__attribute__((noinline)) int py_snapshot(__u64 code, __u32 tgid, __u32 tid)
{
	const struct py_config *c = bpf_map_lookup_elem(&py_configs, &tgid);
	if (!c || !code)
		return 0;
	__u64 ptrs[3] = {};
	if (bpf_probe_read_user(&ptrs[0], 8, (void *)(code + c->off_code_filename)) ||
	    bpf_probe_read_user(&ptrs[1], 8, (void *)(code + c->off_code_name)) ||
	    bpf_probe_read_user(&ptrs[2], 8, (void *)(code + c->off_code_linetable)))
		return 0;
	struct py_code_key key = { .tgid = tgid, .code = code };
	struct py_code_ids ids = { .filename = ptrs[0], .name = ptrs[1], .table = ptrs[2] };
	struct py_code_ids *seen = bpf_map_lookup_elem(&py_code_seen, &key);
	if (seen && seen->filename == ids.filename && seen->name == ids.name && seen->table == ids.table)
		return 0;

	struct py_code *r = bpf_ringbuf_reserve(&events, sizeof(struct py_code), 0);
	if (!r) {
		count(STAT_PY_CODE_LOST);
		return 0;
	}
	r->start_ns = bpf_ktime_get_ns();
	r->end_ns = 0;
	r->cookie = API_PY_CODE;
	r->pid = tgid;
	r->tid = tid;
	r->code = code;
	r->addr[0] = ptrs[0];
	r->addr[1] = ptrs[1];
	r->addr[2] = ptrs[2];
	r->head_len = bpf_probe_read_user(r->head, PY_CODE_HEAD, (void *)code) == 0 ? PY_CODE_HEAD : 0;
	r->len[0] = py_copy(r->filename, PY_STR_COPY, (void *)ptrs[0]);
	r->len[1] = py_copy(r->name, PY_STR_COPY, (void *)ptrs[1]);
	/* The line table: a bytes object, ob_size bytes from offset 32. */
	r->len[2] = 0;
	__u64 size = 0;
	if (bpf_probe_read_user(&size, 8, (void *)(ptrs[2] + 16)) == 0) {
		size += 32 + 1; /* header and the trailing NUL */
		if (size > PY_TABLE_COPY)
			size = PY_TABLE_COPY;
		if (bpf_probe_read_user(r->table, size, (void *)ptrs[2]) == 0)
			r->len[2] = size;
	}
	/* Not counted as submitted: it is no event, and user space does not
	 * count it as received. */
	bpf_ringbuf_submit(r, BPF_RB_FORCE_WAKEUP);
	bpf_map_update_elem(&py_code_seen, &key, &ids, BPF_ANY);
	return 0;
}

/* Copy the code objects of an event's Python frames not copied yet. */
static __always_inline void py_snapshot_frames(struct event *e)
{
	for (int k = 0; k < MAX_PY; k++) {
		if (k >= e->npy)
			break;
		py_snapshot(e->py[2 * k], e->pid, e->tid);
	}
}

#endif
