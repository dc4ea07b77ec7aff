/* tests/sim/driver_procaddr.c - cuGetProcAddress: the driver's symbol table.
 *
 * What the real driver does, and this one too:
 *  - `symbol` is the base name ("cuMemAlloc"), never a versioned one
 *    ("cuMemAlloc_v2" is not found);
 *  - `cudaVersion` picks the ABI: the entry with the highest minimum version
 *    not above it (cuMemAlloc at >= 3020 is cuMemAlloc_v2; cuGetProcAddress
 *    at >= 12000 is cuGetProcAddress_v2; cuCtxGetDevice and cuCtxSynchronize
 *    at >= 13000 are the _v2 that take a context; cuStreamGetCtx at >= 12050
 *    is the _v2 with a green context: cudaTypedefs.h, PFN_<name>_v<version>);
 *  - CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM returns the _ptsz/_ptds
 *    variant where one exists, the plain function otherwise; 0 and
 *    CU_GET_PROC_ADDRESS_LEGACY_STREAM return the legacy-stream one;
 *  - unknown symbol: status CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND; known but
 *    only from a later version: CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT.
 *    Both set *pfn to NULL. cuGetProcAddress_v2 (12.0+) then returns
 *    CUDA_SUCCESS, as its documentation in cuda.h says: the status is the
 *    answer. The 11.3 cuGetProcAddress, which has no status, returns
 *    CUDA_ERROR_NOT_FOUND, as its documentation said;
 *  - a cudaVersion above the driver's version (13000) is
 *    CUDA_ERROR_INVALID_VALUE;
 *  - it works before cuInit (the runtime asks for cuInit through it).
 * Functions whose old ABI differs (32-bit CUdeviceptr, before 3.2) are not
 * provided, asking for them is "version not sufficient", except cuMemAlloc:
 * an H200 (driver 580) handed out its 3.0 ABI for cudaVersion 3010
 * (CU_GET_PROC_ADDRESS_SUCCESS), so it is here too, and refuses to run
 * (what the real one does when called was not seen).
 */
#include "sim_internal.h"

#include <string.h>

/* v1 entry points whose signature equals the _v2 one: exported under their
 * old names too, as the real library does, and served for old versions.
 * cuda.h maps these names to the _v2 ones: unmap them here. */
#undef cuStreamDestroy
#undef cuEventDestroy
#undef cuCtxPushCurrent
#undef cuCtxPopCurrent
#undef cuDevicePrimaryCtxRelease
#undef cuDevicePrimaryCtxReset
#undef cuIpcOpenMemHandle
CUresult cuIpcOpenMemHandle(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags);
CUresult cuStreamDestroy(CUstream h);
CUresult cuEventDestroy(CUevent h);
CUresult cuCtxPushCurrent(CUcontext c);
CUresult cuCtxPopCurrent(CUcontext *c);
CUresult cuDevicePrimaryCtxRelease(CUdevice d);
CUresult cuDevicePrimaryCtxReset(CUdevice d);

SIM_API CUresult cuStreamDestroy(CUstream h)            { return cuStreamDestroy_v2(h); }
SIM_API CUresult cuEventDestroy(CUevent h)              { return cuEventDestroy_v2(h); }
SIM_API CUresult cuCtxPushCurrent(CUcontext c)          { return cuCtxPushCurrent_v2(c); }
SIM_API CUresult cuCtxPopCurrent(CUcontext *c)          { return cuCtxPopCurrent_v2(c); }
SIM_API CUresult cuDevicePrimaryCtxRelease(CUdevice d)  { return cuDevicePrimaryCtxRelease_v2(d); }
SIM_API CUresult cuDevicePrimaryCtxReset(CUdevice d)    { return cuDevicePrimaryCtxReset_v2(d); }

#undef cuMemAlloc
CUresult cuMemAlloc(unsigned int *dptr, unsigned int bytesize);
SIM_API CUresult cuMemAlloc(unsigned int *dptr, unsigned int bytesize)
{
    (void)dptr;
    (void)bytesize;
    return CUDA_ERROR_NOT_SUPPORTED;   /* the 32-bit ABI (see the top) */
}

/* Any function pointer type; stored as one, handed out through memcpy since
 * ISO C has no conversion between function and object pointers. */
typedef void (*sim_fn)(void);

typedef struct proc_entry {
    const char *name;                /* base name */
    int         min_version;         /* first CUDA version with this ABI */
    sim_fn      fn;                  /* legacy default stream */
    sim_fn      fn_ptsz;             /* per-thread default stream, or NULL */
} proc_entry;

#define F(f) ((sim_fn)(f))
#define E(name, ver, fn)        { name, ver, F(fn), NULL }
#define S(name, ver, fn, ptsz)  { name, ver, F(fn), F(ptsz) }

static const proc_entry table[] = {
    E("cuGetProcAddress", 11030, cuGetProcAddress),
    E("cuGetProcAddress", 12000, cuGetProcAddress_v2),
    E("cuInit", 2000, cuInit),
    E("cuDriverGetVersion", 2020, cuDriverGetVersion),
    E("cuGetErrorString", 6000, cuGetErrorString),
    E("cuGetErrorName", 6000, cuGetErrorName),
    E("cuDeviceGet", 2000, cuDeviceGet),
    E("cuDeviceGetCount", 2000, cuDeviceGetCount),
    E("cuDeviceGetName", 2000, cuDeviceGetName),
    E("cuDeviceGetAttribute", 2000, cuDeviceGetAttribute),
    E("cuDeviceTotalMem", 3020, cuDeviceTotalMem_v2),
    E("cuDeviceGetUuid", 11040, cuDeviceGetUuid_v2),
    E("cuDevicePrimaryCtxRetain", 7000, cuDevicePrimaryCtxRetain),
    E("cuDevicePrimaryCtxRelease", 7000, cuDevicePrimaryCtxRelease),
    E("cuDevicePrimaryCtxRelease", 11000, cuDevicePrimaryCtxRelease_v2),
    E("cuDevicePrimaryCtxReset", 7000, cuDevicePrimaryCtxReset),
    E("cuDevicePrimaryCtxReset", 11000, cuDevicePrimaryCtxReset_v2),
    E("cuDevicePrimaryCtxGetState", 7000, cuDevicePrimaryCtxGetState),
    E("cuCtxGetCurrent", 4000, cuCtxGetCurrent),
    E("cuCtxSetCurrent", 4000, cuCtxSetCurrent),
    E("cuCtxPushCurrent", 2000, cuCtxPushCurrent),
    E("cuCtxPushCurrent", 4000, cuCtxPushCurrent_v2),
    E("cuCtxPopCurrent", 2000, cuCtxPopCurrent),
    E("cuCtxPopCurrent", 4000, cuCtxPopCurrent_v2),
    E("cuCtxGetDevice", 2000, cuCtxGetDevice),
    E("cuCtxGetDevice", 13000, cuCtxGetDevice_v2),
    E("cuCtxSynchronize", 2000, cuCtxSynchronize),
    E("cuCtxSynchronize", 13000, cuCtxSynchronize_v2),
    E("cuCtxGetApiVersion", 3020, cuCtxGetApiVersion),
    E("cuCtxGetStreamPriorityRange", 5050, cuCtxGetStreamPriorityRange),
    E("cuCtxGetLimit", 3010, cuCtxGetLimit),
    E("cuCtxSetLimit", 3010, cuCtxSetLimit),
    E("cuModuleLoadData", 2000, cuModuleLoadData),
    E("cuModuleUnload", 2000, cuModuleUnload),
    E("cuModuleGetFunction", 2000, cuModuleGetFunction),
    E("cuFuncGetAttribute", 2020, cuFuncGetAttribute),
    E("cuFuncSetAttribute", 9000, cuFuncSetAttribute),
    E("cuFuncSetCacheConfig", 3000, cuFuncSetCacheConfig),
    E("cuOccupancyMaxActiveClusters", 11070, cuOccupancyMaxActiveClusters),
    E("cuModuleLoad", 2000, cuModuleLoad),
    E("cuModuleLoadDataEx", 2010, cuModuleLoadDataEx),
    E("cuOccupancyMaxActiveBlocksPerMultiprocessor", 6050, cuOccupancyMaxActiveBlocksPerMultiprocessor),
    E("cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags", 7000,
      cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags),
    S("cuLaunchCooperativeKernel", 9000, cuLaunchCooperativeKernel, cuLaunchCooperativeKernel_ptsz),
    E("cuLinkCreate", 6050, cuLinkCreate_v2),
    E("cuLinkAddData", 6050, cuLinkAddData_v2),
    E("cuLinkAddFile", 6050, cuLinkAddFile_v2),
    E("cuLinkComplete", 5050, cuLinkComplete),
    E("cuLinkDestroy", 5050, cuLinkDestroy),
    E("cuTensorMapEncodeTiled", 12000, cuTensorMapEncodeTiled),
    S("cuLaunchKernelEx", 11060, cuLaunchKernelEx, cuLaunchKernelEx_ptsz),
    E("cuMemAlloc", 2000, cuMemAlloc),
    E("cuMemAlloc", 3020, cuMemAlloc_v2),
    E("cuMemFree", 3020, cuMemFree_v2),
    E("cuMemGetInfo", 3020, cuMemGetInfo_v2),
    E("cuMemAllocManaged", 6000, cuMemAllocManaged),
    E("cuMemAllocHost", 3020, cuMemAllocHost_v2),
    E("cuMemHostAlloc", 2020, cuMemHostAlloc),
    E("cuMemFreeHost", 2000, cuMemFreeHost),
    E("cuMemHostGetDevicePointer", 3020, cuMemHostGetDevicePointer_v2),
    E("cuMemGetAddressRange", 3020, cuMemGetAddressRange_v2),
    E("cuMemAllocPitch", 3020, cuMemAllocPitch_v2),
    E("cuArrayCreate", 3020, cuArrayCreate_v2),
    E("cuArray3DCreate", 3020, cuArray3DCreate_v2),
    E("cuArrayDestroy", 2000, cuArrayDestroy),
    E("cuArrayGetDescriptor", 3020, cuArrayGetDescriptor_v2),
    E("cuIpcGetMemHandle", 4010, cuIpcGetMemHandle),
    E("cuIpcOpenMemHandle", 4010, cuIpcOpenMemHandle),
    E("cuIpcOpenMemHandle", 11000, cuIpcOpenMemHandle_v2),
    E("cuIpcCloseMemHandle", 4010, cuIpcCloseMemHandle),
    E("cuIpcGetEventHandle", 4010, cuIpcGetEventHandle),
    E("cuIpcOpenEventHandle", 4010, cuIpcOpenEventHandle),
    E("cuMemHostRegister", 6050, cuMemHostRegister_v2),
    E("cuMemHostUnregister", 4000, cuMemHostUnregister),
    E("cuDeviceGetDefaultMemPool", 11020, cuDeviceGetDefaultMemPool),
    E("cuDeviceGetMemPool", 11020, cuDeviceGetMemPool),
    E("cuDeviceSetMemPool", 11020, cuDeviceSetMemPool),
    E("cuMemPoolCreate", 11020, cuMemPoolCreate),
    E("cuMemPoolDestroy", 11020, cuMemPoolDestroy),
    E("cuMemPoolSetAttribute", 11020, cuMemPoolSetAttribute),
    E("cuMemPoolGetAttribute", 11020, cuMemPoolGetAttribute),
    E("cuMemPoolSetAccess", 11020, cuMemPoolSetAccess),
    E("cuMemPoolTrimTo", 11020, cuMemPoolTrimTo),
    S("cuMemAllocFromPoolAsync", 11020, cuMemAllocFromPoolAsync, cuMemAllocFromPoolAsync_ptsz),
    S("cuMemPrefetchAsync", 12020, cuMemPrefetchAsync_v2, cuMemPrefetchAsync_v2_ptsz),
    S("cuStreamAttachMemAsync", 6000, cuStreamAttachMemAsync, cuStreamAttachMemAsync_ptsz),
    S("cuStreamBeginCapture", 10010, cuStreamBeginCapture_v2, cuStreamBeginCapture_v2_ptsz),
    S("cuStreamEndCapture", 10000, cuStreamEndCapture, cuStreamEndCapture_ptsz),
    E("cuThreadExchangeStreamCaptureMode", 10010, cuThreadExchangeStreamCaptureMode),
    S("cuStreamIsCapturing", 10000, cuStreamIsCapturing, cuStreamIsCapturing_ptsz),
    S("cuStreamGetCaptureInfo", 12030, cuStreamGetCaptureInfo_v3, cuStreamGetCaptureInfo_v3_ptsz),
    E("cuGraphInstantiate", 12000, cuGraphInstantiateWithFlags),
    E("cuGraphInstantiateWithFlags", 11040, cuGraphInstantiateWithFlags),
    S("cuGraphLaunch", 10000, cuGraphLaunch, cuGraphLaunch_ptsz),
    E("cuGraphExecDestroy", 10000, cuGraphExecDestroy),
    E("cuGraphDestroy", 10000, cuGraphDestroy),
    E("cuGraphGetNodes", 10000, cuGraphGetNodes),
    S("cuMemAllocAsync", 11020, cuMemAllocAsync, cuMemAllocAsync_ptsz),
    S("cuMemFreeAsync", 11020, cuMemFreeAsync, cuMemFreeAsync_ptsz),
    S("cuMemcpy", 4000, cuMemcpy, cuMemcpy_ptds),
    S("cuMemcpyAsync", 4000, cuMemcpyAsync, cuMemcpyAsync_ptsz),
    S("cuMemcpyHtoD", 3020, cuMemcpyHtoD_v2, cuMemcpyHtoD_v2_ptds),
    S("cuMemcpyDtoH", 3020, cuMemcpyDtoH_v2, cuMemcpyDtoH_v2_ptds),
    S("cuMemcpyDtoD", 3020, cuMemcpyDtoD_v2, cuMemcpyDtoD_v2_ptds),
    S("cuMemcpyHtoDAsync", 3020, cuMemcpyHtoDAsync_v2, cuMemcpyHtoDAsync_v2_ptsz),
    S("cuMemcpyDtoHAsync", 3020, cuMemcpyDtoHAsync_v2, cuMemcpyDtoHAsync_v2_ptsz),
    S("cuMemcpyDtoDAsync", 3020, cuMemcpyDtoDAsync_v2, cuMemcpyDtoDAsync_v2_ptsz),
    S("cuMemsetD8", 3020, cuMemsetD8_v2, cuMemsetD8_v2_ptds),
    S("cuMemsetD8Async", 3020, cuMemsetD8Async, cuMemsetD8Async_ptsz),
    S("cuMemsetD32", 3020, cuMemsetD32_v2, cuMemsetD32_v2_ptds),
    S("cuMemsetD32Async", 3020, cuMemsetD32Async, cuMemsetD32Async_ptsz),
    S("cuStreamWriteValue32", 11070, cuStreamWriteValue32_v2, cuStreamWriteValue32_v2_ptsz),
    E("cuPointerGetAttribute", 4000, cuPointerGetAttribute),
    E("cuPointerGetAttributes", 7000, cuPointerGetAttributes),
    E("cuMemGetAllocationGranularity", 10020, cuMemGetAllocationGranularity),
    E("cuMemCreate", 10020, cuMemCreate),
    E("cuMemRelease", 10020, cuMemRelease),
    E("cuMemAddressReserve", 10020, cuMemAddressReserve),
    E("cuMemAddressFree", 10020, cuMemAddressFree),
    E("cuMemMap", 10020, cuMemMap),
    E("cuMemUnmap", 10020, cuMemUnmap),
    E("cuMemSetAccess", 10020, cuMemSetAccess),
    E("cuMemRetainAllocationHandle", 11000, cuMemRetainAllocationHandle),
    E("cuMemExportToShareableHandle", 10020, cuMemExportToShareableHandle),
    E("cuMemImportFromShareableHandle", 10020, cuMemImportFromShareableHandle),
    E("cuMemGetAllocationPropertiesFromHandle", 10020, cuMemGetAllocationPropertiesFromHandle),
    E("cuMulticastCreate", 12010, cuMulticastCreate),
    E("cuMulticastGetGranularity", 12010, cuMulticastGetGranularity),
    E("cuMulticastAddDevice", 12010, cuMulticastAddDevice),
    E("cuMulticastBindMem", 12010, cuMulticastBindMem),
    E("cuMulticastBindAddr", 12010, cuMulticastBindAddr),
    E("cuMulticastUnbind", 12010, cuMulticastUnbind),
    E("cuDeviceGetDevResource", 12040, cuDeviceGetDevResource),
    E("cuDevSmResourceSplitByCount", 12040, cuDevSmResourceSplitByCount),
    E("cuDevResourceGenerateDesc", 12040, cuDevResourceGenerateDesc),
    E("cuGreenCtxCreate", 12040, cuGreenCtxCreate),
    E("cuGreenCtxDestroy", 12040, cuGreenCtxDestroy),
    E("cuCtxFromGreenCtx", 12040, cuCtxFromGreenCtx),
    E("cuGreenCtxStreamCreate", 12050, cuGreenCtxStreamCreate),
    E("cuLogsRegisterCallback", 12090, cuLogsRegisterCallback),
    E("cuLogsUnregisterCallback", 12090, cuLogsUnregisterCallback),
    E("cuStreamCreate", 2000, cuStreamCreate),
    E("cuStreamCreateWithPriority", 5050, cuStreamCreateWithPriority),
    E("cuStreamDestroy", 2000, cuStreamDestroy),
    E("cuStreamDestroy", 4000, cuStreamDestroy_v2),
    S("cuStreamSynchronize", 2000, cuStreamSynchronize, cuStreamSynchronize_ptsz),
    S("cuStreamQuery", 2000, cuStreamQuery, cuStreamQuery_ptsz),
    S("cuStreamWaitEvent", 3020, cuStreamWaitEvent, cuStreamWaitEvent_ptsz),
    S("cuStreamGetPriority", 5050, cuStreamGetPriority, cuStreamGetPriority_ptsz),
    S("cuStreamGetFlags", 5050, cuStreamGetFlags, cuStreamGetFlags_ptsz),
    S("cuStreamGetCtx", 9020, cuStreamGetCtx, cuStreamGetCtx_ptsz),
    S("cuStreamGetCtx", 12050, cuStreamGetCtx_v2, cuStreamGetCtx_v2_ptsz),
    S("cuStreamGetDevice", 12080, cuStreamGetDevice, cuStreamGetDevice_ptsz),
    S("cuLaunchHostFunc", 10000, cuLaunchHostFunc, cuLaunchHostFunc_ptsz),
    S("cuLaunchKernel", 4000, cuLaunchKernel, cuLaunchKernel_ptsz),
    E("cuEventCreate", 2000, cuEventCreate),
    E("cuEventDestroy", 2000, cuEventDestroy),
    E("cuEventDestroy", 4000, cuEventDestroy_v2),
    S("cuEventRecord", 2000, cuEventRecord, cuEventRecord_ptsz),
    S("cuEventRecordWithFlags", 11010, cuEventRecordWithFlags, cuEventRecordWithFlags_ptsz),
    E("cuEventQuery", 2000, cuEventQuery),
    E("cuEventSynchronize", 2000, cuEventSynchronize),
    E("cuEventElapsedTime", 2000, cuEventElapsedTime),
    E("cuEventElapsedTime", 12080, cuEventElapsedTime_v2),
};

CUresult sim_procaddr_lookup(const char *symbol, void **pfn, int cuda_version,
                             cuuint64_t flags, CUdriverProcAddressQueryResult *status)
{
    const cuuint64_t known = CU_GET_PROC_ADDRESS_LEGACY_STREAM |
                             CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
    if (!symbol || !pfn || (flags & ~known))
        return CUDA_ERROR_INVALID_VALUE;
    *pfn = NULL;
    if (cuda_version > SIM_DRIVER_VERSION)
        return CUDA_ERROR_INVALID_VALUE;
    const proc_entry *best = NULL;
    bool seen = false;
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        if (strcmp(table[i].name, symbol) != 0)
            continue;
        seen = true;
        if (table[i].min_version <= cuda_version &&
            (!best || table[i].min_version > best->min_version))
            best = &table[i];
    }
    if (!best) {
        if (status)
            *status = seen ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT
                           : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
        return CUDA_SUCCESS;
    }
    bool ptsz = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
    sim_fn fn = ptsz && best->fn_ptsz ? best->fn_ptsz : best->fn;
    memcpy(pfn, &fn, sizeof fn);
    if (status)
        *status = CU_GET_PROC_ADDRESS_SUCCESS;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion,
                                     cuuint64_t flags, CUdriverProcAddressQueryResult *symbolStatus)
{
    return sim_procaddr_lookup(symbol, pfn, cudaVersion, flags, symbolStatus);
}

/* The 11.3 ABI: no status out-parameter. */
SIM_API CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags)
{
    CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SUCCESS;
    CUresult rc = sim_procaddr_lookup(symbol, pfn, cudaVersion, flags, &status);
    if (rc == CUDA_SUCCESS && status != CU_GET_PROC_ADDRESS_SUCCESS)
        return CUDA_ERROR_NOT_FOUND;
    return rc;
}
