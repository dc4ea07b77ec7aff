/* tests/sim/runtime_peer.c - peer access between simulated devices, PCI
 * identity, and interprocess handles.
 *
 * Every simulated device's memory is host memory in one address space, so a
 * device can reach any other's memory: peer access is offered between any
 * two distinct devices and enabling it is bookkeeping with the documented
 * errors. A peer copy is one ordered driver copy. Interprocess memory
 * handles are the driver's (sim_ipc.c); event handles are not simulated:
 * cudaErrorNotSupported.
 */
#include "runtime_internal.h"

#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#define MAX_PEERS 16                     /* = the driver's SIM_MAX_DEVICES */

static atomic_ushort peer_enabled[MAX_PEERS];   /* bit p of [d]: d may access p */

static cudaError_t valid_device(int device)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess)
        return e;
    return device >= 0 && device < n && device < MAX_PEERS ? cudaSuccess : cudaErrorInvalidDevice;
}

RT_API cudaError_t cudaDeviceCanAccessPeer(int *canAccessPeer, int device, int peerDevice)
{
    if (!canAccessPeer)
        return rt_ret(cudaErrorInvalidValue);
    cudaError_t e = valid_device(device);
    if (e == cudaSuccess)
        e = valid_device(peerDevice);
    if (e == cudaSuccess && device == peerDevice)
        e = cudaErrorInvalidDevice;
    if (e != cudaSuccess)
        return rt_ret(e);
    *canAccessPeer = 1;
    return cudaSuccess;
}

RT_API cudaError_t cudaDeviceEnablePeerAccess(int peerDevice, unsigned int flags)
{
    cudaError_t e = rt_enter();
    if (e != cudaSuccess)
        return rt_ret(e);
    if (flags != 0)
        return rt_ret(cudaErrorInvalidValue);
    int self = rt_current_device();
    e = valid_device(peerDevice);
    if (e == cudaSuccess && peerDevice == self)
        e = cudaErrorInvalidDevice;
    if (e != cudaSuccess)
        return rt_ret(e);
    unsigned short bit = (unsigned short)(1u << peerDevice);
    if (atomic_fetch_or(&peer_enabled[self], bit) & bit)
        return rt_ret(cudaErrorPeerAccessAlreadyEnabled);
    return cudaSuccess;
}

/* Unified addressing: the devices are implied by the pointers. */
RT_API cudaError_t cudaMemcpyPeerAsync(void *dst, int dstDevice, const void *src, int srcDevice,
                                       size_t count, cudaStream_t stream)
{
    cudaError_t e = rt_enter();
    if (e == cudaSuccess)
        e = valid_device(dstDevice);
    if (e == cudaSuccess)
        e = valid_device(srcDevice);
    if (e != cudaSuccess)
        return rt_ret(e);
    return rt_ret_drv(rt_drv.cuMemcpyAsync((CUdeviceptr)(uintptr_t)dst, (CUdeviceptr)(uintptr_t)src,
                                           count, (CUstream)stream));
}

/* "domain:bus:device.function", from the device's PCI attributes. */
RT_API cudaError_t cudaDeviceGetPCIBusId(char *pciBusId, int len, int device)
{
    if (!pciBusId || len <= 0)
        return rt_ret(cudaErrorInvalidValue);
    RT_TRY(valid_device(device));
    int domain = 0, bus = 0, dev = 0;
    rt_drv.cuDeviceGetAttribute(&domain, CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID, device);
    rt_drv.cuDeviceGetAttribute(&bus, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, device);
    rt_drv.cuDeviceGetAttribute(&dev, CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID, device);
    snprintf(pciBusId, (size_t)len, "%08x:%02x:%02x.0", (unsigned)domain, (unsigned)bus, (unsigned)dev);
    return cudaSuccess;
}

/* ---- interprocess memory handles: the driver's (sim_ipc.c) -------------- */

RT_API cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t *handle, void *devPtr)
{
    RT_TRY(rt_enter());
    if (!handle)
        return rt_ret(cudaErrorInvalidValue);
    CUipcMemHandle h;
    CUresult r = rt_drv.cuIpcGetMemHandle(&h, (CUdeviceptr)(uintptr_t)devPtr);
    if (r != CUDA_SUCCESS)
        return rt_ret_drv(r);
    memcpy(handle->reserved, h.reserved, sizeof handle->reserved);
    return cudaSuccess;
}

RT_API cudaError_t cudaIpcOpenMemHandle(void **devPtr, cudaIpcMemHandle_t handle, unsigned int flags)
{
    RT_TRY(rt_enter());
    if (!devPtr)
        return rt_ret(cudaErrorInvalidValue);
    CUipcMemHandle h;
    memcpy(h.reserved, handle.reserved, sizeof h.reserved);
    CUdeviceptr p = 0;
    CUresult r = rt_drv.cuIpcOpenMemHandle(&p, h, flags);
    if (r != CUDA_SUCCESS)
        return rt_ret_drv(r);
    *devPtr = (void *)(uintptr_t)p;
    return cudaSuccess;
}

RT_API cudaError_t cudaIpcCloseMemHandle(void *devPtr)
{
    RT_TRY(rt_enter());
    return rt_ret_drv(rt_drv.cuIpcCloseMemHandle((CUdeviceptr)(uintptr_t)devPtr));
}

/* ---- interprocess event handles: the driver's (sim_ipc_event.c) --------- */

RT_API cudaError_t cudaIpcGetEventHandle(cudaIpcEventHandle_t *handle, cudaEvent_t event)
{
    RT_TRY(rt_enter());
    if (!handle)
        return rt_ret(cudaErrorInvalidValue);
    CUipcEventHandle h;
    CUresult r = rt_drv.cuIpcGetEventHandle(&h, (CUevent)event);
    if (r != CUDA_SUCCESS)
        return rt_ret_drv(r);
    memcpy(handle->reserved, h.reserved, sizeof handle->reserved);
    return cudaSuccess;
}

RT_API cudaError_t cudaIpcOpenEventHandle(cudaEvent_t *event, cudaIpcEventHandle_t handle)
{
    RT_TRY(rt_enter());
    if (!event)
        return rt_ret(cudaErrorInvalidValue);
    CUipcEventHandle h;
    memcpy(h.reserved, handle.reserved, sizeof h.reserved);
    CUevent e = NULL;
    CUresult r = rt_drv.cuIpcOpenEventHandle(&e, h);
    if (r != CUDA_SUCCESS)
        return rt_ret_drv(r);
    *event = (cudaEvent_t)e;
    return cudaSuccess;
}
