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
#include "snapfile.h"
#include "vramtrace/format.h"

static vt_snapshot_data *take_snapshot(void)
{
    char path[] = "/tmp/hk_kindsXXXXXX";
    int fd = mkstemp(path);
    ASSERT(fd >= 0);
    close(fd);
    int (*snap)(const char *);
    void *p = dlsym(RTLD_DEFAULT, "vt_snapshot");
    ASSERT(p != NULL);
    memcpy(&snap, &p, sizeof p);
    ASSERT_EQ(snap(path), 0);
    vt_snapshot_data *sn = NULL;
    char err[256];
    int rc = vt_snapfile_read(path, &sn, err, sizeof err);
    unlink(path);
    ASSERT_MSG(rc == 0, "%s", err);
    return sn;
}

struct expect {
    uint64_t addr, size;
    unsigned kind;
    int allocs, releases;
};

/* Counts the PASSTHROUGH events of each expected address. A release may be
 * recorded as VT_PASS_FOREIGN_FREE (cudaFree of a pointer the cache does not
 * own) or with the allocation's own kind (cuArrayDestroy, ...). */
static void count_events(const vt_snapshot_data *sn, struct expect *x, int n)
{
    for (size_t i = 0; i < sn->nevents; i++) {
        const vt_event *e = &sn->events[i];
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
    vt_snapshot_data *sn = take_snapshot();
    count_events(sn, x, n);
    vt_snapshot_free(sn);
    for (int j = 0; j < n; j++) {
        ASSERT_MSG(x[j].allocs == 1, "allocation %d recorded %d times", j, x[j].allocs);
        ASSERT_MSG(x[j].releases == 1, "release %d recorded %d times", j, x[j].releases);
    }
}

TEST_MAIN()
