/* tests/sim/driver_errors.c - cuGetErrorName / cuGetErrorString.
 *
 * Names come from the CUresult enum itself (stringified), descriptions are
 * the driver's wording for the codes a memory tool meets; the rest describe
 * themselves by name. An unknown code is CUDA_ERROR_INVALID_VALUE with *pStr
 * set to NULL, as in the real driver.
 */
#include "sim_internal.h"

#include <stddef.h>
#include <stdlib.h>

#define SIM_CU_ERRORS \
    X(CUDA_SUCCESS) \
    X(CUDA_ERROR_INVALID_VALUE) \
    X(CUDA_ERROR_OUT_OF_MEMORY) \
    X(CUDA_ERROR_NOT_INITIALIZED) \
    X(CUDA_ERROR_DEINITIALIZED) \
    X(CUDA_ERROR_PROFILER_DISABLED) \
    X(CUDA_ERROR_PROFILER_NOT_INITIALIZED) \
    X(CUDA_ERROR_PROFILER_ALREADY_STARTED) \
    X(CUDA_ERROR_PROFILER_ALREADY_STOPPED) \
    X(CUDA_ERROR_STUB_LIBRARY) \
    X(CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER) \
    X(CUDA_ERROR_DEVICE_UNAVAILABLE) \
    X(CUDA_ERROR_NO_DEVICE) \
    X(CUDA_ERROR_INVALID_DEVICE) \
    X(CUDA_ERROR_DEVICE_NOT_LICENSED) \
    X(CUDA_ERROR_INVALID_IMAGE) \
    X(CUDA_ERROR_INVALID_CONTEXT) \
    X(CUDA_ERROR_CONTEXT_ALREADY_CURRENT) \
    X(CUDA_ERROR_MAP_FAILED) \
    X(CUDA_ERROR_UNMAP_FAILED) \
    X(CUDA_ERROR_ARRAY_IS_MAPPED) \
    X(CUDA_ERROR_ALREADY_MAPPED) \
    X(CUDA_ERROR_NO_BINARY_FOR_GPU) \
    X(CUDA_ERROR_ALREADY_ACQUIRED) \
    X(CUDA_ERROR_NOT_MAPPED) \
    X(CUDA_ERROR_NOT_MAPPED_AS_ARRAY) \
    X(CUDA_ERROR_NOT_MAPPED_AS_POINTER) \
    X(CUDA_ERROR_ECC_UNCORRECTABLE) \
    X(CUDA_ERROR_UNSUPPORTED_LIMIT) \
    X(CUDA_ERROR_CONTEXT_ALREADY_IN_USE) \
    X(CUDA_ERROR_PEER_ACCESS_UNSUPPORTED) \
    X(CUDA_ERROR_INVALID_PTX) \
    X(CUDA_ERROR_INVALID_GRAPHICS_CONTEXT) \
    X(CUDA_ERROR_NVLINK_UNCORRECTABLE) \
    X(CUDA_ERROR_JIT_COMPILER_NOT_FOUND) \
    X(CUDA_ERROR_UNSUPPORTED_PTX_VERSION) \
    X(CUDA_ERROR_JIT_COMPILATION_DISABLED) \
    X(CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY) \
    X(CUDA_ERROR_UNSUPPORTED_DEVSIDE_SYNC) \
    X(CUDA_ERROR_CONTAINED) \
    X(CUDA_ERROR_INVALID_SOURCE) \
    X(CUDA_ERROR_FILE_NOT_FOUND) \
    X(CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND) \
    X(CUDA_ERROR_SHARED_OBJECT_INIT_FAILED) \
    X(CUDA_ERROR_OPERATING_SYSTEM) \
    X(CUDA_ERROR_INVALID_HANDLE) \
    X(CUDA_ERROR_ILLEGAL_STATE) \
    X(CUDA_ERROR_LOSSY_QUERY) \
    X(CUDA_ERROR_NOT_FOUND) \
    X(CUDA_ERROR_NOT_READY) \
    X(CUDA_ERROR_ILLEGAL_ADDRESS) \
    X(CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES) \
    X(CUDA_ERROR_LAUNCH_TIMEOUT) \
    X(CUDA_ERROR_LAUNCH_INCOMPATIBLE_TEXTURING) \
    X(CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED) \
    X(CUDA_ERROR_PEER_ACCESS_NOT_ENABLED) \
    X(CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE) \
    X(CUDA_ERROR_CONTEXT_IS_DESTROYED) \
    X(CUDA_ERROR_ASSERT) \
    X(CUDA_ERROR_TOO_MANY_PEERS) \
    X(CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED) \
    X(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED) \
    X(CUDA_ERROR_HARDWARE_STACK_ERROR) \
    X(CUDA_ERROR_ILLEGAL_INSTRUCTION) \
    X(CUDA_ERROR_MISALIGNED_ADDRESS) \
    X(CUDA_ERROR_INVALID_ADDRESS_SPACE) \
    X(CUDA_ERROR_INVALID_PC) \
    X(CUDA_ERROR_LAUNCH_FAILED) \
    X(CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE) \
    X(CUDA_ERROR_TENSOR_MEMORY_LEAK) \
    X(CUDA_ERROR_NOT_PERMITTED) \
    X(CUDA_ERROR_NOT_SUPPORTED) \
    X(CUDA_ERROR_SYSTEM_NOT_READY) \
    X(CUDA_ERROR_SYSTEM_DRIVER_MISMATCH) \
    X(CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE) \
    X(CUDA_ERROR_MPS_CONNECTION_FAILED) \
    X(CUDA_ERROR_MPS_RPC_FAILURE) \
    X(CUDA_ERROR_MPS_SERVER_NOT_READY) \
    X(CUDA_ERROR_MPS_MAX_CLIENTS_REACHED) \
    X(CUDA_ERROR_MPS_MAX_CONNECTIONS_REACHED) \
    X(CUDA_ERROR_MPS_CLIENT_TERMINATED) \
    X(CUDA_ERROR_CDP_NOT_SUPPORTED) \
    X(CUDA_ERROR_CDP_VERSION_MISMATCH) \
    X(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED) \
    X(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED) \
    X(CUDA_ERROR_STREAM_CAPTURE_MERGE) \
    X(CUDA_ERROR_STREAM_CAPTURE_UNMATCHED) \
    X(CUDA_ERROR_STREAM_CAPTURE_UNJOINED) \
    X(CUDA_ERROR_STREAM_CAPTURE_ISOLATION) \
    X(CUDA_ERROR_STREAM_CAPTURE_IMPLICIT) \
    X(CUDA_ERROR_CAPTURED_EVENT) \
    X(CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD) \
    X(CUDA_ERROR_TIMEOUT) \
    X(CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE) \
    X(CUDA_ERROR_EXTERNAL_DEVICE) \
    X(CUDA_ERROR_INVALID_CLUSTER_SIZE) \
    X(CUDA_ERROR_FUNCTION_NOT_LOADED) \
    X(CUDA_ERROR_INVALID_RESOURCE_TYPE) \
    X(CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION) \
    X(CUDA_ERROR_KEY_ROTATION) \
    X(CUDA_ERROR_UNKNOWN)

static const char *describe(CUresult e)
{
    switch (e) {
    case CUDA_SUCCESS:                    return "no error";
    case CUDA_ERROR_INVALID_VALUE:        return "invalid argument";
    case CUDA_ERROR_OUT_OF_MEMORY:        return "out of memory";
    case CUDA_ERROR_NOT_INITIALIZED:      return "initialization error";
    case CUDA_ERROR_DEINITIALIZED:        return "driver shutting down";
    case CUDA_ERROR_NO_DEVICE:            return "no CUDA-capable device is detected";
    case CUDA_ERROR_INVALID_DEVICE:       return "invalid device ordinal";
    case CUDA_ERROR_INVALID_CONTEXT:      return "invalid device context";
    case CUDA_ERROR_INVALID_HANDLE:       return "invalid resource handle";
    case CUDA_ERROR_NOT_FOUND:            return "named symbol not found";
    case CUDA_ERROR_NOT_READY:            return "device not ready";
    case CUDA_ERROR_ILLEGAL_ADDRESS:      return "an illegal memory access was encountered";
    case CUDA_ERROR_LAUNCH_FAILED:        return "unspecified launch failure";
    case CUDA_ERROR_NOT_PERMITTED:        return "operation not permitted";
    case CUDA_ERROR_NOT_SUPPORTED:        return "operation not supported";
    case CUDA_ERROR_UNKNOWN:              return "unknown error";
    default:                              return NULL;
    }
}

static const char *name_of(CUresult e)
{
    switch (e) {
#define X(n) case n: return #n;
    SIM_CU_ERRORS
#undef X
    default: return NULL;
    }
}

SIM_API CUresult cuGetErrorName(CUresult error, const char **pStr)
{
    if (!pStr)
        return CUDA_ERROR_INVALID_VALUE;
    *pStr = name_of(error);
    return *pStr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

SIM_API CUresult cuGetErrorString(CUresult error, const char **pStr)
{
    if (!pStr)
        return CUDA_ERROR_INVALID_VALUE;
    const char *name = name_of(error);
    if (!name) {
        *pStr = NULL;
        return CUDA_ERROR_INVALID_VALUE;
    }
    const char *d = describe(error);
    *pStr = d ? d : name;
    return CUDA_SUCCESS;
}

/* ---- error log callbacks ------------------------------------------------ */

/* Registered callbacks are kept until unregistered. The simulated driver
 * writes no log messages, so none is ever called. */
struct CUlogsCallbackEntry_st {
    CUlogsCallback                 fn;
    void                          *user;
    struct CUlogsCallbackEntry_st *next;
};

static pthread_mutex_t         log_lock = PTHREAD_MUTEX_INITIALIZER;
static CUlogsCallbackHandle    log_callbacks;

SIM_API CUresult cuLogsRegisterCallback(CUlogsCallback callbackFunc, void *userData,
                                        CUlogsCallbackHandle *callback_out)
{
    if (!callbackFunc)
        return CUDA_ERROR_INVALID_VALUE;
    CUlogsCallbackHandle e = malloc(sizeof *e);
    if (!e)
        return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&log_lock);
    *e = (struct CUlogsCallbackEntry_st){ callbackFunc, userData, log_callbacks };
    log_callbacks = e;
    pthread_mutex_unlock(&log_lock);
    if (callback_out)                    /* optional, says cuda.h */
        *callback_out = e;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuLogsUnregisterCallback(CUlogsCallbackHandle callback)
{
    pthread_mutex_lock(&log_lock);
    for (CUlogsCallbackHandle *pp = &log_callbacks; *pp; pp = &(*pp)->next) {
        if (*pp == callback) {
            *pp = callback->next;
            pthread_mutex_unlock(&log_lock);
            free(callback);
            return CUDA_SUCCESS;
        }
    }
    pthread_mutex_unlock(&log_lock);
    return CUDA_ERROR_INVALID_VALUE;
}
