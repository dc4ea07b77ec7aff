/* tests/alloc/test_alloc_stress.c - many threads, many streams, one heap.
 *
 * 8 threads x 4 streams, sizes log-uniform 512 B .. 64 MiB, 200k operations
 * (allocate, free on the own or another stream, record_stream, unknown-stream
 * free, empty_cache), then the invariant checker. The device has 16 GiB
 * (meson.build): more than all live blocks together can ever need, so no
 * allocation may fail whatever the threads' timing. Meant to run clean under
 * ThreadSanitizer too (meson setup -Db_sanitize=thread). */
#include <cuda_runtime_api.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>

#include "alloc_internal.h"
#include "allocator.h"
#include "harness.h"
#include "trace_fake.h"
#include "vramtrace.h"

#define NTHREADS 8
#define NSTREAMS 4
#define LIVE 16

static cudaStream_t streams[NSTREAMS];
static int ops_per_thread = 200000 / NTHREADS;
static atomic_ulong failures;

static uint64_t next(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static size_t log_uniform(uint64_t *s)
{
    double u = (double)(next(s) % 1000000) / 1e6;
    return (size_t)(512.0 * pow(131072.0, u));   /* 512 B .. 64 MiB */
}

static void *worker(void *arg)
{
    uint64_t s = 0x1234567ull * ((uint64_t)(uintptr_t)arg + 1);
    void *live[LIVE] = { 0 };
    int home[LIVE];
    for (int op = 0; op < ops_per_thread; op++) {
        int i = (int)(next(&s) % LIVE), k = (int)(next(&s) % 100);
        cudaStream_t other = streams[next(&s) % NSTREAMS];
        if (!live[i]) {
            home[i] = (int)(next(&s) % NSTREAMS);
            live[i] = vt_malloc((ssize_t)log_uniform(&s), 0, streams[home[i]]);
            if (!live[i])
                atomic_fetch_add(&failures, 1);
        } else if (k < 10) {
            if (vt_record_stream(live[i], other) != 0)
                atomic_fetch_add(&failures, 1);
        } else if (k < 14) {
            if (vt__alloc_free(live[i], 0, VT_FREE_UNKNOWN_STREAM) != 0)
                atomic_fetch_add(&failures, 1);
            live[i] = NULL;
        } else if (k < 20) {
            vt_free(live[i], 0, 0, other);
            live[i] = NULL;
        } else {
            vt_free(live[i], 0, 0, streams[home[i]]);
            live[i] = NULL;
        }
        if (op % 10000 == 9999)
            vt_empty_cache(0);
    }
    for (int i = 0; i < LIVE; i++)
        if (live[i])
            vt_free(live[i], 0, 0, streams[home[i]]);
    return NULL;
}

static void create_streams(void)
{
    for (int i = 0; i < NSTREAMS; i++) {
        ASSERT_OK(cudaStreamCreateWithFlags(&streams[i], cudaStreamNonBlocking));
        vt__alloc_stream_created(0, (uint64_t)(uintptr_t)streams[i]);
    }
}

/* After the threads joined: no thread saw a failure, the heap is consistent
 * and every allocation was freed. The stats, for what the test checks next. */
static vt_stats assert_consistent_and_all_freed(void)
{
    ASSERT_EQ(atomic_load(&failures), 0);
    ASSERT_EQ(vt__alloc_check_invariants(-1), 0);
    vt_stats st;
    ASSERT_EQ(vt_get_stats(0, &st), 0);
    ASSERT_EQ(st.allocation[VT_STAT_ALL].current, 0);
    return st;
}

TEST(eight_threads_four_streams_keep_the_heap_consistent)
{
    fake_trace_enable(getenv("STRESS_TRACE") != NULL);
    const char *n = getenv("STRESS_OPS");
    if (n)
        ops_per_thread = atoi(n) / NTHREADS;
    create_streams();
    pthread_t t[NTHREADS];
    for (long i = 0; i < NTHREADS; i++)
        ASSERT_EQ(pthread_create(&t[i], NULL, worker, (void *)i), 0);
    for (int i = 0; i < NTHREADS; i++)
        pthread_join(t[i], NULL);
    vt_stats st = assert_consistent_and_all_freed();
    ASSERT_EQ(vt_empty_cache(0), 0);
    ASSERT_EQ(vt_get_stats(0, &st), 0);
    ASSERT_EQ(st.reserved_bytes[VT_STAT_ALL].current, 0);
    ASSERT_EQ(st.num_ooms, 0);
    ASSERT_EQ(vt__alloc_check_invariants(-1), 0);
}

/* Streams created and destroyed per request by 4 threads while 2 others
 * allocate on long-lived streams: the destroyed streams' segments go back,
 * no OOM. Each churner frees one block of its previous stream only after
 * that stream is gone (the dead-segment path). An OOM retry (release the
 * cache, wait for the fences, try again) is allowed: it is the designed
 * answer when the streams' queued work lags behind the frees, which on a
 * loaded machine it does (1 to 4 retries in about one run in ten). */
#define CHURNERS 4
#define CHURN_ROUNDS 100

static void *churner(void *arg)
{
    uint64_t s = 0xABCDEFull * ((uint64_t)(uintptr_t)arg + 1);
    void *left = NULL;   /* a block of the previous, destroyed stream */
    cudaStream_t left_on = 0;
    for (int r = 0; r < CHURN_ROUNDS; r++) {
        cudaStream_t S;
        if (cudaStreamCreateWithFlags(&S, cudaStreamNonBlocking) != cudaSuccess) {
            atomic_fetch_add(&failures, 1);
            return NULL;
        }
        vt__alloc_stream_created(0, (uint64_t)(uintptr_t)S);
        void *p[4];
        for (int k = 0; k < 4; k++) {
            p[k] = vt_malloc((ssize_t)(log_uniform(&s) % (4u << 20) + 1), 0, S);
            if (!p[k])
                atomic_fetch_add(&failures, 1);
        }
        for (int k = 1; k < 4; k++)
            vt_free(p[k], 0, 0, S);
        if (left)
            vt_free(left, 0, 0, left_on);   /* its stream is gone */
        left = p[0];
        left_on = S;
        vt__alloc_stream_destroyed((uint64_t)(uintptr_t)S);
        cudaStreamDestroy(S);
    }
    if (left)
        vt_free(left, 0, 0, left_on);
    return NULL;
}

TEST(threads_churning_streams_keep_the_cache_bounded)
{
    fake_trace_enable(false);
    create_streams();
    ops_per_thread = 20000;
    pthread_t w[2], c[CHURNERS];
    for (long i = 0; i < 2; i++)
        ASSERT_EQ(pthread_create(&w[i], NULL, worker, (void *)i), 0);
    for (long i = 0; i < CHURNERS; i++)
        ASSERT_EQ(pthread_create(&c[i], NULL, churner, (void *)i), 0);
    for (int i = 0; i < CHURNERS; i++)
        pthread_join(c[i], NULL);
    for (int i = 0; i < 2; i++)
        pthread_join(w[i], NULL);
    vt_stats st = assert_consistent_and_all_freed();
    ASSERT_EQ(st.num_ooms, 0);
    /* Every churned stream's segments went back: what is left belongs to
     * the long-lived streams and the legacy one, and empty_cache finds all
     * of it free. */
    vt__heap *h = vt__heap_get(0, false);
    vt__heap_lock(h);
    for (uint64_t i = 0; i < h->nsegs; i++) {
        uint64_t k = h->segs[i]->stream;
        bool mine = k == 0;
        for (int j = 0; j < NSTREAMS; j++)
            mine |= k == (uint64_t)(uintptr_t)streams[j];
        if (!mine) {
            vt__heap_unlock(h);
            HARNESS_FAIL("segment %#llx of a destroyed stream is still cached",
                         (unsigned long long)h->segs[i]->addr);
        }
    }
    vt__heap_unlock(h);
    ASSERT_EQ(vt_empty_cache(0), 0);
    ASSERT_EQ(vt_get_stats(0, &st), 0);
    ASSERT_EQ(st.reserved_bytes[VT_STAT_ALL].current, 0);
    ASSERT_EQ(vt__alloc_check_invariants(-1), 0);
}

TEST_MAIN()
