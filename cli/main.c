/* cli/main.c - `vramtrace`: dispatch to the subcommands. */
#include <stdio.h>
#include <string.h>

#include "commands.h"
#include "vramtrace.h"

struct command {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *usage;
    const char *what;
};

static const struct command commands[] = {
    { "run", vt__cmd_run, "run [-o SNAPSHOT] [--no-cache] [--conf K:V,...] -- CMD [ARGS...]",
      "run a program with the vramtrace allocator preloaded" },
    { "summary", vt__cmd_summary, "summary FILE",
      "peak and current memory, counts, fragmentation, top call sites" },
    { "leaks", vt__cmd_leaks, "leaks FILE",
      "allocations alive at the snapshot, grouped by stack" },
    { "json", vt__cmd_json, "json FILE [--events]", "the whole snapshot as JSON" },
    { "check", vt__cmd_check, "check FILE [--json] [--grace G] [--ignore PATTERN]... [--rules LIST]\n"
      "                  [--pinned-ratio R] [--top N] [--paths N]",
      "storages alive after their last use, and what holds them" },
    { "viz", vt__cmd_viz, "viz FILE [-o OUT.html] [--check] [--grace G] [--replay CONF] [-q]",
      "render the snapshot as one self-contained HTML timeline" },
    { "import", vt__cmd_import, "import SNAPSHOT.pickle [-o OUT.vtsnap]",
      "convert a PyTorch memory snapshot (pickle) into a .vtsnap" },
    { "export", vt__cmd_export, "export --format torch|perfetto SNAPSHOT -o OUT",
      "write a snapshot as a PyTorch pickle or a Perfetto (Trace Event) JSON" },
    { "compare", vt__cmd_compare, "compare SNAPSHOT SNAPSHOT... [--json] [--top N]",
      "one snapshot per rank side by side: peaks, spread, differing call sites" },
    { "replay", vt__cmd_replay, "replay FILE [--conf K:V,...] [--capacity SIZE] [--sweep] [--json]",
      "replay the recorded allocations under other settings or another capacity" },
    { "oom", vt__cmd_oom, "oom SNAPSHOT [--json] [--jobs N] [--no-replay]",
      "why it ran out of memory, and which settings would have fit (checked by replay)" },
};
#define NCOMMANDS (sizeof commands / sizeof commands[0])

static void usage(FILE *out)
{
    fprintf(out, "usage: vramtrace COMMAND [ARGS...]\n\ncommands:\n");
    for (size_t i = 0; i < NCOMMANDS; i++)
        fprintf(out, "  %-9s %s\n", commands[i].name, commands[i].what);
    fprintf(out, "\nusage of each:\n");
    for (size_t i = 0; i < NCOMMANDS; i++)
        fprintf(out, "  vramtrace %s\n", commands[i].usage);
    fprintf(out, "\nexit status: 0 done; 1 `check` flagged something, `oom` found no OOM; 2 bad\n"
                 "usage or a file that cannot be read or written; `run` exits with its\n"
                 "command's status.\n");
    fprintf(out, "\n`vramtrace COMMAND --help` explains a command's options.\n"
                 "vramtrace %s\n", VRAMTRACE_VERSION_STRING);
}

/* Output lost to a full disk or a closed pipe is a failure of the command,
 * whichever command printed it: stdout is flushed and checked once, here. */
static int finish(const char *cmd, int status)
{
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, "vramtrace %s: cannot write output\n", cmd);
        return VT_EXIT_FAILURE;
    }
    return status;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return VT_EXIT_FAILURE;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("vramtrace %s\n", VRAMTRACE_VERSION_STRING);
        return 0;
    }
    for (size_t i = 0; i < NCOMMANDS; i++)
        if (!strcmp(argv[1], commands[i].name))
            return finish(commands[i].name, commands[i].fn(argc - 1, argv + 1));
    fprintf(stderr, "vramtrace: unknown command '%s' (try vramtrace --help)\n", argv[1]);
    return VT_EXIT_FAILURE;
}
