/*
 * Test program for the unwinder. Built with
 *   -O2 -fomit-frame-pointer -fasynchronous-unwind-tables
 * it calls
 *   main -> uw_outer -> uw_rec (x depth) -> uw_alloca -> uwlib_call (libuwlib.so)
 *        -> uwlib_inner -> uw_leaf (callback) -> uw_capture
 * and uw_capture copies its own registers and up to 8 KiB of stack into the
 * file argv[1], prints "ready" and blocks until stdin is closed, like the BPF
 * program's snapshot at a probe.
 *
 * With "signal" as the third argument, uw_leaf calls uw_fault instead, which
 * faults; the SIGSEGV handler uw_handler calls uw_capture, which then copies
 * up to 64 KiB (the signal frame with the xsave area can be large) and also
 * records the faulting pc.
 *
 * usage: chain OUTFILE [DEPTH [signal]]
 *
 * The snapshot file holds five little-endian 64-bit words, rip, rsp, rbp,
 * the number of stack bytes that follow and the faulting pc (0 if none),
 * then the stack bytes.
 */
#define _GNU_SOURCE
#include <alloca.h>
#include <signal.h>
#include <ucontext.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NOINL __attribute__((noinline, noclone))
/* Keeps a value live across the call so calls are not turned into jumps. */
#define KEEP(x) __asm__ volatile("" : "+r"(x) : : "memory")

extern int uwlib_call(int (*cb)(int), int x);

static uint64_t stack_end;
static const char *out_path;
static unsigned char snap[65536];
static uint64_t snap_max = 8192;
static uint64_t fault_pc;
static int signal_mode;
static int *volatile bad_ptr; /* NULL, unknown to the compiler */

NOINL void uw_capture(int x) {
	uint64_t rip, rsp, rbp;
	__asm__ volatile("lea 0(%%rip), %0\n\t"
	                 "mov %%rsp, %1\n\t"
	                 "mov %%rbp, %2"
	                 : "=r"(rip), "=r"(rsp), "=r"(rbp));
	uint64_t n = snap_max;
	if (stack_end - rsp < n)
		n = stack_end - rsp;
	memcpy(snap, (void *)rsp, n);
	uint64_t hdr[5] = {rip, rsp, rbp, n, fault_pc};
	FILE *f = fopen(out_path, "wb");
	if (!f || fwrite(hdr, sizeof hdr, 1, f) != 1 || fwrite(snap, 1, n, f) != n || fclose(f) != 0) {
		perror(out_path);
		exit(2);
	}
	printf("ready %d\n", x);
	fflush(stdout);
	char c;
	while (read(0, &c, 1) > 0) {
	}
}

NOINL int uw_fault(int x) {
	*bad_ptr = x;
	int r = x;
	KEEP(r);
	return r + 3;
}

static void uw_handler(int sig, siginfo_t *si, void *ctx) {
	(void)si;
	fault_pc = ((ucontext_t *)ctx)->uc_mcontext.gregs[REG_RIP];
	uw_capture(sig);
	_exit(0);
}

NOINL int uw_leaf(int x) {
	if (signal_mode)
		x = uw_fault(x);
	else
		uw_capture(x);
	int r = x;
	KEEP(r);
	return r + 1;
}

/* alloca: a variable-size frame, so the CFA is defined through rbp. */
NOINL int uw_alloca(int x) {
	int n = 64 + (x & 63);
	char *p = alloca(n);
	memset(p, x, n);
	KEEP(p);
	int r = uwlib_call(uw_leaf, x + p[3]);
	KEEP(r);
	return r + p[n - 1];
}

NOINL int uw_rec(int depth, int x) {
	int r = depth > 0 ? uw_rec(depth - 1, x + 1) : uw_alloca(x);
	KEEP(r);
	return r + depth;
}

NOINL int uw_outer(int depth, int x) {
	int r = uw_rec(depth, x * 2);
	KEEP(r);
	return r + 7;
}

static void find_stack_end(void) {
	FILE *f = fopen("/proc/self/maps", "r");
	char line[512];
	while (f && fgets(line, sizeof line, f)) {
		unsigned long lo, hi;
		if (strstr(line, "[stack]") && sscanf(line, "%lx-%lx", &lo, &hi) == 2)
			stack_end = hi;
	}
	if (f)
		fclose(f);
	if (!stack_end) {
		fprintf(stderr, "no [stack] in /proc/self/maps\n");
		exit(2);
	}
}

int main(int argc, char **argv) {
	if (argc < 2) {
		fprintf(stderr, "usage: %s OUTFILE [DEPTH]\n", argv[0]);
		return 2;
	}
	out_path = argv[1];
	int depth = argc > 2 ? atoi(argv[2]) : 0;
	if (argc > 3 && strcmp(argv[3], "signal") == 0) {
		struct sigaction sa;
		memset(&sa, 0, sizeof sa);
		sa.sa_sigaction = uw_handler;
		sa.sa_flags = SA_SIGINFO;
		sigaction(SIGSEGV, &sa, NULL);
		signal_mode = 1;
		snap_max = sizeof snap;
	}
	find_stack_end();
	int r = uw_outer(depth, argc);
	KEEP(r);
	return r == 123456789;
}
