/* tests/hooks/prog_misc.c - unmodified runtime-API programs for the edge cases.
 *
 *   prog_misc race      cudaFree of a buffer a non-blocking stream writes into
 *                       50 ms later; a cudaMalloc + write on another stream
 *                       meanwhile must come back intact
 *   prog_misc badfree   foreign, interior and double frees: print the codes
 *   prog_misc pending   destroy a stream whose freed block is still pending
 * Output must be identical with and without libvramtrace preloaded.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>

#include "hk_stats.h"

#define CK(x)                                                                  \
    do {                                                                       \
        cudaError_t e_ = (x);                                                  \
        if (e_ != cudaSuccess) {                                               \
            printf("%s failed: %d\n", #x, (int)e_);                            \
            return 1;                                                          \
        }                                                                      \
    } while (0)

static void CUDART_CB sleep_50ms(void *arg)
{
    (void)arg;
    struct timespec ts = { 0, 50 * 1000 * 1000 };
    nanosleep(&ts, NULL);
}

static int count_not(const unsigned char *b, size_t n, unsigned char v)
{
    int bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += b[i] != v;
    return bad;
}

static int race(void)
{
    const size_t n = 256 * 1024;
    unsigned char *h = malloc(n);
    cudaStream_t s1, s2;
    CK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
    long allocs = 0;
    int corrupted = 0;
    for (int round = 0; round < 3; round++) {
        void *a = NULL, *b = NULL;
        CK(cudaMalloc(&a, n));
        allocs++;
        /* s1: 50 ms of "kernel", then it writes 0xAA into a. */
        CK(cudaLaunchHostFunc(s1, sleep_50ms, NULL));
        CK(cudaMemsetAsync(a, 0xAA, n, s1));
        CK(cudaFree(a));                 /* CUDA waits; the cache must fence */
        CK(cudaMalloc(&b, n));           /* same size: a's block if unfenced */
        allocs++;
        CK(cudaMemsetAsync(b, 0x55, n, s2));
        CK(cudaStreamSynchronize(s2));
        CK(cudaDeviceSynchronize());     /* s1's late write has landed by now */
        CK(cudaMemcpy(h, b, n, cudaMemcpyDeviceToHost));
        corrupted += count_not(h, n, 0x55);
        CK(cudaFree(b));
    }
    printf("race: corrupted bytes=%d\n", corrupted);
    CK(cudaStreamDestroy(s1));
    CK(cudaStreamDestroy(s2));
    hk_report_stats(allocs);
    free(h);
    return 0;
}

static int badfree(void)
{
    void *p = NULL, *q = NULL;
    CK(cudaMalloc(&p, 4096));
    CK(cudaMalloc(&q, 1 << 20));
    int host_var = 0;
    printf("foreign device-range pointer: %d\n", (int)cudaFree((void *)(uintptr_t)0x1000));
    printf("host pointer: %d\n", (int)cudaFree(&host_var));
    printf("interior pointer: %d\n", (int)cudaFree((char *)p + 256));
    printf("first free: %d\n", (int)cudaFree(p));
    printf("double free: %d\n", (int)cudaFree(p));
    printf("free of a live neighbour: %d\n", (int)cudaFree(q));
    cudaStream_t s;
    CK(cudaStreamCreate(&s));
    void *r = NULL;
    CK(cudaMallocAsync(&r, 1000, s));
    printf("interior async free: %d\n", (int)cudaFreeAsync((char *)r + 8, s));
    printf("async free: %d\n", (int)cudaFreeAsync(r, s));
    CK(cudaStreamSynchronize(s));
    printf("NULL free: %d\n", (int)cudaFree(NULL));
    CK(cudaStreamDestroy(s));
    hk_report_stats(3);
    return 0;
}

/* A block freed on a stream whose work is still running, then the stream is
 * destroyed at once: the block must come back once the work is done, and the
 * late write must not land in a block handed out meanwhile. */
static int pending(void)
{
    const size_t n = 64 * 1024;
    unsigned char *h = malloc(n);
    long allocs = 0;
    int corrupted = 0;
    for (int round = 0; round < 3; round++) {
        cudaStream_t s;
        void *a = NULL, *b = NULL;
        CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
        CK(cudaMallocAsync(&a, n, s));
        allocs++;
        CK(cudaLaunchHostFunc(s, sleep_50ms, NULL));
        CK(cudaMemsetAsync(a, 0xAA, n, s));
        CK(cudaFreeAsync(a, s));
        CK(cudaStreamDestroy(s));
        CK(cudaMalloc(&b, n));
        allocs++;
        CK(cudaMemset(b, 0x33, n));
        CK(cudaDeviceSynchronize());
        CK(cudaMemcpy(h, b, n, cudaMemcpyDeviceToHost));
        corrupted += count_not(h, n, 0x33);
        CK(cudaFree(b));
    }
    printf("pending: corrupted bytes=%d\n", corrupted);
    hk_report_stats(allocs);
    free(h);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: prog_misc race|badfree|pending\n");
        return 2;
    }
    if (!strcmp(argv[1], "race"))
        return race();
    if (!strcmp(argv[1], "badfree"))
        return badfree();
    if (!strcmp(argv[1], "pending"))
        return pending();
    fprintf(stderr, "prog_misc: unknown mode %s\n", argv[1]);
    return 2;
}
