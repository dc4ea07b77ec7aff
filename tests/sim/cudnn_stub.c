/* tests/sim/cudnn_stub.c - a stand-in libcudnn.so.9 with no cuDNN in it.
 *
 * PyTorch's libtorch_cuda.so needs libcudnn.so.9, and the real one must
 * never be mapped in a sim process (it embeds its own CUDA runtime). cuDNN
 * is not simulated: this library exists so every import resolves. It
 * reports version 0 (so torch.backends.cudnn.version() says no usable
 * cuDNN), names its statuses, and every other entry point a PyTorch build
 * links returns CUDNN_STATUS_NOT_SUPPORTED. Tests run with
 * torch.backends.cudnn.enabled = False where an operator could pick cuDNN.
 *
 * Like cublas_unsupported.c, the unsupported entry points are defined
 * without parameters (they all return cudnnStatus_t, an int).
 */
#include <stddef.h>
#include <string.h>

#define DNN_API __attribute__((visibility("default")))
#define CUDNN_STATUS_SUCCESS 0
#define CUDNN_STATUS_NOT_SUPPORTED 3000

DNN_API size_t cudnnGetVersion(void);
DNN_API size_t cudnnGetVersion(void) { return 0; }

DNN_API size_t cudnnGetCudartVersion(void);
DNN_API size_t cudnnGetCudartVersion(void) { return 0; }

DNN_API const char *cudnnGetErrorString(int status);
DNN_API const char *cudnnGetErrorString(int status)
{
    switch (status) {
    case CUDNN_STATUS_SUCCESS: return "CUDNN_STATUS_SUCCESS";
    case CUDNN_STATUS_NOT_SUPPORTED: return "CUDNN_STATUS_NOT_SUPPORTED (the simulated device has no cuDNN)";
    default: return "CUDNN_STATUS_UNKNOWN";
    }
}

DNN_API void cudnnGetLastErrorString(char *message, size_t max_size);
DNN_API void cudnnGetLastErrorString(char *message, size_t max_size)
{
    static const char msg[] = "cuDNN is not simulated";
    if (message && max_size) {
        strncpy(message, msg, max_size - 1);
        message[max_size - 1] = '\0';
    }
}

#define UNSUPPORTED(name) DNN_API int name(void); DNN_API int name(void) { return CUDNN_STATUS_NOT_SUPPORTED; }

UNSUPPORTED(cudnnBackendCreateDescriptor)
UNSUPPORTED(cudnnBackendDestroyDescriptor)
UNSUPPORTED(cudnnBackendExecute)
UNSUPPORTED(cudnnBackendFinalize)
UNSUPPORTED(cudnnBackendGetAttribute)
UNSUPPORTED(cudnnBackendSetAttribute)
UNSUPPORTED(cudnnBatchNormalizationBackwardEx)
UNSUPPORTED(cudnnBatchNormalizationForwardInference)
UNSUPPORTED(cudnnBatchNormalizationForwardTrainingEx)
UNSUPPORTED(cudnnCTCLoss)
UNSUPPORTED(cudnnCTCLoss_v8)
UNSUPPORTED(cudnnConvolutionBackwardData)
UNSUPPORTED(cudnnConvolutionBackwardFilter)
UNSUPPORTED(cudnnConvolutionBiasActivationForward)
UNSUPPORTED(cudnnConvolutionForward)
UNSUPPORTED(cudnnCreate)
UNSUPPORTED(cudnnCreateActivationDescriptor)
UNSUPPORTED(cudnnCreateCTCLossDescriptor)
UNSUPPORTED(cudnnCreateConvolutionDescriptor)
UNSUPPORTED(cudnnCreateDropoutDescriptor)
UNSUPPORTED(cudnnCreateFilterDescriptor)
UNSUPPORTED(cudnnCreatePoolingDescriptor)
UNSUPPORTED(cudnnCreateRNNDataDescriptor)
UNSUPPORTED(cudnnCreateRNNDescriptor)
UNSUPPORTED(cudnnCreateSpatialTransformerDescriptor)
UNSUPPORTED(cudnnCreateTensorDescriptor)
UNSUPPORTED(cudnnDestroyActivationDescriptor)
UNSUPPORTED(cudnnDestroyCTCLossDescriptor)
UNSUPPORTED(cudnnDestroyConvolutionDescriptor)
UNSUPPORTED(cudnnDestroyDropoutDescriptor)
UNSUPPORTED(cudnnDestroyFilterDescriptor)
UNSUPPORTED(cudnnDestroyRNNDataDescriptor)
UNSUPPORTED(cudnnDestroyRNNDescriptor)
UNSUPPORTED(cudnnDestroySpatialTransformerDescriptor)
UNSUPPORTED(cudnnDestroyTensorDescriptor)
UNSUPPORTED(cudnnDropoutGetStatesSize)
UNSUPPORTED(cudnnFindConvolutionBackwardDataAlgorithmEx)
UNSUPPORTED(cudnnFindConvolutionBackwardFilterAlgorithmEx)
UNSUPPORTED(cudnnFindConvolutionForwardAlgorithmEx)
UNSUPPORTED(cudnnGetBatchNormalizationBackwardExWorkspaceSize)
UNSUPPORTED(cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize)
UNSUPPORTED(cudnnGetBatchNormalizationTrainingExReserveSpaceSize)
UNSUPPORTED(cudnnGetCTCLossWorkspaceSize)
UNSUPPORTED(cudnnGetCTCLossWorkspaceSize_v8)
UNSUPPORTED(cudnnGetConvolutionBackwardDataAlgorithm_v7)
UNSUPPORTED(cudnnGetConvolutionBackwardDataWorkspaceSize)
UNSUPPORTED(cudnnGetConvolutionBackwardFilterAlgorithm_v7)
UNSUPPORTED(cudnnGetConvolutionBackwardFilterWorkspaceSize)
UNSUPPORTED(cudnnGetConvolutionForwardAlgorithm_v7)
UNSUPPORTED(cudnnGetConvolutionForwardWorkspaceSize)
UNSUPPORTED(cudnnGetFilterNdDescriptor)
UNSUPPORTED(cudnnGetProperty)
UNSUPPORTED(cudnnGetRNNTempSpaceSizes)
UNSUPPORTED(cudnnGetRNNWeightParams)
UNSUPPORTED(cudnnGetRNNWeightSpaceSize)
UNSUPPORTED(cudnnGetStream)
UNSUPPORTED(cudnnGetTensorNdDescriptor)
UNSUPPORTED(cudnnPoolingForward)
UNSUPPORTED(cudnnRNNBackwardData_v8)
UNSUPPORTED(cudnnRNNBackwardWeights_v8)
UNSUPPORTED(cudnnRNNForward)
UNSUPPORTED(cudnnRestoreDropoutDescriptor)
UNSUPPORTED(cudnnSetActivationDescriptor)
UNSUPPORTED(cudnnSetCTCLossDescriptorEx)
UNSUPPORTED(cudnnSetCTCLossDescriptor_v9)
UNSUPPORTED(cudnnSetConvolutionGroupCount)
UNSUPPORTED(cudnnSetConvolutionMathType)
UNSUPPORTED(cudnnSetConvolutionNdDescriptor)
UNSUPPORTED(cudnnSetDropoutDescriptor)
UNSUPPORTED(cudnnSetFilterNdDescriptor)
UNSUPPORTED(cudnnSetPooling2dDescriptor)
UNSUPPORTED(cudnnSetRNNDataDescriptor)
UNSUPPORTED(cudnnSetRNNDescriptor_v8)
UNSUPPORTED(cudnnSetSpatialTransformerNdDescriptor)
UNSUPPORTED(cudnnSetStream)
UNSUPPORTED(cudnnSetTensorNdDescriptor)
UNSUPPORTED(cudnnSpatialTfGridGeneratorBackward)
UNSUPPORTED(cudnnSpatialTfGridGeneratorForward)
UNSUPPORTED(cudnnSpatialTfSamplerBackward)
UNSUPPORTED(cudnnSpatialTfSamplerForward)
