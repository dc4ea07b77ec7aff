/* tests/sim/runtime_capture.c - stream capture and CUDA graphs: the
 * runtime calls forward to the driver's capture (sim_graph.c): begin/end
 * capture, capture queries, instantiate, launch, destroy. The per-thread
 * capture mode is kept and swapped as documented. Building graphs node by
 * node, user objects, conditional nodes and graph memory attributes return
 * cudaErrorNotSupported.
 */
#include "runtime_internal.h"

#include <stddef.h>
#include <stdio.h>

#define STREAM(s) ((CUstream)(s))

RT_API cudaError_t cudaStreamIsCapturing(cudaStream_t stream, enum cudaStreamCaptureStatus *pCaptureStatus)
{
    if (!pCaptureStatus)
        return rt_ret(cudaErrorInvalidValue);
    RT_TRY(rt_enter());
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
    CUresult r = rt_drv.cuStreamIsCapturing(STREAM(stream), &st);
    *pCaptureStatus = (enum cudaStreamCaptureStatus)st;
    return rt_ret_drv(r);
}

/* Nodes are not exposed: dependencies read as none. */
RT_API cudaError_t cudaStreamGetCaptureInfo(cudaStream_t stream, enum cudaStreamCaptureStatus *captureStatus_out,
                                            unsigned long long *id_out, cudaGraph_t *graph_out,
                                            const cudaGraphNode_t **dependencies_out,
                                            const cudaGraphEdgeData **edgeData_out,
                                            size_t *numDependencies_out)
{
    if (!captureStatus_out)
        return rt_ret(cudaErrorInvalidValue);
    RT_TRY(rt_enter());
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
    cuuint64_t id = 0;
    CUgraph g = NULL;
    CUresult r = rt_drv.cuStreamGetCaptureInfo(STREAM(stream), &st, &id, &g, NULL, NULL, NULL);
    *captureStatus_out = (enum cudaStreamCaptureStatus)st;
    if (id_out)
        *id_out = id;
    if (graph_out)
        *graph_out = (cudaGraph_t)(void *)g;
    if (dependencies_out)
        *dependencies_out = NULL;
    if (edgeData_out)
        *edgeData_out = NULL;
    if (numDependencies_out)
        *numDependencies_out = 0;
    return rt_ret_drv(r);
}

/* The mode is the driver's (cuThreadExchangeStreamCaptureMode): its
 * potentially unsafe calls check it (sim_graph.c). */
RT_API cudaError_t cudaThreadExchangeStreamCaptureMode(enum cudaStreamCaptureMode *mode)
{
    if (!mode || (*mode != cudaStreamCaptureModeGlobal && *mode != cudaStreamCaptureModeThreadLocal &&
                  *mode != cudaStreamCaptureModeRelaxed))
        return rt_ret(cudaErrorInvalidValue);
    RT_TRY(rt_init());
    CUstreamCaptureMode m = (CUstreamCaptureMode)*mode;
    CUresult r = rt_drv.cuThreadExchangeStreamCaptureMode(&m);
    if (r == CUDA_SUCCESS)
        *mode = (enum cudaStreamCaptureMode)m;
    return rt_ret_drv(r);
}

/* ---- forwarded to the driver, or not simulated ---------------------------- */

#define NOT_SUPPORTED return rt_ret(cudaErrorNotSupported)

RT_API cudaError_t cudaStreamBeginCapture(cudaStream_t stream, enum cudaStreamCaptureMode mode)
{
    RT_TRY(rt_enter());
    return rt_ret_drv(rt_drv.cuStreamBeginCapture(STREAM(stream), (CUstreamCaptureMode)mode));
}

RT_API cudaError_t cudaStreamBeginCaptureToGraph(cudaStream_t stream, cudaGraph_t graph,
                                                 const cudaGraphNode_t *dependencies,
                                                 const cudaGraphEdgeData *dependencyData,
                                                 size_t numDependencies, enum cudaStreamCaptureMode mode)
{
    (void)stream; (void)graph; (void)dependencies; (void)dependencyData; (void)numDependencies; (void)mode;
    NOT_SUPPORTED;
}

RT_API cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t *pGraph)
{
    RT_TRY(rt_enter());
    CUgraph g = NULL;
    CUresult r = rt_drv.cuStreamEndCapture(STREAM(stream), pGraph ? &g : NULL);
    if (pGraph)
        *pGraph = (cudaGraph_t)(void *)g;
    return rt_ret_drv(r);
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
    RT_TRY(rt_init());
    return rt_ret_drv(rt_drv.cuGraphDestroy((CUgraph)(void *)graph));
}

RT_API cudaError_t cudaGraphExecDestroy(cudaGraphExec_t graphExec)
{
    RT_TRY(rt_init());
    return rt_ret_drv(rt_drv.cuGraphExecDestroy((CUgraphExec)(void *)graphExec));
}

RT_API cudaError_t cudaGraphGetNodes(cudaGraph_t graph, cudaGraphNode_t *nodes, size_t *numNodes)
{
    RT_TRY(rt_init());
    return rt_ret_drv(rt_drv.cuGraphGetNodes((CUgraph)(void *)graph, (CUgraphNode *)(void *)nodes,
                                             numNodes));
}

/* What PyTorch's CUDAGraph::debug_dump writes (torch.cuda.CUDAGraph's
 * debug mode; torch 2.11's libtorch_cuda.so imports it): a DOT file of the
 * graph. Nodes are not exposed here, so the file names the graph and its
 * node count; a file that cannot be written is cudaErrorOperatingSystem. */
RT_API cudaError_t cudaGraphDebugDotPrint(cudaGraph_t graph, const char *path, unsigned int flags)
{
    (void)flags;   /* which details to print: there are none to choose from */
    if (!graph || !path)
        return rt_ret(cudaErrorInvalidValue);
    RT_TRY(rt_init());
    size_t nodes = 0;
    CUresult r = rt_drv.cuGraphGetNodes((CUgraph)(void *)graph, NULL, &nodes);
    if (r != CUDA_SUCCESS)
        return rt_ret_drv(r);
    FILE *f = fopen(path, "w");
    if (!f)
        return rt_ret(cudaErrorOperatingSystem);
    int bad = fprintf(f, "digraph dot {\n  label=\"simulated graph: %zu nodes (not exposed)\";\n}\n",
                      nodes) < 0;
    bad |= fclose(f) != 0;
    return rt_ret(bad ? cudaErrorOperatingSystem : cudaSuccess);
}

RT_API cudaError_t cudaGraphInstantiateWithFlags(cudaGraphExec_t *pGraphExec, cudaGraph_t graph,
                                                 unsigned long long flags)
{
    RT_TRY(rt_init());
    CUgraphExec x = NULL;
    CUresult r = rt_drv.cuGraphInstantiate(pGraphExec ? &x : NULL, (CUgraph)(void *)graph, flags);
    if (pGraphExec && r == CUDA_SUCCESS)
        *pGraphExec = (cudaGraphExec_t)(void *)x;
    return rt_ret_drv(r);
}

RT_API cudaError_t cudaGraphInstantiate(cudaGraphExec_t *pGraphExec, cudaGraph_t graph,
                                        unsigned long long flags)
{
    return cudaGraphInstantiateWithFlags(pGraphExec, graph, flags);
}

RT_API cudaError_t cudaGraphLaunch(cudaGraphExec_t graphExec, cudaStream_t stream)
{
    RT_TRY(rt_enter());
    return rt_ret_drv(rt_drv.cuGraphLaunch((CUgraphExec)(void *)graphExec, STREAM(stream)));
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
