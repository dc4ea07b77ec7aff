/*
 * cli/cmd_import.c - `vramtrace import SNAP.pickle -o OUT.vtsnap`: a PyTorch
 * memory snapshot into a vramtrace snapshot file. The reading commands take
 * the pickle directly too; importing once saves re-parsing a big pickle.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "pytorch.h"
#include "report_util.h"
#include "snapfile.h"

static const char usage_text[] =
    "usage: vramtrace " VT__USAGE_IMPORT "\n"
    "\n"
    "Convert a PyTorch memory snapshot (the pickle torch.cuda.memory._dump_snapshot\n"
    "writes, any protocol 2 to 5) into a vramtrace snapshot. Default output: the\n"
    "input's name with .vtsnap instead of .pickle. The pickle is read by a safe\n"
    "reader of plain data: a pickle that names a global or calls a constructor is\n"
    "refused, never run. summary, leaks, check, viz and json also read the pickle\n"
    "directly.\n"
    VT_EXIT_HELP;

static char *default_output(const char *in)
{
    size_t n = strlen(in);
    const char *dot = strrchr(in, '.');
    const char *slash = strrchr(in, '/');
    if (dot && (!slash || dot > slash) && (!strcmp(dot, ".pickle") || !strcmp(dot, ".pkl")))
        n = (size_t)(dot - in);
    char *out = malloc(n + 8);
    if (out) {
        memcpy(out, in, n);
        strcpy(out + n, ".vtsnap");
    }
    return out;
}

int vt__cmd_import(int argc, char **argv)
{
    const char *in = NULL, *out = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            fputs(usage_text, stdout);
            return 0;
        } else if (!strcmp(argv[i], "-o")) {
            if (++i >= argc) {
                fprintf(stderr, "vramtrace import: -o needs a file name\n");
                return VT_EXIT_FAILURE;
            }
            out = argv[i];
        } else if (argv[i][0] == '-' && argv[i][1]) {
            vt__cli_unknown_option("import", argv[i]);
            return VT_EXIT_FAILURE;
        } else if (in) {
            fprintf(stderr, "vramtrace import: one SNAPSHOT only ('%s' and '%s')\n", in, argv[i]);
            return VT_EXIT_FAILURE;
        } else {
            in = argv[i];
        }
    }
    if (!in) {
        fputs(usage_text, stderr);
        return VT_EXIT_FAILURE;
    }
    size_t len = strlen(in);
    if (!out && len >= 7 && !strcmp(in + len - 7, ".vtsnap")) {
        /* its default name would be IN.vtsnap.vtsnap: nobody means that */
        fprintf(stderr, "vramtrace import: %s is a vramtrace snapshot already; import reads "
                        "PyTorch's snapshot pickles (-o OUT writes a copy)\n", in);
        return VT_EXIT_FAILURE;
    }
    char *def = out ? NULL : default_output(in);
    if (!out && !def) {
        fprintf(stderr, "vramtrace import: out of memory\n");
        return VT_EXIT_FAILURE;
    }
    if (!out)
        out = def;
    char err[1024];
    vt__snapshot_data *s = NULL;
    int rc = vt__snapshot_load(in, &s, err, sizeof err);
    if (rc) {
        fprintf(stderr, "vramtrace import: %s\n", err);
        free(def);
        return VT_EXIT_FAILURE;
    }
    rc = vt__snapfile_write(s, out, err, sizeof err);
    if (rc)
        fprintf(stderr, "vramtrace import: %s: %s\n", out, err);
    else
        printf("%s: %zu segments, %zu blocks, %zu events, %zu stacks -> %s\n", in, s->nsegments,
               s->nblocks, s->nevents, s->nstack_nodes ? s->nstack_nodes - 1 : 0, out);
    vt__snapshot_free(s);
    free(def);
    return rc ? VT_EXIT_FAILURE : VT_EXIT_OK;
}
