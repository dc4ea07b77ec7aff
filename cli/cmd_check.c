/*
 * cli/cmd_check.c - `vramtrace check FILE...`: storages alive after their
 * last use or pinned by small views of a dropped base, and the chain of
 * references that holds them (trace/check/check.h). Several files (the
 * snapshots of a run's processes: ranks, spawned trainers, workers) are
 * checked one after the other, each report under its file's name.
 *
 * Exit status (commands.h): 0 clean, 1 something was flagged, 2 bad usage or
 * a file that cannot be read (the reader's one-line message is printed; the
 * other files are still checked).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "commands.h"
#include "config.h"
#include "event_stream.h"
#include "pytorch.h"
#include "report_util.h"

static void usage(FILE *f)
{
    fprintf(f,
        "usage: vramtrace " VT__USAGE_CHECK "\n"
        "\n"
        "Flags every storage still alive after the last use of the tensors on it,\n"
        "and every storage whose base tensor was dropped while small views of it\n"
        "keep the whole buffer alive (or, for a trace without tensor annotations,\n"
        "call sites that accumulate never-freed memory or whose allocations\n"
        "outlive their siblings), with the chain of references that keeps it\n"
        "alive, and call sites whose live bytes grow step over step. Findings are\n"
        "ranked by bytes x seconds held (pinned: wasted bytes x seconds).\n"
        "Several FILEs (one per process of a run: ranks, spawned trainers) are\n"
        "checked in turn, each report under a '==> FILE <==' line.\n"
        "\n");
    /* in two: a string literal's length has a limit (C99: 4095) */
    fprintf(f,
        "options:\n"
        "  --json            the whole report as JSON on stdout (schema: trace/check/check.h);\n"
        "                    several FILEs: an array of {\"file\", \"report\"} (or \"error\")\n"
        "  --grace G         how long a storage may outlive its last use:\n"
        "                      Nsteps (or N)  N complete steps between marks\n"
        "                      2.5s, 300ms    a fixed time\n"
        "                      auto           default: with marks, max(1, its usual gap\n"
        "                                     between uses) complete steps (the tensors\n"
        "                                     of a line drawn from at random, a replay\n"
        "                                     buffer's: as long as a draw may miss one);\n"
        "                                     without, max(1 s, 10x its median use gap,\n"
        "                                     5%% of the trace)\n"
        "  --ignore PATTERN  skip storages whose tensor name or any function of the\n"
        "                    allocation / last-use stack matches (fnmatch; repeatable)\n"
        "  --rules LIST      comma-separated, from:\n"
        "                      linger       alive after the last use beyond the grace\n"
        "                      pinned       base tensor dropped, its live views cover\n"
        "                                   less than --pinned-ratio of the storage,\n"
        "                                   for longer than the grace (default: 1\n"
        "                                   complete step; without marks max(1 s, 5%%\n"
        "                                   of the trace)); a storage linger flags is\n"
        "                                   reported as pinned only up to its last use\n"
        "                      never-freed  call site accumulating never-freed memory\n"
        "                      outlier      allocations outliving their call site's\n"
        "                                   siblings; or, without tensors, a step's\n"
        "                                   blocks at 2+ lines kept together past a\n"
        "                                   step (a kept autograd graph); or a loop's\n"
        "                                   blocks at 2+ lines kept until it ended\n"
        "                                   (a running sum of tensor losses)\n"
        "                      cycle        freed only by a garbage collection: held\n"
        "                                   by a reference cycle until gc ran\n"
        "                      tape         freed in the step of its last use, but\n"
        "                                   idle for a quarter of its events and\n"
        "                                   through its peak\n"
        "                      growth       a call site whose live bytes at each mark\n"
        "                                   grow step over step (after a warm-up),\n"
        "                                   among the storages no other rule flagged\n"
        "                      all\n"
        "                    (default: linger,pinned when the trace has tensor\n"
        "                    annotations, plus cycle when it recorded a collection\n"
        "                    and outlier where a loop's blocks were kept until it\n"
        "                    ended;\n"
        "                    never-freed,outlier otherwise; plus growth with at least\n"
        "                    5 marks; tape only when asked)\n"
        "  --pinned-ratio R  pinned: flag while the live views cover less than R of the\n"
        "                    storage, 0 < R <= 1, e.g. 0.25 or 25%% (default 0.5)\n"
        "  --min-bytes SIZE  a cause (findings grouped as the report groups them) holding\n"
        "                    less is minor: listed in one line, not counted, not failing\n"
        "                    (default auto: 0.1%% of the peak live bytes, at most 1 MiB;\n"
        "                    0: every finding counts). Small results kept on purpose,\n"
        "                    such as losses.append(loss.detach()), stay under it\n"
        "  --top N           findings shown in detail in the text report (default 20,\n"
        "                    at most 3 of each cause; 0 = all)\n"
        "  --paths N         retention paths per finding (default 3)\n"
        "  --host            judge storages in host memory (CPU tensors) too; by default\n"
        "                    they are judged only in a trace with no device storage\n"
        "  -h, --help        this help\n");
    fprintf(f,
        "\n"
        "Steps are the marks (vramtrace run marks optimizer steps). A trace with none\n"
        "but two or more backward passes (a training loop that steps its parameters\n"
        "by hand) is stepped by them: where its gradients are released (a zero_grad)\n"
        "after a pass, else where each pass ends.\n"
        "\n"
        "exit status: 0 nothing flagged, 1 findings (in any FILE), 2 bad usage or a file\n"
        "that cannot be read or written\n");
}

/* "--opt VALUE" or "--opt=VALUE"; advances *i. NULL if not this option. */
static const char *optval(int argc, char **argv, int *i, const char *name, int *missing)
{
    size_t n = strlen(name);
    const char *a = argv[*i];
    if (strncmp(a, name, n) != 0)
        return NULL;
    if (a[n] == '=')
        return a + n + 1;
    if (a[n] != 0)
        return NULL;
    if (*i + 1 >= argc) {
        *missing = 1;
        return NULL;
    }
    return argv[++*i];
}

static int parse_count(const char *v, size_t *out)
{
    char *end = NULL;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    if (errno || end == v || *end || v[0] == '-' || x > 1000000000ull)
        return -EINVAL;
    *out = (size_t)x;
    return 0;
}

/* `--min-bytes`: "auto" (the automatic floor), "0" (no floor: every finding
 * counts) or a size ("64KiB", "1M", "4096"). */
static int parse_min_bytes(const char *v, uint64_t *out)
{
    if (!strcmp(v, "auto")) {
        *out = VT_CHECK_MIN_BYTES_AUTO;
        return 0;
    }
    if (!strcmp(v, "0")) {
        *out = VT_CHECK_MIN_BYTES_NONE;
        return 0;
    }
    uint64_t x;
    if (v[0] == '-' || vt__parse_bytes(v, &x) < 0 || x == VT_CHECK_MIN_BYTES_NONE)
        return -EINVAL;
    *out = x;
    return 0;
}

/* Check one file and print its report (JSON: its object); `err` gets the
 * reason when it cannot be read or checked. @return the exit status. */
static int check_one(const char *path, const vt__check_options *opt, int json, size_t top,
                     char *err, size_t errlen)
{
    /* The events as a stream (event_stream.h): the checker reads them a
     * few times rather than holding them. err is the stream's too: a
     * damaged file is said as the reader says it. */
    vt__snapshot_data *s = NULL;
    vt__event_stream *es = NULL;
    err[0] = 0;
    if (vt__snapshot_open(path, &s, &es, err, errlen) < 0) {
        if (!err[0])
            snprintf(err, errlen, "cannot read the snapshot");
        return VT_EXIT_FAILURE;
    }
    /* before the run: the report points into the names */
    if (!json && vt__report_text_names(s) != 0) {
        snprintf(err, errlen, "out of memory");
        vt__event_stream_close(es);
        vt__snapshot_free(s);
        return VT_EXIT_FAILURE;
    }
    vt__check_report *r = NULL;
    int rc;
    if (vt__check_run_stream(s, es, opt, &r, err, errlen) < 0) {
        rc = VT_EXIT_FAILURE;
    } else {
        int wrc = json ? vt__check_report_write_json(stdout, r, s)
                       : vt__check_report_print(stdout, r, s, top);
        if (wrc < 0) {
            snprintf(err, errlen, "cannot write the report");
            rc = VT_EXIT_FAILURE;
        } else {
            rc = r->nfindings ? VT_EXIT_FINDINGS : VT_EXIT_OK;
        }
        vt__check_report_free(r);
    }
    vt__event_stream_close(es);
    vt__snapshot_free(s);
    return rc;
}

/* Every file in turn: one file prints its report alone; several each under
 * a header (JSON: an array of {"file", "report" | "error"}), then a line
 * saying which have findings. Worst status wins: a file that cannot be read
 * (2), then findings (1). */
static int check_files(const char **paths, size_t npaths, const vt__check_options *opt,
                       int json, size_t top)
{
    char err[1024];
    if (npaths == 1) {
        int rc = check_one(paths[0], opt, json, top, err, sizeof err);
        if (rc == VT_EXIT_FAILURE)
            fprintf(stderr, "vramtrace check: %s\n", err);
        return rc;
    }
    int worst = VT_EXIT_OK;
    size_t nfound = 0, nbad = 0;
    if (json)
        fputs("[\n", stdout);
    for (size_t i = 0; i < npaths; i++) {
        if (json) {
            fputs(i ? ",\n{\"file\": " : "{\"file\": ", stdout);
            vt__json_str(stdout, paths[i]);
            fputs(", \"report\": ", stdout);
        } else {
            printf("%s==> %s <==\n", i ? "\n" : "", paths[i]);
        }
        fflush(stdout);
        int rc = check_one(paths[i], opt, json, top, err, sizeof err);
        if (rc == VT_EXIT_FAILURE) {
            fprintf(stderr, "vramtrace check: %s: %s\n", paths[i], err);
            if (json) {   /* a report cut short is not JSON: the error in its place */
                fputs("null, \"error\": ", stdout);
                vt__json_str(stdout, err);
            }
            nbad++;
            worst = VT_EXIT_FAILURE;
        } else if (rc == VT_EXIT_FINDINGS) {
            nfound++;
            if (worst == VT_EXIT_OK)
                worst = VT_EXIT_FINDINGS;
        }
        if (json)
            fputs("}", stdout);
    }
    if (json)
        fputs("\n]\n", stdout);
    else
        printf("\nvramtrace check: %zu files: %zu with findings, %zu clean%s\n", npaths, nfound,
               npaths - nfound - nbad, nbad ? ", some not read (see above)" : "");
    return worst;
}

int vt__cmd_check(int argc, char **argv)
{
    vt__check_options opt;
    vt__check_options_init(&opt);
    const char **paths = calloc((size_t)(argc > 0 ? argc : 1), sizeof *paths);
    size_t npaths = 0;
    int json = 0;
    size_t top = 20;
    const char **ignore = calloc((size_t)(argc > 0 ? argc : 1), sizeof *ignore);
    size_t nignore = 0;
    int rc = VT_EXIT_FAILURE;
    if (!ignore || !paths) {
        fprintf(stderr, "vramtrace check: out of memory\n");
        free(ignore);
        free(paths);
        return VT_EXIT_FAILURE;
    }

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        int missing = 0;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            rc = VT_EXIT_OK;
            goto out;
        } else if (!strcmp(a, "--host")) {
            opt.host = VT_CHECK_HOST_ALWAYS;
        } else if (!strcmp(a, "--json")) {
            json = 1;
        } else if ((v = optval(argc, argv, &i, "--grace", &missing))) {
            if (vt__check_parse_grace(v, &opt) < 0) {
                fprintf(stderr, "vramtrace check: bad --grace '%s' (want Nsteps, 2.5s, 300ms"
                                " or auto)\n", v);
                goto out;
            }
        } else if ((v = optval(argc, argv, &i, "--ignore", &missing))) {
            ignore[nignore++] = v;
        } else if ((v = optval(argc, argv, &i, "--rules", &missing))) {
            if (vt__check_parse_rules(v, &opt.rules) < 0) {
                fprintf(stderr, "vramtrace check: bad --rules '%s' (want a comma-separated"
                                " list of linger, pinned, never-freed, outlier, cycle, tape, growth,"
                                " all)\n", v);
                goto out;
            }
        } else if ((v = optval(argc, argv, &i, "--pinned-ratio", &missing))) {
            if (vt__check_parse_pinned_ratio(v, &opt.pinned_ratio) < 0) {
                fprintf(stderr, "vramtrace check: bad --pinned-ratio '%s' (want a share"
                                " 0 < R <= 1 such as 0.25, or a percentage such as 25%%)\n", v);
                goto out;
            }
        } else if ((v = optval(argc, argv, &i, "--min-bytes", &missing))) {
            if (parse_min_bytes(v, &opt.min_bytes) < 0) {
                fprintf(stderr, "vramtrace check: bad --min-bytes '%s' (want a size such as"
                                " 64KiB or 1M, 0 for none, or auto)\n", v);
                goto out;
            }
        } else if ((v = optval(argc, argv, &i, "--top", &missing))) {
            if (parse_count(v, &top) < 0) {
                fprintf(stderr, "vramtrace check: bad --top '%s'\n", v);
                goto out;
            }
        } else if ((v = optval(argc, argv, &i, "--paths", &missing))) {
            size_t np;
            if (parse_count(v, &np) < 0 || np == 0 || np > 64) {
                fprintf(stderr, "vramtrace check: bad --paths '%s' (1..64)\n", v);
                goto out;
            }
            opt.max_paths = (unsigned)np;
        } else if (missing) {
            fprintf(stderr, "vramtrace check: %s needs a value\n", a);
            goto out;
        } else if (a[0] == '-' && a[1]) {
            vt__cli_unknown_option("check", a);
            goto out;
        } else {
            paths[npaths++] = a;
        }
    }
    if (!npaths) {
        fprintf(stderr, "vramtrace check: missing FILE (try vramtrace check --help)\n");
        goto out;
    }
    opt.ignore = ignore;
    opt.nignore = nignore;

    rc = check_files(paths, npaths, &opt, json, top);
out:
    free(ignore);
    free(paths);
    return rc;
}
