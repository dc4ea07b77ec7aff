/* tests/check/test_check_growth.c - GROWTH (check_growth.c): a call site
 * whose live bytes at each mark grow step over step, and the fit that judges
 * such a series (vt__check_growth_fit, which `vramtrace compare` shares). */
#include "check_fixture.h"

#define BUF 0x7fa000000000ull   /* the growing site's allocations */
#define ACT 0x7fb000000000ull   /* each step's activations */

static uint32_t st_weights, st_act_native, st_buf;

/* A native training loop of `steps` marked steps: weights made once,
 * activations made and freed in every step, and one call site holding
 * keep(i) bytes at the end of step i: in one buffer made again at each new
 * size (`realloc`), or in one allocation more per step for what it adds
 * (keep must not shrink then). */
typedef uint64_t (*keep_fn)(int step);

static void loop(synth *y, int steps, keep_fn keep, int realloc)
{
    synth_init(y);
    st_weights = synth_stack(y, "init_weights", "main", NULL);
    st_act_native = synth_stack(y, "forward", "train_step", "main", NULL);
    st_buf = synth_stack(y, "append_history", "train_step", "main", NULL);
    synth_alloc(y, W_ADDR, 8 * MiB, st_weights);
    uint64_t held = 0;
    int nbuf = 0;
    for (int i = 1; i <= steps; i++) {
        synth_tick(y, 100000000);
        synth_alloc(y, ACT, 4 * MiB, st_act_native);
        synth_free(y, ACT);
        uint64_t want = keep(i);
        if (realloc) {
            /* one buffer, made again at its new size (torch.cat onto it) */
            if (nbuf)
                synth_free(y, BUF + (uint64_t)(nbuf - 1) * 0x10000000ull);
            if (want)
                synth_alloc(y, BUF + (uint64_t)nbuf++ * 0x10000000ull, want, st_buf);
        } else if (want > held) {   /* keeps what it had, adds the rest */
            synth_alloc(y, BUF + (uint64_t)nbuf++ * 0x1000000ull, want - held, st_buf);
        }
        held = want;
        synth_mark(y, "step");
    }
}

/* r's one finding, a GROWTH one of `per_step` bytes a step over `nallocs`
 * allocations. */
static const vt__check_finding *the_growth_finding(const vt__check_report *r, uint64_t per_step,
                                                   size_t nallocs)
{
    const vt__check_finding *f = only_finding_of(r, VT_CHECK_RULE_GROWTH);
    ASSERT_EQ(f->growth_per_step, per_step);
    ASSERT_EQ(f->nallocs, nallocs);
    return f;
}

/* The fit of the series v[0..n), which must succeed. */
static vt__check_growth fit(const uint64_t *v, size_t n)
{
    vt__check_growth g;
    ASSERT_EQ(vt__check_growth_fit(v, n, &g), 0);
    return g;
}

static uint64_t one_mib_per_step(int i) { return (uint64_t)i * MiB; }
static uint64_t flat(int i) { return i ? MiB : 0; }
static uint64_t warm_up_then_flat(int i) { return (uint64_t)(i < 4 ? i : 4) * MiB; }
static uint64_t long_warm_up(int i) { return (uint64_t)(i < 6 ? i : 6) * MiB; }
static uint64_t one_jump(int i) { return i <= 6 ? MiB : 6 * MiB; }
static uint64_t emptied_in_cycles(int i) { return (uint64_t)((i - 1) % 4 + 1) * MiB; }

TEST(a_buffer_reallocated_larger_every_step_is_flagged_with_its_growth_per_step)
{
    synth y;
    loop(&y, 12, one_mib_per_step, 1);
    vt__check_report *r = check(&y, NULL);
    ASSERT(r->rules_run & VT_CHECK_RULE_GROWTH);
    /* never-freed and outlier see nothing */
    const vt__check_finding *f = the_growth_finding(r, MiB, 1);
    ASSERT_EQ(f->growth_first_mark, 3);            /* marks 1..3 (a quarter): warm-up */
    ASSERT_EQ(f->growth_last_mark, 11);
    ASSERT_EQ(f->growth_first_bytes, 4 * MiB);
    ASSERT_EQ(f->growth_last_bytes, 12 * MiB);
    ASSERT_EQ(f->bytes, 8 * MiB);
    ASSERT_EQ(f->alloc_stack, st_buf);
    char *text = render(r, &y, 0);
    ASSERT_STR_CONTAINS(text, "[growth]");
    ASSERT_STR_CONTAINS(text, "grows 1 MiB per step: its live bytes at each step's end (mark) "
                              "went from 4 MiB at mark 4 to 12 MiB at mark 12 "
                              "(marks 1..3 not judged: warm-up)");
    ASSERT_STR_CONTAINS(text, "at append_history");
    /* blocks without tensors (PyTorch observed, no track()): nothing was
     * dropped, nothing is known of who holds them */
    ASSERT_STR_CONTAINS(text, "held by: not known (no tensor was recorded on it)");
    ASSERT(!strstr(text, "every tensor on it was dropped"));
    free(text);
    text = render(r, &y, 1);
    ASSERT_STR_CONTAINS(text, "\"rule\":\"growth\"");
    ASSERT_STR_CONTAINS(text, "\"growth\":{\"per_step\":1048576,\"first_mark\":3,\"last_mark\":11,"
                              "\"first_bytes\":4194304,\"last_bytes\":12582912}");
    free(text);
    vt__check_report_free(r);
    synth_fini(&y);
}

TEST(a_site_keeping_more_every_step_and_freeing_it_at_the_end_is_flagged)
{
    synth y;
    loop(&y, 10, one_mib_per_step, 0);
    for (int k = 0; k < 10; k++)   /* cleared before the end: never-freed does not see it */
        synth_free(&y, BUF + (uint64_t)k * 0x1000000ull);
    vt__check_report *r = check(&y, NULL);
    the_growth_finding(r, MiB, 10);
    vt__check_report_free(r);
    synth_fini(&y);
}

TEST(memory_never_freed_step_after_step_stays_one_never_freed_finding)
{
    synth y;
    loop(&y, 10, one_mib_per_step, 0);
    vt__check_report *r = check(&y, NULL);
    ASSERT(r->rules_run & VT_CHECK_RULE_GROWTH);
    /* one finding per storage: growth judges what the others left */
    only_finding_of(r, VT_CHECK_RULE_NEVER_FREED);
    vt__check_report_free(r);
    synth_fini(&y);
}

static void assert_loop_is_clean(keep_fn keep, int realloc, int steps)
{
    synth y;
    loop(&y, steps, keep, realloc);
    vt__check_report *r = check(&y, NULL);
    ASSERT(r->rules_run & VT_CHECK_RULE_GROWTH);
    assert_report_clean(r, &y);
}

TEST(a_flat_program_is_clean)
{
    assert_loop_is_clean(flat, 1, 12);
}

TEST(a_warm_up_then_flat_is_clean)
{
    /* caches fill in the first steps: three steps, then the same */
    assert_loop_is_clean(warm_up_then_flat, 1, 12);
    /* a warm-up longer than the quarter of the marks the fit skips */
    assert_loop_is_clean(long_warm_up, 1, 12);
}

TEST(a_one_time_jump_and_a_cache_emptied_in_cycles_are_clean)
{
    assert_loop_is_clean(one_jump, 1, 12);
    assert_loop_is_clean(emptied_in_cycles, 1, 16);
}

TEST(growth_needs_enough_marks_and_says_so_when_asked_without)
{
    assert_rule_is_named("growth", VT_CHECK_RULE_GROWTH);
    synth y;
    loop(&y, VT_CHECK_GROWTH_MIN_MARKS - 1, one_mib_per_step, 1);
    vt__check_report *r = check(&y, NULL);
    ASSERT_EQ(r->rules_run & VT_CHECK_RULE_GROWTH, 0);
    ASSERT_EQ(r->rules_need_steps & VT_CHECK_RULE_GROWTH, 0);   /* automatic: silent */
    vt__check_report_free(r);
    r = check_rules(&y, VT_CHECK_RULE_GROWTH);
    ASSERT_EQ(r->rules_run, 0);
    ASSERT_EQ(r->rules_need_steps, VT_CHECK_RULE_GROWTH);
    assert_report_clean(r, &y);
}

TEST(the_fit_is_robust_to_odd_steps_and_judges_only_after_the_warm_up)
{
    uint64_t few[4] = { 1, 2, 3, 4 };
    vt__check_growth g = fit(few, 4);
    ASSERT_EQ(g.judged, 0);
    ASSERT_EQ(g.grows, 0);
    /* a leak of 100 per step with every other step 40 more */
    uint64_t noisy[12];
    for (int i = 0; i < 12; i++)
        noisy[i] = 1000 + 100 * (uint64_t)i + (i % 2 ? 40 : 0);
    g = fit(noisy, 12);
    ASSERT_EQ(g.judged, 1);
    ASSERT_EQ(g.first, 3);
    ASSERT_EQ(g.last, 11);
    ASSERT_EQ(g.grows, 1);
    ASSERT(g.per_step >= 90 && g.per_step <= 110);
    /* a big warm-up (optimizer state at the first step), flat after it */
    uint64_t warm[8] = { 10, 5000, 5000, 5000, 5000, 5000, 5000, 5000 };
    g = fit(warm, 8);
    ASSERT_EQ(g.per_step, 0);
    ASSERT_EQ(g.grows, 0);
    /* shrinking is not growth */
    uint64_t down[8] = { 80, 70, 60, 50, 40, 30, 20, 10 };
    g = fit(down, 8);
    ASSERT_EQ(g.per_step, -10);
    ASSERT_EQ(g.grows, 0);
    /* a long series: the slope from at most 256 evenly spaced ends */
    static uint64_t longer[5000];
    for (int i = 0; i < 5000; i++)
        longer[i] = 7 * (uint64_t)i;
    g = fit(longer, 5000);
    ASSERT_EQ(g.per_step, 7);
    ASSERT_EQ(g.grows, 1);
}

/* A generation's KV cache filled over each request (48 KiB a decode step,
 * 16 steps, 0.3 s) and freed at its end, seen at the ends of 20 windows of
 * 0.163 s (a trace without marks): the ends fall at other phases of each
 * request, and here, by chance, the least of each judged third rises (0,
 * 48, 240 KiB) under a rising slope: the floors alone called it growth (a
 * fixed twin flagged so once, hf_decode under plain `vramtrace run`). Each
 * third spreads over most of a request's cache, more than twice what its
 * floor rose: clean. The same cycles with 96 KiB kept from each request
 * still grow. */
TEST(a_cache_filled_and_emptied_per_request_is_no_growth_at_any_phase)
{
    static const uint64_t kib[20] = { 480, 144, 528, 192, 624, 240, 672, 336, 0,   384,
                                      48,  480, 96,  528, 192, 576, 240, 672, 288, 720 };
    uint64_t v[20], kept[20];
    for (int i = 0; i < 20; i++) {
        v[i] = kib[i] * 1024;
        /* 3.26 s / 20 windows, requests of 0.3 s; started 34 ms before */
        kept[i] = v[i] + (uint64_t)((34 + (i + 1) * 163) / 300) * 96 * 1024;
    }
    vt__check_growth g = fit(v, 20);
    ASSERT_EQ(g.judged, 1);
    ASSERT(g.per_step > 0);                    /* the slope alone says it grows */
    ASSERT_EQ(g.grows, 0);
    ASSERT_EQ(fit(kept, 20).grows, 1);
}

/* Hooks that pile up on a parameter, each keeping its step's mask, every
 * mask used at every backward: nothing lingers, the line's live bytes grow,
 * and the finding shows what holds its storage, as a lingering one's does. */
TEST(a_growing_line_is_shown_with_what_holds_its_storages)
{
    synth y;
    setup(&y);
    synth_holder(&y, 8000, "Program");
    synth_held(&y, 8001, "OrderedDict", 8000, ".hooks");
    for (int i = 1; i <= 8; i++) {
        step(&y, i);
        synth_new_tensor(&y, 8100 + (uint64_t)i, 0x7f5000000000ull + (uint64_t)i * 2 * MiB, MiB,
                         "mask = torch.rand(n) (train.py:31, aten.rand out[0])", st_fwd);
        synth_ref(&y, 8001, 8100 + (uint64_t)i, item_label(i - 1));
        for (int k = 1; k <= i; k++)
            synth_use(&y, 8100 + (uint64_t)k);
    }
    vt__check_report *r = check(&y, NULL);
    const vt__check_finding *g = NULL;
    for (size_t i = 0; i < r->nfindings; i++)
        if (r->findings[i].rule == VT_CHECK_RULE_GROWTH)
            g = &r->findings[i];
    ASSERT(g != NULL);
    ASSERT(g->npaths >= 1);
    assert_rendered_says(r, &y, 0, "held by (at the end):");
    assert_rendered_says(r, &y, 0, "Program.hooks \xe2\x86\x92 OrderedDict[0] \xe2\x86\x92 tensor 'mask");
    vt__check_report_free(r);
    synth_fini(&y);
}

TEST(storages_a_small_view_pins_are_not_growth_as_well)
{
    /* losses.append(loss.detach()) of F.mse_loss, whose 4-byte scalar keeps
     * the storage of the unreduced errors (1 MiB here): each step's storage
     * pinned by the kept view, its owner dropped. One finding a storage:
     * PINNED's, and no GROWTH of the same storages besides (before, the site
     * grew by them: 102 MiB said of 60 on a real run). */
    synth y;
    setup(&y);
    synth_holder(&y, 8000, "module __main__");
    synth_held(&y, 8001, "list", 8000, ".losses");
    for (int i = 1; i <= 12; i++) {
        step(&y, i);
        uint64_t own = 8100 + (uint64_t)(2 * i), view = own + 1;
        uint64_t addr = 0x7f5000000000ull + (uint64_t)i * 2 * MiB;
        synth_made(&y, own, addr, MiB, "loss = F.mse_loss(out, y) (train.py:12)", st_fwd);
        synth_tensor(&y, view, addr, 4, own, "losses.append(loss.detach()) (train.py:14)");
        synth_ref(&y, 8001, view, item_label(i - 1));
        synth_drop(&y, own);
    }
    step(&y, 13);   /* torch.stack(losses) at the end */
    for (int i = 1; i <= 12; i++)
        synth_use(&y, 8100 + (uint64_t)(2 * i) + 1);
    vt__check_report *r = check(&y, NULL);
    ASSERT_GT(r->nfindings, 5);
    ASSERT_EQ(findings_of(r, VT_CHECK_RULE_PINNED), r->nfindings);
    uint64_t bytes = 0;
    for (size_t i = 0; i < r->nfindings; i++)
        bytes += r->findings[i].bytes;
    ASSERT_EQ(bytes, r->nfindings * MiB);
    vt__check_report_free(r);
    synth_fini(&y);
}

/* A replay memory of 40 transitions, full, in a ring that overwrote the
 * run's start: the window (24 steps) begins with 40 transitions made before
 * it, which the tracker declares again (their tensors made at `made`); each
 * step makes one (its block at `observe`, its tensor made at `made`),
 * evicts the oldest, those from before the window first (a free without its
 * ALLOC: no allocation stack), and draws 8 of those it holds. variant 1:
 * nothing is evicted (a leak). */
static void wrapped_fifo(synth *y, int variant)
{
    synth_init(y);
    uint32_t st_alloc = synth_stack(y, "observe", "main", NULL);
    uint32_t st_made = synth_stack(y, "state = torch.tensor(obs) (dqn.py:134)", NULL);
    const int cap = 40, steps = 24;
    const uint64_t old = 0x7f6000000000ull, fresh = 0x7f8000000000ull;
    int evict_old = cap;   /* the old ones are evicted from k = cap - 1 down */
    uint64_t rng = 12345;
    for (int i = 1; i <= steps; i++) {
        synth_step_mark(y, i);
        if (i == 1)   /* the tracker's half ring */
            for (int k = 0; k < cap; k++)
                SYNTH_EV(y, VT_EV_TENSOR_NEW, .aux = 5000 + (uint64_t)k, .aux2 = VT_TENSOR_AGAIN,
                         .addr = old + (uint64_t)k * 0x1000000ull, .size = 64 * 1024,
                         .stack = st_made, .str = synth_str(y, "state"));
        uint64_t a = fresh + (uint64_t)i * 0x1000000ull;
        synth_alloc(y, a, 64 * 1024, st_alloc);
        SYNTH_EV(y, VT_EV_TENSOR_NEW, .aux = 6000 + (uint64_t)i, .addr = a, .size = 64 * 1024,
                 .stack = st_made, .str = synth_str(y, "state"));
        synth_use(y, 6000 + (uint64_t)i);
        if (!variant) {
            --evict_old;
            synth_drop(y, 5000 + (uint64_t)evict_old);
            synth_free(y, old + (uint64_t)evict_old * 0x1000000ull);
        }
        for (int k = 0; k < 8; k++) {   /* a draw of 8 of the 40 held, at random */
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            int pick = (int)((rng >> 33) % (uint64_t)(evict_old + i));
            synth_use(y, pick < evict_old ? 5000 + (uint64_t)pick
                                          : 6000 + (uint64_t)(pick - evict_old + 1));
        }
    }
    /* the blocks alive at the end: the old ones not evicted, with their stack */
    synth_lost_start(y, st_alloc, variant ? cap : evict_old, old, 64 * 1024);
}

TEST(a_full_fifo_in_a_ring_that_overwrote_its_start_is_no_growth)
{
    /* The transitions made in the window grow as those made before it are
     * evicted; the latter's frees have no stack (their ALLOC is gone), but
     * their tensors, declared again, were made where the window's were: the
     * site counts them, and holds 40 at every mark (the DQN tutorial under
     * run --track, 2.7M events in a ring of 1M: 4 growth findings). */
    synth y;
    wrapped_fifo(&y, 0);
    vt__check_report *r = check(&y, NULL);
    ASSERT_EQ(findings_of(r, VT_CHECK_RULE_GROWTH), 0);
    vt__check_report_free(r);
    synth_fini(&y);
    /* the same memory evicting nothing grows */
    wrapped_fifo(&y, 1);
    r = check(&y, NULL);
    ASSERT_EQ(findings_of(r, VT_CHECK_RULE_GROWTH), 1);
    vt__check_report_free(r);
    synth_fini(&y);
}

/* The same memory under plain run: no tensors, so nothing was declared
 * again. A transition is a state and an action, each a block of its own
 * line, evicted together at `memory.append`; 32 of them full when the
 * window (48 steps) begins. Each free names its block's allocation stack
 * (format 1.12) unless `variant & FIFO_OLD_FILE`; `variant & FIFO_LEAK`:
 * the window's transitions are never evicted, those from before it are. */
enum { FIFO_LEAK = 1, FIFO_OLD_FILE = 2 };

static void wrapped_fifo_plain(synth *y, int variant)
{
    synth_init(y);
    uint32_t st_state = synth_stack(y, "observe", "main", NULL);
    uint32_t st_action = synth_stack(y, "select_action", "main", NULL);
    uint32_t st_evict = synth_stack(y, "push", "main", NULL);
    const int cap = 32, steps = 48;
    const uint64_t size = 16 * 1024, old = 0x7f6000000000ull, fresh = 0x7f8000000000ull;
    int next_old = 0, next_fresh = 1;   /* the oldest of each, evicted first */
    int named = !(variant & FIFO_OLD_FILE);
    for (int i = 1; i <= steps; i++) {
        synth_step_mark(y, i);
        uint64_t a = fresh + (uint64_t)i * 0x1000000ull;
        synth_alloc(y, a, size, st_state);
        synth_alloc(y, a + 0x800000ull, size, st_action);
        uint64_t gone;
        if (next_old < cap)
            gone = old + (uint64_t)next_old++ * 0x1000000ull;
        else if (!(variant & FIFO_LEAK))
            gone = fresh + (uint64_t)next_fresh++ * 0x1000000ull;
        else
            continue;
        SYNTH_EV(y, VT_EV_FREE_REQUESTED, .addr = gone, .size = size, .stack = st_evict,
                 .aux2 = named ? st_state : 0);
        SYNTH_EV(y, VT_EV_FREE_REQUESTED, .addr = gone + 0x800000ull, .size = size,
                 .stack = st_evict, .aux2 = named ? st_action : 0);
    }
    synth_lost_start(y, st_state, 0, old, size);
}

TEST(a_full_fifo_in_a_ring_that_overwrote_its_start_is_no_growth_under_plain_run)
{
    /* The frees of the transitions made before the window name their lines
     * (format 1.12): each line holds 32 at every mark (the DQN loop under
     * plain run in a ring of 8 MiB: 3 growth lines, before) */
    assert_shape_is_clean(wrapped_fifo_plain, 0);
    /* in an older file they have no line, a site of their own shrinking as
     * the two lines grow; freed where the lines' own are, the three are
     * judged together (co_freed_grow): flat as well */
    assert_shape_is_clean(wrapped_fifo_plain, FIFO_OLD_FILE);
    /* evicting none of the window's, both lines keep every block they
     * made (never freed, which GROWTH leaves to that rule) */
    synth y;
    vt__check_report *r = check_shape(&y, wrapped_fifo_plain, FIFO_LEAK);
    ASSERT_EQ(findings_of(r, VT_CHECK_RULE_NEVER_FREED), 2);
    vt__check_report_free(r);
    synth_fini(&y);
}

/* A stack whose innermost frame is native function `op` (its own frame)
 * called from the program's line train.py:40. */
static uint32_t op_under_line(synth *y, const char *op)
{
    uint32_t python = synth_str(y, "python"), so = synth_str(y, "libtorch.so");
    vt__snapshot_data *s = &y->s;
    uint32_t fr = sb_frame(&y->b, (vt__frame){ .module = python, .file = synth_str(y, "train.py"),
                                                .function = synth_str(y, "<module>"), .line = 40 });
    uint32_t parent = sb_node(&y->b, 0, fr);
    fr = sb_frame(&y->b, (vt__frame){ .ip = 0x7000 + 16 * s->nframes, .module = so,
                                      .function = synth_str(y, op) });
    return sb_node(&y->b, parent, fr);
}

/* A replay memory of 40 transitions under plain run (blocks only), 160
 * steps: each step's transition is a state and an action, the action made
 * at the policy's line or at the random one, the random one ever rarer (an
 * exploration rate decaying from 90% to 5%); once full, each step evicts
 * the oldest transition at train.py:40. variant 1: every policy action is also
 * kept in a list, never evicted. */
static void memory_of_shifting_lines(synth *y, int variant)
{
    synth_init(y);
    uint32_t st_state = synth_stack(y, "observe", "main", NULL);
    uint32_t st_policy = synth_stack(y, "policy_action", "select_action", "main", NULL);
    uint32_t st_random = synth_stack(y, "random_action", "select_action", "main", NULL);
    /* evicted at one line of the program through native paths of their
     * own (a view's release and a base's: the DQN tutorial's two action
     * lines were freed at one line by two stacks) */
    uint32_t st_evict_state = op_under_line(y, "c10::StorageImpl::release_resources");
    uint32_t st_evict_policy = op_under_line(y, "c10::TensorImpl::release_resources");
    uint32_t st_evict_random = op_under_line(y, "THPVariable_dealloc");
    const int cap = 40, steps = 160;
    const uint64_t state = 0x7f6000000000ull, action = 0x7f8000000000ull;
    uint8_t policy[161] = { 0 };
    for (int i = 1; i <= steps; i++) {
        synth_step_mark(y, i);
        synth_alloc(y, state + (uint64_t)i * 0x100000ull, 4096, st_state);
        int eps = 90 - (85 * i) / steps;   /* in percent */
        policy[i] = (uint8_t)((i * 37) % 100 >= eps);
        synth_alloc(y, action + (uint64_t)i * 0x100000ull, 4096, policy[i] ? st_policy : st_random);
        int old = i - cap;
        if (old < 1)
            continue;
        SYNTH_EV(y, VT_EV_FREE_REQUESTED, .addr = state + (uint64_t)old * 0x100000ull,
                 .size = 4096, .stack = st_evict_state);
        if (!(variant && policy[old]))
            SYNTH_EV(y, VT_EV_FREE_REQUESTED, .addr = action + (uint64_t)old * 0x100000ull,
                     .size = 4096, .stack = policy[old] ? st_evict_policy : st_evict_random);
    }
}

TEST(lines_whose_shares_of_one_full_memory_shift_are_no_growth)
{
    /* the policy's line holds ever more of the memory's actions as the
     * random one holds fewer; evicted together, the two are flat (the DQN
     * tutorial under plain run, 2,346 steps: "grows 2 B per step" at
     * select_action) */
    assert_shape_is_clean(memory_of_shifting_lines, 0);
    /* the policy's actions also kept in a list: the memory's and the list's
     * grow */
    synth y;
    vt__check_report *r = check_shape(&y, memory_of_shifting_lines, 1);
    ASSERT(r->nfindings >= 1);
    ASSERT(findings_of(r, VT_CHECK_RULE_GROWTH) + findings_of(r, VT_CHECK_RULE_NEVER_FREED) >= 1);
    vt__check_report_free(r);
    synth_fini(&y);
}

/* One line of the program (an LSTM's call) whose graph, kept across
 * batches, grows at two of its ops (two call sites): one cause, the line. */
TEST(sites_growing_under_one_line_of_the_program_are_one_cause)
{
    synth y;
    setup(&y);
    uint32_t gates = op_under_line(&y, "at::native::mm"), cell = op_under_line(&y, "lstm_cell");
    ASSERT(gates != cell);
    for (int i = 1; i <= 8; i++) {
        step(&y, i);
        uint64_t a = 0x7f5000000000ull + (uint64_t)i * 4 * MiB;
        synth_new_tensor(&y, 8100 + (uint64_t)i, a, MiB, "output = rnn(x) (train.py:40)", gates);
        synth_new_tensor(&y, 8200 + (uint64_t)i, a + 2 * MiB, MiB, "output = rnn(x) (train.py:40)",
                         cell);
        for (int k = 1; k <= i; k++) {   /* every backward reads them all again */
            synth_use(&y, 8100 + (uint64_t)k);
            synth_use(&y, 8200 + (uint64_t)k);
        }
    }
    vt__check_report *r = check_rules(&y, VT_CHECK_RULE_GROWTH);
    ASSERT_EQ(r->nfindings, 2);   /* a finding per site */
    char *text = render(r, &y, 0);
    ASSERT_MSG(strstr(text, "2 findings from 1 cause"), "%s", text);
    ASSERT_MSG(strstr(text, "allocated at <module> (train.py:40)"), "%s", text);
    free(text);
    vt__check_report_free(r);
    synth_fini(&y);
}

/* A tracked loop of 12 steps whose line at st_fwd holds one tensor of i MiB
 * across the end of step i: `variant` 0, made afresh each step and the one
 * before let go (a length curriculum's logits); 1, made by an op that used
 * the one before (`preds = torch.cat([preds, p])`); 2, made afresh and all
 * kept and read every step (a list of each step's, summed each step). */
static void replaced_each_step(synth *y, int variant)
{
    setup(y);
    for (int i = 1; i <= 12; i++) {
        step(y, i);
        uint64_t id = 9000 + (uint64_t)i, addr = BUF + (uint64_t)i * 0x10000000ull;
        synth_alloc(y, addr, (uint64_t)i * MiB, st_fwd);
        if (variant == 1 && i > 1)
            synth_use(y, id - 1);   /* the op's input, between its output's block and making */
        synth_tensor(y, id, addr, (uint64_t)i * MiB, 0, "logits");
        synth_use(y, id);
        if (variant != 2 && i > 1)
            synth_release(y, 0, id - 1, addr - 0x10000000ull);
        for (uint64_t k = 9001; variant == 2 && k < id; k++)
            synth_use(y, k);
    }
}

TEST(a_value_replaced_by_a_larger_one_made_afresh_each_step_is_no_growth)
{
    synth y;
    replaced_each_step(&y, 0);
    vt__check_report *r = check(&y, NULL);
    ASSERT(r->rules_run & VT_CHECK_RULE_GROWTH);
    for (size_t i = 0; i < r->nfindings; i++)
        ASSERT(r->findings[i].rule != VT_CHECK_RULE_GROWTH);
    ASSERT_EQ(r->ngrowth_replaced, 1);
    assert_rendered_says(r, &y, 0, "1 line grew only as its value was replaced each step by a "
                                   "larger one made afresh");
    assert_rendered_says(r, &y, 1, "\"growth_replaced\":1,");
    vt__check_report_free(r);
    /* asked for by name, growth judges it */
    r = check_rules(&y, VT_CHECK_RULE_GROWTH);
    ASSERT_EQ(r->ngrowth_replaced, 0);
    ASSERT_EQ(only_finding_of(r, VT_CHECK_RULE_GROWTH)->growth_per_step, MiB);
    vt__check_report_free(r);
    synth_fini(&y);
}

TEST(a_value_made_from_the_one_it_replaces_or_values_piling_up_are_still_growth)
{
    for (int variant = 1; variant <= 2; variant++) {
        synth y;
        replaced_each_step(&y, variant);
        vt__check_report *r = check(&y, NULL);
        ASSERT_EQ(r->ngrowth_replaced, 0);
        size_t growth = 0;
        for (size_t i = 0; i < r->nfindings; i++)
            growth += r->findings[i].rule == VT_CHECK_RULE_GROWTH;
        ASSERT_EQ(growth, 1);
        vt__check_report_free(r);
        synth_fini(&y);
    }
}

TEST_MAIN()
