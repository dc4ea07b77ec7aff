/* tests/sim/test_sim_graph.c - stream capture and graphs (sim_graph.c). */
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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
static cudaGraphExec_t end_capture_instantiated_with(cudaStream_t s, cudaGraph_t *g,
                                                     unsigned long long flags)
{
    *g = NULL;
    ASSERT_OK(cudaStreamEndCapture(s, g));
    ASSERT(*g != NULL);
    cudaGraphExec_t x;
    ASSERT_OK(cudaGraphInstantiate(&x, *g, flags));
    return x;
}

static cudaGraphExec_t end_capture_instantiated(cudaStream_t s, cudaGraph_t *g)
{
    return end_capture_instantiated_with(s, g, 0);
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
    /* `kept` is still allocated when the graph is launched again: only an
     * instance that frees it first may relaunch (cudaGraphLaunch). */
    cudaGraphExec_t x = end_capture_instantiated_with(s, &g, cudaGraphInstantiateFlagAutoFreeOnLaunch);
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
    ASSERT_EQ(cudaFree(kept), cudaErrorInvalidValue);
    cudaGetLastError();
    /* the graph's own: its 2 MiB page of a pool's 32 MiB chunk (README.md,
     * "Footprint") */
    ASSERT_EQ(before - free_bytes(), 32u << 20);
    ASSERT_OK(cudaGraphExecDestroy(x));
    ASSERT_EQ(before - free_bytes(), 32u << 20);    /* the graph still holds it */
    ASSERT_OK(cudaGraphDestroy(g));
    ASSERT_EQ(free_bytes(), before);
    release_held();
}

/* cudaGraphLaunch: "If any allocations created by graphExec remain unfreed
 * (from a previous launch) and graphExec was not instantiated with
 * cudaGraphInstantiateFlagAutoFreeOnLaunch, the launch will fail with
 * cudaErrorInvalidValue"; seen so on an H200 (tests/gpucheck, fact
 * graph_relaunch_unfreed). Once freed, the next launch allocates it again
 * at the same address. */
TEST(a_graph_keeping_its_allocation_relaunches_once_it_is_freed)
{
    cudaStream_t s = held_stream(cudaStreamNonBlocking);
    unsigned char *host = held_pinned(N);
    size_t before = free_bytes();
    unsigned char *k = NULL;
    ASSERT_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    ASSERT_OK(cudaMallocAsync((void **)&k, N, s));
    ASSERT_OK(cudaMemsetAsync(k, 7, N, s));
    cudaGraph_t g;
    cudaGraphExec_t x = end_capture_instantiated(s, &g);
    ASSERT_OK(cudaGraphLaunch(x, s));
    ASSERT_OK(cudaStreamSynchronize(s));
    ASSERT_EQ(cudaGraphLaunch(x, s), cudaErrorInvalidValue);
    ASSERT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
    ASSERT_OK(cudaFree(k));
    ASSERT_EQ(free_bytes(), before);
    ASSERT_OK(cudaGraphLaunch(x, s));              /* allocates k again */
    ASSERT_OK(cudaMemcpyAsync(host, k, N, cudaMemcpyDeviceToHost, s));
    ASSERT_OK(cudaStreamSynchronize(s));
    ASSERT_EQ(host[N - 1], 7);
    ASSERT(before - free_bytes() >= N);
    ASSERT_OK(cudaFreeAsync(k, s));                /* stream-ordered, after the launch */
    ASSERT_OK(cudaGraphLaunch(x, s));              /* and again: the free is ahead of it */
    ASSERT_OK(cudaFreeAsync(k, s));
    ASSERT_OK(cudaStreamSynchronize(s));
    ASSERT_EQ(cudaFree(k), cudaErrorInvalidValue); /* freed twice */
    cudaGetLastError();
    ASSERT_OK(cudaGraphExecDestroy(x));
    ASSERT_OK(cudaGraphDestroy(g));
    ASSERT_EQ(free_bytes(), before);
    release_held();
}

/* The capture rules for potentially unsafe calls (cudaStreamBeginCapture,
 * cudaThreadExchangeStreamCaptureMode): a thread-local capture forbids them
 * to its own thread only; a global one to every thread in global mode; a
 * thread in relaxed mode is never forbidden. Refused calls invalidate the
 * capture that forbade them. (Global mode, the other thread and the relaxed
 * thread were seen so on an H200: tests/gpucheck, facts
 * capture_global_other_thread_allocates and capture_thread_mode_relaxed;
 * thread-local mode follows the documentation.) */
static cudaError_t other_thread_rc;

static void *other_thread_mallocs(void *arg)
{
    (void)arg;
    void *p = NULL;
    other_thread_rc = cudaMalloc(&p, N);
    if (other_thread_rc == cudaSuccess)
        cudaFree(p);
    cudaGetLastError();
    return NULL;
}

static cudaError_t malloc_from_another_thread(void)
{
    pthread_t t;
    ASSERT_EQ(pthread_create(&t, NULL, other_thread_mallocs, NULL), 0);
    ASSERT_EQ(pthread_join(t, NULL), 0);
    return other_thread_rc;
}

TEST(capture_forbids_unsafe_calls_by_interaction_mode)
{
    cudaStream_t s = held_stream(cudaStreamNonBlocking);
    void *p = NULL;
    cudaGraph_t g = NULL;
    /* thread-local: the other thread may, this one may not */
    ASSERT_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    ASSERT_EQ(malloc_from_another_thread(), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&p, N), cudaErrorStreamCaptureUnsupported);
    ASSERT_EQ(cudaStreamEndCapture(s, &g), cudaErrorStreamCaptureInvalidated);
    cudaGetLastError();
    /* global: neither */
    ASSERT_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    ASSERT_EQ(malloc_from_another_thread(), cudaErrorStreamCaptureUnsupported);
    ASSERT_EQ(cudaStreamEndCapture(s, &g), cudaErrorStreamCaptureInvalidated);
    cudaGetLastError();
    /* this thread relaxed during its own global capture: allowed, and
     * forbidden again once its mode is back; cudaMemGetInfo is safe */
    ASSERT_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    size_t f, t;
    ASSERT_OK(cudaMemGetInfo(&f, &t));
    enum cudaStreamCaptureMode m = cudaStreamCaptureModeRelaxed;
    ASSERT_OK(cudaThreadExchangeStreamCaptureMode(&m));
    ASSERT_EQ(m, cudaStreamCaptureModeGlobal);
    ASSERT_OK(cudaMalloc(&p, N));
    ASSERT_OK(cudaThreadExchangeStreamCaptureMode(&m));
    ASSERT_EQ(cudaFree(p), cudaErrorStreamCaptureUnsupported);
    ASSERT_EQ(cudaStreamEndCapture(s, &g), cudaErrorStreamCaptureInvalidated);
    cudaGetLastError();
    ASSERT_OK(cudaFree(p));
    /* relaxed capture: everything but a device-wide synchronization */
    ASSERT_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
    ASSERT_OK(cudaMalloc(&p, N));
    ASSERT_OK(cudaFree(p));
    ASSERT_EQ(cudaDeviceSynchronize(), cudaErrorStreamCaptureUnsupported);
    ASSERT_EQ(cudaStreamEndCapture(s, &g), cudaErrorStreamCaptureInvalidated);
    cudaGetLastError();
    release_held();
}


TEST(a_graph_is_printed_as_a_dot_file_naming_its_nodes)
{
    cudaStream_t s = held_stream(cudaStreamNonBlocking);
    unsigned char *d = held_device(N);
    ASSERT_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    ASSERT_OK(cudaMemsetAsync(d, 1, N, s));
    ASSERT_OK(cudaMemsetAsync(d, 2, N, s));
    cudaGraph_t g;
    cudaGraphExec_t x = end_capture_instantiated(s, &g);
    char path[] = "/tmp/vt_sim_graph_XXXXXX";
    int fd = mkstemp(path);
    ASSERT(fd >= 0);
    close(fd);
    ASSERT_OK(cudaGraphDebugDotPrint(g, path, 0));
    char text[256] = {0};
    FILE *f = fopen(path, "r");
    ASSERT(f != NULL);
    size_t got = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    unlink(path);
    ASSERT(got > 0);
    ASSERT(strncmp(text, "digraph", 7) == 0);
    ASSERT(strstr(text, "2 nodes") != NULL);
    ASSERT_EQ(cudaGraphDebugDotPrint(g, NULL, 0), cudaErrorInvalidValue);
    ASSERT_EQ(cudaGraphDebugDotPrint(NULL, path, 0), cudaErrorInvalidValue);
    ASSERT_EQ(cudaGraphDebugDotPrint(g, "/nonexistent-dir/g.dot", 0), cudaErrorOperatingSystem);
    cudaGetLastError();
    ASSERT_OK(cudaGraphExecDestroy(x));
    ASSERT_OK(cudaGraphDestroy(g));
}

TEST_MAIN()
