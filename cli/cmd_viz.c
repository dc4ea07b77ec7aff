/*
 * cli/cmd_viz.c - `vramtrace viz FILE [-o OUT.html] [--check]`: render a
 * snapshot as one self-contained HTML timeline (viz/render.c).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "commands.h"
#include "outfile.h"
#include "render.h"
#include "pytorch.h"
#include "timeline.h"
#include "viz_ranks.h"

static void viz_usage(FILE *f)
{
    fprintf(f,
            "usage: vramtrace viz FILE [-o OUT.html] [--check] [--grace G] [--quiet]\n"
            "       vramtrace viz FILE FILE... -o OUT.html [--check] [--grace G] [--quiet]\n"
            "\n"
            "Write the snapshot FILE as one self-contained HTML page (script, style\n"
            "and data inline; it opens offline, from file://): the active memory\n"
            "timeline, segments and fragmentation, the largest allocations at a\n"
            "chosen moment, and live bytes by call path at the peak.\n"
            "\n"
            "  -o OUT.html   output file (default: FILE with its extension replaced by .html)\n"
            "  --check       run the checker and mark what it finds on the timeline\n"
            "  --grace G     the checker's grace (implies --check): N steps or a duration (2.5s)\n"
            "  -q, --quiet   print nothing on success\n"
            "\n"
            "With several FILEs (one snapshot per rank, .vtsnap or PyTorch pickles), one\n"
            "page holds every rank's timeline behind a rank selector, under an overview of\n"
            "every rank's allocated bytes on one time axis (wall clock, or aligned at each\n"
            "rank's first mark); -o is then required.\n"
            VT_EXIT_HELP);
}

static char *default_output(const char *in)
{
    size_t n = strlen(in);
    const char *slash = strrchr(in, '/');
    const char *dot = strrchr(in, '.');
    if (dot && (!slash || dot > slash + 1))
        n = (size_t)(dot - in);
    char *out = malloc(n + 6);
    if (out) {
        memcpy(out, in, n);
        memcpy(out + n, ".html", 6);
    }
    return out;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int vt_cmd_viz(int argc, char **argv)
{
    const char *in = NULL, *out = NULL;
    /* every FILE, when several: kept in argv itself, whose slots before
     * the one being read are no longer needed */
    const char **more = (const char **)argv;
    size_t nmore = 0;
    int check = 0, quiet = 0;
    vt_check_options opt;
    vt_check_options_init(&opt);

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            viz_usage(stdout);
            return 0;
        } else if (!strcmp(a, "-o") || !strcmp(a, "--output")) {
            if (++i >= argc) {
                fprintf(stderr, "vramtrace viz: %s needs a file name\n", a);
                return VT_EXIT_FAILURE;
            }
            out = argv[i];
        } else if (!strncmp(a, "--output=", 9)) {
            out = a + 9;
        } else if (!strcmp(a, "--check")) {
            check = 1;
        } else if (!strcmp(a, "--grace") || !strncmp(a, "--grace=", 8)) {
            const char *g = a[7] == '=' ? a + 8 : (i + 1 < argc ? argv[++i] : NULL);
            if (!g || vt_check_parse_grace(g, &opt) != 0) {
                fprintf(stderr, "vramtrace viz: bad --grace '%s' (N steps or a duration like 2.5s)\n",
                        g ? g : "");
                return VT_EXIT_FAILURE;
            }
            check = 1;
        } else if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) {
            quiet = 1;
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "vramtrace viz: unknown option '%s' (try --help)\n", a);
            return VT_EXIT_FAILURE;
        } else {
            if (!in)
                in = a;
            more[nmore++] = a;
        }
    }
    if (nmore > 1) {
        int st = VT_EXIT_FAILURE;
        if (!out)
            fprintf(stderr, "vramtrace viz: several snapshots need -o OUT.html\n");
        else
            st = vt__viz_ranks(more, nmore, out, check, &opt, quiet);
        return st;
    }
    if (!in) {
        viz_usage(stderr);
        return VT_EXIT_FAILURE;
    }

    double t_start = now_s();
    char err[512] = "";
    char *def_out = NULL;
    vt_snapshot_data *s = NULL;
    vt_timeline *tl = NULL;
    vt_check_report *rep = NULL;
    FILE *f = NULL;
    int status = VT_EXIT_FAILURE;

    if (!out) {
        def_out = default_output(in);
        if (!def_out) {
            fprintf(stderr, "vramtrace viz: out of memory\n");
            return VT_EXIT_FAILURE;
        }
        out = def_out;
    }
    if (vt_snapshot_load(in, &s, err, sizeof err) != 0) {
        fprintf(stderr, "vramtrace viz: %s\n", err[0] ? err : "cannot read the snapshot");
        goto done;
    }
    if (vt_timeline_build(s, &tl, err, sizeof err) != 0) {
        fprintf(stderr, "vramtrace viz: %s: %s\n", in, err);
        goto done;
    }
    if (check && vt_check_run(s, &opt, &rep, err, sizeof err) != 0) {
        fprintf(stderr, "vramtrace viz: check: %s: %s\n", in, err);
        goto done;
    }

    /* Write next to the target and rename (only over a regular file): never
     * a half-written page, never a device or FIFO replaced. */
    char tmp[4096];
    int fd = vt__outfile_create(out, tmp, sizeof tmp, err, sizeof err);
    if (fd < 0) {
        fprintf(stderr, "vramtrace viz: %s\n", err);
        goto done;
    }
    f = fdopen(fd, "w");
    if (!f) {
        fprintf(stderr, "vramtrace viz: cannot write %s: %s\n", tmp, strerror(errno));
        close(fd);
        unlink(tmp);
        goto done;
    }
    static char iobuf[1 << 16];
    setvbuf(f, iobuf, _IOFBF, sizeof iobuf);
    vt__viz_stats st = { 0 };
    int rc = vt__viz_render(f, s, tl, rep, &st, err, sizeof err);
    if (fclose(f) != 0 && rc == 0)
        rc = -EIO, snprintf(err, sizeof err, "viz: write failed");
    f = NULL;
    if (rc != 0) {
        fprintf(stderr, "vramtrace viz: %s: %s\n", out, err);
        unlink(tmp);
        goto done;
    }
    if (vt__outfile_commit(tmp, out, 0, err, sizeof err) != 0) {
        fprintf(stderr, "vramtrace viz: %s\n", err);
        goto done;
    }
    if (!quiet)
        printf("wrote %s: %.2f MB, %zu allocation%s, %zu event%s, %zu finding%s, %.2f s\n", out,
               (double)st.html_bytes / 1e6, st.nlifetimes, st.nlifetimes == 1 ? "" : "s",
               st.naxis, st.naxis == 1 ? "" : "s", st.nfindings, st.nfindings == 1 ? "" : "s",
               now_s() - t_start);
    status = 0;
done:
    if (f)
        fclose(f);
    free(def_out);
    vt_check_report_free(rep);
    vt_timeline_free(tl);
    vt_snapshot_free(s);
    return status;
}
