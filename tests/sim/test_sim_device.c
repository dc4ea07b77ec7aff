/* tests/sim/test_sim_device.c - devices, reset, errors, last-error
 * semantics, driver entry points, nvcc-style launches. */
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <pthread.h>

#include "harness.h"
#include "simcuda.h"
#include "test_sim_util.h"

TEST(multi_device_allocations_are_per_device)
{
    /* Registered with SIMCUDA_DEVICES=2. */
    int n = 0;
    ASSERT_OK(cudaGetDeviceCount(&n));
    ASSERT_EQ(n, 2);
    void *a, *b;
    ASSERT_OK(cudaSetDevice(0));
    ASSERT_OK(cudaMalloc(&a, 1 << 20));
    ASSERT_OK(cudaSetDevice(1));
    int dev = -1;
    ASSERT_OK(cudaGetDevice(&dev));
    ASSERT_EQ(dev, 1);
    ASSERT_OK(cudaMalloc(&b, 3 << 20));
    simcuda_counters c0, c1;
    ASSERT_EQ(simcuda_stats(0, &c0), 0);
    ASSERT_EQ(simcuda_stats(1, &c1), 0);
    ASSERT_EQ(c0.bytes_in_use, 1 << 20);
    ASSERT_EQ(c1.bytes_in_use, 3 << 20);
    struct cudaPointerAttributes at;
    ASSERT_OK(cudaPointerGetAttributes(&at, a));
    ASSERT_EQ(at.device, 0);
    ASSERT_OK(cudaPointerGetAttributes(&at, b));
    ASSERT_EQ(at.device, 1);
    ASSERT_OK(cudaFree(a));                          /* freeing another device's memory works */
    ASSERT_OK(cudaFree(b));
    ASSERT_EQ(cudaSetDevice(2), cudaErrorInvalidDevice);
    ASSERT_EQ(simcuda_stats(2, &c0), -1);
}

static void *other_thread_device(void *arg)
{
    int *out = arg;
    cudaGetDevice(out);                              /* a new thread starts on device 0 */
    return NULL;
}

TEST(current_device_is_per_thread)
{
    ASSERT_OK(cudaSetDevice(1));
    int seen = -1;
    pthread_t t;
    pthread_create(&t, NULL, other_thread_device, &seen);
    pthread_join(t, NULL);
    ASSERT_EQ(seen, 0);
    int mine = -1;
    ASSERT_OK(cudaGetDevice(&mine));
    ASSERT_EQ(mine, 1);
}

TEST(device_reset_releases_everything)
{
    void *a, *b;
    cudaStream_t s;
    ASSERT_OK(cudaMalloc(&a, 1 << 20));
    ASSERT_OK(cudaMallocManaged(&b, 1 << 20, cudaMemAttachGlobal));
    ASSERT_OK(cudaStreamCreate(&s));
    ASSERT_OK(cudaDeviceReset());
    simcuda_counters c;
    ASSERT_EQ(simcuda_stats(0, &c), 0);
    ASSERT_EQ(c.bytes_in_use, 0);
    ASSERT_EQ(cudaFree(a), cudaErrorInvalidValue);   /* gone */
    void *p;
    ASSERT_OK(cudaMalloc(&p, 1 << 20));              /* the device works after reset */
    ASSERT_OK(cudaFree(p));
}

TEST(error_strings_and_names)
{
    ASSERT_STR_EQ(cudaGetErrorName(cudaErrorMemoryAllocation), "cudaErrorMemoryAllocation");
    ASSERT_STR_EQ(cudaGetErrorString(cudaErrorMemoryAllocation), "out of memory");
    ASSERT_STR_EQ(cudaGetErrorString(cudaSuccess), "no error");
    ASSERT_STR_EQ(cudaGetErrorName(cudaErrorNotReady), "cudaErrorNotReady");
    ASSERT_STR_EQ(cudaGetErrorName((cudaError_t)12345), "unrecognized error code");
    ASSERT_STR_EQ(cudaGetErrorName(cudaErrorStreamCaptureUnsupported), "cudaErrorStreamCaptureUnsupported");
    const char *s = NULL;
    ASSERT_OK(cuGetErrorName(CUDA_ERROR_OUT_OF_MEMORY, &s));
    ASSERT_STR_EQ(s, "CUDA_ERROR_OUT_OF_MEMORY");
    ASSERT_OK(cuGetErrorString(CUDA_ERROR_INVALID_VALUE, &s));
    ASSERT_STR_EQ(s, "invalid argument");
    ASSERT_EQ(cuGetErrorString((CUresult)12345, &s), CUDA_ERROR_INVALID_VALUE);
    ASSERT_PTR_EQ(s, NULL);
}

static void *thread_last_error(void *arg)
{
    *(cudaError_t *)arg = cudaGetLastError();
    return NULL;
}

TEST(last_error_is_per_thread_and_cleared_by_get)
{
    ASSERT_OK(cudaGetLastError());
    void *p;
    ASSERT_EQ(cudaMalloc(&p, (size_t)1 << 40), cudaErrorMemoryAllocation);
    ASSERT_OK(cudaMalloc(&p, 16));                   /* success does not clear it */
    ASSERT_EQ(cudaPeekAtLastError(), cudaErrorMemoryAllocation);
    ASSERT_EQ(cudaPeekAtLastError(), cudaErrorMemoryAllocation);
    cudaError_t other = cudaErrorUnknown;
    pthread_t t;
    pthread_create(&t, NULL, thread_last_error, &other);
    pthread_join(t, NULL);
    ASSERT_EQ(other, cudaSuccess);
    ASSERT_EQ(cudaGetLastError(), cudaErrorMemoryAllocation);
    ASSERT_EQ(cudaGetLastError(), cudaSuccess);
    /* "not ready" is returned but not remembered */
    cudaStream_t s;
    ASSERT_OK(cudaStreamCreate(&s));
    static int flag;
    ASSERT_OK(launch_slow_store(s, &flag, 1, 50));
    ASSERT_EQ(cudaStreamQuery(s), cudaErrorNotReady);
    ASSERT_EQ(cudaGetLastError(), cudaSuccess);
    ASSERT_OK(cudaStreamDestroy(s));
    ASSERT_OK(cudaFree(p));
}

TEST(versions_properties_and_entry_points)
{
    int v = 0;
    ASSERT_OK(cudaRuntimeGetVersion(&v));
    ASSERT_EQ(v, 13000);
    ASSERT_OK(cudaDriverGetVersion(&v));
    ASSERT_EQ(v, 13000);
    struct cudaDeviceProp prop;
    ASSERT_OK(cudaGetDeviceProperties(&prop, 0));
    ASSERT_EQ(prop.totalGlobalMem, simcuda_capacity(0));
    ASSERT_EQ(prop.warpSize, 32);
    /* per multiprocessor, as compute capability 9.0 has them (torch.compile's
     * Triton heuristics refuse a 0) */
    ASSERT_EQ(prop.regsPerMultiprocessor, 65536);
    ASSERT_EQ(prop.sharedMemPerMultiprocessor, (size_t)233472);
    ASSERT_EQ(prop.maxBlocksPerMultiProcessor, 32);
    ASSERT_EQ(prop.reservedSharedMemPerBlock, (size_t)1024);
    ASSERT(prop.sharedMemPerBlockOptin + prop.reservedSharedMemPerBlock ==
           prop.sharedMemPerMultiprocessor);
    int cc = 0;
    ASSERT_OK(cudaDeviceGetAttribute(&cc, cudaDevAttrComputeCapabilityMajor, 0));
    ASSERT_EQ(cc, prop.major);
    void *fn = NULL;
    enum cudaDriverEntryPointQueryResult st;
    ASSERT_OK(cudaGetDriverEntryPointByVersion("cuMemCreate", &fn, 12000, cudaEnableDefault, &st));
    ASSERT_EQ(st, cudaDriverEntryPointSuccess);
    CUresult (*expect)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *,
                       unsigned long long) = cuMemCreate;
    ASSERT(memcmp(&fn, &expect, sizeof fn) == 0);
    ASSERT_OK(cudaGetDriverEntryPointByVersion("cuNope", &fn, 12000, cudaEnableDefault, &st));
    ASSERT_EQ(st, cudaDriverEntryPointSymbolNotFound);
    ASSERT_PTR_EQ(fn, NULL);
}

/* What nvcc generates for kernel<<<grid, block, 0, s>>>(), by hand. */
extern void **__cudaRegisterFatBinary(void *fatCubin);
extern void __cudaUnregisterFatBinary(void **h);
extern void __cudaRegisterFunction(void **h, const char *hostFun, char *deviceFun, const char *name,
                                   int limit, uint3 *tid, uint3 *bid, dim3 *bDim, dim3 *gDim, int *w);
extern unsigned __cudaPushCallConfiguration(dim3 g, dim3 b, size_t shmem, struct CUstream_st *s);
extern cudaError_t __cudaPopCallConfiguration(dim3 *g, dim3 *b, size_t *shmem, void *s);
extern cudaError_t __cudaGetKernel(cudaKernel_t *k, const void *f);
extern cudaError_t __cudaLaunchKernel(cudaKernel_t k, dim3 g, dim3 b, void **args, size_t shmem,
                                      cudaStream_t s);

static void fake_kernel_stub(void) {}

TEST(nvcc_style_launch_is_counted)
{
    static char fatbin[16];
    void **h = __cudaRegisterFatBinary(fatbin);
    __cudaRegisterFunction(h, (const char *)(uintptr_t)fake_kernel_stub, (char *)"k", "k", -1,
                           NULL, NULL, NULL, NULL, NULL);
    simcuda_counters a, b;
    ASSERT_OK(cudaFree(NULL));
    ASSERT_EQ(simcuda_stats(0, &a), 0);
    dim3 g = { 4, 1, 1 }, blk = { 128, 1, 1 };
    ASSERT_EQ(__cudaPushCallConfiguration(g, blk, 0, NULL), 0);
    cudaKernel_t k;
    ASSERT_OK(__cudaGetKernel(&k, (const void *)(uintptr_t)fake_kernel_stub));
    dim3 g2, b2;
    size_t shmem;
    cudaStream_t s;
    ASSERT_OK(__cudaPopCallConfiguration(&g2, &b2, &shmem, &s));
    ASSERT_EQ(g2.x, 4);
    ASSERT_OK(__cudaLaunchKernel(k, g2, b2, NULL, shmem, s));
    ASSERT_OK(cudaLaunchKernel((const void *)(uintptr_t)fake_kernel_stub, g, blk, NULL, 0, 0));
    ASSERT_EQ(cudaLaunchKernel((const void *)(uintptr_t)0x1234, g, blk, NULL, 0, 0),
              cudaErrorInvalidDeviceFunction);
    ASSERT_OK(cudaDeviceSynchronize());
    ASSERT_EQ(simcuda_stats(0, &b), 0);
    ASSERT_EQ(b.kernel_launches - a.kernel_launches, 2);
    __cudaUnregisterFatBinary(h);   /* what nvcc's module destructor does */
}

TEST_MAIN()
