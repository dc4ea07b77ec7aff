/*
 * cli/cmd_viz.c - `vramtrace viz FILE [-o OUT.html] [--check] [--rules LIST]`: render a
 * snapshot as one self-contained HTML timeline (viz/render.c).
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "commands.h"
#include "errbuf.h"
#include "event_stream.h"
#include "render.h"
#include "pytorch.h"
#include "oom_explain.h"
#include "replay.h"
#include "report_util.h"
#include "timeline.h"
#include "viz_ranks.h"

static void viz_usage(FILE *f)
{
    fprintf(f,
            "usage: vramtrace " VT__USAGE_VIZ "\n"
            "\n"
            "Write the snapshot FILE as one self-contained HTML page (script, style\n"
            "and data inline; it opens offline, from file://): the active memory\n"
            "timeline, segments and fragmentation, the largest allocations at a\n"
            "chosen moment, and live bytes by call path at the peak. Storages vramtrace\n"
            "did not allocate (CPU tensors under vramtrace.torch.track(), vt_storage_external)\n"
            "get a lane of their own under the device timeline.\n"
            "\n"
            "  -o OUT.html   output file (default: FILE with its extension replaced by .html)\n"
            "  --check       run the checker and mark what it finds on the timeline\n"
            "  --grace G     the checker's grace (implies --check): N steps or a duration (2.5s)\n"
            "  --rules LIST  the checker's rules (implies --check), as `vramtrace check --rules`:\n"
            "                e.g. linger,pinned,tape adds the opt-in tape rule (retention inside a\n"
            "                step), whose findings are hatched in violet\n"
            "  --replay CONF draw, over the recorded reserved bytes, those of a replay of the\n"
            "                run with allocator settings CONF (K:V,... over the recorded ones,\n"
            "                or 'recorded'), at the recorded device's capacity (vramtrace replay)\n"
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

/* The page of one snapshot, written by vt__viz_write_file: from its
 * stream of events (es), or from the whole snapshot and its timeline. */
struct page {
    const char *out;
    const vt__snapshot_data *s;
    struct vt__event_stream *es;
    const char *stream_err;           /* the stream's messages (a damaged file) */
    const vt__timeline *tl;
    const vt__check_report *report;
    const vt__viz_overlay *overlay;   /* NULL: none */
    const vt__viz_oom *oom;           /* the OOM explained, NULL: none */
    vt__viz_stats st;                 /* what the render produced */
};

static int write_page(FILE *f, void *ctx, char *err, size_t errlen)
{
    struct page *p = ctx;
    char why[1024] = "";
    int rc = p->es ? vt__viz_render_stream(f, p->s, p->es, p->report, &p->st, why, sizeof why)
                   : vt__viz_render_page(f, p->s, p->tl, p->report, p->overlay, p->oom,
                                         &p->st, why, sizeof why);
    if (rc == -ENOTSUP)
        return rc;   /* the caller renders the whole snapshot instead */
    if (rc && !why[0] && p->stream_err)
        snprintf(why, sizeof why, "%s", p->stream_err);
    return rc ? vt__errf_in(err, errlen, rc, p->out, "%s", why) : 0;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Replay the snapshot with `conf` and turn its reserved curve into an
 * overlay. Prints one line and returns -1 on failure. */
static int make_overlay(const vt__snapshot_data *s, const char *conf, vt__replay_result *rr,
                        vt__viz_overlay *ov, char *label, size_t len, const char *in)
{
    char err[512];
    vt__replay_options ropt = { .conf = strcmp(conf, "recorded") ? conf : NULL, .curve = true };
    if (vt__replay_run(s, &ropt, rr, err, sizeof err) != 0) {
        fprintf(stderr, "vramtrace viz: --replay: %s: %s\n", in, err);
        return -1;
    }
    uint32_t *ev = malloc((rr->ncurve + 1) * sizeof *ev);
    uint64_t *val = malloc((rr->ncurve + 1) * sizeof *val);
    int8_t *dev = malloc(rr->ncurve + 1);
    if (!ev || !val || !dev) {
        free(ev);
        free(val);
        free(dev);
        fprintf(stderr, "vramtrace viz: out of memory\n");
        return -1;
    }
    for (size_t k = 0; k < rr->ncurve; k++) {
        ev[k] = (uint32_t)rr->curve[k].event;
        val[k] = rr->curve[k].reserved;
        dev[k] = rr->curve[k].device;
    }
    uint64_t peak = 0;
    for (size_t d = 0; d < rr->ndevices; d++)
        if (rr->devices[d].peak_reserved > peak)
            peak = rr->devices[d].peak_reserved;
    char b1[32];
    int n = snprintf(label, len, "%s, peak %s", strcmp(conf, "recorded") ? conf : "as recorded",
                     vt__fmt_bytes(peak, b1));
    if (rr->oom.happened && n > 0 && (size_t)n < len)
        snprintf(label + n, len - (size_t)n, ", out of memory at event %zu", rr->oom.event_index);
    *ov = (vt__viz_overlay){ .label = label, .npoints = rr->ncurve, .event = ev,
                             .reserved = val, .device = dev,
                             .oom_event = rr->oom.happened ? (int64_t)rr->oom.event_index : -1 };
    return 0;
}

static int viz_streamed(const char *in, const char *out, int check, const vt__check_options *opt,
                        int quiet, double t_start);
static int viz_whole(const char *in, const char *out, int check, const vt__check_options *opt,
                     const char *replay_conf, int quiet, double t_start);

int vt__cmd_viz(int argc, char **argv)
{
    const char *in = NULL, *out = NULL;
    /* every FILE, when several: kept in argv itself, whose slots before
     * the one being read are no longer needed */
    const char **more = (const char **)argv;
    size_t nmore = 0;
    int check = 0, quiet = 0;
    const char *replay_conf = NULL;
    vt__check_options opt;
    vt__check_options_init(&opt);

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
            if (!g || vt__check_parse_grace(g, &opt) != 0) {
                fprintf(stderr, "vramtrace viz: bad --grace '%s' (N steps or a duration like 2.5s)\n",
                        g ? g : "");
                return VT_EXIT_FAILURE;
            }
            check = 1;
        } else if (!strcmp(a, "--rules") || !strncmp(a, "--rules=", 8)) {
            const char *g = a[7] == '=' ? a + 8 : (i + 1 < argc ? argv[++i] : NULL);
            if (!g || vt__check_parse_rules(g, &opt.rules) != 0) {
                fprintf(stderr, "vramtrace viz: bad --rules '%s' (comma-separated: linger, pinned, "
                                "cycle, tape, never-freed, outlier, growth, all, auto)\n", g ? g : "");
                return VT_EXIT_FAILURE;
            }
            check = 1;
        } else if (!strcmp(a, "--replay")) {
            if (++i >= argc) {
                fprintf(stderr, "vramtrace viz: --replay needs allocator settings (K:V,... or 'recorded')\n");
                return VT_EXIT_FAILURE;
            }
            replay_conf = argv[i];
        } else if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) {
            quiet = 1;
        } else if (a[0] == '-' && a[1]) {
            vt__cli_unknown_option("viz", a);
            return VT_EXIT_FAILURE;
        } else {
            if (!in)
                in = a;
            more[nmore++] = a;
        }
    }
    if (nmore > 1) {
        int st = VT_EXIT_FAILURE;
        if (replay_conf)
            fprintf(stderr, "vramtrace viz: --replay takes one snapshot\n");
        else if (!out)
            fprintf(stderr, "vramtrace viz: several snapshots need -o OUT.html\n");
        else
            st = vt__viz_ranks(more, nmore, out, check, &opt, quiet);
        return st;
    }
    if (!in) {
        viz_usage(stderr);
        return VT_EXIT_FAILURE;
    }

    char *def_out = NULL;
    if (!out) {
        def_out = default_output(in);
        if (!def_out) {
            fprintf(stderr, "vramtrace viz: out of memory\n");
            return VT_EXIT_FAILURE;
        }
        out = def_out;
    }
    double t_start = now_s();
    /* The page from the events read as a stream, in memory that follows
     * what is alive at once; the whole snapshot only where a replay needs
     * it (--replay, a run that ran out of memory). */
    int status = replay_conf ? -ENOTSUP : viz_streamed(in, out, check, &opt, quiet, t_start);
    if (status == -ENOTSUP)
        status = viz_whole(in, out, check, &opt, replay_conf, quiet, t_start);
    free(def_out);
    return status;
}

/* What a page written says. `checked`: the checker ran; without it, no
 * "0 findings" (a page of a leaking run read as clean). */
static void say_wrote(const char *out, const vt__viz_stats *st, bool checked, double t_start)
{
    char ext[64] = "", found[64];
    if (st->nexternal)
        snprintf(ext, sizeof ext, ", %zu external storage%s", st->nexternal,
                 st->nexternal == 1 ? "" : "s");
    if (checked || st->nfindings)
        snprintf(found, sizeof found, "%zu finding%s", st->nfindings,
                 st->nfindings == 1 ? "" : "s");
    else
        snprintf(found, sizeof found, "not checked (--check marks findings)");
    printf("wrote %s: %.2f MB, %zu allocation%s%s, %zu event%s, %s, %.2f s\n", out,
           (double)st->html_bytes / 1e6, st->nlifetimes, st->nlifetimes == 1 ? "" : "s", ext,
           st->naxis, st->naxis == 1 ? "" : "s", found, now_s() - t_start);
}

/* Write pg's page to pg->out and say so (unless quiet): what both ways of
 * reading the snapshot end with. Never a half-written page, never a device
 * or FIFO replaced (vt__viz_write_file). @return 0; -ENOTSUP, said by no
 * one, when a streamed page (pg->es) gives way to the whole snapshot;
 * else VT_EXIT_FAILURE after saying why on stderr. */
static int write_and_say(struct page *pg, char *err, size_t errlen, int quiet, double t_start)
{
    int rc = vt__viz_write_file(pg->out, write_page, pg, err, errlen);
    if (rc == -ENOTSUP && pg->es)
        return -ENOTSUP;
    if (rc != 0) {
        fprintf(stderr, "vramtrace viz: %s\n", err);
        return VT_EXIT_FAILURE;
    }
    if (!quiet)
        say_wrote(pg->out, &pg->st, pg->report != NULL, t_start);
    return 0;
}

static int viz_streamed(const char *in, const char *out, int check, const vt__check_options *opt,
                        int quiet, double t_start)
{
    /* err is the stream's too: a damaged file's message lands there */
    char err[512] = "", werr[1024] = "";
    vt__snapshot_data *s = NULL;
    vt__event_stream *es = NULL;
    vt__check_report *rep = NULL;
    int status = VT_EXIT_FAILURE;
    if (vt__snapshot_open(in, &s, &es, err, sizeof err) < 0) {
        fprintf(stderr, "vramtrace viz: %s\n", err[0] ? err : "cannot read the snapshot");
        goto done;
    }
    if (check && vt__check_run_stream(s, es, opt, &rep, err, sizeof err) != 0) {
        fprintf(stderr, "vramtrace viz: check: %s: %s\n", in, err);
        goto done;
    }
    struct page pg = { .out = out, .s = s, .es = es, .stream_err = err, .report = rep };
    status = write_and_say(&pg, werr, sizeof werr, quiet, t_start);
done:
    vt__check_report_free(rep);
    vt__event_stream_close(es);
    vt__snapshot_free(s);
    return status;
}

static int viz_whole(const char *in, const char *out, int check, const vt__check_options *opt,
                     const char *replay_conf, int quiet, double t_start)
{
    char err[512] = "";
    vt__snapshot_data *s = NULL;
    vt__timeline *tl = NULL;
    vt__check_report *rep = NULL;
    int status = VT_EXIT_FAILURE;
    vt__replay_result rr;
    memset(&rr, 0, sizeof rr);
    vt__viz_overlay ov;
    memset(&ov, 0, sizeof ov);
    char label[640] = "";
    char *oom_json = NULL;
    vt__viz_oom oom = { 0 };   /* the OOM explained: its JSON and event */

    if (vt__snapshot_load(in, &s, err, sizeof err) != 0) {
        fprintf(stderr, "vramtrace viz: %s\n", err[0] ? err : "cannot read the snapshot");
        goto done;
    }
    if (vt__timeline_build(s, &tl, err, sizeof err) != 0) {
        fprintf(stderr, "vramtrace viz: %s: %s\n", in, err);
        goto done;
    }
    if (check && vt__check_run(s, opt, &rep, err, sizeof err) != 0) {
        fprintf(stderr, "vramtrace viz: check: %s: %s\n", in, err);
        goto done;
    }
    if (replay_conf && make_overlay(s, replay_conf, &rr, &ov, label, sizeof label, in) != 0)
        goto done;
    /* a run that ran out of memory: the OOM explained, as `vramtrace oom --json` */
    for (size_t i = 0; i < s->nevents && !oom_json; i++)
        if (s->events[i].kind == VT_EV_OOM) {
            vt__oom_report *orep = NULL;
            size_t olen = 0;
            FILE *m = vt__oom_explain(s, tl, NULL, &orep, err, sizeof err) == 0
                          ? open_memstream(&oom_json, &olen) : NULL;
            if (m) {
                vt__oom_write_json(m, in, s, orep);
                fclose(m);
                oom = (vt__viz_oom){ .json = oom_json, .event = orep->event };
            } else {
                fprintf(stderr, "vramtrace viz: %s: the OOM is not explained: %s\n", in, err);
            }
            vt__oom_free(orep);
            break;
        }

    struct page pg = { .out = out, .s = s, .tl = tl, .report = rep,
                       .overlay = replay_conf ? &ov : NULL, .oom = oom.json ? &oom : NULL };
    status = write_and_say(&pg, err, sizeof err, quiet, t_start);
done:
    free((void *)ov.event);
    free((void *)ov.reserved);
    free((void *)ov.device);
    vt__replay_result_free(&rr);
    free(oom_json);
    vt__check_report_free(rep);
    vt__timeline_free(tl);
    vt__snapshot_free(s);
    return status;
}
