/*
 * cli/commands.h - the subcommands of the `vramtrace` command.
 * Each takes the arguments after its own name (argv[0] is the subcommand)
 * and returns the process exit status. One file per subcommand.
 */
#ifndef VT_CLI_COMMANDS_H
#define VT_CLI_COMMANDS_H

/* The exit status of every command but `run` (which exits with its
 * command's status): one convention, in each --help and the README. */
enum {
    VT_EXIT_OK = 0,        /* done */
    VT_EXIT_FINDINGS = 1,  /* `check`: something was flagged; `oom`: no OOM to explain */
    VT_EXIT_FAILURE = 2,   /* bad usage, a file that cannot be read or written,
                            * out of memory */
};
#define VT_EXIT_HELP \
    "\nexit status: 0 done, 2 bad usage or a file that cannot be read or written\n"

/* Each command's usage, one copy: its --help prints it after
 * "usage: vramtrace " (a form's continuation lines indented for that), the
 * command list of `vramtrace --help` (main.c) after "  vramtrace ". */
#define VT__USAGE_RUN "run [-o SNAPSHOT] [--track] [--no-cache] [--conf K:V,...] -- CMD [ARGS...]"
#define VT__USAGE_SUMMARY "summary [--all-frames] FILE"
#define VT__USAGE_LEAKS "leaks [--all-frames] [--top N] FILE"
#define VT__USAGE_JSON "json FILE [--events]"
#define VT__USAGE_CHECK "check FILE... [--json] [--grace G] [--ignore PATTERN]...\n"                      \
    "                            [--rules LIST] [--pinned-ratio R] [--min-bytes SIZE]\n" \
    "                            [--top N] [--paths N] [--host]"
#define VT__USAGE_VIZ "viz FILE [-o OUT.html] [--check] [--grace G] [--rules LIST] [--replay CONF]\n" \
    "                          [--quiet]\n"                                             \
    "       vramtrace viz FILE FILE... -o OUT.html [--check] [--grace G] [--rules LIST]\n" \
    "                          [--quiet]"
#define VT__USAGE_IMPORT "import SNAPSHOT.pickle [-o OUT.vtsnap]"
#define VT__USAGE_EXPORT "export --format torch|perfetto SNAPSHOT -o OUT"
#define VT__USAGE_COMPARE "compare SNAPSHOT SNAPSHOT... [--json] [--top N]"
#define VT__USAGE_REPLAY "replay SNAPSHOT [--rules R] [--conf K:V,...] [--capacity SIZE] [--sweep]\n" \
    "                        [--json]"
#define VT__USAGE_OOM "oom SNAPSHOT [--oom N|last] [--json] [--jobs N] [--no-replay]"

int vt__cmd_run(int argc, char **argv);      /* cmd_run.c */
int vt__cmd_summary(int argc, char **argv);  /* cmd_summary.c */
int vt__cmd_leaks(int argc, char **argv);    /* cmd_leaks.c */
int vt__cmd_json(int argc, char **argv);     /* cmd_json.c */
int vt__cmd_check(int argc, char **argv);    /* cmd_check.c */
int vt__cmd_viz(int argc, char **argv);      /* cmd_viz.c */
int vt__cmd_import(int argc, char **argv);   /* cmd_import.c */
int vt__cmd_export(int argc, char **argv);   /* cmd_export.c */
int vt__cmd_compare(int argc, char **argv);  /* cmd_compare.c */
int vt__cmd_replay(int argc, char **argv);   /* cmd_replay.c */
int vt__cmd_oom(int argc, char **argv);      /* cmd_oom.c */

#endif /* VT_CLI_COMMANDS_H */
