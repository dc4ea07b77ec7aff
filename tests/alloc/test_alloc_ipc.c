/* tests/alloc/test_alloc_ipc.c - the IPC-safe mode (alloc/alloc_ipc.c): a
 * cudaMalloc block starts a device allocation of its own when the program
 * may export it, reuse by about the same size, the detection by imported
 * symbol, and an export inside a segment reported.
 *
 * This program must not reference cudaIpcGetMemHandle itself: the auto
 * mode would see it. ipc_user.c (IPC_USER_LIB) does. */
#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "alloc_test_util.h"

static void *no_stream_malloc(size_t n)
{
    void *p = NULL;
    ASSERT_OK(vt__alloc_malloc(0, n, VT_NO_STREAM, &p));
    return p;
}

/* A plain cudaFree, then a device synchronization as the hooks see it: the
 * free's fence is recorded and completed, the block is free. */
static void no_stream_free(void *p)
{
    ASSERT_EQ(vt__alloc_free(p, 0, VT_FREE_UNKNOWN_STREAM), 0);
    vt__alloc_sync_begin(true);
    ASSERT_OK(cudaDeviceSynchronize());
    vt__alloc_sync_end();
}

/* What a legacy IPC handle of p exports: the device allocation holding it. */
static void device_range(void *p, CUdeviceptr *base, size_t *size)
{
    ASSERT_OK(cudaFree(NULL));   /* a current context: the driver call needs one */
    ASSERT_EQ(cuMemGetAddressRange(base, size, (CUdeviceptr)(uintptr_t)p), CUDA_SUCCESS);
}

static bool starts_its_allocation(void *p, size_t want_size)
{
    CUdeviceptr base;
    size_t size;
    device_range(p, &base, &size);
    return base == (CUdeviceptr)(uintptr_t)p && size == want_size;
}

TEST(ipc_safe_blocks_start_their_own_allocation_and_are_reused_by_similar_sizes)
{
    setenv("VRAMTRACE_CONF", "ipc_safe:1", 1);
    void *a = no_stream_malloc(1000), *b = no_stream_malloc(8192), *c = no_stream_malloc(3000);
    ASSERT(starts_its_allocation(a, 1024));
    ASSERT(starts_its_allocation(b, 8192));
    ASSERT(starts_its_allocation(c, 3072));
    uint64_t allocs = sim().allocs;
    no_stream_free(b);
    void *b2 = no_stream_malloc(7680);             /* 1/16 smaller: the same block */
    ASSERT_PTR_EQ(b2, b);
    ASSERT_EQ(sim().allocs, allocs);
    no_stream_free(b2);
    void *d = no_stream_malloc(4096);              /* half: a device allocation of its own */
    ASSERT_PTR_NE(d, b);
    ASSERT(starts_its_allocation(d, 4096));
    ASSERT_EQ(sim().allocs, allocs + 1);
    /* stream-ordered memory is not legacy-exportable: it still shares */
    cudaStream_t s = new_stream();
    void *x = vt_malloc(1000, 0, s), *y = vt_malloc(1000, 0, s);
    ASSERT(x && y);
    CUdeviceptr base;
    size_t size;
    device_range(y, &base, &size);
    ASSERT(base != (CUdeviceptr)(uintptr_t)y);
    vt_free(x, 1000, 0, s);
    vt_free(y, 1000, 0, s);
    CHECK_INVARIANTS();
    no_stream_free(a);
    no_stream_free(c);
    no_stream_free(d);
    ASSERT_OK(cudaStreamSynchronize(s));
    CHECK_INVARIANTS();
}

TEST(ipc_safe_blocks_go_back_to_the_device_when_memory_runs_out)
{
    setenv("VRAMTRACE_CONF", "ipc_safe:1", 1);
    setenv("SIMCUDA_MEM", "64M", 1);
    void *p[6];
    for (int i = 0; i < 6; i++)
        p[i] = no_stream_malloc(10 * MiB);
    for (int i = 0; i < 6; i++)
        no_stream_free(p[i]);
    /* 60 MiB cached in 10 MiB blocks; 40 MiB fits only once they go back */
    void *big = no_stream_malloc(40 * MiB);
    ASSERT(starts_its_allocation(big, 40 * MiB));
    no_stream_free(big);
    CHECK_INVARIANTS();
}

TEST(auto_mode_turns_on_when_a_loaded_library_imports_the_export_call)
{
    void *a = no_stream_malloc(1000), *b = no_stream_malloc(1000);
    CUdeviceptr base;
    size_t size;
    device_range(b, &base, &size);
    ASSERT(base != (CUdeviceptr)(uintptr_t)b);     /* nothing exports yet: shared */
    void *lib = dlopen(IPC_USER_LIB, RTLD_NOW);
    ASSERT(lib != NULL);
    vt__alloc_ipc_loads_changed();                 /* what the dlopen hook does */
    void *c = no_stream_malloc(1000);
    ASSERT(starts_its_allocation(c, 1024));
    no_stream_free(a);
    no_stream_free(b);
    no_stream_free(c);
    CHECK_INVARIANTS();
}

TEST(export_inside_a_segment_is_reported_and_turns_auto_on)
{
    void *a = no_stream_malloc(1000), *b = no_stream_malloc(1000);
    capture_begin();
    vt__alloc_ipc_exporting(a);                    /* at the start: exported right */
    char *quiet = strdup(capture_end());
    ASSERT_STR_EQ(quiet, "");
    free(quiet);
    capture_begin();
    vt__alloc_ipc_exporting(b);
    char *err = capture_end();
    ASSERT_STR_CONTAINS(err, "1024 bytes into a cached segment");
    ASSERT_STR_CONTAINS(err, "ipc_safe:1");
    ASSERT_STR_CONTAINS(err, "later allocations are ipc-safe");
    ASSERT_EQ(strchr(err, '\n'), err + strlen(err) - 1);   /* one line */
    void *c = no_stream_malloc(1000);
    ASSERT(starts_its_allocation(c, 1024));
    no_stream_free(a);
    no_stream_free(b);
    no_stream_free(c);
}

/* Legacy IPC refuses VMM memory: an expandable segment's block cannot be
 * exported at all; said, and later cudaMalloc blocks are plain segments. */
TEST(export_from_an_expandable_segment_is_reported)
{
    setenv("VRAMTRACE_CONF", "expandable_segments:1", 1);
    void *a = no_stream_malloc(1000);
    capture_begin();
    vt__alloc_ipc_exporting(a);
    char *err = capture_end();
    ASSERT_STR_CONTAINS(err, "expandable segment");
    ASSERT_STR_CONTAINS(err, "later allocations are ipc-safe");
    void *c = no_stream_malloc(3 * MiB);
    ASSERT(starts_its_allocation(c, 3 * MiB));
    int legacy = 0;
    ASSERT_EQ(cuPointerGetAttribute(&legacy, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE,
                                    (CUdeviceptr)(uintptr_t)c), CUDA_SUCCESS);
    ASSERT_EQ(legacy, 1);
    no_stream_free(a);
    no_stream_free(c);
    CHECK_INVARIANTS();
}

TEST(ipc_safe_off_reports_but_keeps_sharing_segments)
{
    setenv("VRAMTRACE_CONF", "ipc_safe:0", 1);
    void *a = no_stream_malloc(1000), *b = no_stream_malloc(1000);
    capture_begin();
    vt__alloc_ipc_exporting(b);
    char *err = capture_end();
    ASSERT_STR_CONTAINS(err, "1024 bytes into a cached segment");
    ASSERT(strstr(err, "later allocations") == NULL);
    void *c = no_stream_malloc(1000);
    CUdeviceptr base;
    size_t size;
    device_range(c, &base, &size);
    ASSERT(base != (CUdeviceptr)(uintptr_t)c);
    no_stream_free(a);
    no_stream_free(b);
    no_stream_free(c);
}

TEST_MAIN()
