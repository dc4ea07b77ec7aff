/* tests/sim/test_sim_stream.c - work runs asynchronously, in stream order. */
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "simcuda.h"
#include "test_sim_held.h"
#include "test_sim_util.h"

TEST(host_func_runs_in_order_after_slow_write)
{
    cudaStream_t s;
    ASSERT_OK(cudaStreamCreate(&s));
    static int host_buf = 1;
    ASSERT_OK(launch_slow_store(s, &host_buf, 2, 50));
    ASSERT_EQ(cudaStreamQuery(s), cudaErrorNotReady);
    ASSERT_EQ(load_flag(&host_buf), 1);              /* the old value, meanwhile */
    ASSERT_OK(cudaStreamSynchronize(s));
    ASSERT_EQ(host_buf, 2);
    ASSERT_OK(cudaStreamQuery(s));
    ASSERT_OK(cudaStreamDestroy(s));
}

TEST(memset_memcpy_in_stream_order)
{
    cudaStream_t s = held_stream(cudaStreamDefault);
    const size_t n = 1 << 16;
    unsigned char *host = held_pinned(n);            /* pinned: the copy stays async */
    unsigned char *d = held_device(n), *d2 = held_device(n);
    static int gate;
    memset(host, 0x11, n);
    ASSERT_OK(launch_slow_store(s, &gate, 1, 30));   /* holds the queue back */
    ASSERT_OK(cudaMemsetAsync(d, 0xab, n, s));
    ASSERT_OK(cudaMemcpyAsync(d2, d, n, cudaMemcpyDeviceToDevice, s));
    ASSERT_OK(cudaMemsetAsync(d, 0x00, n, s));
    ASSERT_OK(cudaMemcpyAsync(host, d2, n, cudaMemcpyDeviceToHost, s));
    ASSERT_EQ(host[100], 0x11);                      /* nothing ran yet */
    ASSERT_OK(cudaStreamSynchronize(s));
    for (size_t i = 0; i < n; i++)
        ASSERT_EQ(host[i], 0xab);
    release_held();
}

/* "API synchronization behavior" (CUDA runtime API reference): an async copy
 * from pageable host memory returns once the source has been staged, so the
 * program may overwrite its buffer at once; the device-side copy still runs
 * in stream order. */
TEST(async_copy_from_pageable_memory_reads_the_source_at_the_call)
{
    cudaStream_t s = held_stream(cudaStreamNonBlocking);
    const size_t n = 1 << 16;
    unsigned char *d = held_device(n), *src = malloc(n), *back = malloc(n);
    ASSERT(src && back);
    ASSERT_OK(cudaMemset(d, 0, n));
    ASSERT_OK(cudaDeviceSynchronize());
    static int gate;
    ASSERT_OK(launch_slow_store(s, &gate, 1, 100));  /* holds the queue back */
    memset(src, 0x5a, n);
    ASSERT_OK(cudaMemcpyAsync(d, src, n, cudaMemcpyHostToDevice, s));
    ASSERT_EQ(load_flag(&gate), 0);                  /* returned before the stream ran */
    ASSERT_EQ(d[0], 0);                              /* device side not written yet */
    memset(src, 0xee, n);                            /* the program reuses its buffer */
    ASSERT_OK(cudaStreamSynchronize(s));
    ASSERT_OK(cudaMemcpy(back, d, n, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n; i++)
        ASSERT_EQ(back[i], 0x5a);
    free(src);
    free(back);
    release_held();
}

/* Same source: an async copy into pageable host memory returns when the copy
 * is done (after the stream's earlier work); into pinned memory it returns
 * at once. */
TEST(async_copy_to_pageable_memory_returns_when_done)
{
    cudaStream_t s = held_stream(cudaStreamNonBlocking);
    const size_t n = 1 << 16;
    unsigned char *pageable = malloc(n), *pinned = held_pinned(n);
    ASSERT(pageable != NULL);
    memset(pageable, 0x11, n);
    memset(pinned, 0x11, n);
    unsigned char *d = held_device(n);
    static int gate, gate2;
    ASSERT_OK(launch_slow_store(s, &gate, 1, 100));
    ASSERT_OK(cudaMemsetAsync(d, 0x77, n, s));
    ASSERT_OK(cudaMemcpyAsync(pageable, d, n, cudaMemcpyDeviceToHost, s));
    ASSERT_EQ(load_flag(&gate), 1);                  /* the earlier work ran first */
    for (size_t i = 0; i < n; i++)
        ASSERT_EQ(pageable[i], 0x77);
    ASSERT_OK(launch_slow_store(s, &gate2, 1, 100));
    ASSERT_OK(cudaMemcpyAsync(pinned, d, n, cudaMemcpyDeviceToHost, s));
    ASSERT_EQ(load_flag(&gate2), 0);                 /* pinned: still asynchronous */
    ASSERT_OK(cudaStreamSynchronize(s));
    ASSERT_EQ(pinned[n - 1], 0x77);
    /* host to host is synchronous whatever the memory */
    memset(pageable, 0x22, n);
    ASSERT_OK(cudaMemcpyAsync(pinned, pageable, n, cudaMemcpyHostToHost, s));
    ASSERT_EQ(pinned[5], 0x22);
    free(pageable);
    release_held();
}

typedef struct fifo_rec { int *log; int *next; int i; } fifo_rec;

static void CUDART_CB fifo_fn(void *arg)
{
    fifo_rec *r = arg;
    r->log[(*r->next)++] = r->i;                    /* one worker: no race */
}

TEST(host_funcs_run_in_fifo_order)
{
    cudaStream_t s;
    ASSERT_OK(cudaStreamCreate(&s));
    static int log[256], next;
    static fifo_rec recs[256];
    for (int i = 0; i < 256; i++) {
        recs[i] = (fifo_rec){ log, &next, i };
        ASSERT_OK(cudaLaunchHostFunc(s, fifo_fn, &recs[i]));
    }
    ASSERT_OK(cudaStreamSynchronize(s));
    ASSERT_EQ(next, 256);
    for (int i = 0; i < 256; i++)
        ASSERT_EQ(log[i], i);
    ASSERT_OK(cudaStreamDestroy(s));
}

TEST(destroyed_stream_finishes_its_work)
{
    cudaStream_t s;
    ASSERT_OK(cudaStreamCreate(&s));
    static int done;
    ASSERT_OK(launch_slow_store(s, &done, 7, 50));
    double t0 = now_ms();
    ASSERT_OK(cudaStreamDestroy(s));                 /* returns at once */
    ASSERT_LT(now_ms() - t0, 40);
    ASSERT_EQ(load_flag(&done), 0);
    ASSERT_OK(cudaDeviceSynchronize());
    ASSERT_EQ(load_flag(&done), 7);
}

/* A destroyed stream's handle is dead for good: every later use is an
 * invalid handle and counted, never a read of freed memory nor (once the
 * memory is reused) another stream. */
TEST(destroyed_stream_handle_is_detected_on_every_use)
{
    cudaStream_t s, s2;
    CUevent ev;
    ASSERT_OK(cudaStreamCreate(&s));
    ASSERT_OK(cudaStreamDestroy(s));
    ASSERT_OK(cudaDeviceSynchronize());              /* its worker is gone too */
    ASSERT_OK(cudaStreamCreate(&s2));
    ASSERT_PTR_NE(s2, s);                            /* handles are not reused */
    simcuda_counters c;
    ASSERT_EQ(simcuda_stats(0, &c), 0);
    ASSERT_EQ(c.stale_stream_uses, 0);
    ASSERT_EQ(cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);
    ASSERT_EQ(cuEventRecord(ev, (CUstream)s), CUDA_ERROR_INVALID_HANDLE);
    ASSERT_EQ(cuStreamSynchronize((CUstream)s), CUDA_ERROR_INVALID_HANDLE);
    ASSERT_EQ(cudaStreamDestroy(s), cudaErrorInvalidResourceHandle);
    ASSERT_EQ(simcuda_stats(0, &c), 0);
    ASSERT_EQ(c.stale_stream_uses, 3);
    ASSERT_OK(cudaStreamDestroy(s2));
    ASSERT_OK(cuEventDestroy(ev));
}

TEST(free_async_is_stream_ordered)
{
    cudaStream_t s;
    ASSERT_OK(cudaStreamCreate(&s));
    simcuda_counters c0, c1;
    void *p;
    ASSERT_OK(cudaMallocAsync(&p, 1 << 20, s));
    ASSERT_EQ(simcuda_stats(0, &c0), 0);
    static int gate;
    ASSERT_OK(launch_slow_store(s, &gate, 1, 50));
    ASSERT_OK(cudaFreeAsync(p, s));
    ASSERT_EQ(cudaFreeAsync(p, s), cudaErrorInvalidValue);   /* second free */
    (void)cudaGetLastError();
    ASSERT_EQ(simcuda_stats(0, &c1), 0);
    ASSERT_EQ(c1.bytes_in_use, c0.bytes_in_use);     /* not reached yet */
    ASSERT_OK(cudaStreamSynchronize(s));
    ASSERT_EQ(simcuda_stats(0, &c1), 0);
    ASSERT_EQ(c1.bytes_in_use, c0.bytes_in_use - (1 << 20));
    ASSERT_EQ(c1.allocs_async, c0.allocs_async);
    ASSERT_GE(c1.mem_free_async_calls, 1);
    ASSERT_OK(cudaStreamDestroy(s));
}

/* A created stream carries its context: cuStreamGetCtx/GetDevice and the
 * stream-ordered allocator need none current (the pool is "the one current
 * to the stream's device"). The special handles name the current context's
 * streams: INVALID_CONTEXT without one (cuda.h, cuStreamGetCtx). */
TEST(created_stream_works_without_current_context)
{
    ASSERT_OK(cuInit(0));
    CUcontext ctx, got = NULL, none = NULL;
    CUgreenCtx green = (CUgreenCtx)1;
    CUdevice d = -1;
    ASSERT_OK(cuDevicePrimaryCtxRetain(&ctx, 0));
    ASSERT_OK(cuCtxSetCurrent(ctx));
    CUstream s;
    ASSERT_OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    ASSERT_OK(cuStreamGetCtx(CU_STREAM_LEGACY, &got));
    ASSERT_PTR_EQ(got, ctx);
    ASSERT_OK(cuCtxSetCurrent(NULL));

    ASSERT_OK(cuStreamGetCtx(s, &got));
    ASSERT_PTR_EQ(got, ctx);
    ASSERT_OK(cuStreamGetCtx_v2(s, &got, &green));
    ASSERT_PTR_EQ(green, NULL);
    ASSERT_OK(cuStreamGetDevice(s, &d));
    ASSERT_EQ(d, 0);
    ASSERT_EQ(cuStreamGetDevice(s, NULL), CUDA_ERROR_INVALID_VALUE);
    ASSERT_EQ(cuStreamGetCtx(NULL, &got), CUDA_ERROR_INVALID_CONTEXT);
    ASSERT_EQ(cuStreamGetCtx(CU_STREAM_PER_THREAD, &got), CUDA_ERROR_INVALID_CONTEXT);
    ASSERT_EQ(cuStreamGetDevice(CU_STREAM_LEGACY, &d), CUDA_ERROR_INVALID_CONTEXT);

    CUdeviceptr p = 0, q = 0;
    ASSERT_OK(cuMemAllocAsync(&p, 1 << 20, s));
    ASSERT_EQ(cuMemAllocAsync(&q, 1 << 20, CU_STREAM_LEGACY), CUDA_ERROR_INVALID_CONTEXT);
    ASSERT_EQ(cuMemAllocAsync(&q, 1 << 20, NULL), CUDA_ERROR_INVALID_CONTEXT);
    ASSERT_EQ(cuMemFreeAsync(p, NULL), CUDA_ERROR_INVALID_CONTEXT);
    ASSERT_OK(cuMemFreeAsync(p, s));
    ASSERT_OK(cuStreamSynchronize(s));
    ASSERT_OK(cuCtxGetCurrent(&none));
    ASSERT_PTR_EQ(none, NULL);                   /* nothing made one current */
    ASSERT_OK(cuCtxSetCurrent(ctx));
    ASSERT_OK(cuStreamDestroy(s));
    ASSERT_EQ(cuStreamGetDevice(s, &d), CUDA_ERROR_INVALID_HANDLE);
}

TEST(kernel_launch_is_an_ordered_noop)
{
    /* cuLaunchKernel through the driver: counted, ordered, nothing runs. */
    simcuda_counters c0, c1;
    ASSERT_OK(cudaFree(NULL));                        /* runtime up, context current */
    ASSERT_EQ(simcuda_stats(0, &c0), 0);
    cudaStream_t s;
    ASSERT_OK(cudaStreamCreate(&s));
    ASSERT_OK(cuLaunchKernel((CUfunction)(uintptr_t)0x1234, 1, 1, 1, 32, 1, 1, 0, (CUstream)s, NULL, NULL));
    ASSERT_EQ(cuLaunchKernel((CUfunction)(uintptr_t)0x1234, 1, 1, 1, 2048, 1, 1, 0, (CUstream)s, NULL, NULL),
              CUDA_ERROR_INVALID_VALUE);
    ASSERT_OK(cudaStreamSynchronize(s));
    ASSERT_EQ(simcuda_stats(0, &c1), 0);
    ASSERT_EQ(c1.kernel_launches - c0.kernel_launches, 1);
    ASSERT_OK(cudaStreamDestroy(s));
}

TEST(kernel_launch_waits_for_what_it_depends_on)
{
    /* A kernel (nothing runs) with something to wait for is queued behind
     * it: its own stream's work, or, on the legacy stream, a blocking
     * stream's. */
    ASSERT_OK(cudaFree(NULL));
    CUfunction f = (CUfunction)(uintptr_t)0x1234;
    cudaStream_t s = held_stream(cudaStreamDefault);
    static int first, second;
    ASSERT_OK(launch_slow_store(s, &first, 1, 100));
    ASSERT_OK(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL));   /* legacy */
    ASSERT_EQ(cudaStreamQuery(0), cudaErrorNotReady);
    ASSERT_OK(cudaStreamSynchronize(0));
    ASSERT_EQ(load_flag(&first), 1);
    ASSERT_OK(launch_slow_store(s, &second, 1, 100));
    ASSERT_OK(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, (CUstream)s, NULL, NULL));
    ASSERT_EQ(cudaStreamQuery(s), cudaErrorNotReady);
    ASSERT_OK(cudaStreamSynchronize(s));
    ASSERT_EQ(load_flag(&second), 1);
    release_held();
}

TEST(kernel_launch_on_an_idle_stream_is_done_at_once)
{
    /* Nothing queued on the stream and nothing to wait for: the kernel
     * (device code never runs here) is done as it is launched, without
     * waking the stream's worker (tests/sim/README.md, Streams: a GPU's
     * launch wakes no host thread); what follows it still comes after. */
    ASSERT_OK(cudaFree(NULL));
    CUfunction f = (CUfunction)(uintptr_t)0x1234;
    cudaStream_t s = held_stream(cudaStreamNonBlocking);
    ASSERT_OK(cudaStreamSynchronize(s));
    ASSERT_OK(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, (CUstream)s, NULL, NULL));
    ASSERT_EQ(cudaStreamQuery(s), cudaSuccess);
    static int after;
    ASSERT_OK(launch_slow_store(s, &after, 1, 50));
    ASSERT_OK(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, (CUstream)s, NULL, NULL));   /* behind it */
    ASSERT_EQ(cudaStreamQuery(s), cudaErrorNotReady);
    ASSERT_OK(cudaStreamSynchronize(s));
    ASSERT_EQ(load_flag(&after), 1);
    ASSERT_EQ(cudaStreamQuery(s), cudaSuccess);
    release_held();
}

TEST_MAIN()
