// libinjecttest.so: the library the inject tests load. Its constructor and
// destructor log "load PID" and "unload PID" to the file named by
// $INJECT_TEST_MARKER; both, and every function here, leave the
// floating-point status flags and the vector registers dirty, as real
// code does.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <unistd.h>

static void dirty(void) {
	volatile double one = 1, three = 3, sink;
	sink = one / three; // FE_INEXACT
	(void)sink;
#ifdef __AVX__
	asm volatile("vzeroall" ::: "memory");
#else
	asm volatile("xorps %%xmm0, %%xmm0\n xorps %%xmm15, %%xmm15" ::: "xmm0", "xmm15");
#endif
}

static void mark(const char *what) {
	const char *path = getenv("INJECT_TEST_MARKER");
	char buf[64];
	int fd, n = snprintf(buf, sizeof buf, "%s %d\n", what, (int)getpid());
	if (!path || (fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644)) < 0)
		return;
	if (write(fd, buf, n) != n)
		abort();
	close(fd);
	dirty();
}

// With $INJECT_TEST_HOLD set, the constructor says "holding" on stdout
// and waits for that file to exist: dlopen is then under way for as long
// as a test wants.
static void hold(void) {
	const char *path = getenv("INJECT_TEST_HOLD");
	if (!path)
		return;
	if (write(1, "holding\n", 8) != 8)
		abort();
	// sched_yield, not nanosleep: a sleep would reset the thread's
	// restart block, and a timed wait it was found in would end EINTR.
	while (access(path, F_OK) != 0)
		sched_yield();
}

__attribute__((constructor)) static void load(void) {
	mark("load");
	hold();
}
__attribute__((destructor)) static void unload(void) { mark("unload"); }

// inject_test_add weighs each argument register differently.
int64_t inject_test_add(int64_t a, int64_t b, int64_t c, int64_t d, int64_t e, int64_t f) {
	dirty();
	return a + 2 * b + 3 * c + 4 * d + 5 * e + 6 * f;
}

// inject_test_raise sends sig to the calling thread, and returns how many
// SIGUSR1s the target's handler has seen by then (its global usr1).
int inject_test_raise(int sig) {
	volatile sig_atomic_t *usr1 = dlsym(RTLD_DEFAULT, "usr1");
	if (raise(sig) != 0 || !usr1)
		return -1;
	return *usr1;
}

// inject_test_df returns the direction flag as the function was entered.
int inject_test_df(void) {
	uint64_t flags;
	asm volatile("pushfq; popq %0" : "=r"(flags));
	return flags >> 10 & 1;
}

void inject_test_crash(void) {
	int *volatile p = (int *)16;
	*p = 1;
}

// inject_test_block says "blocked" on stdout, and never returns.
void inject_test_block(void) {
	if (write(1, "blocked\n", 8) != 8)
		abort();
	for (;;)
		pause();
}

// __libc_dlopen_mode and __libc_dlclose stand in for the entry points of
// glibc before 2.34, for the fallback's test; the mode is the one dlopen
// passes on: RTLD_NOW | __RTLD_DLOPEN.
void *__libc_dlopen_mode(const char *path, int mode) {
	return (unsigned)mode == 0x80000002u ? dlopen(path, RTLD_NOW) : NULL;
}
int __libc_dlclose(void *h) { return dlclose(h); }
