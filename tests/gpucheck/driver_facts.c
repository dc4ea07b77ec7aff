/* tests/gpucheck/driver_facts.c - what the CUDA runtime and driver answer in
 * the corners where the simulator (tests/sim) has to guess: stream capture
 * and graph memory, frees without a current context, frees after a device
 * reset, frees of pointers no allocation returned, and how much device
 * memory one cudaMalloc takes.
 *
 * One fact per process (`driver_facts NAME`; `driver_facts --list` names
 * them), printed as one line `NAME: key=value ...` of return codes and
 * sizes, nothing specific to one device or run. scripts/gpu-check runs every
 * fact plain and under the preload on a real GPU (the preload must change no
 * answer) and keeps the real answers in tests/gpucheck/driver_facts.real;
 * the suite runs the same facts on the simulator and compares them with
 * those answers (tests/gpucheck/meson.build), so the simulator cannot drift
 * from what a real driver was seen to do.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <cuda.h>
#include <cuda_runtime_api.h>

#define MIB (1024u * 1024u)

static void kv(const char *key, long v) { printf(" %s=%ld", key, v); }

static cudaStream_t stream(unsigned flags)
{
    cudaStream_t s = NULL;
    cudaStreamCreateWithFlags(&s, flags);
    return s;
}

/* The capture on s ended (key `end`: its answer) and the error that left
 * (key `last`), for the facts that do not run the graph. */
static void end_capture(cudaStream_t s, const char *end, const char *last)
{
    cudaGraph_t g = NULL;
    kv(end, cudaStreamEndCapture(s, &g));
    kv(last, cudaGetLastError());
}

/* A stream-ordered allocation and its free captured into a graph, which
 * then runs. */
static void capture_alloc(enum cudaStreamCaptureMode mode, unsigned stream_flags)
{
    void *warm = NULL;
    cudaMalloc(&warm, MIB);   /* the context and the cache exist before the capture */
    cudaStream_t s = stream(stream_flags);
    kv("begin", cudaStreamBeginCapture(s, mode));
    void *p = NULL;
    kv("alloc", cudaMallocAsync(&p, MIB, s));
    kv("memset", cudaMemsetAsync(p, 1, MIB, s));
    kv("free", cudaFreeAsync(p, s));
    cudaGraph_t g = NULL;
    kv("end", cudaStreamEndCapture(s, &g));
    cudaGraphExec_t x = NULL;
    kv("instantiate", g ? (long)cudaGraphInstantiate(&x, g, 0) : -1);
    kv("launch1", x ? (long)cudaGraphLaunch(x, s) : -1);
    kv("launch2", x ? (long)cudaGraphLaunch(x, s) : -1);
    kv("sync", cudaStreamSynchronize(s));
    kv("last", cudaGetLastError());
    cudaFree(warm);
}

static void capture_malloc_async_relaxed(void) { capture_alloc(cudaStreamCaptureModeRelaxed, cudaStreamDefault); }
static void capture_malloc_async_global(void) { capture_alloc(cudaStreamCaptureModeGlobal, cudaStreamNonBlocking); }

/* A capture begun after a warm-up allocation (*warm), for the queries
 * below; capture_queries_end allocates and frees in it and ends it. */
static cudaStream_t capture_queries_begin(enum cudaStreamCaptureMode mode, void **warm)
{
    *warm = NULL;
    cudaMalloc(warm, MIB);
    cudaStream_t s = stream(cudaStreamDefault);
    kv("begin", cudaStreamBeginCapture(s, mode));
    return s;
}

static void capture_queries_end(cudaStream_t s, void *warm)
{
    void *p = NULL;
    kv("alloc", cudaMallocAsync(&p, MIB, s));
    kv("free", cudaFreeAsync(p, s));
    end_capture(s, "end", "last");
    cudaFree(warm);
}

/* The queries the preload makes before a stream-ordered allocation, made by
 * the program itself during a capture: do they disturb it? */
static void capture_after_stream_queries(void)
{
    void *warm;
    cudaStream_t s = capture_queries_begin(cudaStreamCaptureModeRelaxed, &warm);
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
    kv("is_capturing", cuStreamIsCapturing((CUstream)s, &st));
    kv("status", st);
    CUdevice d = -1;
    kv("stream_device", cuStreamGetDevice((CUstream)s, &d));
    kv("ctx_device", cuCtxGetDevice(&d));
    capture_queries_end(s, warm);
}

/* More queries during a capture: which of them are allowed (the preload
 * needs a stream's device, and a pointer's). */
static void capture_other_queries(void)
{
    void *warm;
    cudaStream_t s = capture_queries_begin(cudaStreamCaptureModeGlobal, &warm);
    CUcontext c = NULL;
    kv("stream_ctx", cuStreamGetCtx((CUstream)s, &c));
    unsigned flags = 0;
    kv("stream_flags", cuStreamGetFlags((CUstream)s, &flags));
    int ord = -1;
    kv("pointer_device", cuPointerGetAttribute(&ord, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                               (CUdeviceptr)(uintptr_t)warm));
    kv("ctx_current", cuCtxGetCurrent(&c));
    int dev = -1;
    kv("get_device", cudaGetDevice(&dev));
    kv("event_create", cuEventCreate(&(CUevent){0}, CU_EVENT_DISABLE_TIMING));
    capture_queries_end(s, warm);
}

/* A thread that captures in global mode and makes its own interaction mode
 * relaxed: may it then allocate and free with cudaMalloc and cudaFree? */
static void capture_thread_mode_relaxed(void)
{
    void *warm = NULL;
    cudaMalloc(&warm, MIB);
    cudaStream_t s = stream(cudaStreamNonBlocking);
    kv("begin", cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    enum cudaStreamCaptureMode m = cudaStreamCaptureModeRelaxed;
    kv("exchange", cudaThreadExchangeStreamCaptureMode(&m));
    kv("was", m);
    void *p = NULL;
    kv("cuda_malloc", cudaMalloc(&p, MIB));
    kv("cuda_free", cudaFree(p));
    kv("exchange_back", cudaThreadExchangeStreamCaptureMode(&m));
    kv("free_warm", cudaFree(warm));
    end_capture(s, "end", "last");
}

static cudaStream_t other_thread_stream;
static long other_thread_result[2];

static void *other_thread(void *arg)
{
    (void)arg;
    void *p = NULL;
    other_thread_result[0] = cudaMalloc(&p, MIB);
    other_thread_result[1] = cudaMallocAsync(&p, MIB, other_thread_stream);
    return NULL;
}

/* fn run on a thread of its own, to its end: what another thread's calls
 * answer while this one captures (other_thread_result). */
static void on_another_thread(void *(*fn)(void *))
{
    pthread_t t;
    pthread_create(&t, NULL, fn, NULL);
    pthread_join(t, NULL);
}

/* Another thread allocates while this one captures in global mode. */
static void capture_global_other_thread_allocates(void)
{
    void *warm = NULL;
    cudaMalloc(&warm, MIB);
    cudaStream_t s = stream(cudaStreamNonBlocking);
    other_thread_stream = stream(cudaStreamNonBlocking);
    kv("begin", cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    on_another_thread(other_thread);
    kv("other_malloc", other_thread_result[0]);
    kv("other_malloc_async", other_thread_result[1]);
    end_capture(s, "end", "last");
}

static void *other_thread_malloc_free(void *arg)
{
    (void)arg;
    void *p = NULL;
    other_thread_result[0] = cudaMalloc(&p, MIB);
    other_thread_result[1] = cudaFree(p);
    return NULL;
}

/* A capture begun in thread-local mode: it prohibits this thread's unsafe
 * calls, not another thread's (cuThreadExchangeStreamCaptureMode, cuda.h).
 * Then the same begun in global mode, seen from the other thread. */
static void capture_thread_local_and_other_thread(void)
{
    void *warm = NULL;
    cudaMalloc(&warm, MIB);
    cudaStream_t s = stream(cudaStreamNonBlocking);
    kv("begin", cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    on_another_thread(other_thread_malloc_free);
    kv("other_malloc", other_thread_result[0]);
    kv("other_free", other_thread_result[1]);
    void *p = NULL;
    kv("own_malloc", cudaMalloc(&p, MIB));
    end_capture(s, "end", "last");
    kv("begin_global", cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    on_another_thread(other_thread_malloc_free);
    kv("other_malloc_global", other_thread_result[0]);
    end_capture(s, "end_global", "last_global");
    kv("malloc_after", cudaMalloc(&p, MIB));
    kv("free_after", cudaFree(p));
    cudaFree(warm);
}

/* A free during a capture of memory allocated before it. */
static void capture_free(int how, enum cudaStreamCaptureMode mode)
{
    cudaStream_t s = stream(cudaStreamDefault);
    void *p = NULL;
    if (how == 0)
        kv("alloc", cudaMallocAsync(&p, MIB, s));
    else
        kv("alloc", cudaMalloc(&p, MIB));
    kv("sync", cudaStreamSynchronize(s));
    kv("begin", cudaStreamBeginCapture(s, mode));
    kv("free", how == 2 ? cudaFree(p) : cudaFreeAsync(p, s));
    cudaGraph_t g = NULL;
    kv("end", cudaStreamEndCapture(s, &g));
    cudaGraphExec_t x = NULL;
    kv("instantiate", g ? (long)cudaGraphInstantiate(&x, g, 0) : -1);
    kv("launch", x ? (long)cudaGraphLaunch(x, s) : -1);
    kv("sync_after", cudaStreamSynchronize(s));
    kv("last", cudaGetLastError());
    kv("free_again", cudaFree(p));
    kv("last_after", cudaGetLastError());
}

static void capture_free_async_of_pool_memory(void) { capture_free(0, cudaStreamCaptureModeRelaxed); }
static void capture_free_async_of_cuda_malloc(void) { capture_free(1, cudaStreamCaptureModeRelaxed); }
static void capture_cuda_free_relaxed(void) { capture_free(2, cudaStreamCaptureModeRelaxed); }
static void capture_cuda_free_global(void) { capture_free(2, cudaStreamCaptureModeGlobal); }

/* Calls not allowed while a stream captures. */
static void capture_forbidden_calls(void)
{
    cudaStream_t s = stream(cudaStreamDefault);
    kv("begin", cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    void *p = NULL;
    kv("cuda_malloc", cudaMalloc(&p, MIB));
    end_capture(s, "end", "last");
    kv("begin2", cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
    kv("query", cudaStreamQuery(s));
    end_capture(s, "end2", "last2");
}

/* Which calls a capture forbids: each in a capture of its own on stream s
 * (global, then relaxed mode), what it returns and what ending the capture
 * returns. Stream o and event ev are outside any capture; dp is device
 * memory, hp pinned host memory. */
static cudaStream_t uc_s, uc_o;
static cudaEvent_t uc_ev;
static void *uc_dp;
static char uc_pageable[4096];

static long unsafe_call(int i)
{
    void *p = NULL, *q = NULL;
    size_t f, t;
    CUdevice d;
    switch (i) {
    case 0: return cudaStreamQuery(uc_o);
    case 1: return cudaEventQuery(uc_ev);
    case 2: return cudaEventSynchronize(uc_ev);
    case 3: return cudaDeviceSynchronize();
    case 4: return cudaStreamSynchronize(uc_o);
    case 5: {
        long r = cudaMallocHost(&p, 4096);
        if (r == cudaSuccess)
            cudaFreeHost(p);
        return r;
    }
    case 6: return cudaMemGetInfo(&f, &t);
    case 7: return cudaMemcpy(uc_dp, uc_pageable, 4096, cudaMemcpyHostToDevice);
    case 8: return cudaMemset(uc_dp, 0, 4096);
    case 9: return cudaFree(NULL);
    case 10: return cudaMallocManaged(&p, 4096, cudaMemAttachGlobal);
    case 11: return cudaMallocAsync(&p, 4096, uc_o);
    case 12: return cudaMemcpyAsync(uc_dp, uc_pageable, 4096, cudaMemcpyHostToDevice, uc_s);
    case 13: return cuStreamGetDevice((CUstream)uc_o, &d);
    case 14:
        cudaMallocAsync(&q, 4096, uc_s);
        return cudaFreeAsync(q, uc_o);
    }
    return -1;
}

static void capture_unsafe_calls(void)
{
    static const char *names[] = {"stream_query_other", "event_query", "event_sync", "device_sync",
                                  "stream_sync_other", "malloc_host", "mem_get_info",
                                  "memcpy_pageable", "memset", "free_null", "malloc_managed",
                                  "malloc_async_other", "memcpy_async_captured",
                                  "stream_device_other", "free_async_other"};
    cudaStreamCreateWithFlags(&uc_s, cudaStreamNonBlocking);
    cudaStreamCreateWithFlags(&uc_o, cudaStreamNonBlocking);
    cudaEventCreate(&uc_ev);
    cudaEventRecord(uc_ev, uc_o);
    cudaMalloc(&uc_dp, 4096);
    cudaDeviceSynchronize();
    for (int relaxed = 0; relaxed < 2; relaxed++) {
        for (int i = 0; i < (int)(sizeof names / sizeof *names); i++) {
            char key[64];
            cudaStreamBeginCapture(uc_s, relaxed ? cudaStreamCaptureModeRelaxed
                                                 : cudaStreamCaptureModeGlobal);
            snprintf(key, sizeof key, "%s_%s", relaxed ? "r" : "g", names[i]);
            kv(key, unsafe_call(i));
            cudaGraph_t g = NULL;
            snprintf(key, sizeof key, "%s_%s_end", relaxed ? "r" : "g", names[i]);
            kv(key, cudaStreamEndCapture(uc_s, &g));
            if (g)
                cudaGraphDestroy(g);
            cudaDeviceSynchronize();
            cudaGetLastError();
        }
    }
}

/* A graph that allocates and does not free, launched again. */
static void graph_relaunch(unsigned long long flags)
{
    cudaStream_t s = stream(cudaStreamNonBlocking);
    kv("begin", cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    void *k = NULL;
    kv("alloc", cudaMallocAsync(&k, 256u << 10, s));
    kv("memset", cudaMemsetAsync(k, 7, 256u << 10, s));
    cudaGraph_t g = NULL;
    kv("end", cudaStreamEndCapture(s, &g));
    cudaGraphExec_t x = NULL;
    kv("instantiate", cudaGraphInstantiateWithFlags(&x, g, flags));
    kv("launch1", cudaGraphLaunch(x, s));
    kv("sync1", cudaStreamSynchronize(s));
    kv("launch2", cudaGraphLaunch(x, s));
    kv("sync2", cudaStreamSynchronize(s));
    kv("last", cudaGetLastError());
    kv("free", cudaFree(k));
    kv("launch3", cudaGraphLaunch(x, s));
    kv("sync3", cudaStreamSynchronize(s));
    kv("free3", cudaFreeAsync(k, s));
    kv("sync4", cudaStreamSynchronize(s));
    kv("free_twice", cudaFree(k));
    kv("last_end", cudaGetLastError());
}

static void graph_relaunch_unfreed(void) { graph_relaunch(0); }
static void graph_relaunch_auto_free(void) { graph_relaunch(cudaGraphInstantiateFlagAutoFreeOnLaunch); }

/* What the facts about frees of older pointers start from: *p of
 * cudaMalloc and *q of cudaMallocAsync on a new non-blocking stream (which
 * it returns), 1 MiB each, the stream synchronized. */
static cudaStream_t malloc_and_malloc_async(void **p, void **q)
{
    cudaStream_t s = stream(cudaStreamNonBlocking);
    kv("alloc", cudaMalloc(p, MIB));
    kv("alloc_async", cudaMallocAsync(q, MIB, s));
    kv("sync", cudaStreamSynchronize(s));
    return s;
}

/* Driver frees and allocations with no context current. */
static void no_context_calls(void)
{
    void *p = NULL, *q = NULL;
    cudaStream_t s = malloc_and_malloc_async(&p, &q);
    CUcontext primary = NULL;
    cuCtxGetCurrent(&primary);
    kv("set_none", cuCtxSetCurrent(NULL));
    kv("free", cuMemFree((CUdeviceptr)(uintptr_t)p));
    CUdeviceptr r = 0;
    kv("cu_alloc", cuMemAlloc(&r, MIB));
    size_t fr = 0, tot = 0;
    kv("mem_info", cuMemGetInfo(&fr, &tot));
    kv("free_async_stream", cuMemFreeAsync((CUdeviceptr)(uintptr_t)q, (CUstream)s));
    kv("free_async_legacy", cuMemFreeAsync((CUdeviceptr)(uintptr_t)q, NULL));
    kv("set_primary", cuCtxSetCurrent(primary));
    kv("free_again", cuMemFree((CUdeviceptr)(uintptr_t)p));
    kv("free_async_now", cuMemFreeAsync((CUdeviceptr)(uintptr_t)q, (CUstream)s));
    kv("sync_end", cuCtxSynchronize());
}

/* Frees of pointers from before cudaDeviceReset. */
static void reset_then_free_old(void)
{
    void *p = NULL, *q = NULL;
    malloc_and_malloc_async(&p, &q);   /* its stream goes with the reset */
    kv("reset", cudaDeviceReset());
    cudaStream_t s2 = stream(cudaStreamNonBlocking);
    kv("free_async", cudaFreeAsync(q, s2));
    kv("sync_after", cudaStreamSynchronize(s2));
    kv("last", cudaGetLastError());
    kv("free", cudaFree(p));
    kv("last2", cudaGetLastError());
    kv("free_async_of_malloc", cudaFreeAsync(p, s2));
    kv("last3", cudaGetLastError());
}

/* The first calls after cudaDeviceReset, before any other runtime call:
 * an allocation (which the preload's cache serves) and a free. */
static void reset_then_allocate(void)
{
    void *p = NULL, *q = NULL;
    kv("alloc", cudaMalloc(&p, MIB));
    kv("reset", cudaDeviceReset());
    kv("alloc_after", cudaMalloc(&q, MIB));
    kv("memset", cudaMemset(q, 1, MIB));
    kv("free", cudaFree(q));
    cudaStream_t s = stream(cudaStreamNonBlocking);
    kv("alloc_async", cudaMallocAsync(&q, MIB, s));
    kv("free_async", cudaFreeAsync(q, s));
    kv("sync", cudaStreamSynchronize(s));
    kv("last", cudaGetLastError());
}

/* Frees of pointers no allocation returned: inside a block, and of a block
 * already freed. */
static void bad_frees(void)
{
    void *p = NULL, *q = NULL;
    cudaStream_t s = stream(cudaStreamNonBlocking);
    kv("alloc", cudaMalloc(&p, 4 * MIB));
    kv("alloc_async", cudaMallocAsync(&q, 4 * MIB, s));
    kv("sync", cudaStreamSynchronize(s));
    kv("free_inside", cudaFree((char *)p + 4096));
    kv("last", cudaGetLastError());
    kv("free_async_inside", cudaFreeAsync((char *)q + 4096, s));
    kv("sync2", cudaStreamSynchronize(s));
    kv("last2", cudaGetLastError());
    kv("free_async_of_malloc", cudaFreeAsync(p, s));
    kv("sync3", cudaStreamSynchronize(s));
    kv("free_twice", cudaFree(p));
    kv("last3", cudaGetLastError());
    kv("free_async", cudaFreeAsync(q, s));
    kv("sync4", cudaStreamSynchronize(s));
    kv("free_async_twice", cudaFreeAsync(q, s));
    kv("sync5", cudaStreamSynchronize(s));
    kv("last4", cudaGetLastError());
}

/* Device memory one cudaMalloc takes (cudaMemGetInfo's free before and
 * after 16 of them), in KiB per allocation. */
static void malloc_footprint(void)
{
    static const size_t sizes[] = {512, MIB, MIB + 1, 2 * MIB, 3 * MIB, 7 * MIB, 20 * MIB + 1};
    static const char *names[] = {"512B", "1MiB", "1MiB+1", "2MiB", "3MiB", "7MiB", "20MiB+1"};
    void *warm = NULL;
    cudaMalloc(&warm, MIB);
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        enum { N = 16 };
        void *p[N];
        size_t f0 = 0, f1 = 0, t = 0;
        cudaMemGetInfo(&f0, &t);
        for (int j = 0; j < N; j++)
            p[j] = NULL, cudaMalloc(&p[j], sizes[i]);
        cudaMemGetInfo(&f1, &t);
        char key[32];
        snprintf(key, sizeof key, "kib_%s", names[i]);
        kv(key, (long)((f0 - f1) / N / 1024));
        for (int j = 0; j < N; j++)
            cudaFree(p[j]);
    }
}

/* The same for cudaMallocAsync from the device's default pool (the pool
 * reserves more than it hands out: first one allocation, then 16), and what
 * it keeps once its memory is freed and the stream synchronized. */
static void malloc_async_footprint(void)
{
    void *warm = NULL;
    cudaMalloc(&warm, MIB);
    cudaStream_t s = stream(cudaStreamNonBlocking);
    size_t f0 = 0, f1 = 0, f2 = 0, t = 0;
    cudaMemGetInfo(&f0, &t);
    void *p[16], *one = NULL;
    cudaMallocAsync(&one, MIB, s);
    cudaStreamSynchronize(s);
    cudaMemGetInfo(&f1, &t);
    kv("first_kib", (long)((f0 - f1) / 1024));
    cudaFreeAsync(one, s);
    cudaStreamSynchronize(s);
    cudaMemGetInfo(&f0, &t);
    for (int j = 0; j < 16; j++)
        p[j] = NULL, cudaMallocAsync(&p[j], MIB, s);
    cudaStreamSynchronize(s);
    cudaMemGetInfo(&f1, &t);
    kv("kib_1MiB", (long)((f0 - f1) / 16 / 1024));
    for (int j = 0; j < 16; j++)
        cudaFreeAsync(p[j], s);
    cudaStreamSynchronize(s);
    cudaMemGetInfo(&f2, &t);
    kv("kept_kib", (long)((f0 > f2 ? f0 - f2 : 0) / 1024));
}

/* The limits torch.compile's Triton heuristics and PyTorch's device
 * properties read (cudaGetDeviceProperties), which the simulator states in
 * tests/sim/kernel_limits.h; "_attr" keys ask cuDeviceGetAttribute's
 * runtime twin, which the properties must agree with. */
static void device_limits(void)
{
    struct cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, 0) != cudaSuccess) {
        kv("props", -1);
        return;
    }
    kv("major", p.major);
    kv("minor", p.minor);
    kv("sm_count", p.multiProcessorCount);
    kv("warp", p.warpSize);
    kv("threads_block", p.maxThreadsPerBlock);
    kv("threads_sm", p.maxThreadsPerMultiProcessor);
    kv("regs_block", p.regsPerBlock);
    kv("regs_sm", p.regsPerMultiprocessor);
    kv("blocks_sm", p.maxBlocksPerMultiProcessor);
    kv("smem_block", (long)p.sharedMemPerBlock);
    kv("smem_optin", (long)p.sharedMemPerBlockOptin);
    kv("smem_sm", (long)p.sharedMemPerMultiprocessor);
    kv("smem_reserved", (long)p.reservedSharedMemPerBlock);
    kv("l2", p.l2CacheSize);
    int v = -1;
    cudaDeviceGetAttribute(&v, cudaDevAttrMaxRegistersPerMultiprocessor, 0);
    kv("regs_sm_attr", v);
    v = -1;
    cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerMultiprocessor, 0);
    kv("smem_sm_attr", v);
}

/* Interprocess event handles in the process that made them (what the
 * simulator assumes where the documentation is silent: sim_ipc_event.c):
 * an event without the flag, one with it but timed, a handle opened where it
 * was made, an elapsed time of an interprocess event. */
static void ipc_event_handles(void)
{
    cudaEvent_t plain = NULL, timed = NULL, shared = NULL, opened = NULL;
    cudaIpcEventHandle_t h;
    kv("plain_create", cudaEventCreateWithFlags(&plain, cudaEventDisableTiming));
    kv("plain_handle", cudaIpcGetEventHandle(&h, plain));
    kv("last1", cudaGetLastError());
    kv("timed_create", cudaEventCreateWithFlags(&timed, cudaEventInterprocess));
    kv("last2", cudaGetLastError());
    kv("create", cudaEventCreateWithFlags(&shared, cudaEventInterprocess | cudaEventDisableTiming));
    kv("handle", cudaIpcGetEventHandle(&h, shared));
    kv("open_here", cudaIpcOpenEventHandle(&opened, h));
    kv("last3", cudaGetLastError());
    kv("record", cudaEventRecord(shared, 0));
    kv("sync", cudaEventSynchronize(shared));
    float ms = 0;
    kv("elapsed", cudaEventElapsedTime(&ms, shared, shared));
    kv("last4", cudaGetLastError());
    kv("destroy", cudaEventDestroy(shared));
    kv("destroy_plain", cudaEventDestroy(plain));
}

/* cuMemUnmap of memory a stream still has queued work on (what the
 * simulator assumes, sim_vmm.c; PyTorch's expandable segments synchronize
 * the stream first, saying unmapping "does not appear to synchronize in all
 * cases"): a host function holds the stream 300 ms, a memset of the mapping
 * waits behind it, and the mapping is unmapped at once. `waited`: whether
 * the host function had run when the unmap returned. */
static void CUDART_CB hold_stream(void *arg)
{
    struct timespec t = { 0, 300 * 1000 * 1000 };
    nanosleep(&t, NULL);
    __atomic_store_n((int *)arg, 1, __ATOMIC_RELEASE);
}

static void unmap_while_queued(void)
{
    kv("init", cudaFree(0));
    CUdevice dev = 0;
    cuCtxGetDevice(&dev);
    CUmemAllocationProp prop = { .type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                 .location = { CU_MEM_LOCATION_TYPE_DEVICE, dev } };
    size_t g = 0;
    kv("gran", cuMemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    CUdeviceptr va = 0;
    CUmemGenericAllocationHandle h = 0;
    kv("reserve", cuMemAddressReserve(&va, g, 0, 0, 0));
    kv("create", cuMemCreate(&h, g, &prop, 0));
    kv("map", cuMemMap(va, g, 0, h, 0));
    kv("release", cuMemRelease(h));
    CUmemAccessDesc access = { .location = prop.location,
                               .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
    kv("access", cuMemSetAccess(va, g, &access, 1));
    cudaStream_t s = stream(cudaStreamNonBlocking);
    static int held;   /* the host function ran */
    kv("hold", cudaLaunchHostFunc(s, hold_stream, &held));
    kv("memset", cudaMemsetAsync((void *)(uintptr_t)va, 1, g, s));
    kv("unmap", cuMemUnmap(va, g));
    kv("waited", __atomic_load_n(&held, __ATOMIC_ACQUIRE));
    kv("sync", cudaStreamSynchronize(s));
    kv("last", cudaGetLastError());
    kv("after", cudaMemset((void *)(uintptr_t)0, 0, 0));
}

struct fact {
    const char *name;
    void (*run)(void);
};

static const struct fact facts[] = {
    {"capture_malloc_async_relaxed", capture_malloc_async_relaxed},
    {"capture_malloc_async_global", capture_malloc_async_global},
    {"capture_after_stream_queries", capture_after_stream_queries},
    {"capture_other_queries", capture_other_queries},
    {"capture_thread_mode_relaxed", capture_thread_mode_relaxed},
    {"capture_global_other_thread_allocates", capture_global_other_thread_allocates},
    {"capture_thread_local_and_other_thread", capture_thread_local_and_other_thread},
    {"capture_free_async_of_pool_memory", capture_free_async_of_pool_memory},
    {"capture_free_async_of_cuda_malloc", capture_free_async_of_cuda_malloc},
    {"capture_cuda_free_relaxed", capture_cuda_free_relaxed},
    {"capture_cuda_free_global", capture_cuda_free_global},
    {"capture_forbidden_calls", capture_forbidden_calls},
    {"capture_unsafe_calls", capture_unsafe_calls},
    {"graph_relaunch_unfreed", graph_relaunch_unfreed},
    {"graph_relaunch_auto_free", graph_relaunch_auto_free},
    {"no_context_calls", no_context_calls},
    {"reset_then_free_old", reset_then_free_old},
    {"reset_then_allocate", reset_then_allocate},
    {"bad_frees", bad_frees},
    {"malloc_footprint", malloc_footprint},
    {"malloc_async_footprint", malloc_async_footprint},
    {"device_limits", device_limits},
    {"ipc_event_handles", ipc_event_handles},
    {"unmap_while_queued", unmap_while_queued},
};

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: driver_facts NAME | --list\n");
        return 2;
    }
    setvbuf(stdout, NULL, _IONBF, 0);   /* a fact that crashes keeps what it printed */
    for (size_t i = 0; i < sizeof facts / sizeof *facts; i++) {
        if (!strcmp(argv[1], "--list"))
            puts(facts[i].name);
        else if (!strcmp(argv[1], facts[i].name)) {
            printf("%s:", facts[i].name);
            facts[i].run();
            printf("\n");
            return 0;
        }
    }
    if (strcmp(argv[1], "--list")) {
        fprintf(stderr, "driver_facts: no fact %s (--list names them)\n", argv[1]);
        return 2;
    }
    return 0;
}
