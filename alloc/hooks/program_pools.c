/*
 * alloc/hooks/program_pools.c - devices whose stream-ordered memory pool the
 * program configures itself.
 *
 * cudaMallocAsync / cuMemAllocAsync take memory from "the current memory
 * pool of the stream's device" (CUDA runtime API, Stream Ordered Memory
 * Allocator). A program that makes another pool current
 * (cudaDeviceSetMemPool), or changes the default pool's attributes (release
 * threshold, reuse policies) or its access list (cudaMemPoolSetAccess: a
 * peer device may then use the memory), has chosen where that memory comes
 * from and who may touch it. The cache cannot honour such a choice (its
 * segments come from cudaMalloc and have no access list), so from then on
 * that device's stream-ordered allocations go to the driver unchanged and
 * are recorded as pass-through (VT_PASS_FROM_POOL); their frees reach the
 * driver as frees of pointers the cache does not own. Allocations the cache
 * made before stay the cache's.
 */
#include <stdatomic.h>
#include <string.h>

#include <cuda.h>

#include "cuda_driver.h"
#include "hooks_internal.h"

#define MAX_DEVICES 64

static atomic_bool programs_pool[MAX_DEVICES];

bool vt__hk_pool_is_programs(int dev)
{
    return dev >= 0 && dev < MAX_DEVICES &&
           atomic_load_explicit(&programs_pool[dev], memory_order_relaxed);
}

static CUresult default_pool(int dev, CUmemoryPool *out)
{
    static void *_Atomic fn;
    void *p = atomic_load_explicit(&fn, memory_order_acquire);
    if (!p) {
        const vt__driver_api *d = vt__driver();
        CUdriverProcAddressQueryResult st;
        if (!d || !d->cuGetProcAddress_v2 ||
            d->cuGetProcAddress_v2("cuDeviceGetDefaultMemPool", &p, 11020, 0, &st) != CUDA_SUCCESS ||
            !p)
            return CUDA_ERROR_NOT_FOUND;
        atomic_store_explicit(&fn, p, memory_order_release);
    }
    CUresult (*get)(CUmemoryPool *, CUdevice);
    memcpy(&get, &p, sizeof p);
    return get(out, (CUdevice)dev);
}

void vt__hk_pool_made_current(int dev, const void *pool)
{
    if (dev < 0 || dev >= MAX_DEVICES)
        return;
    CUmemoryPool def;
    /* Back to an untouched default: the device's allocations could be the
     * cache's again, but what the program configured stays its choice. */
    if (default_pool(dev, &def) == CUDA_SUCCESS && (const void *)def == pool)
        return;
    atomic_store_explicit(&programs_pool[dev], true, memory_order_relaxed);
}

void vt__hk_pool_configured(const void *pool)
{
    const vt__driver_api *d = vt__driver();
    int n = 0;
    if (!d || d->cuDeviceGetCount(&n) != CUDA_SUCCESS)
        return;
    for (int dev = 0; dev < n && dev < MAX_DEVICES; dev++) {
        CUmemoryPool def;
        if (default_pool(dev, &def) == CUDA_SUCCESS && (const void *)def == pool)
            atomic_store_explicit(&programs_pool[dev], true, memory_order_relaxed);
    }
}
