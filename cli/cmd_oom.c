/*
 * cli/cmd_oom.c - `vramtrace oom SNAPSHOT [--json] [--jobs N] [--no-replay]`:
 * why the recorded run ran out of device memory, and which changes would
 * have fit, each checked by replaying the run (oom_explain.h).
 *
 * Exit status (commands.h): 0 explained; 1 the recording holds no OOM
 * (nothing to explain); 2 bad usage or a file that cannot be read.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "oom_explain.h"
#include "report_util.h"

static const char usage_text[] =
    "usage: vramtrace " VT__USAGE_OOM "\n"
    "\n"
    "Explain an out-of-memory of a recording (a .vtsnap, or a PyTorch snapshot\n"
    "pickle with an 'oom' entry), in a screenful: of several, the one the program\n"
    "ended with (the earlier ones were caught: a batch-size search, a retry),\n"
    "else the first; --oom N picks another:\n"
    "  - what was asked (size, device, stream, the line of the program);\n"
    "  - what the device had: reserved, allocated, pending, free in the cache by\n"
    "    pool and stream, the largest free piece, and the bytes free in pieces\n"
    "    smaller than the request (fragmentation); memory outside the cache\n"
    "    (libraries' own allocations, memory the cache did not serve, other\n"
    "    processes);\n"
    "  - what was alive, by the line that made it, largest first, with what\n"
    "    `vramtrace check` flags as alive after its last use and what holds it;\n"
    "  - what would have fit: the recording replayed to its end (vramtrace\n"
    "    replay) under expandable_segments, max_split_size_mb, \n"
    "    garbage_collection_threshold, roundup_power2_divisions, the flagged\n"
    "    storages freed at their last use, a gc.collect() before the retry, and a\n"
    "    bigger device. Only what the replay verified is offered as a fix: a\n"
    "    candidate that ran to the end while the recorded settings ran out of\n"
    "    memory in the same replay.\n"
    "  - an OOM after one the program caught: what the call that ran out then\n"
    "    still holds (a retry inside the except clause), and the retry after it\n"
    "    replayed as a fix;\n"
    "  --oom N       explain the N-th OOM of the recording (1 the first; last)\n"
    "  --json        the same as one JSON document (docs/json-schema.md)\n"
    "  --jobs N      replays run at once (default: the CPUs)\n"
    "  --no-replay   explain without replaying (no fixes)\n"
    "\n"
    "exit status: 0 explained, 1 the recording holds no out-of-memory, 2 bad usage\n"
    "or a file that cannot be read\n";

int vt__cmd_oom(int argc, char **argv)
{
    const char *path = NULL;
    int json = 0;
    vt__oom_options opt = { 0 };
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(usage_text, stdout);
            return VT_EXIT_OK;
        } else if (!strcmp(a, "--json")) {
            json = 1;
        } else if (!strcmp(a, "--no-replay")) {
            opt.no_replay = true;
        } else if (!strcmp(a, "--oom")) {
            char *end = NULL;
            const char *v = i + 1 < argc ? argv[i + 1] : "";
            long n = strcmp(v, "last") ? strtol(v, &end, 10) : 0;
            if (strcmp(v, "last") && (!*v || *end || n < 1)) {
                fprintf(stderr, "vramtrace oom: --oom needs a number from 1 (the first OOM), or"
                                " 'last'\n");
                return VT_EXIT_FAILURE;
            }
            opt.which = strcmp(v, "last") ? (size_t)n : VT__OOM_LAST;
            i++;
        } else if (!strcmp(a, "--jobs")) {
            char *end = NULL;
            long v = i + 1 < argc ? strtol(argv[i + 1], &end, 10) : 0;
            if (i + 1 >= argc || *end || v < 1 || v > 1024) {
                fprintf(stderr, "vramtrace oom: --jobs needs a number from 1 to 1024\n");
                return VT_EXIT_FAILURE;
            }
            opt.jobs = (unsigned)v;
            i++;
        } else if (!vt__cli_operand("oom", "SNAPSHOT", a, &path)) {
            return VT_EXIT_FAILURE;
        }
    }
    if (!path) {
        fprintf(stderr, "vramtrace oom: missing SNAPSHOT (try vramtrace oom --help)\n");
        return VT_EXIT_FAILURE;
    }
    vt__snapshot_data *s = NULL;
    vt__timeline *tl = NULL;
    int rc = vt__report_load("oom", path, &s, &tl);
    if (rc)
        return rc;
    if (!json && vt__report_text_names(s) != 0) {
        fprintf(stderr, "vramtrace oom: out of memory\n");
        rc = VT_EXIT_FAILURE;
        goto out;
    }
    vt__oom_report *r = NULL;
    char err[512] = "";
    int st = vt__oom_explain(s, tl, &opt, &r, err, sizeof err);
    if (st == -ENOENT) {
        fprintf(stderr, "vramtrace oom: %s: %s\n", path, err);
        rc = VT_EXIT_FINDINGS;
        goto out;
    }
    if (st) {
        fprintf(stderr, "vramtrace oom: %s: %s\n", path, err);
        rc = VT_EXIT_FAILURE;
        goto out;
    }
    if (json) {
        vt__oom_write_json(stdout, path, s, r);
        fputc('\n', stdout);
    } else {
        vt__oom_print(stdout, path, s, r, false);
    }
    vt__oom_free(r);
    rc = VT_EXIT_OK;
out:
    vt__timeline_free(tl);
    vt__snapshot_free(s);
    return rc;
}
