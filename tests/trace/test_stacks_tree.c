/*
 * tests/trace/test_stacks_tree.c - the tree of interned stacks: lock-free
 * insertion by racing threads (one id per stack, parents before children),
 * an exporter that survives a tree breaking its invariants, and a full
 * table that cuts new stacks short and counts what it dropped.
 */
#include "rec_snap.h"
#include "recorder.h"
#include "snapfile.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../harness.h"
#include "stacks_test_util.h"

#define ISTACKS 3000
static uint32_t interned_ids[8][ISTACKS];

/* Stack k: 4 frames, the outer two shared by groups of stacks. */
static void stack_k(unsigned k, uint64_t ips[4])
{
    ips[3] = 0x7000;                 /* outermost: shared by all */
    ips[2] = 0x8000 + k % 7;
    ips[1] = 0x9000 + k % 101;
    ips[0] = 0xa0000 + k;            /* innermost: unique */
}

static void *intern_thread(void *arg)
{
    unsigned t = (unsigned)(uintptr_t)arg;
    for (unsigned i = 0; i < ISTACKS; i++) {
        unsigned k = (i * 7919u + t * 104729u) % ISTACKS;   /* a different order each */
        uint64_t ips[4];
        stack_k(k, ips);
        interned_ids[t][k] = vt__stack_intern_ips(ips, 4);
    }
    return NULL;
}

/* Lock-free insertion under contention (no libunwind: TSan-clean). */
TEST(concurrent_interning_agrees_on_ids)
{
    uint32_t before = vt__stacks_count();
    uint32_t lost_before = vt__stacks_ids_lost();
    pthread_t t[8];
    for (uintptr_t i = 0; i < 8; i++)
        ASSERT_OK(pthread_create(&t[i], NULL, intern_thread, (void *)i));
    for (int i = 0; i < 8; i++)
        pthread_join(t[i], NULL);
    for (unsigned k = 0; k < ISTACKS; k++) {
        ASSERT_NE(interned_ids[0][k], 0);
        for (int i = 1; i < 8; i++)
            ASSERT_EQ(interned_ids[i][k], interned_ids[0][k]);
        uint64_t want[4], ip;
        stack_k(k, want);
        uint32_t id = interned_ids[0][k];
        for (int f = 0; f < 4; f++) {        /* walking parents gives the stack back */
            uint32_t parent;
            ASSERT_OK(vt__stacks_node(id, &parent, &ip));
            ASSERT_EQ(ip, want[f]);
            id = parent;
        }
        ASSERT_EQ(id, 0);
    }
    /* Unique nodes: 1 + 7 + the distinct (k%7, k%101) pairs + ISTACKS. An id
     * lost in a CAS race is kept as its thread's spare (at most 8 held at
     * the end) or counted as lost for good: anything beyond is a duplicate. */
    unsigned pairs = 0;
    static unsigned char seen[7][101];
    for (unsigned k = 0; k < ISTACKS; k++)
        if (!seen[k % 7][k % 101]++)
            pairs++;
    uint32_t used = vt__stacks_count() - before;
    uint32_t lost = vt__stacks_ids_lost() - lost_before;
    ASSERT_GE(used, 1 + 7 + pairs + ISTACKS);
    ASSERT_LE(used, 1 + 7 + pairs + ISTACKS + lost + 8);
}

/* ---- many threads reaching the same fresh deep paths at once ------------ */

#define RACE_THREADS 8
#define RACE_ROUNDS 24
#define RACE_PATHS 48
#define RACE_DEPTH 64
static uint32_t race_ids[RACE_ROUNDS][RACE_THREADS][RACE_PATHS];
static pthread_barrier_t race_barrier;

/* Runs fn((void *)0) ... fn((void *)(n - 1)) on n threads (n at most
 * RACE_THREADS), which meet at race_barrier, and waits for them all. */
static void run_racing_threads(unsigned n, void *(*fn)(void *))
{
    pthread_t t[RACE_THREADS];
    ASSERT(n <= RACE_THREADS);
    ASSERT_OK(pthread_barrier_init(&race_barrier, NULL, n));
    for (uintptr_t i = 0; i < n; i++)
        ASSERT_OK(pthread_create(&t[i], NULL, fn, (void *)i));
    for (unsigned i = 0; i < n; i++)
        ASSERT_OK(pthread_join(t[i], NULL));
    pthread_barrier_destroy(&race_barrier);
}

/* Path p of round r, innermost first: all paths of a round share their
 * outermost frame and branch apart level by level (frame L from the outside
 * is shared by groups of p * (L + 1) / RACE_DEPTH), so racing threads meet
 * on shared prefixes and on fresh leaves alike. */
static void race_path(unsigned r, unsigned p, uint64_t ips[RACE_DEPTH])
{
    for (unsigned level = 0; level < RACE_DEPTH; level++)
        ips[RACE_DEPTH - 1 - level] = UINT64_C(0x10000000000) + ((uint64_t)r << 32) +
                                      ((uint64_t)level << 16) +
                                      p * (level + 1) / RACE_DEPTH;
}

static void *race_thread(void *arg)
{
    unsigned t = (unsigned)(uintptr_t)arg;
    for (unsigned r = 0; r < RACE_ROUNDS; r++) {
        pthread_barrier_wait(&race_barrier);   /* everyone on fresh paths at once */
        for (unsigned i = 0; i < RACE_PATHS; i++) {
            unsigned p = t % 2 ? RACE_PATHS - 1 - i : (i + t * 5) % RACE_PATHS;
            uint64_t ips[RACE_DEPTH];
            race_path(r, p, ips);
            race_ids[r][t][p] = vt__stack_intern_ips(ips, RACE_DEPTH);
        }
    }
    return NULL;
}

/* Every event stack of `path`'s snapshot, read back from the file: one
 * distinct stack per distinct path, each giving its frames back. */
static vt__snapshot_data *snapshot_through_a_file(void)
{
    char dir[] = "/tmp/vt-stacks-XXXXXX", path[64], err[512];
    ASSERT(mkdtemp(dir) != NULL);
    snprintf(path, sizeof path, "%s/s.vtsnap", dir);
    vt__snapshot_data *s = NULL;
    ASSERT_OK(vt__snapshot_build(&s));
    ASSERT_MSG(vt__snapfile_write(s, path, err, sizeof err) == 0, "%s", err);
    vt__snapshot_free(s);
    ASSERT_MSG(vt__snapfile_read(path, &s, err, sizeof err) == 0, "%s", err);
    unlink(path);
    rmdir(dir);
    return s;
}

static size_t distinct_event_stacks(const vt__snapshot_data *s)
{
    uint8_t *seen = calloc(s->nstack_nodes ? s->nstack_nodes : 1, 1);
    size_t n = 0;
    for (size_t i = 0; i < s->nevents; i++) {
        uint32_t id = s->events[i].stack;
        ASSERT_LT(id, s->nstack_nodes ? s->nstack_nodes : 1);
        if (id && !seen[id]) {
            seen[id] = 1;
            n++;
        }
    }
    free(seen);
    return n;
}

/* A race's result: for path p of each round r, the id every one of the
 * nthreads threads got (ids: [rounds][nthreads][npaths]): one and the same,
 * never 0, given to check() with r and p (its frames in the live tree), then
 * recorded as one allocation at 0x1000 + 16 k, k = r * npaths + p. Read
 * back through a file: one event and one distinct stack per path.
 * @return that snapshot; race_path_of() says event i's k. */
static vt__snapshot_data *race_exported(const uint32_t *ids, unsigned rounds, unsigned nthreads,
                                        unsigned npaths,
                                        void (*check)(uint32_t id, unsigned r, unsigned p))
{
    for (unsigned r = 0; r < rounds; r++)
        for (unsigned p = 0; p < npaths; p++) {
            const uint32_t *round = ids + (size_t)r * nthreads * npaths;
            uint32_t id = round[p];
            ASSERT_NE(id, 0);
            for (unsigned i = 1; i < nthreads; i++)
                ASSERT_EQ(round[(size_t)i * npaths + p], id);
            check(id, r, p);
            vt__trace(.kind = VT_EV_ALLOC, .addr = 0x1000 + 16 * (r * npaths + p),
                      .req_size = 1, .size = 1, .stack = id);
        }
    vt__snapshot_data *s = snapshot_through_a_file();
    ASSERT_EQ(s->nevents, rounds * npaths);
    ASSERT_EQ(distinct_event_stacks(s), rounds * npaths);
    return s;
}

static unsigned race_path_of(const vt__snapshot_data *s, size_t i)
{
    return (unsigned)((s->events[i].addr - 0x1000) / 16);
}

/* Path p of round r in the live tree: RACE_DEPTH frames, each parent's id
 * below its child's. */
static void race_path_in_the_tree(uint32_t id, unsigned r, unsigned p)
{
    ASSERT_EQ(id & VT_STACK_TRUNCATED, 0);
    uint64_t want[RACE_DEPTH], ip;
    race_path(r, p, want);
    for (int f = 0; f < RACE_DEPTH; f++) {
        uint32_t parent;
        ASSERT_OK(vt__stacks_node(id, &parent, &ip));
        ASSERT_EQ(ip, want[f]);
        ASSERT_LT(parent, id);   /* the invariant the tree keeps */
        id = parent;
    }
    ASSERT_EQ(id, 0);
}

/* Threads that lose an insertion race keep the node id they reserved; reused
 * under a parent with a larger id it broke the exporter (parents must precede
 * children) and overran its arrays. Lock-free part only: runs under TSan. */
TEST(racing_threads_on_fresh_deep_paths_keep_parents_before_children)
{
    run_racing_threads(RACE_THREADS, race_thread);
    vt__snapshot_data *s = race_exported(&race_ids[0][0][0], RACE_ROUNDS, RACE_THREADS,
                                         RACE_PATHS, race_path_in_the_tree);
    for (size_t i = 0; i < s->nevents; i++) {
        unsigned k = race_path_of(s, i);
        uint64_t want[RACE_DEPTH];
        race_path(k / RACE_PATHS, k % RACE_PATHS, want);
        const vt__frame *f[RACE_DEPTH + 1];
        ASSERT_EQ(vt__snapshot_stack_frames(s, s->events[i].stack, f, RACE_DEPTH + 1),
                  RACE_DEPTH);
        for (int j = 0; j < RACE_DEPTH; j++)
            ASSERT_EQ(f[j]->ip, want[j]);
    }
    ASSERT_EQ(s->meta.stacks_truncated, 0);
    vt__snapshot_free(s);
}

/* Whatever the live tree holds, the exporter follows only parents it has
 * checked: a cycle, a parent id beyond the table, or a parent interned after
 * its child give "no stack" or a correctly ordered export, never a read or a
 * write past an array (ASan runs this too), and the file is written. */
TEST(exporter_survives_a_tree_that_breaks_its_invariants)
{
    const uint64_t a[] = { 0xa3, 0xa2, 0xa1 }, b[] = { 0xb3, 0xb2, 0xb1 },
                   c[] = { 0xc2, 0xc1 }, d[] = { 0xd2, 0xd1 };
    uint32_t ia = vt__stack_intern_ips(a, 3), ib = vt__stack_intern_ips(b, 3),
             ic = vt__stack_intern_ips(c, 2), id = vt__stack_intern_ips(d, 2);
    uint32_t ia2, ib2, ic1;
    uint64_t ip;
    ASSERT_OK(vt__stacks_node(ia, &ia2, &ip));
    ASSERT_OK(vt__stacks_node(ib, &ib2, &ip));
    ASSERT_OK(vt__stacks_node(ic, &ic1, &ip));
    /* a: 0xa2's parent becomes 0xa3's node, a cycle; b: 0xb2's parent is out
     * of range; c: 0xc1 (outermost) hangs under d's leaf, interned after it */
    ASSERT_OK(vt__stacks_test_set_parent(ia2, ia));
    ASSERT_OK(vt__stacks_test_set_parent(ib2, vt__stacks_count() + 5));
    ASSERT_OK(vt__stacks_test_set_parent(ic1, id));
    ASSERT_GT(id, ic1);
    vt__trace(.kind = VT_EV_ALLOC, .addr = 0x1000, .req_size = 1, .size = 1, .stack = ia);
    vt__trace(.kind = VT_EV_ALLOC, .addr = 0x2000, .req_size = 1, .size = 1, .stack = ib);
    vt__trace(.kind = VT_EV_ALLOC, .addr = 0x3000, .req_size = 1, .size = 1, .stack = ic);
    vt__trace(.kind = VT_EV_ALLOC, .addr = 0x4000, .req_size = 1, .size = 1,
              .stack = (1u << 20) + 7);   /* beyond any node */
    vt__snapshot_data *s = snapshot_through_a_file();
    ASSERT_EQ(s->nevents, 4);
    ASSERT_EQ(s->events[0].stack, 0);
    ASSERT_EQ(s->events[1].stack, 0);
    ASSERT_EQ(s->events[3].stack, 0);
    const uint64_t want[] = { 0xc2, 0xc1, 0xd2, 0xd1 };
    const vt__frame *f[8];
    ASSERT_EQ(vt__snapshot_stack_frames(s, s->events[2].stack, f, 8), 4);
    for (int i = 0; i < 4; i++)
        ASSERT_EQ(f[i]->ip, want[i]);
    vt__snapshot_free(s);
}

/* The same with real unwinds: the stack of descend(depth, bits) is a chain of
 * go_left/go_right frames spelling the bits, so distinct (depth, bits) are
 * distinct stacks, all fresh in each round, reached by every thread at once. */
#define UNWIND_THREADS 6
#define UNWIND_ROUNDS 16
#define UNWIND_PATHS 24
static uint32_t unwind_ids[UNWIND_ROUNDS][UNWIND_THREADS][UNWIND_PATHS];

typedef uint32_t (*step_fn)(unsigned, uint64_t);
__attribute__((noinline)) static uint32_t go_left(unsigned d, uint64_t bits);
__attribute__((noinline)) static uint32_t go_right(unsigned d, uint64_t bits);

__attribute__((noinline)) static uint32_t go_left(unsigned d, uint64_t bits)
{
    uint32_t id = d == 0 ? vt__stack_capture() : (bits & 1 ? go_left : go_right)(d - 1, bits >> 1);
    KEEP();
    __atomic_fetch_add(&sink, 1, __ATOMIC_RELAXED);   /* threads: no data race */
    return id;
}

__attribute__((noinline)) static uint32_t go_right(unsigned d, uint64_t bits)
{
    uint32_t id = d == 0 ? vt__stack_capture() : (bits & 1 ? go_left : go_right)(d - 1, bits >> 1);
    KEEP();
    __atomic_fetch_add(&sink, 7, __ATOMIC_RELAXED);
    return id;
}

/* Path p of round r: depth 4..19, bits from a hash; the paths of one round
 * are distinct from each other and from every other round's. */
static void unwind_path(unsigned r, unsigned p, unsigned *d, uint64_t *bits)
{
    unsigned k = r * UNWIND_PATHS + p;
    *d = 4 + k % 16;
    uint64_t h = (uint64_t)k * UINT64_C(0x9E3779B97F4A7C15);
    /* the depth is k % 16 and the low 5 bits spell k / 16 (< 32): no two
     * paths share (depth, bits) */
    *bits = ((h >> 20) << 5 | k / 16) & ((UINT64_C(2) << *d) - 1);
}

static void *unwind_thread(void *arg)
{
    unsigned t = (unsigned)(uintptr_t)arg;
    for (unsigned r = 0; r < UNWIND_ROUNDS; r++) {
        pthread_barrier_wait(&race_barrier);
        for (unsigned i = 0; i < UNWIND_PATHS; i++) {
            unsigned p = t % 2 ? UNWIND_PATHS - 1 - i : i, d;
            uint64_t bits;
            unwind_path(r, p, &d, &bits);
            unwind_ids[r][t][p] = (bits & 1 ? go_left : go_right)(d, bits >> 1);
        }
    }
    return NULL;
}

/* A stack in the live tree: each parent's id below its child's. */
static void parents_before_children(uint32_t id, unsigned r, unsigned p)
{
    (void)r;
    (void)p;
    for (uint32_t up = id, parent; up != 0; up = parent) {
        uint64_t ip;
        ASSERT_OK(vt__stacks_node(up, &parent, &ip));
        ASSERT_LT(parent, up);
    }
}

TEST(racing_threads_unwinding_fresh_deep_stacks_export_them_all)
{
    run_racing_threads(UNWIND_THREADS, unwind_thread);
    /* Every thread got one id per path (its own thread start frames are the
     * same code as the others'), all distinct. */
    vt__snapshot_data *s = race_exported(&unwind_ids[0][0][0], UNWIND_ROUNDS, UNWIND_THREADS,
                                         UNWIND_PATHS, parents_before_children);
    for (size_t i = 0; i < s->nevents; i++) {
        unsigned k = race_path_of(s, i), d;
        uint64_t bits;
        unwind_path(k / UNWIND_PATHS, k % UNWIND_PATHS, &d, &bits);
        const vt__frame *f[64];
        ASSERT_GE(vt__snapshot_stack_frames(s, s->events[i].stack, f, 64), d + 2);
        /* innermost first: the frame of bit d ... the frame of bit 0 */
        for (unsigned j = 0; j <= d; j++)
            ASSERT_STR_EQ(vt__snapshot_string(s, f[j]->function),
                          (bits >> (d - j)) & 1 ? "go_left" : "go_right");
        ASSERT_STR_EQ(vt__snapshot_string(s, f[d + 1]->function), "unwind_thread");
    }
    vt__snapshot_free(s);
}

/* A full table cuts new stacks short instead of dropping them: the deepest
 * prefix the tree holds stands for the stack, marked truncated, and the
 * snapshot counts the events that carry one. */
TEST(full_table_keeps_the_known_prefix_and_counts_truncated_events)
{
    const uint64_t known[] = { 0xa03, 0xa02, 0xa01 };            /* innermost first */
    uint32_t whole = vt__stack_intern_ips(known, 3);
    ASSERT_NE(whole, 0);
    uint32_t outer2, parent;
    uint64_t ip;
    ASSERT_OK(vt__stacks_node(whole, &outer2, &ip));          /* {0xa02, 0xa01} */
    uint64_t ips[2];
    for (uint64_t i = 1; i <= (1u << 20); i++) {             /* fill the tree */
        ips[0] = 0x100000000 + i;
        ips[1] = 0x200000000 + i;
        if (vt__stack_intern_ips(ips, 2) == 0)
            break;
    }
    uint64_t dropped = vt__stacks_dropped();
    const uint64_t deeper[] = { 0xb00, 0xa03, 0xa02, 0xa01 };  /* one new frame */
    const uint64_t forked[] = { 0xb02, 0xb01, 0xa02, 0xa01 };  /* two new frames */
    const uint64_t unknown[] = { 0xc01, 0xc00 };               /* nothing known */
    uint32_t t1 = vt__stack_intern_ips(deeper, 4), t2 = vt__stack_intern_ips(forked, 4);
    ASSERT_EQ(t1, whole | VT_STACK_TRUNCATED);
    ASSERT_EQ(t2, outer2 | VT_STACK_TRUNCATED);
    ASSERT_EQ(vt__stack_intern_ips(unknown, 2), 0);
    ASSERT_EQ(vt__stack_intern_ips(known, 3), whole);         /* known stacks stay whole */
    ASSERT_EQ(vt__stacks_dropped(), dropped + 3);
    ASSERT_OK(vt__stacks_node(t2, &parent, &ip));              /* the mark reads as the node */
    ASSERT_EQ(ip, 0xa02);

    vt__trace(.kind = VT_EV_ALLOC, .addr = 0x1000, .req_size = 1, .size = 1, .stack = t1);
    vt__trace(.kind = VT_EV_ALLOC, .addr = 0x2000, .req_size = 1, .size = 1, .stack = t2);
    vt__trace(.kind = VT_EV_ALLOC, .addr = 0x3000, .req_size = 1, .size = 1, .stack = whole);
    vt__snapshot_data *s = snapshot_through_a_file();
    ASSERT_EQ(s->nevents, 3);
    ASSERT_EQ(s->meta.stacks_truncated, 2);
    ASSERT_GE(s->meta.stacks_dropped, dropped + 3);
    ASSERT_EQ(s->events[0].stack, s->events[2].stack);         /* the prefix is the stack */
    const vt__frame *f[8];
    ASSERT_EQ(vt__snapshot_stack_frames(s, s->events[0].stack, f, 8), 3);
    for (int i = 0; i < 3; i++)
        ASSERT_EQ(f[i]->ip, known[i]);
    ASSERT_EQ(vt__snapshot_stack_frames(s, s->events[1].stack, f, 8), 2);
    ASSERT_EQ(f[0]->ip, 0xa02);
    ASSERT_EQ(f[1]->ip, 0xa01);
    vt__snapshot_free(s);
}

TEST(full_table_counts_dropped_stacks)
{
    /* Distinct two-frame stacks until the tree is full (1M nodes). */
    uint64_t ips[2];
    uint32_t last = 1;
    for (uint64_t i = 1; i < (1u << 20) && last; i++) {
        ips[0] = 0x100000000 + i;
        ips[1] = 0x200000000 + i;
        last = vt__stack_intern_ips(ips, 2);
    }
    ASSERT_EQ(last, 0);
    ASSERT_GE(vt__stacks_dropped(), 1);
    vt__snapshot_data *s = snapshot_with_stack(0);
    ASSERT_GE(s->meta.stacks_dropped, 1);
    vt__snapshot_free(s);
}

TEST_MAIN()
