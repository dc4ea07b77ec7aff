/* tests/sim/test_sim_memory_extras.c - pitched memory, arrays, registered
 * host memory, mapped pointers, device flags, memory pools, managed hints. */
#include <cuda_runtime_api.h>
#include <stdint.h>
#include <string.h>

#include "harness.h"
#include "test_sim_util.h"

static struct cudaExtent extent(size_t w, size_t h, size_t d)
{
    return (struct cudaExtent){ .width = w, .height = h, .depth = d };
}

/* Device memory is consumed in 2 MiB pages; allocations up to 1 MiB share
 * them, so the first small one on an empty device takes one page (README.md,
 * "Footprint"). */
#define PAGE (2u << 20)

static size_t free_bytes(void)
{
    size_t f = 0, t = 0;
    ASSERT_OK(cudaMemGetInfo(&f, &t));
    return f;
}

TEST(pitched_allocation_pads_rows_and_copies_2d)
{
    size_t before = free_bytes();
    char *d;
    size_t pitch = 0;
    ASSERT_OK(cudaMallocPitch((void **)&d, &pitch, 100, 8));
    ASSERT(pitch >= 100);
    ASSERT_EQ(pitch % 512, 0);
    ASSERT_EQ(before - free_bytes(), PAGE);          /* pitch * 8 bytes, a shared page */
    char host[8][100], back[8][100];
    for (int r = 0; r < 8; r++)
        memset(host[r], 'a' + r, sizeof host[r]);
    ASSERT_OK(cudaMemcpy2D(d, pitch, host, 100, 100, 8, cudaMemcpyHostToDevice));
    memset(back, 0, sizeof back);
    ASSERT_OK(cudaMemcpy2D(back, 100, d, pitch, 100, 8, cudaMemcpyDeviceToHost));
    ASSERT_EQ(memcmp(back, host, sizeof host), 0);
    ASSERT_OK(cudaFree(d));
    ASSERT_EQ(free_bytes(), before);

    struct cudaPitchedPtr pp;
    ASSERT_OK(cudaMalloc3D(&pp, extent(64, 4, 3)));
    ASSERT(pp.ptr != NULL);
    ASSERT_EQ(pp.xsize, 64);
    ASSERT_EQ(pp.ysize, 4);
    ASSERT_EQ(before - free_bytes(), PAGE);          /* pp.pitch * 12 bytes */
    ASSERT_OK(cudaFree(pp.ptr));
    ASSERT_EQ(free_bytes(), before);
}

TEST(arrays_take_device_memory_until_freed)
{
    size_t before = free_bytes();
    cudaArray_t a, b;
    struct cudaChannelFormatDesc f4 = cudaCreateChannelDesc(32, 32, 32, 32, cudaChannelFormatKindFloat);
    ASSERT_OK(cudaMallocArray(&a, &f4, 256, 16, 0));
    ASSERT_EQ(before - free_bytes(), PAGE);          /* 256 * 16 * 16 bytes */
    struct cudaChannelFormatDesc c1 = cudaCreateChannelDesc(8, 0, 0, 0, cudaChannelFormatKindUnsigned);
    ASSERT_OK(cudaMalloc3DArray(&b, &c1, extent(64, 64, 4), 0));
    ASSERT_EQ(before - free_bytes(), PAGE);          /* + 64 * 64 * 4: the same page */
    ASSERT_OK(cudaFreeArray(a));
    ASSERT_OK(cudaFreeArray(b));
    ASSERT_EQ(free_bytes(), before);
    struct cudaChannelFormatDesc bad = cudaCreateChannelDesc(24, 0, 0, 0, cudaChannelFormatKindUnsigned);
    ASSERT_EQ(cudaMallocArray(&a, &bad, 4, 4, 0), cudaErrorInvalidChannelDescriptor);
    cudaGetLastError();
}

TEST(registered_host_memory_is_pinned_until_unregistered)
{
    static char buf[1 << 16];
    memset(buf, 7, sizeof buf);
    ASSERT_OK(cudaHostRegister(buf, sizeof buf, cudaHostRegisterDefault));
    ASSERT_EQ(cudaHostRegister(buf + 4096, 4096, 0), cudaErrorHostMemoryAlreadyRegistered);
    cudaGetLastError();
    void *dp = NULL;
    ASSERT_OK(cudaHostGetDevicePointer(&dp, buf, 0));
    ASSERT(dp == (void *)buf);
    struct cudaPointerAttributes at;
    ASSERT_OK(cudaPointerGetAttributes(&at, buf));
    ASSERT_EQ(at.type, cudaMemoryTypeHost);
    /* A copy into registered memory is asynchronous: it lands when the stream gets there. */
    char *d;
    ASSERT_OK(cudaMalloc((void **)&d, sizeof buf));
    ASSERT_OK(cudaMemset(d, 9, sizeof buf));
    cudaStream_t s;
    ASSERT_OK(cudaStreamCreate(&s));
    int flag = 0;
    ASSERT_OK(launch_slow_store(s, &flag, 1, 50));
    ASSERT_OK(cudaMemcpyAsync(buf, d, sizeof buf, cudaMemcpyDeviceToHost, s));
    ASSERT_EQ(buf[100], 7);
    ASSERT_OK(cudaStreamSynchronize(s));
    ASSERT_EQ(buf[100], 9);
    ASSERT_OK(cudaHostUnregister(buf));
    ASSERT_EQ(cudaHostUnregister(buf), cudaErrorHostMemoryNotRegistered);
    cudaGetLastError();
    ASSERT_OK(cudaStreamDestroy(s));
    ASSERT_OK(cudaFree(d));
}

TEST(device_flags_are_checked_and_kept)
{
    ASSERT_OK(cudaSetDeviceFlags(cudaDeviceScheduleBlockingSync | cudaDeviceMapHost));
    unsigned f = 0;
    ASSERT_OK(cudaGetDeviceFlags(&f));
    ASSERT_EQ(f & cudaDeviceScheduleMask, cudaDeviceScheduleBlockingSync);
    ASSERT_EQ(cudaSetDeviceFlags(0x100), cudaErrorInvalidValue);
    cudaGetLastError();
}

TEST(created_pool_serves_allocations_and_can_be_the_device_pool)
{
    struct cudaMemPoolProps props = { 0 };
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = 0;
    cudaMemPool_t pool, def, cur;
    ASSERT_OK(cudaMemPoolCreate(&pool, &props));
    ASSERT_OK(cudaDeviceGetDefaultMemPool(&def, 0));
    ASSERT(pool != def);
    ASSERT_OK(cudaDeviceGetMemPool(&cur, 0));
    ASSERT(cur == def);
    unsigned long long thr = 1 << 20;
    ASSERT_OK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &thr));
    size_t before = free_bytes();
    cudaStream_t s;
    ASSERT_OK(cudaStreamCreate(&s));
    void *p;
    ASSERT_OK(cudaMallocFromPoolAsync(&p, 3 << 20, pool, s));
    ASSERT_EQ(before - free_bytes(), 16 * PAGE);     /* a pool's 32 MiB chunk */
    ASSERT_OK(cudaMemsetAsync(p, 1, 3 << 20, s));
    ASSERT_OK(cudaFreeAsync(p, s));
    ASSERT_OK(cudaStreamSynchronize(s));
    ASSERT_EQ(free_bytes(), before);
    ASSERT_OK(cudaDeviceSetMemPool(0, pool));
    ASSERT_OK(cudaDeviceGetMemPool(&cur, 0));
    ASSERT(cur == pool);
    ASSERT_OK(cudaMemPoolDestroy(pool));
    ASSERT_OK(cudaDeviceGetMemPool(&cur, 0));
    ASSERT(cur == def);
    ASSERT_EQ(cudaMemPoolDestroy(def), cudaErrorInvalidValue);
    cudaGetLastError();
    ASSERT_OK(cudaStreamDestroy(s));
}

TEST(managed_hints_are_ordered_and_need_managed_memory)
{
    char *m, *d;
    ASSERT_OK(cudaMallocManaged((void **)&m, 1 << 20, cudaMemAttachGlobal));
    ASSERT_OK(cudaMalloc((void **)&d, 1 << 20));
    cudaStream_t s;
    ASSERT_OK(cudaStreamCreate(&s));
    struct cudaMemLocation dev0 = { .type = cudaMemLocationTypeDevice, .id = 0 };
    ASSERT_OK(cudaStreamAttachMemAsync(s, m, 0, cudaMemAttachSingle));
    ASSERT_OK(cudaMemPrefetchAsync(m, 1 << 20, dev0, 0, s));
    ASSERT_EQ(cudaMemPrefetchAsync(d, 1 << 20, dev0, 0, s), cudaErrorInvalidValue);
    cudaGetLastError();
    ASSERT_OK(cudaStreamSynchronize(s));
    ASSERT_OK(cudaStreamDestroy(s));
    ASSERT_OK(cudaFree(m));
    ASSERT_OK(cudaFree(d));
}

TEST_MAIN()
