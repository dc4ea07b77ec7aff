/* tests/alloc/test_alloc_streams.c - blocks and streams: a freed block
 * waits (on a fence) until the streams that used it reach the free, and
 * destroyed streams give their segments back.
 *
 * Linked with the allocator sources and the in-memory fake recorder
 * (trace_fake.c), as every test_alloc*.c. Each test runs in its own process
 * and sets VRAMTRACE_CONF / SIMCUDA_* before its first CUDA call. */
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <time.h>

#include "alloc_internal.h"
#include "allocator.h"
#include "harness.h"
#include "alloc_test_util.h"
#include "simcuda.h"
#include "trace_fake.h"
#include "vramtrace.h"

/* ---- streams ------------------------------------------------------------ */

TEST(record_stream_keeps_block_from_other_stream_until_its_work_is_done)
{
    simcuda_require("a host function writes device memory in place of a kernel");
    const size_t n = 256 * KiB;
    cudaStream_t A = new_stream(), B = new_stream();
    unsigned char *p = vt_malloc((ssize_t)n, 0, B);
    ASSERT(p);
    ASSERT_EQ(vt_record_stream(p, A), 0);
    struct late_write w = { p, n };
    ASSERT_OK(cudaLaunchHostFunc(A, late_writer, &w));   /* writes 50 ms from now */
    vt_free(p, (ssize_t)n, 0, B);
    vt_stats s = stats(0);
    ASSERT_EQ(s.active[VT_STAT_ALL].current, 1);      /* pending, still active */
    ASSERT_EQ(s.allocation[VT_STAT_ALL].current, 0);
    /* Meanwhile B allocates: it must not get the block A still writes to. */
    unsigned char *q = vt_malloc((ssize_t)n, 0, B);
    ASSERT(q);
    ASSERT(q + n <= p || q >= p + n);
    ASSERT_OK(cudaMemsetAsync(q, 0x11, n, B));
    ASSERT_OK(cudaStreamSynchronize(B));
    CHECK_INVARIANTS();
    ASSERT_OK(cudaStreamSynchronize(A));
    for (size_t i = 0; i < n; i += 4096)
        ASSERT_EQ(q[i], 0x11);
    /* A's work is done: the next allocation polls the event and reuses p. */
    unsigned char *r = vt_malloc((ssize_t)n, 0, B);
    ASSERT_PTR_EQ(r, p);
    ASSERT_EQ(fake_trace_count(VT_EV_STREAM_USE), 1);
    ASSERT_EQ(fake_trace_count(VT_EV_FREE_COMPLETED), 1);
    CHECK_INVARIANTS();
}

TEST(free_on_another_stream_waits_for_that_stream)
{
    simcuda_require("a host function writes device memory in place of a kernel");
    const size_t n = 64 * KiB;
    cudaStream_t A = new_stream(), B = new_stream();
    unsigned char *p = vt_malloc((ssize_t)n, 0, B);
    struct late_write w = { p, n };
    ASSERT_OK(cudaLaunchHostFunc(A, late_writer, &w));
    vt_free(p, (ssize_t)n, 0, A);   /* ordered on A, not on B */
    unsigned char *q = vt_malloc((ssize_t)n, 0, B);
    ASSERT_PTR_NE(q, p);
    ASSERT_OK(cudaStreamSynchronize(A));
    ASSERT_PTR_EQ(vt_malloc((ssize_t)n, 0, B), p);
    CHECK_INVARIANTS();
}

/* cudaMalloc's memory may be used on any stream at once: it never takes a
 * block freed in stream order (legacy stream included) until that stream
 * has reached the free. An allocation on the freeing stream itself does. */
TEST(no_stream_allocation_waits_until_the_freeing_stream_reached_the_free)
{
    simcuda_require("a host function writes device memory in place of a kernel");
    const size_t n = 64 * KiB;
    unsigned char *p;
    ASSERT_OK(vt__alloc_malloc(0, n, 0, (void **)&p));     /* legacy stream */
    struct late_write w = { p, n };
    ASSERT_OK(cudaLaunchHostFunc(0, late_writer, &w));     /* still uses p */
    vt_free(p, (ssize_t)n, 0, 0);                           /* cudaFreeAsync(p, 0) */
    void *q;
    ASSERT_OK(vt__alloc_malloc(0, n, VT_NO_STREAM, &q));
    ASSERT_PTR_NE(q, p);
    ASSERT_PTR_EQ(vt_malloc((ssize_t)n, 0, 0), p);          /* same stream: at once */
    vt_free(p, (ssize_t)n, 0, 0);
    ASSERT_OK(cudaStreamSynchronize(0));
    /* and a no-stream block freed on a stream comes back after that stream */
    unsigned char *r;
    ASSERT_OK(vt__alloc_malloc(0, n, VT_NO_STREAM, (void **)&r));
    struct late_write w2 = { r, n };
    ASSERT_OK(cudaLaunchHostFunc(0, late_writer, &w2));
    ASSERT_EQ(vt__alloc_free(r, 0, VT_FREE_ON_STREAM), 0);
    void *t;
    ASSERT_OK(vt__alloc_malloc(0, n, VT_NO_STREAM, &t));
    ASSERT_PTR_NE(t, r);
    ASSERT_OK(cudaStreamSynchronize(0));
    void *u;
    ASSERT_OK(vt__alloc_malloc(0, n, VT_NO_STREAM, &u));
    ASSERT_PTR_EQ(u, r);
    /* events name such blocks' stream as the legacy one */
    vt__event ev;
    ASSERT(fake_trace_last(VT_EV_ALLOC, &ev));
    ASSERT_EQ(ev.addr, (uint64_t)(uintptr_t)u);
    ASSERT_EQ(ev.stream, 0);
    CHECK_INVARIANTS();
}

static void *ptds_thread(void *arg)
{
    void **out = arg;
    out[0] = vt_malloc(8192, 0, cudaStreamPerThread);
    return NULL;
}

TEST(per_thread_default_stream_is_a_stream_per_thread)
{
    void *p = vt_malloc(8192, 0, cudaStreamPerThread);
    vt_free(p, 8192, 0, cudaStreamPerThread);
    void *other[1];
    pthread_t t;
    pthread_create(&t, NULL, ptds_thread, other);
    pthread_join(t, NULL);
    ASSERT_PTR_NE(other[0], p);   /* another thread's 0x2 is another stream */
    ASSERT_PTR_EQ(vt_malloc(8192, 0, cudaStreamPerThread), p);
    ASSERT_PTR_NE(vt_malloc(8192, 0, 0), other[0]);   /* nor the legacy one */
    CHECK_INVARIANTS();
}

TEST(unknown_stream_frees_share_one_fence_per_stream)
{
    cudaStream_t s[3];
    for (int i = 0; i < 3; i++)
        s[i] = new_stream();
    void *p[100];
    for (int i = 0; i < 100; i++)
        ASSERT_OK(vt__alloc_malloc(0, 4096, (uint64_t)(uintptr_t)s[i % 3], &p[i]));
    uint64_t rec0 = sim().event_records;
    for (int i = 0; i < 100; i++)
        ASSERT_EQ(vt__alloc_free(p[i], 0, VT_FREE_UNKNOWN_STREAM), 0);
    ASSERT_EQ(stats(0).active[VT_STAT_ALL].current, 100);
    void *x;
    ASSERT_OK(vt__alloc_malloc(0, 4096, 0, &x));   /* records the batch fence */
    ASSERT_OK(vt__alloc_malloc(0, 4096, 0, &x));   /* nothing new to fence */
    /* legacy stream + 3 announced streams, once for the whole burst */
    ASSERT_EQ(stats(0).num_fence_events, 4);
    ASSERT_EQ(sim().event_records - rec0, 4);
    ASSERT_OK(cudaDeviceSynchronize());
    void *y;
    ASSERT_OK(vt__alloc_malloc(0, 4096, (uint64_t)(uintptr_t)s[0], &y));
    ASSERT_EQ(stats(0).active[VT_STAT_ALL].current, 3);   /* two x and y */
    ASSERT_PTR_EQ(y, p[0]);
    ASSERT_EQ(stats(0).num_fence_events, 4);
    CHECK_INVARIANTS();
}

TEST(stream_destroyed_is_no_longer_fenced)
{
    cudaStream_t a = new_stream();
    void *p;
    ASSERT_OK(vt__alloc_malloc(0, 4096, 0, &p));
    vt__alloc_stream_destroyed((uint64_t)(uintptr_t)a);
    ASSERT_OK(cudaStreamDestroy(a));
    ASSERT_EQ(vt__alloc_free(p, 0, VT_FREE_UNKNOWN_STREAM), 0);
    ASSERT_OK(vt__alloc_malloc(0, 4096, 0, &p));
    ASSERT_EQ(stats(0).num_fence_events, 1);   /* legacy only */
}

/* A block of n bytes allocated now (the one just freed, in these tests) is
 * not written by work queued before its free: filled and read back after the
 * device is idle, it holds what was written, and the simulator saw no stream
 * use of freed memory. */
static void assert_next_block_is_not_written_late(size_t n)
{
    unsigned char *q = vt_malloc((ssize_t)n, 0, 0);
    ASSERT(q);
    ASSERT_OK(cudaMemset(q, 0x11, n));
    ASSERT_OK(cudaDeviceSynchronize());
    for (size_t i = 0; i < n; i += 4096)
        ASSERT_EQ(q[i], 0x11);
    ASSERT_EQ(sim().stale_stream_uses, 0);
    CHECK_INVARIANTS();
}

/* A stream the block was used on (vt_record_stream) is destroyed while its
 * work still runs, then the block is freed: the cache must neither touch the
 * dead handle (undefined behaviour on a real driver; the sim counts it) nor
 * hand the block out before that work is done. */
TEST(record_stream_on_a_destroyed_stream_still_waits_for_its_work)
{
    simcuda_require("a host function writes device memory in place of a kernel");
    const size_t n = 256 * KiB;
    cudaStream_t A = new_stream();
    unsigned char *p = vt_malloc((ssize_t)n, 0, 0);
    ASSERT(p);
    ASSERT_EQ(vt_record_stream(p, A), 0);
    struct late_write w = { p, n };
    ASSERT_OK(cudaLaunchHostFunc(A, late_writer, &w));   /* writes 50 ms from now */
    vt__alloc_stream_destroyed((uint64_t)(uintptr_t)A);   /* what the hooks do */
    ASSERT_OK(cudaStreamDestroy(A));
    vt_free(p, (ssize_t)n, 0, 0);
    assert_next_block_is_not_written_late(n);
}

/* Frees of unknown stream wait in a batch for the next fence; a stream
 * destroyed meanwhile must still be part of it. */
TEST(unknown_stream_free_before_a_stream_is_destroyed_waits_for_it)
{
    simcuda_require("a host function writes device memory in place of a kernel");
    const size_t n = 1 * MiB;
    cudaStream_t A = new_stream();
    unsigned char *keep = vt_malloc((ssize_t)n, 0, 0);   /* p is the segment's */
    unsigned char *p = vt_malloc((ssize_t)n, 0, 0);      /* only other block */
    ASSERT(keep && p);
    struct late_write w = { p, n };
    ASSERT_OK(cudaLaunchHostFunc(A, late_writer, &w));   /* A is non-blocking */
    ASSERT_EQ(vt__alloc_free(p, 0, VT_FREE_UNKNOWN_STREAM), 0);
    vt__alloc_stream_destroyed((uint64_t)(uintptr_t)A);
    ASSERT_OK(cudaStreamDestroy(A));
    ASSERT(vt_malloc(512, 0, 0));   /* a poll: the batch's fence is recorded by now */
    struct timespec ts = { 0, 10 * 1000 * 1000 };
    nanosleep(&ts, NULL);           /* the legacy stream's part of it is done */
    assert_next_block_is_not_written_late(n);
}

/* ---- destroyed streams give their segments back ---------------------- */

/* A program that creates a stream per request: 200 streams, each allocating
 * and freeing a few small blocks and a large one, some freed on the legacy
 * stream (a fenced cross-stream free). The cache must stay at a few
 * segments, without ever taking the out-of-memory path (200 x 22 MiB would
 * pass the simulated 4 GiB), and the segments must really go back to the
 * device. */
TEST(destroyed_streams_give_their_segments_back)
{
    void *keep = vt_malloc(4 * KiB, 0, 0);   /* the legacy stream's segment stays */
    ASSERT(keep);
    const int64_t base = 2 * MiB;
    simcuda_counters c0 = sim();
    vt_stats s0 = stats(0);
    for (int i = 0; i < 200; i++) {
        cudaStream_t S = new_stream();
        void *p[4] = { vt_malloc(4 * KiB, 0, S), vt_malloc(64 * KiB, 0, S),
                       vt_malloc(512, 0, S), vt_malloc(3 * MiB, 0, S) };
        for (int k = 0; k < 4; k++)
            ASSERT(p[k]);
        ASSERT_OK(cudaMemsetAsync(p[3], 0x22, 3 * MiB, S));
        for (int k = 0; k < 4; k++)
            vt_free(p[k], 0, 0, i % 4 == 3 && k == 1 ? 0 : S);
        CHECK_INVARIANTS();
        destroy_stream(S);
        CHECK_INVARIANTS();
        ASSERT_LE(stats(0).reserved_bytes[VT_STAT_ALL].current, base + 2 * MiB);
    }
    ASSERT_OK(cudaDeviceSynchronize());
    vt_free(keep, 0, 0, 0);
    keep = vt_malloc(4 * KiB, 0, 0);   /* a poll: the last fenced free is done */
    CHECK_INVARIANTS();
    vt_stats s = stats(0);
    simcuda_counters c = sim();
    ASSERT_EQ(s.reserved_bytes[VT_STAT_ALL].current, base);
    ASSERT_LE(s.reserved_bytes[VT_STAT_ALL].peak, base + 2 * MiB + 20 * MiB);
    ASSERT_EQ(s.num_backend_allocs - s0.num_backend_allocs, 400);   /* 2 per stream */
    ASSERT_EQ(s.num_backend_frees - s0.num_backend_frees, 400);
    ASSERT_EQ(c.frees - c0.frees, 400);
    ASSERT_EQ(c.bytes_in_use, c0.bytes_in_use);
    ASSERT_EQ(s.num_alloc_retries, 0);
    ASSERT_EQ(s.num_ooms, 0);
    ASSERT_EQ(c.stale_stream_uses, 0);
    ASSERT_EQ(fake_trace_count(VT_EV_SEGMENT_FREE), 400);
}

/* A block still allocated when its stream is destroyed: its segment stays
 * (with the other blocks), nothing is carved from it any more, and it goes
 * back to the device when the block is freed, here on the dead stream's
 * handle, as vt_free callers (PyTorch's pluggable allocator) pass it. The
 * destroy waits for the stream's work on the block first. */
TEST(block_live_when_its_stream_is_destroyed_returns_its_segment_at_its_free)
{
    simcuda_require("a host function writes device memory in place of a kernel");
    const size_t n = 256 * KiB;
    cudaStream_t S = new_stream(), T = new_stream();
    unsigned char *p = vt_malloc((ssize_t)n, 0, S);
    void *q = vt_malloc(8 * KiB, 0, S);
    ASSERT(p && q);
    vt_free(q, 0, 0, S);   /* a free block in the segment, before p's end */
    struct late_write w = { p, n };
    ASSERT_OK(cudaLaunchHostFunc(S, late_writer, &w));   /* writes 50 ms from now */
    simcuda_counters c0 = sim();
    destroy_stream(S);
    ASSERT_EQ(p[0], 0x5A);   /* the destroy waited for S's work */
    CHECK_INVARIANTS();
    vt_stats s = stats(0);
    ASSERT_EQ(s.reserved_bytes[VT_STAT_ALL].current, 2 * MiB);   /* p keeps it */
    ASSERT_EQ(s.inactive_split[VT_STAT_ALL].current, 1);        /* its free rest */
    /* Nothing is carved from the dead segment: not for T, not for legacy. */
    unsigned char *r = vt_malloc(8 * KiB, 0, T), *l = vt_malloc(8 * KiB, 0, 0);
    ASSERT(r && l);
    ASSERT(r >= p + 2 * MiB || r + 8 * KiB <= p);
    ASSERT(l >= p + 2 * MiB || l + 8 * KiB <= p);
    CHECK_INVARIANTS();
    uint64_t frees0 = stats(0).num_backend_frees;
    vt_free(p, (ssize_t)n, 0, S);
    CHECK_INVARIANTS();
    s = stats(0);
    ASSERT_EQ(s.num_backend_frees - frees0, 1);
    ASSERT_EQ(s.reserved_bytes[VT_STAT_ALL].current, 4 * MiB);   /* r's and l's */
    ASSERT_EQ(s.inactive_split[VT_STAT_ALL].current, 2);        /* theirs only */
    ASSERT_EQ(sim().frees - c0.frees, 1);
    ASSERT(!vt__alloc_owns(p));
    ASSERT_EQ(sim().stale_stream_uses, 0);
}

/* Blocks of a dead segment freed in other ways: on a live stream with work
 * still queued (the free waits for it), and by a plain cudaFree (unknown
 * stream: the batch fence). The segment goes back only once both are done,
 * and the free blocks merge in between (split stats checked by the
 * invariant checker). */
TEST(dead_segment_goes_back_after_its_fenced_frees_complete)
{
    simcuda_require("a host function writes device memory in place of a kernel");
    const size_t n = 3 * MiB;
    cudaStream_t S = new_stream(), T = new_stream();
    unsigned char *a = vt_malloc((ssize_t)n, 0, S), *b = vt_malloc((ssize_t)n, 0, S);
    unsigned char *c = vt_malloc((ssize_t)n, 0, S);
    ASSERT(a && b && c);
    ASSERT_EQ(stats(0).segment[VT_STAT_ALL].current, 1);   /* one 18 MiB segment */
    destroy_stream(S);
    CHECK_INVARIANTS();
    vt_free(c, 0, 0, S);   /* merges with the free rest */
    CHECK_INVARIANTS();
    struct late_write w = { a, n };
    ASSERT_OK(cudaLaunchHostFunc(T, late_writer, &w));
    vt_free(a, 0, 0, T);   /* T still writes a: pending */
    ASSERT_EQ(vt__alloc_free(b, 0, VT_FREE_UNKNOWN_STREAM), 0);
    CHECK_INVARIANTS();
    uint64_t frees0 = stats(0).num_backend_frees;
    void *x = vt_malloc(4 * KiB, 0, 0);   /* polls; T's fence is not done */
    ASSERT(x);
    CHECK_INVARIANTS();
    ASSERT_EQ(stats(0).num_backend_frees, frees0);
    ASSERT_EQ(stats(0).reserved_bytes[VT_STAT_ALL].current, 18 * MiB + 2 * MiB);
    ASSERT_OK(cudaDeviceSynchronize());
    ASSERT_EQ(a[n - 1], 0x5A);
    void *y = vt_malloc(4 * KiB, 0, 0);   /* polls: both fences are done */
    ASSERT(y);
    CHECK_INVARIANTS();
    vt_stats s = stats(0);
    ASSERT_EQ(s.num_backend_frees - frees0, 1);
    ASSERT_EQ(s.reserved_bytes[VT_STAT_ALL].current, 2 * MiB);
    ASSERT_EQ(s.active[VT_STAT_ALL].current, 2);
    ASSERT_EQ(sim().stale_stream_uses, 0);
}

/* vt_empty_cache and the device reset keep their meaning with dead
 * segments around: a dead segment with a live block survives empty_cache,
 * and a reset frees it. */
TEST(empty_cache_and_reset_with_a_dead_segment)
{
    cudaStream_t S = new_stream();
    void *p = vt_malloc(4 * KiB, 0, S);
    ASSERT(p);
    destroy_stream(S);
    ASSERT_EQ(vt_empty_cache(0), 0);
    ASSERT_EQ(stats(0).reserved_bytes[VT_STAT_ALL].current, 2 * MiB);
    CHECK_INVARIANTS();
    uint64_t in_use = sim().bytes_in_use;
    vt__alloc_device_reset(0);
    CHECK_INVARIANTS();
    ASSERT_EQ(stats(0).reserved_bytes[VT_STAT_ALL].current, 0);
    ASSERT_EQ(sim().bytes_in_use, in_use - 2 * MiB);
}

TEST_MAIN()
