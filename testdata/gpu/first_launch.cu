// A program whose first CUDA call is a kernel launch: the runtime loads
// and initializes the driver inside it. cudatap must count 240 launches.
#include <cstdio>
__global__ void k(int *p) { if (p) *p = 1; }
int main() {
	for (int i = 0; i < 240; i++)
		k<<<1, 1>>>(nullptr);
	cudaError_t e = cudaDeviceSynchronize();
	printf("{\"launches\":240,\"status\":%d}\n", (int)e);
	return e != cudaSuccess;
}
