/* tests/sim/test_sim_graph.c - stream capture and graphs (sim_graph.c). */
#include <cuda_runtime_api.h>
#include <stdint.h>
#include <string.h>

#include "harness.h"
#include "test_sim_held.h"
#include "test_sim_util.h"

#define N 4096

static size_t free_bytes(void)
{
    size_t f = 0, t = 0;
    ASSERT_OK(cudaMemGetInfo(&f, &t));
    return f;
}

/* Ends the capture on `s` and instantiates what it captured: the instance;
 * the graph into *g. */
static cudaGraphExec_t end_capture_instantiated(cudaStream_t s, cudaGraph_t *g)
{
    *g = NULL;
    ASSERT_OK(cudaStreamEndCapture(s, g));
    ASSERT(*g != NULL);
    cudaGraphExec_t x;
    ASSERT_OK(cudaGraphInstantiate(&x, *g, 0));
    return x;
}

TEST(captured_work_runs_only_when_the_graph_is_launched)
{
    cudaStream_t s = held_stream(cudaStreamNonBlocking);
    unsigned char *d = held_device(N), *d2 = held_device(N), *host = held_pinned(N);
    memset(host, 0, N);
    int calls = 0;
    slow_store job = { &calls, 1, 0 };
    ASSERT_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    enum cudaStreamCaptureStatus st;
    ASSERT_OK(cudaStreamIsCapturing(s, &st));
    ASSERT_EQ(st, cudaStreamCaptureStatusActive);
    unsigned long long id = 0;
    ASSERT_OK(cudaStreamGetCaptureInfo(s, &st, &id, NULL, NULL, NULL, NULL));
    ASSERT(id != 0);
    ASSERT_OK(cudaMemsetAsync(d, 0x42, N, s));
    ASSERT_OK(cudaMemcpyAsync(d2, d, N, cudaMemcpyDeviceToDevice, s));
    ASSERT_OK(cudaMemcpyAsync(host, d2, N, cudaMemcpyDeviceToHost, s));
    ASSERT_OK(cudaLaunchHostFunc(s, slow_store_fn, &job));
    cudaGraph_t g;
    cudaGraphExec_t x = end_capture_instantiated(s, &g);
    ASSERT_OK(cudaStreamIsCapturing(s, &st));
    ASSERT_EQ(st, cudaStreamCaptureStatusNone);
    ASSERT_OK(cudaDeviceSynchronize());
    ASSERT_EQ(host[0], 0);                  /* captured and instantiated, not run */
    ASSERT_EQ(load_flag(&calls), 0);
    size_t nodes = 0;
    ASSERT_OK(cudaGraphGetNodes(g, NULL, &nodes));
    ASSERT_EQ(nodes, 4);                    /* memset, two copies, host function */
    ASSERT_EQ(cudaGraphGetNodes(g, NULL, NULL), cudaErrorInvalidValue);
    ASSERT_OK(cudaGraphDestroy(g));         /* the instance keeps what it needs */
    for (int launch = 1; launch <= 3; launch++) {
        memset(host, 0, N);
        ASSERT_OK(cudaMemsetAsync(d2, 0, N, s));   /* s does not wait for the legacy stream */
        ASSERT_OK(cudaGraphLaunch(x, s));
        ASSERT_OK(cudaStreamSynchronize(s));
        ASSERT_EQ(host[0], 0x42);
        ASSERT_EQ(host[N - 1], 0x42);
    }
    ASSERT_OK(cudaGraphExecDestroy(x));
    release_held();
}

TEST(synchronizing_a_capturing_stream_invalidates_the_capture)
{
    ASSERT_EQ(cudaStreamBeginCapture(0, cudaStreamCaptureModeGlobal), cudaErrorStreamCaptureUnsupported);
    cudaGetLastError();
    cudaStream_t s = held_stream(cudaStreamDefault);      /* blocking */
    ASSERT_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
    enum cudaStreamCaptureStatus st;
    /* The legacy stream cannot be used while a blocking stream captures. */
    ASSERT_EQ(cudaStreamIsCapturing(cudaStreamLegacy, &st), cudaErrorStreamCaptureImplicit);
    ASSERT_EQ(cudaStreamSynchronize(s), cudaErrorStreamCaptureUnsupported);
    ASSERT_OK(cudaStreamIsCapturing(s, &st));
    ASSERT_EQ(st, cudaStreamCaptureStatusInvalidated);
    cudaGraph_t g = (cudaGraph_t)1;
    ASSERT_EQ(cudaStreamEndCapture(s, &g), cudaErrorStreamCaptureInvalidated);
    ASSERT(g == NULL);
    ASSERT_OK(cudaStreamIsCapturing(s, &st));
    ASSERT_EQ(st, cudaStreamCaptureStatusNone);
    cudaGetLastError();
    ASSERT_OK(cudaStreamSynchronize(s));
    /* Legacy-stream work while a blocking stream captures: refused, and the
     * capture is invalidated. */
    void *d = held_device(N);
    ASSERT_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
    ASSERT_EQ(cudaMemsetAsync(d, 0, N, 0), cudaErrorStreamCaptureImplicit);
    ASSERT_OK(cudaStreamIsCapturing(s, &st));
    ASSERT_EQ(st, cudaStreamCaptureStatusInvalidated);
    ASSERT_EQ(cudaStreamEndCapture(s, &g), cudaErrorStreamCaptureInvalidated);
    cudaGetLastError();
    release_held();
}

TEST(a_stream_waiting_for_a_captured_event_joins_the_capture)
{
    cudaStream_t s1 = held_stream(cudaStreamNonBlocking), s2 = held_stream(cudaStreamNonBlocking);
    cudaEvent_t fork = held_event(cudaEventDefault), join = held_event(cudaEventDefault);
    unsigned char *d = held_device(N), *host = held_pinned(N);
    memset(host, 0, N);
    ASSERT_OK(cudaStreamBeginCapture(s1, cudaStreamCaptureModeGlobal));
    ASSERT_OK(cudaMemsetAsync(d, 1, N, s1));
    ASSERT_OK(cudaEventRecord(fork, s1));
    ASSERT_EQ(cudaEventQuery(fork), cudaErrorCapturedEvent);
    ASSERT_OK(cudaStreamWaitEvent(s2, fork, 0));
    enum cudaStreamCaptureStatus st;
    ASSERT_OK(cudaStreamIsCapturing(s2, &st));
    ASSERT_EQ(st, cudaStreamCaptureStatusActive);
    ASSERT_OK(cudaMemsetAsync(d + N / 2, 2, N / 2, s2));
    ASSERT_OK(cudaEventRecord(join, s2));
    ASSERT_OK(cudaStreamWaitEvent(s1, join, 0));
    ASSERT_OK(cudaMemcpyAsync(host, d, N, cudaMemcpyDeviceToHost, s1));
    cudaGraph_t g;
    ASSERT_EQ(cudaStreamEndCapture(s2, &g), cudaErrorStreamCaptureUnmatched);
    cudaGetLastError();
    ASSERT_EQ(cudaStreamEndCapture(s1, &g), cudaErrorStreamCaptureInvalidated);  /* by the mismatch */
    cudaGetLastError();
    ASSERT_OK(cudaStreamIsCapturing(s2, &st));
    ASSERT_EQ(st, cudaStreamCaptureStatusNone);

    /* The same, ended where it began. */
    ASSERT_OK(cudaStreamBeginCapture(s1, cudaStreamCaptureModeGlobal));
    ASSERT_OK(cudaMemsetAsync(d, 1, N, s1));
    ASSERT_OK(cudaEventRecord(fork, s1));
    ASSERT_OK(cudaStreamWaitEvent(s2, fork, 0));
    ASSERT_OK(cudaMemsetAsync(d + N / 2, 2, N / 2, s2));
    ASSERT_OK(cudaEventRecord(join, s2));
    ASSERT_OK(cudaStreamWaitEvent(s1, join, 0));
    ASSERT_OK(cudaMemcpyAsync(host, d, N, cudaMemcpyDeviceToHost, s1));
    cudaGraphExec_t x = end_capture_instantiated(s1, &g);
    ASSERT_OK(cudaGraphLaunch(x, s1));
    ASSERT_OK(cudaStreamSynchronize(s1));
    ASSERT_EQ(host[0], 1);
    ASSERT_EQ(host[N - 1], 2);
    ASSERT_OK(cudaGraphExecDestroy(x));
    ASSERT_OK(cudaGraphDestroy(g));
    ASSERT_OK(cudaEventRecord(fork, s1));         /* recorded outside a capture again */
    ASSERT_OK(cudaEventSynchronize(fork));
    release_held();
}

TEST(graph_memory_nodes_live_as_long_as_the_graph)
{
    cudaStream_t s = held_stream(cudaStreamNonBlocking);
    unsigned char *host = held_pinned(N);
    size_t before = free_bytes();
    unsigned char *p = NULL, *kept = NULL;
    ASSERT_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    ASSERT_OK(cudaMallocAsync((void **)&p, 1 << 20, s));
    ASSERT_OK(cudaMallocAsync((void **)&kept, N, s));
    ASSERT(p != NULL && kept != NULL);
    ASSERT_OK(cudaMemsetAsync(p, 0x7e, 1 << 20, s));
    ASSERT_OK(cudaMemcpyAsync(kept, p, N, cudaMemcpyDeviceToDevice, s));
    ASSERT_OK(cudaMemcpyAsync(host, p, N, cudaMemcpyDeviceToHost, s));
    ASSERT_OK(cudaFreeAsync(p, s));
    cudaGraph_t g;
    cudaGraphExec_t x = end_capture_instantiated(s, &g);
    for (int launch = 0; launch < 3; launch++) {
        memset(host, 0, N);
        ASSERT_OK(cudaGraphLaunch(x, s));
        ASSERT_OK(cudaStreamSynchronize(s));
        ASSERT_EQ(host[N - 1], 0x7e);
    }
    /* The memory the graph allocated without freeing is the program's. */
    unsigned char back[16];
    ASSERT_OK(cudaMemcpy(back, kept, sizeof back, cudaMemcpyDeviceToHost));
    ASSERT_EQ(back[0], 0x7e);
    ASSERT_OK(cudaFree(kept));
    ASSERT_EQ(before - free_bytes(), 1u << 20);     /* the graph's own */
    ASSERT_OK(cudaGraphExecDestroy(x));
    ASSERT_EQ(before - free_bytes(), 1u << 20);     /* the graph still holds it */
    ASSERT_OK(cudaGraphDestroy(g));
    ASSERT_EQ(free_bytes(), before);
    release_held();
}

TEST_MAIN()
