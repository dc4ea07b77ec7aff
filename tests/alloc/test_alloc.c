/* tests/alloc/test_alloc.c - the heap as a whole: its lock (a state asked
 * under it, a fork while another thread holds it), what it reports (stats,
 * events and state), a heap per device, and random sequences that keep its
 * invariants. The other tests/alloc/test_alloc_*.c each test one behaviour.
 *
 * Linked with the allocator sources and the in-memory fake recorder
 * (trace_fake.c), so the tests see internal state: the invariant checker,
 * the recorded events, the state provider. Each test runs in its own process
 * and sets VRAMTRACE_CONF / SIMCUDA_* before its first CUDA call. */
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

/* ---- the heap lock ------------------------------------------------------- */

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

/* ---- stats -------------------------------------------------------------- */

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

/* ---- tracing ------------------------------------------------------------ */

TEST(events_and_state_carry_stacks_and_sequence_numbers)
{
    cudaStream_t s = new_stream();
    void *p = vt_malloc(3000, 0, s);
    vt__event ev;
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
