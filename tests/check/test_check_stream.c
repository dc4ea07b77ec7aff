/* tests/check/test_check_stream.c - the checker over a stream of events
 * (vt__check_run_stream): the model keeps no record of a storage no rule
 * can flag, and that changes no finding; a file read as a stream is
 * checked as the whole snapshot is. Reports are compared whole, as JSON. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test_format_gen.h"   /* first: check_shapes.h defines S0, S1 */
#include "check_fixture.h"
#include "check_internal.h"
#include "check_shapes.h"
#include "event_stream.h"
#include "snapfile.h"

/* Report ``r`` of ``s`` as `vramtrace check --json` writes it; frees r. */
static char *json_and_free(vt__check_report *r, const vt__snapshot_data *s)
{
    char *buf = NULL;
    size_t n = 0;
    FILE *mf = open_memstream(&buf, &n);
    ASSERT(mf);
    ASSERT_EQ(vt__check_report_write_json(mf, r, s), 0);
    fclose(mf);
    vt__check_report_free(r);
    return buf;
}

/* The report of `s` with `opt`, as JSON. */
static char *json_of(const vt__snapshot_data *s, const vt__check_options *opt)
{
    vt__check_report *r = NULL;
    char err[256] = "";
    int rc = vt__check_run(s, opt, &r, err, sizeof err);
    ASSERT_MSG(rc == 0 && r, "vt__check_run: %d %s", rc, err);
    return json_and_free(r, s);
}

/* The report of the snapshot file `path` read as a stream in `chunk`-byte
 * reads, as JSON. */
static char *json_streamed(const char *path, size_t chunk, const vt__check_options *opt)
{
    char err[256] = "";
    vt__snapshot_data *s = NULL;
    vt__event_stream *es;
    ASSERT_MSG(vt__snapfile_open_stream(path, chunk, &s, &es, err, sizeof err) == 0, "%s", err);
    vt__check_report *r = NULL;
    ASSERT_MSG(vt__check_run_stream(s, es, opt, &r, err, sizeof err) == 0, "%s", err);
    char *got = json_and_free(r, s);
    vt__event_stream_close(es);
    vt__snapshot_free(s);
    return got;
}

/* The option sets compared: the automatic rules, each rule family by name,
 * with a grace in steps or in time, and --ignore (the native rules ask it
 * about a call site's first storage, retired or not). */
static const char *const rule_sets[] = { "auto", "linger,pinned,cycle", "never-freed",
                                         "never-freed,outlier,growth", "outlier", "growth",
                                         "all" };
static const char *const graces[] = { "auto", "0steps", "250ms" };

static void same_with_and_without_records(const vt__snapshot_data *s, const char *what)
{
    static const char *const pats[] = { "activations", "*" };
    for (size_t ri = 0; ri < sizeof rule_sets / sizeof *rule_sets; ri++)
        for (size_t gi = 0; gi < sizeof graces / sizeof *graces; gi++)
            for (size_t ii = 0; ii < 3; ii++) {
                vt__check_options o = default_options();
                ASSERT_EQ(vt__check_parse_rules(rule_sets[ri], &o.rules), 0);
                ASSERT_EQ(vt__check_parse_grace(graces[gi], &o), 0);
                if (ii) {
                    o.ignore = &pats[ii - 1];
                    o.nignore = 1;
                }
                char *lean = json_of(s, &o);
                o.keep_records = 1;
                char *full = json_of(s, &o);
                ASSERT_MSG(!strcmp(lean, full),
                           "%s, --rules %s --grace %s, ignore %d: the report changes when "
                           "storages are retired\n--- kept every record:\n%s\n--- retired:\n%s",
                           what, rule_sets[ri], graces[gi], (int)ii, full, lean);
                free(lean);
                free(full);
            }
}

/* A native trace of many steps: per step short-lived activations (retired),
 * a gradient bucket alive across one mark, a history entry never freed,
 * and now and then an allocation that outlives its siblings. */
static void native_steps(synth *y, int marks)
{
    synth_init(y);
    uint32_t s_act = synth_stack(y, "activations", "train_step", "main", NULL);
    uint32_t s_grad = synth_stack(y, "grad_bucket", "train_step", "main", NULL);
    uint32_t s_hist = synth_stack(y, "append_history", "train_step", "main", NULL);
    uint64_t prev_grad = 0;
    for (int st = 1; st <= 40; st++) {
        synth_tick(y, 10000000);
        if (marks)
            synth_mark(y, "step");
        for (int a = 0; a < 20; a++) {
            uint64_t addr = 0x7f1000000000ull + (uint64_t)a * 0x1000000;
            synth_alloc(y, addr, MiB + (uint64_t)a * 512, s_act);
            synth_tick(y, 1000 + (uint64_t)(a * 37 % 11) * 100);
            if (!(st % 9 == 0 && a == 3))
                synth_free(y, addr);
        }
        if (prev_grad)
            synth_free(y, prev_grad);
        prev_grad = 0x7fd000000000ull + (uint64_t)st * 0x1000000;
        synth_alloc(y, prev_grad, 3 * MiB, s_grad);
        synth_alloc(y, 0x7fc000000000ull + (uint64_t)st * 0x1000000, MiB, s_hist);
    }
}

TEST(retiring_storages_changes_no_finding)
{
    synth y;
    for (int v = 0; v < 2; v++) {
        static const shape_fn shapes[] = { gc_cycle, closure_self, view_pins_base, pipeline,
                                           hook_cycle, autograd_graph, every_k, ends_alive,
                                           no_marks, pinned_view, pinned_then_lingering };
        for (size_t k = 0; k < sizeof shapes / sizeof *shapes; k++) {
            shapes[k](&y, v);
            char what[64];
            snprintf(what, sizeof what, "shape %zu variant %d", k, v);
            same_with_and_without_records(&y.s, what);
            synth_fini(&y);
        }
    }
    for (int fixed = 0; fixed < 8; fixed++) {
        native(&y, fixed);
        same_with_and_without_records(&y.s, "native");
        synth_fini(&y);
    }
    for (int marks = 0; marks < 2; marks++) {
        native_steps(&y, marks);
        same_with_and_without_records(&y.s, marks ? "native steps" : "native, no marks");
        synth_fini(&y);
    }
    /* Windows that lost events: frees without their ALLOC (from before the
     * window, or from a gap), lifetimes a gap hides. */
    for (int cut = 0; cut < 3; cut++) {
        native_steps(&y, 1);
        size_t from = cut == 0 ? 0 : y.s.nevents / (size_t)(cut + 1), len = 37;
        memmove(&y.s.events[from], &y.s.events[from + len],
                (y.s.nevents - from - len) * sizeof *y.s.events);
        y.s.nevents -= len;
        same_with_and_without_records(&y.s, "a window that lost events");
        synth_fini(&y);
    }
    ends_alive(&y, 3);
    open_a_gap(&y);
    same_with_and_without_records(&y.s, "a gap");
    synth_fini(&y);
}

TEST(storages_no_rule_can_flag_keep_no_record)
{
    /* 40 steps x 20 short-lived activations: none is kept, their call site
     * counts them; the ones alive at a mark are all kept. */
    synth y;
    native_steps(&y, 1);
    vt__event_stream *es;
    ASSERT_EQ(vt__event_stream_of(&y.s, &es), 0);
    char err[256] = "";
    ck_model m = { .s = &y.s, .es = es, .err = err, .errlen = sizeof err };
    ASSERT_MSG(vt__ck_model_build(&m) == 0, "%s", err);
    ASSERT_EQ(m.nst_all, 40 * 22);
    /* kept: the 4 activations alive at the next mark, 40 buckets, 40 entries */
    ASSERT_MSG(m.nst == 4 + 40 + 40, "%zu records kept", m.nst);
    ASSERT_EQ(m.nsites, 1);
    ASSERT_EQ(m.sites[0].n, 40 * 20 - 4);
    ASSERT_EQ(m.nlives, 40 * 20 - 4);   /* no tensor: OUTLIER may run */
    vt__ck_model_free(&m);
    vt__event_stream_close(es);

    /* A trace with tensors is never judged by OUTLIER: no lifetime kept. */
    synth_tensor(&y, 77, 0x7fc000000000ull + 40 * 0x1000000ull, MiB, 0, "last entry");
    ASSERT_EQ(vt__event_stream_of(&y.s, &es), 0);
    m = (ck_model){ .s = &y.s, .es = es, .err = err, .errlen = sizeof err };
    ASSERT_MSG(vt__ck_model_build(&m) == 0, "%s", err);
    ASSERT_EQ(m.nlives, 0);
    ASSERT_EQ(m.sites[0].n, 40 * 20 - 4);
    vt__ck_model_free(&m);
    vt__event_stream_close(es);

    /* The report still counts every storage. */
    vt__check_report *r = check(&y, NULL);
    ASSERT_EQ(r->nstorages, 40 * 22);
    vt__check_report_free(r);
    synth_fini(&y);
}

TEST(events_out_of_seq_order_keep_every_record)
{
    /* A hand-built snapshot whose last mark's seq is below earlier events':
     * retiring would have counted on the marks seen so far. */
    synth y;
    native_steps(&y, 1);
    for (size_t i = y.s.nevents; i-- > 0;)
        if (y.s.events[i].kind == VT_EV_MARK) {
            y.s.events[i].seq = y.s.events[0].seq + 1;
            break;
        }
    same_with_and_without_records(&y.s, "out of order");
    synth_fini(&y);
}

TEST(a_file_read_as_a_stream_is_checked_as_the_whole_snapshot)
{
    char dir[] = "/tmp/vtcheck-stream-XXXXXX";
    ASSERT(mkdtemp(dir));
    char path[64];
    snprintf(path, sizeof path, "%s/s.vtsnap", dir);
    synth y;
    for (int k = 0; k < 3; k++) {
        if (k == 0)
            native_steps(&y, 1);
        else if (k == 1)
            pinned_then_lingering(&y, 2);
        else
            gc_cycle(&y, 0);
        char err[256] = "";
        ASSERT_MSG(vt__snapfile_write(&y.s, path, err, sizeof err) == 0, "%s", err);
        vt__snapshot_data *whole = NULL;
        ASSERT_MSG(vt__snapfile_read(path, &whole, err, sizeof err) == 0, "%s", err);
        for (size_t ri = 0; ri < sizeof rule_sets / sizeof *rule_sets; ri++) {
            vt__check_options o = default_options();
            ASSERT_EQ(vt__check_parse_rules(rule_sets[ri], &o.rules), 0);
            char *want = json_of(whole, &o);
            /* chunks of 7 bytes: they end inside events, every reading */
            char *got = json_streamed(path, 7, &o);
            ASSERT_MSG(!strcmp(want, got), "trace %d, --rules %s: streamed\n%s\nwhole\n%s", k,
                       rule_sets[ri], got, want);
            free(want);
            free(got);
        }
        vt__snapshot_free(whole);
        synth_fini(&y);
    }
    unlink(path);
    rmdir(dir);
}

/* Random event streams (gen_random: few addresses, gaps, lost and pending
 * frees, frees without an allocation, lifetimes from before the window
 * opened where another is open at their address), read from a file in
 * small chunks: every rule set gives the whole snapshot's report, and the
 * same report every run (the model's index of live storages is a treap
 * whose priorities are seeded per run: two storages at one address once
 * made the report depend on the seed, and removing the wrong one left a
 * storage linked after its slot was reused, a cycle that never ended). */
TEST(random_streams_are_checked_as_the_whole_snapshot_the_same_every_run)
{
    char dir[] = "/tmp/vtcheck-random-XXXXXX";
    ASSERT(mkdtemp(dir));
    char path[64];
    snprintf(path, sizeof path, "%s/s.vtsnap", dir);
    uint64_t rnd = 20261129;
    for (int k = 0; k < 160; k++) {
        vt__snapshot_data *g = gen_random(&rnd, 1 + gen_rand(&rnd) % 300);
        for (size_t i = 0; i < g->nevents; i++)
            if (g->events[i].kind == VT_EV_OOM)
                g->events[i].kind = VT_EV_MARK;   /* steps, as the rules need */
        char err[256] = "";
        ASSERT_MSG(vt__snapfile_write(g, path, err, sizeof err) == 0, "%s", err);
        vt__snapshot_free(g);
        vt__snapshot_data *whole = NULL;
        ASSERT_MSG(vt__snapfile_read(path, &whole, err, sizeof err) == 0, "%s", err);
        const char *const sets[] = { "auto", "all" };
        for (size_t ri = 0; ri < 2; ri++) {
            vt__check_options o = default_options();
            ASSERT_EQ(vt__check_parse_rules(sets[ri], &o.rules), 0);
            char *want = json_of(whole, &o);
            for (int run = 0; run < 3; run++) {
                char *again = json_of(whole, &o);
                ASSERT_MSG(!strcmp(want, again), "random snapshot %d, --rules %s: two runs "
                           "differ\n%s\n%s", k, sets[ri], want, again);
                free(again);
                size_t chunk = 1 + (size_t)gen_rand(&rnd) % 64;
                char *got = json_streamed(path, chunk, &o);
                ASSERT_MSG(!strcmp(want, got), "random snapshot %d, --rules %s, chunks of %zu: "
                           "streamed\n%s\nwhole\n%s", k, sets[ri], chunk, got, want);
                free(got);
            }
            free(want);
        }
        vt__snapshot_free(whole);
    }
    unlink(path);
    rmdir(dir);
}

TEST_MAIN()
