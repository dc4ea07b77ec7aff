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
 *   KIND \t PID \t ok|failed \t PATH \t PLAIN \t RANK \t device|host \n
 *
 * KIND is exit, signal, oom, exec or snapshot (vt_snapshot); PLAIN is, for an
 * exit snapshot, the name it would have without its pid (run renames the
 * file to it when it is the run's only exit snapshot), else empty; RANK is
 * the rank from the launcher's environment, else empty; the last field says
 * whether the process used a device (set up an allocator of ours, observed a
 * framework's or hit an OOM: vt__activity_noted) or recorded host events
 * alone (a DataLoader worker's CPU tensors under `run --track`): where several
 * exit snapshots would share a name, run gives it to the only one that used a
 * device. Tabs and
 * newlines in paths are written as '?'.
 *
 * The processes of the run that take snapshots on the configured signal
 * register in DIR/signal, one O_APPEND line each ("PID START\n", START the
 * process's start time in clock ticks since boot, field 22 of /proc/PID/stat).
 * When one of them receives the signal from outside the run, it passes the
 * signal on to the others (snap_signal.c), so one `kill` dumps every rank.
 * A pid alone could name a stranger by the time the signal is passed on (the
 * registered process ended and its pid was reused): pid and start time
 * together name one process for as long as the machine is up, so a line is
 * believed only while the pid's start time is still the one registered, and
 * the signal goes only to a process that still catches it (SigCgt in
 * /proc/PID/status), never to one that would die of it (an exec into a
 * program without vramtrace). An exec keeps pid and start time: the new
 * program registers again, duplicates are signalled once.
 *
 * Nothing here ever fails the caller.
 */
#include "rec_internal.h"

#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "grow.h"

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
    if (o < sizeof line - 1)
        line[o++] = '\t';
    o = put(line, o, sizeof line, vt__rank_env());
    if (o < sizeof line - 1)
        line[o++] = '\t';
    o = put(line, o, sizeof line, vt__activity_noted() ? "device" : "host");
    /* the events recorded so far and the ring's room: run says when the
     * snapshot lost the run's start */
    char ring[48];
    snprintf(ring, sizeof ring, "\t%llu\t%llu", (unsigned long long)vt__ring_head(),
             (unsigned long long)vt__ring_capacity());
    for (const char *c = ring; *c && o < sizeof line - 1; c++)   /* its tabs are fields' */
        line[o++] = *c;
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

/* ---- the processes that take snapshots on the signal -------------------- */

/* The whole of a small /proc file (at most len - 1 bytes, NUL-terminated).
 * @return its length, -1 if it cannot be read. */
static ssize_t read_small(const char *path, char *buf, size_t len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    size_t o = 0;
    ssize_t n;
    while (o + 1 < len && (n = read(fd, buf + o, len - 1 - o)) > 0)
        o += (size_t)n;
    close(fd);
    buf[o] = '\0';
    return (ssize_t)o;
}

static void proc_path(char *out, size_t len, pid_t pid, const char *what)
{
    snprintf(out, len, "/proc/%d/%s", (int)pid, what);
}

/* The start time of `pid` (clock ticks since boot), 0 if it is gone. */
static unsigned long long start_time(pid_t pid)
{
    char path[64], buf[1024];
    proc_path(path, sizeof path, pid, "stat");
    if (read_small(path, buf, sizeof buf) <= 0)
        return 0;
    /* The command name (field 2) may hold spaces and parentheses: count the
     * fields after its last ')'. Field 22 is the start time. */
    const char *p = strrchr(buf, ')');
    if (!p)
        return 0;
    for (int field = 2; field < 22; p++) {
        if (!*p)
            return 0;
        if (*p == ' ')
            field++;
    }
    unsigned long long v = 0;
    for (; *p >= '0' && *p <= '9'; p++)
        v = v * 10 + (unsigned)(*p - '0');
    return v;
}

int vt__runlog_register_signal(void)
{
    const char *dir = run_dir();
    if (!dir)
        return -1;
    unsigned long long start = start_time(getpid());
    if (!start)
        return -1;
    char file[PATH_MAX], line[64];
    if ((size_t)snprintf(file, sizeof file, "%s/signal", dir) >= sizeof file)
        return -1;
    size_t o = (size_t)snprintf(line, sizeof line, "%d %llu\n", (int)getpid(), start);
    int fd = open(file, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0)
        return -1;                /* the run is over, or not ours */
    ssize_t n = write(fd, line, o);
    close(fd);
    return n == (ssize_t)o ? 0 : -1;
}

/* The registered processes, as read from DIR/signal: pid and start time. */
struct registered { pid_t pid; unsigned long long start; };

static int by_pid(const void *a, const void *b)
{
    pid_t x = ((const struct registered *)a)->pid, y = ((const struct registered *)b)->pid;
    return (x > y) - (x < y);
}

/* @return the count, *out (to free) sorted by pid: a pid has several lines
 * after an exec (the same process registered again) or a reuse (another
 * process, which a start time tells apart); 0 if none. */
static size_t read_registered(struct registered **out)
{
    *out = NULL;
    const char *dir = run_dir();
    char file[PATH_MAX];
    if (!dir || (size_t)snprintf(file, sizeof file, "%s/signal", dir) >= sizeof file)
        return 0;
    FILE *f = fopen(file, "re");
    if (!f)
        return 0;
    struct registered *v = NULL;
    size_t n = 0, cap = 0;
    long pid;
    unsigned long long start;
    while (fscanf(f, "%ld %llu", &pid, &start) == 2) {
        if (pid <= 0 || pid > INT_MAX)
            continue;
        if (vt__grow_from((void **)&v, &cap, n + 1, sizeof *v, 32))
            break;
        v[n++] = (struct registered){ (pid_t)pid, start };
    }
    fclose(f);
    if (n == 0) {
        free(v);
        return 0;
    }
    qsort(v, n, sizeof *v, by_pid);
    *out = v;
    return n;
}

static bool registered_alive(const struct registered *v, size_t n, pid_t pid)
{
    unsigned long long now = 0;
    for (size_t i = 0; i < n; i++) {
        if (v[i].pid != pid)
            continue;
        if (!now && !(now = start_time(pid)))
            return false;
        if (v[i].start == now)
            return true;
    }
    return false;
}

/* /proc/PID/environ holds "VRAMTRACE_RUN_DIR=<ours>": the process was started
 * inside this run (a shell or a tool of the program, registered or not). */
static bool environ_in_run(pid_t pid, const char *dir)
{
    char path[64];
    proc_path(path, sizeof path, pid, "environ");
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;                 /* gone, or another user's: a stranger */
    size_t cap = 1 << 16, o = 1;
    char *buf = malloc(cap + 1);
    ssize_t r;
    if (buf) {
        buf[0] = '\0';                /* every entry is preceded by a NUL */
        while ((r = read(fd, buf + o, cap - o)) > 0) {
            o += (size_t)r;
            if (o == cap) {
                if (cap >= (1u << 24))
                    break;
                char *p = realloc(buf, 2 * cap + 1);
                if (!p)
                    break;
                buf = p;
                cap *= 2;
            }
        }
    }
    close(fd);
    if (!buf)
        return false;
    buf[o] = '\0';
    char want[PATH_MAX + 32];
    int wl = snprintf(want, sizeof want, "%cVRAMTRACE_RUN_DIR=%s", '\0', dir);
    bool found = false;
    if (wl > 0 && (size_t)wl < sizeof want)
        found = memmem(buf, o + 1, want, (size_t)wl + 1) != NULL;   /* NUL before and after */
    free(buf);
    return found;
}

bool vt__runlog_fellow(pid_t pid)
{
    const char *dir = run_dir();
    if (!dir || pid <= 0)
        return false;
    if (pid == getpid())
        return true;
    struct registered *v;
    size_t n = read_registered(&v);
    bool yes = registered_alive(v, n, pid);
    free(v);
    return yes || environ_in_run(pid, dir);
}

/* `pid` has a handler for `sig` now (bit sig-1 of SigCgt). */
static bool catches(pid_t pid, int sig)
{
    char path[64], buf[4096];
    proc_path(path, sizeof path, pid, "status");
    if (read_small(path, buf, sizeof buf) <= 0)
        return false;
    const char *p = strstr(buf, "\nSigCgt:");
    if (!p)
        return false;
    unsigned long long mask = strtoull(p + 8, NULL, 16);
    return sig >= 1 && sig <= 64 && (mask >> (sig - 1) & 1);
}

int vt__runlog_fan_out(int sig)
{
    struct registered *v;
    size_t n = read_registered(&v);
    int sent = 0;
    pid_t self = getpid();
    for (size_t i = 0; i < n; i++) {
        pid_t pid = v[i].pid;
        if (pid == self || (i > 0 && v[i - 1].pid == pid))
            continue;
        if (registered_alive(v + i, n - i, pid) && catches(pid, sig) && kill(pid, sig) == 0)
            sent++;
    }
    free(v);
    return sent;
}
