/*
 * cli/cmd_export.c - `vramtrace export --format torch|perfetto SNAP -o OUT`:
 * a snapshot (a .vtsnap or a PyTorch pickle) in another tool's format.
 * Written through the one checked output writer (outfile.h): never a
 * half-written file, never a device or a symbolic link replaced. Both
 * formats read the events as a stream (event_stream.h), never all at once.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "commands.h"
#include "event_stream.h"
#include "outfile.h"
#include "perfetto.h"
#include "pytorch.h"
#include "report_util.h"

static const char usage_text[] =
    "usage: vramtrace " VT__USAGE_EXPORT "\n"
    "\n"
    "  --format torch     a PyTorch memory snapshot pickle (protocol 4, plain\n"
    "                     containers) for `python -m torch.cuda._memory_viz\n"
    "                     stats|trace|segments OUT` and pytorch.org/memory_viz\n"
    "  --format perfetto  Trace Event Format JSON for ui.perfetto.dev or\n"
    "                     chrome://tracing: per device counters of allocated and\n"
    "                     reserved bytes, one async slice per allocation (size,\n"
    "                     stream, top frames), instants for marks, OOMs, bad frees\n"
    "                     and the checker's findings (vramtrace check's default rules)\n"
    "  -o OUT             output file (required)\n"
    VT_EXIT_HELP;

/* Perfetto with the checker's findings (vramtrace check's default rules),
 * each at the moment it became one; without them when the check fails.
 * Both read the snapshot's events as a stream (event_stream.h): memory
 * follows what is alive at once, not the number of events. A damaged file
 * is the stream's message (in the err it was opened with, serr), said
 * once; the checker's and the export's own trouble is said in err. */
static int export_perfetto(FILE *f, const vt__snapshot_data *s, vt__event_stream *es,
                           const char *serr, char *err, size_t errlen)
{
    vt__check_options opt;
    vt__check_options_init(&opt);
    vt__check_report *rep = NULL;
    int rc = vt__check_run_stream(s, es, &opt, &rep, err, errlen);
    if (rc != 0 && serr[0])
        return rc;
    if (rc != 0) {
        /* the trace is still worth having: say so, export without */
        fprintf(stderr, "vramtrace export: check: %s (findings left out)\n", err);
        rep = NULL;
        err[0] = 0;
    }
    /* the minor ones too, marked: a timeline shows what was found */
    size_t major = rep ? rep->nfindings : 0, n = major + (rep ? rep->nminor : 0);
    vt__perfetto_finding *fds = calloc(n ? n : 1, sizeof *fds);
    if (!fds) {
        vt__check_report_free(rep);
        return -ENOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        const vt__check_finding *c = i < major ? &rep->findings[i] : &rep->minor[i - major];
        fds[i] = (vt__perfetto_finding){
            .rule = vt__check_rule_name(c->rule),
            .time_ns = c->linger_from_time_ns ? c->linger_from_time_ns : c->alloc_time_ns,
            .device = c->device, .bytes = c->bytes, .addr = c->addr, .nallocs = c->nallocs,
            .freed = c->freed, .minor = i >= major, .stack = c->alloc_stack };
    }
    vt__perfetto_options popt = { .findings = fds, .nfindings = n,
                                  .site_frame = vt__report_site_frame };
    rc = vt__perfetto_export_stream(f, s, es, &popt, err, errlen);
    free(fds);
    vt__check_report_free(rep);
    return rc;
}

int vt__cmd_export(int argc, char **argv)
{
    const char *in = NULL, *out = NULL, *format = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(usage_text, stdout);
            return 0;
        } else if (!strcmp(a, "-o") || !strcmp(a, "--format")) {
            if (++i >= argc) {
                fprintf(stderr, "vramtrace export: %s needs a value\n", a);
                return VT_EXIT_FAILURE;
            }
            *(a[1] == 'o' ? &out : &format) = argv[i];
        } else if (!strncmp(a, "--format=", 9)) {
            format = a + 9;
        } else if (!vt__cli_operand("export", "SNAPSHOT", a, &in)) {
            return VT_EXIT_FAILURE;
        }
    }
    if (!in || !out || !format) {
        fprintf(stderr, "vramtrace export: missing %s (try --help)\n",
                !format ? "--format" : !in ? "SNAPSHOT" : "-o OUT");
        return VT_EXIT_FAILURE;
    }
    int torch = !strcmp(format, "torch") || !strcmp(format, "pytorch");
    if (!torch && strcmp(format, "perfetto") && strcmp(format, "chrome")) {
        fprintf(stderr, "vramtrace export: unknown format '%s' (torch or perfetto)\n", format);
        return VT_EXIT_FAILURE;
    }
    vt__snapshot_data *s = NULL;
    vt__event_stream *es = NULL;
    char serr[1024] = "", err[1024] = "", tmp[4096];
    if (vt__snapshot_open(in, &s, &es, serr, sizeof serr) < 0) {
        fprintf(stderr, "vramtrace export: %s\n", serr[0] ? serr : "cannot read the snapshot");
        return VT_EXIT_FAILURE;
    }
    serr[0] = 0;   /* from here on, set only by a damaged file */
    int status = VT_EXIT_FAILURE;
    FILE *f = vt__outfile_open(out, tmp, sizeof tmp, err, sizeof err);
    if (!f) {
        fprintf(stderr, "vramtrace export: %s\n", err);
        goto done;
    }
    int rc = torch ? vt__pytorch_export_stream(s, es, f, err, sizeof err)
                   : export_perfetto(f, s, es, serr, err, sizeof err);
    if (rc && serr[0])
        fprintf(stderr, "vramtrace export: %s\n", serr);
    else if (rc)
        fprintf(stderr, "vramtrace export: %s: %s\n", out, err[0] ? err : "write error");
    int crc = vt__outfile_close(f, rc == 0, tmp, out, 0, err, sizeof err);
    if (rc)
        goto done;
    if (crc) {
        fprintf(stderr, "vramtrace export: %s\n", err);
        goto done;
    }
    status = 0;
done:
    vt__event_stream_close(es);
    vt__snapshot_free(s);
    return status;
}
