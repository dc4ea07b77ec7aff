/* tests/sim/test_sim_torch_runtime.c - the runtime calls PyTorch needs
 * beyond the basics: kernel attributes and occupancy, capture queries outside capture,
 * peer access, the default pool's attributes, pitched copies, callbacks. */
#include <cuda_profiler_api.h>
#include <cuda_runtime_api.h>
#include <stdint.h>
#include <string.h>

#include "harness.h"
#include "simcuda.h"
#include "test_sim_util.h"

void **__cudaRegisterFatBinary(void *fatCubin);
void __cudaRegisterFunction(void **handle, const char *hostFun, char *deviceFun,
                            const char *deviceName, int thread_limit, uint3 *tid,
                            uint3 *bid, dim3 *bDim, dim3 *gDim, int *wSize);

static void kernel_stub(void) {}

static const void *registered_kernel(void)
{
    static char fatbin[16];
    static void **h;
    if (!h) {
        h = __cudaRegisterFatBinary(fatbin);
        __cudaRegisterFunction(h, (const char *)(uintptr_t)kernel_stub, (char *)"k", "k", -1,
                               NULL, NULL, NULL, NULL, NULL);
    }
    return (const void *)(uintptr_t)kernel_stub;
}

TEST(kernel_attributes_and_occupancy_follow_the_device_limits)
{
    const void *k = registered_kernel();
    struct cudaFuncAttributes fa;
    ASSERT_OK(cudaFuncGetAttributes(&fa, k));
    int max_threads = 0;
    ASSERT_OK(cudaDeviceGetAttribute(&max_threads, cudaDevAttrMaxThreadsPerBlock, 0));
    ASSERT_EQ(fa.maxThreadsPerBlock, max_threads);
    ASSERT_EQ(cudaFuncGetAttributes(&fa, (const void *)(uintptr_t)0x1234), cudaErrorInvalidDeviceFunction);
    ASSERT_EQ(cudaGetLastError(), cudaErrorInvalidDeviceFunction);

    int optin = 0;
    ASSERT_OK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0));
    ASSERT_OK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, optin));
    ASSERT_EQ(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, optin + 1),
              cudaErrorInvalidValue);
    cudaGetLastError();

    int blocks = 0;
    ASSERT_OK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, k, 256, 0));
    ASSERT_EQ(blocks, 8);                           /* 2048 threads per SM / 256 */
    ASSERT_OK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, k, 1024, 0));
    ASSERT_EQ(blocks, 2);
    ASSERT_OK(cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(&blocks, k, 32, 100 << 10,
                                                                     cudaOccupancyDefault));
    ASSERT_EQ(blocks, 2);                           /* two 100 KiB blocks fit in 228 KiB */
    ASSERT_EQ(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, k, 0, 0), cudaErrorInvalidValue);
    cudaGetLastError();
}

TEST(extended_launches_are_ordered_noops)
{
    const void *k = registered_kernel();
    simcuda_counters a, b;
    ASSERT_OK(cudaFree(NULL));
    ASSERT_EQ(simcuda_stats(0, &a), 0);
    cudaStream_t s;
    ASSERT_OK(cudaStreamCreate(&s));
    cudaLaunchConfig_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.gridDim = (dim3){ 2, 1, 1 };
    cfg.blockDim = (dim3){ 64, 1, 1 };
    cfg.stream = s;
    ASSERT_OK(cudaLaunchKernelExC(&cfg, k, NULL));
    ASSERT_OK(cudaLaunchCooperativeKernel(k, cfg.gridDim, cfg.blockDim, NULL, 0, s));
    cfg.blockDim = (dim3){ 0, 1, 1 };
    ASSERT_EQ(cudaLaunchKernelExC(&cfg, k, NULL), cudaErrorInvalidConfiguration);
    cudaGetLastError();
    ASSERT_OK(cudaStreamSynchronize(s));
    ASSERT_EQ(simcuda_stats(0, &b), 0);
    ASSERT_EQ(b.kernel_launches - a.kernel_launches, 2);
    ASSERT_OK(cudaStreamDestroy(s));
}

TEST(streams_outside_capture_answer_none)
{
    cudaStream_t s;
    ASSERT_OK(cudaStreamCreate(&s));
    enum cudaStreamCaptureStatus st = cudaStreamCaptureStatusActive;
    ASSERT_OK(cudaStreamIsCapturing(s, &st));
    ASSERT_EQ(st, cudaStreamCaptureStatusNone);
    st = cudaStreamCaptureStatusActive;
    ASSERT_OK(cudaStreamIsCapturing(0, &st));
    ASSERT_EQ(st, cudaStreamCaptureStatusNone);
    unsigned long long id = 99;
    ASSERT_OK(cudaStreamGetCaptureInfo(s, &st, &id, NULL, NULL, NULL, NULL));
    ASSERT_EQ(st, cudaStreamCaptureStatusNone);
    cudaGraph_t g;
    ASSERT_EQ(cudaStreamEndCapture(s, &g), cudaErrorIllegalState);   /* none began */
    cudaGetLastError();
    ASSERT_OK(cudaStreamDestroy(s));
    ASSERT_EQ(cudaStreamIsCapturing(s, &st), cudaErrorInvalidResourceHandle);
    cudaGetLastError();
}

TEST(capture_mode_is_exchanged_per_thread)
{
    enum cudaStreamCaptureMode m = cudaStreamCaptureModeRelaxed;
    ASSERT_OK(cudaThreadExchangeStreamCaptureMode(&m));
    ASSERT_EQ(m, cudaStreamCaptureModeGlobal);      /* the default */
    m = cudaStreamCaptureModeGlobal;
    ASSERT_OK(cudaThreadExchangeStreamCaptureMode(&m));
    ASSERT_EQ(m, cudaStreamCaptureModeRelaxed);
    m = (enum cudaStreamCaptureMode)7;
    ASSERT_EQ(cudaThreadExchangeStreamCaptureMode(&m), cudaErrorInvalidValue);
    cudaGetLastError();
}

TEST(peer_access_between_two_devices)
{
    /* Registered with SIMCUDA_DEVICES=2. */
    int can = -1;
    ASSERT_OK(cudaDeviceCanAccessPeer(&can, 0, 1));
    ASSERT_EQ(can, 1);
    ASSERT_EQ(cudaDeviceCanAccessPeer(&can, 0, 0), cudaErrorInvalidDevice);
    ASSERT_EQ(cudaDeviceCanAccessPeer(&can, 0, 2), cudaErrorInvalidDevice);
    cudaGetLastError();
    ASSERT_OK(cudaSetDevice(0));
    ASSERT_OK(cudaDeviceEnablePeerAccess(1, 0));
    ASSERT_EQ(cudaDeviceEnablePeerAccess(1, 0), cudaErrorPeerAccessAlreadyEnabled);
    cudaGetLastError();
    int *a, *b, v = 0x5a5a5a5a, out = 0;
    ASSERT_OK(cudaMalloc((void **)&a, 4));
    ASSERT_OK(cudaSetDevice(1));
    ASSERT_OK(cudaMalloc((void **)&b, 4));
    ASSERT_OK(cudaMemcpy(a, &v, 4, cudaMemcpyHostToDevice));
    ASSERT_OK(cudaMemcpyPeerAsync(b, 1, a, 0, 4, 0));
    ASSERT_OK(cudaMemcpy(&out, b, 4, cudaMemcpyDeviceToHost));
    ASSERT_EQ(out, v);
    char bus[32];
    ASSERT_OK(cudaDeviceGetPCIBusId(bus, sizeof bus, 1));
    ASSERT_EQ(strcmp(bus, "00000000:02:00.0"), 0);
}

TEST(default_pool_keeps_its_settable_attributes)
{
    cudaMemPool_t p, q;
    ASSERT_OK(cudaDeviceGetDefaultMemPool(&p, 0));
    ASSERT_OK(cudaDeviceGetDefaultMemPool(&q, 0));
    ASSERT(p == q);
    unsigned long long thr = 0;
    ASSERT_OK(cudaMemPoolGetAttribute(p, cudaMemPoolAttrReleaseThreshold, &thr));
    ASSERT_EQ(thr, 0);
    thr = 1ull << 30;
    ASSERT_OK(cudaMemPoolSetAttribute(p, cudaMemPoolAttrReleaseThreshold, &thr));
    thr = 0;
    ASSERT_OK(cudaMemPoolGetAttribute(p, cudaMemPoolAttrReleaseThreshold, &thr));
    ASSERT_EQ(thr, 1ull << 30);
    int reuse = 0;
    ASSERT_OK(cudaMemPoolGetAttribute(p, cudaMemPoolReuseAllowOpportunistic, &reuse));
    ASSERT_EQ(reuse, 1);
    unsigned long long used;
    ASSERT_EQ(cudaMemPoolGetAttribute(p, cudaMemPoolAttrUsedMemCurrent, &used), cudaErrorNotSupported);
    cudaGetLastError();
    ASSERT_OK(cudaMemPoolTrimTo(p, 0));
    ASSERT_EQ(cudaDeviceGetDefaultMemPool(&p, 5), cudaErrorInvalidDevice);
    cudaGetLastError();
}

static void CUDART_CB record_callback(cudaStream_t s, cudaError_t status, void *arg)
{
    (void)s;
    int *seen = arg;
    __atomic_store_n(seen, status == cudaSuccess ? 1 : -1, __ATOMIC_RELEASE);
}

TEST(pitched_copies_and_stream_callbacks_run_in_order)
{
    char host[4][8], back[4][8];
    for (int r = 0; r < 4; r++)
        for (int c = 0; c < 8; c++)
            host[r][c] = (char)(r * 8 + c);
    char *dev;
    ASSERT_OK(cudaMalloc((void **)&dev, 4 * 64));
    cudaStream_t s;
    ASSERT_OK(cudaStreamCreate(&s));
    int flag = 0, seen = 0;
    ASSERT_OK(launch_slow_store(s, &flag, 1, 50));
    /* 4 rows of 6 bytes, source pitch 8, device pitch 64 */
    ASSERT_OK(cudaMemcpy2DAsync(dev, 64, host, 8, 6, 4, cudaMemcpyHostToDevice, s));
    ASSERT_OK(cudaStreamAddCallback(s, record_callback, &seen, 0));
    memset(back, 0, sizeof back);
    ASSERT_OK(cudaMemcpy2DAsync(back, 8, dev, 64, 6, 4, cudaMemcpyDeviceToHost, s));
    ASSERT_OK(cudaStreamSynchronize(s));
    ASSERT_EQ(load_flag(&seen), 1);
    for (int r = 0; r < 4; r++) {
        ASSERT_EQ(memcmp(back[r], host[r], 6), 0);
        ASSERT_EQ(back[r][6], 0);
    }
    ASSERT_EQ(cudaMemcpy2DAsync(dev, 4, host, 8, 6, 4, cudaMemcpyHostToDevice, s), cudaErrorInvalidPitchValue);
    ASSERT_EQ(cudaStreamAddCallback(s, record_callback, &seen, 1), cudaErrorInvalidValue);
    cudaGetLastError();
    ASSERT_OK(cudaStreamDestroy(s));
    ASSERT_OK(cudaFree(dev));
}

TEST(unsupported_calls_return_the_documented_errors)
{
    char buf[64];
    void *p = NULL;
    ASSERT_EQ(cudaHostUnregister(buf), cudaErrorHostMemoryNotRegistered);
    cudaIpcMemHandle_t h;
    ASSERT_EQ(cudaIpcGetMemHandle(&h, buf), cudaErrorInvalidValue);   /* host memory */
    cudaIpcEventHandle_t eh;
    ASSERT_EQ(cudaIpcGetEventHandle(&eh, NULL), cudaErrorInvalidResourceHandle); /* no event */
    ASSERT_EQ(cudaGetSymbolAddress(&p, buf), cudaErrorInvalidSymbol);
    cudaGraphNode_t node;
    ASSERT_EQ(cudaGraphAddNode(&node, NULL, NULL, NULL, 0, NULL), cudaErrorNotSupported);
    ASSERT_EQ(cudaGetLastError(), cudaErrorNotSupported);
    ASSERT_OK(cudaProfilerStart());
}

TEST_MAIN()
