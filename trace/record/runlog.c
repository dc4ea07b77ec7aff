/*
 * trace/record/runlog.c - the snapshots of one `vramtrace run`, registered by the
 * processes that wrote them.
 *
 * `vramtrace run` makes a private directory and passes it down as
 * VRAMTRACE_RUN_DIR; every process of the run (launchers, ranks, workers,
 * whatever they exec) inherits it. Each snapshot a process writes or fails to
 * write adds one line to DIR/snapshots, in one O_APPEND write (lines of
 * concurrent processes never interleave):
 *
 *   KIND \t PID \t ok|failed \t PATH \t PLAIN \n
 *
 * KIND is exit, signal, oom, exec or snapshot (vt_snapshot); PLAIN is, for an
 * exit snapshot, the name it would have without its pid (run renames the
 * file to it when it is the run's only exit snapshot), else empty. Tabs and
 * newlines in paths are written as '?'. Nothing here ever fails the caller.
 */
#include "rec_internal.h"

#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *run_dir(void)
{
    const char *d = getenv("VRAMTRACE_RUN_DIR");
    return d && *d ? d : NULL;
}

bool vt__runlog_active(void)
{
    return run_dir() != NULL;
}

/* Append `s` to the line, tabs and newlines made harmless. */
static size_t put(char *line, size_t o, size_t cap, const char *s)
{
    for (; s && *s && o + 1 < cap; s++)
        line[o++] = (*s == '\t' || *s == '\n') ? '?' : *s;
    return o;
}

void vt__runlog_add(const char *kind, const char *path, const char *plain, int rc)
{
    const char *dir = run_dir();
    if (!dir)
        return;
    char file[PATH_MAX], line[3 * PATH_MAX], num[32];
    if ((size_t)snprintf(file, sizeof file, "%s/snapshots", dir) >= sizeof file)
        return;
    char abs[PATH_MAX] = "";
    if (path && path[0] != '/' && getcwd(abs, sizeof abs))
        strncat(abs, "/", sizeof abs - strlen(abs) - 1);
    size_t o = put(line, 0, sizeof line, kind);
    snprintf(num, sizeof num, "\t%d\t%s\t", (int)getpid(), rc == 0 ? "ok" : "failed");
    size_t nl = strlen(num);
    memcpy(line + o, num, nl);   /* kind is a short word: room is certain */
    o += nl;
    o = put(line, o, sizeof line, abs);
    o = put(line, o, sizeof line, path);
    line[o++] = '\t';           /* put() stops one short of the end */
    if (plain && *plain) {
        if (plain[0] != '/')
            o = put(line, o, sizeof line, abs);
        o = put(line, o, sizeof line, plain);
    }
    if (o >= sizeof line - 1)
        return;                  /* cannot happen with PATH_MAX paths */
    line[o++] = '\n';
    int fd = open(file, O_WRONLY | O_APPEND | O_CLOEXEC);
    if (fd < 0)
        return;                  /* the run is over, or not ours */
    if (write(fd, line, o) < 0) {
        /* best effort: run reports a snapshot it was not told of as missing */
    }
    close(fd);
}
