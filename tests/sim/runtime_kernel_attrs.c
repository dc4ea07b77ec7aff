/* tests/sim/runtime_kernel_attrs.c - what a program asks about a kernel
 * before launching it, and the launch forms beyond <<<...>>>.
 *
 * PyTorch (and every Thrust/CUB algorithm) sizes its grids with
 * cudaFuncGetAttributes and the occupancy calculator, raises a kernel's
 * dynamic shared memory limit with cudaFuncSetAttribute, and launches some
 * kernels with cudaLaunchKernelExC. Device code never runs here, so the
 * attributes are those of a plain kernel on the simulated device (sm_90
 * limits, 32 registers, no static shared memory), consistent with
 * cudaDeviceGetAttribute; launches are ordered no-ops like every launch.
 *
 * Modules loaded at run time (cudaLibrary*) and __device__ variables
 * (symbols) are not simulated: there is no device code to hold them.
 */
#include "runtime_internal.h"
#include "kernel_limits.h"

#include <string.h>

static cudaError_t known_kernel(const void *func)
{
    cudaError_t e = rt_enter();
    if (e != cudaSuccess)
        return e;
    return func && rt_kernel_registered(func) ? cudaSuccess : cudaErrorInvalidDeviceFunction;
}

RT_API cudaError_t cudaFuncGetAttributes(struct cudaFuncAttributes *attr, const void *func)
{
    if (!attr)
        return rt_ret(cudaErrorInvalidValue);
    RT_TRY(known_kernel(func));
    memset(attr, 0, sizeof *attr);
    attr->maxThreadsPerBlock = 1024;
    attr->numRegs = SIM_REGS_PER_THREAD;
    attr->ptxVersion = 90;
    attr->binaryVersion = 90;
    attr->maxDynamicSharedSizeBytes = SIM_SMEM_DEFAULT - (int)attr->sharedSizeBytes;
    attr->preferredShmemCarveout = -1;
    return cudaSuccess;
}

/* Only the attributes the runtime documents as settable; values checked
 * against the device's limits as the real one does. */
static cudaError_t set_attribute(enum cudaFuncAttribute a, int value)
{
    switch (a) {
    case cudaFuncAttributeMaxDynamicSharedMemorySize:
        return value >= 0 && value <= SIM_SMEM_OPTIN ? cudaSuccess : cudaErrorInvalidValue;
    case cudaFuncAttributePreferredSharedMemoryCarveout:
        return value >= -1 && value <= 100 ? cudaSuccess : cudaErrorInvalidValue;
    case cudaFuncAttributeClusterDimMustBeSet:
    case cudaFuncAttributeRequiredClusterWidth:
    case cudaFuncAttributeRequiredClusterHeight:
    case cudaFuncAttributeRequiredClusterDepth:
        return cudaErrorInvalidValue;        /* read-only */
    case cudaFuncAttributeNonPortableClusterSizeAllowed:
    case cudaFuncAttributeClusterSchedulingPolicyPreference:
        return value >= 0 ? cudaSuccess : cudaErrorInvalidValue;
    default:
        return cudaErrorInvalidValue;
    }
}

RT_API cudaError_t cudaFuncSetAttribute(const void *func, enum cudaFuncAttribute attr, int value)
{
    RT_TRY(known_kernel(func));
    return rt_ret(set_attribute(attr, value));
}

RT_API cudaError_t cudaKernelSetAttributeForDevice(cudaKernel_t kernel, enum cudaFuncAttribute attr,
                                                   int value, int device)
{
    RT_TRY(known_kernel((const void *)kernel));
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || device < 0 || device >= n)
        return rt_ret(cudaErrorInvalidDevice);
    return rt_ret(set_attribute(attr, value));
}

/* Blocks of blockSize threads that fit on one multiprocessor, limited by
 * threads, registers, shared memory and the per-SM block limit. */
static cudaError_t occupancy(int *numBlocks, const void *func, int blockSize, size_t dynSmem)
{
    if (!numBlocks)
        return rt_ret(cudaErrorInvalidValue);
    RT_TRY(known_kernel(func));
    int n = sim_blocks_per_sm(blockSize, dynSmem);
    if (n < 0)
        return rt_ret(cudaErrorInvalidValue);
    *numBlocks = n;
    return cudaSuccess;
}

RT_API cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int *numBlocks, const void *func,
                                                                  int blockSize, size_t dynamicSMemSize)
{
    return occupancy(numBlocks, func, blockSize, dynamicSMemSize);
}

RT_API cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int *numBlocks, const void *func,
                                                                           int blockSize, size_t dynamicSMemSize,
                                                                           unsigned int flags)
{
    if (flags & ~(unsigned)cudaOccupancyDisableCachingOverride)
        return rt_ret(cudaErrorInvalidValue);
    return occupancy(numBlocks, func, blockSize, dynamicSMemSize);
}

/* Launch attributes (clusters, programmatic stream serialization, ...)
 * change how a kernel is scheduled, not what the stream orders: ignored. */
RT_API cudaError_t cudaLaunchKernelExC(const cudaLaunchConfig_t *config, const void *func, void **args)
{
    (void)args;
    if (!config)
        return rt_ret(cudaErrorInvalidValue);
    return rt_launch(func, config->gridDim, config->blockDim, config->dynamicSmemBytes,
                     config->stream, false);
}

RT_API cudaError_t cudaLaunchCooperativeKernel(const void *func, dim3 gridDim, dim3 blockDim,
                                               void **args, size_t sharedMem, cudaStream_t stream)
{
    (void)args;
    return rt_launch(func, gridDim, blockDim, sharedMem, stream, false);
}

/* ---- not simulated: run-time loaded device code, __device__ symbols ------ */

RT_API cudaError_t cudaLibraryLoadData(cudaLibrary_t *library, const void *code, enum cudaJitOption *jitOptions,
                                       void **jitOptionsValues, unsigned int numJitOptions,
                                       enum cudaLibraryOption *libraryOptions, void **libraryOptionValues,
                                       unsigned int numLibraryOptions)
{
    (void)code; (void)jitOptions; (void)jitOptionsValues; (void)numJitOptions;
    (void)libraryOptions; (void)libraryOptionValues; (void)numLibraryOptions;
    if (library)
        *library = NULL;
    return rt_ret(cudaErrorNotSupported);
}

RT_API cudaError_t cudaLibraryGetKernel(cudaKernel_t *pKernel, cudaLibrary_t library, const char *name)
{
    (void)library; (void)name;
    if (pKernel)
        *pKernel = NULL;
    return rt_ret(cudaErrorNotSupported);
}

RT_API cudaError_t cudaLibraryUnload(cudaLibrary_t library)
{
    (void)library;
    return rt_ret(cudaErrorNotSupported);
}

/* __cudaRegisterVar remembers no variables: every symbol is unknown. */
RT_API cudaError_t cudaGetSymbolAddress(void **devPtr, const void *symbol)
{
    (void)symbol;
    if (!devPtr)
        return rt_ret(cudaErrorInvalidValue);
    return rt_ret(cudaErrorInvalidSymbol);
}

RT_API cudaError_t cudaMemcpyToSymbol(const void *symbol, const void *src, size_t count, size_t offset,
                                      enum cudaMemcpyKind kind)
{
    (void)symbol; (void)src; (void)count; (void)offset; (void)kind;
    return rt_ret(cudaErrorInvalidSymbol);
}
