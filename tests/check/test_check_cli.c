/* tests/check/test_check_cli.c - the built `vramtrace check` (VRAMTRACE_EXE)
 * on synthetic snapshots written with vt__snapfile_write: exit codes, text,
 * --json, --grace, --ignore, --rules, --top, --help and bad usage. */
#include <sys/stat.h>

#include "../harness.h"
#include "../hostile_names.h"
#include "json_valid.h"
#include "snapfile.h"
#include "synth.h"

#define MiB (1024ull * 1024)

static const char *exe(void)
{
    const char *e = getenv("VRAMTRACE_EXE");
    ASSERT_MSG(e && *e, "VRAMTRACE_EXE is not set");
    return e;
}

static char dir[256];

static void tmpdir(void)
{
    snprintf(dir, sizeof dir, "/tmp/vtcheck-cli-XXXXXX");
    ASSERT(mkdtemp(dir));
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return strdup("");
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    ASSERT(b);
    size_t got = fread(b, 1, (size_t)n, f);
    b[got] = 0;
    fclose(f);
    return b;
}

/* Run `vramtrace SUB ARGS`; *out / *err get stdout / stderr (free them). */
static int run_sub(const char *sub, const char *args, char **out, char **err)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "'%s' %s %s >'%s/out' 2>'%s/err'", exe(), sub, args, dir, dir);
    int st = system(cmd);
    ASSERT_MSG(st != -1 && WIFEXITED(st), "cannot run: %s", cmd);
    char p[400];
    snprintf(p, sizeof p, "%s/out", dir);
    *out = slurp(p);
    snprintf(p, sizeof p, "%s/err", dir);
    *err = slurp(p);
    return WEXITSTATUS(st);
}

/* Run `vramtrace check ARGS`. */
static int run(const char *args, char **out, char **err)
{
    return run_sub("check", args, out, err);
}

/* One expected outcome of `vramtrace check OPTS 'DIR/FILE'` (OPTS alone
 * without a FILE): the exit status, what stdout and stderr contain, and
 * whichever of these holds: stdout is valid JSON, stdout is empty, stderr is
 * empty, stderr is one line. */
struct check_case {
    const char *opts, *file;
    int rc;
    const char *out_has[6];
    const char *err_has[2];
    int json, out_empty, err_empty, err_one_line;
};

static void expect_cases(const struct check_case *c, size_t n)
{
    for (size_t k = 0; k < n; k++) {
        char *out, *err, args[512];
        if (c[k].file)
            snprintf(args, sizeof args, "%s '%s/%s'", c[k].opts ? c[k].opts : "", dir, c[k].file);
        else
            snprintf(args, sizeof args, "%s", c[k].opts);
        int rc = run(args, &out, &err);
        ASSERT_MSG(rc == c[k].rc, "check %s: exit status %d, not %d", args, rc, c[k].rc);
        if (c[k].json)
            ASSERT_JSON_VALID(out);
        for (size_t i = 0; i < 6 && c[k].out_has[i]; i++)
            ASSERT_STR_CONTAINS(out, c[k].out_has[i]);
        for (size_t i = 0; i < 2 && c[k].err_has[i]; i++)
            ASSERT_STR_CONTAINS(err, c[k].err_has[i]);
        if (c[k].out_empty)
            ASSERT_STR_EQ(out, "");
        if (c[k].err_empty)
            ASSERT_STR_EQ(err, "");
        if (c[k].err_one_line) {
            char *nl = strchr(err, '\n');
            ASSERT_MSG(nl && nl[1] == 0, "check %s: not one line: %s", args, err);
        }
        free(out);
        free(err);
    }
}

#define EXPECT_CASES(...)                                                   \
    do {                                                                    \
        const struct check_case cases_[] = { __VA_ARGS__ };                 \
        expect_cases(cases_, sizeof cases_ / sizeof *cases_);               \
    } while (0)

static void write_snap(synth *y, const char *name)
{
    char p[400], err[512] = "";
    snprintf(p, sizeof p, "%s/%s", dir, name);
    int rc = vt__snapfile_write(&y->s, p, err, sizeof err);
    ASSERT_MSG(rc == 0, "vt__snapfile_write: %d %s", rc, err);
}

/* A training loop of 8 steps with a pipeline context that keeps its two
 * send buffers (16 and 32 MiB) from step 2 to step 5 (leak) or releases
 * them after backward (clean). */
static void pipeline(synth *y, int fixed)
{
    synth_init(y);
    uint32_t s_init = synth_stack(y, "init_weights", "main", NULL);
    uint32_t s_fwd = synth_stack(y, "send_forward", "pipeline_step", "main", NULL);
    synth_alloc(y, 0x7f0000000000ull, 4 * MiB, s_init);
    synth_tensor(y, 1, 0x7f0000000000ull, 4 * MiB, 0, "fc.weight");
    for (int i = 1; i <= 8; i++) {
        synth_tick(y, 100000000);
        synth_mark(y, "step");
        synth_use(y, 1);
        if (i == 2) {
            synth_holder(y, 800, "Context");
            synth_held(y, 801, "list", 800, ".output_tensors");
            synth_new_tensor(y, 20, 0x7f6000000000ull, 16 * MiB, "send 0", s_fwd);
            synth_new_tensor(y, 21, 0x7f6001000000ull, 32 * MiB, "send 1", s_fwd);
            synth_ref(y, 801, 20, "[0]");
            synth_ref(y, 801, 21, "[1]");
            synth_use(y, 20);
            synth_use(y, 21);
        }
        if ((i == 2 && fixed) || (i == 5 && !fixed)) {
            synth_release(y, 801, 20, 0x7f6000000000ull);
            synth_release(y, 801, 21, 0x7f6001000000ull);
        }
    }
}

/* `x = big[:, :10]` (40 B of 4 KiB) kept on the model and used every step
 * after `big` is dropped in step 2. */
static void pinned(synth *y)
{
    synth_init(y);
    uint32_t s_fwd = synth_stack(y, "forward", "main", NULL);
    for (int i = 1; i <= 8; i++) {
        synth_tick(y, 100000000);
        synth_mark(y, "step");
        if (i == 2) {
            synth_new_tensor(y, 60, 0x7e8000000000ull, 4096, "big", s_fwd);
            synth_holder(y, 61, "model");
            synth_tensor(y, 63, 0x7e8000000000ull, 40, 60, "x");
            synth_ref(y, 61, 63, ".x");
            synth_drop(y, 60);
        }
        if (i >= 2)
            synth_use(y, 63);
    }
}

static void setup_files(void)
{
    tmpdir();
    synth y;
    pipeline(&y, 0);
    write_snap(&y, "leak.vtsnap");
    synth_fini(&y);
    pipeline(&y, 1);
    write_snap(&y, "clean.vtsnap");
    synth_fini(&y);

    /* Native: one call site allocating 1 MiB per step, never freed. */
    synth_init(&y);
    uint32_t s_leak = synth_stack(&y, "append_history", "main", NULL);
    for (int i = 1; i <= 6; i++) {
        synth_tick(&y, 100000000);
        synth_mark(&y, "step");
        synth_alloc(&y, 0x7fc000000000ull + (uint64_t)i * 0x1000000, MiB, s_leak);
    }
    write_snap(&y, "native.vtsnap");
    synth_fini(&y);

    pinned(&y);
    write_snap(&y, "pinned.vtsnap");
    synth_fini(&y);

    char p[400];
    snprintf(p, sizeof p, "%s/garbage.vtsnap", dir);
    FILE *f = fopen(p, "wb");
    ASSERT(f);
    fputs("this is not a snapshot at all, just text long enough to have a header\n", f);
    fclose(f);
}

static void cleanup(void)
{
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ASSERT_EQ(system(cmd), 0);
}

TEST(cli_check_leak_exits_1_and_names_the_path)
{
    setup_files();
    EXPECT_CASES({ .file = "leak.vtsnap", .rc = 1, .err_empty = 1, .out_has = {
        "vramtrace check: 2 findings, 48 MiB held after last use",
        "#1 [linger] storage 0x7f6001000000 on cuda:0, 32 MiB",
        "at send_forward (train.c:10)",
        "Context.output_tensors \xe2\x86\x92 list[1] \xe2\x86\x92 "
        "tensor 'send 1' \xe2\x86\x92 storage 0x7f6001000000 32 MiB" } });
    cleanup();
}

TEST(cli_check_clean_exits_0)
{
    setup_files();
    EXPECT_CASES({ .file = "clean.vtsnap", .rc = 0, .out_has = { "vramtrace check: 0 findings" } });
    cleanup();
}

TEST(cli_check_json_is_valid)
{
    setup_files();
    EXPECT_CASES({ .opts = "--json", .file = "leak.vtsnap", .rc = 1, .json = 1, .out_has = {
        "\"vramtrace_check\":1", "\"addr\":\"0x7f6001000000\"", "\"bytes\":33554432" } });
    /* The same through Python's parser when there is one. */
    if (system("python3 -c 'import json' >/dev/null 2>&1") == 0) {
        char cmd[1024];
        snprintf(cmd, sizeof cmd,
                 "'%s' check --json '%s/leak.vtsnap' | python3 -c 'import json,sys; "
                 "d=json.load(sys.stdin); assert len(d[\"findings\"])==2; "
                 "assert d[\"findings\"][0][\"paths\"][0][\"steps\"][0][\"name\"]==\"Context\"'",
                 exe(), dir);
        ASSERT_EQ(system(cmd), 0);
        snprintf(cmd, sizeof cmd, "'%s' check --json '%s/clean.vtsnap' | python3 -m json.tool "
                 ">/dev/null", exe(), dir);
        ASSERT_EQ(system(cmd), 0);
    }
    cleanup();
}

TEST(cli_check_grace_option)
{
    setup_files();
    EXPECT_CASES(
        { .opts = "--grace 3steps", .file = "leak.vtsnap", .rc = 0 },   /* 2 complete steps unused */
        { .opts = "--grace=2", .file = "leak.vtsnap", .rc = 1,
          .out_has = { "grace: 2 complete steps" } },
        { .opts = "--grace 50ms", .file = "leak.vtsnap", .rc = 1 },
        { .opts = "--grace 2.5s", .file = "leak.vtsnap", .rc = 0 },
        { .opts = "--grace soon", .file = "leak.vtsnap", .rc = 2, .err_has = { "bad --grace 'soon'" } });
    cleanup();
}

TEST(cli_check_ignore_option)
{
    setup_files();
    EXPECT_CASES(
        { .opts = "--ignore 'send 1'", .file = "leak.vtsnap", .rc = 1,
          .out_has = { "1 finding,", "1 ignored" } },
        { .opts = "--ignore 'send*'", .file = "leak.vtsnap", .rc = 0 },
        { .opts = "--ignore nomatch --ignore 'send_forw*'", .file = "leak.vtsnap", .rc = 0 });
    cleanup();
}

TEST(cli_check_native_rules_and_top)
{
    setup_files();
    EXPECT_CASES(
        { .file = "native.vtsnap", .rc = 1,
          .out_has = { "[never-freed]", "in 5 allocations", "at append_history" } },
        { .opts = "--rules outlier", .file = "native.vtsnap", .rc = 0 },
        { .opts = "--top 1", .file = "leak.vtsnap", .rc = 1, .out_has = { "... 1 more finding" } },
        { .opts = "--rules nonsense", .file = "leak.vtsnap", .rc = 2 });
    cleanup();
}

TEST(cli_check_pinned_rules_and_ratio)
{
    setup_files();
    EXPECT_CASES(
        { .file = "pinned.vtsnap", .rc = 1, .err_empty = 1, .out_has = {   /* on by default */
            "rules: linger,pinned,growth;",
            "#1 [pinned] storage 0x7e8000000000 on cuda:0, 4 KiB",
            "kept by: tensor 'x' (view of 'big', 40 B of 4 KiB)",
            "model.x \xe2\x86\x92 tensor 'x' (view of 'big') \xe2\x86\x92 "
            "storage 0x7e8000000000 4 KiB" } },
        { .opts = "--rules pinned", .file = "pinned.vtsnap", .rc = 1,
          .out_has = { "rules: pinned;" } },
        { .opts = "--rules linger", .file = "pinned.vtsnap", .rc = 0 },
        { .opts = "--rules pinned", .file = "leak.vtsnap", .rc = 0 },   /* no views */
        /* 40 B is ~0.98% of 4 KiB. */
        { .opts = "--pinned-ratio 0.005", .file = "pinned.vtsnap", .rc = 0 },
        { .opts = "--pinned-ratio=1%", .file = "pinned.vtsnap", .rc = 1,
          .out_has = { "pinned: views covering < 1%" } },
        { .opts = "--json --rules pinned --pinned-ratio 25%", .file = "pinned.vtsnap", .rc = 1,
          .json = 1, .out_has = { "\"rules_run\":[\"pinned\"]", "\"pinned_ratio\":0.25",
                                  "\"rule\":\"pinned\"", "\"wasted_bytes\":4056" } });
    /* bad ratios */
#define BAD_RATIO(r)                                                        \
    { .opts = "--pinned-ratio '" r "'", .file = "pinned.vtsnap", .rc = 2,     \
      .err_has = { "bad --pinned-ratio" }, .out_empty = 1 }
    EXPECT_CASES(BAD_RATIO("0"), BAD_RATIO("1.5"), BAD_RATIO("150%"), BAD_RATIO("half"),
                 BAD_RATIO("-0.5"),
                 { .opts = "--pinned-ratio", .rc = 2, .err_has = { "--pinned-ratio needs a value" } });
#undef BAD_RATIO
    cleanup();
}

/* --min-bytes: a floor above the pinned buffer's cause makes it minor (exit
 * 0, one line); 0 and auto count it; bad sizes are refused. */
TEST(cli_check_min_bytes_makes_small_causes_minor)
{
    setup_files();
    EXPECT_CASES(
        { .opts = "--min-bytes 8KiB", .file = "pinned.vtsnap", .rc = 0, .err_empty = 1,
          .out_has = { "vramtrace check: 0 findings\n",
                       "  1 minor finding (3.96 KiB from 1 cause) under the floor of 8 KiB: "
                       "not counted (--min-bytes 0 counts them)\n",
                       "    [pinned] 4 KiB: tensor 'big'\n" } },
        { .opts = "--json --min-bytes 8192", .file = "pinned.vtsnap", .rc = 0, .json = 1,
          .out_has = { "\"findings\":[],\"min_bytes\":8192,", "\"minor_bytes\":4056,",
                       "\"minor\":[\n{\"rule\":\"pinned\"" } },
        { .opts = "--min-bytes 0", .file = "pinned.vtsnap", .rc = 1,
          .out_has = { "#1 [pinned] storage 0x7e8000000000" } },
        { .opts = "--min-bytes auto", .file = "pinned.vtsnap", .rc = 1 });
#define BAD_MIN(v)                                                          \
    { .opts = "--min-bytes '" v "'", .file = "pinned.vtsnap", .rc = 2,        \
      .err_has = { "bad --min-bytes" }, .out_empty = 1 }
    EXPECT_CASES(BAD_MIN("-1"), BAD_MIN("lots"), BAD_MIN(""), BAD_MIN("0KiB"), BAD_MIN("1.5x"),
                 { .opts = "--min-bytes", .rc = 2, .err_has = { "--min-bytes needs a value" } });
#undef BAD_MIN
    cleanup();
}

/* In a fresh folder, FILE: the leak trace with tensor 21 ('send 1') renamed
 * `name` after it was recorded. */
static void write_leak_renamed(const char *name, const char *file)
{
    tmpdir();
    synth y;
    pipeline(&y, 0);
    synth_name(&y, 21, name);
    write_snap(&y, file);
    synth_fini(&y);
}

/* A tensor renamed after it was recorded (TENSOR_NAME, format 1.1): the
 * file says 1.3 (the writer's), `json --events` names the kind, `check` the new name. */
TEST(cli_renamed_tensor_in_json_events_and_check)
{
    write_leak_renamed("fc2 out", "renamed.vtsnap");
    char *out, *err, args[512];
    snprintf(args, sizeof args, "'%s/renamed.vtsnap' --events", dir);
    ASSERT_EQ(run_sub("json", args, &out, &err), 0);
    ASSERT_JSON_VALID(out);
    char version[64];   /* the writer's own */
    snprintf(version, sizeof version, "\"format_version\":\"%d.%d\"", VT_FORMAT_MAJOR,
             VT_FORMAT_MINOR);
    ASSERT_STR_CONTAINS(out, version);
    ASSERT_STR_CONTAINS(out, "\"TENSOR_NAME\":1");            /* counts */
    ASSERT_STR_CONTAINS(out, "\"kind\":\"TENSOR_NAME\"");
    ASSERT_STR_CONTAINS(out, "\"aux\":21,\"aux2\":0,\"str\":\"fc2 out\"");
    ASSERT(strstr(out, "KIND_25") == NULL);
    ASSERT_STR_EQ(err, "");
    free(out);
    free(err);

    snprintf(args, sizeof args, "'%s/renamed.vtsnap'", dir);
    ASSERT_EQ(run(args, &out, &err), 1);
    ASSERT_STR_CONTAINS(out, "list[1] \xe2\x86\x92 tensor 'fc2 out' \xe2\x86\x92 "
                             "storage 0x7f6001000000 32 MiB");
    ASSERT(strstr(out, "send 1") == NULL);
    free(out);
    free(err);
    cleanup();
}

/* One escaper and one byte formatter serve every view: a name with a tab,
 * quotes and invalid UTF-8 reads the same in `json` and `check --json`, and a
 * size the same in `leaks` and `check`. */
TEST(json_and_check_print_a_name_and_a_size_the_same)
{
    write_leak_renamed("fc2\t\"out\" \xff", "odd.vtsnap");
    const char *escaped = "\"fc2\\t\\\"out\\\" \\ufffd\"";
    char *out, *err, args[512];
    snprintf(args, sizeof args, "'%s/odd.vtsnap' --events", dir);
    ASSERT_EQ(run_sub("json", args, &out, &err), 0);
    ASSERT_STR_CONTAINS(out, escaped);
    free(out);
    free(err);
    snprintf(args, sizeof args, "'%s/odd.vtsnap' --json", dir);
    ASSERT_EQ(run(args, &out, &err), 1);
    ASSERT_JSON_VALID(out);
    ASSERT_STR_CONTAINS(out, escaped);
    free(out);
    free(err);
    cleanup();

    setup_files();
    snprintf(args, sizeof args, "'%s/pinned.vtsnap'", dir);
    ASSERT_EQ(run_sub("leaks", args, &out, &err), 0);
    ASSERT_STR_CONTAINS(out, "Leak of 4 KiB in 1 allocation");
    free(out);
    free(err);
    ASSERT_EQ(run(args, &out, &err), 1);
    ASSERT_STR_CONTAINS(out, "storage 0x7e8000000000 on cuda:0, 4 KiB");
    free(out);
    free(err);
    cleanup();
}

/* Several files (one per process of a run): each report under its name, a
 * last line saying which have findings; the worst status wins, a file that
 * cannot be read says so and the others are still checked; --json, an
 * array of {"file", "report"} ("report": null and "error" for such a file). */
/* `vramtrace check OPTS DIR/A DIR/B`. */
static int run_two(const char *opts, const char *a, const char *b, char **out, char **err)
{
    char args[1024];
    snprintf(args, sizeof args, "%s '%s/%s' '%s/%s'", opts, dir, a, dir, b);
    return run(args, out, err);
}

TEST(cli_check_several_files_each_under_its_name)
{
    setup_files();
    char head[400], *out, *err;
    ASSERT_EQ(run_two("", "leak.vtsnap", "clean.vtsnap", &out, &err), 1);
    snprintf(head, sizeof head, "==> %s/leak.vtsnap <==\nvramtrace check: 2 findings", dir);
    ASSERT_STR_CONTAINS(out, head);
    snprintf(head, sizeof head, "\n\n==> %s/clean.vtsnap <==\nvramtrace check: 0 findings", dir);
    ASSERT_STR_CONTAINS(out, head);
    ASSERT_STR_CONTAINS(out, "\nvramtrace check: 2 files: 1 with findings, 1 clean\n");
    ASSERT_STR_EQ(err, "");
    free(out);
    free(err);

    ASSERT_EQ(run_two("", "clean.vtsnap", "clean.vtsnap", &out, &err), 0);
    ASSERT_STR_CONTAINS(out, "2 files: 0 with findings, 2 clean");
    free(out);
    free(err);

    ASSERT_EQ(run_two("", "garbage.vtsnap", "leak.vtsnap", &out, &err), 2);
    ASSERT_STR_CONTAINS(out, "vramtrace check: 2 findings");   /* checked all the same */
    ASSERT_STR_CONTAINS(out, "2 files: 1 with findings, 0 clean, some not read (see above)");
    snprintf(head, sizeof head, "vramtrace check: %s/garbage.vtsnap: ", dir);
    ASSERT_STR_CONTAINS(err, head);
    free(out);
    free(err);

    ASSERT_EQ(run_two("--json", "leak.vtsnap", "clean.vtsnap", &out, &err), 1);
    ASSERT_JSON_VALID(out);
    ASSERT_STR_CONTAINS(out, "\"report\": {");
    free(out);
    free(err);
    ASSERT_EQ(run_two("--json", "leak.vtsnap", "garbage.vtsnap", &out, &err), 2);
    ASSERT_JSON_VALID(out);
    ASSERT_STR_CONTAINS(out, "\"report\": null, \"error\": \"");
    free(out);
    free(err);
    if (system("python3 -c 'import json' >/dev/null 2>&1") == 0) {
        char cmd[1200];
        snprintf(cmd, sizeof cmd,
                 "'%s' check --json '%s/leak.vtsnap' '%s/clean.vtsnap' '%s/garbage.vtsnap' | "
                 "python3 -c 'import json,sys; d=json.load(sys.stdin); "
                 "assert [e[\"file\"].rsplit(\"/\",1)[1] for e in d]==[\"leak.vtsnap\","
                 "\"clean.vtsnap\",\"garbage.vtsnap\"]; "
                 "assert len(d[0][\"report\"][\"findings\"])==2; "
                 "assert d[1][\"report\"][\"findings\"]==[]; "
                 "assert d[2][\"report\"] is None and d[2][\"error\"]' 2>/dev/null",
                 exe(), dir, dir, dir);
        ASSERT_EQ(system(cmd), 0);
    }
    cleanup();
}

TEST(cli_check_help_and_bad_usage)
{
    tmpdir();
    EXPECT_CASES(
        { .opts = "--help", .rc = 0, .out_has = { "usage: vramtrace check FILE", "--grace",
              "--ignore", "--pinned-ratio R", "pinned       base tensor dropped",
              "--min-bytes SIZE" } },
        { .opts = "--frobnicate x.vtsnap", .rc = 2,
          .err_has = { "unknown option '--frobnicate'" } },
        { .opts = "", .rc = 2, .err_has = { "missing FILE" } },
        { .opts = "a.vtsnap b.vtsnap", .rc = 2, .err_has = { "a.vtsnap", "b.vtsnap" } },
        { .opts = "--grace", .rc = 2, .err_has = { "--grace needs a value" } });
    cleanup();
}

/* Words of `text` from `from` up to the first blank line, one space
 * between them: a usage as printed, whatever its indentation. */
static void usage_words(const char *from, char *out, size_t cap)
{
    size_t n = 0;
    int space = 0;
    for (const char *c = from; *c && !(c[0] == '\n' && c[1] == '\n') && n + 2 < cap; c++) {
        if (*c == ' ' || *c == '\n') {
            space = n > 0;
            continue;
        }
        if (space)
            out[n++] = ' ';
        space = 0;
        out[n++] = *c;
    }
    out[n] = 0;
}

/* `vramtrace --help` lists each command's usage as the command's own
 * --help gives it (the list had lost --track, --all-frames, --rules and
 * --host while the commands gained them). */
TEST(cli_help_lists_each_commands_usage_as_its_own_help)
{
    tmpdir();
    char *all, *err;
    ASSERT_EQ(run_sub("--help", "", &all, &err), 0);
    free(err);
    static const char *cmds[] = { "run", "summary", "leaks", "json", "check", "viz",
                                  "import", "export", "compare", "replay", "oom" };
    char listed[8192], own[2048];
    const char *each = strstr(all, "usage of each:");
    ASSERT_MSG(each != NULL, "vramtrace --help: %s", all);
    usage_words(each + strlen("usage of each:"), listed, sizeof listed);
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        char *out;
        ASSERT_EQ(run_sub(cmds[i], "--help", &out, &err), 0);
        const char *u = strstr(out, "usage: ");
        ASSERT_MSG(u != NULL, "%s --help: %s", cmds[i], out);
        usage_words(u + strlen("usage: "), own, sizeof own);
        ASSERT_MSG(strstr(listed, own) != NULL, "vramtrace --help lists\n%s\nnot\n%s", listed, own);
        free(out);
        free(err);
    }
    free(all);
    cleanup();
}

TEST(cli_check_bad_file_exits_2_with_one_message)
{
    setup_files();
    EXPECT_CASES(
        { .file = "does-not-exist.vtsnap", .rc = 2, .out_empty = 1,
          .err_has = { "vramtrace check: ", "does-not-exist.vtsnap" } },
        { .file = "garbage.vtsnap", .rc = 2, .err_one_line = 1,
          .err_has = { "vramtrace check: ", "garbage.vtsnap" } });
    cleanup();
}

/* `vramtrace run -o run.vtsnap` of a program with several processes names
 * each one's file with a tag (run-PID.vtsnap, run-rank1-PID.vtsnap): asked
 * for run.vtsnap, the error names those beside it, and no other file. */
TEST(cli_check_missing_file_names_a_runs_files_beside_it)
{
    tmpdir();
    synth y;
    pipeline(&y, 0);
    write_snap(&y, "run-4242.vtsnap");
    write_snap(&y, "run-rank1-4343.vtsnap");
    write_snap(&y, "runner.vtsnap");      /* another name */
    write_snap(&y, "run-old.vtsnap");     /* a tag no run writes */
    write_snap(&y, "run-4444.json");      /* another extension */
    synth_fini(&y);
    char *out, *err, args[512];
    snprintf(args, sizeof args, "'%s/run.vtsnap'", dir);
    ASSERT_EQ(run(args, &out, &err), 2);
    ASSERT_STR_CONTAINS(err, "run.vtsnap: cannot open: No such file or directory; beside it, "
                             "one per process of a run: run-4242.vtsnap, run-rank1-4343.vtsnap\n");
    ASSERT(strstr(err, "runner") == NULL && strstr(err, "run-old") == NULL &&
                strstr(err, "json") == NULL);
    free(out);
    free(err);
    snprintf(args, sizeof args, "'%s/other.vtsnap'", dir);   /* none beside: as before */
    ASSERT_EQ(run(args, &out, &err), 2);
    ASSERT_STR_CONTAINS(err, "other.vtsnap: cannot open: No such file or directory\n");
    free(out);
    free(err);
    cleanup();
}

/* Tensor, holder, function and file names in the text report are escaped,
 * not obeyed; --json keeps them as recorded. */
TEST(cli_check_text_report_escapes_control_characters_in_names)
{
    tmpdir();
    synth y;
    pipeline(&y, 0);
    poison_names(&y.s);
    write_snap(&y, "hostile.vtsnap");
    synth_fini(&y);
    char *out, *err, args[512];
    snprintf(args, sizeof args, "'%s/hostile.vtsnap'", dir);
    ASSERT_EQ(run(args, &out, &err), 1);
    assert_terminal_safe("check", out, 1);
    ASSERT_STR_CONTAINS(out, "tensor 'send 1\\x1b]0;pwned");
    free(out);
    free(err);
    snprintf(args, sizeof args, "--json '%s/hostile.vtsnap'", dir);
    ASSERT_EQ(run(args, &out, &err), 1);
    ASSERT_STR_CONTAINS(out, "send 1\\u001b]0;pwned");
    free(out);
    free(err);
    cleanup();
}

TEST_MAIN()
