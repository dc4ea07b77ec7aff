/* rp_simple_streams.c - the shape of cuda-samples' simpleStreams and
 * simpleCallback: pinned staging buffers, work split over streams (copy in,
 * memset part of it, copy out), stream callbacks and host functions in
 * order, events between streams, everything freed. */
#include <string.h>

#include "realprog.h"

#define NSTREAMS 4
#define CHUNK (1u << 20)

static int done[NSTREAMS];

static void CUDART_CB on_stream_done(cudaStream_t s, cudaError_t status, void *arg)
{
    (void)s;
    int *slot = arg;
    *slot = status == cudaSuccess ? 1 : -1;
}

/* Host functions of different streams may run at the same time. */
static void CUDART_CB count_host_fn(void *arg)
{
    __atomic_fetch_add((int *)arg, 1, __ATOMIC_RELAXED);
}

int main(void)
{
    int dev = 0;
    CHECK(cudaSetDevice(dev));
    unsigned char *h_in, *h_out;
    CHECK(cudaMallocHost((void **)&h_in, NSTREAMS * CHUNK));
    CHECK(cudaHostAlloc((void **)&h_out, NSTREAMS * CHUNK, cudaHostAllocDefault));
    rp_pattern(h_in, NSTREAMS * CHUNK, 1);
    memset(h_out, 0, NSTREAMS * CHUNK);
    unsigned char *d;
    CHECK(cudaMalloc((void **)&d, NSTREAMS * CHUNK));
    cudaStream_t s[NSTREAMS];
    cudaEvent_t ev[NSTREAMS];
    for (int i = 0; i < NSTREAMS; i++) {
        CHECK(cudaStreamCreate(&s[i]));
        CHECK(cudaEventCreateWithFlags(&ev[i], cudaEventDisableTiming));
    }
    int host_calls = 0;
    for (int round = 0; round < 8; round++) {
        for (int i = 0; i < NSTREAMS; i++) {
            size_t off = (size_t)i * CHUNK;
            CHECK(cudaMemcpyAsync(d + off, h_in + off, CHUNK, cudaMemcpyHostToDevice, s[i]));
            CHECK(cudaMemsetAsync(d + off + (size_t)round * 4096, 0x40 + round, 4096, s[i]));
            CHECK(cudaMemcpyAsync(h_out + off, d + off, CHUNK, cudaMemcpyDeviceToHost, s[i]));
            CHECK(cudaLaunchHostFunc(s[i], count_host_fn, &host_calls));
            CHECK(cudaEventRecord(ev[i], s[i]));
        }
        /* The next round's stream i waits for its neighbour's round. */
        for (int i = 0; i < NSTREAMS; i++)
            CHECK(cudaStreamWaitEvent(s[i], ev[(i + 1) % NSTREAMS], 0));
    }
    for (int i = 0; i < NSTREAMS; i++)
        CHECK(cudaStreamAddCallback(s[i], on_stream_done, &done[i], 0));
    CHECK(cudaDeviceSynchronize());
    for (int i = 0; i < NSTREAMS; i++)
        printf("stream %d: callback %d, checksum %016llx\n", i, done[i],
               (unsigned long long)rp_checksum(h_out + (size_t)i * CHUNK, CHUNK));
    printf("host functions run: %d\n", host_calls);
    for (int i = 0; i < NSTREAMS; i++) {
        CHECK(cudaEventDestroy(ev[i]));
        CHECK(cudaStreamDestroy(s[i]));
    }
    CHECK(cudaFree(d));
    CHECK(cudaFreeHost(h_in));
    CHECK(cudaFreeHost(h_out));
    printf("PASSED\n");
    return 0;
}
