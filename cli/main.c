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
    { "run", vt__cmd_run, VT__USAGE_RUN,
      "run a program and record its device memory (PyTorch's blocks observed)" },
    { "summary", vt__cmd_summary, VT__USAGE_SUMMARY,
      "peak and current memory, counts, fragmentation, top call sites" },
    { "leaks", vt__cmd_leaks, VT__USAGE_LEAKS,
      "allocations alive at the snapshot, grouped by stack" },
    { "json", vt__cmd_json, VT__USAGE_JSON, "the whole snapshot as JSON" },
    { "check", vt__cmd_check, VT__USAGE_CHECK,
      "storages alive after their last use, and what holds them" },
    { "viz", vt__cmd_viz, VT__USAGE_VIZ,
      "render the snapshot as one self-contained HTML timeline" },
    { "import", vt__cmd_import, VT__USAGE_IMPORT,
      "convert a PyTorch memory snapshot (pickle) into a .vtsnap" },
    { "export", vt__cmd_export, VT__USAGE_EXPORT,
      "write a snapshot as a PyTorch pickle or a Perfetto (Trace Event) JSON" },
    { "compare", vt__cmd_compare, VT__USAGE_COMPARE,
      "one snapshot per rank side by side: peaks, spread, differing call sites" },
    { "replay", vt__cmd_replay, VT__USAGE_REPLAY,
      "replay the recorded allocations under other settings or another capacity" },
    { "oom", vt__cmd_oom, VT__USAGE_OOM,
      "why it ran out of memory, and which settings would have fit (checked by replay)" },
};
#define NCOMMANDS (sizeof commands / sizeof commands[0])

/* A command's usage after "  vramtrace ": its lines are indented for
 * "usage: vramtrace " (commands.h), five columns further. */
static void print_usage(FILE *out, const char *usage)
{
    static const size_t shift = sizeof "usage: vramtrace " - sizeof "  vramtrace ";
    fputs("  vramtrace ", out);
    for (const char *line = usage; *line;) {
        const char *end = strchr(line, '\n');
        size_t len = end ? (size_t)(end - line) : strlen(line);
        if (line != usage)
            for (size_t skip = 0; skip < shift && len > 0 && *line == ' '; skip++, len--)
                line++;
        fprintf(out, "%.*s\n", (int)len, line);
        line += len + (end ? 1 : 0);
    }
}

static void usage(FILE *out)
{
    fprintf(out, "usage: vramtrace COMMAND [ARGS...]\n\ncommands:\n");
    for (size_t i = 0; i < NCOMMANDS; i++)
        fprintf(out, "  %-9s %s\n", commands[i].name, commands[i].what);
    fprintf(out, "\nusage of each:\n");
    for (size_t i = 0; i < NCOMMANDS; i++)
        print_usage(out, commands[i].usage);
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
