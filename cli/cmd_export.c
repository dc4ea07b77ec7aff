/*
 * cli/cmd_export.c - `vramtrace export --format torch|perfetto SNAP -o OUT`:
 * a snapshot (a .vtsnap or a PyTorch pickle) in another tool's format.
 * Written to OUT.tmp.<pid> and renamed: never a half-written file.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "commands.h"
#include "export.h"
#include "pytorch.h"
#include "report_util.h"

static const char usage_text[] =
    "usage: vramtrace export --format torch|perfetto SNAPSHOT -o OUT\n"
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

int vt_cmd_export(int argc, char **argv)
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
    vt_snapshot_data *s = NULL;
    vt_timeline *tl = NULL;
    if (vt__report_load("export", in, &s, torch ? NULL : &tl))
        return VT_EXIT_FAILURE;
    size_t n = strlen(out) + 32;
    char *tmp = malloc(n);
    if (!tmp) {
        fprintf(stderr, "vramtrace export: out of memory\n");
        vt_snapshot_free(s);
        vt_timeline_free(tl);
        return VT_EXIT_FAILURE;
    }
    snprintf(tmp, n, "%s.tmp.%ld", out, (long)getpid());
    int status = VT_EXIT_FAILURE;
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        fprintf(stderr, "vramtrace export: cannot create %s: ", tmp);
        perror(NULL);
        goto done;
    }
    char err[512] = "";
    vt_check_report *rep = NULL;
    if (!torch) {
        vt_check_options opt;
        vt_check_options_init(&opt);
        if (vt_check_run(s, &opt, &rep, err, sizeof err) != 0) {
            /* the trace is still worth having: say so, export without */
            fprintf(stderr, "vramtrace export: check: %s (findings left out)\n", err);
            rep = NULL;
            err[0] = 0;
        }
    }
    int rc = torch ? vt_pytorch_export(s, f, err, sizeof err) : vt__export_perfetto(f, s, tl, rep);
    vt_check_report_free(rep);
    if (fclose(f) != 0 && !rc)
        rc = -1;
    if (rc) {
        fprintf(stderr, "vramtrace export: %s: %s\n", out, err[0] ? err : "write error");
        unlink(tmp);
        goto done;
    }
    if (rename(tmp, out) != 0) {
        fprintf(stderr, "vramtrace export: cannot rename %s to %s: ", tmp, out);
        perror(NULL);
        unlink(tmp);
        goto done;
    }
    status = 0;
done:
    free(tmp);
    vt_timeline_free(tl);
    vt_snapshot_free(s);
    return status;
}
