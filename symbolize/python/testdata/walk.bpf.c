//go:build ignore

/*
 * Test program for bpf/python.h: a uprobe that records the calling
 * thread's Python frames into a struct event, as the tracer's programs do.
 * Compiled by the package's tests with the flags of tracer/generate.go.
 */
#include <linux/types.h>
#include <linux/bpf.h>
#include <linux/ptrace.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "cudatap.h"
#include "python.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 22);
} events SEC(".maps");

SEC("uprobe")
int walk(struct pt_regs *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	struct event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e)
		return 0;
	e->pid = id >> 32;
	e->tid = (__u32)id;
	e->flags = 0;
	walk_python(e, id >> 32, (__u32)id);
	bpf_ringbuf_submit(e, 0);
	return 0;
}

/* Keep the types in BTF for the test to read offsets from. */
const struct event *unused_event __attribute__((unused));
const struct py_config *unused_py_config __attribute__((unused));
