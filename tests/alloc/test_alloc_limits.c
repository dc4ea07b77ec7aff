/* tests/alloc/test_alloc_limits.c - what bounds the cache: out of memory
 * (release the cache and retry, wait for pending frees, then fail and
 * count), sizes too large to round, the memory fraction, the garbage
 * collection threshold, emptying the cache, the cache off, and
 * configuration keys.
 *
 * Linked with the allocator sources and the in-memory fake recorder
 * (trace_fake.c), as every test_alloc*.c. Each test runs in its own process
 * and sets VRAMTRACE_CONF / SIMCUDA_* before its first CUDA call. */
#include <cuda_runtime_api.h>
#include <errno.h>
#include <stdlib.h>

#include "alloc_internal.h"
#include "allocator.h"
#include "harness.h"
#include "alloc_test_util.h"
#include "simcuda.h"
#include "trace_fake.h"
#include "vramtrace.h"

/* ---- OOM, limits, configuration ------------------------------------------ */

TEST(oom_releases_cache_and_retries)
{
    simcuda_require("expects the simulated device's capacity (SIMCUDA_MEM)");
    setenv("SIMCUDA_MEM", "64M", 1);
    void *p[12];
    for (int i = 0; i < 12; i++)        /* 3 x 20 MiB segments */
        ASSERT((p[i] = vt_malloc(5 * MiB, 0, 0)));
    for (int i = 0; i < 12; i++)
        vt_free(p[i], 0, 0, 0);
    ASSERT_EQ(stats(0).reserved_bytes[VT_STAT_ALL].current, 60 * MiB);
    void *big = vt_malloc(40 * MiB, 0, 0);   /* fits only once the cache is gone */
    ASSERT(big);
    vt_stats s = stats(0);
    ASSERT_GE(s.num_alloc_retries, 1);
    ASSERT_EQ(s.num_ooms, 0);
    ASSERT_EQ(s.num_backend_frees, 2);   /* just enough released: 2 x 20 MiB */
    ASSERT_EQ(s.reserved_bytes[VT_STAT_ALL].current, 60 * MiB);
    CHECK_INVARIANTS();
}

TEST(oom_waits_for_pending_frees_before_failing)
{
    simcuda_require("expects the simulated device's capacity (SIMCUDA_MEM)");
    setenv("SIMCUDA_MEM", "64M", 1);
    cudaStream_t A = new_stream();
    void *p = vt_malloc(40 * MiB, 0, 0);
    ASSERT(p);
    ASSERT_EQ(vt_record_stream(p, A), 0);
    struct late_write w = { p, 4096 };
    ASSERT_OK(cudaLaunchHostFunc(A, late_writer, &w));
    vt_free(p, 0, 0, 0);                       /* pending for 50 ms */
    void *q = vt_malloc(50 * MiB, 0, 0);       /* needs p's memory back */
    ASSERT(q);
    vt_stats s = stats(0);
    ASSERT_GE(s.num_sync_all, 1);
    ASSERT_EQ(s.num_ooms, 0);
    CHECK_INVARIANTS();
}

TEST(oom_fails_with_memory_allocation_and_is_counted)
{
    simcuda_require("expects the simulated device's capacity (SIMCUDA_MEM)");
    setenv("SIMCUDA_MEM", "64M", 1);
    void *keep = vt_malloc(30 * MiB, 0, 0);
    ASSERT(keep);
    void *p = (void *)1;
    ASSERT_EQ(vt__alloc_malloc(0, 40 * MiB, 0, &p), cudaErrorMemoryAllocation);
    ASSERT_PTR_EQ(p, NULL);
    ASSERT_PTR_EQ(vt_malloc(40 * MiB, 0, 0), NULL);
    vt_stats s = stats(0);
    ASSERT_EQ(s.num_ooms, 2);
    ASSERT_EQ(fake_trace_count(VT_EV_OOM), 2);
    ASSERT_EQ(fake_oom_calls(), 2);
    vt__event ev;
    ASSERT(fake_trace_last(VT_EV_OOM, &ev));
    ASSERT_EQ(ev.req_size, 40 * MiB);
    ASSERT_EQ(ev.aux2, 30 * MiB);
    CHECK_INVARIANTS();
    ASSERT(vt_malloc(20 * MiB, 0, 0));   /* still usable */
}

/* Sizes near SIZE_MAX must fail as cudaMalloc does (out of memory), never
 * wrap around in the rounding to a tiny block that is then handed out. */
static void huge_sizes_fail(void)
{
    static const uint64_t sizes[] = {
        UINT64_MAX, UINT64_MAX - 1, UINT64_MAX - 511, UINT64_MAX - (2 * MiB) + 1,
        UINT64_MAX - (20 * MiB), 1ull << 63, (1ull << 63) + 1, (uint64_t)INT64_MAX,
    };
    void *keep = vt_malloc(4096, 0, 0);   /* a free block exists to be misused */
    ASSERT(keep);
    vt_free(keep, 0, 0, 0);
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        void *p = (void *)1;
        ASSERT_MSG(vt__alloc_malloc(0, (size_t)sizes[i], 0, &p) == cudaErrorMemoryAllocation,
                   "size %#llx did not fail", (unsigned long long)sizes[i]);
        ASSERT_PTR_EQ(p, NULL);
    }
    ASSERT_PTR_EQ(vt_malloc(INT64_MAX, 0, 0), NULL);
    ASSERT_PTR_EQ(vt_malloc(-1, 0, 0), NULL);
    vt_stats s = stats(0);
    ASSERT_EQ(s.allocation[VT_STAT_ALL].current, 0);
    ASSERT_EQ(s.num_ooms, sizeof sizes / sizeof *sizes + 1);
    CHECK_INVARIANTS();
    ASSERT(vt_malloc(4096, 0, 0));   /* still usable */
}

TEST(huge_sizes_fail_with_memory_allocation_without_wrapping)
{
    huge_sizes_fail();
}

TEST(huge_sizes_fail_with_roundup_power2_divisions)
{
    setenv("VRAMTRACE_CONF", "roundup_power2_divisions:4", 1);
    huge_sizes_fail();
}

TEST(huge_sizes_fail_with_cache_off)
{
    setenv("VRAMTRACE_CONF", "cache:0", 1);
    huge_sizes_fail();
}

TEST(memory_fraction_caps_reserved_bytes)
{
    simcuda_require("expects the simulated device's capacity (SIMCUDA_MEM)");
    setenv("SIMCUDA_MEM", "64M", 1);
    ASSERT_EQ(vt_set_memory_fraction(0.25, 0), 0);   /* 16 MiB */
    ASSERT_EQ(vt_set_memory_fraction(1.5, 0), -EINVAL);
    void *a = vt_malloc(MiB, 0, 0), *b = vt_malloc(10 * MiB, 0, 0);
    ASSERT(a && b);
    ASSERT_PTR_EQ(vt_malloc(10 * MiB, 0, 0), NULL);   /* 2 + 10 + 10 > 16 */
    vt_stats s = stats(0);
    ASSERT_EQ(s.num_ooms, 1);
    ASSERT_LE(s.reserved_bytes[VT_STAT_ALL].peak, 16 * MiB);
    ASSERT_EQ(s.num_backend_allocs, 2);   /* the device was never asked */
}

/* Under a memory fraction, cudaMemGetInfo promises no more than the cap
 * lets the program allocate. */
TEST(mem_free_keeps_to_the_memory_fraction)
{
    simcuda_require("expects the simulated device's capacity (SIMCUDA_MEM)");
    setenv("VRAMTRACE_CONF", "per_process_memory_fraction:0.25", 1);   /* 1 GiB of 4 */
    void *a, *b, *c;
    ASSERT_OK(vt__alloc_malloc(0, 512 * MiB, VT_NO_STREAM, &a));
    size_t dev_free = 0, total = 0;
    ASSERT_OK(cudaMemGetInfo(&dev_free, &total));
    ASSERT_GT(dev_free, 3 * 1024 * MiB);
    uint64_t promised = vt__alloc_mem_free(0, dev_free);
    ASSERT_EQ(promised, 512 * MiB);
    ASSERT_OK(vt__alloc_malloc(0, promised, VT_NO_STREAM, &b));
    ASSERT_EQ(vt__alloc_mem_free(0, dev_free - promised), 0);
    ASSERT_EQ(vt__alloc_malloc(0, 2 * MiB, VT_NO_STREAM, &c), cudaErrorMemoryAllocation);
    vt_free(a, 0, 0, 0);   /* fenced on the legacy stream: still counted as free */
    ASSERT_EQ(vt__alloc_mem_free(0, dev_free - promised), 512 * MiB);
    ASSERT_OK(vt__alloc_malloc(0, 512 * MiB, VT_NO_STREAM, &c));
}

TEST(memory_fraction_from_config)
{
    simcuda_require("expects the simulated device's capacity (SIMCUDA_MEM)");
    setenv("SIMCUDA_MEM", "64M", 1);
    setenv("VRAMTRACE_CONF", "per_process_memory_fraction:0.5", 1);
    ASSERT(vt_malloc(30 * MiB, 0, 0));
    ASSERT_PTR_EQ(vt_malloc(4 * MiB, 0, 0), NULL);   /* +20 MiB > 32 MiB */
    ASSERT(vt_malloc(512 * KiB, 0, 0));             /* +2 MiB fits */
}

TEST(gc_threshold_releases_cold_segments_before_the_cap)
{
    simcuda_require("expects the simulated device's capacity (SIMCUDA_MEM)");
    setenv("SIMCUDA_MEM", "100M", 1);
    setenv("VRAMTRACE_CONF", "garbage_collection_threshold:0.5", 1);
    void *p[4];
    for (int i = 0; i < 4; i++)
        ASSERT((p[i] = vt_malloc(12 * MiB, 0, 0)));
    for (int i = 0; i < 4; i++)
        vt_free(p[i], 0, 0, 0);
    ASSERT_EQ(stats(0).reserved_bytes[VT_STAT_ALL].current, 48 * MiB);
    void *q = vt_malloc(14 * MiB, 0, 0);   /* 48 + 14 > 50: gc first */
    ASSERT(q);
    vt_stats s = stats(0);
    ASSERT_LE(s.reserved_bytes[VT_STAT_ALL].current, 50 * MiB);
    ASSERT_GE(s.num_backend_frees, 1);
    ASSERT_EQ(s.num_alloc_retries, 0);
    CHECK_INVARIANTS();
}

TEST(empty_cache_returns_every_free_segment)
{
    void *keep = vt_malloc(4 * KiB, 0, 0);
    void *a = vt_malloc(30 * MiB, 0, 0), *b = vt_malloc(3 * MiB, 0, 0);
    void *c = vt_malloc(8 * KiB, 0, 0);
    vt_free(a, 0, 0, 0);
    vt_free(b, 0, 0, 0);
    vt_free(c, 0, 0, 0);
    uint64_t in_use = sim().bytes_in_use;
    ASSERT_EQ(vt_empty_cache(0), 0);
    vt_stats s = stats(0);
    ASSERT_EQ(s.reserved_bytes[VT_STAT_ALL].current, 2 * MiB);   /* keep's segment */
    ASSERT_EQ(s.num_backend_frees, 2);
    ASSERT_EQ(sim().bytes_in_use, in_use - 48 * MiB);   /* 30 MiB, 6 x 3 MiB */
    vt_free(keep, 0, 0, 0);
    ASSERT_EQ(vt_empty_cache(-1), 0);
    ASSERT_EQ(stats(0).reserved_bytes[VT_STAT_ALL].current, 0);
    CHECK_INVARIANTS();
}

TEST(cache_off_sends_every_call_to_the_device)
{
    setenv("VRAMTRACE_CONF", "cache:0", 1);
    uint64_t a0 = sim().mem_alloc_calls, f0 = sim().mem_free_calls;
    for (int i = 0; i < 10; i++) {
        void *p = vt_malloc(1000, 0, 0);
        ASSERT(p);
        ASSERT(vt__alloc_owns(p));
        vt_free(p, 1000, 0, 0);
    }
    ASSERT_EQ(sim().mem_alloc_calls - a0, 10);
    ASSERT_EQ(sim().mem_free_calls - f0, 10);
    vt_stats s = stats(0);
    ASSERT_EQ(s.num_backend_allocs, 10);
    ASSERT_EQ(s.reserved_bytes[VT_STAT_ALL].current, 0);
    ASSERT_EQ(s.allocated_bytes[VT_STAT_ALL].allocated, 10000);
    ASSERT_EQ(fake_trace_count(VT_EV_SEGMENT_ALLOC), 10);
    ASSERT_EQ(fake_trace_count(VT_EV_SEGMENT_FREE), 10);
    CHECK_INVARIANTS();
}

TEST(unknown_config_key_prints_one_line_and_carries_on)
{
    setenv("VRAMTRACE_CONF", "bogus_key:1,max_split_size_mb:64", 1);
    capture_begin();
    void *p = vt_malloc(4096, 0, 0);
    char *err = capture_end();
    ASSERT(p);
    ASSERT_STR_CONTAINS(err, "bogus_key");
    ASSERT_EQ(count_lines(err), 1);
    vt_free(p, 0, 0, 0);
    CHECK_INVARIANTS();
}

TEST_MAIN()
