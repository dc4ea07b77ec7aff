/*
 * tests/alloc/test_alloc_expandable.c - expandable_segments:1 on the
 * simulated device's VMM (cuMemCreate, cuMemMap, 2 MiB granularity).
 */
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#include "alloc_internal.h"
#include "allocator.h"
#include "harness.h"
#include "alloc_test_util.h"
#include "simcuda.h"
#include "trace_fake.h"
#include "vramtrace.h"

static uint64_t reserved(void)
{
    return (uint64_t)stats(0).reserved_bytes[VT_STAT_ALL].current;
}

/* Expandable segments on a simulated device of `mem` ("256M", "4G": its
 * SIMCUDA_MEM). Each test runs in a process of its own, and both are read
 * at the allocator's first call: set them before it. */
static void expandable_on_a_device_of(const char *mem)
{
    setenv("SIMCUDA_MEM", mem, 1);
    setenv("VRAMTRACE_CONF", "expandable_segments:1", 1);
}

/* Expandable segments on a 256 MiB device, then blocks of sizes sa, sb and
 * sc in a row on the default stream: whether all three were allocated;
 * *base is the device's bytes in use before them. */
static bool three_blocks_in_one_range(uint64_t *base, char **a, ssize_t sa, char **b, ssize_t sb,
                                      char **c, ssize_t sc)
{
    expandable_on_a_device_of("256M");
    *base = sim().bytes_in_use;
    *a = vt_malloc(sa, 0, 0);
    *b = vt_malloc(sb, 0, 0);
    *c = vt_malloc(sc, 0, 0);
    return *a && *b && *c;
}

TEST(growth_maps_chunks_at_the_end_of_one_range)
{
    expandable_on_a_device_of("256M");
    simcuda_counters before = sim();
    char *p[4];
    for (int i = 0; i < 4; i++) {
        ASSERT((p[i] = vt_malloc(5 * MiB, 0, 0)));
        /* every byte is mapped and writable */
        ASSERT_OK(cudaMemset(p[i], 0x5a, 5 * MiB));
    }
    for (int i = 1; i < 4; i++)
        ASSERT_PTR_EQ(p[i], p[i - 1] + 5 * MiB);   /* one range, contiguous */
    vt_stats s = stats(0);
    ASSERT_EQ(s.segment[VT_STAT_ALL].current, 1);
    /* 6 MiB mapped for the first (2 MiB chunks), then what each next lacks:
     * 20 MiB in all, where fixed segments would hold 20 MiB per 4 too but
     * reserve all of it at the first request */
    ASSERT_EQ(s.reserved_bytes[VT_STAT_ALL].current, 20 * MiB);
    simcuda_counters after = sim();
    ASSERT_EQ(after.vmm_create_calls - before.vmm_create_calls, 10);   /* 20 MiB / 2 MiB */
    ASSERT_EQ(after.mem_alloc_calls, before.mem_alloc_calls);           /* no cuMemAlloc */
    ASSERT_EQ(after.bytes_in_use - before.bytes_in_use, 20 * MiB);
    ASSERT_OK(cudaDeviceSynchronize());
    CHECK_INVARIANTS();
}

TEST(each_stream_and_pool_has_its_own_range)
{
    expandable_on_a_device_of("256M");
    cudaStream_t A = new_stream();
    char *a = vt_malloc(5 * MiB, 0, 0), *b = vt_malloc(5 * MiB, 0, A);
    char *small = vt_malloc(4 * KiB, 0, 0);
    ASSERT(a && b && small);
    vt_stats s = stats(0);
    ASSERT_EQ(s.segment[VT_STAT_ALL].current, 3);
    ASSERT_EQ(s.segment[VT_STAT_SMALL].current, 1);
    ASSERT_EQ(s.reserved_bytes[VT_STAT_SMALL].current, 2 * MiB);   /* one chunk */
    ASSERT_EQ(s.reserved_bytes[VT_STAT_LARGE].current, 12 * MiB);
    char *a2 = vt_malloc(5 * MiB, 0, 0);
    ASSERT_PTR_EQ(a2, a + 5 * MiB);   /* the default stream's range grew */
    CHECK_INVARIANTS();
}

TEST(empty_cache_unmaps_the_whole_free_chunks_at_the_end)
{
    char *a, *b, *c;
    uint64_t base;
    ASSERT(three_blocks_in_one_range(&base, &a, 5 * MiB, &b, 5 * MiB, &c, 5 * MiB));
    ASSERT_EQ(reserved(), 16 * MiB);    /* 6, +4, +6 */
    vt_free(c, 0, 0, 0);
    vt_free(b, 0, 0, 0);                 /* free from 5 MiB to 16 MiB */
    ASSERT_EQ(reserved(), 16 * MiB);     /* cached */
    /* what cudaMemGetInfo counts as the cache's to give back: those chunks */
    ASSERT_EQ(vt__alloc_cached_free_bytes(0), 10 * MiB);
    ASSERT_EQ(vt_empty_cache(0), 0);
    /* the chunks from 6 MiB on are wholly free: unmapped; 5..6 MiB is in
     * the chunk a uses */
    ASSERT_EQ(reserved(), 6 * MiB);
    ASSERT_EQ(sim().bytes_in_use - base, 6 * MiB);
    CHECK_INVARIANTS();
    /* the range grows again from there, contiguous */
    char *d = vt_malloc(5 * MiB, 0, 0);
    ASSERT_PTR_EQ(d, (char *)a + 5 * MiB);
    ASSERT_EQ(reserved(), 10 * MiB);
    ASSERT_OK(cudaMemset(d, 1, 5 * MiB));
    vt_free(d, 0, 0, 0);
    vt_free(a, 0, 0, 0);
    ASSERT_EQ(vt_empty_cache(0), 0);     /* wholly free: the range goes back */
    vt_stats s = stats(0);
    ASSERT_EQ(s.reserved_bytes[VT_STAT_ALL].current, 0);
    ASSERT_EQ(s.segment[VT_STAT_ALL].current, 0);
    ASSERT_EQ(sim().bytes_in_use, base);
    CHECK_INVARIANTS();
}

/* A free block between two live ones: its whole chunks go back to the
 * device (a hole), the live blocks stay usable, the snapshot shows the two
 * mapped runs as two segments, and a later request maps the hole again. */
TEST(empty_cache_unmaps_whole_free_chunks_in_the_middle_and_growth_maps_them_again)
{
    char *a, *b, *c;
    uint64_t base;
    ASSERT(three_blocks_in_one_range(&base, &a, 4 * MiB, &b, 10 * MiB, &c, 4 * MiB));
    ASSERT_PTR_EQ(b, a + 4 * MiB);
    ASSERT_PTR_EQ(c, b + 10 * MiB);
    ASSERT_EQ(reserved(), 18 * MiB);
    vt_free(b, 0, 0, 0);
    ASSERT_EQ(vt__alloc_cached_free_bytes(0), 10 * MiB);   /* the middle's chunks */
    size_t frees = fake_trace_count(VT_EV_SEGMENT_FREE);
    ASSERT_EQ(vt_empty_cache(0), 0);
    ASSERT_EQ(reserved(), 8 * MiB);
    ASSERT_EQ(sim().bytes_in_use - base, 8 * MiB);
    ASSERT_EQ(vt__alloc_cached_free_bytes(0), 0);
    ASSERT_EQ(stats(0).segment[VT_STAT_ALL].current, 1);     /* still one range */
    /* traced: the mapping that held the hole is freed (c's mapping stays) */
    ASSERT_EQ(fake_trace_count(VT_EV_SEGMENT_FREE) - frees, 1);
    CHECK_INVARIANTS();
    ASSERT_OK(cudaMemset(a, 1, 4 * MiB));
    ASSERT_OK(cudaMemset(c, 2, 4 * MiB));
    vt__snapshot_data *snap = fake_snapshot();
    ASSERT(snap);
    ASSERT_EQ(snap->nsegments, 2);   /* a's run and c's run */
    ASSERT_EQ(snap->segments[0].size + snap->segments[1].size, 8 * MiB);
    for (size_t i = 0; i < snap->nblocks; i++)
        ASSERT(snap->blocks[i].addr < (uint64_t)(uintptr_t)b
               || snap->blocks[i].addr >= (uint64_t)(uintptr_t)c);
    fake_snapshot_free(snap);
    /* 6 MiB: the smallest unmapped space that fits is the hole, not the
     * end of the range: its first 6 MiB are mapped again */
    char *d = vt_malloc(6 * MiB, 0, 0);
    ASSERT_PTR_EQ(d, b);
    ASSERT_EQ(reserved(), 14 * MiB);
    ASSERT_OK(cudaMemset(d, 3, 6 * MiB));
    /* 6 MiB more: the 4 MiB left of the hole is too small: the end grows */
    char *e = vt_malloc(6 * MiB, 0, 0);
    ASSERT_PTR_EQ(e, c + 4 * MiB);
    ASSERT_EQ(reserved(), 20 * MiB);
    /* 4 MiB: the rest of the hole */
    char *f = vt_malloc(4 * MiB, 0, 0);
    ASSERT_PTR_EQ(f, d + 6 * MiB);
    ASSERT_EQ(reserved(), 24 * MiB);
    ASSERT_OK(cudaMemset(f, 4, 4 * MiB));
    ASSERT_EQ(sim().bytes_in_use - base, 24 * MiB);
    CHECK_INVARIANTS();
    /* a hole, then a request that spans the free block before it, the hole
     * and the free block after it: mapped, merged, one block */
    vt_free(d, 0, 0, 0);
    vt_free(f, 0, 0, 0);
    vt_free(c, 0, 0, 0);
    ASSERT_EQ(vt_empty_cache(0), 0);    /* 4..18 MiB: unmapped */
    ASSERT_EQ(reserved(), 10 * MiB);
    CHECK_INVARIANTS();
    char *g = vt_malloc(14 * MiB, 0, 0);
    ASSERT_PTR_EQ(g, b);
    ASSERT_EQ(reserved(), 24 * MiB);
    ASSERT_OK(cudaMemset(g, 5, 14 * MiB));
    CHECK_INVARIANTS();
    vt_free(g, 0, 0, 0);
    ASSERT_EQ(vt_empty_cache(0), 0);    /* holes between e and a: then all back */
    vt_free(a, 0, 0, 0);
    vt_free(e, 0, 0, 0);
    CHECK_INVARIANTS();
    ASSERT_EQ(vt_empty_cache(0), 0);
    ASSERT_EQ(reserved(), 0);
    ASSERT_EQ(stats(0).segment[VT_STAT_ALL].current, 0);
    ASSERT_EQ(sim().bytes_in_use, base);
    ASSERT_EQ(stats(0).inactive_split_bytes[VT_STAT_ALL].current, 0);
    CHECK_INVARIANTS();
}

/* 40 blocks of 5 MiB, one of every four kept: with fixed segments (four per
 * 20 MiB segment) every segment stays pinned and the device is full; a
 * 12 MiB request needs a new segment. In one range the freed neighbours
 * coalesce into 15 MiB holes that 12 MiB requests fit. Live: 50 + 108 MiB
 * of 200, which plain cudaMalloc fits too. */
static int pinned_pattern(void)
{
    setenv("SIMCUDA_MEM", "200M", 1);
    void *p[40], *q[9];
    for (int i = 0; i < 40; i++)
        if (!(p[i] = vt_malloc(5 * MiB, 0, 0)))
            return -1;
    for (int i = 0; i < 40; i++)
        if (i % 4 != 1)
            vt_free(p[i], 0, 0, 0);
    for (int i = 0; i < 9; i++)
        if (!(q[i] = vt_malloc(12 * MiB, 0, 0)))
            return i;
    return 9;
}

TEST(pinned_fragmentation_runs_out_of_memory_with_fixed_segments)
{
    simcuda_require("expects the simulated device's capacity (SIMCUDA_MEM)");
    ASSERT_EQ(pinned_pattern(), 0);
    vt_stats s = stats(0);
    ASSERT_EQ(s.num_ooms, 1);
    ASSERT_EQ(s.reserved_bytes[VT_STAT_ALL].current, 200 * MiB);
    CHECK_INVARIANTS();
}

TEST(pinned_fragmentation_fits_with_expandable_segments)
{
    setenv("VRAMTRACE_CONF", "expandable_segments:1", 1);
    ASSERT_EQ(pinned_pattern(), 9);
    vt_stats s = stats(0);
    ASSERT_EQ(s.num_ooms, 0);
    ASSERT_EQ(s.reserved_bytes[VT_STAT_ALL].current, 200 * MiB);
    ASSERT_EQ(sim().bytes_in_use, 200 * MiB);
    CHECK_INVARIANTS();
}

TEST(out_of_memory_shrinks_the_range_before_failing)
{
    simcuda_require("expects the simulated device's capacity (SIMCUDA_MEM)");
    expandable_on_a_device_of("64M");
    cudaStream_t A = new_stream();
    void *keep = vt_malloc(4 * MiB, 0, 0), *big = vt_malloc(40 * MiB, 0, 0);
    ASSERT(keep && big);
    vt_free(big, 0, 0, 0);               /* 40 MiB cached at the end of the range */
    ASSERT_EQ(reserved(), 44 * MiB);
    /* another stream's range needs 30 MiB: only once the free tail is unmapped */
    void *other = vt_malloc(30 * MiB, 0, A);
    ASSERT(other);
    vt_stats s = stats(0);
    ASSERT_EQ(s.num_ooms, 0);
    ASSERT_GE(s.num_alloc_retries, 1);
    ASSERT_EQ(s.reserved_bytes[VT_STAT_ALL].current, 34 * MiB);
    ASSERT_PTR_EQ(vt_malloc(40 * MiB, 0, 0), NULL);   /* 34 + 40 > 64: a real OOM */
    ASSERT_EQ(stats(0).num_ooms, 1);
    CHECK_INVARIANTS();
}

TEST(random_sequences_keep_invariants_with_expandable_segments)
{
    expandable_on_a_device_of("512M");
    srand(7);
    void *live[64] = { 0 };
    for (int step = 0; step < 4000; step++) {
        int i = rand() % 64;
        if (live[i]) {
            vt_free(live[i], 0, 0, 0);
            live[i] = NULL;
        } else {
            size_t sizes[] = { 512, 3 * KiB, 700 * KiB, 2 * MiB + 5, 5 * MiB, 13 * MiB };
            live[i] = vt_malloc((ssize_t)sizes[rand() % 6], 0, 0);
        }
        if (step % 500 == 499) {
            ASSERT_EQ(vt_empty_cache(0), 0);
            CHECK_INVARIANTS();
            ASSERT_EQ(sim().bytes_in_use, reserved());
        }
    }
    for (int i = 0; i < 64; i++)
        if (live[i])
            vt_free(live[i], 0, 0, 0);
    ASSERT_EQ(vt_empty_cache(0), 0);
    ASSERT_EQ(reserved(), 0);
    ASSERT_EQ(sim().bytes_in_use, 0);
    CHECK_INVARIANTS();
}

/* Four threads, each on a stream of its own (its own range) and one on the
 * legacy stream, allocating, freeing and emptying the cache at random:
 * growth and unmapping of one range race the others' (and empty_cache
 * shrinks every range). */
struct churn {
    cudaStream_t stream;
    unsigned seed;
    int failed;
    char first[160];   /* the first failure: which call, its size and error */
};

static void *churn_thread(void *arg)
{
    struct churn *c = arg;
    void *live[32] = { 0 };
    /* empty_cache four times a thread in either build (ThreadSanitizer
     * makes every map and unmap of the simulated device ten times slower) */
    enum { STEPS = HARNESS_STRESS(3000, 1000), EMPTY_EVERY = HARNESS_STRESS(700, 230) };
    for (int step = 0; step < STEPS; step++) {
        int i = (int)(rand_r(&c->seed) % 32);
        if (live[i]) {
            vt_free(live[i], 0, 0, c->stream);
            live[i] = NULL;
        } else {
            size_t sizes[] = { 512, 70 * KiB, 1 * MiB, 3 * MiB, 9 * MiB };
            size_t n = sizes[rand_r(&c->seed) % 5];
            cudaError_t e = cudaSuccess;
            if (!(live[i] = vt_malloc((ssize_t)n, 0, c->stream))) {
                if (!c->failed++)
                    snprintf(c->first, sizeof c->first, "step %d: vt_malloc(%zu) failed", step, n);
            } else if ((e = cudaMemsetAsync(live[i], 1, n, c->stream)) != cudaSuccess) {
                if (!c->failed++)   /* every byte handed out is mapped */
                    snprintf(c->first, sizeof c->first, "step %d: cudaMemsetAsync(%p, %zu) = %d",
                             step, live[i], n, (int)e);
            }
        }
        if (step % EMPTY_EVERY == EMPTY_EVERY - 1)
            vt_empty_cache(0);
    }
    for (int i = 0; i < 32; i++)
        if (live[i])
            vt_free(live[i], 0, 0, c->stream);
    return NULL;
}

TEST(threads_growing_and_shrinking_ranges_keep_the_heap_consistent)
{
    expandable_on_a_device_of("4G");
    struct churn c[5];
    pthread_t th[5];
    for (int t = 0; t < 5; t++) {
        c[t] = (struct churn){ .stream = 0, .seed = (unsigned)t + 1 };
        if (t) {
            ASSERT_OK(cudaStreamCreateWithFlags(&c[t].stream, cudaStreamNonBlocking));
            vt__alloc_stream_created(0, (uint64_t)(uintptr_t)c[t].stream);
        }
    }
    for (int t = 0; t < 5; t++)
        ASSERT_EQ(pthread_create(&th[t], NULL, churn_thread, &c[t]), 0);
    for (int t = 0; t < 5; t++)
        ASSERT_EQ(pthread_join(th[t], NULL), 0);
    for (int t = 0; t < 5; t++)
        ASSERT_MSG(c[t].failed == 0, "thread %d (stream %p): %d failed, the first at %s", t,
                   (void *)c[t].stream, c[t].failed, c[t].first);
    ASSERT_OK(cudaDeviceSynchronize());
    CHECK_INVARIANTS();
    ASSERT_EQ(vt_empty_cache(0), 0);
    ASSERT_EQ(reserved(), 0);
    ASSERT_EQ(sim().bytes_in_use, 0);
    CHECK_INVARIANTS();
}

/* cuMemUnmap does not wait for work still queued on the memory (an H200:
 * tests/gpucheck's fact unmap_while_queued; the simulator likewise): a
 * chunk given back while a memset of a block freed on the range's stream
 * still waits behind a slow host function would fault. */
static void CUDART_CB hold_stream_100ms(void *arg)
{
    (void)arg;
    usleep(100 * 1000);
}

/* A block of stream A freed while a memset of it is still queued there,
 * next to one still allocated (keep_other) or alone in its range. */
static cudaStream_t freed_with_work_queued(bool keep_other, char **other)
{
    expandable_on_a_device_of("256M");
    cudaStream_t A = new_stream();
    char *a = vt_malloc(8 * MiB, 0, A);
    *other = vt_malloc(2 * MiB, 0, A);
    ASSERT(a && *other);
    if (!keep_other) {
        vt_free(*other, 0, 0, A);
        *other = NULL;
    }
    ASSERT_OK(cudaLaunchHostFunc(A, hold_stream_100ms, NULL));
    ASSERT_OK(cudaMemsetAsync(a, 1, 8 * MiB, A));
    vt_free(a, 0, 0, A);
    return A;
}

TEST(a_range_waits_for_its_stream_before_it_unmaps_free_chunks)
{
    char *other;
    cudaStream_t A = freed_with_work_queued(true, &other);
    uint64_t r0 = reserved();
    simcuda_counters c0 = sim();
    ASSERT_EQ(vt_empty_cache(0), 0);
    ASSERT_EQ(reserved(), r0 - 8 * MiB);   /* the freed block's chunks went back */
    simcuda_counters c1 = sim();
    ASSERT_GE(c1.stream_syncs - c0.stream_syncs, 1);
    ASSERT_EQ(c1.illegal_addresses, 0);    /* the memset ran before the unmap */
    ASSERT_OK(cudaStreamSynchronize(A));
    vt_free(other, 0, 0, A);
    CHECK_INVARIANTS();
}

TEST(a_wholly_free_range_waits_for_its_stream_before_it_goes_back)
{
    char *other;
    cudaStream_t A = freed_with_work_queued(false, &other);
    ASSERT_EQ(vt_empty_cache(0), 0);
    ASSERT_EQ(reserved(), 0);
    ASSERT_EQ(sim().illegal_addresses, 0);
    ASSERT_OK(cudaStreamSynchronize(A));
    CHECK_INVARIANTS();
}

/* A range of another thread's per-thread default stream, which cannot be
 * named from the thread that empties the cache: the whole device is waited
 * for (a wait on the legacy stream alone would let the memset fault). */
static void *freed_on_my_per_thread_stream(void *keep)
{
    char *a = vt_malloc(8 * MiB, 0, cudaStreamPerThread);
    *(void **)keep = vt_malloc(2 * MiB, 0, cudaStreamPerThread);
    if (!a || !*(void **)keep || cudaLaunchHostFunc(cudaStreamPerThread, hold_stream_100ms, NULL)
        || cudaMemsetAsync(a, 1, 8 * MiB, cudaStreamPerThread))
        return NULL;
    vt_free(a, 0, 0, cudaStreamPerThread);
    return keep;
}

TEST(a_range_of_another_threads_per_thread_stream_waits_for_the_device)
{
    expandable_on_a_device_of("256M");
    void *keep = NULL, *ok = NULL;
    pthread_t t;
    ASSERT_EQ(pthread_create(&t, NULL, freed_on_my_per_thread_stream, &keep), 0);
    ASSERT_EQ(pthread_join(t, &ok), 0);
    ASSERT(ok != NULL);
    uint64_t r0 = reserved();
    simcuda_counters c0 = sim();
    ASSERT_EQ(vt_empty_cache(0), 0);
    ASSERT_EQ(reserved(), r0 - 8 * MiB);
    simcuda_counters c1 = sim();
    ASSERT_GE(c1.device_syncs - c0.device_syncs, 1);
    ASSERT_EQ(c1.illegal_addresses, 0);
    ASSERT_OK(cudaDeviceSynchronize());
    CHECK_INVARIANTS();
}

/* Memory of no stream (cudaMalloc's): every free of it is fenced on every
 * stream, so its range unmaps once the fence completed, without a wait of
 * its own (and without a device-wide one). */
TEST(a_range_of_memory_of_no_stream_unmaps_once_its_frees_are_fenced)
{
    expandable_on_a_device_of("256M");
    cudaStream_t A = new_stream();
    void *p = NULL, *q = NULL;
    ASSERT_OK(vt__alloc_malloc(0, 8 * MiB, VT_NO_STREAM, &p));
    ASSERT_OK(vt__alloc_malloc(0, 2 * MiB, VT_NO_STREAM, &q));
    ASSERT_OK(cudaLaunchHostFunc(A, hold_stream_100ms, NULL));
    ASSERT_OK(cudaMemsetAsync(p, 1, 8 * MiB, A));
    ASSERT_OK(vt__alloc_free(p, 0, VT_FREE_UNKNOWN_STREAM));   /* cudaFree */
    uint64_t r0 = reserved();
    simcuda_counters c0 = sim();
    ASSERT_EQ(vt_empty_cache(0), 0);   /* waits for the free's fence, then unmaps */
    ASSERT_EQ(reserved(), r0 - 8 * MiB);
    simcuda_counters c1 = sim();
    ASSERT_EQ(c1.device_syncs, c0.device_syncs);
    ASSERT_EQ(c1.stream_syncs, c0.stream_syncs);
    ASSERT_EQ(c1.illegal_addresses, 0);
    ASSERT_OK(cudaStreamSynchronize(A));
    ASSERT_OK(vt__alloc_free(q, 0, VT_FREE_UNKNOWN_STREAM));
    CHECK_INVARIANTS();
}

/* While the range's stream captures into a graph nothing may wait for it
 * (synchronizing a capturing stream invalidates the capture): empty_cache
 * leaves its chunks mapped, and they go back once the capture ended. */
TEST(a_range_keeps_its_chunks_while_its_stream_captures)
{
    expandable_on_a_device_of("256M");
    cudaStream_t A = new_stream();
    char *a = vt_malloc(8 * MiB, 0, A), *b = vt_malloc(2 * MiB, 0, A);
    ASSERT(a && b);
    vt_free(a, 0, 0, A);
    uint64_t r0 = reserved();
    ASSERT_OK(cudaStreamBeginCapture(A, cudaStreamCaptureModeRelaxed));
    ASSERT_EQ(vt_empty_cache(0), 0);
    ASSERT_EQ(reserved(), r0);
    cudaGraph_t g = NULL;
    ASSERT_OK(cudaStreamEndCapture(A, &g));   /* not invalidated */
    ASSERT_OK(cudaGraphDestroy(g));
    ASSERT_EQ(vt_empty_cache(0), 0);
    ASSERT_EQ(reserved(), r0 - 8 * MiB);
    vt_free(b, 0, 0, A);
    CHECK_INVARIANTS();
}

/* A wholly free range found during a capture: it is taken out of the cache
 * (the books count it given back) but stays mapped until a release after
 * the capture. */
TEST(a_wholly_free_range_found_during_a_capture_goes_back_after_it)
{
    expandable_on_a_device_of("256M");
    cudaStream_t A = new_stream();
    uint64_t base = sim().bytes_in_use;
    char *a = vt_malloc(8 * MiB, 0, A);
    ASSERT(a);
    vt_free(a, 0, 0, A);
    ASSERT_OK(cudaStreamBeginCapture(A, cudaStreamCaptureModeRelaxed));
    ASSERT_EQ(vt_empty_cache(0), 0);
    ASSERT_EQ(sim().bytes_in_use, base + 8 * MiB);   /* still mapped */
    cudaGraph_t g = NULL;
    ASSERT_OK(cudaStreamEndCapture(A, &g));
    ASSERT_OK(cudaGraphDestroy(g));
    ASSERT_EQ(vt_empty_cache(0), 0);
    ASSERT_EQ(sim().bytes_in_use, base);
    ASSERT_EQ(reserved(), 0);
    CHECK_INVARIANTS();
}

TEST_MAIN()
