/* tests/check/test_check_minor.c - the floor of minor findings (check.h,
 * "Minor findings"): a cause holding fewer bytes than a share of the peak
 * (at most 1 MiB) is minor: moved out of the findings, counted apart,
 * said in one line; a cause is judged by its whole, not finding by finding;
 * an explicit floor and none at all. */
#include "check_fixture.h"
#include "format_bytes.h"

#define LIST_ID 5001
#define KEPT_ADDR 0x7f5000000000ull

/* A list keeps a result of `each` bytes from each of `steps` steps, never
 * used again (linger), beside weights of `weight` bytes used every step
 * and a 2 MiB activation freed in its step. */
static void kept_results(synth *y, uint64_t weight, uint64_t each, int steps)
{
    synth_init(y);
    stacks(y);
    synth_new_tensor(y, W_ID, W_ADDR, weight, "fc.weight", st_init);
    synth_holder(y, 5000, "module __main__");
    synth_held(y, LIST_ID, "list", 5000, ".losses");
    for (int i = 1; i <= steps; i++) {
        synth_step_mark(y, i);
        synth_use(y, W_ID);
        uint64_t a = 0x7f1000000000ull;
        synth_new_tensor(y, 10000 + (uint64_t)i, a, 2 * MiB, "relu out", st_act);
        synth_drop(y, 10000 + (uint64_t)i);
        synth_free(y, a);
        uint64_t id = 20000 + (uint64_t)i;
        synth_new_tensor(y, id, KEPT_ADDR + (uint64_t)i * 0x1000000, each,
                         "losses.append(loss.detach()) (train.py:30)", st_fwd);
        synth_ref(y, LIST_ID, id, "[0]");
    }
}

static vt__check_report *check_floor(synth *y, uint64_t min_bytes)
{
    vt__check_options o;
    vt__check_options_init(&o);
    o.rules = VT_CHECK_RULE_LINGER;
    o.min_bytes = min_bytes;
    return check(y, &o);
}

/* The report, under the automatic floor, on kept_results(weight, each,
 * steps). */
static vt__check_report *under_the_auto_floor(synth *y, uint64_t weight, uint64_t each, int steps)
{
    kept_results(y, weight, each, steps);
    return check_floor(y, VT_CHECK_MIN_BYTES_AUTO);
}

/* The kept results' findings: in `fs`, all of them on the list's tensors. */
static size_t kept_findings(const vt__check_finding *fs, size_t n)
{
    for (size_t i = 0; i < n; i++)
        ASSERT(fs[i].addr >= KEPT_ADDR && fs[i].addr < KEPT_ADDR + 1000 * 0x1000000ull);
    return n;
}

/* How many kept results the report counts: all of them findings, none
 * minor. */
static size_t counted_results(const vt__check_report *r)
{
    ASSERT_EQ(r->nminor, 0);
    return kept_findings(r->findings, r->nfindings);
}

/* How many kept results the report says are minor: all of them, no
 * finding counted. */
static size_t minor_results(const vt__check_report *r)
{
    ASSERT_EQ(r->nfindings, 0);
    return kept_findings(r->minor, r->nminor);
}

TEST(small_results_kept_on_purpose_are_minor_and_not_counted)
{
    synth y;
    vt__check_report *r = under_the_auto_floor(&y, 4 * MiB, 4, 8);
    /* the peak: the weight, an activation and the results then kept */
    ASSERT(r->peak_bytes >= 6 * MiB && r->peak_bytes < 6 * MiB + 64);
    ASSERT_EQ(r->min_bytes, r->peak_bytes / 1000 * VT_CHECK_MINOR_PERMILLE);
    size_t n = minor_results(r);
    ASSERT(n >= 5);
    ASSERT_EQ(r->minor_bytes, 4 * n);
    ASSERT_EQ(r->total_bytes, 0);
    char *text = render(r, &y, 0);
    ASSERT_MSG(strstr(text, "vramtrace check: 0 findings\n"), "%s", text);
    ASSERT_MSG(strstr(text, " minor findings (") && strstr(text, "from 1 cause) under the floor of ")
               && strstr(text, "(0.1% of the 6 MiB peak, at most 1 MiB): not counted"
                               " (--min-bytes 0 counts them)"), "%s", text);
    ASSERT_MSG(strstr(text, "    [linger] ") &&
               strstr(text, ": tensor 'losses.append(loss.detach()) (train.py:30)'\n"), "%s", text);
    free(text);
    text = render(r, &y, 1);
    ASSERT_MSG(strstr(text, "\"findings\":[],\"min_bytes\":") && strstr(text, ",\"minor\":[\n{\"rule\":\"linger\""),
               "%s", text);
    free(text);
    vt__check_report_free(r);

    /* no floor: every one of them counts */
    r = check_floor(&y, VT_CHECK_MIN_BYTES_NONE);
    ASSERT_EQ(counted_results(r), n);
    ASSERT_EQ(r->min_bytes, 0);
    ASSERT_EQ(r->total_bytes, 4 * n);
    vt__check_report_free(r);
    synth_fini(&y);
}

/* Each result under the floor, their cause above it: counted, all of them. */
TEST(a_cause_of_many_small_findings_counts_by_its_whole)
{
    synth y;
    vt__check_report *r = under_the_auto_floor(&y, 4 * MiB, 2048, 8);
    ASSERT(r->min_bytes > 2048);
    size_t n = counted_results(r);
    ASSERT(n >= 5 && 2048 * n > r->min_bytes);
    vt__check_report_free(r);

    /* a floor asked for above the cause's bytes: minor */
    r = check_floor(&y, 64 * 1024);
    ASSERT_EQ(minor_results(r), n);
    ASSERT_EQ(r->min_bytes, 64 * 1024);
    char *text = render(r, &y, 0);
    ASSERT_MSG(strstr(text, "under the floor of 64 KiB: not counted"), "%s", text);
    free(text);
    vt__check_report_free(r);
    synth_fini(&y);
}

/* A GPU job's floor is the cap (1 MiB), not 0.1% of its peak. */
TEST(the_automatic_floor_is_at_most_1_MiB)
{
    synth y;
    /* 8 GiB of weights */
    vt__check_report *r = under_the_auto_floor(&y, 8ull << 30, 128 * 1024, 8);
    ASSERT_EQ(r->min_bytes, VT_CHECK_MINOR_CAP);
    size_t n = minor_results(r);   /* n x 128 KiB < 1 MiB */
    ASSERT(n >= 5 && n < 8);
    vt__check_report_free(r);
    synth_fini(&y);

    r = under_the_auto_floor(&y, 8ull << 30, 256 * 1024, 8);   /* n x 256 KiB > 1 MiB */
    ASSERT_EQ(counted_results(r), n);
    vt__check_report_free(r);
    synth_fini(&y);
}

/* A 4-byte tensor kept a step holds a 512-byte block of the cache: the
 * floor weighs a cause by its blocks. 300 steps of a critic's kept value
 * (1.2 KiB asked for, 150 KiB of blocks) outgrow the floor of a 64 MiB
 * job (64 KiB); 60 steps of them (30 KiB of blocks) do not. Before: the
 * bytes asked for were weighed, and 1,859 values an actor-critic loop kept
 * for a plot (929.5 KiB of blocks) were minor. */
TEST(small_tensors_kept_every_step_are_weighed_by_their_blocks)
{
    synth y;
    vt__check_report *r = under_the_auto_floor(&y, 64 * MiB, 4, 300);
    ASSERT(r->min_bytes > 64 * 1000 && r->min_bytes < 70 * 1024);
    size_t n = counted_results(r);
    ASSERT(n >= 290);
    ASSERT_EQ(r->total_bytes, 4 * n);
    ASSERT_EQ(r->total_held_bytes, 512 * n);
    char *text = render(r, &y, 0);
    ASSERT_MSG(strstr(text, " findings, ") && strstr(text, " held after last use in ") &&
               strstr(text, " of blocks ("), "%s", text);
    ASSERT_MSG(strstr(text, " \xc3\x97 [linger] ") && strstr(text, " of blocks (4 B each on average)"),
               "%s", text);
    free(text);
    text = render(r, &y, 1);
    char want[128];
    snprintf(want, sizeof want, "\"total_held_bytes\":%zu,", 512 * n);
    ASSERT_MSG(strstr(text, want), "%s", want);
    snprintf(want, sizeof want, "\"bytes\":%zu,\"held_bytes\":%zu,", 4 * n, 512 * n);
    ASSERT_MSG(strstr(text, want), "%s", want);
    free(text);
    vt__check_report_free(r);
    synth_fini(&y);

    r = under_the_auto_floor(&y, 64 * MiB, 4, 60);
    n = minor_results(r);
    ASSERT(n >= 50);
    text = render(r, &y, 0);
    ASSERT_MSG(strstr(text, "    [linger] 240 B in 30 KiB of blocks: tensor 'losses.append") ||
               strstr(text, " of blocks: tensor 'losses.append(loss.detach()) (train.py:30)'\n"),
               "%s", text);
    /* the summary weighs them as the floor does */
    char b1[VT_FMT_BYTES_LEN], b2[VT_FMT_BYTES_LEN];
    snprintf(want, sizeof want, "  %zu minor findings (%s in %s of blocks from 1 cause) under ", n,
             vt__fmt_bytes(4 * n, b1), vt__fmt_bytes(512 * n, b2));
    ASSERT_MSG(strstr(text, want), "%s\n%s", want, text);
    free(text);
    ASSERT_EQ(r->minor_held_bytes, 512 * n);
    text = render(r, &y, 1);
    snprintf(want, sizeof want, "\"minor_bytes\":%zu,\"minor_held_bytes\":%zu,", 4 * n, 512 * n);
    ASSERT_MSG(strstr(text, want), "%s", want);
    free(text);
    vt__check_report_free(r);
    synth_fini(&y);
}

/* A tensor's block rounds a larger one up by less than a quarter: not
 * worth a word (on a real run many a cause would read "7.81 KiB in 8 KiB
 * of blocks"), though the floor weighs the blocks all the same. */
TEST(blocks_only_a_little_larger_than_the_bytes_go_unsaid)
{
    synth y;
    kept_results(&y, 4 * MiB, 1000, 8);   /* blocks of 1,024 bytes */
    vt__check_report *r = check_floor(&y, VT_CHECK_MIN_BYTES_NONE);
    size_t n = counted_results(r);
    ASSERT(n >= 5);
    ASSERT_EQ(r->total_held_bytes, 1024 * n);
    char *text = render(r, &y, 0);
    ASSERT_MSG(strstr(text, " held after last use (") && !strstr(text, " of blocks"), "%s", text);
    free(text);
    vt__check_report_free(r);
    synth_fini(&y);
}

/* The same by GROWTH: a site's growth weighs the blocks it grew by. 300
 * steps keeping 4 bytes each grow by about 900 bytes asked for after the
 * warm-up, by 112.5 KiB of blocks: over the floor of a 64 MiB job. */
TEST(a_growth_of_small_tensors_is_weighed_by_its_blocks)
{
    synth y;
    kept_results(&y, 64 * MiB, 4, 300);
    vt__check_options o;
    vt__check_options_init(&o);
    o.rules = VT_CHECK_RULE_GROWTH;
    vt__check_report *r = check(&y, &o);
    ASSERT_EQ(r->nminor, 0);
    const vt__check_finding *f = only_finding_of(r, VT_CHECK_RULE_GROWTH);
    ASSERT(f->bytes >= 800 && f->bytes < 64 * 1000);
    ASSERT_EQ(f->block_bytes, f->bytes / 4 * 512);
    ASSERT_EQ(r->total_held_bytes, f->block_bytes);
    char *text = render(r, &y, 0);
    char want[96], b1[VT_FMT_BYTES_LEN], b2[VT_FMT_BYTES_LEN];
    snprintf(want, sizeof want, ", %s (blocks %s)", vt__fmt_bytes(f->bytes, b1),
             vt__fmt_bytes(f->block_bytes, b2));
    ASSERT_MSG(strstr(text, want), "%s\n%s", want, text);
    free(text);
    vt__check_report_free(r);
    synth_fini(&y);
}

TEST_MAIN()
