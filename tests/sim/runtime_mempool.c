/* tests/sim/runtime_mempool.c - the device's default memory pool, as far as
 * its handle and settable attributes go.
 *
 * cudaMallocAsync/cudaFreeAsync reach the driver's stream-ordered allocator,
 * which returns memory to the device at every free (nothing is kept in a
 * pool). So the default pool is one handle per device whose settable
 * attributes (release threshold, reuse policies) are remembered and read
 * back, whose trim has nothing to release, and whose usage counters
 * (reserved/used current and high) are not simulated: cudaErrorNotSupported.
 */
#include "runtime_internal.h"

#include <stdint.h>
#include <string.h>

#define MAX_POOLS 16                     /* = the driver's SIM_MAX_DEVICES */

typedef struct rt_pool {
    int      device;
    uint64_t release_threshold;          /* cudaMemPoolAttrReleaseThreshold */
    int      reuse[3];                   /* FollowEventDependencies, AllowOpportunistic, AllowInternalDependencies */
} rt_pool;

static rt_pool pools[MAX_POOLS];

RT_API cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t *memPool, int device)
{
    if (!memPool)
        return rt_ret(cudaErrorInvalidValue);
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess)
        return rt_ret(e);
    if (device < 0 || device >= n || device >= MAX_POOLS)
        return rt_ret(cudaErrorInvalidDevice);
    rt_pool *p = &pools[device];
    if (!p->reuse[0]) {                  /* the documented defaults: all reuse on */
        p->device = device;
        p->reuse[0] = p->reuse[1] = p->reuse[2] = 1;
    }
    *memPool = (cudaMemPool_t)(void *)p;
    return cudaSuccess;
}

static rt_pool *pool_of(cudaMemPool_t h)
{
    rt_pool *p = (rt_pool *)(void *)h;
    return p >= pools && p < pools + MAX_POOLS ? p : NULL;
}

static int *reuse_field(rt_pool *p, enum cudaMemPoolAttr a)
{
    switch (a) {
    case cudaMemPoolReuseFollowEventDependencies:   return &p->reuse[0];
    case cudaMemPoolReuseAllowOpportunistic:        return &p->reuse[1];
    case cudaMemPoolReuseAllowInternalDependencies: return &p->reuse[2];
    default:                                        return NULL;
    }
}

RT_API cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t memPool, enum cudaMemPoolAttr attr, void *value)
{
    rt_pool *p = pool_of(memPool);
    if (!p || !value)
        return rt_ret(cudaErrorInvalidValue);
    int *reuse = reuse_field(p, attr);
    if (reuse) {
        memcpy(reuse, value, sizeof *reuse);
        return cudaSuccess;
    }
    if (attr == cudaMemPoolAttrReleaseThreshold) {
        memcpy(&p->release_threshold, value, sizeof p->release_threshold);
        return cudaSuccess;
    }
    if (attr == cudaMemPoolAttrReservedMemHigh || attr == cudaMemPoolAttrUsedMemHigh)
        return rt_ret(cudaErrorNotSupported);   /* resetting them: not simulated */
    return rt_ret(cudaErrorInvalidValue);
}

RT_API cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t memPool, enum cudaMemPoolAttr attr, void *value)
{
    rt_pool *p = pool_of(memPool);
    if (!p || !value)
        return rt_ret(cudaErrorInvalidValue);
    int *reuse = reuse_field(p, attr);
    if (reuse) {
        memcpy(value, reuse, sizeof *reuse);
        return cudaSuccess;
    }
    if (attr == cudaMemPoolAttrReleaseThreshold) {
        memcpy(value, &p->release_threshold, sizeof p->release_threshold);
        return cudaSuccess;
    }
    return rt_ret(cudaErrorNotSupported);        /* the usage counters */
}

/* Every location may access every pool (one address space). */
RT_API cudaError_t cudaMemPoolSetAccess(cudaMemPool_t memPool, const struct cudaMemAccessDesc *descList,
                                        size_t count)
{
    if (!pool_of(memPool) || (count && !descList))
        return rt_ret(cudaErrorInvalidValue);
    for (size_t i = 0; i < count; i++)
        if (descList[i].location.type != cudaMemLocationTypeDevice ||
            descList[i].flags > cudaMemAccessFlagsProtReadWrite)
            return rt_ret(cudaErrorInvalidValue);
    return cudaSuccess;
}

/* Nothing is held above what is allocated: nothing to release. */
RT_API cudaError_t cudaMemPoolTrimTo(cudaMemPool_t memPool, size_t minBytesToKeep)
{
    (void)minBytesToKeep;
    return rt_ret(pool_of(memPool) ? cudaSuccess : cudaErrorInvalidValue);
}
