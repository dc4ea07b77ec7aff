/* tests/sim/runtime_device.c - runtime device management, versions, driver
 * entry points, pointer attributes. */
#include "runtime_internal.h"

#include <string.h>

RT_API cudaError_t cudaRuntimeGetVersion(int *runtimeVersion)
{
    if (!runtimeVersion)
        return rt_ret(cudaErrorInvalidValue);
    *runtimeVersion = CUDART_VERSION;
    return cudaSuccess;
}

/* Without a driver the real runtime reports version 0, successfully. */
RT_API cudaError_t cudaDriverGetVersion(int *driverVersion)
{
    if (!driverVersion)
        return rt_ret(cudaErrorInvalidValue);
    *driverVersion = 0;
    if (rt_init() == cudaErrorInsufficientDriver)
        return cudaSuccess;
    return rt_ret_drv(rt_drv.cuDriverGetVersion(driverVersion));
}

RT_API cudaError_t cudaGetDeviceCount(int *count)
{
    if (!count)
        return rt_ret(cudaErrorInvalidValue);
    *count = 0;
    RT_TRY(rt_init());
    return rt_ret_drv(rt_drv.cuDeviceGetCount(count));
}

RT_API cudaError_t cudaSetDevice(int device)
{
    RT_TRY(rt_init());
    return rt_ret(rt_set_device(device));
}

RT_API cudaError_t cudaGetDevice(int *device)
{
    if (!device)
        return rt_ret(cudaErrorInvalidValue);
    RT_TRY(rt_init());
    *device = rt_current_device();
    return cudaSuccess;
}

static int attr(CUdevice_attribute a, int dev)
{
    int v = 0;
    rt_drv.cuDeviceGetAttribute(&v, a, dev);
    return v;
}

RT_API cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device)
{
    if (!prop)
        return rt_ret(cudaErrorInvalidValue);
    RT_TRY(rt_init());
    int count = 0;
    rt_drv.cuDeviceGetCount(&count);
    if (device < 0 || device >= count)
        return rt_ret(cudaErrorInvalidDevice);
    memset(prop, 0, sizeof *prop);
    rt_drv.cuDeviceGetName(prop->name, sizeof prop->name, device);
    rt_drv.cuDeviceGetUuid((CUuuid *)&prop->uuid, device);
    rt_drv.cuDeviceTotalMem(&prop->totalGlobalMem, device);
    prop->sharedMemPerBlock = (size_t)attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK, device);
    prop->regsPerBlock = attr(CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK, device);
    prop->warpSize = attr(CU_DEVICE_ATTRIBUTE_WARP_SIZE, device);
    prop->memPitch = (size_t)2147483647;
    prop->maxThreadsPerBlock = attr(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, device);
    prop->maxThreadsDim[0] = attr(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X, device);
    prop->maxThreadsDim[1] = attr(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y, device);
    prop->maxThreadsDim[2] = attr(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z, device);
    prop->maxGridSize[0] = attr(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X, device);
    prop->maxGridSize[1] = attr(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y, device);
    prop->maxGridSize[2] = attr(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z, device);
    prop->totalConstMem = (size_t)attr(CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY, device);
    prop->major = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device);
    prop->minor = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device);
    prop->textureAlignment = (size_t)attr(CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT, device);
    prop->multiProcessorCount = attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, device);
    prop->canMapHostMemory = attr(CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY, device);
    prop->concurrentKernels = attr(CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS, device);
    prop->pciBusID = attr(CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, device);
    prop->asyncEngineCount = attr(CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT, device);
    prop->unifiedAddressing = attr(CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING, device);
    prop->memoryBusWidth = attr(CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH, device);
    prop->l2CacheSize = attr(CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, device);
    prop->maxThreadsPerMultiProcessor = attr(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, device);
    prop->streamPrioritiesSupported = attr(CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED, device);
    prop->managedMemory = attr(CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY, device);
    prop->concurrentManagedAccess = attr(CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS, device);
    prop->sharedMemPerBlockOptin = (size_t)attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, device);
    prop->sharedMemPerMultiprocessor =
        (size_t)attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR, device);
    prop->regsPerMultiprocessor = attr(CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR, device);
    prop->maxBlocksPerMultiProcessor = attr(CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR, device);
    prop->reservedSharedMemPerBlock =
        (size_t)attr(CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK, device);
    prop->integrated = attr(CU_DEVICE_ATTRIBUTE_INTEGRATED, device);
    prop->pciDeviceID = attr(CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID, device);
    prop->pciDomainID = attr(CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID, device);
    prop->isMultiGpuBoard = attr(CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD, device);
    prop->memoryPoolsSupported = attr(CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, device);
    return cudaSuccess;
}

/* cudaDeviceAttr and CUdevice_attribute share their numbering. */
RT_API cudaError_t cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr a, int device)
{
    if (!value)
        return rt_ret(cudaErrorInvalidValue);
    RT_TRY(rt_init());
    return rt_ret_drv(rt_drv.cuDeviceGetAttribute(value, (CUdevice_attribute)a, device));
}

RT_API cudaError_t cudaDeviceSynchronize(void)
{
    RT_TRY(rt_enter());
    return rt_ret_drv(rt_drv.cuCtxSynchronize(NULL));
}

/* Destroys every allocation and stream of the current device; the next
 * runtime call finds the device fresh. */
RT_API cudaError_t cudaDeviceReset(void)
{
    RT_TRY(rt_enter());
    int dev = rt_current_device();
    CUresult r = rt_drv.cuDevicePrimaryCtxReset(dev);
    if (r == CUDA_SUCCESS)
        rt_primary_was_reset(dev);   /* retained again at each thread's next call */
    return rt_ret_drv(r);
}

RT_API cudaError_t cudaDeviceGetStreamPriorityRange(int *least, int *greatest)
{
    RT_TRY(rt_enter());
    return rt_ret_drv(rt_drv.cuCtxGetStreamPriorityRange(least, greatest));
}

/* ---- driver entry points ------------------------------------------------ */

static cudaError_t entry_point(const char *symbol, void **funcPtr, unsigned int version,
                               unsigned long long flags, enum cudaDriverEntryPointQueryResult *status,
                               bool ptsz)
{
    if (!symbol || !funcPtr)
        return rt_ret(cudaErrorInvalidValue);
    RT_TRY(rt_init());
    /* cudaEnableDefault in a per-thread-stream build means per-thread. */
    if (ptsz && flags == cudaEnableDefault)
        flags = cudaEnablePerThreadDefaultStream;
    /* Not found is success with *funcPtr NULL; the status says why
     * (cuda_runtime_api.h, CUDA 12+). */
    CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    CUresult r = rt_drv.cuGetProcAddress(symbol, funcPtr, (int)version, flags, &st);
    if (status)
        *status = (enum cudaDriverEntryPointQueryResult)st;
    return rt_ret_drv(r);
}

RT_API cudaError_t cudaGetDriverEntryPoint(const char *symbol, void **funcPtr, unsigned long long flags,
                                           enum cudaDriverEntryPointQueryResult *status)
{
    return entry_point(symbol, funcPtr, CUDART_VERSION, flags, status, false);
}

RT_API cudaError_t cudaGetDriverEntryPoint_ptsz(const char *symbol, void **funcPtr, unsigned long long flags,
                                                enum cudaDriverEntryPointQueryResult *status)
{
    return entry_point(symbol, funcPtr, CUDART_VERSION, flags, status, true);
}

RT_API cudaError_t cudaGetDriverEntryPointByVersion(const char *symbol, void **funcPtr,
                                                    unsigned int cudaVersion, unsigned long long flags,
                                                    enum cudaDriverEntryPointQueryResult *status)
{
    return entry_point(symbol, funcPtr, cudaVersion, flags, status, false);
}

RT_API cudaError_t cudaGetDriverEntryPointByVersion_ptsz(const char *symbol, void **funcPtr,
                                                         unsigned int cudaVersion, unsigned long long flags,
                                                         enum cudaDriverEntryPointQueryResult *status)
{
    return entry_point(symbol, funcPtr, cudaVersion, flags, status, true);
}

/* ---- pointer attributes ------------------------------------------------- */

/* Since CUDA 11 an unregistered host pointer is not an error: it reads as
 * cudaMemoryTypeUnregistered. */
RT_API cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *attributes, const void *ptr)
{
    if (!attributes)
        return rt_ret(cudaErrorInvalidValue);
    RT_TRY(rt_enter());
    unsigned type = 0;
    int ordinal = -2, managed = 0;
    CUdeviceptr dptr = 0;
    void *hptr = NULL;
    CUpointer_attribute which[] = {
        CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
        CU_POINTER_ATTRIBUTE_IS_MANAGED, CU_POINTER_ATTRIBUTE_DEVICE_POINTER,
        CU_POINTER_ATTRIBUTE_HOST_POINTER,
    };
    void *data[] = { &type, &ordinal, &managed, &dptr, &hptr };
    CUresult r = rt_drv.cuPointerGetAttributes(5, which, data, (CUdeviceptr)(uintptr_t)ptr);
    if (r != CUDA_SUCCESS)
        return rt_ret_drv(r);
    memset(attributes, 0, sizeof *attributes);
    if (managed) {
        attributes->type = cudaMemoryTypeManaged;
    } else if (type == CU_MEMORYTYPE_DEVICE) {
        attributes->type = cudaMemoryTypeDevice;
        hptr = NULL;
    } else if (type == CU_MEMORYTYPE_HOST) {
        attributes->type = cudaMemoryTypeHost;
    } else {
        attributes->type = cudaMemoryTypeUnregistered;
        attributes->device = -2;
        return cudaSuccess;
    }
    attributes->device = ordinal;
    attributes->devicePointer = (void *)(uintptr_t)dptr;
    attributes->hostPointer = hptr;
    return cudaSuccess;
}
