/* tests/sim/runtime_mempool.c - memory pools: the runtime's calls forward to
 * the driver's pools (driver_memory_extras.c), so a pool handle is the same
 * for both APIs, as in CUDA (cudaMemPool_t is CUmemoryPool).
 *
 * The driver's stream-ordered allocator returns memory to the device at each
 * free (nothing is kept in a pool): trim has nothing to release and the
 * usage counters (reserved/used current and high) are not simulated
 * (cudaErrorNotSupported).
 */
#include "runtime_internal.h"

#include <stdint.h>
#include <string.h>

#define POOL(h) ((CUmemoryPool)(void *)(h))

/* cudaDeviceGetDefaultMemPool and cudaDeviceGetMemPool: the driver's
 * answer, with a NULL out-argument refused once the device is known good.
 * (The driver's entry points are known only after rt_init.) */
static cudaError_t device_pool(bool default_pool, cudaMemPool_t *memPool, int device)
{
    RT_TRY(rt_init());
    CUmemoryPool p;
    CUresult r = (default_pool ? rt_drv.cuDeviceGetDefaultMemPool : rt_drv.cuDeviceGetMemPool)(&p, device);
    if (r == CUDA_SUCCESS && memPool)
        *memPool = (cudaMemPool_t)(void *)p;
    return rt_ret_drv(memPool || r != CUDA_SUCCESS ? r : CUDA_ERROR_INVALID_VALUE);
}

RT_API cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t *memPool, int device)
{
    return device_pool(true, memPool, device);
}

RT_API cudaError_t cudaDeviceGetMemPool(cudaMemPool_t *memPool, int device)
{
    return device_pool(false, memPool, device);
}

RT_API cudaError_t cudaDeviceSetMemPool(int device, cudaMemPool_t memPool)
{
    RT_TRY(rt_init());
    return rt_ret_drv(rt_drv.cuDeviceSetMemPool(device, POOL(memPool)));
}

RT_API cudaError_t cudaMemPoolCreate(cudaMemPool_t *memPool, const struct cudaMemPoolProps *props)
{
    RT_TRY(rt_init());
    if (!memPool || !props)
        return rt_ret(cudaErrorInvalidValue);
    CUmemPoolProps p = {
        .allocType = (CUmemAllocationType)props->allocType,
        .handleTypes = (CUmemAllocationHandleType)props->handleTypes,
        .location = { .type = (CUmemLocationType)props->location.type, .id = props->location.id },
    };
    CUmemoryPool out;
    CUresult r = rt_drv.cuMemPoolCreate(&out, &p);
    if (r == CUDA_SUCCESS)
        *memPool = (cudaMemPool_t)(void *)out;
    return rt_ret_drv(r);
}

RT_API cudaError_t cudaMemPoolDestroy(cudaMemPool_t memPool)
{
    RT_TRY(rt_init());
    return rt_ret_drv(rt_drv.cuMemPoolDestroy(POOL(memPool)));
}

/* The runtime's attribute numbers are the driver's. */
RT_API cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t memPool, enum cudaMemPoolAttr attr, void *value)
{
    RT_TRY(rt_init());
    return rt_ret_drv(rt_drv.cuMemPoolSetAttribute(POOL(memPool), (CUmemPool_attribute)attr, value));
}

RT_API cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t memPool, enum cudaMemPoolAttr attr, void *value)
{
    RT_TRY(rt_init());
    return rt_ret_drv(rt_drv.cuMemPoolGetAttribute(POOL(memPool), (CUmemPool_attribute)attr, value));
}

RT_API cudaError_t cudaMemPoolSetAccess(cudaMemPool_t memPool, const struct cudaMemAccessDesc *descList,
                                        size_t count)
{
    RT_TRY(rt_init());
    if (count && !descList)
        return rt_ret(cudaErrorInvalidValue);
    CUmemAccessDesc d[16];
    if (count > 16)
        return rt_ret(cudaErrorInvalidValue);
    for (size_t i = 0; i < count; i++)
        d[i] = (CUmemAccessDesc){
            .location = { .type = (CUmemLocationType)descList[i].location.type,
                          .id = descList[i].location.id },
            .flags = (CUmemAccess_flags)descList[i].flags };
    return rt_ret_drv(rt_drv.cuMemPoolSetAccess(POOL(memPool), d, count));
}

RT_API cudaError_t cudaMemPoolTrimTo(cudaMemPool_t memPool, size_t minBytesToKeep)
{
    RT_TRY(rt_init());
    return rt_ret_drv(rt_drv.cuMemPoolTrimTo(POOL(memPool), minBytesToKeep));
}

static cudaError_t from_pool(void **ptr, size_t size, cudaMemPool_t pool, cudaStream_t s, bool ptsz)
{
    if (!ptr)
        return rt_ret(cudaErrorInvalidValue);
    RT_TRY(rt_init());
    if (size == 0) {              /* as cudaMallocAsync: success with NULL */
        *ptr = NULL;
        return cudaSuccess;
    }
    CUdeviceptr p;
    CUresult r = RT_DRV(cuMemAllocFromPoolAsync, ptsz)(&p, size, POOL(pool), (CUstream)s);
    if (r == CUDA_SUCCESS)
        *ptr = (void *)(uintptr_t)p;
    return rt_ret_drv(r);
}

RT_API cudaError_t cudaMallocFromPoolAsync(void **ptr, size_t size, cudaMemPool_t memPool, cudaStream_t s)
{
    return from_pool(ptr, size, memPool, s, false);
}

RT_API cudaError_t cudaMallocFromPoolAsync_ptsz(void **ptr, size_t size, cudaMemPool_t memPool,
                                                cudaStream_t s)
{
    return from_pool(ptr, size, memPool, s, true);
}
