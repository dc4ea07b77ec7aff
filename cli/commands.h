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
