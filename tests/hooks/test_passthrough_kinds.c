/* tests/hooks/test_passthrough_kinds.c - every way a program holds memory
 * that the cache does not serve leaves one PASSTHROUGH event per allocation
 * and one per release, with the call's kind (run under the preload). */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda.h>
#include <cuda_runtime_api.h>

#include "harness.h"
#include "hk_snapshot.h"
#include "snapfile.h"
#include "vramtrace/format.h"

struct expect {
    uint64_t addr, size;
    unsigned kind;
    int allocs, releases;
};

/* Counts the PASSTHROUGH events of each expected address. A release may be
 * recorded as VT_PASS_FOREIGN_FREE (cudaFree of a pointer the cache does not
 * own) or with the allocation's own kind (cuArrayDestroy, ...). */
static void count_events(const vt__snapshot_data *sn, struct expect *x, int n)
{
    for (size_t i = 0; i < sn->nevents; i++) {
        const vt__event *e = &sn->events[i];
        if (e->kind != VT_EV_PASSTHROUGH)
            continue;
        for (int j = 0; j < n; j++) {
            if (e->addr != x[j].addr)
                continue;
            if (e->aux2) {
                ASSERT(e->aux == x[j].kind || e->aux == VT_PASS_FOREIGN_FREE);
                x[j].releases++;
            } else {
                ASSERT_EQ(e->aux, x[j].kind);
                ASSERT_EQ(e->size, x[j].size);
                x[j].allocs++;
            }
        }
    }
}

TEST(pitched_arrays_registered_and_pool_allocations_are_recorded)
{
    void *pitched;
    size_t pitch;
    ASSERT_EQ(cudaMallocPitch(&pitched, &pitch, 1000, 10), cudaSuccess);
    struct cudaPitchedPtr p3;
    ASSERT_EQ(cudaMalloc3D(&p3, (struct cudaExtent){ 200, 4, 5 }), cudaSuccess);
    cudaArray_t arr, arr3;
    struct cudaChannelFormatDesc f = cudaCreateChannelDesc(32, 0, 0, 0, cudaChannelFormatKindFloat);
    ASSERT_EQ(cudaMallocArray(&arr, &f, 64, 32, 0), cudaSuccess);
    ASSERT_EQ(cudaMalloc3DArray(&arr3, &f, (struct cudaExtent){ 16, 16, 16 }, 0), cudaSuccess);
    static char reg[1 << 16];
    ASSERT_EQ(cudaHostRegister(reg, sizeof reg, 0), cudaSuccess);
    struct cudaMemPoolProps props = { 0 };
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    cudaMemPool_t pool;
    ASSERT_EQ(cudaMemPoolCreate(&pool, &props), cudaSuccess);
    void *pooled;
    ASSERT_EQ(cudaMallocFromPoolAsync(&pooled, 5000, pool, 0), cudaSuccess);
    /* The driver's own entry point, as a static runtime or a driver program reaches it. */
    CUdeviceptr dp;
    size_t dpitch;
    ASSERT_EQ(cuMemAllocPitch(&dp, &dpitch, 300, 3, 4), CUDA_SUCCESS);

    ASSERT_EQ(cudaFree(pitched), cudaSuccess);
    ASSERT_EQ(cudaFree(p3.ptr), cudaSuccess);
    ASSERT_EQ(cudaFreeArray(arr), cudaSuccess);
    ASSERT_EQ(cudaFreeArray(arr3), cudaSuccess);
    ASSERT_EQ(cudaHostUnregister(reg), cudaSuccess);
    ASSERT_EQ(cudaFreeAsync(pooled, 0), cudaSuccess);
    ASSERT_EQ(cuMemFree(dp), CUDA_SUCCESS);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);

    struct expect x[] = {
        { (uint64_t)(uintptr_t)pitched, pitch * 10, VT_PASS_PITCH, 0, 0 },
        { (uint64_t)(uintptr_t)p3.ptr, p3.pitch * 20, VT_PASS_PITCH, 0, 0 },
        { (uint64_t)(uintptr_t)arr, 64 * 32 * 4, VT_PASS_ARRAY, 0, 0 },
        { (uint64_t)(uintptr_t)arr3, 16 * 16 * 16 * 4, VT_PASS_ARRAY, 0, 0 },
        { (uint64_t)(uintptr_t)reg, sizeof reg, VT_PASS_HOST_REGISTER, 0, 0 },
        { (uint64_t)(uintptr_t)pooled, 5000, VT_PASS_FROM_POOL, 0, 0 },
        { (uint64_t)dp, dpitch * 3, VT_PASS_PITCH, 0, 0 },
    };
    int n = (int)(sizeof x / sizeof x[0]);
    vt__snapshot_data *sn = hk_take_snapshot();
    count_events(sn, x, n);
    vt__snapshot_free(sn);
    for (int j = 0; j < n; j++) {
        ASSERT_MSG(x[j].allocs == 1, "allocation %d recorded %d times", j, x[j].allocs);
        ASSERT_MSG(x[j].releases == 1, "release %d recorded %d times", j, x[j].releases);
    }
}

/* Stream-ordered allocations captured into a graph are graph memory: the
 * driver's, valid at every launch. Before, the cache served them and took
 * the capture-time free as real, so the next allocation got the same block
 * and every replay of the graph wrote into it. A stream-ordered free inside
 * the capture of a block allocated before it is refused, as a real driver
 * refuses it (invalid value, the capture goes on, the block stays the
 * program's: tests/gpucheck/driver_facts.real), and a plain cudaFree during
 * a relaxed capture frees without recording a fence on the legacy stream
 * (which would invalidate the capture of a blocking stream). */
TEST(captured_allocations_are_graph_memory_and_replays_corrupt_nothing)
{
    enum { N = 1 << 20 };
    cudaStream_t s, other;
    ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);                 /* blocking */
    ASSERT_EQ(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking), cudaSuccess);
    unsigned char *host, *held, *plain;
    ASSERT_EQ(cudaMallocHost((void **)&host, N), cudaSuccess);
    ASSERT_EQ(cudaMallocAsync((void **)&held, N, s), cudaSuccess);
    ASSERT_EQ(cudaMalloc((void **)&plain, N), cudaSuccess);
    ASSERT_EQ(cudaMemsetAsync(held, 0x22, N, s), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);

    unsigned char *g1 = NULL;
    ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed), cudaSuccess);
    ASSERT_EQ(cudaMallocAsync((void **)&g1, N, s), cudaSuccess);
    ASSERT_EQ(cudaMemsetAsync(g1, 0x11, N, s), cudaSuccess);
    ASSERT_EQ(cudaMemcpyAsync(host, held, N, cudaMemcpyDeviceToHost, s), cudaSuccess);
    ASSERT_EQ(cudaFreeAsync(g1, s), cudaSuccess);
    ASSERT_EQ(cudaFreeAsync(held, s), cudaErrorInvalidValue);      /* a cache block: refused */
    ASSERT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
    ASSERT_EQ(cudaFree(plain), cudaSuccess);                       /* unknown stream */
    cudaGraph_t g;
    ASSERT_EQ(cudaStreamEndCapture(s, &g), cudaSuccess);
    cudaGraphExec_t x;
    ASSERT_EQ(cudaGraphInstantiate(&x, g, 0), cudaSuccess);

    /* Meanwhile the program allocates and fills: none of it may be the
     * graph's memory or the block the graph still reads. */
    unsigned char *mine[8];
    for (int i = 0; i < 8; i++) {
        ASSERT_EQ(cudaMallocAsync((void **)&mine[i], N, i % 2 ? s : other), cudaSuccess);
        ASSERT_EQ(cudaMemsetAsync(mine[i], 0xe0 + i, N, i % 2 ? s : other), cudaSuccess);
    }
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    for (int launch = 0; launch < 3; launch++) {
        memset(host, 0, N);
        ASSERT_EQ(cudaGraphLaunch(x, s), cudaSuccess);
        ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
        ASSERT_EQ(host[0], 0x22);
        ASSERT_EQ(host[N - 1], 0x22);
    }
    unsigned char back[64];
    for (int i = 0; i < 8; i++) {
        ASSERT_EQ(cudaMemcpy(back, mine[i] + N - 64, 64, cudaMemcpyDeviceToHost), cudaSuccess);
        ASSERT_MSG(back[0] == 0xe0 + i && back[63] == 0xe0 + i,
                   "block %d overwritten by a graph replay: %#x", i, back[0]);
        ASSERT_EQ(cudaFreeAsync(mine[i], s), cudaSuccess);
    }
    ASSERT_EQ(cudaGraphExecDestroy(x), cudaSuccess);
    ASSERT_EQ(cudaGraphDestroy(g), cudaSuccess);
    ASSERT_EQ(cudaFreeAsync(held, s), cudaSuccess);                /* still allocated */
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);

    struct expect e = { (uint64_t)(uintptr_t)g1, N, VT_PASS_GRAPH, 0, 0 };
    vt__snapshot_data *sn = hk_take_snapshot();
    count_events(sn, &e, 1);
    vt__snapshot_free(sn);
    ASSERT_EQ(e.allocs, 1);
    ASSERT_EQ(e.releases, 1);
    ASSERT_EQ(cudaStreamDestroy(s), cudaSuccess);
    ASSERT_EQ(cudaStreamDestroy(other), cudaSuccess);
    ASSERT_EQ(cudaFreeHost(host), cudaSuccess);
}

TEST_MAIN()
