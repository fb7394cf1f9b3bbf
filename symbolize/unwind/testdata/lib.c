/* Shared library half of chain.c, also built without frame pointers. */
#define NOINL __attribute__((noinline, noclone))
#define KEEP(x) __asm__ volatile("" : "+r"(x) : : "memory")

NOINL static int uwlib_inner(int (*cb)(int), int x) {
	int r = cb(x + 1);
	KEEP(r);
	return r + 2;
}

NOINL int uwlib_call(int (*cb)(int), int x) {
	int r = uwlib_inner(cb, x * 3);
	KEEP(r);
	return r * 5 + 1;
}
