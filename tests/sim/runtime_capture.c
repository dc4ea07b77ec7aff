/* tests/sim/runtime_capture.c - stream capture and CUDA graphs.
 *
 * Graphs are not simulated: no stream ever captures, so every capture query
 * answers "not capturing" exactly as the real runtime does for a stream
 * outside capture (PyTorch's allocator and its stream guards ask on every
 * allocation and event), the per-thread capture mode is kept and swapped as
 * documented, and everything that would create, capture or run a graph
 * returns cudaErrorNotSupported.
 */
#include "runtime_internal.h"

#include <stddef.h>

#define STREAM(s) ((CUstream)(s))

static __thread enum cudaStreamCaptureMode tls_capture_mode = cudaStreamCaptureModeGlobal;

/* A stream handle the driver knows (0, legacy, per-thread or created). */
static cudaError_t valid_stream(cudaStream_t s)
{
    cudaError_t e = rt_enter();
    if (e != cudaSuccess)
        return e;
    unsigned flags;
    return rt_error(rt_drv.cuStreamGetFlags(STREAM(s), &flags));
}

RT_API cudaError_t cudaStreamIsCapturing(cudaStream_t stream, enum cudaStreamCaptureStatus *pCaptureStatus)
{
    if (!pCaptureStatus)
        return rt_ret(cudaErrorInvalidValue);
    cudaError_t e = valid_stream(stream);
    if (e != cudaSuccess)
        return rt_ret(e);
    *pCaptureStatus = cudaStreamCaptureStatusNone;
    return cudaSuccess;
}

/* Outside capture only the status is meaningful; the other outputs are
 * cleared so a caller never reads garbage. */
RT_API cudaError_t cudaStreamGetCaptureInfo(cudaStream_t stream, enum cudaStreamCaptureStatus *captureStatus_out,
                                            unsigned long long *id_out, cudaGraph_t *graph_out,
                                            const cudaGraphNode_t **dependencies_out,
                                            const cudaGraphEdgeData **edgeData_out,
                                            size_t *numDependencies_out)
{
    if (!captureStatus_out)
        return rt_ret(cudaErrorInvalidValue);
    cudaError_t e = valid_stream(stream);
    if (e != cudaSuccess)
        return rt_ret(e);
    *captureStatus_out = cudaStreamCaptureStatusNone;
    if (id_out)
        *id_out = 0;
    if (graph_out)
        *graph_out = NULL;
    if (dependencies_out)
        *dependencies_out = NULL;
    if (edgeData_out)
        *edgeData_out = NULL;
    if (numDependencies_out)
        *numDependencies_out = 0;
    return cudaSuccess;
}

RT_API cudaError_t cudaThreadExchangeStreamCaptureMode(enum cudaStreamCaptureMode *mode)
{
    if (!mode || (*mode != cudaStreamCaptureModeGlobal && *mode != cudaStreamCaptureModeThreadLocal &&
                  *mode != cudaStreamCaptureModeRelaxed))
        return rt_ret(cudaErrorInvalidValue);
    enum cudaStreamCaptureMode old = tls_capture_mode;
    tls_capture_mode = *mode;
    *mode = old;
    return cudaSuccess;
}

/* ---- not simulated ------------------------------------------------------ */

#define NOT_SUPPORTED return rt_ret(cudaErrorNotSupported)

RT_API cudaError_t cudaStreamBeginCapture(cudaStream_t stream, enum cudaStreamCaptureMode mode)
{
    (void)stream; (void)mode;
    NOT_SUPPORTED;
}

RT_API cudaError_t cudaStreamBeginCaptureToGraph(cudaStream_t stream, cudaGraph_t graph,
                                                 const cudaGraphNode_t *dependencies,
                                                 const cudaGraphEdgeData *dependencyData,
                                                 size_t numDependencies, enum cudaStreamCaptureMode mode)
{
    (void)stream; (void)graph; (void)dependencies; (void)dependencyData; (void)numDependencies; (void)mode;
    NOT_SUPPORTED;
}

/* No capture can have begun: the documented answer for a stream that is
 * not capturing. */
RT_API cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t *pGraph)
{
    (void)stream;
    if (pGraph)
        *pGraph = NULL;
    return rt_ret(cudaErrorIllegalState);
}

RT_API cudaError_t cudaStreamUpdateCaptureDependencies(cudaStream_t stream, cudaGraphNode_t *dependencies,
                                                       const cudaGraphEdgeData *dependencyData,
                                                       size_t numDependencies, unsigned int flags)
{
    (void)stream; (void)dependencies; (void)dependencyData; (void)numDependencies; (void)flags;
    return rt_ret(cudaErrorIllegalState);
}

RT_API cudaError_t cudaGraphAddNode(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
                                    const cudaGraphNode_t *pDependencies, const cudaGraphEdgeData *dependencyData,
                                    size_t numDependencies, struct cudaGraphNodeParams *nodeParams)
{
    (void)pGraphNode; (void)graph; (void)pDependencies; (void)dependencyData; (void)numDependencies;
    (void)nodeParams;
    NOT_SUPPORTED;
}

RT_API cudaError_t cudaGraphConditionalHandleCreate(cudaGraphConditionalHandle *pHandle_out, cudaGraph_t graph,
                                                    unsigned int defaultLaunchValue, unsigned int flags)
{
    (void)pHandle_out; (void)graph; (void)defaultLaunchValue; (void)flags;
    NOT_SUPPORTED;
}

RT_API cudaError_t cudaGraphDestroy(cudaGraph_t graph)
{
    (void)graph;
    NOT_SUPPORTED;
}

RT_API cudaError_t cudaGraphExecDestroy(cudaGraphExec_t graphExec)
{
    (void)graphExec;
    NOT_SUPPORTED;
}

RT_API cudaError_t cudaGraphGetNodes(cudaGraph_t graph, cudaGraphNode_t *nodes, size_t *numNodes)
{
    (void)graph; (void)nodes; (void)numNodes;
    NOT_SUPPORTED;
}

RT_API cudaError_t cudaGraphInstantiateWithFlags(cudaGraphExec_t *pGraphExec, cudaGraph_t graph,
                                                 unsigned long long flags)
{
    (void)pGraphExec; (void)graph; (void)flags;
    NOT_SUPPORTED;
}

RT_API cudaError_t cudaGraphLaunch(cudaGraphExec_t graphExec, cudaStream_t stream)
{
    (void)graphExec; (void)stream;
    NOT_SUPPORTED;
}

RT_API cudaError_t cudaGraphNodeGetDependencies(cudaGraphNode_t node, cudaGraphNode_t *pDependencies,
                                                cudaGraphEdgeData *edgeData, size_t *pNumDependencies)
{
    (void)node; (void)pDependencies; (void)edgeData; (void)pNumDependencies;
    NOT_SUPPORTED;
}

RT_API cudaError_t cudaGraphRetainUserObject(cudaGraph_t graph, cudaUserObject_t object, unsigned int count,
                                             unsigned int flags)
{
    (void)graph; (void)object; (void)count; (void)flags;
    NOT_SUPPORTED;
}

RT_API cudaError_t cudaUserObjectCreate(cudaUserObject_t *object_out, void *ptr, cudaHostFn_t destroy,
                                        unsigned int initialRefcount, unsigned int flags)
{
    (void)object_out; (void)ptr; (void)destroy; (void)initialRefcount; (void)flags;
    NOT_SUPPORTED;
}

RT_API cudaError_t cudaUserObjectRelease(cudaUserObject_t object, unsigned int count)
{
    (void)object; (void)count;
    NOT_SUPPORTED;
}

RT_API cudaError_t cudaDeviceGetGraphMemAttribute(int device, enum cudaGraphMemAttributeType attr, void *value)
{
    (void)device; (void)attr; (void)value;
    NOT_SUPPORTED;
}

RT_API cudaError_t cudaDeviceSetGraphMemAttribute(int device, enum cudaGraphMemAttributeType attr, void *value)
{
    (void)device; (void)attr; (void)value;
    NOT_SUPPORTED;
}
