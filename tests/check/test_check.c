/* tests/check/test_check.c - the reference-graph checker on synthetic traces.
 *
 * Every leak shape comes with its fixed twin, which must come out clean.
 * Steps are cut by MARK events "step 1", "step 2", ...; step 0 (before the
 * first mark) is setup. Unless a test says otherwise, each step starts with
 * a 100 ms tick, a mark, a use of the weights and one short-lived activation.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <time.h>

#include "../harness.h"
#include "check.h"
#include "json_valid.h"
#include "synth.h"

#define MiB (1024ull * 1024)
#define W_ID 1
#define W_ADDR 0x7f0000000000ull

/* ------------------------------------------------------------------------ */
/*  Helpers                                                                 */
/* ------------------------------------------------------------------------ */

static vt_check_report *check(synth *y, const vt_check_options *opt)
{
    vt_check_report *r = NULL;
    char err[256] = "";
    int rc = vt_check_run(&y->s, opt, &r, err, sizeof err);
    ASSERT_MSG(rc == 0 && r, "vt_check_run: %d %s", rc, err);
    return r;
}

static const vt_check_finding *by_addr(const vt_check_report *r, uint64_t addr)
{
    for (size_t i = 0; i < r->nfindings; i++)
        if (r->findings[i].addr == addr)
            return &r->findings[i];
    return NULL;
}

static const char *path_text(const vt_check_finding *f, size_t i)
{
    static char buf[1024];
    ASSERT_MSG(i < f->npaths, "finding 0x%llx has %zu paths", (unsigned long long)f->addr,
               f->npaths);
    vt_check_path_format(&f->paths[i], buf, sizeof buf);
    return buf;
}

static void dump(const vt_check_report *r, const synth *y)
{
    vt_check_report_print(stderr, r, &y->s, 0);
}

#define ASSERT_CLEAN(r, y)                                                  \
    do {                                                                    \
        if ((r)->nfindings) {                                               \
            dump((r), (y));                                                 \
            HARNESS_FAIL("expected a clean report, got %zu findings",       \
                         (r)->nfindings);                                   \
        }                                                                   \
    } while (0)

static uint32_t st_init, st_fwd, st_bwd, st_act;

static void stacks(synth *y)
{
    st_init = synth_stack(y, "init_weights", "main", NULL);
    st_fwd = synth_stack(y, "forward_block", "train_step", "main", NULL);
    st_bwd = synth_stack(y, "backward_block", "train_step", "main", NULL);
    st_act = synth_stack(y, "relu_forward", "train_step", "main", NULL);
}

/* Weights, allocated in setup (step 0). */
static void setup(synth *y)
{
    synth_init(y);
    stacks(y);
    synth_new_tensor(y, W_ID, W_ADDR, 4 * MiB, "fc.weight", st_init);
}

/* Start step i: tick, mark, use the weights, one transient activation. */
static void step(synth *y, int i)
{
    char l[32];
    synth_tick(y, 100000000);
    snprintf(l, sizeof l, "step %d", i);
    synth_mark(y, l);
    synth_use(y, W_ID);
    uint64_t a = 0x7f1000000000ull + (uint64_t)i * 0x10000000ull;
    synth_new_tensor(y, 10000 + (uint64_t)i, a, 2 * MiB, "relu out", st_act);
    synth_use(y, 10000 + (uint64_t)i);
    synth_drop(y, 10000 + (uint64_t)i);
    synth_free(y, a);
}

/* ------------------------------------------------------------------------ */
/*  Leak shapes and their fixed twins                                       */
/* ------------------------------------------------------------------------ */

#define ACT1 0x7f2000000000ull
#define ACT2 0x7f2000100000ull

/* Two objects linking each other, each holding an activation: freed only by
 * the gc pass in step 6. Fixed: no cycle, freed right after backward. */
static void gc_cycle(synth *y, int fixed)
{
    setup(y);
    for (int i = 1; i <= 8; i++) {
        step(y, i);
        if (i == 2) {
            synth_new_tensor(y, 100, ACT1, 1 * MiB, "act1", st_fwd);
            synth_new_tensor(y, 101, ACT2, 2 * MiB, "act2", st_fwd);
            synth_holder(y, 500, "A");
            synth_holder(y, 501, "B");
            synth_ref(y, 500, 100, ".saved");
            synth_ref(y, 501, 101, ".saved");
            if (!fixed) {
                synth_ref(y, 500, 501, ".next");
                synth_ref(y, 501, 500, ".prev");
            }
            synth_use_at(y, 100, st_bwd);
            synth_use_at(y, 101, st_bwd);
            if (fixed) {
                synth_unref(y, 500, 100);
                synth_unref(y, 501, 101);
                synth_drop(y, 100);
                synth_drop(y, 101);
                synth_free(y, ACT1);
                synth_free(y, ACT2);
            }
        }
        if (i == 6 && !fixed) {   /* gc collects the cycle */
            synth_unref(y, 500, 501);
            synth_unref(y, 501, 500);
            synth_unref(y, 500, 100);
            synth_unref(y, 501, 101);
            synth_drop(y, 100);
            synth_drop(y, 101);
            synth_free(y, ACT1);
            synth_free(y, ACT2);
        }
    }
}

TEST(gc_cycle_is_flagged_with_cycle_path)
{
    synth y;
    gc_cycle(&y, 0);
    vt_check_report *r = check(&y, NULL);
    ASSERT_EQ(r->nfindings, 2);
    ASSERT_EQ(r->rules_run, VT_CHECK_RULE_LINGER | VT_CHECK_RULE_PINNED);
    ASSERT_EQ(r->grace_mode, VT_CHECK_GRACE_STEPS);
    ASSERT_EQ(r->nmarks, 8);
    /* Same lingering, bigger first. */
    ASSERT_EQ(r->findings[0].addr, ACT2);
    ASSERT_EQ(r->findings[1].addr, ACT1);
    const vt_check_finding *f = by_addr(r, ACT1);
    ASSERT_EQ(f->rule, VT_CHECK_RULE_LINGER);
    ASSERT_EQ(f->bytes, 1 * MiB);
    ASSERT_STR_EQ(f->owner_name, "act1");
    ASSERT_EQ(f->owner_id, 100);
    ASSERT_EQ(f->last_use_step, 2);
    ASSERT_EQ(f->last_use_stack, st_bwd);
    ASSERT_EQ(f->alloc_stack, st_fwd);
    ASSERT_EQ(f->nuses, 2);
    ASSERT_EQ(f->steps_unused, 3);   /* steps 3, 4, 5 */
    ASSERT_EQ(f->freed, 1);
    ASSERT_GT(f->free_seq, f->linger_from_seq);
    ASSERT_EQ(f->linger_ns, f->free_time_ns - f->last_use_time_ns);
    ASSERT(fabs(f->byte_seconds - (double)MiB * (double)f->linger_ns / 1e9) < 1e-3);
    /* Became a finding at the mark of step 4 (one complete step, 3, passed). */
    const vt_event *mk = NULL;
    for (size_t i = 0; i < y.s.nevents; i++)
        if (y.s.events[i].kind == VT_EV_MARK && y.s.events[i].seq == f->linger_from_seq)
            mk = &y.s.events[i];
    ASSERT(mk);
    ASSERT_STR_EQ(y.s.strings_blob + y.s.string_offsets[mk->str], "step 4");
    ASSERT_EQ(f->path_seq, f->linger_from_seq);
    ASSERT_EQ(f->npaths, 1);
    ASSERT(f->paths[0].cycle);
    ASSERT_STR_EQ(path_text(f, 0),
        "(cycle) A.next \xe2\x86\x92 B.prev \xe2\x86\x92 A.saved \xe2\x86\x92 tensor 'act1'"
        " \xe2\x86\x92 storage 0x7f2000000000 1 MiB");
    f = by_addr(r, ACT2);
    ASSERT_STR_EQ(path_text(f, 0),
        "(cycle) B.prev \xe2\x86\x92 A.next \xe2\x86\x92 B.saved \xe2\x86\x92 tensor 'act2'"
        " \xe2\x86\x92 storage 0x7f2000100000 2 MiB");
    ASSERT_EQ(f->paths[0].nsteps, 5);
    ASSERT_EQ(f->paths[0].steps[0].kind, VT_CHECK_NODE_HOLDER);
    ASSERT_EQ(f->paths[0].steps[0].id, 501);
    ASSERT_EQ(f->paths[0].steps[3].kind, VT_CHECK_NODE_TENSOR);
    ASSERT_EQ(f->paths[0].steps[4].kind, VT_CHECK_NODE_STORAGE);
    ASSERT_EQ(f->paths[0].steps[4].bytes, 2 * MiB);
    vt_check_report_free(r);
    synth_fini(&y);
}

TEST(gc_cycle_fixed_is_clean)
{
    synth y;
    gc_cycle(&y, 1);
    vt_check_report *r = check(&y, NULL);
    ASSERT_CLEAN(r, &y);
    vt_check_report_free(r);
    synth_fini(&y);
}

#define CACHE 0x7f3000000000ull

/* A closure stored on the object captures the object itself: when the frame
 * lets go, the cycle keeps the object's cache until gc. Fixed: the closure
 * holds a weak reference (no edge), refcounting frees everything at once. */
static void closure_self(synth *y, int fixed)
{
    setup(y);
    for (int i = 1; i <= 8; i++) {
        step(y, i);
        if (i == 2) {
            synth_holder(y, 600, "frame train_step");
            synth_holder(y, 601, "Trainer");
            synth_ref(y, 600, 601, "['trainer']");
            synth_holder(y, 602, "<closure>");
            synth_holder(y, 603, "cell");
            synth_ref(y, 601, 602, ".hook");
            synth_ref(y, 602, 603, ".__closure__[0]");
            if (!fixed)
                synth_ref(y, 603, 601, ".cell_contents");
            synth_new_tensor(y, 110, CACHE, 8 * MiB, "cache", st_fwd);
            synth_ref(y, 601, 110, ".cache");
            synth_use(y, 110);
            synth_unref(y, 600, 601);   /* the frame returns */
            if (fixed) {
                synth_unref(y, 601, 110);
                synth_drop(y, 110);
                synth_free(y, CACHE);
            }
        }
        if (i == 7 && !fixed) {
            synth_unref(y, 603, 601);
            synth_unref(y, 601, 110);
            synth_drop(y, 110);
            synth_free(y, CACHE);
        }
    }
}

TEST(closure_capturing_self_is_flagged)
{
    synth y;
    closure_self(&y, 0);
    vt_check_report *r = check(&y, NULL);
    ASSERT_EQ(r->nfindings, 1);
    const vt_check_finding *f = &r->findings[0];
    ASSERT_EQ(f->addr, CACHE);
    ASSERT_EQ(f->bytes, 8 * MiB);
    ASSERT_STR_EQ(f->owner_name, "cache");
    ASSERT_STR_EQ(path_text(f, 0),
        "(cycle) Trainer.hook \xe2\x86\x92 <closure>.__closure__[0] \xe2\x86\x92 "
        "cell.cell_contents \xe2\x86\x92 Trainer.cache \xe2\x86\x92 tensor 'cache' "
        "\xe2\x86\x92 storage 0x7f3000000000 8 MiB");
    vt_check_report_free(r);
    synth_fini(&y);
}

TEST(closure_capturing_self_fixed_is_clean)
{
    synth y;
    closure_self(&y, 1);
    vt_check_report *r = check(&y, NULL);
    ASSERT_CLEAN(r, &y);
    vt_check_report_free(r);
    synth_fini(&y);
}

#define BASE 0x7f4000000000ull
#define ZC 0x7f5000000000ull

/* A 1 MiB view kept in a list pins the whole 64 MiB padded buffer after the
 * base tensor is dropped. Fixed: keep a clone, clear the list next step. */
static void view_pins_base(synth *y, int fixed)
{
    setup(y);
    for (int i = 1; i <= 8; i++) {
        step(y, i);
        if (i == 2) {
            synth_new_tensor(y, 10, BASE, 64 * MiB, "padded", st_fwd);
            synth_use(y, 10);
            synth_tensor(y, 11, BASE + MiB, MiB, 10, "z");   /* interior data_ptr */
            synth_use(y, 11);
            synth_holder(y, 700, "outputs");
            if (!fixed) {
                synth_ref(y, 700, 11, "[0]");
                synth_drop(y, 10);
            } else {
                synth_alloc(y, ZC, MiB, st_fwd);
                synth_tensor(y, 12, ZC, MiB, 0, "z");
                synth_ref(y, 700, 12, "[0]");
                synth_drop(y, 11);
                synth_drop(y, 10);
                synth_free(y, BASE);
            }
        }
        if (i == 3 && fixed) {
            synth_unref(y, 700, 12);
            synth_drop(y, 12);
            synth_free(y, ZC);
        }
        if (i == 6 && !fixed) {
            synth_unref(y, 700, 11);
            synth_drop(y, 11);
            synth_free(y, BASE);
        }
    }
}

TEST(view_keeps_base_storage_is_flagged)
{
    synth y;
    view_pins_base(&y, 0);
    vt_check_report *r = check(&y, NULL);
    ASSERT_EQ(r->nfindings, 1);
    const vt_check_finding *f = &r->findings[0];
    ASSERT_EQ(f->addr, BASE);
    ASSERT_EQ(f->bytes, 64 * MiB);
    ASSERT_EQ(f->block_bytes, 64 * MiB);
    ASSERT_STR_EQ(f->owner_name, "padded");
    ASSERT_EQ(f->owner_id, 10);
    ASSERT_EQ(f->ntensors, 2);
    ASSERT_EQ(f->last_use_tensor, 11);
    ASSERT_STR_EQ(f->last_use_name, "z");
    ASSERT_EQ(f->npaths, 1);
    ASSERT(!f->paths[0].cycle);
    ASSERT_STR_EQ(path_text(f, 0),
        "outputs[0] \xe2\x86\x92 tensor 'z' (view of 'padded') \xe2\x86\x92 "
        "storage 0x7f4000000000 64 MiB");
    ASSERT_EQ(f->paths[0].steps[1].base_id, 10);
    vt_check_report_free(r);
    synth_fini(&y);
}

/* A tensor renamed after its TENSOR_NEW (vt_tensor_name): the checker
 * reports the latest name the tensor has in the snapshot -- as owner, as
 * last use and in the paths -- even where the rename came after the events
 * it describes. Renames of holders and of unknown ids are ignored. */
#define RN_ADDR 0x7f2000000000ull
static void renamed(synth *y)
{
    setup(y);
    for (int i = 1; i <= 8; i++) {
        step(y, i);
        if (i == 2) {
            synth_new_tensor(y, 100, RN_ADDR, 1 * MiB, "aten.mm out[0]", st_fwd);
            synth_name(y, 100, "fc2 tmp");
            synth_tensor(y, 101, RN_ADDR, 4096, 100, "aten.slice out[0]");
            synth_holder(y, 500, "cache");
            synth_ref(y, 500, 101, "[0]");
            synth_name(y, 500, "not a tensor");     /* a holder: ignored */
            synth_name(y, 999, "nobody");           /* unknown id: ignored */
            synth_use_at(y, 101, st_bwd);
            synth_name(y, 101, "fc2 head");          /* after its last use */
            synth_drop(y, 100);
        }
        if (i == 6) {
            synth_unref(y, 500, 101);
            synth_drop(y, 101);
            synth_free(y, RN_ADDR);
        }
    }
    synth_name(y, 100, "fc2 out");                  /* after the storage is gone */
}

TEST(renamed_tensor_is_reported_under_its_latest_name)
{
    synth y;
    renamed(&y);
    vt_check_report *r = check(&y, NULL);
    ASSERT_EQ(r->nfindings, 1);
    const vt_check_finding *f = &r->findings[0];
    ASSERT_EQ(f->rule, VT_CHECK_RULE_LINGER);
    ASSERT_EQ(f->addr, RN_ADDR);
    ASSERT_EQ(f->owner_id, 100);
    ASSERT_STR_EQ(f->owner_name, "fc2 out");
    ASSERT_EQ(f->last_use_tensor, 101);
    ASSERT_STR_EQ(f->last_use_name, "fc2 head");
    ASSERT_EQ(f->nuses, 3);          /* renames are not uses */
    ASSERT_EQ(f->npaths, 1);
    ASSERT_STR_EQ(path_text(f, 0),
        "cache[0] \xe2\x86\x92 tensor 'fc2 head' (view of 'fc2 out') \xe2\x86\x92 "
        "storage 0x7f2000000000 1 MiB");
    ASSERT_EQ(r->ntensors, 1 + 8 + 2);
    vt_check_report_free(r);

    /* --ignore matches the latest name only */
    const char *pats[] = { "aten.mm*" };
    vt_check_options o;
    vt_check_options_init(&o);
    o.ignore = pats;
    o.nignore = 1;
    r = check(&y, &o);
    ASSERT_EQ(r->nfindings, 1);
    vt_check_report_free(r);
    pats[0] = "fc2 out";
    r = check(&y, &o);
    ASSERT_CLEAN(r, &y);
    vt_check_report_free(r);

    /* the text report and the JSON carry the new name */
    char *buf = NULL;
    size_t n = 0;
    FILE *mf = open_memstream(&buf, &n);
    r = check(&y, NULL);
    vt_check_report_print(mf, r, &y.s, 0);
    fclose(mf);
    ASSERT_STR_CONTAINS(buf, "fc2 out");
    ASSERT(strstr(buf, "aten.mm out[0]") == NULL);
    ASSERT(strstr(buf, "fc2 tmp") == NULL);
    free(buf);
    vt_check_report_free(r);
    synth_fini(&y);
}

TEST(view_keeps_base_storage_fixed_is_clean)
{
    synth y;
    view_pins_base(&y, 1);
    vt_check_report *r = check(&y, NULL);
    ASSERT_CLEAN(r, &y);
    vt_check_report_free(r);
    synth_fini(&y);
}

#define S0 0x7f6000000000ull
#define S1 0x7f6001000000ull

/* A pipeline context keeps its sent tensors three steps after backward.
 * Fixed: the context is released right after backward. */
static void pipeline(synth *y, int fixed)
{
    setup(y);
    for (int i = 1; i <= 8; i++) {
        step(y, i);
        if (i == 2) {
            synth_holder(y, 800, "Context");
            synth_holder(y, 801, "list");
            synth_ref(y, 800, 801, ".output_tensors");
            synth_new_tensor(y, 20, S0, 16 * MiB, "send 0", st_fwd);
            synth_new_tensor(y, 21, S1, 32 * MiB, "send 1", st_fwd);
            synth_ref(y, 801, 20, "[0]");
            synth_ref(y, 801, 21, "[1]");
            synth_use_at(y, 20, st_bwd);
            synth_use_at(y, 21, st_bwd);
        }
        if ((i == 2 && fixed) || (i == 5 && !fixed)) {
            synth_unref(y, 801, 20);
            synth_unref(y, 801, 21);
            synth_drop(y, 20);
            synth_drop(y, 21);
            synth_free(y, S0);
            synth_free(y, S1);
        }
    }
}

TEST(pipeline_context_keeping_sent_tensors_is_flagged)
{
    synth y;
    pipeline(&y, 0);
    vt_check_report *r = check(&y, NULL);
    ASSERT_EQ(r->nfindings, 2);
    ASSERT_EQ(r->findings[0].addr, S1);
    ASSERT_EQ(r->findings[0].bytes, 32 * MiB);
    ASSERT_EQ(r->findings[1].addr, S0);
    ASSERT_EQ(r->findings[1].bytes, 16 * MiB);
    ASSERT_EQ(r->total_bytes, 48 * MiB);
    ASSERT_STR_EQ(path_text(&r->findings[0], 0),
        "Context.output_tensors \xe2\x86\x92 list[1] \xe2\x86\x92 tensor 'send 1' "
        "\xe2\x86\x92 storage 0x7f6001000000 32 MiB");
    ASSERT_STR_EQ(path_text(&r->findings[1], 0),
        "Context.output_tensors \xe2\x86\x92 list[0] \xe2\x86\x92 tensor 'send 0' "
        "\xe2\x86\x92 storage 0x7f6000000000 16 MiB");
    ASSERT_EQ(r->findings[0].steps_unused, 2);
    vt_check_report_free(r);
    synth_fini(&y);
}

TEST(pipeline_context_fixed_is_clean)
{
    synth y;
    pipeline(&y, 1);
    vt_check_report *r = check(&y, NULL);
    ASSERT_CLEAN(r, &y);
    vt_check_report_free(r);
    synth_fini(&y);
}

#define INTER 0x7f7000000000ull

/* A forward hook's closure -> cell -> dict of intermediates -> the hook:
 * after handle.remove() only the cycle holds the intermediates. Fixed: the
 * dict is cleared after use. */
static void hook_cycle(synth *y, int fixed)
{
    setup(y);
    for (int i = 1; i <= 8; i++) {
        step(y, i);
        if (i == 2) {
            synth_holder(y, 900, "Linear");
            synth_holder(y, 901, "<hook>");
            synth_holder(y, 902, "cell");
            synth_holder(y, 903, "dict");
            synth_ref(y, 900, 901, "._forward_hooks[0]");
            synth_ref(y, 901, 902, ".__closure__[0]");
            synth_ref(y, 902, 903, ".cell_contents");
            synth_ref(y, 903, 901, "['hook']");
            synth_new_tensor(y, 30, INTER, 4 * MiB, "intermediate", st_fwd);
            synth_ref(y, 903, 30, "['acts']");
            synth_use(y, 30);
            synth_unref(y, 900, 901);   /* handle.remove() */
            if (fixed) {
                synth_unref(y, 903, 30);
                synth_drop(y, 30);
                synth_free(y, INTER);
            }
        }
        if (i == 6 && !fixed) {
            synth_unref(y, 903, 30);
            synth_drop(y, 30);
            synth_free(y, INTER);
        }
    }
}

TEST(hook_closure_cycle_is_flagged)
{
    synth y;
    hook_cycle(&y, 0);
    vt_check_report *r = check(&y, NULL);
    ASSERT_EQ(r->nfindings, 1);
    const vt_check_finding *f = &r->findings[0];
    ASSERT_EQ(f->addr, INTER);
    ASSERT_EQ(f->bytes, 4 * MiB);
    ASSERT_STR_EQ(path_text(f, 0),
        "(cycle) dict['hook'] \xe2\x86\x92 <hook>.__closure__[0] \xe2\x86\x92 "
        "cell.cell_contents \xe2\x86\x92 dict['acts'] \xe2\x86\x92 tensor 'intermediate' "
        "\xe2\x86\x92 storage 0x7f7000000000 4 MiB");
    vt_check_report_free(r);
    synth_fini(&y);
}

TEST(hook_closure_cycle_fixed_is_clean)
{
    synth y;
    hook_cycle(&y, 1);
    vt_check_report *r = check(&y, NULL);
    ASSERT_CLEAN(r, &y);
    vt_check_report_free(r);
    synth_fini(&y);
}

/* Losses appended to a list keep their autograd graph, whose nodes keep the
 * saved activations. Fixed: append loss.item() (a float, no tensor). */
#define HID 0x7ef000000000ull
static void autograd_graph(synth *y, int fixed)
{
    setup(y);
    for (int i = 1; i <= 8; i++) {
        step(y, i);
        if (i == 1)
            synth_holder(y, 1000, "losses");
        if (i == 2) {
            synth_new_tensor(y, 1001, HID, 12 * MiB, "h", st_fwd);
            synth_holder(y, 1002, "MulBackward0");
            synth_ref(y, 1002, 1001, ".saved_self");
            synth_new_tensor(y, 1003, HID + 0x1000000, 4, "loss", st_fwd);
            synth_ref(y, 1003, 1002, ".grad_fn");
            synth_use(y, 1001);
            synth_use(y, 1003);
            if (!fixed) {
                synth_ref(y, 1000, 1003, "[1]");
            } else {
                synth_unref(y, 1003, 1002);
                synth_drop(y, 1003);
                synth_free(y, HID + 0x1000000);
                synth_unref(y, 1002, 1001);
                synth_drop(y, 1001);
                synth_free(y, HID);
            }
        }
    }
}

TEST(autograd_graph_kept_by_a_loss_list_is_flagged)
{
    synth y;
    autograd_graph(&y, 0);
    vt_check_report *r = check(&y, NULL);
    ASSERT_EQ(r->nfindings, 2);   /* h (12 MiB) first, then the loss itself */
    const vt_check_finding *f = &r->findings[0];
    ASSERT_EQ(f->addr, HID);
    ASSERT_STR_EQ(path_text(f, 0),
        "losses[1] \xe2\x86\x92 tensor 'loss'.grad_fn \xe2\x86\x92 MulBackward0.saved_self "
        "\xe2\x86\x92 tensor 'h' \xe2\x86\x92 storage 0x7ef000000000 12 MiB");
    ASSERT_EQ(f->freed, 0);
    vt_check_report_free(r);
    synth_fini(&y);
}

TEST(autograd_graph_fixed_is_clean)
{
    synth y;
    autograd_graph(&y, 1);
    vt_check_report *r = check(&y, NULL);
    ASSERT_CLEAN(r, &y);
    vt_check_report_free(r);
    synth_fini(&y);
}

TEST(deep_chain_is_bounded_and_marked_truncated)
{
    synth y;
    setup(&y);
    step(&y, 1);
    synth_new_tensor(&y, 2, ACT1, MiB, "deep", st_fwd);
    for (uint64_t h = 0; h < 10000; h++) {
        vt_event *e = synth_ev(&y, VT_EV_HOLDER_NEW);
        e->aux = 100000 + h;
        vt_event *rf = synth_ev(&y, VT_EV_REF);
        rf->aux = 100000 + h;
        rf->aux2 = h ? 100000 + h - 1 : 2;
    }
    for (int i = 2; i <= 4; i++)
        step(&y, i);
    vt_check_report *r = check(&y, NULL);
    ASSERT_EQ(r->nfindings, 1);
    const vt_check_finding *f = &r->findings[0];
    ASSERT_EQ(f->npaths, 1);
    ASSERT(f->paths[0].truncated);
    ASSERT_EQ(f->paths[0].nsteps, 4096 + 1);
    ASSERT_STR_CONTAINS(path_text(f, 0), "\xe2\x80\xa6 holder #104094 \xe2\x86\x92 holder #104093");
    vt_check_report_free(r);
    vt_check_options o;
    vt_check_options_init(&o);
    o.max_visit = 20000;
    r = check(&y, &o);
    ASSERT(!r->findings[0].paths[0].truncated);
    ASSERT_EQ(r->findings[0].paths[0].nsteps, 10000 + 2);
    vt_check_report_free(r);
    synth_fini(&y);
}

/* ------------------------------------------------------------------------ */
/*  What must never be flagged                                              */
/* ------------------------------------------------------------------------ */

TEST(weights_used_every_step_are_never_flagged)
{
    synth y;
    setup(&y);
    for (int i = 1; i <= 30; i++)
        step(&y, i);
    vt_check_report *r = check(&y, NULL);
    ASSERT_CLEAN(r, &y);
    ASSERT_EQ(r->ntensors, 31);
    vt_check_report_free(r);
    synth_fini(&y);
}

#define STATE 0x7f8000000000ull

/* Optimizer state used every 3 steps (1, 4, 7, 10), trace through `last`. */
static void every_k(synth *y, int last)
{
    setup(y);
    synth_new_tensor(y, 40, STATE, 8 * MiB, "exp_avg", st_init);
    for (int i = 1; i <= last; i++) {
        step(y, i);
        if (i % 3 == 1 && i <= 10)
            synth_use(y, 40);
    }
}

TEST(state_used_every_k_steps_is_never_flagged)
{
    synth y;
    every_k(&y, 12);   /* last use in step 10: steps 11 and 12 unused < gap 3 */
    vt_check_report *r = check(&y, NULL);
    ASSERT_CLEAN(r, &y);
    vt_check_report_free(r);
    synth_fini(&y);
}

TEST(state_missing_its_next_use_is_flagged)
{
    synth y;
    every_k(&y, 15);   /* steps 11, 12, 13 complete and unused: missed step 13 */
    vt_check_report *r = check(&y, NULL);
    ASSERT_EQ(r->nfindings, 1);
    const vt_check_finding *f = &r->findings[0];
    ASSERT_EQ(f->addr, STATE);
    ASSERT_EQ(f->usual_gap_steps, 3);
    ASSERT_EQ(f->last_use_step, 10);
    ASSERT_EQ(f->freed, 0);
    ASSERT_EQ(f->path_seq, UINT64_MAX);
    /* Nothing refers to the tensor, and it was never dropped: it is its own root. */
    ASSERT_STR_EQ(path_text(f, 0),
                  "tensor 'exp_avg' \xe2\x86\x92 storage 0x7f8000000000 8 MiB");
    vt_check_report_free(r);
    synth_fini(&y);
}

/* Writers lapped the ring copy: 5 seqs missing halfway through. */
static void open_a_gap(synth *y)
{
    for (size_t i = y->s.nevents / 2; i < y->s.nevents; i++)
        y->s.events[i].seq += 5;
    y->seq += 5;
}

TEST(storage_whose_lifetime_crosses_a_gap_is_not_judged)
{
    /* As state_missing_its_next_use_is_flagged, but a gap after its
     * allocation hides whether it was freed, and no allocator state says
     * it is alive: it must not be reported as alive after its last use. */
    synth y;
    every_k(&y, 15);
    open_a_gap(&y);
    vt_check_report *r = check(&y, NULL);
    ASSERT_CLEAN(r, &y);
    vt_check_report_free(r);
    synth_fini(&y);
}

TEST(storage_across_a_gap_that_the_allocator_state_holds_is_judged)
{
    synth y;
    every_k(&y, 15);
    open_a_gap(&y);
    uint64_t seq = 0;
    for (size_t i = 0; i < y.s.nevents; i++)
        if (y.s.events[i].kind == VT_EV_ALLOC && y.s.events[i].addr == STATE)
            seq = y.s.events[i].seq;
    ASSERT(seq != 0);
    /* the state at the snapshot: STATE's block is allocated */
    y.s.meta.flags = VT_META_STATE_COMPLETE;
    y.s.segments = calloc(1, sizeof *y.s.segments);
    y.s.blocks = calloc(1, sizeof *y.s.blocks);
    y.s.segments[0] = (vt_segment){ .addr = STATE, .size = 8 * MiB, .nblocks = 1 };
    y.s.blocks[0] = (vt_block){ .addr = STATE, .size = 8 * MiB, .req_size = 8 * MiB,
                                .alloc_seq = seq, .state = VT_BLOCK_ACTIVE_ALLOCATED };
    y.s.nsegments = y.s.nblocks = 1;
    vt_check_report *r = check(&y, NULL);
    ASSERT_EQ(r->nfindings, 1);
    ASSERT_EQ(r->findings[0].addr, STATE);
    ASSERT_EQ(r->findings[0].freed, 0);
    vt_check_report_free(r);
    synth_fini(&y);
}

#define LATE 0x7f9000000000ull

/* An activation last used in step `at` of 8, still alive at the end. */
static void ends_alive(synth *y, int at)
{
    setup(y);
    for (int i = 1; i <= 8; i++) {
        step(y, i);
        if (i == at) {
            synth_new_tensor(y, 50, LATE, 3 * MiB, "late", st_fwd);
            synth_use(y, 50);
        }
    }
}

TEST(trace_ending_is_not_flagged)
{
    for (int at = 7; at <= 8; at++) {  /* last and second-to-last step */
        synth y;
        ends_alive(&y, at);
        vt_check_report *r = check(&y, NULL);
        ASSERT_CLEAN(r, &y);
        vt_check_report_free(r);
        synth_fini(&y);
    }
}

TEST(alive_through_a_complete_step_before_the_end_is_flagged)
{
    synth y;
    ends_alive(&y, 6);  /* step 7 is complete and unused */
    vt_check_report *r = check(&y, NULL);
    ASSERT_EQ(r->nfindings, 1);
    ASSERT_EQ(r->findings[0].addr, LATE);
    ASSERT_EQ(r->findings[0].bytes, 3 * MiB);
    ASSERT_EQ(r->findings[0].steps_unused, 1);
    ASSERT_EQ(r->findings[0].freed, 0);
    ASSERT_EQ(r->findings[0].linger_ns, r->end_time_ns - r->findings[0].last_use_time_ns);
    vt_check_report_free(r);
    synth_fini(&y);
}

/* ------------------------------------------------------------------------ */
/*  Without marks: the time rule                                            */
/* ------------------------------------------------------------------------ */

#define XT 0x7fa000000000ull

/* No marks. Weights used every 100 ms for 31 s; X used every 100 ms during
 * the first second, freed at `free_at_ms` (0: alive at the end). */
static void no_marks(synth *y, uint64_t free_at_ms)
{
    synth_init(y);
    stacks(y);
    y->dt = 1000;  /* 1 us per event */
    synth_new_tensor(y, W_ID, W_ADDR, 4 * MiB, "fc.weight", st_init);
    synth_new_tensor(y, 60, XT, 10 * MiB, "x", st_fwd);
    uint64_t t0 = y->time;
    int freed = 0;
    for (int k = 0; k < 310; k++) {
        synth_tick(y, 100000000);
        synth_use(y, W_ID);
        if (k < 10)
            synth_use(y, 60);
        if (!freed && free_at_ms && y->time - t0 >= free_at_ms * 1000000ull) {
            synth_drop(y, 60);
            synth_free(y, XT);
            freed = 1;
        }
    }
}

TEST(no_marks_time_rule_flags_long_linger)
{
    synth y;
    no_marks(&y, 30000);
    vt_check_report *r = check(&y, NULL);
    ASSERT_EQ(r->nmarks, 0);
    ASSERT_EQ(r->grace_mode, VT_CHECK_GRACE_TIME);
    ASSERT_EQ(r->nfindings, 1);
    const vt_check_finding *f = &r->findings[0];
    ASSERT_EQ(f->addr, XT);
    ASSERT_EQ(f->grace_mode, VT_CHECK_GRACE_TIME);
    ASSERT_EQ(f->freed, 1);
    ASSERT_EQ(f->usual_gap_ns, 100000000 + 2000);  /* tick + two events */
    /* grace = 5% of ~31 s > 10 x 100 ms > 1 s */
    uint64_t dur = r->end_time_ns - r->start_time_ns;
    ASSERT_EQ(f->linger_from_time_ns, f->last_use_time_ns + dur / 100 * 5);
    ASSERT_GT(f->linger_ns, 28000000000ull);
    vt_check_report_free(r);
    synth_fini(&y);
}

TEST(no_marks_time_rule_fixed_is_clean)
{
    synth y;
    no_marks(&y, 1500);   /* freed 0.5 s after its last use */
    vt_check_report *r = check(&y, NULL);
    ASSERT_CLEAN(r, &y);
    vt_check_report_free(r);
    synth_fini(&y);
}

TEST(no_marks_alive_at_end_with_old_last_use_is_flagged)
{
    synth y;
    no_marks(&y, 0);
    vt_check_report *r = check(&y, NULL);
    ASSERT_EQ(r->nfindings, 1);
    ASSERT_EQ(r->findings[0].addr, XT);
    ASSERT_EQ(r->findings[0].freed, 0);
    vt_check_report_free(r);
    synth_fini(&y);
}

/* ------------------------------------------------------------------------ */
/*  Native traces (no tensor annotations)                                   */
/* ------------------------------------------------------------------------ */

static void native(synth *y, int fixed_leak, int fixed_outlier)
{
    synth_init(y);
    uint32_t s_w = synth_stack(y, "init_weights", "main", NULL);
    uint32_t s_leak = synth_stack(y, "append_history", "train_step", "main", NULL);
    uint32_t s_act = synth_stack(y, "activations", "train_step", "main", NULL);
    uint32_t s_adam = synth_stack(y, "adam_init_state", "train_step", "main", NULL);
    uint32_t s_grad = synth_stack(y, "grad_bucket", "train_step", "main", NULL);
    synth_alloc(y, W_ADDR, 4 * MiB, s_w);
    uint64_t kept = 0;
    for (int i = 1; i <= 6; i++) {
        char l[32];
        synth_tick(y, 100000000);
        snprintf(l, sizeof l, "step %d", i);
        synth_mark(y, l);
        uint64_t a = 0x7f1000000000ull + (uint64_t)i * 0x10000000ull;
        synth_alloc(y, a, 2 * MiB, s_act);
        synth_free(y, a);
        if (i == 1)
            for (int k = 0; k < 3; k++)
                synth_alloc(y, 0x7fb000000000ull + (uint64_t)k * 0x1000000, MiB, s_adam);
        uint64_t h = 0x7fc000000000ull + (uint64_t)i * 0x1000000;
        synth_alloc(y, h, MiB, s_leak);
        if (fixed_leak)
            synth_free(y, h);
        uint64_t g = 0x7fd000000000ull + (uint64_t)i * 0x1000000;
        synth_alloc(y, g, 3 * MiB, s_grad);
        if (i == 2 && !fixed_outlier)
            kept = g;
        else
            synth_free(y, g);
        if (i == 5 && kept)
            synth_free(y, kept);
    }
}

TEST(native_never_freed_call_site_is_flagged)
{
    synth y;
    native(&y, 0, 1);
    vt_check_report *r = check(&y, NULL);
    ASSERT_EQ(r->rules_run, VT_CHECK_RULE_NEVER_FREED | VT_CHECK_RULE_OUTLIER);
    ASSERT_EQ(r->nfindings, 1);
    const vt_check_finding *f = &r->findings[0];
    ASSERT_EQ(f->rule, VT_CHECK_RULE_NEVER_FREED);
    ASSERT_EQ(f->nallocs, 5);    /* steps 1..5; step 6 is after the last mark */
    ASSERT_EQ(f->bytes, 5 * MiB);
    ASSERT_EQ(f->freed, 0);
    ASSERT_EQ(f->npaths, 0);
    const vt_frame *fr = &y.s.frames[y.s.stack_nodes[f->alloc_stack].frame];
    ASSERT_STR_EQ(y.s.strings_blob + y.s.string_offsets[fr->function], "append_history");
    vt_check_report_free(r);
    synth_fini(&y);
}

TEST(native_outlier_call_site_is_flagged)
{
    synth y;
    native(&y, 1, 0);
    vt_check_report *r = check(&y, NULL);
    ASSERT_EQ(r->nfindings, 1);
    const vt_check_finding *f = &r->findings[0];
    ASSERT_EQ(f->rule, VT_CHECK_RULE_OUTLIER);
    ASSERT_EQ(f->nallocs, 1);
    ASSERT_EQ(f->addr, 0x7fd000000000ull + 2 * 0x1000000);
    ASSERT_EQ(f->bytes, 3 * MiB);
    ASSERT_EQ(f->freed, 1);
    ASSERT_GT(f->linger_ns, 200000000);   /* about 3 steps of 100 ms */
    vt_check_report_free(r);
    synth_fini(&y);
}

TEST(native_fixed_is_clean)
{
    synth y;
    native(&y, 1, 1);
    vt_check_report *r = check(&y, NULL);
    ASSERT_CLEAN(r, &y);
    vt_check_report_free(r);
    synth_fini(&y);
}

TEST(native_rules_can_be_selected_on_annotated_traces)
{
    synth y;
    gc_cycle(&y, 1);
    vt_check_options o;
    vt_check_options_init(&o);
    ASSERT_EQ(vt_check_parse_rules("linger,never-freed,outlier,pinned", &o.rules), 0);
    ASSERT_EQ(o.rules, VT_CHECK_RULES_ALL);
    vt_check_report *r = check(&y, &o);
    ASSERT_EQ(r->rules_run, VT_CHECK_RULES_ALL);
    ASSERT_CLEAN(r, &y);   /* weights: setup, not accumulating */
    vt_check_report_free(r);
    ASSERT_EQ(vt_check_parse_rules("linger,bogus", &o.rules), -EINVAL);
    synth_fini(&y);
}

/* ------------------------------------------------------------------------ */
/*  Options                                                                 */
/* ------------------------------------------------------------------------ */

TEST(grace_steps_option)
{
    synth y;
    gc_cycle(&y, 0);   /* steps 3, 4, 5 unused, freed in step 6 */
    vt_check_options o;
    vt_check_options_init(&o);
    ASSERT_EQ(vt_check_parse_grace("4steps", &o), 0);
    ASSERT_EQ(o.grace_mode, VT_CHECK_GRACE_STEPS);
    ASSERT_EQ(o.grace_steps, 4);
    vt_check_report *r = check(&y, &o);
    ASSERT_CLEAN(r, &y);
    vt_check_report_free(r);
    ASSERT_EQ(vt_check_parse_grace("3", &o), 0);
    r = check(&y, &o);
    ASSERT_EQ(r->nfindings, 2);
    ASSERT_EQ(r->grace_user, 1);
    ASSERT_EQ(r->grace_steps, 3);
    vt_check_report_free(r);
    synth_fini(&y);

    /* 0 steps: alive at the end of the step of its last use is enough. */
    pipeline(&y, 1);
    ASSERT_EQ(vt_check_parse_grace("0steps", &o), 0);
    r = check(&y, &o);
    ASSERT_CLEAN(r, &y);   /* freed within the step */
    vt_check_report_free(r);
    synth_fini(&y);
}

TEST(grace_time_option)
{
    synth y;
    gc_cycle(&y, 0);   /* steps are 100 ms: lingering about 400 ms */
    vt_check_options o;
    vt_check_options_init(&o);
    ASSERT_EQ(vt_check_parse_grace("50ms", &o), 0);
    ASSERT_EQ(o.grace_mode, VT_CHECK_GRACE_TIME);
    ASSERT_EQ(o.grace_ns, 50000000);
    vt_check_report *r = check(&y, &o);
    ASSERT_EQ(r->grace_mode, VT_CHECK_GRACE_TIME);
    ASSERT_EQ(r->nfindings, 2);
    ASSERT_EQ(r->findings[0].linger_from_time_ns, r->findings[0].last_use_time_ns + 50000000);
    ASSERT_EQ(r->findings[0].npaths, 1);   /* paths at last use + 50 ms: the cycle */
    ASSERT(r->findings[0].paths[0].cycle);
    vt_check_report_free(r);
    ASSERT_EQ(vt_check_parse_grace("2.5s", &o), 0);
    ASSERT_EQ(o.grace_ns, 2500000000ull);
    r = check(&y, &o);
    ASSERT_CLEAN(r, &y);
    vt_check_report_free(r);
    synth_fini(&y);

    ASSERT_EQ(vt_check_parse_grace("1.5steps", &o), -EINVAL);
    ASSERT_EQ(vt_check_parse_grace("-1s", &o), -EINVAL);
    ASSERT_EQ(vt_check_parse_grace("3parsecs", &o), -EINVAL);
    ASSERT_EQ(vt_check_parse_grace("", &o), -EINVAL);
    ASSERT_EQ(vt_check_parse_grace("auto", &o), 0);
    ASSERT_EQ(o.grace_mode, VT_CHECK_GRACE_AUTO);
}

TEST(ignore_patterns)
{
    synth y;
    gc_cycle(&y, 0);
    const char *pats[] = { "act1" };
    vt_check_options o;
    vt_check_options_init(&o);
    o.ignore = pats;
    o.nignore = 1;
    vt_check_report *r = check(&y, &o);
    ASSERT_EQ(r->nfindings, 1);
    ASSERT_EQ(r->findings[0].addr, ACT2);
    ASSERT_EQ(r->nignored, 1);
    vt_check_report_free(r);

    pats[0] = "act*";
    r = check(&y, &o);
    ASSERT_CLEAN(r, &y);
    ASSERT_EQ(r->nignored, 2);
    vt_check_report_free(r);

    pats[0] = "forward_*";   /* a function of the allocation stack */
    r = check(&y, &o);
    ASSERT_CLEAN(r, &y);
    vt_check_report_free(r);

    pats[0] = "backward_block";   /* a function of the last-use stack */
    r = check(&y, &o);
    ASSERT_CLEAN(r, &y);
    vt_check_report_free(r);

    pats[0] = "nothing*";
    r = check(&y, &o);
    ASSERT_EQ(r->nfindings, 2);
    ASSERT_EQ(r->nignored, 0);
    vt_check_report_free(r);
    synth_fini(&y);
}

TEST(max_paths_and_multiple_roots)
{
    /* One storage held by three lists: three roots, shortest first. */
    synth y;
    setup(&y);
    for (int i = 1; i <= 6; i++) {
        step(&y, i);
        if (i == 1) {
            synth_new_tensor(&y, 70, ACT1, MiB, "t", st_fwd);
            synth_holder(&y, 71, "deep");
            synth_holder(&y, 72, "mid");
            synth_holder(&y, 73, "short");
            synth_holder(&y, 74, "other");
            synth_ref(&y, 71, 72, ".x");
            synth_ref(&y, 72, 70, "[0]");
            synth_ref(&y, 73, 70, "[1]");
            synth_ref(&y, 74, 70, "[2]");
            synth_ref(&y, 73, 70, "[3]");   /* a second edge, same pair */
            synth_unref(&y, 73, 70);        /* removes the latest: [3] */
        }
    }
    vt_check_report *r = check(&y, NULL);
    ASSERT_EQ(r->nfindings, 1);
    const vt_check_finding *f = &r->findings[0];
    ASSERT_EQ(f->npaths, 3);
    ASSERT_STR_EQ(path_text(f, 0), "other[2] \xe2\x86\x92 tensor 't' \xe2\x86\x92 storage 0x7f2000000000 1 MiB");
    ASSERT_STR_EQ(path_text(f, 1), "short[1] \xe2\x86\x92 tensor 't' \xe2\x86\x92 storage 0x7f2000000000 1 MiB");
    ASSERT_STR_EQ(path_text(f, 2), "deep.x \xe2\x86\x92 mid[0] \xe2\x86\x92 tensor 't' \xe2\x86\x92 storage 0x7f2000000000 1 MiB");
    vt_check_report_free(r);

    vt_check_options o;
    vt_check_options_init(&o);
    o.max_paths = 1;
    r = check(&y, &o);
    ASSERT_EQ(r->findings[0].npaths, 1);
    vt_check_report_free(r);
    synth_fini(&y);
}

/* ------------------------------------------------------------------------ */
/*  Ranking, bytes, odd inputs                                              */
/* ------------------------------------------------------------------------ */

TEST(findings_ranked_by_bytes_times_time)
{
    /* small: 1 MiB held ~5 steps; big: 8 MiB held ~2 steps; mid: 3 MiB
     * (asked 3 MiB + 100, block rounded) held ~4 steps. */
    synth y;
    setup(&y);
    for (int i = 1; i <= 9; i++) {
        step(&y, i);
        if (i == 1) {
            synth_new_tensor(&y, 80, 0x7e0000000000ull, MiB, "small", st_fwd);
            synth_new_tensor(&y, 81, 0x7e1000000000ull, 8 * MiB, "big", st_fwd);
            synth_new_tensor(&y, 82, 0x7e2000000000ull, 3 * MiB + 100, "mid", st_fwd);
        }
        if (i == 4) { synth_drop(&y, 81); synth_free(&y, 0x7e1000000000ull); }
        if (i == 6) { synth_drop(&y, 82); synth_free(&y, 0x7e2000000000ull); }
        if (i == 7) { synth_drop(&y, 80); synth_free(&y, 0x7e0000000000ull); }
    }
    vt_check_report *r = check(&y, NULL);
    ASSERT_EQ(r->nfindings, 3);
    ASSERT_STR_EQ(r->findings[0].owner_name, "big");
    ASSERT_STR_EQ(r->findings[1].owner_name, "mid");
    ASSERT_STR_EQ(r->findings[2].owner_name, "small");
    ASSERT_EQ(r->findings[1].bytes, 3 * MiB + 100);
    ASSERT_EQ(r->findings[1].block_bytes, 3 * MiB + 512);
    double total = 0;
    for (size_t i = 0; i < r->nfindings; i++) {
        if (i)
            ASSERT(r->findings[i - 1].byte_seconds >= r->findings[i].byte_seconds);
        total += r->findings[i].byte_seconds;
    }
    ASSERT(fabs(total - r->total_byte_seconds) < 1e-6);
    ASSERT_EQ(r->total_bytes, 12 * MiB + 100);
    vt_check_report_free(r);
    synth_fini(&y);
}

TEST(external_storage_is_checked)
{
    synth y;
    setup(&y);
    for (int i = 1; i <= 6; i++) {
        step(&y, i);
        if (i == 1) {
            synth_ext(&y, 0x5555000000ull, 5 * MiB);
            synth_tensor(&y, 90, 0x5555000000ull, 5 * MiB, 0, "cpu batch");
            synth_holder(&y, 91, "DataLoader");
            synth_ref(&y, 91, 90, "._prefetched[0]");
        }
        if (i == 5) {
            synth_unref(&y, 91, 90);
            synth_drop(&y, 90);
            synth_ext_free(&y, 0x5555000000ull);
        }
    }
    vt_check_report *r = check(&y, NULL);
    ASSERT_EQ(r->nfindings, 1);
    const vt_check_finding *f = &r->findings[0];
    ASSERT_EQ(f->external, 1);
    ASSERT_EQ(f->device, -1);
    ASSERT_EQ(f->bytes, 5 * MiB);
    ASSERT_EQ(f->freed, 1);
    ASSERT_STR_EQ(path_text(f, 0),
        "DataLoader._prefetched[0] \xe2\x86\x92 tensor 'cpu batch' \xe2\x86\x92 "
        "storage 0x5555000000 5 MiB");
    vt_check_report_free(r);
    synth_fini(&y);
}

TEST(storage_from_before_the_window_and_dropped_tensors)
{
    /* A tensor on memory allocated before the window (no ALLOC seen), dropped
     * in step 1 while the storage lives on (e.g. a leaked raw pointer). */
    synth y;
    setup(&y);
    for (int i = 1; i <= 6; i++) {
        step(&y, i);
        if (i == 1) {
            synth_tensor(&y, 95, 0x7ee000000000ull, 6 * MiB, 0, "old");
            synth_use(&y, 95);
            synth_drop(&y, 95);
        }
        if (i == 5)
            synth_free(&y, 0x7ee000000000ull);
    }
    vt_check_report *r = check(&y, NULL);
    ASSERT_EQ(r->nfindings, 1);
    const vt_check_finding *f = &r->findings[0];
    ASSERT_EQ(f->before_window, 1);
    ASSERT_EQ(f->bytes, 6 * MiB);
    ASSERT_EQ(f->freed, 1);
    ASSERT_EQ(f->npaths, 0);   /* nothing alive holds it */
    vt_check_report_free(r);
    synth_fini(&y);
}

TEST(empty_and_malformed_inputs_never_fail)
{
    synth y;
    synth_init(&y);
    vt_check_report *r = check(&y, NULL);
    ASSERT_CLEAN(r, &y);
    vt_check_report_free(r);
    /* Garbage: unknown ids, unref without ref, frees of nothing, uses of
     * unknown tensors, out-of-range strings and stacks. */
    for (int i = 0; i < 50; i++) {
        vt_event *e = synth_ev(&y, (uint8_t)(i % 30));
        e->aux = (uint64_t)i * 7;
        e->aux2 = (uint64_t)i * 3;
        e->addr = (uint64_t)i * 4096;
        e->size = 4096;
        e->str = (uint32_t)i * 1000;
        e->stack = (uint32_t)i * 1000;
    }
    vt_check_options o;
    vt_check_options_init(&o);
    o.rules = VT_CHECK_RULES_ALL;
    r = check(&y, &o);
    FILE *devnull = fopen("/dev/null", "w");
    ASSERT(devnull);
    ASSERT_EQ(vt_check_report_print(devnull, r, &y.s, 0), 0);
    ASSERT_EQ(vt_check_report_write_json(devnull, r, &y.s), 0);
    fclose(devnull);
    vt_check_report_free(r);
    ASSERT_EQ(vt_check_run(NULL, NULL, &r, NULL, 0), -EINVAL);
    synth_fini(&y);
}

TEST(path_format_truncates_like_snprintf)
{
    synth y;
    pipeline(&y, 0);
    vt_check_report *r = check(&y, NULL);
    char small[10];
    size_t need = vt_check_path_format(&r->findings[0].paths[0], small, sizeof small);
    char big[512];
    ASSERT_EQ(vt_check_path_format(&r->findings[0].paths[0], big, sizeof big), need);
    ASSERT_EQ(strlen(big), need);
    ASSERT_EQ(strlen(small), sizeof small - 1);
    ASSERT_EQ(strncmp(small, big, sizeof small - 1), 0);
    vt_check_report_free(r);
    synth_fini(&y);
}

/* ------------------------------------------------------------------------ */
/*  Output                                                                  */
/* ------------------------------------------------------------------------ */

static char *render(const vt_check_report *r, const synth *y, int json)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    ASSERT(f);
    if (json)
        ASSERT_EQ(vt_check_report_write_json(f, r, &y->s), 0);
    else
        ASSERT_EQ(vt_check_report_print(f, r, &y->s, 0), 0);
    fclose(f);
    return buf;
}

TEST(json_output_is_valid_and_complete)
{
    synth y;
    view_pins_base(&y, 0);
    vt_check_report *r = check(&y, NULL);
    char *js = render(r, &y, 1);
    const char *why = json_validate(js);
    ASSERT_MSG(!why, "invalid JSON (%s): %s", why, js);
    ASSERT_STR_CONTAINS(js, "\"vramtrace_check\":1");
    ASSERT_STR_CONTAINS(js, "\"rule\":\"linger\"");
    ASSERT_STR_CONTAINS(js, "\"addr\":\"0x7f4000000000\"");
    ASSERT_STR_CONTAINS(js, "\"bytes\":67108864");
    ASSERT_STR_CONTAINS(js, "\"owner\":{\"id\":10,\"name\":\"padded\"}");
    ASSERT_STR_CONTAINS(js, "\"view_of\":{\"id\":10,\"name\":\"padded\"}");
    ASSERT_STR_CONTAINS(js, "\"function\":\"forward_block\"");
    ASSERT_STR_CONTAINS(js, "\"text\":\"outputs[0] \xe2\x86\x92 tensor 'z' (view of 'padded')");
    ASSERT_STR_CONTAINS(js, "\"grace\":{\"mode\":\"steps\",\"steps\":null,\"seconds\":null}");
    free(js);
    vt_check_report_free(r);
    synth_fini(&y);

    /* Clean, native, and odd strings. */
    native(&y, 0, 0);
    synth_str(&y, "x");
    r = check(&y, NULL);
    js = render(r, &y, 1);
    why = json_validate(js);
    ASSERT_MSG(!why, "invalid JSON (%s): %s", why, js);
    ASSERT_STR_CONTAINS(js, "\"rule\":\"never-freed\"");
    ASSERT_STR_CONTAINS(js, "\"rule\":\"outlier\"");
    ASSERT_STR_CONTAINS(js, "\"owner\":null");
    free(js);
    vt_check_report_free(r);
    synth_fini(&y);

    setup(&y);
    synth_holder(&y, 5, "quote\" back\\slash \x01 tab\t");
    synth_ref(&y, 5, W_ID, "[\"k\"]");
    for (int i = 1; i <= 4; i++) {
        synth_tick(&y, 100000000);
        synth_mark(&y, "s");
    }
    r = check(&y, NULL);
    ASSERT_EQ(r->nfindings, 1);
    js = render(r, &y, 1);
    why = json_validate(js);
    ASSERT_MSG(!why, "invalid JSON (%s): %s", why, js);
    ASSERT_STR_CONTAINS(js, "quote\\\" back\\\\slash \\u0001 tab\\t");
    free(js);
    vt_check_report_free(r);
    synth_fini(&y);
}

TEST(text_report_names_everything)
{
    synth y;
    pipeline(&y, 0);
    vt_check_report *r = check(&y, NULL);
    char *t = render(r, &y, 0);
    ASSERT_STR_CONTAINS(t, "vramtrace check: 2 findings, 48 MiB held after last use");
    ASSERT_STR_CONTAINS(t, "#1 [linger] storage 0x7f6001000000 on cuda:0, 32 MiB");
    ASSERT_STR_CONTAINS(t, "owner: tensor 'send 1' (#21)");
    ASSERT_STR_CONTAINS(t, "at forward_block (train.c:10)");
    ASSERT_STR_CONTAINS(t, "last use: tensor 'send 1' (#21)");
    ASSERT_STR_CONTAINS(t, "at backward_block (train.c:10)");
    ASSERT_STR_CONTAINS(t, "2 complete steps unused (used in one step only)");
    ASSERT_STR_CONTAINS(t, "freed: seq");
    ASSERT_STR_CONTAINS(t, " MiB\xc2\xb7s");
    ASSERT_STR_CONTAINS(t, "Context.output_tensors \xe2\x86\x92 list[1]");
    free(t);
    vt_check_report_free(r);
    synth_fini(&y);

    ends_alive(&y, 6);
    r = check(&y, NULL);
    t = render(r, &y, 0);
    ASSERT_STR_CONTAINS(t, "still alive at the end");
    ASSERT_STR_CONTAINS(t, "held by (at the end):");
    free(t);
    vt_check_report_free(r);
    synth_fini(&y);
}

/* ------------------------------------------------------------------------ */
/*  Performance                                                             */
/* ------------------------------------------------------------------------ */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* ------------------------------------------------------------------------ */
/*  PINNED: small views keeping a dropped base's storage alive              */
/* ------------------------------------------------------------------------ */

#define BIG 0x7e8000000000ull
#define SMALL 0x7e9000000000ull
#define BIG_ID 60
#define X_ID 63

enum { PIN_LEAK, PIN_FIXED, PIN_MOSTLY_COVERED, PIN_BASE_ALIVE };

/* `x = big[:, :10]` (40 B of a 4 KiB buffer) kept on the model and used
 * every step; `big` dropped in step 2. Fixed: x is a clone in its own 40 B
 * storage and big's storage is freed. Mostly covered: the view holds 90% of
 * the buffer. Base alive: big is never dropped (still referenced). */
static void pinned_view(synth *y, int mode)
{
    setup(y);
    for (int i = 1; i <= 8; i++) {
        step(y, i);
        if (i == 2) {
            synth_new_tensor(y, BIG_ID, BIG, 4096, "big", st_fwd);
            synth_use(y, BIG_ID);
            synth_holder(y, 61, "model");
            if (mode == PIN_FIXED) {
                synth_tensor(y, 62, BIG, 40, BIG_ID, "x view");
                synth_alloc(y, SMALL, 40, st_fwd);
                synth_tensor(y, X_ID, SMALL, 40, 0, "x");   /* x = big[:, :10].clone() */
                synth_drop(y, 62);
                synth_drop(y, BIG_ID);
                synth_free(y, BIG);
            } else {
                uint64_t nb = mode == PIN_MOSTLY_COVERED ? 3687 : 40;  /* 90% : ~1% */
                synth_tensor(y, X_ID, BIG, nb, BIG_ID, "x");
                if (mode != PIN_BASE_ALIVE)
                    synth_drop(y, BIG_ID);
                else
                    synth_ref(y, 61, BIG_ID, ".big");
            }
            synth_ref(y, 61, X_ID, ".x");
        }
        if (i >= 2)
            synth_use_at(y, X_ID, st_bwd);
    }
}

static uint64_t mark_seq_of(const synth *y, const char *label)
{
    for (size_t i = 0; i < y->s.nevents; i++) {
        const vt_event *e = &y->s.events[i];
        if (e->kind == VT_EV_MARK && !strcmp(y->s.strings_blob + y->s.string_offsets[e->str], label))
            return e->seq;
    }
    return 0;
}

TEST(pinned_used_view_is_flagged_with_wasted_bytes_and_path)
{
    synth y;
    pinned_view(&y, PIN_LEAK);
    vt_check_report *r = check(&y, NULL);
    ASSERT_EQ(r->rules_run, VT_CHECK_RULE_LINGER | VT_CHECK_RULE_PINNED);
    if (r->nfindings != 1)
        dump(r, &y);
    ASSERT_EQ(r->nfindings, 1);   /* used every step: LINGER stays silent */
    const vt_check_finding *f = &r->findings[0];
    ASSERT_EQ(f->rule, VT_CHECK_RULE_PINNED);
    ASSERT_EQ(f->addr, BIG);
    ASSERT_EQ(f->bytes, 4096);
    ASSERT_EQ(f->covered_bytes, 40);
    ASSERT_EQ(f->wasted_bytes, 4096 - 40);
    ASSERT_EQ(r->total_bytes, 4096 - 40);
    ASSERT_EQ(f->owner_id, BIG_ID);
    ASSERT_STR_EQ(f->owner_name, "big");
    ASSERT_EQ(f->ntensors, 2);
    ASSERT_EQ(f->freed, 0);
    ASSERT_GT(f->owner_drop_seq, 0);
    ASSERT_EQ(f->pinned_since_seq, f->owner_drop_seq);
    ASSERT_EQ(f->pinned_until_seq, UINT64_MAX);
    ASSERT_EQ(f->pinned_cut, 0);
    /* Dropped in step 2; one complete step (3) later, at the mark of step 4. */
    ASSERT_EQ(f->linger_from_seq, mark_seq_of(&y, "step 4"));
    ASSERT_EQ(f->steps_unused, 5);   /* steps 3..7 complete and pinned */
    ASSERT_EQ(f->linger_ns, r->end_time_ns - f->owner_drop_time_ns);
    ASSERT(fabs(f->byte_seconds - 4056.0 * (double)f->linger_ns / 1e9) < 1e-6);
    ASSERT_EQ(f->last_use_tensor, X_ID);
    ASSERT_EQ(f->nviews, 1);
    ASSERT_EQ(f->nviews_live, 1);
    ASSERT_EQ(f->views[0].id, X_ID);
    ASSERT_STR_EQ(f->views[0].name, "x");
    ASSERT_EQ(f->views[0].base_id, BIG_ID);
    ASSERT_STR_EQ(f->views[0].base_name, "big");
    ASSERT_EQ(f->views[0].bytes, 40);
    ASSERT_EQ(f->path_seq, UINT64_MAX);
    ASSERT_EQ(f->npaths, 1);
    ASSERT_STR_EQ(path_text(f, 0),
        "model.x \xe2\x86\x92 tensor 'x' (view of 'big') \xe2\x86\x92 "
        "storage 0x7e8000000000 4 KiB");
    char *t = NULL;
    size_t tl = 0;
    FILE *mf = open_memstream(&t, &tl);
    ASSERT(mf);
    ASSERT_EQ(vt_check_report_print(mf, r, &y.s, 0), 0);
    fclose(mf);
    ASSERT_STR_CONTAINS(t, "#1 [pinned] storage 0x7e8000000000 on cuda:0, 4 KiB");
    ASSERT_STR_CONTAINS(t, "kept by: tensor 'x' (view of 'big', 40 B of 4 KiB)");
    ASSERT_STR_CONTAINS(t, "wasted: 3.96 KiB of 4 KiB (live views cover 40 B)");
    ASSERT_STR_CONTAINS(t, "held by (at the end):");
    ASSERT_STR_CONTAINS(t, "model.x \xe2\x86\x92 tensor 'x' (view of 'big')");
    ASSERT_STR_CONTAINS(t, "or pinned by small views");
    free(t);
    vt_check_report_free(r);

    /* The grace: 5 complete steps pinned is enough, 6 are not there. */
    vt_check_options o;
    vt_check_options_init(&o);
    ASSERT_EQ(vt_check_parse_grace("5steps", &o), 0);
    r = check(&y, &o);
    ASSERT_EQ(r->nfindings, 1);
    ASSERT_EQ(r->findings[0].linger_from_seq, mark_seq_of(&y, "step 8"));
    vt_check_report_free(r);
    ASSERT_EQ(vt_check_parse_grace("6steps", &o), 0);
    r = check(&y, &o);
    ASSERT_CLEAN(r, &y);
    vt_check_report_free(r);

    /* Selected alone or not at all. */
    vt_check_options_init(&o);
    ASSERT_EQ(vt_check_parse_rules("pinned", &o.rules), 0);
    ASSERT_EQ(o.rules, VT_CHECK_RULE_PINNED);
    r = check(&y, &o);
    ASSERT_EQ(r->rules_run, VT_CHECK_RULE_PINNED);
    ASSERT_EQ(r->nfindings, 1);
    vt_check_report_free(r);
    ASSERT_EQ(vt_check_parse_rules("linger", &o.rules), 0);
    r = check(&y, &o);
    ASSERT_CLEAN(r, &y);
    vt_check_report_free(r);

    /* --ignore applies. */
    const char *pats[] = { "big" };
    vt_check_options_init(&o);
    o.ignore = pats;
    o.nignore = 1;
    r = check(&y, &o);
    ASSERT_CLEAN(r, &y);
    ASSERT_EQ(r->nignored, 1);
    vt_check_report_free(r);
    synth_fini(&y);
}

TEST(pinned_fixed_clone_is_clean)
{
    synth y;
    pinned_view(&y, PIN_FIXED);
    vt_check_report *r = check(&y, NULL);
    ASSERT_CLEAN(r, &y);
    vt_check_report_free(r);
    synth_fini(&y);
}

TEST(pinned_view_covering_most_of_its_base_is_clean)
{
    synth y;
    pinned_view(&y, PIN_MOSTLY_COVERED);
    vt_check_report *r = check(&y, NULL);
    ASSERT_CLEAN(r, &y);
    vt_check_report_free(r);
    /* ... unless the ratio asks for more than 90%. */
    vt_check_options o;
    vt_check_options_init(&o);
    ASSERT_EQ(vt_check_parse_pinned_ratio("95%", &o.pinned_ratio), 0);
    r = check(&y, &o);
    ASSERT_EQ(r->nfindings, 1);
    ASSERT_EQ(r->findings[0].rule, VT_CHECK_RULE_PINNED);
    ASSERT_EQ(r->findings[0].covered_bytes, 3687);
    ASSERT_EQ(r->findings[0].wasted_bytes, 4096 - 3687);
    ASSERT(fabs(r->pinned_ratio - 0.95) < 1e-12);
    vt_check_report_free(r);
    ASSERT_EQ(vt_check_parse_pinned_ratio("0.9", &o.pinned_ratio), 0);  /* 3687 >= 0.9 x 4096 */
    r = check(&y, &o);
    ASSERT_CLEAN(r, &y);
    vt_check_report_free(r);
    synth_fini(&y);
}

TEST(pinned_base_still_alive_is_not_pinned)
{
    synth y;
    pinned_view(&y, PIN_BASE_ALIVE);
    vt_check_options o;
    vt_check_options_init(&o);
    o.pinned_ratio = 1;
    vt_check_report *r = check(&y, &o);
    ASSERT_CLEAN(r, &y);
    vt_check_report_free(r);
    synth_fini(&y);
}

TEST(pinned_ratio_parse)
{
    double v = 0.5;
    ASSERT_EQ(vt_check_parse_pinned_ratio("0.25", &v), 0);
    ASSERT(fabs(v - 0.25) < 1e-12);
    ASSERT_EQ(vt_check_parse_pinned_ratio("10%", &v), 0);
    ASSERT(fabs(v - 0.10) < 1e-12);
    ASSERT_EQ(vt_check_parse_pinned_ratio("1", &v), 0);
    ASSERT_EQ(v, 1.0);
    ASSERT_EQ(vt_check_parse_pinned_ratio("100%", &v), 0);
    ASSERT_EQ(v, 1.0);
    v = 0.5;
    ASSERT_EQ(vt_check_parse_pinned_ratio("0", &v), -EINVAL);
    ASSERT_EQ(vt_check_parse_pinned_ratio("0%", &v), -EINVAL);
    ASSERT_EQ(vt_check_parse_pinned_ratio("1.5", &v), -EINVAL);
    ASSERT_EQ(vt_check_parse_pinned_ratio("101%", &v), -EINVAL);
    ASSERT_EQ(vt_check_parse_pinned_ratio("-0.5", &v), -EINVAL);
    ASSERT_EQ(vt_check_parse_pinned_ratio("half", &v), -EINVAL);
    ASSERT_EQ(vt_check_parse_pinned_ratio("0.5x", &v), -EINVAL);
    ASSERT_EQ(vt_check_parse_pinned_ratio("nan", &v), -EINVAL);
    ASSERT_EQ(vt_check_parse_pinned_ratio("", &v), -EINVAL);
    ASSERT_EQ(vt_check_parse_pinned_ratio(NULL, &v), -EINVAL);
    ASSERT_EQ(v, 0.5);
    vt_check_options o;
    vt_check_options_init(&o);
    ASSERT_EQ(o.pinned_ratio, VT_CHECK_PINNED_RATIO);
    ASSERT_STR_EQ(vt_check_rule_name(VT_CHECK_RULE_PINNED), "pinned");
    unsigned rules = 0;
    ASSERT_EQ(vt_check_parse_rules("all", &rules), 0);
    ASSERT(rules & VT_CHECK_RULE_PINNED);
}

/* The view is used in steps 2..4 only, then kept unused until step 8: LINGER
 * flags the storage from its last use, PINNED only up to it. */
static void pinned_then_lingering(synth *y, int last_use_step)
{
    setup(y);
    for (int i = 1; i <= 9; i++) {
        step(y, i);
        if (i == 2) {
            synth_new_tensor(y, BIG_ID, BIG, 4096, "big", st_fwd);
            synth_holder(y, 61, "model");
            synth_tensor(y, X_ID, BIG, 40, BIG_ID, "x");
            synth_ref(y, 61, X_ID, ".x");
            synth_drop(y, BIG_ID);
        }
        if (i >= 2 && i <= last_use_step)
            synth_use(y, X_ID);
        if (i == 8) {
            synth_unref(y, 61, X_ID);
            synth_drop(y, X_ID);
            synth_free(y, BIG);
        }
    }
}

TEST(pinned_and_linger_never_report_the_same_interval)
{
    synth y;
    pinned_then_lingering(&y, 4);
    vt_check_report *r = check(&y, NULL);
    if (r->nfindings != 2)
        dump(r, &y);
    ASSERT_EQ(r->nfindings, 2);
    const vt_check_finding *lg = NULL, *pn = NULL;
    for (size_t i = 0; i < r->nfindings; i++) {
        if (r->findings[i].rule == VT_CHECK_RULE_LINGER)
            lg = &r->findings[i];
        if (r->findings[i].rule == VT_CHECK_RULE_PINNED)
            pn = &r->findings[i];
    }
    ASSERT(lg && pn);
    ASSERT_EQ(lg->addr, BIG);
    ASSERT_EQ(pn->addr, BIG);
    /* PINNED: from the drop (step 2) to the last use (step 4), then LINGER. */
    ASSERT_EQ(pn->pinned_cut, 1);
    ASSERT_EQ(pn->pinned_until_seq, lg->last_use_seq);
    ASSERT_EQ(pn->pinned_until_time_ns, lg->last_use_time_ns);
    ASSERT_EQ(pn->linger_ns, lg->last_use_time_ns - pn->owner_drop_time_ns);
    ASSERT_EQ(pn->linger_from_seq, mark_seq_of(&y, "step 4"));
    ASSERT_EQ(pn->path_seq, pn->linger_from_seq);
    ASSERT_EQ(pn->wasted_bytes, 4056);
    ASSERT_STR_EQ(path_text(pn, 0),
        "model.x \xe2\x86\x92 tensor 'x' (view of 'big') \xe2\x86\x92 "
        "storage 0x7e8000000000 4 KiB");
    ASSERT_EQ(lg->bytes, 4096);
    ASSERT_EQ(r->total_bytes, 4096 + 4056);
    vt_check_report_free(r);

    /* PINNED alone is not cut: pinned until the view's drop in step 8. */
    vt_check_options o;
    vt_check_options_init(&o);
    o.rules = VT_CHECK_RULE_PINNED;
    r = check(&y, &o);
    ASSERT_EQ(r->nfindings, 1);
    ASSERT_EQ(r->findings[0].pinned_cut, 0);
    ASSERT_GT(r->findings[0].pinned_until_seq, lg ? 0 : 0);
    ASSERT_EQ(r->findings[0].freed, 1);
    ASSERT_LT(r->findings[0].pinned_until_seq, r->findings[0].free_seq);  /* the drop */
    vt_check_report_free(r);
    synth_fini(&y);

    /* Used in step 3 only after the drop: what is left before the last use
     * does not outlast a complete step, so LINGER's finding is the only one. */
    pinned_then_lingering(&y, 3);
    r = check(&y, NULL);
    ASSERT_EQ(r->nfindings, 1);
    ASSERT_EQ(r->findings[0].rule, VT_CHECK_RULE_LINGER);
    vt_check_report_free(r);
    synth_fini(&y);
}

TEST(pinned_coverage_is_the_union_of_live_views_clipped)
{
    /* A 1000 B storage (block 1024). Views a [0,300), b [200,400),
     * c [400,800), d [950,1250) -> clipped to [950,1000). With c alive they
     * cover 750 B; c dropped in step 3 leaves 450 B (45%): pinned from there. */
    synth y;
    setup(&y);
    for (int i = 1; i <= 8; i++) {
        step(&y, i);
        if (i == 2) {
            synth_new_tensor(&y, BIG_ID, BIG, 1000, "base", st_fwd);
            synth_tensor(&y, 71, BIG, 300, BIG_ID, "a");
            synth_tensor(&y, 72, BIG + 200, 200, BIG_ID, "b");
            synth_tensor(&y, 73, BIG + 400, 400, BIG_ID, "c");
            synth_tensor(&y, 74, BIG + 950, 300, 71, "d");   /* a view of a view */
            synth_drop(&y, BIG_ID);
        }
        if (i == 3)
            synth_drop(&y, 73);
        if (i >= 2)
            for (uint64_t v = 71; v <= 74; v++)
                if (v != 73 || i < 3)
                    synth_use(&y, v);
    }
    vt_check_report *r = check(&y, NULL);
    if (r->nfindings != 1)
        dump(r, &y);
    ASSERT_EQ(r->nfindings, 1);
    const vt_check_finding *f = &r->findings[0];
    ASSERT_EQ(f->rule, VT_CHECK_RULE_PINNED);
    ASSERT_EQ(f->bytes, 1000);
    ASSERT_EQ(f->block_bytes, 1024);
    ASSERT_EQ(f->covered_bytes, 450);
    ASSERT_EQ(f->wasted_bytes, 550);
    ASSERT_GT(f->pinned_since_seq, f->owner_drop_seq);   /* c's drop */
    ASSERT_EQ(f->linger_from_seq, mark_seq_of(&y, "step 5"));
    ASSERT_EQ(f->nviews_live, 3);
    ASSERT_EQ(f->nviews, 3);
    ASSERT_EQ(f->views[0].id, 71);   /* largest first: 300, 300 (by id), 200 */
    ASSERT_EQ(f->views[1].id, 74);
    ASSERT_EQ(f->views[1].covered_bytes, 50);
    ASSERT_STR_EQ(f->views[1].base_name, "a");
    ASSERT_EQ(f->views[2].id, 72);
    ASSERT(fabs(f->byte_seconds - 550.0 * (double)f->linger_ns / 1e9) < 1e-6);
    ASSERT_EQ(f->npaths, 3);   /* three live views, three roots */
    vt_check_report_free(r);
    synth_fini(&y);
}

/* No marks: weights and view used every 100 ms for 31 s; the base dropped
 * at 1 s; the view (and the storage) released at `release_ms`. */
static void pinned_no_marks(synth *y, uint64_t release_ms)
{
    synth_init(y);
    stacks(y);
    y->dt = 1000;
    synth_new_tensor(y, W_ID, W_ADDR, 4 * MiB, "fc.weight", st_init);
    synth_new_tensor(y, BIG_ID, BIG, 64 * MiB, "padded", st_fwd);
    synth_tensor(y, X_ID, BIG, MiB, BIG_ID, "x");
    uint64_t t0 = y->time;
    int dropped = 0, released = 0;
    for (int k = 0; k < 310; k++) {
        synth_tick(y, 100000000);
        synth_use(y, W_ID);
        if (!released)
            synth_use(y, X_ID);
        if (!dropped && y->time - t0 >= 1000000000ull) {
            synth_drop(y, BIG_ID);
            dropped = 1;
        }
        if (!released && y->time - t0 >= release_ms * 1000000ull) {
            synth_drop(y, X_ID);
            synth_free(y, BIG);
            released = 1;
        }
    }
}

TEST(pinned_time_rule_without_marks)
{
    synth y;
    pinned_no_marks(&y, 20000);   /* pinned 19 s: over max(1 s, 5% of 31 s) */
    vt_check_report *r = check(&y, NULL);
    ASSERT_EQ(r->grace_mode, VT_CHECK_GRACE_TIME);
    ASSERT_EQ(r->nfindings, 1);
    const vt_check_finding *f = &r->findings[0];
    ASSERT_EQ(f->rule, VT_CHECK_RULE_PINNED);
    ASSERT_EQ(f->grace_mode, VT_CHECK_GRACE_TIME);
    ASSERT_EQ(f->wasted_bytes, 63 * MiB);
    uint64_t grace = (r->end_time_ns - r->start_time_ns) / 100 * VT_CHECK_TIME_FRACTION_PCT;
    ASSERT_EQ(f->linger_from_time_ns, f->owner_drop_time_ns + grace);
    ASSERT_EQ(f->freed, 1);
    ASSERT_EQ(f->path_seq, f->linger_from_seq);
    ASSERT_STR_EQ(path_text(f, 0), "tensor 'x' (view of 'padded') \xe2\x86\x92 "
                                   "storage 0x7e8000000000 64 MiB");
    vt_check_report_free(r);
    synth_fini(&y);

    pinned_no_marks(&y, 2000);    /* pinned 1 s: under the grace */
    r = check(&y, NULL);
    ASSERT_CLEAN(r, &y);
    vt_check_report_free(r);
    vt_check_options o;
    vt_check_options_init(&o);
    ASSERT_EQ(vt_check_parse_grace("500ms", &o), 0);
    r = check(&y, &o);
    ASSERT_EQ(r->nfindings, 1);
    ASSERT_EQ(r->findings[0].rule, VT_CHECK_RULE_PINNED);
    vt_check_report_free(r);
    synth_fini(&y);
}

TEST(pinned_json_has_rule_and_wasted_bytes)
{
    synth y;
    pinned_view(&y, PIN_LEAK);
    vt_check_report *r = check(&y, NULL);
    char *js = render(r, &y, 1);
    const char *why = json_validate(js);
    ASSERT_MSG(!why, "invalid JSON (%s): %s", why, js);
    ASSERT_STR_CONTAINS(js, "\"rules_run\":[\"linger\",\"pinned\"]");
    ASSERT_STR_CONTAINS(js, "\"pinned_ratio\":0.5,");
    ASSERT_STR_CONTAINS(js, "\"rule\":\"pinned\"");
    ASSERT_STR_CONTAINS(js, "\"bytes\":4096,");
    ASSERT_STR_CONTAINS(js, "\"wasted_bytes\":4056,\"pinned\":{\"owner_dropped\":{\"seq\":");
    ASSERT_STR_CONTAINS(js, "\"until\":\"end\",\"cut_at_last_use\":false,"
                            "\"covered_bytes\":40,\"wasted_bytes\":4056,\"views_live\":1,"
                            "\"views\":[{\"id\":63,\"name\":\"x\",\"view_of\":{\"id\":60,"
                            "\"name\":\"big\"},\"addr\":\"0x7e8000000000\",\"bytes\":40,"
                            "\"covered_bytes\":40}]}");
    ASSERT_STR_CONTAINS(js, "\"total_bytes\":4056,");
    ASSERT_STR_CONTAINS(js, "\"paths_at\":\"end\"");
    ASSERT_STR_CONTAINS(js, "\"text\":\"model.x \xe2\x86\x92 tensor 'x' (view of 'big')");
    free(js);
    vt_check_report_free(r);
    synth_fini(&y);

    /* Other findings carry "wasted_bytes":0 and "pinned":null. */
    pinned_then_lingering(&y, 4);
    r = check(&y, NULL);
    js = render(r, &y, 1);
    why = json_validate(js);
    ASSERT_MSG(!why, "invalid JSON (%s): %s", why, js);
    ASSERT_STR_CONTAINS(js, "\"wasted_bytes\":0,\"pinned\":null");
    ASSERT_STR_CONTAINS(js, "\"cut_at_last_use\":true");
    free(js);
    vt_check_report_free(r);
    synth_fini(&y);
}

TEST(pinned_many_views_are_summarized)
{
    /* One 64 MiB buffer cut into 60000 1 KiB views; the base dropped, then
     * the views dropped one per event: coverage falls under half midway. */
    synth y;
    synth_init(&y);
    y.dt = 1000;
    uint32_t nm = synth_str(&y, "piece");
    synth_alloc(&y, BIG, 64 * MiB, 0);
    synth_tensor(&y, 1, BIG, 64 * MiB, 0, "base");
    const uint64_t n = 60000;
    for (uint64_t v = 0; v < n; v++) {
        vt_event *e = synth_ev(&y, VT_EV_TENSOR_NEW);
        e->aux = 10 + v;
        e->aux2 = 1;
        e->addr = BIG + v * 1024;
        e->size = 1024;
        e->str = nm;
    }
    synth_drop(&y, 1);
    for (uint64_t v = 0; v < n; v++) {
        synth_drop(&y, 10 + v);
        synth_tick(&y, 1000000);
    }
    double t0 = now_s();
    vt_check_options o;
    vt_check_options_init(&o);
    ASSERT_EQ(vt_check_parse_grace("1s", &o), 0);
    o.rules = VT_CHECK_RULE_PINNED;   /* nothing is used: LINGER would take it all */
    vt_check_report *r = check(&y, &o);
    double dt = now_s() - t0;
    fprintf(stderr, "pinned: %zu events, %" PRIu64 " views in %.3f s\n", y.s.nevents, n, dt);
    ASSERT_EQ(r->nfindings, 1);
    const vt_check_finding *f = &r->findings[0];
    ASSERT_EQ(f->rule, VT_CHECK_RULE_PINNED);
    ASSERT_EQ(f->nviews, VT_CHECK_MAX_VIEWS);
    ASSERT_LT(f->covered_bytes, 32 * MiB);
    ASSERT_EQ(f->covered_bytes, (uint64_t)f->nviews_live * 1024);
    vt_check_report_free(r);
    synth_fini(&y);
}


TEST(one_million_events_checked)
{
    /* 4000 steps x ~250 events: 20 weights used every step, 30 activations
     * (alloc, new, 2 uses, ref/unref from a per-step context, drop, free),
     * and every 50 steps one activation kept forever in a history list. */
    synth y;
    synth_init(&y);
    uint32_t s_a = synth_stack(&y, "act", "train_step", "main", NULL);
    uint32_t nm_w = synth_str(&y, "weight"), nm_a = synth_str(&y, "act");
    uint32_t nm_ctx = synth_str(&y, "ctx"), nm_l = synth_str(&y, "[i]");
    uint32_t nm_mark = synth_str(&y, "step");
    y.dt = 1000;
    for (int w = 0; w < 20; w++) {
        synth_alloc(&y, 0x100000000ull + (uint64_t)w * 0x1000000, MiB, s_a);
        vt_event *e = synth_ev(&y, VT_EV_TENSOR_NEW);
        e->aux = 1 + (uint64_t)w;
        e->addr = 0x100000000ull + (uint64_t)w * 0x1000000;
        e->size = MiB;
        e->str = nm_w;
    }
    synth_holder(&y, 900000000, "history");
    uint64_t id = 1000;
    for (int st = 0; st < 4000; st++) {
        synth_ev(&y, VT_EV_MARK)->str = nm_mark;
        for (int w = 0; w < 20; w++)
            synth_ev(&y, VT_EV_TENSOR_USE)->aux = 1 + (uint64_t)w;
        uint64_t ctx = 800000000 + (uint64_t)st;
        vt_event *h = synth_ev(&y, VT_EV_HOLDER_NEW);
        h->aux = ctx;
        h->str = nm_ctx;
        for (int a = 0; a < 30; a++) {
            uint64_t addr = 0x200000000ull + (uint64_t)a * 0x1000000;
            int keep = a == 0 && st % 50 == 0;
            if (keep)
                addr = 0x900000000ull + (uint64_t)st * 0x1000000;
            uint64_t tid = id++;
            synth_alloc(&y, addr, MiB, s_a);
            vt_event *e = synth_ev(&y, VT_EV_TENSOR_NEW);
            e->aux = tid;
            e->addr = addr;
            e->size = MiB;
            e->str = nm_a;
            vt_event *rf = synth_ev(&y, VT_EV_REF);
            rf->aux = keep ? 900000000 : ctx;
            rf->aux2 = tid;
            rf->str = nm_l;
            synth_ev(&y, VT_EV_TENSOR_USE)->aux = tid;
            synth_ev(&y, VT_EV_TENSOR_USE)->aux = tid;
            if (!keep) {
                vt_event *u = synth_ev(&y, VT_EV_UNREF);
                u->aux = ctx;
                u->aux2 = tid;
                synth_ev(&y, VT_EV_TENSOR_DROP)->aux = tid;
                synth_free(&y, addr);
            }
        }
    }
    ASSERT_GE(y.s.nevents, 1000000);
    double t0 = now_s();
    vt_check_report *r = check(&y, NULL);
    double dt = now_s() - t0;
    fprintf(stderr, "checked %zu events in %.3f s: %zu findings\n", y.s.nevents, dt,
            r->nfindings);
    ASSERT_EQ(r->nfindings, 4000 / 50);
    ASSERT_STR_EQ(path_text(&r->findings[0], 0),
                  "history[i] \xe2\x86\x92 tensor 'act' \xe2\x86\x92 storage 0x900000000 1 MiB");
    vt_check_report_free(r);
    synth_fini(&y);
}

TEST_MAIN()
