/*
 * tests/replay/streams_prog.c - streams that come and go, and a cache that
 * is emptied: what a replay must do at the same points to give the same
 * segments back.
 *
 * Three non-blocking streams each allocate a big block and an 8 MiB one
 * (cudaMallocAsync). Stream 0 frees both and is destroyed: its segments go
 * back at the destruction. Stream 1 frees its big block and is destroyed
 * with the 8 MiB one still live: its big segment goes back at once, the
 * other when that block is freed (a plain cudaFree, complete at the next
 * cudaDeviceSynchronize). Then a 100 MiB block
 * on the legacy stream, which fits beside stream 2's segments only because
 * the destroyed streams' memory went back. Then stream 2 frees its blocks,
 * the cache is emptied (vt_empty_cache, found in the preloaded vramtrace
 * library), and a new allocation needs a new segment.
 *
 * Prints "streams: ok", or what failed and exits 3.
 */
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

#define MIB ((size_t)1 << 20)

static void check(cudaError_t e, const char *what)
{
    if (e != cudaSuccess) {
        printf("streams: %s failed: %d\n", what, (int)e);
        exit(3);
    }
}

int main(void)
{
    int (*empty_cache)(int);
    *(void **)&empty_cache = dlsym(RTLD_DEFAULT, "vt_empty_cache");   /* POSIX's idiom */
    if (!empty_cache) {
        printf("streams: vt_empty_cache not found (run under vramtrace)\n");
        return 3;
    }
    cudaStream_t s[3];
    void *p[3][2];
    for (int i = 0; i < 3; i++) {
        check(cudaStreamCreateWithFlags(&s[i], cudaStreamNonBlocking), "cudaStreamCreate");
        check(cudaMallocAsync(&p[i][0], (30 + 20 * (size_t)i) * MIB, s[i]), "cudaMallocAsync");
        check(cudaMallocAsync(&p[i][1], 8 * MIB, s[i]), "cudaMallocAsync");
    }
    check(cudaFreeAsync(p[0][0], s[0]), "cudaFreeAsync");
    check(cudaFreeAsync(p[0][1], s[0]), "cudaFreeAsync");
    check(cudaStreamSynchronize(s[0]), "cudaStreamSynchronize");
    check(cudaStreamDestroy(s[0]), "cudaStreamDestroy");
    check(cudaFreeAsync(p[1][0], s[1]), "cudaFreeAsync");
    check(cudaStreamSynchronize(s[1]), "cudaStreamSynchronize");
    check(cudaStreamDestroy(s[1]), "cudaStreamDestroy");
    check(cudaFree(p[1][1]), "cudaFree");
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");   /* that free is complete */
    void *big = NULL;
    check(cudaMalloc(&big, 100 * MIB), "cudaMalloc");
    check(cudaFreeAsync(p[2][0], s[2]), "cudaFreeAsync");
    check(cudaFreeAsync(p[2][1], s[2]), "cudaFreeAsync");
    check(cudaStreamSynchronize(s[2]), "cudaStreamSynchronize");
    check(cudaFree(big), "cudaFree");
    if (empty_cache(0) != 0) {
        printf("streams: vt_empty_cache failed\n");
        return 3;
    }
    void *q = NULL;
    check(cudaMallocAsync(&q, 40 * MIB, s[2]), "cudaMallocAsync");
    check(cudaFreeAsync(q, s[2]), "cudaFreeAsync");
    check(cudaStreamSynchronize(s[2]), "cudaStreamSynchronize");
    check(cudaStreamDestroy(s[2]), "cudaStreamDestroy");
    printf("streams: ok\n");
    return 0;
}
