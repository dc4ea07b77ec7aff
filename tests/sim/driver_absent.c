/* tests/sim/driver_absent.c - driver features the simulated device lacks.
 *
 * Multicast objects (NVLink switch multicast) and green contexts (SM
 * partitions) are entry points every CUDA 13 driver exports; a device
 * without the feature answers CUDA_ERROR_NOT_SUPPORTED (cuda.h lists it for
 * each of them), and says so up front: CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED
 * is 0. The checks that come first in every entry point (initialised,
 * arguments present, device ordinal) are made, so a caller learns of a
 * mistake before it learns of the missing feature.
 */
#include "sim_internal.h"

/* ---- multicast ---------------------------------------------------------- */

SIM_API CUresult cuMulticastCreate(CUmemGenericAllocationHandle *mcHandle, const CUmulticastObjectProp *prop)
{
    SIM_TRY(sim_check_init());
    if (!mcHandle || !prop)
        return CUDA_ERROR_INVALID_VALUE;
    return CUDA_ERROR_NOT_SUPPORTED;
}

SIM_API CUresult cuMulticastGetGranularity(size_t *granularity, const CUmulticastObjectProp *prop,
                                           CUmulticastGranularity_flags option)
{
    SIM_TRY(sim_check_init());
    (void)option;
    if (!granularity || !prop)
        return CUDA_ERROR_INVALID_VALUE;
    return CUDA_ERROR_NOT_SUPPORTED;
}

SIM_API CUresult cuMulticastAddDevice(CUmemGenericAllocationHandle mcHandle, CUdevice dev)
{
    SIM_TRY(sim_check_init());
    (void)mcHandle;
    if (!sim_device_get(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    return CUDA_ERROR_NOT_SUPPORTED;
}

SIM_API CUresult cuMulticastBindMem(CUmemGenericAllocationHandle mcHandle, size_t mcOffset,
                                    CUmemGenericAllocationHandle memHandle, size_t memOffset,
                                    size_t size, unsigned long long flags)
{
    SIM_TRY(sim_check_init());
    (void)mcHandle; (void)mcOffset; (void)memHandle; (void)memOffset; (void)size; (void)flags;
    return CUDA_ERROR_NOT_SUPPORTED;
}

SIM_API CUresult cuMulticastBindAddr(CUmemGenericAllocationHandle mcHandle, size_t mcOffset,
                                     CUdeviceptr memptr, size_t size, unsigned long long flags)
{
    SIM_TRY(sim_check_init());
    (void)mcHandle; (void)mcOffset; (void)memptr; (void)size; (void)flags;
    return CUDA_ERROR_NOT_SUPPORTED;
}

SIM_API CUresult cuMulticastUnbind(CUmemGenericAllocationHandle mcHandle, CUdevice dev, size_t mcOffset,
                                   size_t size)
{
    SIM_TRY(sim_check_init());
    (void)mcHandle; (void)mcOffset; (void)size;
    if (!sim_device_get(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    return CUDA_ERROR_NOT_SUPPORTED;
}

/* ---- green contexts ----------------------------------------------------- */

SIM_API CUresult cuDeviceGetDevResource(CUdevice device, CUdevResource *resource, CUdevResourceType type)
{
    SIM_TRY(sim_check_init());
    (void)type;
    if (!sim_device_get(device))
        return CUDA_ERROR_INVALID_DEVICE;
    if (!resource)
        return CUDA_ERROR_INVALID_VALUE;
    return CUDA_ERROR_NOT_SUPPORTED;
}

SIM_API CUresult cuDevSmResourceSplitByCount(CUdevResource *result, unsigned int *nbGroups,
                                             const CUdevResource *input, CUdevResource *remaining,
                                             unsigned int useFlags, unsigned int minCount)
{
    SIM_TRY(sim_check_init());
    (void)result; (void)remaining; (void)useFlags; (void)minCount;
    if (!nbGroups || !input)
        return CUDA_ERROR_INVALID_VALUE;
    return CUDA_ERROR_NOT_SUPPORTED;
}

SIM_API CUresult cuDevResourceGenerateDesc(CUdevResourceDesc *phDesc, CUdevResource *resources,
                                           unsigned int nbResources)
{
    SIM_TRY(sim_check_init());
    if (!phDesc || !resources || nbResources == 0)
        return CUDA_ERROR_INVALID_VALUE;
    return CUDA_ERROR_NOT_SUPPORTED;
}

SIM_API CUresult cuGreenCtxCreate(CUgreenCtx *phCtx, CUdevResourceDesc desc, CUdevice dev, unsigned int flags)
{
    SIM_TRY(sim_check_init());
    (void)desc; (void)flags;
    if (!sim_device_get(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    if (!phCtx)
        return CUDA_ERROR_INVALID_VALUE;
    return CUDA_ERROR_NOT_SUPPORTED;
}

/* No green context can exist: every handle is invalid. */
SIM_API CUresult cuGreenCtxDestroy(CUgreenCtx hCtx)
{
    SIM_TRY(sim_check_init());
    (void)hCtx;
    return CUDA_ERROR_INVALID_HANDLE;
}

SIM_API CUresult cuCtxFromGreenCtx(CUcontext *pContext, CUgreenCtx hCtx)
{
    SIM_TRY(sim_check_init());
    if (!pContext || !hCtx)
        return CUDA_ERROR_INVALID_VALUE;
    return CUDA_ERROR_INVALID_HANDLE;
}

SIM_API CUresult cuGreenCtxStreamCreate(CUstream *phStream, CUgreenCtx greenCtx, unsigned int flags,
                                        int priority)
{
    SIM_TRY(sim_check_init());
    (void)flags; (void)priority;
    if (!phStream || !greenCtx)
        return CUDA_ERROR_INVALID_VALUE;
    return CUDA_ERROR_INVALID_HANDLE;
}
