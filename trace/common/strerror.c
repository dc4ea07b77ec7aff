/* trace/common/strerror.c - vt_strerror(): the one text for every code the
 * API returns (vramtrace.h: 0, a CUDA error code, or a negative errno), in
 * libvramtrace.so; the Python package asks it instead of keeping a table. */
#include "vramtrace.h"

#include <stdio.h>
#include <string.h>

#include "cuda_errors.h"

VT_API const char *vt_strerror(int rc)
{
    static _Thread_local char buf[128];
    switch (rc) {
    case VT_CUDA_SUCCESS: return "success";
    case VT_CUDA_ERR_INVALID_VALUE: return "cudaErrorInvalidValue: invalid argument";
    case VT_CUDA_ERR_OOM: return "cudaErrorMemoryAllocation: out of memory";
    case VT_CUDA_ERR_NOT_INITIALIZED: return "cudaErrorInitializationError: initialization error";
    case VT_CUDA_ERR_INSUFFICIENT_DRIVER:
        return "cudaErrorInsufficientDriver: CUDA driver version is insufficient for CUDA runtime version";
    case VT_CUDA_ERR_NO_DEVICE: return "cudaErrorNoDevice: no CUDA-capable device is detected";
    case VT_CUDA_ERR_INVALID_DEVICE: return "cudaErrorInvalidDevice: invalid device ordinal";
    case VT_CUDA_ERR_NOT_READY: return "cudaErrorNotReady: device not ready";
    default: break;
    }
    if (rc < 0 && rc != -2147483647 - 1)
        return strerror_r(-rc, buf, sizeof buf);   /* GNU: returns the text */
    snprintf(buf, sizeof buf, "CUDA error %d", rc);
    return buf;
}
