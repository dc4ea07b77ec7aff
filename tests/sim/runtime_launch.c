/* tests/sim/runtime_launch.c - what nvcc-generated host code calls.
 *
 * A .cu file compiled by nvcc registers its fat binary and kernels from a
 * static constructor (__cudaRegisterFatBinary, __cudaRegisterFunction, ...),
 * and a `kernel<<<grid, block, shmem, stream>>>(args)` becomes
 * __cudaPushCallConfiguration, then in the kernel's host stub a one-time
 * __cudaGetKernel, __cudaPopCallConfiguration and __cudaLaunchKernel (CUDA
 * 13; older nvcc calls cudaLaunchKernel).
 *
 * Device code cannot run here: registration only remembers the kernels, and
 * a launch is checked, ordered in its stream as a no-op and counted by the
 * driver (kernel_launches). Nothing here may need the driver before main:
 * registration never loads it.
 */
#include "runtime_internal.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Not in any C header: nvcc declares them in the code it generates. */
void **__cudaRegisterFatBinary(void *fatCubin);
void __cudaRegisterFatBinaryEnd(void **handle);
void __cudaUnregisterFatBinary(void **handle);
void __cudaRegisterFunction(void **handle, const char *hostFun, char *deviceFun,
                            const char *deviceName, int thread_limit, uint3 *tid,
                            uint3 *bid, dim3 *bDim, dim3 *gDim, int *wSize);
void __cudaRegisterVar(void **handle, char *hostVar, char *deviceAddress, const char *deviceName,
                       int ext, size_t size, int constant, int global);
void __cudaRegisterManagedVar(void **handle, void **hostVarPtrAddress, char *deviceAddress,
                              const char *deviceName, int ext, size_t size, int constant, int global);
char __cudaInitModule(void **handle);
unsigned __cudaPushCallConfiguration(dim3 gridDim, dim3 blockDim, size_t sharedMem,
                                     struct CUstream_st *stream);
cudaError_t __cudaPopCallConfiguration(dim3 *gridDim, dim3 *blockDim, size_t *sharedMem,
                                       void *stream);
cudaError_t __cudaGetKernel(cudaKernel_t *kernel, const void *func);
cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 grid, dim3 block, void **args,
                               size_t shmem, cudaStream_t stream);
cudaError_t __cudaLaunchKernel_ptsz(cudaKernel_t kernel, dim3 grid, dim3 block, void **args,
                                    size_t shmem, cudaStream_t stream);

/* ---- registration ------------------------------------------------------- */

typedef struct rt_kernel {
    const void       *host_fun;          /* the host stub: the kernel's identity */
    const char       *name;              /* mangled device name */
    struct rt_kernel *next;              /* same hash bucket */
} rt_kernel;

typedef struct rt_module {
    void      *fatbin;                   /* handle returned is &fatbin */
    int        nkernels;
} rt_module;

/* A hash of host stubs: a PyTorch build registers tens of thousands of
 * kernels, and every launch looks its kernel up. */
#define KERNEL_BUCKETS 65536u
static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static rt_kernel      *kernels[KERNEL_BUCKETS];

static unsigned bucket_of(const void *fn)
{
    uint64_t h = (uint64_t)(uintptr_t)fn * 0x9E3779B97F4A7C15ull;
    return (unsigned)(h >> 48) & (KERNEL_BUCKETS - 1);
}

RT_API void **__cudaRegisterFatBinary(void *fatCubin)
{
    rt_module *m = calloc(1, sizeof *m);
    if (!m)
        abort();                        /* as the real one: no way to report */
    m->fatbin = fatCubin;
    return &m->fatbin;
}

RT_API void __cudaRegisterFatBinaryEnd(void **handle)
{
    (void)handle;
}

RT_API void __cudaUnregisterFatBinary(void **handle)
{
    /* handle points at the first member */
    free((rt_module *)(void *)handle);
}

RT_API void __cudaRegisterFunction(void **handle, const char *hostFun, char *deviceFun,
                                   const char *deviceName, int thread_limit, uint3 *tid,
                                   uint3 *bid, dim3 *bDim, dim3 *gDim, int *wSize)
{
    (void)deviceFun; (void)thread_limit; (void)tid; (void)bid; (void)bDim; (void)gDim; (void)wSize;
    rt_kernel *k = malloc(sizeof *k);
    if (!k)
        return;
    unsigned b = bucket_of(hostFun);
    pthread_mutex_lock(&reg_lock);
    *k = (rt_kernel){ hostFun, deviceName, kernels[b] };
    kernels[b] = k;
    ((rt_module *)(void *)handle)->nkernels++;
    pthread_mutex_unlock(&reg_lock);
}

/* __device__ / __constant__ / __managed__ variables: remembered by nobody.
 * cudaMemcpyToSymbol and friends are not provided. */
RT_API void __cudaRegisterVar(void **handle, char *hostVar, char *deviceAddress,
                              const char *deviceName, int ext, size_t size, int constant, int global)
{
    (void)handle; (void)hostVar; (void)deviceAddress; (void)deviceName;
    (void)ext; (void)size; (void)constant; (void)global;
}

RT_API void __cudaRegisterManagedVar(void **handle, void **hostVarPtrAddress, char *deviceAddress,
                                     const char *deviceName, int ext, size_t size, int constant, int global)
{
    (void)handle; (void)hostVarPtrAddress; (void)deviceAddress; (void)deviceName;
    (void)ext; (void)size; (void)constant; (void)global;
}

RT_API char __cudaInitModule(void **handle)
{
    (void)handle;
    return 1;
}

bool rt_kernel_registered(const void *fn)
{
    bool found = false;
    pthread_mutex_lock(&reg_lock);
    for (rt_kernel *k = kernels[bucket_of(fn)]; k && !found; k = k->next)
        found = k->host_fun == fn;
    pthread_mutex_unlock(&reg_lock);
    return found;
}

/* ---- launch configuration ----------------------------------------------- */

/* A stack, per thread: a launch can happen while evaluating the arguments
 * of another launch. */
#define CONFIG_DEPTH 16
typedef struct rt_config {
    dim3         grid, block;
    size_t       shmem;
    cudaStream_t stream;
} rt_config;

static __thread rt_config config_stack[CONFIG_DEPTH];
static __thread int       config_depth;

RT_API unsigned __cudaPushCallConfiguration(dim3 gridDim, dim3 blockDim, size_t sharedMem,
                                            struct CUstream_st *stream)
{
    if (config_depth == CONFIG_DEPTH)
        return 1;
    config_stack[config_depth++] = (rt_config){ gridDim, blockDim, sharedMem, (cudaStream_t)stream };
    return 0;
}

RT_API cudaError_t __cudaPopCallConfiguration(dim3 *gridDim, dim3 *blockDim, size_t *sharedMem,
                                              void *stream)
{
    if (config_depth == 0)
        return rt_ret(cudaErrorMissingConfiguration);
    rt_config c = config_stack[--config_depth];
    *gridDim = c.grid;
    *blockDim = c.block;
    *sharedMem = c.shmem;
    memcpy(stream, &c.stream, sizeof c.stream);
    return cudaSuccess;
}

/* ---- launches ----------------------------------------------------------- */

cudaError_t rt_launch(const void *func, dim3 grid, dim3 block, size_t shmem,
                      cudaStream_t s, bool ptsz)
{
    RT_TRY(rt_enter());
    if (!func || !rt_kernel_registered(func))
        return rt_ret(cudaErrorInvalidDeviceFunction);
    if (grid.x == 0 || grid.y == 0 || grid.z == 0 || block.x == 0 || block.y == 0 || block.z == 0)
        return rt_ret(cudaErrorInvalidConfiguration);
    CUresult r = RT_DRV(cuLaunchKernel, ptsz)((CUfunction)(uintptr_t)func, grid.x, grid.y, grid.z,
                                              block.x, block.y, block.z, (unsigned)shmem,
                                              (CUstream)s, NULL, NULL);
    /* The driver's generic "invalid value" for a launch is the runtime's
     * "invalid configuration". */
    if (r == CUDA_ERROR_INVALID_VALUE)
        return rt_ret(cudaErrorInvalidConfiguration);
    return rt_ret_drv(r);
}

RT_API cudaError_t cudaLaunchKernel(const void *func, dim3 grid, dim3 block, void **args,
                                    size_t shmem, cudaStream_t s)
{
    (void)args;
    return rt_launch(func, grid, block, shmem, s, false);
}

RT_API cudaError_t cudaLaunchKernel_ptsz(const void *func, dim3 grid, dim3 block, void **args,
                                         size_t shmem, cudaStream_t s)
{
    (void)args;
    return rt_launch(func, grid, block, shmem, s, true);
}

/* The kernel handle is the host stub itself. */
RT_API cudaError_t __cudaGetKernel(cudaKernel_t *kernel, const void *func)
{
    if (!kernel || !func)
        return rt_ret(cudaErrorInvalidValue);
    *kernel = (cudaKernel_t)(uintptr_t)func;
    return cudaSuccess;
}

RT_API cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 grid, dim3 block, void **args,
                                      size_t shmem, cudaStream_t s)
{
    (void)args;
    return rt_launch((const void *)kernel, grid, block, shmem, s, false);
}

RT_API cudaError_t __cudaLaunchKernel_ptsz(cudaKernel_t kernel, dim3 grid, dim3 block, void **args,
                                           size_t shmem, cudaStream_t s)
{
    (void)args;
    return rt_launch((const void *)kernel, grid, block, shmem, s, true);
}
