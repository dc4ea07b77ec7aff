/* tests/sim/runtime_errors.c - cudaGetErrorName / cudaGetErrorString.
 *
 * Names come from the cudaError enum itself (stringified); descriptions are
 * the runtime's wording for the codes a memory tool meets, the rest describe
 * themselves by name. Unknown codes answer "unrecognized error code", as the
 * real runtime does, for both calls.
 */
#include "runtime_internal.h"

#include <stddef.h>

#define RT_ERRORS \
    X(cudaSuccess) \
    X(cudaErrorInvalidValue) \
    X(cudaErrorMemoryAllocation) \
    X(cudaErrorInitializationError) \
    X(cudaErrorCudartUnloading) \
    X(cudaErrorProfilerDisabled) \
    X(cudaErrorProfilerNotInitialized) \
    X(cudaErrorProfilerAlreadyStarted) \
    X(cudaErrorProfilerAlreadyStopped) \
    X(cudaErrorInvalidConfiguration) \
    X(cudaErrorInvalidPitchValue) \
    X(cudaErrorInvalidSymbol) \
    X(cudaErrorInvalidHostPointer) \
    X(cudaErrorInvalidDevicePointer) \
    X(cudaErrorInvalidTexture) \
    X(cudaErrorInvalidTextureBinding) \
    X(cudaErrorInvalidChannelDescriptor) \
    X(cudaErrorInvalidMemcpyDirection) \
    X(cudaErrorAddressOfConstant) \
    X(cudaErrorTextureFetchFailed) \
    X(cudaErrorTextureNotBound) \
    X(cudaErrorSynchronizationError) \
    X(cudaErrorInvalidFilterSetting) \
    X(cudaErrorInvalidNormSetting) \
    X(cudaErrorMixedDeviceExecution) \
    X(cudaErrorNotYetImplemented) \
    X(cudaErrorMemoryValueTooLarge) \
    X(cudaErrorStubLibrary) \
    X(cudaErrorInsufficientDriver) \
    X(cudaErrorCallRequiresNewerDriver) \
    X(cudaErrorInvalidSurface) \
    X(cudaErrorDuplicateVariableName) \
    X(cudaErrorDuplicateTextureName) \
    X(cudaErrorDuplicateSurfaceName) \
    X(cudaErrorDevicesUnavailable) \
    X(cudaErrorIncompatibleDriverContext) \
    X(cudaErrorMissingConfiguration) \
    X(cudaErrorPriorLaunchFailure) \
    X(cudaErrorLaunchMaxDepthExceeded) \
    X(cudaErrorLaunchFileScopedTex) \
    X(cudaErrorLaunchFileScopedSurf) \
    X(cudaErrorSyncDepthExceeded) \
    X(cudaErrorLaunchPendingCountExceeded) \
    X(cudaErrorInvalidDeviceFunction) \
    X(cudaErrorNoDevice) \
    X(cudaErrorInvalidDevice) \
    X(cudaErrorDeviceNotLicensed) \
    X(cudaErrorSoftwareValidityNotEstablished) \
    X(cudaErrorStartupFailure) \
    X(cudaErrorInvalidKernelImage) \
    X(cudaErrorDeviceUninitialized) \
    X(cudaErrorMapBufferObjectFailed) \
    X(cudaErrorUnmapBufferObjectFailed) \
    X(cudaErrorArrayIsMapped) \
    X(cudaErrorAlreadyMapped) \
    X(cudaErrorNoKernelImageForDevice) \
    X(cudaErrorAlreadyAcquired) \
    X(cudaErrorNotMapped) \
    X(cudaErrorNotMappedAsArray) \
    X(cudaErrorNotMappedAsPointer) \
    X(cudaErrorECCUncorrectable) \
    X(cudaErrorUnsupportedLimit) \
    X(cudaErrorDeviceAlreadyInUse) \
    X(cudaErrorPeerAccessUnsupported) \
    X(cudaErrorInvalidPtx) \
    X(cudaErrorInvalidGraphicsContext) \
    X(cudaErrorNvlinkUncorrectable) \
    X(cudaErrorJitCompilerNotFound) \
    X(cudaErrorUnsupportedPtxVersion) \
    X(cudaErrorJitCompilationDisabled) \
    X(cudaErrorUnsupportedExecAffinity) \
    X(cudaErrorUnsupportedDevSideSync) \
    X(cudaErrorContained) \
    X(cudaErrorInvalidSource) \
    X(cudaErrorFileNotFound) \
    X(cudaErrorSharedObjectSymbolNotFound) \
    X(cudaErrorSharedObjectInitFailed) \
    X(cudaErrorOperatingSystem) \
    X(cudaErrorInvalidResourceHandle) \
    X(cudaErrorIllegalState) \
    X(cudaErrorLossyQuery) \
    X(cudaErrorSymbolNotFound) \
    X(cudaErrorNotReady) \
    X(cudaErrorIllegalAddress) \
    X(cudaErrorLaunchOutOfResources) \
    X(cudaErrorLaunchTimeout) \
    X(cudaErrorLaunchIncompatibleTexturing) \
    X(cudaErrorPeerAccessAlreadyEnabled) \
    X(cudaErrorPeerAccessNotEnabled) \
    X(cudaErrorSetOnActiveProcess) \
    X(cudaErrorContextIsDestroyed) \
    X(cudaErrorAssert) \
    X(cudaErrorTooManyPeers) \
    X(cudaErrorHostMemoryAlreadyRegistered) \
    X(cudaErrorHostMemoryNotRegistered) \
    X(cudaErrorHardwareStackError) \
    X(cudaErrorIllegalInstruction) \
    X(cudaErrorMisalignedAddress) \
    X(cudaErrorInvalidAddressSpace) \
    X(cudaErrorInvalidPc) \
    X(cudaErrorLaunchFailure) \
    X(cudaErrorCooperativeLaunchTooLarge) \
    X(cudaErrorTensorMemoryLeak) \
    X(cudaErrorNotPermitted) \
    X(cudaErrorNotSupported) \
    X(cudaErrorSystemNotReady) \
    X(cudaErrorSystemDriverMismatch) \
    X(cudaErrorCompatNotSupportedOnDevice) \
    X(cudaErrorMpsConnectionFailed) \
    X(cudaErrorMpsRpcFailure) \
    X(cudaErrorMpsServerNotReady) \
    X(cudaErrorMpsMaxClientsReached) \
    X(cudaErrorMpsMaxConnectionsReached) \
    X(cudaErrorMpsClientTerminated) \
    X(cudaErrorCdpNotSupported) \
    X(cudaErrorCdpVersionMismatch) \
    X(cudaErrorStreamCaptureUnsupported) \
    X(cudaErrorStreamCaptureInvalidated) \
    X(cudaErrorStreamCaptureMerge) \
    X(cudaErrorStreamCaptureUnmatched) \
    X(cudaErrorStreamCaptureUnjoined) \
    X(cudaErrorStreamCaptureIsolation) \
    X(cudaErrorStreamCaptureImplicit) \
    X(cudaErrorCapturedEvent) \
    X(cudaErrorStreamCaptureWrongThread) \
    X(cudaErrorTimeout) \
    X(cudaErrorGraphExecUpdateFailure) \
    X(cudaErrorExternalDevice) \
    X(cudaErrorInvalidClusterSize) \
    X(cudaErrorFunctionNotLoaded) \
    X(cudaErrorInvalidResourceType) \
    X(cudaErrorInvalidResourceConfiguration) \
    X(cudaErrorUnknown)

const char *rt_error_name(cudaError_t e)
{
    switch (e) {
#define X(n) case n: return #n;
    RT_ERRORS
#undef X
    default: return NULL;
    }
}

static const char *describe(cudaError_t e)
{
    switch (e) {
    case cudaSuccess:                     return "no error";
    case cudaErrorInvalidValue:           return "invalid argument";
    case cudaErrorMemoryAllocation:       return "out of memory";
    case cudaErrorInitializationError:    return "initialization error";
    case cudaErrorCudartUnloading:        return "driver shutting down";
    case cudaErrorInvalidConfiguration:   return "invalid configuration argument";
    case cudaErrorInvalidDevicePointer:   return "invalid device pointer";
    case cudaErrorInvalidMemcpyDirection: return "invalid copy direction for memcpy";
    case cudaErrorInsufficientDriver:     return "CUDA driver version is insufficient for CUDA runtime version";
    case cudaErrorMissingConfiguration:   return "__global__ function call is not configured";
    case cudaErrorInvalidDeviceFunction:  return "invalid device function";
    case cudaErrorNoDevice:               return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice:          return "invalid device ordinal";
    case cudaErrorDeviceUninitialized:    return "invalid device context";
    case cudaErrorInvalidResourceHandle:  return "invalid resource handle";
    case cudaErrorSymbolNotFound:         return "named symbol not found";
    case cudaErrorNotReady:               return "device not ready";
    case cudaErrorIllegalAddress:         return "an illegal memory access was encountered";
    case cudaErrorLaunchFailure:          return "unspecified launch failure";
    case cudaErrorNotPermitted:           return "operation not permitted";
    case cudaErrorNotSupported:           return "operation not supported";
    case cudaErrorUnknown:                return "unknown error";
    default:                              return NULL;
    }
}

RT_API const char *cudaGetErrorName(cudaError_t error)
{
    const char *n = rt_error_name(error);
    return n ? n : "unrecognized error code";
}

RT_API const char *cudaGetErrorString(cudaError_t error)
{
    const char *d = describe(error);
    if (d)
        return d;
    const char *n = rt_error_name(error);
    return n ? n : "unrecognized error code";
}
