/* tests/alloc/test_alloc.c - the caching allocator on the simulated device.
 *
 * Linked with the allocator sources and the in-memory fake recorder
 * (trace_fake.c), so the tests see internal state: the invariant checker,
 * the recorded events, the state provider. Each test runs in its own process
 * and sets VRAMTRACE_CONF / SIMCUDA_* before its first CUDA call. Long
 * because the allocator has many behaviours: one short test each. */
#include <cuda_runtime_api.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

#include "alloc_internal.h"
#include "allocator.h"
#include "harness.h"
#include "alloc_test_util.h"
#include "simcuda.h"
#include "trace_fake.h"
#include "vramtrace.h"

static int count_lines(const char *s)
{
    int n = 0;
    for (; *s; s++)
        n += *s == '\n';
    return n;
}

/* ---- sizes and pools ----------------------------------------------------- */

TEST(sizes_round_up_to_512)
{
    void *a = vt_malloc(1, 0, 0), *b = vt_malloc(513, 0, 0);
    ASSERT(a && b);
    vt_stats s = stats(0);
    ASSERT_EQ(s.allocated_bytes[VT_STAT_ALL].current, 512 + 1024);
    ASSERT_EQ(s.requested_bytes[VT_STAT_ALL].current, 1 + 513);
    ASSERT_EQ((char *)b - (char *)a, 512);   /* carved back to back */
    CHECK_INVARIANTS();
    vt_free(a, 1, 0, 0);
    vt_free(b, 513, 0, 0);
    CHECK_INVARIANTS();
}

TEST(small_requests_share_a_2mib_segment)
{
    void *p[64];
    for (int i = 0; i < 64; i++)   /* 1.5 MiB */
        ASSERT((p[i] = vt_malloc(24 * KiB, 0, 0)));
    vt_stats s = stats(0);
    ASSERT_EQ(s.segment[VT_STAT_SMALL].current, 1);
    ASSERT_EQ(s.reserved_bytes[VT_STAT_SMALL].current, 2 * MiB);
    ASSERT_EQ(s.segment[VT_STAT_LARGE].current, 0);
    ASSERT_EQ(s.num_backend_allocs, 1);
    void *big = vt_malloc(1 * MiB, 0, 0);   /* <= 1 MiB is still small */
    ASSERT(big);
    ASSERT_EQ(stats(0).segment[VT_STAT_SMALL].current, 2);
    CHECK_INVARIANTS();
}

TEST(large_requests_use_20mib_segments_and_huge_ones_round_to_2mib)
{
    void *a = vt_malloc(5 * MiB, 0, 0);
    ASSERT(a);
    vt_stats s = stats(0);
    ASSERT_EQ(s.reserved_bytes[VT_STAT_LARGE].current, 20 * MiB);
    void *b = vt_malloc(16 * MiB + 5, 0, 0);   /* 15 MiB left is too small */
    ASSERT(b);
    s = stats(0);
    ASSERT_EQ(s.reserved_bytes[VT_STAT_LARGE].current, 20 * MiB + 18 * MiB);
    ASSERT_EQ(s.segment[VT_STAT_LARGE].current, 2);
    CHECK_INVARIANTS();
}

/* A segment of up to 20 MiB holds a whole number of mid-size requests: no
 * tail that the same requests could never use. */
TEST(mid_size_segments_hold_a_whole_number_of_requests)
{
    const uint64_t sizes[] = { 7 * MiB, 3 * MiB, 9 * MiB, MiB + 512, 6 * MiB + 4096 };
    const uint64_t expect[] = { 14 * MiB, 18 * MiB, 18 * MiB, 19 * (MiB + 512),
                                18 * MiB + 3 * 4096 };
    uint64_t before = 0;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        cudaStream_t s = new_stream();   /* a fresh stream: a fresh segment */
        ASSERT(vt_malloc((ssize_t)sizes[i], 0, s));
        uint64_t now = (uint64_t)stats(0).reserved_bytes[VT_STAT_LARGE].current;
        ASSERT_EQ(now - before, expect[i]);
        before = now;
    }
    CHECK_INVARIANTS();
}

/* On a 1 GiB device, at least as many 7 MiB (3 MiB) requests fit as with
 * plain cudaMalloc, which takes whole 2 MiB pages (8 MiB, 4 MiB: 128 and
 * 256 blocks; tests/sim/README.md, "Footprint"): whole-number segments,
 * then exact-size ones when the last shared segment no longer fits. */
static int fill_count(uint64_t size)
{
    int n = 0;
    void *p;
    while (vt__alloc_malloc(0, size, VT_NO_STREAM, &p) == 0)
        n++;
    return n;
}

TEST(device_filled_with_mid_size_requests_fits_as_many_as_plain_cuda_malloc)
{
    simcuda_require("expects the simulated device's capacity (SIMCUDA_MEM)");
    setenv("SIMCUDA_MEM", "1G", 1);
    ASSERT_EQ(fill_count(7 * MiB), 1024 / 7);
    vt_stats s = stats(0);
    ASSERT_EQ(s.num_ooms, 1);
    ASSERT_GE(s.reserved_bytes[VT_STAT_ALL].current, 1022 * (int64_t)MiB);
}

TEST(device_filled_with_3mib_requests_ends_with_exact_size_segments)
{
    simcuda_require("expects the simulated device's capacity (SIMCUDA_MEM)");
    setenv("SIMCUDA_MEM", "1G", 1);
    /* 56 shared segments of 18 MiB (1008 MiB), then exact-size ones of
     * 3 MiB, each taking 4 MiB of the 16 MiB left (2 MiB pages) */
    ASSERT_EQ(fill_count(3 * MiB), 1008 / 3 + 16 / 4);
    vt_stats s = stats(0);
    ASSERT_EQ(s.segment[VT_STAT_LARGE].current, 1008 / 18 + 4);
    ASSERT_EQ(s.reserved_bytes[VT_STAT_ALL].current, (1008 + 4 * 3) * (int64_t)MiB);
}

/* cudaMemGetInfo's "free" counts only what any next allocation can get:
 * allocating exactly that much then succeeds. */
TEST(cached_free_bytes_can_all_be_allocated_at_once)
{
    simcuda_require("expects the simulated device's capacity (SIMCUDA_MEM)");
    setenv("SIMCUDA_MEM", "256M", 1);
    void *p[40];
    int n = 0;
    while (n < 40 && vt__alloc_malloc(0, 7 * MiB, VT_NO_STREAM, &p[n]) == 0)
        n++;
    ASSERT_EQ(n, 36);   /* 256 / 7 */
    /* blocks pair up in 14 MiB segments: empty two of them, half a third */
    ASSERT_EQ(vt__alloc_free(p[0], 0, VT_FREE_UNKNOWN_STREAM), 0);   /* pending: counts */
    ASSERT_EQ(vt__alloc_free(p[1], 0, VT_FREE_UNKNOWN_STREAM), 0);
    vt_free(p[2], 0, 0, 0);
    vt_free(p[3], 0, 0, 0);
    vt_free(p[4], 0, 0, 0);
    size_t dev_free = 0, total = 0;
    ASSERT_OK(cudaMemGetInfo(&dev_free, &total));
    uint64_t cached = vt__alloc_cached_free_bytes(0);
    ASSERT_EQ(cached, 2 * 14 * MiB);
    void *big;
    ASSERT_OK(vt__alloc_malloc(0, dev_free + cached, VT_NO_STREAM, &big));
    CHECK_INVARIANTS();
}

TEST(roundup_power2_divisions_rounds_to_quarter_steps)
{
    setenv("VRAMTRACE_CONF", "roundup_power2_divisions:4", 1);
    void *p = vt_malloc((ssize_t)(MiB + MiB / 10), 0, 0);
    ASSERT(p);
    ASSERT_EQ(stats(0).allocated_bytes[VT_STAT_ALL].current, MiB + MiB / 4);
    CHECK_INVARIANTS();
}

/* ---- reuse, best fit, split, coalesce ----------------------------------- */

TEST(freed_block_is_reused_at_once_on_the_same_stream)
{
    cudaStream_t s = new_stream();
    void *p = vt_malloc(4096, 0, s);
    vt_free(p, 4096, 0, s);
    void *q = vt_malloc(4096, 0, s);
    ASSERT_PTR_EQ(p, q);
    ASSERT_EQ(stats(0).num_backend_allocs, 1);
    CHECK_INVARIANTS();
}

TEST(legacy_stream_handles_0_and_1_are_one_stream)
{
    void *p = vt_malloc(4096, 0, (cudaStream_t)1);
    vt_free(p, 4096, 0, (cudaStream_t)1);
    void *q = vt_malloc(4096, 0, 0);
    ASSERT_PTR_EQ(p, q);
}

TEST(blocks_belong_to_their_stream)
{
    cudaStream_t a = new_stream(), b = new_stream();
    void *p = vt_malloc(4096, 0, a);
    vt_free(p, 4096, 0, a);
    void *q = vt_malloc(4096, 0, b);
    ASSERT_PTR_NE(p, q);
    ASSERT_EQ(stats(0).segment[VT_STAT_SMALL].current, 2);
    CHECK_INVARIANTS();
}

TEST(best_fit_takes_the_smallest_free_block_that_fits)
{
    void *a = vt_malloc(4 * KiB, 0, 0), *s1 = vt_malloc(KiB, 0, 0);
    void *c = vt_malloc(16 * KiB, 0, 0), *s2 = vt_malloc(KiB, 0, 0);
    void *e = vt_malloc(8 * KiB, 0, 0), *s3 = vt_malloc(KiB, 0, 0);
    (void)s1; (void)s2; (void)s3;
    vt_free(c, 0, 0, 0);
    vt_free(a, 0, 0, 0);
    vt_free(e, 0, 0, 0);
    CHECK_INVARIANTS();
    ASSERT_PTR_EQ(vt_malloc(3 * KiB, 0, 0), a);
    ASSERT_PTR_EQ(vt_malloc(6 * KiB, 0, 0), e);
    ASSERT_PTR_EQ(vt_malloc(9 * KiB, 0, 0), c);
    CHECK_INVARIANTS();
}

static uint64_t tie_rng(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static void shuffle(void **v, int n, uint64_t *seed)
{
    for (int i = n - 1; i > 0; i--) {
        int j = (int)(tie_rng(seed) % (uint64_t)(i + 1));
        void *t = v[i];
        v[i] = v[j];
        v[j] = t;
    }
}

static int cmp_ptr(const void *a, const void *b)
{
    uintptr_t x = (uintptr_t)*(void *const *)a, y = (uintptr_t)*(void *const *)b;
    return x < y ? -1 : x > y;
}

/* Equal-size free blocks (one exact class) are taken lowest address first,
 * whatever order they were freed in: not the most recently freed one. */
TEST(equal_size_ties_take_the_lowest_address)
{
    enum { N = 64 };
    void *p[N], *order[N];
    for (int i = 0; i < N; i++) {
        ASSERT((p[i] = vt_malloc(8 * KiB, 0, 0)));
        ASSERT(vt_malloc(512, 0, 0));   /* spacer: keeps the blocks apart */
    }
    /* freed high to low: a LIFO class would hand out p[0] last */
    vt_free(p[1], 0, 0, 0);
    vt_free(p[0], 0, 0, 0);
    vt_free(p[2], 0, 0, 0);
    ASSERT_PTR_EQ(vt_malloc(8 * KiB, 0, 0), p[0]);
    ASSERT_PTR_EQ(vt_malloc(8 * KiB, 0, 0), p[1]);
    ASSERT_PTR_EQ(vt_malloc(8 * KiB - 100, 0, 0), p[2]);   /* rounds to 8 KiB */
    CHECK_INVARIANTS();
    /* many blocks in one class, freed in random order: the class's tree
     * rotates, the answers still come lowest first */
    memcpy(order, p, sizeof p);
    uint64_t seed = 12345;
    for (int round = 0; round < 4; round++) {
        shuffle(order, N, &seed);
        for (int i = 0; i < N; i++) {
            vt_free(order[i], 0, 0, 0);
            if (i % 8 == 7)
                CHECK_INVARIANTS();
        }
        qsort(order, N, sizeof *order, cmp_ptr);
        for (int i = 0; i < N; i++)
            ASSERT_PTR_EQ(vt_malloc(8 * KiB, 0, 0), order[i]);
        CHECK_INVARIANTS();
    }
    /* ties across segments: the lower segment's block first (a stream of
     * its own: fresh segments, each filled by two 1 MiB blocks) */
    cudaStream_t st = new_stream();
    void *q[2];
    for (int i = 0; i < 2; i++) {
        ASSERT((q[i] = vt_malloc(MiB, 0, st)));
        ASSERT(vt_malloc(MiB, 0, st));
    }
    ASSERT_EQ(stats(0).segment[VT_STAT_SMALL].current, 3);
    void *lo = (uintptr_t)q[0] < (uintptr_t)q[1] ? q[0] : q[1];
    void *hi = lo == q[0] ? q[1] : q[0];
    vt_free(hi, 0, 0, st);
    vt_free(lo, 0, 0, st);
    ASSERT_PTR_EQ(vt_malloc(MiB, 0, st), lo);
    vt_free(lo, 0, 0, st);
    vt_free(hi, 0, 0, st);   /* the most recent, higher: still lo first */
    ASSERT_PTR_EQ(vt_malloc(MiB, 0, st), lo);
    ASSERT_PTR_EQ(vt_malloc(MiB, 0, st), hi);
    CHECK_INVARIANTS();
}

/* Above 2 MiB a class spans 1/64 of an octave and holds several sizes: the
 * choice is still the smallest size that fits, then the lowest address,
 * found by lower bound inside the class (blocks of the class too small for
 * the request are skipped, not taken). */
TEST(large_classes_take_the_smallest_size_then_the_lowest_address)
{
    /* 3 MiB .. 3 MiB + 31.5 KiB is one class. Each block is followed by a
     * spacer that tops it up to 5 MiB, so 4 pairs tile a 20 MiB segment
     * exactly and freed blocks never merge. The 20 MiB segments are made
     * first (by 5 MiB blocks, freed): best fit then fills one after the
     * other. */
    enum { N = 32 };
    void *p[N];
    uint64_t sz[N];
    int nfree = 0;
    bool isfree[N];
    uint64_t seed = 777;
    for (int i = 0; i < N; i++)
        ASSERT((p[i] = vt_malloc(5 * MiB, 0, 0)));
    for (int i = 0; i < N; i++)
        vt_free(p[i], 0, 0, 0);
    ASSERT_EQ(stats(0).segment[VT_STAT_LARGE].current, N / 4);
    for (int i = 0; i < N; i++) {
        sz[i] = 3 * MiB + 512 * (tie_rng(&seed) % 8);   /* many equal sizes */
        ASSERT((p[i] = vt_malloc((ssize_t)sz[i], 0, 0)));
        ASSERT(vt_malloc((ssize_t)(5 * MiB - sz[i]), 0, 0));
        isfree[i] = false;
    }
    ASSERT_EQ(stats(0).segment[VT_STAT_LARGE].current, N / 4);
    /* free in random order */
    int idx[N];
    for (int i = 0; i < N; i++)
        idx[i] = i;
    for (int i = N - 1; i > 0; i--) {
        int j = (int)(tie_rng(&seed) % (uint64_t)(i + 1)), t = idx[i];
        idx[i] = idx[j];
        idx[j] = t;
    }
    for (int i = 0; i < N; i++) {
        vt_free(p[idx[i]], 0, 0, 0);
        isfree[idx[i]] = true;
        nfree++;
    }
    CHECK_INVARIANTS();
    /* requests anywhere in the class: each must get the reference answer */
    while (nfree) {
        uint64_t req = 3 * MiB - 4 * KiB + tie_rng(&seed) % (12 * KiB);
        uint64_t want_size = (req + 511) & ~511ull;
        int best = -1;
        for (int i = 0; i < N; i++)
            if (isfree[i] && sz[i] >= want_size
                && (best < 0 || sz[i] < sz[best]
                    || (sz[i] == sz[best] && (uintptr_t)p[i] < (uintptr_t)p[best])))
                best = i;
        if (best < 0)
            continue;   /* nothing left that big: would grow the heap */
        ASSERT_PTR_EQ(vt_malloc((ssize_t)req, 0, 0), p[best]);
        isfree[best] = false;
        nfree--;
    }
    CHECK_INVARIANTS();
    ASSERT_EQ(stats(0).segment[VT_STAT_LARGE].current, N / 4);   /* no growth */
}

/* The index alone, against a brute-force reference: random inserts and
 * removals (coalescing removes arbitrary blocks) over sizes that crowd a few
 * exact and log classes, best fit for random sizes, full structure check. */
TEST(free_index_matches_a_brute_force_reference)
{
    enum { N = 3000 };
    static vt__block blk[N];
    static bool in[N];
    vt__findex fx = { 0 };
    uint64_t seed = 99;
    ASSERT(vt__index_stream(&fx, 7, true));
    ASSERT(vt__index_stream(&fx, 9, true));
    for (int i = 0; i < N; i++) {
        uint64_t r = tie_rng(&seed);
        uint64_t size = r % 3 == 0 ? 4 * KiB + 512 * (r % 4)            /* exact classes */
                      : r % 3 == 1 ? 3 * MiB + 512 * (r % 128)          /* two log classes */
                                   : 512 * (1 + r % 100000);            /* spread out */
        blk[i] = (vt__block){ .addr = (uint64_t)(i + 1) * (64ull << 20) - 512 * (r % 7),
                              .size = size, .stream = (i % 5) ? 7 : 9,
                              .state = VT_B_FREE };
    }
    int nin = 0;
    for (int step = 0; step < 60000; step++) {
        int i = (int)(tie_rng(&seed) % N);
        if (in[i]) {
            vt__index_remove(&fx, &blk[i]);
            nin--;
        } else {
            vt__index_insert(&fx, &blk[i]);
            nin++;
        }
        in[i] = !in[i];
        uint64_t stream = tie_rng(&seed) % 4 ? 7 : 9;
        uint64_t r = tie_rng(&seed);
        uint64_t want = r % 2 ? blk[r % N].size : 512 * (1 + (r >> 8) % 110000);
        const vt__block *ref = NULL;
        if (step % 50 == 0 || step > 59000) {
            for (int k = 0; k < N; k++)
                if (in[k] && blk[k].stream == stream && blk[k].size >= want
                    && (!ref || blk[k].size < ref->size
                        || (blk[k].size == ref->size && blk[k].addr < ref->addr)))
                    ref = &blk[k];
            ASSERT_PTR_EQ(vt__index_best_fit(&fx, stream, want), ref);
        }
        if (step % 1000 == 0)
            ASSERT_EQ(vt__index_check(&fx), nin);
        ASSERT(vt__index_contains(&fx, &blk[i]) == in[i]);
    }
    ASSERT_EQ(vt__index_check(&fx), nin);
    /* the checker sees a broken order */
    int a = -1;
    for (int k = 0; k < N && a < 0; k++)
        if (in[k] && blk[k].size == 4 * KiB)
            a = k;
    ASSERT(a >= 0);
    uint64_t saved = blk[a].addr;
    blk[a].addr = UINT64_MAX;   /* now out of (size, addr) order in its tree */
    int64_t bad = vt__index_check(&fx);
    blk[a].addr = saved;
    bool others = false;   /* out of order only if the class has another block */
    for (int k = 0; k < N; k++)
        others |= k != a && in[k] && blk[k].size == 4 * KiB && blk[k].stream == blk[a].stream;
    if (others)
        ASSERT_EQ(bad, -1);
    ASSERT_EQ(vt__index_check(&fx), nin);
    vt__index_destroy(&fx);
}

TEST(small_pool_splits_any_remainder_of_512_bytes)
{
    void *a = vt_malloc(MiB, 0, 0);
    void *b = vt_malloc(MiB - 512, 0, 0);   /* leaves exactly 512 */
    void *c = vt_malloc(512, 0, 0);
    ASSERT_EQ(stats(0).segment[VT_STAT_SMALL].current, 1);
    ASSERT_EQ((char *)b - (char *)a, (long long)MiB);
    ASSERT_EQ((char *)c - (char *)a, (long long)(2 * MiB - 512));
    CHECK_INVARIANTS();
}

TEST(large_pool_splits_only_remainders_above_1mib)
{
    void *a = vt_malloc(5 * MiB, 0, 0);   /* 20 MiB segment, 15 MiB left: split */
    ASSERT(a);
    vt_stats s = stats(0);
    ASSERT_EQ(s.allocated_bytes[VT_STAT_LARGE].current, 5 * MiB);
    ASSERT_EQ(s.inactive_split_bytes[VT_STAT_LARGE].current, 15 * MiB);
    void *b = vt_malloc(14 * MiB + 512 * KiB, 0, 0);   /* 0.5 MiB left: not split */
    ASSERT_PTR_EQ(b, (char *)a + 5 * MiB);
    s = stats(0);
    ASSERT_EQ(s.allocated_bytes[VT_STAT_LARGE].current, 20 * MiB);
    ASSERT_EQ(s.inactive_split[VT_STAT_LARGE].current, 0);
    ASSERT_EQ(s.segment[VT_STAT_LARGE].current, 1);
    CHECK_INVARIANTS();
}

TEST(max_split_size_keeps_oversize_blocks_whole)
{
    setenv("VRAMTRACE_CONF", "max_split_size_mb:20", 1);
    void *big = vt_malloc(30 * MiB, 0, 0);
    vt_free(big, 0, 0, 0);
    void *mid = vt_malloc(12 * MiB, 0, 0);   /* below the limit: not from the 30 MiB */
    ASSERT_PTR_NE(mid, big);
    void *big2 = vt_malloc(29 * MiB, 0, 0);   /* oversize, little waste: reused whole */
    ASSERT_PTR_EQ(big2, big);
    ASSERT_EQ(stats(0).allocated_bytes[VT_STAT_LARGE].current, 30 * MiB + 12 * MiB);
    CHECK_INVARIANTS();
}

TEST(free_coalesces_with_free_neighbours)
{
    void *a = vt_malloc(64 * KiB, 0, 0), *b = vt_malloc(64 * KiB, 0, 0);
    void *c = vt_malloc(64 * KiB, 0, 0);
    vt_free(a, 0, 0, 0);
    vt_free(c, 0, 0, 0);
    vt_stats s = stats(0);
    ASSERT_EQ(s.inactive_split[VT_STAT_ALL].current, 2);
    vt_free(b, 0, 0, 0);
    s = stats(0);
    ASSERT_EQ(s.inactive_split[VT_STAT_ALL].current, 0);
    ASSERT_EQ(s.inactive_split_bytes[VT_STAT_ALL].current, 0);
    vt__snapshot_data *snap = fake_snapshot();
    ASSERT(snap);
    ASSERT_EQ(snap->nsegments, 1);
    ASSERT_EQ(snap->nblocks, 1);
    ASSERT_EQ(snap->blocks[0].size, 2 * MiB);
    ASSERT_EQ(snap->blocks[0].state, VT_BLOCK_INACTIVE);
    fake_snapshot_free(snap);
    CHECK_INVARIANTS();
}

/* ---- streams ------------------------------------------------------------ */

struct late_write { unsigned char *p; size_t n; };

static void late_writer(void *arg)
{
    struct late_write *w = arg;
    struct timespec ts = { 0, 50 * 1000 * 1000 };
    nanosleep(&ts, NULL);
    memset(w->p, 0x5A, w->n);   /* the kernel on stream A that used the block */
}

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
    vt_event ev;
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

static void destroy_stream(cudaStream_t s)
{
    vt__alloc_stream_destroyed((uint64_t)(uintptr_t)s);   /* what the hooks do */
    ASSERT_OK(cudaStreamDestroy(s));
}

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

/* A signal handler that interrupted cudaMalloc on this thread, inside the
 * heap lock, and asks for a snapshot: the state provider refuses at once
 * (the recorder then writes nothing) instead of waiting for the lock its own
 * thread holds; once the lock is dropped it describes the state again. */
TEST(state_asked_on_a_thread_holding_the_heap_lock_is_refused_not_waited_for)
{
    ASSERT(vt_malloc(4096, 0, 0));
    vt__heap *h = vt__heap_get(0, false);
    ASSERT(h);
    alarm(10);   /* a wait for ourselves never ends */
    vt__heap_lock(h);
    ASSERT(fake_snapshot() == NULL);
    ASSERT_EQ(vt__alloc_describe_state(NULL), -EDEADLK);
    vt__heap_unlock(h);
    alarm(0);
    ASSERT_EQ(vt__alloc_describe_state(NULL), 0);
    vt__snapshot_data *snap = fake_snapshot();
    ASSERT(snap);
    ASSERT_EQ(snap->nblocks, 2);
    fake_snapshot_free(snap);
}

/* fork() while another thread holds a heap lock: the child must not inherit
 * it held (its snapshot at exit, any hook, would spin forever). */
static atomic_int holder_state;

static void *lock_holder(void *arg)
{
    vt__heap *h = arg;
    vt__heap_lock(h);
    atomic_store(&holder_state, 1);
    struct timespec ts = { 0, 100 * 1000 * 1000 };
    nanosleep(&ts, NULL);
    vt__heap_unlock(h);
    return NULL;
}

TEST(fork_while_another_thread_holds_the_heap_lock_does_not_hang_the_child)
{
    ASSERT(vt_malloc(4096, 0, 0));
    vt__heap *h = vt__heap_get(0, false);
    ASSERT(h);
    pthread_t t;
    ASSERT_EQ(pthread_create(&t, NULL, lock_holder, h), 0);
    while (!atomic_load(&holder_state))
        sched_yield();
    pid_t pid = fork();
    ASSERT(pid >= 0);
    if (pid == 0) {
        vt_stats st;
        _exit(vt_get_stats(0, &st) == 0 && st.allocation[VT_STAT_ALL].current == 1 ? 0 : 3);
    }
    int status = 0;
    pid_t r = 0;
    /* 10 s: a hung child never exits; a slow one (a loaded machine, the
     * sanitizer builds) must not be taken for a hung one */
    for (int i = 0; i < 1000 && r == 0; i++) {
        struct timespec ts = { 0, 10 * 1000 * 1000 };
        nanosleep(&ts, NULL);
        r = waitpid(pid, &status, WNOHANG);
    }
    if (r == 0) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
    }
    pthread_join(t, NULL);
    ASSERT_MSG(r == pid, "the child hung on the heap lock");
    ASSERT(WIFEXITED(status));
    ASSERT_EQ(WEXITSTATUS(status), 0);
}

/* ---- bad frees ---------------------------------------------------------- */

TEST(bad_frees_are_reported_once_and_change_nothing)
{
    char *p = vt_malloc(4096, 0, 0);
    char *q = vt_malloc(4096, 0, 0);
    int local;
    vt_stats before = stats(0);
    capture_begin();
    vt_free(&local, 4, 0, 0);                                   /* unknown */
    int r1 = vt__alloc_free(&local, 0, VT_FREE_ON_STREAM);      /* unknown, silent */
    int r2 = vt__alloc_free(p + 512, 0, VT_FREE_ON_STREAM);     /* interior */
    vt_free(q, 4096, 0, 0);
    int r3 = vt__alloc_free(q, 0, VT_FREE_ON_STREAM);           /* double */
    char *err = capture_end();
    ASSERT_EQ(r1, VT_ALLOC_NOT_OWNED);
    ASSERT_EQ(r2, cudaErrorInvalidValue);
    ASSERT_EQ(r3, cudaErrorInvalidValue);
    ASSERT_EQ(count_lines(err), 3);
    char buf[64];
    snprintf(buf, sizeof buf, "%p", (void *)&local);
    ASSERT_STR_CONTAINS(err, buf);
    snprintf(buf, sizeof buf, "%p", (void *)(p + 512));
    ASSERT_STR_CONTAINS(err, buf);
    ASSERT_STR_CONTAINS(err, "double free");
    ASSERT_EQ(fake_trace_count(VT_EV_BAD_FREE), 3);
    vt_event ev;
    ASSERT(fake_trace_last(VT_EV_BAD_FREE, &ev));
    ASSERT_EQ(ev.aux, VT_BAD_FREE_DOUBLE);
    vt_stats after = stats(0);
    ASSERT_EQ(after.num_bad_frees, 3);
    ASSERT_EQ(after.allocation[VT_STAT_ALL].current, before.allocation[VT_STAT_ALL].current - 1);
    CHECK_INVARIANTS();
    ASSERT_PTR_EQ(vt_malloc(4096, 0, 0), q);   /* q is free exactly once */
    ASSERT_PTR_NE(vt_malloc(4096, 0, 0), q);
    CHECK_INVARIANTS();
}

static uint64_t last_bad_free_reason(void)
{
    vt_event ev;
    ASSERT(fake_trace_last(VT_EV_BAD_FREE, &ev));
    return ev.aux;
}

/* A stale pointer is a double free, even once its block merged with free
 * neighbours or lies inside a newer allocation; a pointer into freed memory
 * that no allocation started at is an interior pointer, not a double free. */
TEST(interior_pointer_into_a_freed_block_is_not_a_double_free)
{
    char *a = vt_malloc(4096, 0, 0), *b = vt_malloc(4096, 0, 0), *c = vt_malloc(4096, 0, 0);
    ASSERT_PTR_EQ(b, a + 4096);
    vt_free(a, 0, 0, 0);
    vt_free(b, 0, 0, 0);                                  /* merges with a */
    capture_begin();
    ASSERT_EQ(vt__alloc_free(b + 512, 0, VT_FREE_ON_STREAM), cudaErrorInvalidValue);
    ASSERT_EQ(last_bad_free_reason(), VT_BAD_FREE_INTERIOR);
    ASSERT_EQ(vt__alloc_free(b, 0, VT_FREE_ON_STREAM), cudaErrorInvalidValue);
    ASSERT_EQ(last_bad_free_reason(), VT_BAD_FREE_DOUBLE);
    char *d = vt_malloc(8192, 0, 0);                      /* a and b's memory again */
    ASSERT_PTR_EQ(d, a);
    ASSERT_EQ(vt__alloc_free(b, 0, VT_FREE_ON_STREAM), cudaErrorInvalidValue);
    ASSERT_EQ(last_bad_free_reason(), VT_BAD_FREE_DOUBLE); /* stale, inside d now */
    ASSERT_EQ(vt__alloc_free(d + 512, 0, VT_FREE_ON_STREAM), cudaErrorInvalidValue);
    ASSERT_EQ(last_bad_free_reason(), VT_BAD_FREE_INTERIOR);
    vt_free(d, 0, 0, 0);
    ASSERT_EQ(vt__alloc_free(a, 0, VT_FREE_ON_STREAM), cudaErrorInvalidValue);
    ASSERT_EQ(last_bad_free_reason(), VT_BAD_FREE_DOUBLE);
    char *err = capture_end();
    ASSERT_EQ(count_lines(err), 5);
    ASSERT(strstr(err, "points inside a block") != NULL);
    ASSERT_EQ(stats(0).num_bad_frees, 5);
    vt_free(c, 0, 0, 0);
    CHECK_INVARIANTS();
}

/* With cache:0 the memory goes back to the device at the free: a second
 * free is the real free's to refuse, and then a double free to report. */
TEST(cache_off_double_free_is_reported)
{
    setenv("VRAMTRACE_CONF", "cache:0", 1);
    void *p;
    ASSERT_OK(vt__alloc_malloc(0, 4096, VT_NO_STREAM, &p));
    ASSERT_EQ(vt__alloc_free(p, 0, VT_FREE_UNKNOWN_STREAM), 0);
    ASSERT_EQ(vt__alloc_free(p, 0, VT_FREE_UNKNOWN_STREAM), VT_ALLOC_NOT_OWNED);
    ASSERT_EQ(cudaFree(p), cudaErrorInvalidValue);     /* what the hooks do next */
    capture_begin();
    vt__alloc_foreign_free_failed(0, p);
    int local;
    vt__alloc_foreign_free_failed(0, &local);
    char *err = capture_end();
    ASSERT_STR_CONTAINS(err, "double free");
    ASSERT_STR_CONTAINS(err, "unknown pointer");
    ASSERT_EQ(last_bad_free_reason(), VT_BAD_FREE_UNKNOWN_POINTER);
    ASSERT_EQ(stats(0).num_bad_frees, 2);
    /* the device hands the address out again: a valid pointer, no report */
    void *q;
    ASSERT_OK(vt__alloc_malloc(0, 4096, VT_NO_STREAM, &q));
    ASSERT_PTR_EQ(q, p);
    ASSERT_EQ(vt__alloc_free(q, 0, VT_FREE_UNKNOWN_STREAM), 0);
    ASSERT_EQ(stats(0).num_bad_frees, 2);
}

/* After a device reset an old pointer is neither interior nor unknown: it
 * was freed by the reset, inside a newer block or not. */
TEST(stale_pointer_after_reset_is_reported_as_freed_by_the_reset)
{
    char *a = vt_malloc(4096, 0, 0), *p = vt_malloc(4096, 0, 0);   /* stream-ordered */
    char *big = vt_malloc(30 * MiB, 0, 0);
    char *m = NULL;
    ASSERT_OK(vt__alloc_malloc(0, 4096, VT_NO_STREAM, (void **)&m));   /* cudaMalloc's */
    ASSERT(a && p && big && m);
    vt__alloc_device_reset(0);
    ASSERT_OK(cudaDeviceReset());
    char *q = vt_malloc(MiB, 0, 0);                        /* the same range again */
    ASSERT(q);
    capture_begin();
    /* A stream-ordered allocation from before the reset: reported, and
     * accepted, as a real driver accepts it (an H200: alloc_reset.c). */
    ASSERT_EQ(vt__alloc_free(p, 0, VT_FREE_ON_STREAM), 0);
    ASSERT_EQ(last_bad_free_reason(), VT_BAD_FREE_AFTER_RESET);
    int r = vt__alloc_free(big, 0, VT_FREE_ON_STREAM);
    if (r == VT_ALLOC_NOT_OWNED)                           /* outside every segment */
        vt__alloc_foreign_free_failed(0, big);
    ASSERT_EQ(last_bad_free_reason(), VT_BAD_FREE_AFTER_RESET);
    /* cudaMalloc's from before the reset: refused (invalid value), reported. */
    r = vt__alloc_free(m, 0, VT_FREE_UNKNOWN_STREAM);
    if (r == VT_ALLOC_NOT_OWNED)
        vt__alloc_foreign_free_failed(0, m);
    else
        ASSERT_EQ(r, cudaErrorInvalidValue);
    ASSERT_EQ(last_bad_free_reason(), VT_BAD_FREE_AFTER_RESET);
    char *err = capture_end();
    ASSERT_STR_CONTAINS(err, "device reset");
    ASSERT_PTR_EQ(q, a);       /* the test's premise: p lies inside q */
    vt_free(q, 0, 0, 0);
    CHECK_INVARIANTS();
}

TEST(owns_knows_blocks_and_interiors)
{
    char *p = vt_malloc(4096, 0, 0);
    int local;
    ASSERT(vt__alloc_owns(p));
    ASSERT(vt__alloc_owns(p + 100));
    ASSERT(!vt__alloc_owns(&local));
    ASSERT(!vt__alloc_owns(NULL));
    /* not a CUDA call: a negative errno, as vramtrace.h says */
    ASSERT_EQ(vt_record_stream(&local, 0), -EINVAL);
    ASSERT_EQ(vt_record_stream(NULL, 0), -EINVAL);
}

/* ---- stats, OOM, configuration ------------------------------------------ */

TEST(stats_track_current_peak_and_reset)
{
    void *a = vt_malloc(100 * KiB, 0, 0), *b = vt_malloc(200 * KiB, 0, 0);
    vt_free(a, 0, 0, 0);
    vt_stats s = stats(0);
    ASSERT_EQ(s.allocated_bytes[VT_STAT_ALL].current, 200 * KiB);
    ASSERT_EQ(s.allocated_bytes[VT_STAT_ALL].peak, 300 * KiB);
    ASSERT_EQ(s.allocated_bytes[VT_STAT_ALL].allocated, 300 * KiB);
    ASSERT_EQ(s.allocated_bytes[VT_STAT_ALL].freed, 100 * KiB);
    ASSERT_EQ(s.allocation[VT_STAT_SMALL].peak, 2);
    ASSERT_EQ(vt_reset_peak_stats(0), 0);
    s = stats(0);
    ASSERT_EQ(s.allocated_bytes[VT_STAT_ALL].peak, 200 * KiB);
    vt_free(b, 0, 0, 0);
    ASSERT_EQ(vt_get_stats(99, &s), -EINVAL);
    ASSERT_EQ(vt_get_stats(0, NULL), -EINVAL);
}

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
    vt_event ev;
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

/* ---- tracing ------------------------------------------------------------ */

TEST(events_and_state_carry_stacks_and_sequence_numbers)
{
    cudaStream_t s = new_stream();
    void *p = vt_malloc(3000, 0, s);
    vt_event ev;
    ASSERT(fake_trace_last(VT_EV_SEGMENT_ALLOC, &ev));
    ASSERT_EQ(ev.size, 2 * MiB);
    ASSERT_EQ(ev.aux, VT_POOL_SMALL);
    ASSERT(fake_trace_last(VT_EV_ALLOC, &ev));
    ASSERT_EQ(ev.addr, (uint64_t)(uintptr_t)p);
    ASSERT_EQ(ev.req_size, 3000);
    ASSERT_EQ(ev.size, 3072);
    ASSERT_EQ(ev.stack, 42);
    ASSERT_EQ(ev.stream, (uint64_t)(uintptr_t)s);
    vt__snapshot_data *snap = fake_snapshot();
    ASSERT(snap && snap->nsegments == 1 && snap->nblocks == 2 && snap->ndevices == 1);
    ASSERT_EQ(snap->blocks[0].alloc_seq, ev.seq);
    ASSERT_EQ(snap->blocks[0].stack, 42);
    ASSERT_EQ(snap->blocks[0].state, VT_BLOCK_ACTIVE_ALLOCATED);
    ASSERT_EQ(snap->blocks[1].state, VT_BLOCK_INACTIVE);
    ASSERT_EQ(snap->blocks[0].size + snap->blocks[1].size, snap->segments[0].size);
    fake_snapshot_free(snap);
    vt_free(p, 0, 0, s);
    ASSERT(fake_trace_last(VT_EV_FREE_REQUESTED, &ev));
    ASSERT_EQ(ev.stack, 43);
    ASSERT_EQ(ev.aux, 0);
    ASSERT_EQ(fake_trace_count(VT_EV_FREE_COMPLETED), 1);
    vt_empty_cache(0);
    ASSERT_EQ(fake_trace_count(VT_EV_SEGMENT_FREE), 1);
}

TEST(no_stack_capture_when_tracing_is_off)
{
    fake_trace_enable(false);
    size_t n0 = fake_stack_captures();
    for (int i = 0; i < 100; i++)
        vt_free(vt_malloc(4096, 0, 0), 0, 0, 0);
    ASSERT_EQ(fake_stack_captures(), n0);
}

/* ---- devices ------------------------------------------------------------ */

TEST(each_device_has_its_own_heap)
{
    simcuda_require("needs two devices (SIMCUDA_DEVICES=2)");
    setenv("SIMCUDA_DEVICES", "2", 1);
    void *a = vt_malloc(4096, 0, 0), *b = vt_malloc(4096, 1, 0);
    ASSERT(a && b);
    ASSERT_EQ(stats(0).allocation[VT_STAT_ALL].current, 1);
    ASSERT_EQ(stats(1).allocation[VT_STAT_ALL].current, 1);
    ASSERT_OK(cudaSetDevice(1));
    void *c = vt_malloc(4096, -1, 0);   /* the current device */
    ASSERT_EQ(stats(1).allocation[VT_STAT_ALL].current, 2);
    ASSERT_OK(cudaSetDevice(0));
    vt_free(b, 0, 0, 0);                 /* found on its own device */
    vt_free(c, 0, 0, 0);
    ASSERT_EQ(stats(1).allocation[VT_STAT_ALL].current, 0);
    ASSERT_EQ(stats(0).allocation[VT_STAT_ALL].current, 1);
    ASSERT_PTR_EQ(vt_malloc(4096, 7, 0), NULL);   /* no such device */
    CHECK_INVARIANTS();
}

/* ---- randomized sequences ----------------------------------------------- */

static uint64_t rng_next(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* Log-uniform 512 B .. 32 MiB, mostly small as in training. */
static size_t random_size(uint64_t *s)
{
    double u = (double)(rng_next(s) % 1000000) / 1e6;
    size_t sz = (size_t)(512.0 * __builtin_pow(65536.0, u * u));
    return sz + rng_next(s) % 512;
}

/* churn: now and then destroy stream 1 or 2 (blocks may still live on it,
 * freed later on its successor or another stream) and create a new one. */
static void random_ops(uint64_t seed, int nops, bool churn)
{
    enum { LIVE = 256 };
    cudaStream_t st[3] = { 0, new_stream(), new_stream() };
    void *live[LIVE] = { 0 };
    int live_stream[LIVE];
    uint64_t s = seed;
    int orphaned = 0;   /* blocks live on a stream when it was destroyed */
    for (int op = 0; op < nops; op++) {
        int i = (int)(rng_next(&s) % LIVE);
        int k = (int)(rng_next(&s) % 100);
        if (!live[i]) {
            int si = (int)(rng_next(&s) % 3);
            live[i] = vt_malloc((ssize_t)random_size(&s), 0, st[si]);
            ASSERT(live[i]);
            live_stream[i] = si;
        } else if (k < 10) {
            ASSERT_EQ(vt_record_stream(live[i], st[rng_next(&s) % 3]), 0);
        } else if (k < 15) {
            ASSERT_EQ(vt__alloc_free(live[i], 0, VT_FREE_UNKNOWN_STREAM), 0);
            live[i] = NULL;
        } else if (k < 20) {
            vt_free(live[i], 0, 0, st[rng_next(&s) % 3]);   /* maybe another stream */
            live[i] = NULL;
        } else {
            vt_free(live[i], 0, 0, st[live_stream[i]]);
            live[i] = NULL;
        }
        if (op % 5000 == 4999)
            ASSERT_EQ(vt_empty_cache(0), 0);
        if (churn && op % 500 == 499) {
            int si = 1 + (int)(rng_next(&s) % 2);
            for (int j = 0; j < LIVE; j++)
                orphaned += live[j] && live_stream[j] == si;
            destroy_stream(st[si]);
            st[si] = new_stream();
        }
        if (vt__alloc_check_invariants(-1) != 0)
            HARNESS_FAIL("invariants broken after op %d (seed %llu)", op,
                         (unsigned long long)seed);
    }
    for (int i = 0; i < LIVE; i++)
        if (live[i])
            vt_free(live[i], 0, 0, st[live_stream[i]]);
    ASSERT(!churn || orphaned > 100);   /* the dead-segment path ran */
    ASSERT_EQ(vt_empty_cache(0), 0);
    CHECK_INVARIANTS();
    vt_stats f = stats(0);
    ASSERT_EQ(f.allocated_bytes[VT_STAT_ALL].current, 0);
    ASSERT_EQ(f.reserved_bytes[VT_STAT_ALL].current, 0);
}

/* Every op is followed by a whole invariant check, which ThreadSanitizer
 * makes several times slower: a quarter of the ops under it (its check is
 * of the simulator's threads against the allocator's, which every op
 * exercises alike); stream churn still orphans well over 100 blocks. */
#define RANDOM_OPS HARNESS_STRESS(60000, 15000)

TEST(random_sequences_keep_invariants_seed_1)
{
    fake_trace_enable(false);
    random_ops(1, RANDOM_OPS, false);
}

TEST(random_sequences_keep_invariants_seed_2)
{
    fake_trace_enable(false);
    random_ops(0x9E3779B97F4A7C15ull, RANDOM_OPS, false);
}

TEST(random_sequences_with_stream_churn_keep_invariants)
{
    fake_trace_enable(false);
    random_ops(7, RANDOM_OPS, true);
    ASSERT_EQ(sim().stale_stream_uses, 0);
}

TEST_MAIN()
