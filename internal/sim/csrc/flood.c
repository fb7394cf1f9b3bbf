/* flood: T threads, each on its own non-blocking stream, make N
 * cudaLaunchKernel calls as fast as they can (the simulated runtime does no
 * GPU work); with N = 0, until stdin closes. It prints "ready" once CUDA is
 * loaded, waits for a line on stdin, then prints the launches it made.
 * Usage: flood THREADS N  (a load generator for cudatap's benchmarks) */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include "cuda_sim.h"
void flood_kernel(void) {}
static long n;
static volatile int stop;
static long made[256];
static void *run(void *arg) {
	long id = (long)arg;
	cudaStream_t s;
	cudaStreamCreateWithFlags(&s, 1);
	dim3 one = {1, 1, 1};
	for (long i = 0; n == 0 ? !stop : i < n; i++) {
		cudaLaunchKernel((const void *)flood_kernel, one, one, NULL, 0, s);
		made[id]++;
	}
	return NULL;
}
int main(int argc, char **argv) {
	int t = atoi(argv[1]);
	n = atol(argv[2]);
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
