/* rp_oom_exit.c - a program that checks its error codes and exits with a
 * status of its own (as samples do with EXIT_WAIVED): it fills the device
 * in 64 MiB steps until cudaMalloc fails, reports how many fit and the
 * error, frees half, allocates again, and exits 3. The count must be the
 * same with and without vramtrace (a drop-in allocator must not run out
 * earlier), and so must the status. */
#include "realprog.h"

#define STEP (64u << 20)

int main(void)
{
    void *p[1024];
    int n = 0;
    cudaError_t e = cudaSuccess;
    while (n < 1024 && (e = cudaMalloc(&p[n], STEP)) == cudaSuccess)
        n++;
    printf("fit %d blocks of 64 MiB, then %s\n", n, cudaGetErrorName(e));
    printf("last error %s, then %s\n", cudaGetErrorName(cudaGetLastError()),
           cudaGetErrorName(cudaGetLastError()));
    for (int i = 0; i < n; i += 2)
        CHECK(cudaFree(p[i]));
    int again = 0;
    for (int i = 0; i < n; i += 2, again++)
        CHECK(cudaMalloc(&p[i], STEP));
    printf("allocated %d again after freeing half\n", again);
    for (int i = 0; i < n; i++)
        CHECK(cudaFree(p[i]));
    return 3;
}
