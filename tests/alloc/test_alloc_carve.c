/* tests/alloc/test_alloc_carve.c - how a request becomes a block: sizes
 * rounded, the segments they come from, reuse and best fit among free
 * blocks, splitting and coalescing.
 *
 * Linked with the allocator sources and the in-memory fake recorder
 * (trace_fake.c), as every test_alloc*.c. Each test runs in its own process
 * and sets VRAMTRACE_CONF / SIMCUDA_* before its first CUDA call. */
#include <cuda_runtime_api.h>
#include <stdlib.h>

#include "alloc_internal.h"
#include "allocator.h"
#include "harness.h"
#include "alloc_test_util.h"
#include "simcuda.h"
#include "trace_fake.h"
#include "vramtrace.h"

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

TEST_MAIN()
