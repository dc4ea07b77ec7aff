/* tests/hooks/prog_loop.c - an unmodified CUDA program, built in every shape.
 *
 * Allocates and frees in a loop (plain and stream-ordered), writes each
 * buffer with a memset and reads it back, and prints what it read: the
 * output must be the same with and without libvramtrace preloaded.
 *   SHAPE_RT      runtime API (linked with a shared or a static libcudart)
 *   SHAPE_DRV     driver API, linked with libcuda.so.1
 *   SHAPE_DLOPEN  driver API through dlopen("libcuda.so.1") + dlsym, as
 *                 Rust's cudarc does (cuMemAllocAsync / cuMemAlloc_v2)
 * Counters go to $HOOKS_STATS (hk_stats.h).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hk_check.h"
#include "hk_stats.h"

#define N_ITER 300

static size_t size_of(int i)
{
    if (i % 50 == 49)
        return (size_t)3 << 20;                    /* large pool too */
    return (size_t)((i * 7919) % 64 + 1) * 1024 + (size_t)(i % 3) * 100;
}

static unsigned char *host_buf;

/* Sum of the bytes read back and the count of bytes that differ from v. */
static void check(size_t n, int v, unsigned long long *sum, long *bad)
{
    for (size_t k = 0; k < n; k++) {
        *sum += host_buf[k];
        if (host_buf[k] != (unsigned char)v)
            (*bad)++;
    }
}

#if defined(SHAPE_RT)
#include <cuda_runtime_api.h>

#define CK(x) HK_CHECK(cudaError_t, cudaSuccess, x, return 1)

int main(void)
{
    host_buf = malloc((size_t)4 << 20);
    unsigned long long sum = 0;
    long bad = 0, allocs = 0;
    for (int i = 0; i < N_ITER; i++) {
        void *p = NULL;
        size_t n = size_of(i);
        CK(cudaMalloc(&p, n));
        allocs++;
        CK(cudaMemset(p, i & 0xff, n));
        CK(cudaMemcpy(host_buf, p, n, cudaMemcpyDeviceToHost));
        check(n, i & 0xff, &sum, &bad);
        CK(cudaFree(p));
    }
    printf("sync: iterations=%d sum=%llu bad=%ld\n", N_ITER, sum, bad);

    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    sum = 0;
    bad = 0;
    for (int i = 0; i < N_ITER; i++) {
        void *p = NULL;
        size_t n = size_of(i + 7);
        CK(cudaMallocAsync(&p, n, s));
        allocs++;
        CK(cudaMemsetAsync(p, (i * 3) & 0xff, n, s));
        CK(cudaMemcpyAsync(host_buf, p, n, cudaMemcpyDeviceToHost, s));
        CK(cudaFreeAsync(p, s));
        CK(cudaStreamSynchronize(s));
        check(n, (i * 3) & 0xff, &sum, &bad);
    }
    printf("async: iterations=%d sum=%llu bad=%ld\n", N_ITER, sum, bad);
    CK(cudaStreamDestroy(s));

    size_t fr = 0, total = 0;
    CK(cudaMemGetInfo(&fr, &total));
    printf("meminfo: %s\n", fr <= total && total > 0 ? "ok" : "inconsistent");
    hk_report_stats(allocs);
    free(host_buf);
    return 0;
}

#else /* driver API shapes */
#include <cuda.h>

#if defined(SHAPE_DLOPEN)
/* What cudarc does: load the library, look each entry point up by its ABI name. */
#define DRV_FUNCS(X)                                                           \
    X(cuInit) X(cuDeviceGet) X(cuDevicePrimaryCtxRetain) X(cuCtxSetCurrent)    \
    X(cuMemAlloc_v2) X(cuMemFree_v2) X(cuMemsetD8_v2) X(cuMemcpyDtoH_v2)       \
    X(cuStreamCreate) X(cuStreamDestroy_v2) X(cuMemAllocAsync)                 \
    X(cuMemFreeAsync) X(cuMemsetD8Async) X(cuMemcpyDtoHAsync_v2)               \
    X(cuStreamSynchronize) X(cuMemGetInfo_v2)
#define DECL(name) static __typeof__(&name) p_##name;
DRV_FUNCS(DECL)
#define F(name) p_##name

static int load(void)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        printf("dlopen libcuda.so.1 failed\n");
        return -1;
    }
#define LOAD(name)                                                             \
    if (!(*(void **)&p_##name = dlsym(h, #name))) {                            \
        printf("dlsym %s failed\n", #name);                                    \
        return -1;                                                             \
    }
    DRV_FUNCS(LOAD)
    return 0;
}
#else
#define F(name) name
static int load(void) { return 0; }
#endif

#define CK(x) HK_CHECK(CUresult, CUDA_SUCCESS, x, return 1)

int main(void)
{
    if (load() != 0)
        return 1;
    host_buf = malloc((size_t)4 << 20);
    CUdevice dev;
    CUcontext ctx;
    CK(F(cuInit)(0));
    CK(F(cuDeviceGet)(&dev, 0));
    CK(F(cuDevicePrimaryCtxRetain)(&ctx, dev));
    CK(F(cuCtxSetCurrent)(ctx));
    unsigned long long sum = 0;
    long bad = 0, allocs = 0;
    for (int i = 0; i < N_ITER; i++) {
        CUdeviceptr p = 0;
        size_t n = size_of(i);
        CK(F(cuMemAlloc_v2)(&p, n));
        allocs++;
        CK(F(cuMemsetD8_v2)(p, (unsigned char)(i & 0xff), n));
        CK(F(cuMemcpyDtoH_v2)(host_buf, p, n));
        check(n, i & 0xff, &sum, &bad);
        CK(F(cuMemFree_v2)(p));
    }
    printf("sync: iterations=%d sum=%llu bad=%ld\n", N_ITER, sum, bad);

    CUstream s;
    CK(F(cuStreamCreate)(&s, CU_STREAM_NON_BLOCKING));
    sum = 0;
    bad = 0;
    for (int i = 0; i < N_ITER; i++) {
        CUdeviceptr p = 0;
        size_t n = size_of(i + 7);
        CK(F(cuMemAllocAsync)(&p, n, s));
        allocs++;
        CK(F(cuMemsetD8Async)(p, (unsigned char)((i * 3) & 0xff), n, s));
        CK(F(cuMemcpyDtoHAsync_v2)(host_buf, p, n, s));
        CK(F(cuMemFreeAsync)(p, s));
        CK(F(cuStreamSynchronize)(s));
        check(n, (i * 3) & 0xff, &sum, &bad);
    }
    printf("async: iterations=%d sum=%llu bad=%ld\n", N_ITER, sum, bad);
    CK(F(cuStreamDestroy_v2)(s));

    size_t fr = 0, total = 0;
    CK(F(cuMemGetInfo_v2)(&fr, &total));
    printf("meminfo: %s\n", fr <= total && total > 0 ? "ok" : "inconsistent");
    hk_report_stats(allocs);
    free(host_buf);
    return 0;
}
#endif
