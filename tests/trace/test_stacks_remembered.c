/*
 * tests/trace/test_stacks_remembered.c - the walks a capture remembers: a
 * call site learned once is answered from memory, whatever rbp holds, until
 * its caller changes or a library is unloaded; learning is rationed for
 * stacks that never come back in time; deep stacks still agree.
 *
 * Built with -fno-omit-frame-pointer, as every recorder test.
 */
#include "rec_snap.h"
#include "recorder.h"

#include <string.h>

#include "../harness.h"
#include "stacks_test_util.h"

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
    const vt__frame *f[8];
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
    vt__stack_captures a, b;
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
    const vt__frame *f[8];
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
    const vt__frame *f[16];
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
    vt__stack_captures st[N + 1];
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
    vt__stack_captures a, b;
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
    const vt__frame *f[256];
    size_t n = vt__snapshot_stack_frames(s, last_event(s)->stack, f, 256);
    ASSERT_GE(n, 151 + 3);
    ASSERT_LE(n, 200);
    for (int i = 0; i <= 150; i++)
        ASSERT_STR_EQ(vt__snapshot_string(s, f[i]->function), "deep");
    vt__snapshot_free(s);
}

TEST_MAIN()
