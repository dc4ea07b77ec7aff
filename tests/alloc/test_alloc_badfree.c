/* tests/alloc/test_alloc_badfree.c - frees of pointers the cache did not
 * hand out, or no longer holds: unknown, interior, double, stale after a
 * device reset; each reported once, none changing the heap.
 *
 * Linked with the allocator sources and the in-memory fake recorder
 * (trace_fake.c), as every test_alloc*.c. Each test runs in its own process
 * and sets VRAMTRACE_CONF / SIMCUDA_* before its first CUDA call. */
#include <cuda_runtime_api.h>
#include <errno.h>

#include "alloc_internal.h"
#include "allocator.h"
#include "harness.h"
#include "alloc_test_util.h"
#include "simcuda.h"
#include "trace_fake.h"
#include "vramtrace.h"

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
    vt__event ev;
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
    vt__event ev;
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

TEST_MAIN()
