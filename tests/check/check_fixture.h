/* tests/check/check_fixture.h - what the checker's tests share: running the
 * checker on a synthetic trace (synth.h), finding a finding, and the
 * standard training loop the leak shapes are built on.
 *
 * Steps are cut by MARK events "step 1", "step 2", ...; step 0 (before the
 * first mark) is setup. Unless a test says otherwise, each step starts with
 * a 100 ms tick, a mark, a use of the weights and one short-lived activation.
 */
#ifndef VT_TESTS_CHECK_FIXTURE_H
#define VT_TESTS_CHECK_FIXTURE_H

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

/* The checker's defaults but the floor of minor findings: the rules' tests
 * judge every finding their shapes make (a few KiB beside a weight of MiBs
 * would be minor); test_check_minor.c tests the floor. */
static inline vt__check_options default_options(void)
{
    vt__check_options o;
    vt__check_options_init(&o);
    o.min_bytes = VT_CHECK_MIN_BYTES_NONE;
    return o;
}

/* y checked with opt (NULL: default_options()). */
static inline vt__check_report *check(synth *y, const vt__check_options *opt)
{
    vt__check_report *r = NULL;
    char err[256] = "";
    vt__check_options rules_only = default_options();
    int rc = vt__check_run(&y->s, opt ? opt : &rules_only, &r, err, sizeof err);
    ASSERT_MSG(rc == 0 && r, "vt__check_run: %d %s", rc, err);
    return r;
}

/* y checked with default_options() but only `rules` (VT_CHECK_RULE_* bits). */
static inline vt__check_report *check_rules(synth *y, unsigned rules)
{
    vt__check_options o = default_options();
    o.rules = rules;
    return check(y, &o);
}

/* The finding on the storage at addr; the test fails where there is none. */
static inline const vt__check_finding *by_addr(const vt__check_report *r, uint64_t addr)
{
    for (size_t i = 0; i < r->nfindings; i++)
        if (r->findings[i].addr == addr)
            return &r->findings[i];
    HARNESS_FAIL("no finding on 0x%llx (of %zu findings)", (unsigned long long)addr, r->nfindings);
}

static inline const char *path_text(const vt__check_finding *f, size_t i)
{
    static char buf[1024];
    ASSERT_MSG(i < f->npaths, "finding 0x%llx has %zu paths", (unsigned long long)f->addr,
               f->npaths);
    vt__check_path_format(&f->paths[i], buf, sizeof buf);
    return buf;
}

/* f's paths are `paths` (NULL-terminated), all of them and in that order. */
static inline void assert_paths(const vt__check_finding *f, const char *const *paths)
{
    size_t n = 0;
    while (paths[n])
        n++;
    ASSERT_EQ(f->npaths, n);
    for (size_t i = 0; i < n; i++)
        ASSERT_STR_EQ(path_text(f, i), paths[i]);
}

static inline void dump(const vt__check_report *r, const synth *y)
{
    vt__check_report_print(stderr, r, &y->s, 0);
}

#define ASSERT_CLEAN(r, y)                                                  \
    do {                                                                    \
        if ((r)->nfindings) {                                               \
            dump((r), (y));                                                 \
            HARNESS_FAIL("expected a clean report, got %zu findings",       \
                         (r)->nfindings);                                   \
        }                                                                   \
    } while (0)

/* A trace builder whose one argument picks a variant: a leak shape and its
 * fixed twin (0 / 1), a pinned mode, the step a tensor is last used in. */
typedef void (*shape_fn)(synth *y, int variant);

/* The report on a fresh trace of `shape` (y is the caller's to finish). */
static inline vt__check_report *check_shape(synth *y, shape_fn shape, int variant)
{
    shape(y, variant);
    return check(y, NULL);
}

/* r, the report on y, has no finding (else it is printed); r is freed and
 * y finished (synth_fini), ready to be built again. */
static inline void assert_report_clean(vt__check_report *r, synth *y)
{
    ASSERT_CLEAN(r, y);
    vt__check_report_free(r);
    synth_fini(y);
}

/* y, checked with opt (NULL: default_options()), has no finding; y is
 * finished (synth_fini), ready to be built again. */
static inline void assert_checks_clean(synth *y, const vt__check_options *opt)
{
    assert_report_clean(check(y, opt), y);
}

/* What every fixed twin asserts: its trace comes out clean. */
static inline void assert_shape_is_clean(shape_fn shape, int variant)
{
    synth y;
    shape(&y, variant);
    assert_checks_clean(&y, NULL);
}

/* `name` parses to `rule` alone, and `rule` is named `name`. */
static inline void assert_rule_is_named(const char *name, unsigned rule)
{
    unsigned rules = 0;
    ASSERT_EQ(vt__check_parse_rules(name, &rules), 0);
    ASSERT_EQ(rules, rule);
    ASSERT_STR_EQ(vt__check_rule_name(rule), name);
}

/* The report has exactly one finding: return it. */
static inline const vt__check_finding *only_finding(const vt__check_report *r)
{
    ASSERT_EQ(r->nfindings, 1);
    return &r->findings[0];
}

/* The report has exactly one finding, and `rule` made it: return it. */
static inline const vt__check_finding *only_finding_of(const vt__check_report *r, unsigned rule)
{
    const vt__check_finding *f = only_finding(r);
    ASSERT_EQ(f->rule, rule);
    return f;
}

/* How many of the report's findings `rule` made. */
static inline size_t findings_of(const vt__check_report *r, unsigned rule)
{
    size_t n = 0;
    for (size_t i = 0; i < r->nfindings; i++)
        n += r->findings[i].rule == rule;
    return n;
}

/* The report has exactly one finding, on `addr`, of `bytes`: return it. */
static inline const vt__check_finding *the_finding(const vt__check_report *r, uint64_t addr,
                                                  uint64_t bytes)
{
    const vt__check_finding *f = only_finding(r);
    ASSERT_EQ(f->addr, addr);
    ASSERT_EQ(f->bytes, bytes);
    return f;
}

/* What the one finding of a leak shape says: where, how much, the tensor
 * that owns the storage and its first path (NULL: not looked at). */
struct expected_finding {
    uint64_t addr, bytes;
    const char *owner, *path;
};

/* The report on a fresh trace of shape(variant), whose one finding is the
 * expected one (y is the caller's to finish). */
static inline vt__check_report *check_shape_flags(synth *y, shape_fn shape, int variant,
                                                  struct expected_finding x)
{
    vt__check_report *r = check_shape(y, shape, variant);
    const vt__check_finding *f = the_finding(r, x.addr, x.bytes);
    if (x.owner)
        ASSERT_STR_EQ(f->owner_name, x.owner);
    if (x.path)
        ASSERT_STR_EQ(path_text(f, 0), x.path);
    return r;
}

/* shape(0), the leak, has exactly the expected finding. */
static inline void assert_shape_flags(shape_fn shape, struct expected_finding x)
{
    synth y;
    vt__check_report_free(check_shape_flags(&y, shape, 0, x));
    synth_fini(&y);
}

static uint32_t st_init, st_fwd, st_bwd, st_act;

static inline void stacks(synth *y)
{
    st_init = synth_stack(y, "init_weights", "main", NULL);
    st_fwd = synth_stack(y, "forward_block", "train_step", "main", NULL);
    st_bwd = synth_stack(y, "backward_block", "train_step", "main", NULL);
    st_act = synth_stack(y, "relu_forward", "train_step", "main", NULL);
}

/* Weights, allocated in setup (step 0). */
static inline void setup(synth *y)
{
    synth_init(y);
    stacks(y);
    synth_new_tensor(y, W_ID, W_ADDR, 4 * MiB, "fc.weight", st_init);
}

/* setup(), and the program's module (holder `module`, "module __main__")
 * keeping an object of type `kind` (holder module + 1) under `attr`. */
static inline void setup_module_keeping(synth *y, uint64_t module, const char *kind,
                                        const char *attr)
{
    setup(y);
    synth_holder(y, module, "module __main__");
    synth_held(y, module + 1, kind, module, attr);
}

/* Start step i: tick, mark, use the weights, one transient activation. */
static inline void step(synth *y, int i)
{
    synth_step_mark(y, i);
    synth_use(y, W_ID);
    uint64_t a = 0x7f1000000000ull + (uint64_t)i * 0x10000000ull;
    synth_new_tensor(y, 10000 + (uint64_t)i, a, 2 * MiB, "relu out", st_act);
    synth_use(y, 10000 + (uint64_t)i);
    synth_drop(y, 10000 + (uint64_t)i);
    synth_free(y, a);
}

/* Steps from..to, nothing in them but what step() does. */
static inline void steps(synth *y, int from, int to)
{
    for (int i = from; i <= to; i++)
        step(y, i);
}

/* setup(), and step 1, in which the forward makes tensor `id` (`name`,
 * 1 MiB at `addr`); its making is no use (synth_use for one). */
static inline void made_in_step_1(synth *y, uint64_t id, uint64_t addr, const char *name)
{
    setup(y);
    step(y, 1);
    synth_new_tensor(y, id, addr, MiB, name, st_fwd);
}

/* A list keeps two tensors, each the owner of a 75.02 KiB storage: a loss
 * of 8 bytes (PyTorch's mse_loss returns its 0-dim result on its elementwise
 * buffer) and a tensor as large as its storage; unused from step 1 through
 * step 5. The report and the page say the loss's own bytes. */
static inline void kept_losses_on_their_buffers(synth *y)
{
    setup_module_keeping(y, 9000, "list", ".loss_history");
    step(y, 1);
    synth_alloc(y, 0x7f7000000000ull, 76824, st_fwd);
    synth_tensor(y, 31, 0x7f7000000000ull, 8, 0, "loss = criterion(out, target) (train.py:58)");
    synth_use(y, 31);
    synth_ref(y, 9001, 31, "[0]");
    synth_new_tensor(y, 32, 0x7f7100000000ull, 76824, "err = out - target (train.py:57)", st_fwd);
    synth_use(y, 32);
    synth_ref(y, 9001, 32, "[1]");
    steps(y, 2, 5);
}

/* Not inlined: inlined into a caller that searches the text, gcc 12 takes
 * pointers into the stream's buffer for pointers to the local `buf` that
 * open_memstream was given (-Wdangling-pointer, a false alarm). */
/* The report as text with at most `top` findings detailed (0: all), or as
 * JSON (`json` 1); free() it. */
__attribute__((noinline)) static char *render_top(const vt__check_report *r, const synth *y,
                                                  int json, size_t top)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    ASSERT(f);
    if (json)
        ASSERT_EQ(vt__check_report_write_json(f, r, &y->s), 0);
    else
        ASSERT_EQ(vt__check_report_print(f, r, &y->s, top), 0);
    fclose(f);
    return buf;
}

static inline char *render(const vt__check_report *r, const synth *y, int json)
{
    return render_top(r, y, json, 0);
}

/* The report, as text (json 0) or valid JSON (1), says each of `wants`
 * (NULL-terminated): for a test that looks for some lines, not the whole
 * rendering. */
static inline void assert_rendered_says_each(const vt__check_report *r, const synth *y, int json,
                                             const char *const *wants)
{
    char *text = render(r, y, json);
    if (json)
        ASSERT_JSON_VALID(text);
    for (; *wants; wants++)
        ASSERT_STR_CONTAINS(text, *wants);
    free(text);
}

/* The report, as text (json 0) or valid JSON (1), says `want`. */
static inline void assert_rendered_says(const vt__check_report *r, const synth *y, int json,
                                        const char *want)
{
    assert_rendered_says_each(r, y, json, (const char *const[]){ want, NULL });
}

/* The text report says `text` and the JSON one says `json`: the two
 * renderings of one fact. */
static inline void assert_text_and_json_say(const vt__check_report *r, const synth *y,
                                            const char *text, const char *json)
{
    assert_rendered_says(r, y, 0, text);
    assert_rendered_says(r, y, 1, json);
}

/* The report on shape(variant), as text (json 0) or valid JSON (1), says
 * each of `wants` (NULL-terminated). */
static inline void assert_shape_says(shape_fn shape, int variant, int json,
                                     const char *const *wants)
{
    synth y;
    vt__check_report *r = check_shape(&y, shape, variant);
    assert_rendered_says_each(r, &y, json, wants);
    vt__check_report_free(r);
    synth_fini(&y);
}


static inline double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

#endif /* VT_TESTS_CHECK_FIXTURE_H */
