/* tests/hooks/prog_fill.c - fill the device until cudaMalloc fails.
 *
 *   prog_fill SIZE_KIB   cudaMalloc blocks of SIZE_KIB until out of memory,
 *                        then what cudaMemGetInfo calls free must be
 *                        allocatable at once; free every other block and
 *                        fill again
 *   prog_fill mixed      the same with a repeating mix of sizes
 * Run on a small simulated device (SIMCUDA_MEM=1G): a program that fits
 * without vramtrace must fit with it, block for block (same output).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "hk_stats.h"

#define MAXB 100000
#define KiB ((size_t)1 << 10)

static void *blocks[MAXB];
static long allocs;

static size_t size_of(long i, size_t kib)
{
    static const size_t mix[] = { 7 * 1024, 3 * 1024, 5 * 1024, 1536, 512, 12 * 1024, 3 * 1024 };
    return (kib ? kib : mix[i % (long)(sizeof mix / sizeof mix[0])]) * KiB;
}

/* Allocate into the empty slots until the first failure. @return how many. */
static long fill(size_t kib)
{
    long n = 0;
    for (long i = 0; i < MAXB; i++) {
        if (blocks[i])
            continue;
        cudaError_t e = cudaMalloc(&blocks[i], size_of(i, kib));
        if (e != cudaSuccess) {
            blocks[i] = NULL;
            printf("  stops with error %d, last error %d\n", (int)e, (int)cudaGetLastError());
            break;
        }
        n++;
        allocs++;
    }
    return n;
}

/* What cudaMemGetInfo calls free, allocated in one piece. */
static void free_is_allocatable(void)
{
    size_t fr = 0, total = 0;
    if (cudaMemGetInfo(&fr, &total) != cudaSuccess) {
        printf("  cudaMemGetInfo failed\n");
        return;
    }
    void *p = NULL;
    cudaError_t e = fr ? cudaMalloc(&p, fr) : cudaSuccess;
    printf("  cudaMemGetInfo free is allocatable: %s\n", e == cudaSuccess ? "yes" : "no");
    (void)cudaGetLastError();
    if (p) {
        allocs++;
        cudaFree(p);
    }
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: prog_fill SIZE_KIB | mixed\n");
        return 2;
    }
    size_t kib = strcmp(argv[1], "mixed") ? strtoull(argv[1], NULL, 10) : 0;
    long n = fill(kib);
    printf("filled with %ld blocks\n", n);
    free_is_allocatable();
    long freed = 0;
    for (long i = 0; i < MAXB; i += 2)
        if (blocks[i]) {
            cudaFree(blocks[i]);
            blocks[i] = NULL;
            freed++;
        }
    printf("freed %ld, refilled with %ld blocks\n", freed, fill(kib));
    free_is_allocatable();
    for (long i = 0; i < MAXB; i++)
        if (blocks[i])
            cudaFree(blocks[i]);
    hk_report_stats(allocs);
    return 0;
}
