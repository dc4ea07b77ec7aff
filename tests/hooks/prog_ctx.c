/* tests/hooks/prog_ctx.c - programs that mix the runtime and the driver API:
 * the context state each call leaves behind must be the same with and
 * without libvramtrace preloaded (run_shapes.py compares the output).
 *
 *   prog_ctx runtime   cudaMalloc (or cudaFree, cudaMallocAsync) is the
 *                      thread's first CUDA call, then driver code uses the
 *                      context the runtime made current (cuCtxGetCurrent,
 *                      cuMemcpyHtoD_v2 on the pointer): on the main thread,
 *                      on fresh threads (cache hits), after the program
 *                      unset its context, on a second device
 *   prog_ctx driver    cuMemAlloc_v2 / cuMemFree_v2 (and cuMemFreeAsync on
 *                      the context's own streams) before cuInit, with no
 *                      current context (also when the cache could serve
 *                      them: allocations fail, a free of a valid pointer
 *                      works, as on a real driver), with the primary
 *                      context current, per thread
 *   prog_ctx stream    cuMemAllocAsync / cuMemFreeAsync (and _ptsz) on a
 *                      created stream with no current context (the stream
 *                      carries its context: they work), on the default
 *                      streams without one (INVALID_CONTEXT), on a stream of
 *                      device 1 while device 0's context is current (the
 *                      memory is device 1's)
 *
 * The runtime mode runs with SIMCUDA_DEVICES=2.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda.h>
#include <cuda_runtime_api.h>

#include "hk_stats.h"

#define N (1u << 20)

static long allocs;

/* What driver code finds after a runtime call: a current context (is it
 * `want`?), its device, and whether a copy to `p` and back works. */
static void driver_view(const char *what, void *p, CUcontext want)
{
    CUcontext c = NULL;
    CUresult rc = cuCtxGetCurrent(&c);
    CUdevice dev = -1;
    CUresult rd = cuCtxGetDevice(&dev);
    printf("%s: cuCtxGetCurrent=%d ctx=%s", what, (int)rc,
           !c ? "NULL" : want == NULL ? "set" : c == want ? "same" : "other");
    printf(" cuCtxGetDevice=%d dev=%d", (int)rd, rd == CUDA_SUCCESS ? (int)dev : -1);
    if (p) {
        static unsigned char h[4096], back[4096];
        memset(h, 0x5A, sizeof h);
        memset(back, 0, sizeof back);
        CUresult r1 = cuMemcpyHtoD_v2((CUdeviceptr)(uintptr_t)p, h, sizeof h);
        CUresult r2 = cuMemcpyDtoH_v2(back, (CUdeviceptr)(uintptr_t)p, sizeof back);
        int ord = -1;
        CUresult r3 = cuPointerGetAttribute(&ord, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                            (CUdeviceptr)(uintptr_t)p);
        printf(" HtoD=%d DtoH=%d same=%d ptr_dev=%d(%d)", (int)r1, (int)r2,
               memcmp(h, back, sizeof h) == 0, ord, (int)r3);
    }
    printf("\n");
}

static CUcontext main_ctx;

static void *thread_malloc(void *arg)
{
    (void)arg;
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, N);   /* first call of this thread */
    allocs++;
    printf("thread cudaMalloc=%d\n", (int)e);
    driver_view("thread after cudaMalloc", p, main_ctx);
    printf("thread cudaFree=%d\n", (int)cudaFree(p));
    return NULL;
}

static void *thread_free(void *arg)
{
    cudaError_t e = cudaFree(arg);       /* first call of this thread */
    printf("thread cudaFree=%d\n", (int)e);
    driver_view("thread after cudaFree", NULL, main_ctx);
    return NULL;
}

static void *thread_malloc_async(void *arg)
{
    (void)arg;
    void *p = NULL;
    cudaError_t e = cudaMallocAsync(&p, N, 0);
    allocs++;
    printf("thread cudaMallocAsync=%d\n", (int)e);
    driver_view("thread after cudaMallocAsync", p, main_ctx);
    printf("thread cudaFreeAsync=%d\n", (int)cudaFreeAsync(p, 0));
    printf("thread cudaStreamSynchronize=%d\n", (int)cudaStreamSynchronize(0));
    return NULL;
}

/* A thread whose device is 1 and that unset its context: cudaMalloc makes
 * device 1's primary context current and allocates there. */
static void *thread_device1(void *arg)
{
    (void)arg;
    printf("dev1 cudaSetDevice=%d\n", (int)cudaSetDevice(1));
    CUcontext c1 = NULL;
    cuCtxGetCurrent(&c1);
    printf("dev1 cuCtxSetCurrent(NULL)=%d\n", (int)cuCtxSetCurrent(NULL));
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, N);
    allocs++;
    printf("dev1 cudaMalloc=%d\n", (int)e);
    driver_view("dev1 after cudaMalloc", p, c1);
    printf("dev1 cuCtxSetCurrent(NULL)=%d\n", (int)cuCtxSetCurrent(NULL));
    printf("dev1 cudaFree=%d\n", (int)cudaFree(p));
    driver_view("dev1 after cudaFree", NULL, c1);
    return NULL;
}

static void run_thread(void *(*fn)(void *), void *arg)
{
    pthread_t t;
    if (pthread_create(&t, NULL, fn, arg) == 0)
        pthread_join(t, NULL);
}

static int runtime_mode(void)
{
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, N);   /* the process's first CUDA call */
    allocs++;
    printf("cudaMalloc=%d\n", (int)e);
    if (e != cudaSuccess)
        return 1;
    cuCtxGetCurrent(&main_ctx);
    driver_view("after first cudaMalloc", p, NULL);
    printf("cudaFree=%d\n", (int)cudaFree(p));
    driver_view("after cudaFree", NULL, main_ctx);

    run_thread(thread_malloc, NULL);     /* served from the cache */

    void *q = NULL;
    printf("cudaMalloc=%d\n", (int)cudaMalloc(&q, N));
    allocs++;
    run_thread(thread_free, q);

    run_thread(thread_malloc_async, NULL);

    /* The program unsets its context; the next runtime call restores it. */
    printf("cuCtxSetCurrent(NULL)=%d\n", (int)cuCtxSetCurrent(NULL));
    driver_view("unset", NULL, main_ctx);
    printf("cudaMalloc=%d\n", (int)cudaMalloc(&p, N));
    allocs++;
    driver_view("after cudaMalloc again", p, main_ctx);
    CUcontext popped = NULL;
    printf("cuCtxPopCurrent=%d\n", (int)cuCtxPopCurrent_v2(&popped));
    printf("cudaFree=%d\n", (int)cudaFree(p));
    driver_view("after cudaFree again", NULL, main_ctx);

    int n = 0;
    cudaGetDeviceCount(&n);
    if (n > 1)
        run_thread(thread_device1, NULL);
    else
        printf("one device\n");
    printf("cudaDeviceSynchronize=%d\n", (int)cudaDeviceSynchronize());
    hk_report_stats(allocs);
    return 0;
}

/* ---- driver API ------------------------------------------------------------ */

static void *thread_no_ctx(void *arg)
{
    (void)arg;
    CUdeviceptr d = 0;
    printf("thread cuMemAlloc_v2=%d ptr=%s\n", (int)cuMemAlloc_v2(&d, N), d ? "set" : "0");
    return NULL;
}

static int driver_mode(void)
{
    CUdeviceptr a = 0, b = 0, c = 0;
    printf("before cuInit: cuMemAlloc_v2=%d\n", (int)cuMemAlloc_v2(&a, N));
    printf("before cuInit: cuMemFree_v2=%d\n", (int)cuMemFree_v2((CUdeviceptr)0x1000));
    printf("cuInit=%d\n", (int)cuInit(0));
    printf("no ctx: cuMemAlloc_v2=%d ptr=%s\n", (int)cuMemAlloc_v2(&a, N), a ? "set" : "0");
    size_t fr = 0, tot = 0;
    printf("no ctx: cuMemGetInfo_v2=%d\n", (int)cuMemGetInfo_v2(&fr, &tot));

    CUdevice dev;
    CUcontext pc = NULL;
    if (cuDeviceGet(&dev, 0) != CUDA_SUCCESS || cuDevicePrimaryCtxRetain(&pc, dev) != CUDA_SUCCESS)
        return 1;
    printf("cuCtxSetCurrent(primary)=%d\n", (int)cuCtxSetCurrent(pc));
    printf("cuMemAlloc_v2=%d\n", (int)cuMemAlloc_v2(&a, N));
    allocs++;
    unsigned char h[256];
    memset(h, 7, sizeof h);
    printf("cuMemcpyHtoD_v2=%d\n", (int)cuMemcpyHtoD_v2(a, h, sizeof h));
    printf("cuMemFree_v2=%d\n", (int)cuMemFree_v2(a));
    printf("cuMemAlloc_v2=%d\n", (int)cuMemAlloc_v2(&b, N));   /* a cache hit */
    allocs++;
    printf("cuMemAlloc_v2=%d\n", (int)cuMemAlloc_v2(&c, N));
    allocs++;
    printf("cuMemFree_v2=%d\n", (int)cuMemFree_v2(b));         /* cache holds a block */

    /* No context again: the cache could serve the allocation, the driver
     * refuses it (and stream-ordered frees on the default streams, which
     * name the current context); cuMemFree_v2 of a valid pointer works
     * without a context (seen on an NVIDIA H200, driver 580.159.04:
     * tests/gpucheck/driver_facts.real, fact no_context_calls), and a
     * second free of it is CUDA_ERROR_INVALID_VALUE. */
    printf("cuCtxSetCurrent(NULL)=%d\n", (int)cuCtxSetCurrent(NULL));
    CUdeviceptr x = 0;
    printf("no ctx: cuMemAlloc_v2=%d ptr=%s\n", (int)cuMemAlloc_v2(&x, N), x ? "set" : "0");
    printf("no ctx: cuMemFreeAsync(legacy)=%d\n", (int)cuMemFreeAsync(c, CU_STREAM_LEGACY));
    printf("no ctx: cuMemFreeAsync(0)=%d\n", (int)cuMemFreeAsync(c, NULL));
    printf("no ctx: cuMemFree_v2=%d\n", (int)cuMemFree_v2(c));
    run_thread(thread_no_ctx, NULL);

    printf("cuCtxSetCurrent(primary)=%d\n", (int)cuCtxSetCurrent(pc));
    printf("cuMemFree_v2 again=%d\n", (int)cuMemFree_v2(c));   /* freed already */
    printf("cuCtxSynchronize=%d\n", (int)cuCtxSynchronize());
    hk_report_stats(allocs);
    return 0;
}

/* ---- stream-ordered calls: the stream's context, not the current one ------ */

CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream);
CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream);

/* Write through p, read it back, and say on which device it lives. */
static void use(const char *what, CUdeviceptr p)
{
    static unsigned char h[4096], back[4096];
    memset(h, 0x3C, sizeof h);
    memset(back, 0, sizeof back);
    CUresult r1 = cuMemcpyHtoD_v2(p, h, sizeof h);
    CUresult r2 = cuMemcpyDtoH_v2(back, p, sizeof back);
    int ord = -1;
    CUresult r3 = cuPointerGetAttribute(&ord, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, p);
    printf("%s: HtoD=%d DtoH=%d same=%d ptr_dev=%d(%d)\n", what, (int)r1, (int)r2,
           memcmp(h, back, sizeof h) == 0, ord, (int)r3);
}

static CUstream shared_stream;

/* A thread that never had a context: the created stream is enough. */
static void *thread_stream_no_ctx(void *arg)
{
    (void)arg;
    CUdeviceptr d = 0;
    CUresult r = cuMemAllocAsync(&d, N, shared_stream);
    printf("thread no ctx: cuMemAllocAsync(stream)=%d ptr=%s\n", (int)r, d ? "set" : "0");
    if (r == CUDA_SUCCESS) {
        allocs++;
        printf("thread no ctx: cuMemFreeAsync(stream)=%d\n", (int)cuMemFreeAsync(d, shared_stream));
    }
    printf("thread no ctx: cuMemAllocAsync(legacy)=%d\n",
           (int)cuMemAllocAsync(&d, N, CU_STREAM_LEGACY));
    CUcontext c = (CUcontext)1;
    cuCtxGetCurrent(&c);
    printf("thread no ctx: ctx after=%s\n", c ? "set" : "NULL");
    return NULL;
}

static int stream_mode(void)
{
    printf("cuInit=%d\n", (int)cuInit(0));
    CUdevice dev0, dev1;
    CUcontext pc0 = NULL, pc1 = NULL;
    if (cuDeviceGet(&dev0, 0) != CUDA_SUCCESS || cuDevicePrimaryCtxRetain(&pc0, dev0) != CUDA_SUCCESS)
        return 1;
    printf("cuCtxSetCurrent(primary)=%d\n", (int)cuCtxSetCurrent(pc0));
    CUstream st = NULL;
    printf("cuStreamCreate=%d\n", (int)cuStreamCreate(&st, CU_STREAM_NON_BLOCKING));
    shared_stream = st;
    printf("cuCtxSetCurrent(NULL)=%d\n", (int)cuCtxSetCurrent(NULL));

    CUdeviceptr a = 0, b = 0, x = 0;
    CUresult r = cuMemAllocAsync(&a, N, st);
    printf("no ctx: cuMemAllocAsync(stream)=%d ptr=%s\n", (int)r, a ? "set" : "0");
    allocs += r == CUDA_SUCCESS;
    r = cuMemAllocAsync_ptsz(&b, N, st);
    printf("no ctx: cuMemAllocAsync_ptsz(stream)=%d ptr=%s\n", (int)r, b ? "set" : "0");
    allocs += r == CUDA_SUCCESS;
    printf("no ctx: cuMemAllocAsync(legacy)=%d ptr=%s\n",
           (int)cuMemAllocAsync(&x, N, CU_STREAM_LEGACY), x ? "set" : "0");
    printf("no ctx: cuMemAllocAsync(0)=%d\n", (int)cuMemAllocAsync(&x, N, NULL));
    printf("no ctx: cuMemAllocAsync(per-thread)=%d\n",
           (int)cuMemAllocAsync(&x, N, CU_STREAM_PER_THREAD));
    printf("no ctx: cuMemAllocAsync_ptsz(0)=%d\n", (int)cuMemAllocAsync_ptsz(&x, N, NULL));
    printf("no ctx: cuStreamSynchronize(stream)=%d\n", (int)cuStreamSynchronize(st));
    CUcontext c = (CUcontext)1;
    cuCtxGetCurrent(&c);
    printf("no ctx: ctx after=%s\n", c ? "set" : "NULL");   /* nothing made one current */

    printf("cuCtxSetCurrent(primary)=%d\n", (int)cuCtxSetCurrent(pc0));
    if (a)
        use("a with ctx", a);
    if (b)
        use("b with ctx", b);
    printf("cuCtxSetCurrent(NULL)=%d\n", (int)cuCtxSetCurrent(NULL));
    printf("no ctx: cuMemFreeAsync(legacy)=%d\n", (int)cuMemFreeAsync(a, CU_STREAM_LEGACY));
    printf("no ctx: cuMemFreeAsync_ptsz(0)=%d\n", (int)cuMemFreeAsync_ptsz(a, NULL));
    printf("no ctx: cuMemFreeAsync(stream)=%d\n", (int)cuMemFreeAsync(a, st));
    printf("no ctx: cuMemFreeAsync_ptsz(stream)=%d\n", (int)cuMemFreeAsync_ptsz(b, st));
    printf("no ctx: cuStreamSynchronize(stream)=%d\n", (int)cuStreamSynchronize(st));

    run_thread(thread_stream_no_ctx, NULL);   /* the cache can serve it now */

    /* A stream of device 1 while device 0's context is current: the
     * stream's device wins. */
    int n = 0;
    cuDeviceGetCount(&n);
    if (n > 1 && cuDeviceGet(&dev1, 1) == CUDA_SUCCESS
        && cuDevicePrimaryCtxRetain(&pc1, dev1) == CUDA_SUCCESS) {
        CUstream s1 = NULL;
        printf("cuCtxSetCurrent(dev1)=%d\n", (int)cuCtxSetCurrent(pc1));
        printf("dev1 cuStreamCreate=%d\n", (int)cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING));
        printf("cuCtxSetCurrent(dev0)=%d\n", (int)cuCtxSetCurrent(pc0));
        CUdeviceptr d1 = 0;
        r = cuMemAllocAsync(&d1, N, s1);
        printf("dev0 ctx: cuMemAllocAsync(dev1 stream)=%d\n", (int)r);
        allocs += r == CUDA_SUCCESS;
        printf("dev0 ctx: cuStreamSynchronize(dev1 stream)=%d\n", (int)cuStreamSynchronize(s1));
        if (r == CUDA_SUCCESS)
            use("dev1 stream alloc", d1);
        printf("dev0 ctx: cuMemFreeAsync(dev1 stream)=%d\n", (int)cuMemFreeAsync(d1, s1));
        printf("dev0 ctx: cuStreamSynchronize(dev1 stream)=%d\n", (int)cuStreamSynchronize(s1));
        printf("cuCtxSetCurrent(dev1)=%d\n", (int)cuCtxSetCurrent(pc1));
        printf("dev1 cuStreamDestroy=%d\n", (int)cuStreamDestroy_v2(s1));
    } else {
        printf("one device\n");
    }

    printf("cuCtxSetCurrent(primary)=%d\n", (int)cuCtxSetCurrent(pc0));
    printf("cuStreamDestroy=%d\n", (int)cuStreamDestroy_v2(st));
    printf("cuCtxSynchronize=%d\n", (int)cuCtxSynchronize());
    hk_report_stats(allocs);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 2 && !strcmp(argv[1], "stream"))
        return stream_mode();
    if (argc == 2 && !strcmp(argv[1], "runtime"))
        return runtime_mode();
    if (argc == 2 && !strcmp(argv[1], "driver"))
        return driver_mode();
    fprintf(stderr, "usage: prog_ctx runtime|driver|stream\n");
    return 2;
}
