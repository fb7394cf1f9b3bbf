// target: a process for the inject tests to borrow a thread of.
//
//   target MODE     MODE is one of
//     read   the main thread blocks in read(0): interrupted, it restarts
//            through -ERESTARTSYS;
//     futex  the main thread blocks in a futex wait with a timeout: it
//            restarts through restart_syscall; a second thread reads
//            stdin and wakes it;
//     epoll  the main thread blocks in epoll_wait on stdin: interrupted, it
//            returns EINTR, and the program waits again, as programs do;
//     spin   the main thread spins, in no system call, with DF set, until
//            SIGTERM;
//     spinread  the main thread spins so until a second thread, blocked in
//            read(0), reads a line;
//     exitmain  the main thread exits (pthread_exit), and a second thread
//            spins so until SIGTERM;
//     rseq   the main thread spins inside a restartable sequence (rseq(2))
//            until SIGTERM, and checks it stayed armed.
//
// In every mode another thread counts without pause. The main thread holds
// known values in every register across its wait (regs.S) and checks them
// after, and that no floating-point exception flag got set. It prints
// "ready"; when the wait is over, "ok usr1=N eintr=N" (SIGUSR1s handled,
// EINTRs retried) or "FAIL why"; and exits 0 or 1.
#define _GNU_SOURCE
#include <errno.h>
#include <fenv.h>
#include <linux/futex.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/rseq.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

// struct regs is what regs.S dumps.
struct regs {
	uint64_t nr, args[6], ret;
	uint64_t gpr[16]; // by number: rax rbx rcx rdx rsi rdi rbp rflags r8..r15
	uint8_t vec[16][32];
};
void guarded_syscall(struct regs *);
void spin(struct regs *);
int rseq_spin(volatile uint64_t *rseq_cs);
uint64_t want_gpr[16];     // what regs.S loads, and target.c expects back
uint8_t want_vec[16][32];
volatile int spinning;     // set once spin() has its registers loaded
volatile int stop_spin;    // set by SIGTERM, or by the reader in mode spinread

enum { RAX, RBX, RCX, RDX, RSI, RDI, RBP, RFLAGS, R8, R9, R10, R11 };
#ifdef __AVX__
#define VEC_BYTES 32
#else
#define VEC_BYTES 16
#endif

static char fail[256];

// check compares the registers of r selected by the bits of gprs.
static void check(const struct regs *r, unsigned gprs) {
	static const char *name[16] = {"rax", "rbx", "rcx", "rdx", "rsi", "rdi", "rbp", "rflags",
				       "r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15"};
	for (int i = 0; i < 16 && !fail[0]; i++)
		if ((gprs >> i & 1) && r->gpr[i] != want_gpr[i])
			snprintf(fail, sizeof fail, "%s: got %#llx want %#llx", name[i],
				 (unsigned long long)r->gpr[i], (unsigned long long)want_gpr[i]);
	for (int i = 0; i < 16 && !fail[0]; i++)
		if (memcmp(r->vec[i], want_vec[i], VEC_BYTES))
			snprintf(fail, sizeof fail, "vector register %d changed", i);
	if (!fail[0] && fetestexcept(FE_ALL_EXCEPT))
		snprintf(fail, sizeof fail, "floating-point exception flags %#x set", fetestexcept(FE_ALL_EXCEPT));
}

// wait_in makes system call nr and checks the registers across it: all but
// rax, rcx and r11, which the syscall instruction uses, and rflags.
static long wait_in(long nr, long a0, long a1, long a2, long a3, long a4, long a5) {
	struct regs r = {.nr = nr, .args = {a0, a1, a2, a3, a4, a5}};
	want_gpr[RDI] = a0, want_gpr[RSI] = a1, want_gpr[RDX] = a2;
	want_gpr[R10] = a3, want_gpr[R8] = a4, want_gpr[R9] = a5;
	feclearexcept(FE_ALL_EXCEPT);
	guarded_syscall(&r);
	check(&r, 0xffff & ~(1u << RAX | 1u << RCX | 1u << R11 | 1u << RFLAGS));
	return (long)r.ret;
}

// spin_until_term spins until stop_spin and checks every register after, and
// that DF was still set.
static void spin_until_term(void) {
	struct regs r = {0};
	feclearexcept(FE_ALL_EXCEPT);
	spin(&r);
	check(&r, 0xffff & ~(1u << RFLAGS));
	if (!fail[0] && !(r.gpr[RFLAGS] & 0x400))
		snprintf(fail, sizeof fail, "DF cleared: rflags %#llx", (unsigned long long)r.gpr[RFLAGS]);
}

static atomic_int done;
static uint64_t busy_n, busy_sum;

static void *busy(void *arg) {
	uint64_t n = 0, sum = 0;
	while (!atomic_load_explicit(&done, memory_order_relaxed)) {
		n++;
		sum += n;
	}
	busy_n = n, busy_sum = sum;
	return arg;
}

static uint32_t futex_word;
static char line[64];

static void *waker(void *arg) {
	if (read(0, line, sizeof line) != 3)
		snprintf(fail, sizeof fail, "waker: short read");
	__atomic_store_n(&futex_word, 1, __ATOMIC_SEQ_CST);
	syscall(SYS_futex, &futex_word, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
	return arg;
}

static void *reader(void *arg) {
	if (read(0, line, sizeof line) != 3)
		snprintf(fail, sizeof fail, "reader: short read");
	stop_spin = 1;
	return arg;
}

volatile sig_atomic_t usr1; // SIGUSR1s handled; lib.c reads it too
static void on_usr1(int sig) { (void)sig; usr1++; }
static void on_term(int sig) { (void)sig; stop_spin = 1; }

// spawn starts a thread, with every signal blocked (so that signals for
// the process go to the main thread) unless signals is set.
static pthread_t spawn(void *(*fn)(void *), int signals) {
	sigset_t all, old;
	pthread_t t;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, signals ? NULL : &all, &old);
	if (pthread_create(&t, NULL, fn, NULL) != 0)
		abort();
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return t;
}

static pthread_t busy_thread;

// finish stops the busy thread, checks it, and reports.
static int finish(long eintr) {
	atomic_store(&done, 1);
	pthread_join(busy_thread, NULL);
	if (!fail[0] && busy_sum != busy_n * (busy_n + 1) / 2)
		snprintf(fail, sizeof fail, "busy thread: sum %llu of 1..%llu", (unsigned long long)busy_sum, (unsigned long long)busy_n);
	if (fail[0]) {
		printf("FAIL %s\n", fail);
		return 1;
	}
	printf("ok usr1=%d eintr=%ld\n", (int)usr1, eintr);
	return 0;
}

static void *spin_then_exit(void *arg) {
	spin_until_term();
	exit(finish(0));
	return arg;
}

int main(int argc, char **argv) {
	const char *mode = argc > 1 ? argv[1] : "read";
	long eintr = 0, ret;
	struct sigaction sa = {.sa_handler = on_usr1, .sa_flags = SA_RESTART};
	sigaction(SIGUSR1, &sa, NULL);
	sa.sa_handler = on_term;
	sigaction(SIGTERM, &sa, NULL);
	setvbuf(stdout, NULL, _IOLBF, 0);
	for (int i = 0; i < 16; i++) {
		want_gpr[i] = 0x0123456789abcdefull * (i + 1);
		for (int j = 0; j < 32; j++)
			want_vec[i][j] = (uint8_t)(i * 32 + j + 1);
	}

	pthread_t w = 0;
	busy_thread = spawn(busy, 0);
	if (!strcmp(mode, "read")) {
		puts("ready");
		ret = wait_in(SYS_read, 0, (long)line, sizeof line, 0, 0, 0);
		if (!fail[0] && (ret != 3 || memcmp(line, "go\n", 3)))
			snprintf(fail, sizeof fail, "read returned %ld", ret);
	} else if (!strcmp(mode, "futex")) {
		struct timespec hour = {.tv_sec = 3600};
		w = spawn(waker, 0);
		puts("ready");
		while (!fail[0] && !__atomic_load_n(&futex_word, __ATOMIC_SEQ_CST))
			if ((ret = wait_in(SYS_futex, (long)&futex_word, FUTEX_WAIT_PRIVATE, 0, (long)&hour, 0, 0)) != 0 && ret != -EAGAIN)
				snprintf(fail, sizeof fail, "futex returned %ld", ret);
	} else if (!strcmp(mode, "epoll")) {
		int ep = epoll_create1(0);
		struct epoll_event ev = {.events = EPOLLIN};
		epoll_ctl(ep, EPOLL_CTL_ADD, 0, &ev);
		puts("ready");
		while ((ret = wait_in(SYS_epoll_wait, ep, (long)&ev, 1, -1, 0, 0)) == -EINTR && !fail[0])
			eintr++;
		if (!fail[0] && (ret != 1 || read(0, line, sizeof line) != 3))
			snprintf(fail, sizeof fail, "epoll_wait returned %ld", ret);
	} else if (!strcmp(mode, "spin") || !strcmp(mode, "spinread")) {
		if (!strcmp(mode, "spinread"))
			w = spawn(reader, 0);
		puts("ready");
		spin_until_term();
	} else if (!strcmp(mode, "rseq")) {
		if (__rseq_size == 0) {
			puts("no rseq"); // glibc did not register one
			return 0;
		}
		struct rseq *rs = (struct rseq *)((char *)__builtin_thread_pointer() + __rseq_offset);
		puts("ready");
		if (!rseq_spin((volatile uint64_t *)&rs->rseq_cs))
			snprintf(fail, sizeof fail, "rseq critical section disarmed");
	} else if (!strcmp(mode, "exitmain")) {
		spawn(spin_then_exit, 1);
		puts("ready");
		pthread_exit(NULL);
	} else {
		fprintf(stderr, "unknown mode %s\n", mode);
		return 2;
	}
	if (w)
		pthread_join(w, NULL);
	return finish(eintr);
}
