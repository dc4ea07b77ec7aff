/*
 * tests/trace/test_stacks.c - stack capture, interning and symbolization.
 *
 * Built with -g -O1 -fno-omit-frame-pointer so the chain a -> b -> c below
 * has real frames and line tables.
 */
#include "rec_snap.h"
#include "recorder.h"
#include "snapfile.h"
#include "config.h"

#include <dlfcn.h>
#include <elfutils/libdwfl.h>
#include <gelf.h>
#include <glob.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>

#include "../harness.h"

static volatile int sink;
/* Loop bounds the compiler cannot see: no unrolling into distinct call sites. */
static volatile int two = 2, ten = 10, hundred_and_one = 101;

#define KEEP() __asm__ volatile("" ::: "memory")

/* A function with a frame of its own that calls `callee`: kept (no inlining,
 * no tail call), and adding its own `salt` to sink, so that no two of them
 * have equal bodies (GCC would fold those into one). One per line: the line
 * of the call is the line of the FRAME. */
#define FRAME(name, callee, salt)                                           \
    __attribute__((noinline)) static uint32_t name(void)                    \
    {                                                                       \
        uint32_t id = callee();                                             \
        KEEP();                                                             \
        __atomic_fetch_add(&sink, salt, __ATOMIC_RELAXED);                  \
        return id;                                                          \
    }

__attribute__((noinline)) static uint32_t chain_c(void)
{
    uint32_t id = vt__stack_capture();   /* the line the frame of chain_c names */
    KEEP();
    __atomic_fetch_add(&sink, 1, __ATOMIC_RELAXED);   /* also on threads */
    return id;
}

FRAME(chain_b, chain_c, 1)
FRAME(chain_a, chain_b, 1)

/* Bodies differ from chain_c/chain_b, or GCC folds identical functions. */
FRAME(other_leaf, vt__stack_capture, 3)
FRAME(chain_b2, other_leaf, 5)

/* One call site for several chains: their stacks share everything outside. */
__attribute__((noinline)) static uint32_t via(uint32_t (*fn)(void))
{
    uint32_t id = fn();
    KEEP();
    sink++;
    return id;
}

static vt__snapshot_data *snapshot_with_stack(uint32_t stack)
{
    vt__trace(.kind = VT_EV_ALLOC, .addr = 0x1000, .req_size = 1, .size = 1, .stack = stack);
    vt__snapshot_data *s = NULL;
    ASSERT_OK(vt__snapshot_build(&s));
    return s;
}

static const vt_event *last_event(const vt__snapshot_data *s)
{
    ASSERT_GT(s->nevents, 0);
    return &s->events[s->nevents - 1];
}

TEST(known_call_chain_symbolizes_to_its_functions)
{
    uint32_t id = chain_a();
    ASSERT_NE(id, 0);
    vt__snapshot_data *s = snapshot_with_stack(id);
    const vt_frame *f[64];
    size_t n = vt__snapshot_stack_frames(s, last_event(s)->stack, f, 64);
    ASSERT_GE(n, 4);
    ASSERT_STR_EQ(vt__snapshot_string(s, f[0]->function), "chain_c");
    ASSERT_STR_EQ(vt__snapshot_string(s, f[1]->function), "chain_b");
    ASSERT_STR_EQ(vt__snapshot_string(s, f[2]->function), "chain_a");
    ASSERT_STR_EQ(vt__snapshot_string(s, f[3]->function), "test_known_call_chain_symbolizes_to_its_functions");
    for (int i = 0; i < 3; i++) {
        ASSERT_STR_CONTAINS(vt__snapshot_string(s, f[i]->file), "test_stacks.c");
        ASSERT_EQ(vt__snapshot_string(s, f[i]->file)[0], '/');   /* absolute */
        /* normalized, and naming the real file */
        ASSERT(!strstr(vt__snapshot_string(s, f[i]->file), "/../"));
        ASSERT(!strstr(vt__snapshot_string(s, f[i]->file), "/./"));
        ASSERT_EQ(access(vt__snapshot_string(s, f[i]->file), R_OK), 0);
        ASSERT_GT(f[i]->line, 0);
        ASSERT_STR_CONTAINS(vt__snapshot_string(s, f[i]->module), "test_stacks");
        ASSERT_GT(strlen(vt__snapshot_string(s, f[i]->build_id)), 16);
        ASSERT_NE(f[i]->ip, 0);
        ASSERT_LT(f[i]->module_offset, f[i]->ip);
    }
    /* chain_c's frame names the line of the capture, chain_b's the call of
     * chain_c: consecutive functions, increasing lines upward in the file. */
    ASSERT_LT(f[0]->line, f[1]->line);
    ASSERT_LT(f[1]->line, f[2]->line);
    /* main and libc's start are there too (depth 48 is plenty). */
    int saw_main = 0;
    for (size_t i = 0; i < n && i < 64; i++)
        saw_main |= !strcmp(vt__snapshot_string(s, f[i]->function), "main");
    ASSERT(saw_main);
    vt__snapshot_free(s);
}

TEST(interning_shares_prefixes)
{
    uint32_t before = vt__stacks_count();
    const uint64_t s1[] = { 0x403, 0x402, 0x401 };   /* innermost first */
    const uint64_t s2[] = { 0x404, 0x402, 0x401 };
    const uint64_t s3[] = { 0x402, 0x401 };
    uint32_t a = vt__stack_intern_ips(s1, 3);
    ASSERT_EQ(vt__stacks_count() - before, 3);
    uint32_t b = vt__stack_intern_ips(s2, 3);
    ASSERT_EQ(vt__stacks_count() - before, 4);       /* one new leaf */
    ASSERT_NE(a, b);
    ASSERT_EQ(vt__stack_intern_ips(s1, 3), a);        /* same stack, same id */
    uint32_t c = vt__stack_intern_ips(s3, 2);        /* a prefix: no new node */
    ASSERT_EQ(vt__stacks_count() - before, 4);
    uint32_t pa, pb;
    uint64_t ipa, ipb;
    ASSERT_OK(vt__stacks_node(a, &pa, &ipa));
    ASSERT_OK(vt__stacks_node(b, &pb, &ipb));
    ASSERT_EQ(pa, pb);
    ASSERT_EQ(pa, c);
    ASSERT_EQ(ipa, 0x403);
    ASSERT_EQ(ipb, 0x404);

    /* Captured stacks: two leaves under one chain share every outer node. */
    uint32_t (*fns[2])(void) = { chain_a, chain_b2 };
    uint32_t ids[2];
    for (int i = 0; i < two; i++)       /* one call site for both */
        ids[i] = via(fns[i]);
    uint32_t x = ids[0], y = ids[1];
    vt__trace(.kind = VT_EV_ALLOC, .addr = 1, .req_size = 1, .size = 1, .stack = x);
    vt__trace(.kind = VT_EV_ALLOC, .addr = 2, .req_size = 1, .size = 1, .stack = y);
    vt__snapshot_data *s = NULL;
    ASSERT_OK(vt__snapshot_build(&s));
    const vt_frame *fx[64], *fy[64];
    size_t nx = vt__snapshot_stack_frames(s, s->events[s->nevents - 2].stack, fx, 64);
    size_t ny = vt__snapshot_stack_frames(s, s->events[s->nevents - 1].stack, fy, 64);
    ASSERT_GE(nx, 6);
    ASSERT_GE(ny, 5);
    /* The exported tree holds x's nodes plus y's frames below the last one
     * it shares with x (shared = the common outer part: main, libc, ...). */
    size_t shared = 0;
    while (shared < nx && shared < ny && fx[nx - 1 - shared]->ip == fy[ny - 1 - shared]->ip)
        shared++;
    ASSERT_GE(shared, 4);
    ASSERT_EQ(s->nstack_nodes - 1, nx + ny - shared);
    vt__snapshot_free(s);
}

TEST(repeated_stack_is_answered_by_the_thread_cache)
{
    uint32_t ids[101];
    uint64_t hits = vt__stacks_cache_hits();
    for (int i = 0; i < hundred_and_one; i++)   /* one call site */
        ids[i] = via(chain_a);
    uint32_t count = vt__stacks_count();
    for (int i = 1; i < 101; i++)
        ASSERT_EQ(ids[i], ids[0]);
    ASSERT_EQ(vt__stacks_cache_hits() - hits, 100);   /* all but the first */
    uint32_t again[10];
    for (int i = 0; i < ten; i++)
        again[i] = via(chain_a);
    ASSERT_EQ(again[9], again[0]);       /* another call site: one new stack */
    ASSERT_NE(again[0], ids[0]);
    ASSERT_GT(vt__stacks_count(), count);
    ASSERT_LE(vt__stacks_count(), count + 6); /* only frames below the new site */
}

static void *thread_capture(void *arg)
{
    *(uint32_t *)arg = chain_a();
    return NULL;
}

TEST(threads_intern_the_same_stack_to_one_id)
{
    /* Called from one thread function, so everything but the thread start
     * frames is shared; the same thread function twice gives one id. */
    uint32_t ids[4];
    pthread_t t[4];
    for (int i = 0; i < 4; i++)
        ASSERT_OK(pthread_create(&t[i], NULL, thread_capture, &ids[i]));
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    for (int i = 1; i < 4; i++)
        ASSERT_EQ(ids[i], ids[0]);
}

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

/* The same wrapper reached from two callers with equal frames: same sp, bp
 * and return address in the capture, different stacks. The remembered walk
 * must notice the changed return address further out. */
FRAME(wrapper, vt__stack_capture, 1)
FRAME(caller_one, wrapper, 7)
FRAME(caller_two, wrapper, 11)

TEST(remembered_walk_notices_a_different_caller)
{
    uint32_t (*fns[2])(void) = { caller_one, caller_two };
    uint32_t ids[200];
    for (int i = 0; i < 200; i++)
        ids[i] = via(fns[(i / 3) & 1]);    /* runs of three: learned, then switched */
    ASSERT_NE(ids[0], ids[3]);
    for (int i = 0; i < 200; i++)
        ASSERT_EQ(ids[i], ids[((i / 3) & 1) * 3]);
    vt__snapshot_data *s = NULL;
    vt__trace(.kind = VT_EV_ALLOC, .addr = 1, .req_size = 1, .size = 1, .stack = ids[0]);
    vt__trace(.kind = VT_EV_ALLOC, .addr = 1, .req_size = 1, .size = 1, .stack = ids[3]);
    ASSERT_OK(vt__snapshot_build(&s));
    const vt_frame *f[8];
    ASSERT_GE(vt__snapshot_stack_frames(s, s->events[s->nevents - 2].stack, f, 8), 2);
    ASSERT_STR_EQ(vt__snapshot_string(s, f[1]->function), "caller_one");
    ASSERT_GE(vt__snapshot_stack_frames(s, s->events[s->nevents - 1].stack, f, 8), 2);
    ASSERT_STR_EQ(vt__snapshot_string(s, f[1]->function), "caller_two");
    vt__snapshot_free(s);
}

/* Call sites in code built without frame pointers, as most libraries and
 * PyTorch are: rbp holds whatever the caller keeps there (here a counter
 * that changes with every call) and the frames in between save it on the
 * stack like any callee-saved register. call_with_rbp(fn, v) calls fn with
 * rbp = v; its CFI says where it keeps the caller's rbp, so it unwinds. */
uint32_t call_with_rbp(uint32_t (*fn)(void), uintptr_t rbp);
__asm__(".text\n"
        ".p2align 4\n"
        ".type call_with_rbp, @function\n"
        "call_with_rbp:\n"
        ".cfi_startproc\n"
        "    push %rbp\n"
        ".cfi_def_cfa_offset 16\n"
        ".cfi_offset %rbp, -16\n"
        "    mov %rsi, %rbp\n"
        "    call *%rdi\n"
        "    pop %rbp\n"
        ".cfi_restore %rbp\n"
        ".cfi_def_cfa_offset 8\n"
        "    ret\n"
        ".cfi_endproc\n"
        ".size call_with_rbp, .-call_with_rbp\n");

#define NSITES 40
#define SITE(k)                                                              \
    __attribute__((noinline)) static uint32_t site_##k(uintptr_t v)         \
    {                                                                        \
        uint32_t id = call_with_rbp(vt__stack_capture, v);                  \
        KEEP();                                                              \
        sink += k;                                                           \
        return id;                                                           \
    }
#define SITES(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12)   \
    X(13) X(14) X(15) X(16) X(17) X(18) X(19) X(20) X(21) X(22) X(23) X(24) X(25)    \
    X(26) X(27) X(28) X(29) X(30) X(31) X(32) X(33) X(34) X(35) X(36) X(37) X(38)    \
    X(39)
SITES(SITE)
#define SITE_PTR(k) site_##k,
static uint32_t (*const sites[NSITES])(uintptr_t) = { SITES(SITE_PTR) };

/* A few dozen call sites, interleaved, each reached with a different rbp
 * every time (what bench_alloc's replay loop does): each is learned once and
 * answered from memory from then on, not unwound or learned again. */
TEST(many_call_sites_with_changing_rbp_stay_remembered)
{
    enum { REPS = 50 };
    static uint32_t ids[REPS][NSITES];
    vt_stacks_stats a, b;
    vt__stacks_thread_stats(&a);
    for (int r = 0; r < REPS; r++)
        for (int k = 0; k < NSITES; k++)   /* counters, odd values, heap-like values */
            ids[r][k] = sites[k](r & 1 ? (uintptr_t)(r * NSITES + k)
                                       : (uintptr_t)0x5555000000 + 64u * (unsigned)(r + k));
    vt__stacks_thread_stats(&b);
    uint64_t learns = b.learns - a.learns, unwinds = b.unwinds - a.unwinds;
    uint64_t remembered = b.remembered - a.remembered;
    fprintf(stderr, "%d captures: %llu remembered, %llu unwound, %llu learned\n",
            REPS * NSITES, (unsigned long long)remembered, (unsigned long long)unwinds,
            (unsigned long long)learns);
    ASSERT_EQ(learns + unwinds + remembered, REPS * NSITES);
    ASSERT_LE(learns, NSITES + 4);      /* once per site */
    ASSERT_LE(unwinds, NSITES + 4);     /* its first capture */
    for (int k = 0; k < NSITES; k++) {
        ASSERT_NE(ids[0][k], 0);
        for (int r = 1; r < REPS; r++)
            ASSERT_EQ(ids[r][k], ids[0][k]);
        for (int j = 0; j < k; j++)
            ASSERT_NE(ids[0][j], ids[0][k]);
    }
    /* And the remembered stacks are the right ones. */
    vt__snapshot_data *s = snapshot_with_stack(ids[REPS - 1][7]);
    const vt_frame *f[8];
    ASSERT_GE(vt__snapshot_stack_frames(s, last_event(s)->stack, f, 8), 3);
    ASSERT_STR_EQ(vt__snapshot_string(s, f[0]->function), "call_with_rbp");
    ASSERT_STR_EQ(vt__snapshot_string(s, f[1]->function), "site_7");
    vt__snapshot_free(s);
}

/* One call site, always reached the same way. */
__attribute__((noinline)) static uint32_t site_3_from_here(void)
{
    uint32_t id = sites[3](99);
    KEEP();
    return id;
}

/* The functions of stack `id`, innermost first, joined by spaces. */
static void stack_functions(uint32_t id, char *out, size_t len)
{
    vt__snapshot_data *sd = snapshot_with_stack(id);
    const vt_frame *f[16];
    size_t nf = vt__snapshot_stack_frames(sd, last_event(sd)->stack, f, 16), o = 0;
    out[0] = '\0';
    for (size_t k = 0; k < nf && k < 16 && o < len; k++)
        o += (size_t)snprintf(out + o, len - o, "%s ", vt__snapshot_string(sd, f[k]->function));
    vt__snapshot_free(sd);
}

/* Out of line, so the loop below has one call of site_3_from_here. */
__attribute__((noinline)) static void unload_when(int i, int when)
{
    if (i == when)
        vt__trace_modules_changed();
    KEEP();
}

TEST(unloading_a_library_forgets_the_remembered_walks)
{
    /* One loop, so that every capture has the same stack: the walk is
     * learned, answered from memory, then a dlclose (the hook calls
     * vt__trace_modules_changed) makes the next capture unwind again,
     * through libunwind's flushed cache, to the same stack. */
    enum { N = 12, CHANGE = 10 };
    uint32_t ids[N];
    vt_stacks_stats st[N + 1];
    for (int i = 0; i < N; i++) {
        unload_when(i, CHANGE);
        vt__stacks_thread_stats(&st[i]);
        ids[i] = site_3_from_here();
    }
    vt__stacks_thread_stats(&st[N]);
    ASSERT_EQ(st[CHANGE].remembered - st[CHANGE - 1].remembered, 1);
    ASSERT_EQ(st[CHANGE + 1].remembered - st[CHANGE].remembered, 0);
    ASSERT_EQ(st[CHANGE + 1].unwinds - st[CHANGE].unwinds, 1);
    char first[1024];
    stack_functions(ids[0], first, sizeof first);
    ASSERT_STR_CONTAINS(first, "call_with_rbp site_3 site_3_from_here ");
    for (int i = 1; i < N; i++)
        ASSERT_EQ(ids[i], ids[0]);
}

__attribute__((noinline)) static uint32_t twice_at_depth(int n, uint32_t *second)
{
    if (n) {
        uint32_t id = twice_at_depth(n - 1, second);
        KEEP();
        sink++;
        return id;
    }
    uint32_t ids[2];
    for (int i = 0; i < two; i++)      /* one call site, twice */
        ids[i] = vt__stack_capture();
    *second = ids[1];
    return ids[0];
}

/* The learner's worst case: every stack comes back once right away (so it
 * is learned) and then not before it has been forgotten. Learning, ~50
 * unwinds' worth, is rationed: after the first burst, at most one learn per
 * LEARN_COST (256) unwinds. */
TEST(stacks_that_never_come_back_in_time_are_not_learned_over_and_over)
{
    enum { KEYS = 300, ROUNDS = 4 };
    vt_stacks_stats a, b;
    vt__stacks_thread_stats(&a);
    for (int r = 0; r < ROUNDS; r++)
        for (int n = 0; n < KEYS; n++) {
            uint32_t second, first = twice_at_depth(n, &second);
            ASSERT_NE(first, 0);
            ASSERT_EQ(second, first);
        }
    vt__stacks_thread_stats(&b);
    uint64_t learns = b.learns - a.learns, unwinds = b.unwinds - a.unwinds;
    fprintf(stderr, "%d captures: %llu remembered, %llu unwound, %llu learned\n",
            2 * KEYS * ROUNDS, (unsigned long long)(b.remembered - a.remembered),
            (unsigned long long)unwinds, (unsigned long long)learns);
    ASSERT_EQ(learns + unwinds + (b.remembered - a.remembered), 2 * KEYS * ROUNDS);
    ASSERT_LE(learns, 64 + unwinds / 256 + 1);
}

__attribute__((noinline)) static uint32_t deep(int n)
{
    uint32_t id = n ? deep(n - 1) : vt__stack_capture();
    KEEP();
    sink++;
    return id;
}

__attribute__((noinline)) static uint32_t deep150(void) { return deep(150); }

/* stack_depth:200: more stack words than a remembered walk holds */
TEST(deep_stacks_beyond_the_remembered_words_still_agree)
{
    uint32_t ids[10];
    for (int i = 0; i < ten; i++)
        ids[i] = via(deep150);
    for (int i = 1; i < 10; i++)
        ASSERT_EQ(ids[i], ids[0]);
    vt__snapshot_data *s = snapshot_with_stack(ids[0]);
    const vt_frame *f[256];
    size_t n = vt__snapshot_stack_frames(s, last_event(s)->stack, f, 256);
    ASSERT_GE(n, 151 + 3);
    ASSERT_LE(n, 200);
    for (int i = 0; i <= 150; i++)
        ASSERT_STR_EQ(vt__snapshot_string(s, f[i]->function), "deep");
    vt__snapshot_free(s);
}

/* A C function under a C++ name, as PyTorch's frames are. */
uint32_t mangled_capture(void) __asm__("_ZN2vt4test7captureEv");
__attribute__((noinline)) uint32_t mangled_capture(void)
{
    uint32_t id = vt__stack_capture();
    KEEP();
    sink += 13;
    return id;
}

TEST(cxx_names_are_demangled_when_libstdcxx_is_loaded)
{
    if (!dlopen("libstdc++.so.6", RTLD_NOW | RTLD_GLOBAL)) {
        fprintf(stderr, "libstdc++.so.6 not found: nothing to test\n");
        return;
    }
    vt__snapshot_data *s = snapshot_with_stack(mangled_capture());
    const vt_frame *f[2];
    ASSERT_GE(vt__snapshot_stack_frames(s, last_event(s)->stack, f, 2), 1);
    ASSERT_STR_EQ(vt__snapshot_string(s, f[0]->function), "vt::test::capture()");
    vt__snapshot_free(s);
}

/* ---- many threads reaching the same fresh deep paths at once ------------ */

#define RACE_THREADS 8
#define RACE_ROUNDS 24
#define RACE_PATHS 48
#define RACE_DEPTH 64
static uint32_t race_ids[RACE_ROUNDS][RACE_THREADS][RACE_PATHS];
static pthread_barrier_t race_barrier;

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

/* Threads that lose an insertion race keep the node id they reserved; reused
 * under a parent with a larger id it broke the exporter (parents must precede
 * children) and overran its arrays. Lock-free part only: runs under TSan. */
TEST(racing_threads_on_fresh_deep_paths_keep_parents_before_children)
{
    pthread_t t[RACE_THREADS];
    ASSERT_OK(pthread_barrier_init(&race_barrier, NULL, RACE_THREADS));
    for (uintptr_t i = 0; i < RACE_THREADS; i++)
        ASSERT_OK(pthread_create(&t[i], NULL, race_thread, (void *)i));
    for (int i = 0; i < RACE_THREADS; i++)
        pthread_join(t[i], NULL);
    pthread_barrier_destroy(&race_barrier);

    for (unsigned r = 0; r < RACE_ROUNDS; r++)
        for (unsigned p = 0; p < RACE_PATHS; p++) {
            uint32_t id = race_ids[r][0][p];
            ASSERT_NE(id, 0);
            ASSERT_EQ(id & VT_STACK_TRUNCATED, 0);
            for (int i = 1; i < RACE_THREADS; i++)
                ASSERT_EQ(race_ids[r][i][p], id);
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
            vt__trace(.kind = VT_EV_ALLOC, .addr = 0x1000 + 16 * (r * RACE_PATHS + p),
                      .req_size = 1, .size = 1, .stack = race_ids[r][0][p]);
        }

    vt__snapshot_data *s = snapshot_through_a_file();
    ASSERT_EQ(s->nevents, RACE_ROUNDS * RACE_PATHS);
    ASSERT_EQ(distinct_event_stacks(s), RACE_ROUNDS * RACE_PATHS);
    for (size_t i = 0; i < s->nevents; i++) {
        unsigned k = (unsigned)((s->events[i].addr - 0x1000) / 16);
        uint64_t want[RACE_DEPTH];
        race_path(k / RACE_PATHS, k % RACE_PATHS, want);
        const vt_frame *f[RACE_DEPTH + 1];
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
    const vt_frame *f[8];
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

TEST(racing_threads_unwinding_fresh_deep_stacks_export_them_all)
{
    pthread_t t[UNWIND_THREADS];
    ASSERT_OK(pthread_barrier_init(&race_barrier, NULL, UNWIND_THREADS));
    for (uintptr_t i = 0; i < UNWIND_THREADS; i++)
        ASSERT_OK(pthread_create(&t[i], NULL, unwind_thread, (void *)i));
    for (int i = 0; i < UNWIND_THREADS; i++)
        ASSERT_OK(pthread_join(t[i], NULL));

    /* Every thread got one id per path (its own thread start frames are the
     * same code as the others'), all distinct. */
    for (unsigned r = 0; r < UNWIND_ROUNDS; r++)
        for (unsigned p = 0; p < UNWIND_PATHS; p++) {
            uint32_t id = unwind_ids[r][0][p];
            ASSERT_NE(id, 0);
            for (int i = 1; i < UNWIND_THREADS; i++)
                ASSERT_EQ(unwind_ids[r][i][p], id);
            for (uint32_t up = id, parent; up != 0; up = parent) {
                uint64_t ip;
                ASSERT_OK(vt__stacks_node(up, &parent, &ip));
                ASSERT_LT(parent, up);
            }
            vt__trace(.kind = VT_EV_ALLOC, .addr = 0x1000 + 16 * (r * UNWIND_PATHS + p),
                      .req_size = 1, .size = 1, .stack = id);
        }

    vt__snapshot_data *s = snapshot_through_a_file();
    ASSERT_EQ(s->nevents, UNWIND_ROUNDS * UNWIND_PATHS);
    ASSERT_EQ(distinct_event_stacks(s), UNWIND_ROUNDS * UNWIND_PATHS);
    for (size_t i = 0; i < s->nevents; i++) {
        unsigned k = (unsigned)((s->events[i].addr - 0x1000) / 16), d;
        uint64_t bits;
        unwind_path(k / UNWIND_PATHS, k % UNWIND_PATHS, &d, &bits);
        const vt_frame *f[64];
        ASSERT_GE(vt__snapshot_stack_frames(s, s->events[i].stack, f, 64), d + 2);
        /* innermost first: the frame of bit d ... the frame of bit 0 */
        for (unsigned j = 0; j <= d; j++)
            ASSERT_STR_EQ(vt__snapshot_string(s, f[j]->function),
                          (bits >> (d - j)) & 1 ? "go_left" : "go_right");
        ASSERT_STR_EQ(vt__snapshot_string(s, f[d + 1]->function), "unwind_thread");
    }
    vt__snapshot_free(s);
}

/* stack_depth:4 */
TEST(depth_limits_the_frames)
{
    uint32_t id = chain_a();
    vt__snapshot_data *s = snapshot_with_stack(id);
    const vt_frame *f[64];
    ASSERT_EQ(vt__snapshot_stack_frames(s, last_event(s)->stack, f, 64), 4);
    ASSERT_STR_EQ(vt__snapshot_string(s, f[0]->function), "chain_c");
    vt__snapshot_free(s);
}

/* free_stacks:0 */
TEST(free_stacks_off_gives_no_free_stack)
{
    ASSERT_NE(vt__stack_capture(), 0);
    ASSERT_EQ(vt__stack_capture_free(), 0);
}

/* stack_depth:0 */
TEST(depth_zero_captures_nothing)
{
    ASSERT_EQ(chain_a(), 0);
    ASSERT_EQ(vt__stack_capture_free(), 0);
}

/* A program without Python (this one): stacks:all finds no interpreter, reads
 * no Python frames, and captures take the native path alone (same ids, same
 * caches, no Python capture counted). */
TEST(a_process_without_python_captures_native_stacks_only)
{
    ASSERT_EQ(vt__config()->stacks, VT_STACKS_ALL);
    ASSERT_EQ(vt__stacks_python_minor(), 0);
    uint32_t ids[2];
    for (int i = 0; i < two; i++)      /* one call site, twice */
        ids[i] = chain_a();
    uint32_t a = ids[0];
    ASSERT_NE(a, 0);
    ASSERT_EQ(a, ids[1]);
    vt_stacks_stats st;
    vt__stacks_thread_stats(&st);
    ASSERT_EQ(st.python, 0);
    ASSERT_EQ(st.python_merges, 0);
    ASSERT_GE(st.remembered + st.unwinds + st.learns, 2);
    uint32_t parent;
    uint64_t ip;
    for (uint32_t id = a; id; id = parent) {
        ASSERT_EQ(vt__stacks_node(id, &parent, &ip), 0);
        ASSERT_EQ(ip & VT_IP_SYNTHETIC, 0);
    }
}

/* The newest pyenv libpython3.M of a version the recorder reads, or NULL. */
static const char *pyenv_libpython(char *out, size_t len, unsigned *minor)
{
    const char *root = getenv("PYENV_ROOT") ? getenv("PYENV_ROOT") : "/root/.pyenv";
    for (unsigned m = 13; m >= 10; m--) {
        char pattern[512];
        glob_t g;
        snprintf(pattern, sizeof pattern, "%s/versions/3.%u.*/lib/libpython3.%u.so.1.0", root,
                 m, m);
        if (glob(pattern, 0, NULL, &g) == 0 && g.gl_pathc > 0) {
            snprintf(out, len, "%s", g.gl_pathv[g.gl_pathc - 1]);
            globfree(&g);
            *minor = m;
            return out;
        }
        globfree(&g);
    }
    return NULL;
}

static uint32_t from_python;

/* Called by Python through ctypes: an allocation made under Python frames. */
static uint32_t allocate_for_python(void)
{
    from_python = chain_a();
    return from_python;
}

static bool stack_has_synthetic_frame(uint32_t id)
{
    uint32_t parent;
    uint64_t ip;
    for (; id; id = parent) {
        ASSERT_EQ(vt__stacks_node(id, &parent, &ip), 0);
        if (ip & VT_IP_SYNTHETIC)
            return true;
    }
    return false;
}

/* A program that embeds Python loads libpython after it has allocated: its
 * allocations before carry native frames only, those made under Python code
 * after carry the Python frames too. The program initializes Python itself;
 * the recorder only looks symbols up. The dlopen hook of libvramtrace calls
 * vt__trace_modules_loaded; this test binary has no hooks, so it calls it
 * where the hook would. */
TEST(python_loaded_after_the_first_allocation_gives_python_frames_from_then_on)
{
    char lib[512], home[512], code[1024];
    unsigned minor = 0;
    if (!pyenv_libpython(lib, sizeof lib, &minor))
        SKIP("no libpython3.10-3.13 under $PYENV_ROOT/versions (pyenv builds them shared)");
    ASSERT_EQ(vt__config()->stacks, VT_STACKS_ALL);
    uint32_t before = chain_a();
    ASSERT_NE(before, 0);
    ASSERT_EQ(vt__stacks_python_minor(), 0);
    ASSERT(!stack_has_synthetic_frame(before));

    vt__trace_modules_loaded();            /* the dlopen hook, before the load */
    void *h = dlopen(lib, RTLD_NOW | RTLD_GLOBAL);
    ASSERT(h != NULL);
    vt__trace_modules_loaded();            /* the dlsym hook, for each lookup */
    void (*init)(int) = NULL;
    int (*run)(const char *) = NULL;
    *(void **)&init = dlsym(h, "Py_InitializeEx");
    *(void **)&run = dlsym(h, "PyRun_SimpleString");
    ASSERT(init != NULL && run != NULL);
    /* Python finds its library from its home, not from this program's path. */
    snprintf(home, sizeof home, "%s", lib);
    *strstr(home, "/lib/libpython") = '\0';
    setenv("PYTHONHOME", home, 1);
    init(0);
    snprintf(code, sizeof code,
             "import ctypes\n"
             "callback = ctypes.CFUNCTYPE(ctypes.c_uint32)(%lu)\n"
             "def allocate_from_python():\n"
             "    return callback()\n"
             "allocate_from_python()\n",
             (unsigned long)(uintptr_t)allocate_for_python);
    ASSERT_EQ(run(code), 0);

    ASSERT_EQ(vt__stacks_python_minor(), minor);
    ASSERT_NE(from_python, 0);
    ASSERT(stack_has_synthetic_frame(from_python));
    vt__snapshot_data *s = snapshot_with_stack(from_python);
    const vt_frame *f[64];
    size_t n = vt__snapshot_stack_frames(s, last_event(s)->stack, f, 64);
    int chain = -1, python = -1;
    for (size_t i = 0; i < n && i < 64; i++) {
        const char *fn = vt__snapshot_string(s, f[i]->function);
        if (chain < 0 && !strcmp(fn, "chain_a"))
            chain = (int)i;
        if (python < 0 && !strcmp(fn, "allocate_from_python"))
            python = (int)i;
    }
    ASSERT_GE(chain, 0);
    ASSERT_GT(python, chain);              /* the Python caller is further out */
    ASSERT_STR_EQ(vt__snapshot_string(s, f[python]->file), "<string>");
    ASSERT_EQ(f[python]->line, 4);         /* return callback() */
    vt__snapshot_free(s);
    /* The stack recorded before Python came stays native. */
    ASSERT(!stack_has_synthetic_frame(before));
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
    const vt_frame *f[8];
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

/* ---- the symbol index gives libdwfl's names ------------------------------ */

typedef struct symcheck {
    size_t compared, differed, modules, local_named;
    char first[512];
} symcheck;

/* One address: the index and dwfl_module_addrinfo must agree on the name
 * (or both have none) and on the offset. */
static void compare_at(symcheck *k, const vt__symindex *ix, Dwfl_Module *mod, uint64_t pc)
{
    uint64_t off_ix = 0;
    GElf_Off off_dw = 0;
    GElf_Sym sym;
    const char *a = vt__symindex_lookup(ix, mod, pc, &off_ix);
    const char *b = dwfl_module_addrinfo(mod, pc, &off_dw, &sym, NULL, NULL, NULL);
    k->compared++;
    bool same = (a == NULL) == (b == NULL) && (!a || (!strcmp(a, b) && off_ix == off_dw));
    if (!same && k->differed++ == 0)
        snprintf(k->first, sizeof k->first, "%#llx: index %s+%llu, libdwfl %s+%llu",
                 (unsigned long long)pc, a ? a : "(none)", (unsigned long long)off_ix,
                 b ? b : "(none)", (unsigned long long)off_dw);
    if (b && GELF_ST_BIND(sym.st_info) == STB_LOCAL)
        k->local_named++;
}

static int check_module(Dwfl_Module *mod, void **user, const char *name, Dwarf_Addr start,
                        void *arg)
{
    (void)user, (void)name, (void)start;
    symcheck *k = arg;
    int n = dwfl_module_getsymtab(mod);
    if (n <= 1)
        return DWARF_CB_OK;
    vt__symindex *ix = vt__symindex_build(mod);
    ASSERT(ix != NULL);
    k->modules++;
    /* every function of small modules, an even sample of big ones (libc's
     * thousands): its first byte, middle, last byte and the byte after it */
    int stride = n > 4000 ? n / 4000 : 1;
    for (int i = 1; i < n; i += stride) {
        GElf_Sym sym;
        GElf_Addr addr = 0;
        const char *sname = dwfl_module_getsym_info(mod, i, &sym, &addr, NULL, NULL, NULL);
        if (!sname || GELF_ST_TYPE(sym.st_info) != STT_FUNC || sym.st_shndx == SHN_UNDEF)
            continue;
        compare_at(k, ix, mod, addr);
        if (sym.st_size > 0) {
            compare_at(k, ix, mod, addr + sym.st_size / 2);
            compare_at(k, ix, mod, addr + sym.st_size - 1);
        }
        compare_at(k, ix, mod, addr + sym.st_size);
    }
    vt__symindex_free(ix);
    return DWARF_CB_OK;
}

TEST(symbol_index_names_what_libdwfl_names)
{
    static const Dwfl_Callbacks callbacks = {
        .find_elf = dwfl_linux_proc_find_elf,
        .find_debuginfo = dwfl_standard_find_debuginfo,
    };
    Dwfl *dwfl = dwfl_begin(&callbacks);
    ASSERT(dwfl != NULL);
    dwfl_report_begin(dwfl);
    ASSERT_EQ(dwfl_linux_proc_report(dwfl, getpid()), 0);
    ASSERT_EQ(dwfl_report_end(dwfl, NULL, NULL), 0);
    symcheck k = { 0 };
    ASSERT_EQ(dwfl_getmodules(dwfl, check_module, &k, 0), 0);
    dwfl_end(dwfl);
    fprintf(stderr, "%zu addresses in %zu modules compared (%zu named by a local symbol), "
            "%zu differed%s%s\n", k.compared, k.modules, k.local_named, k.differed,
            k.differed ? "; first: " : "", k.first);
    ASSERT_GE(k.modules, 3);         /* this program, libc, libdw at least */
    ASSERT_GE(k.compared, 2000);
    ASSERT_GE(k.local_named, 100);   /* this program's static functions */
    ASSERT_EQ(k.differed, 0);
}

TEST_MAIN()
