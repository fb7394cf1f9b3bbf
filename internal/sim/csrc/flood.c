/* flood: T threads, each on its own non-blocking stream, make N
 * cudaLaunchKernel calls (the simulated runtime does no GPU work): as fast
 * as they can, or at RATE launches per second per thread; with N = 0, until
 * stdin closes. It prints "ready" once CUDA is loaded, waits for a line on
 * stdin, then prints the launches it made.
 * Usage: flood THREADS N [RATE]  (a load generator for cudatap's benchmarks) */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include "cuda_sim.h"
void flood_kernel(void) {}
static long n;
static double rate;
static volatile int stop;
static long made[256];
static double now(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}
static void *run(void *arg) {
	long id = (long)arg;
	cudaStream_t s;
	cudaStreamCreateWithFlags(&s, 1);
	dim3 one = {1, 1, 1};
	double t0 = now();
	for (long i = 0; n == 0 ? !stop : i < n; i++) {
		/* Paced: every 64 launches, wait until the schedule catches up. */
		if (rate > 0 && i % 64 == 0)
			while (now() - t0 < i / rate)
				;
		cudaLaunchKernel((const void *)flood_kernel, one, one, NULL, 0, s);
		made[id]++;
	}
	return NULL;
}
int main(int argc, char **argv) {
	if (argc < 3) {
		fprintf(stderr, "usage: flood THREADS N [RATE]\n");
		return 2;
	}
	int t = atoi(argv[1]);
	n = atol(argv[2]);
	rate = argc > 3 ? atof(argv[3]) : 0;
	if (t < 1 || t > 256)
		t = 1;
	void *p;
	char line[16];
	cudaMalloc(&p, 16);
	cudaFree(p);
	printf("ready\n"); fflush(stdout);
	if (!fgets(line, sizeof line, stdin)) return 1;
	pthread_t th[256];
	for (long i = 0; i < t; i++) pthread_create(&th[i], NULL, run, (void *)i);
	if (n == 0) { while (fgets(line, sizeof line, stdin)) ; stop = 1; }
	long total = 0;
	for (int i = 0; i < t; i++) { pthread_join(th[i], NULL); total += made[i]; }
	printf("%ld\n", total);
	return 0;
}
