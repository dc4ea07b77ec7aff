/* tests/sim/test_sim_legacy.c - the legacy default stream and implicit
 * synchronisation: blocking vs non-blocking streams, the per-thread stream,
 * cudaDeviceSynchronize and cudaFree. */
#include <cuda.h>
#include <cuda_runtime_api.h>

#include "harness.h"
#include "simcuda.h"
#include "test_sim_held.h"
#include "test_sim_util.h"

/* Declared by cuda_runtime_api.h only in per-thread-stream builds. */
extern cudaError_t cudaLaunchHostFunc_ptsz(cudaStream_t s, cudaHostFn_t fn, void *arg);
extern cudaError_t cudaStreamQuery_ptsz(cudaStream_t s);
extern cudaError_t cudaStreamSynchronize_ptsz(cudaStream_t s);

TEST(legacy_stream_waits_for_blocking_streams)
{
    static int flag;
    ASSERT_OK(launch_slow_store(held_stream(cudaStreamDefault), &flag, 1, 50));
    ASSERT_EQ(flag_seen_by(0, &flag), 1);
    release_held();
}

TEST(blocking_stream_waits_for_legacy_stream)
{
    cudaStream_t s = held_stream(cudaStreamDefault);
    static int flag;
    ASSERT_OK(launch_slow_store(cudaStreamLegacy, &flag, 1, 50));
    ASSERT_EQ(flag_seen_by(s, &flag), 1);
    release_held();
}

TEST(non_blocking_stream_ignores_legacy_stream)
{
    cudaStream_t nb;
    ASSERT_OK(cudaStreamCreateWithFlags(&nb, cudaStreamNonBlocking));
    static int flag;
    ASSERT_OK(launch_slow_store(0, &flag, 1, 200));
    ASSERT_EQ(flag_seen_by(nb, &flag), 0);
    ASSERT_EQ(cudaStreamQuery(0), cudaErrorNotReady);
    /* ... and the legacy stream does not wait for it either. */
    static int flag2;
    ASSERT_OK(cudaStreamSynchronize(0));
    ASSERT_OK(launch_slow_store(nb, &flag2, 1, 200));
    ASSERT_EQ(flag_seen_by(0, &flag2), 0);
    ASSERT_OK(cudaStreamDestroy(nb));
}

TEST(per_thread_stream_is_blocking_with_legacy)
{
    static int flag;
    ASSERT_OK(launch_slow_store(cudaStreamPerThread, &flag, 1, 50));
    ASSERT_EQ(flag_seen_by(cudaStreamLegacy, &flag), 1);
}

TEST(ptsz_entry_points_treat_0_as_per_thread_stream)
{
    static int flag;
    slow_store job = { &flag, 1, 80 };
    ASSERT_OK(cudaLaunchHostFunc_ptsz(0, slow_store_fn, &job));
    ASSERT_EQ(cudaStreamQuery(cudaStreamPerThread), cudaErrorNotReady);
    ASSERT_EQ(cudaStreamQuery_ptsz(0), cudaErrorNotReady);
    ASSERT_OK(cudaStreamSynchronize_ptsz(0));
    ASSERT_EQ(load_flag(&flag), 1);
}

TEST(device_synchronize_waits_for_every_stream)
{
    cudaStream_t nb;
    ASSERT_OK(cudaStreamCreateWithFlags(&nb, cudaStreamNonBlocking));
    static int a, b;
    slow_store j1 = { &a, 1, 50 }, j2 = { &b, 1, 70 };
    ASSERT_OK(cudaLaunchHostFunc(nb, slow_store_fn, &j1));
    ASSERT_OK(cudaLaunchHostFunc(cudaStreamPerThread, slow_store_fn, &j2));
    ASSERT_OK(cudaDeviceSynchronize());
    ASSERT_EQ(load_flag(&a), 1);
    ASSERT_EQ(load_flag(&b), 1);
    ASSERT_OK(cudaStreamDestroy(nb));
}

TEST(cuda_free_waits_for_every_stream)
{
    cudaStream_t nb;
    void *p, *q;
    ASSERT_OK(cudaStreamCreateWithFlags(&nb, cudaStreamNonBlocking));
    ASSERT_OK(cudaMalloc(&p, 4096));
    ASSERT_OK(cudaMalloc(&q, 4096));
    static int flag;
    ASSERT_OK(launch_slow_store(nb, &flag, 1, 50));
    ASSERT_OK(cudaFree(p));
    ASSERT_EQ(load_flag(&flag), 1);
    /* the driver's cuMemFree too */
    static int flag2;
    ASSERT_OK(launch_slow_store(nb, &flag2, 1, 50));
    ASSERT_OK(cuMemFree((CUdeviceptr)(uintptr_t)q));
    ASSERT_EQ(load_flag(&flag2), 1);
    ASSERT_OK(cudaStreamDestroy(nb));
}

TEST(cu_mem_free_of_async_allocation_does_not_wait)
{
    cudaStream_t nb;
    void *p;
    ASSERT_OK(cudaStreamCreateWithFlags(&nb, cudaStreamNonBlocking));
    ASSERT_OK(cudaMallocAsync(&p, 4096, nb));
    ASSERT_OK(cudaStreamSynchronize(nb));
    static int flag;
    ASSERT_OK(launch_slow_store(nb, &flag, 1, 150));
    ASSERT_OK(cuMemFree((CUdeviceptr)(uintptr_t)p));
    ASSERT_EQ(load_flag(&flag), 0);
    ASSERT_OK(cudaStreamDestroy(nb));
    ASSERT_OK(cudaDeviceSynchronize());
}

TEST(sync_memcpy_to_host_waits_for_blocking_streams)
{
    cudaStream_t s;
    ASSERT_OK(cudaStreamCreate(&s));
    int *d;
    int host = 0;
    ASSERT_OK(cudaMalloc((void **)&d, sizeof(int)));
    static int gate;
    ASSERT_OK(launch_slow_store(s, &gate, 1, 40));
    ASSERT_OK(cudaMemsetAsync(d, 0x5a, sizeof(int), s));
    ASSERT_OK(cudaMemcpy(&host, d, sizeof(int), cudaMemcpyDeviceToHost));
    ASSERT_EQ(host, 0x5a5a5a5a);
    ASSERT_OK(cudaFree(d));
    ASSERT_OK(cudaStreamDestroy(s));
}

TEST_MAIN()
