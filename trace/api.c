/*
 * trace/api.c - snapshots on demand, at exit, on a signal and on OOM;
 * phase marks; output path patterns.
 *
 * The signal handler does nothing but write one byte to a pipe (async-signal
 * safe); a background thread started at initialization reads it and takes the
 * snapshot, so no allocator state is ever touched from a signal context.
 */
#include "vramtrace.h"
#include "rec_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "config.h"
#include "vramtrace/format.h"

#define DEFAULT_PATTERN "vramtrace-%p-%n.vtsnap"

static _Atomic unsigned snapshot_counter;
static int sig_pipe[2] = { -1, -1 };
static pid_t init_pid;          /* a forked child writes at exit only with %p */

int vt__expand_path(const char *pattern, unsigned n, char *out, size_t len)
{
    size_t o = 0;
    char tmp[256];
    if (!pattern || len == 0)
        return -EINVAL;
    for (const char *p = pattern; *p; p++) {
        const char *piece = tmp;
        tmp[0] = '\0';
        if (*p != '%' || p[1] == '\0') {
            tmp[0] = *p;
            tmp[1] = '\0';
        } else {
            switch (*++p) {
            case 'p':
                snprintf(tmp, sizeof tmp, "%d", (int)getpid());
                break;
            case 'h':
                if (gethostname(tmp, sizeof tmp - 1) != 0)
                    snprintf(tmp, sizeof tmp, "unknown");
                tmp[sizeof tmp - 1] = '\0';
                break;
            case 'r': {
                const char *r = getenv("RANK");
                if (!r || !*r)
                    r = getenv("OMPI_COMM_WORLD_RANK");
                snprintf(tmp, sizeof tmp, "%s", r && *r ? r : "0");
                break;
            }
            case 't': {
                time_t t = time(NULL);
                struct tm tm;
                localtime_r(&t, &tm);
                strftime(tmp, sizeof tmp, "%Y%m%d-%H%M%S", &tm);
                break;
            }
            case 'n':
                snprintf(tmp, sizeof tmp, "%u", n);
                break;
            case '%':
                snprintf(tmp, sizeof tmp, "%%");
                break;
            default:                       /* unknown: kept as written */
                snprintf(tmp, sizeof tmp, "%%%c", *p);
                break;
            }
        }
        size_t l = strlen(piece);
        if (o + l + 1 > len)
            return -ENAMETOOLONG;
        memcpy(out + o, piece, l);
        o += l;
    }
    out[o] = '\0';
    return 0;
}

/* vt_snapshot() of the public header. */
int vt_snapshot(const char *path)
{
    char buf[4096];
    if (!path) {
        const char *pat = getenv("VRAMTRACE_OUT");
        unsigned n = atomic_fetch_add(&snapshot_counter, 1) + 1;
        int rc = vt__expand_path(pat && *pat ? pat : DEFAULT_PATTERN, n, buf, sizeof buf);
        if (rc != 0) {
            fprintf(stderr, "vramtrace: cannot expand the snapshot path '%s': %s\n",
                    pat && *pat ? pat : DEFAULT_PATTERN, strerror(-rc));
            return rc;
        }
        path = buf;
    }
    return vt__snapshot_write_path(path);
}

int vt__snapshot_auto(const char *reason)
{
    char pat[4096], path[4096];
    const char *out = getenv("VRAMTRACE_OUT");
    unsigned n = atomic_fetch_add(&snapshot_counter, 1) + 1;
    if (!out || !*out) {
        snprintf(pat, sizeof pat, "%s", DEFAULT_PATTERN);
    } else if (strstr(out, "%n") || strstr(out, "%t")) {
        snprintf(pat, sizeof pat, "%s", out);
    } else {
        /* The exit snapshot owns VRAMTRACE_OUT itself: tag this one. */
        size_t l = strlen(out);
        const char *ext = ".vtsnap";
        size_t el = strlen(ext);
        if (l > el && strcmp(out + l - el, ext) == 0)
            snprintf(pat, sizeof pat, "%.*s-%s-%%n%s", (int)(l - el), out, reason, ext);
        else
            snprintf(pat, sizeof pat, "%s-%s-%%n", out, reason);
    }
    int rc = vt__expand_path(pat, n, path, sizeof path);
    if (rc != 0)
        fprintf(stderr, "vramtrace: cannot expand the snapshot path '%s': %s\n", pat,
                strerror(-rc));
    else
        rc = vt__snapshot_write_path(path);
    if (rc == 0)
        fprintf(stderr, "vramtrace: %s snapshot written to %s\n", reason, path);
    return rc;
}

int vt_mark(const char *label)
{
    if (!vt__rec_on())
        return 0;
    vt__trace(VT_EV_MARK, -1, 0, 0, 0, 0, 0, 0, 0, vt__string_intern(label));
    return 0;
}

static void exit_snapshot(void)
{
    const char *out = getenv("VRAMTRACE_OUT");
    char path[4096];
    if (!out || !*out)
        return;
    /* A forked worker must not overwrite its parent's snapshot. */
    if (getpid() != init_pid && !strstr(out, "%p"))
        return;
    unsigned n = atomic_fetch_add(&snapshot_counter, 1) + 1;
    if (vt__expand_path(out, n, path, sizeof path) == 0)
        vt__snapshot_write_path(path);
    else
        fprintf(stderr, "vramtrace: VRAMTRACE_OUT '%s' expands to a path too long; no "
                        "snapshot written\n", out);
}

static void on_signal(int sig)
{
    int saved = errno;
    char c = (char)sig;
    if (write(sig_pipe[1], &c, 1) < 0) {
        /* Pipe full: a snapshot is already pending. */
    }
    errno = saved;
}

static void *signal_thread(void *arg)
{
    char c;
    for (;;) {
        ssize_t n = read(sig_pipe[0], &c, 1);
        if (n == 1)
            vt__snapshot_auto("signal");
        else if (n == 0 || errno != EINTR)
            return NULL;
    }
}

/* The thread starts with every signal blocked: the program's handlers
 * keep running on the program's threads. @return 0 or an errno. */
static int spawn_signal_thread(void)
{
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    int rc = pthread_create(&t, &attr, signal_thread, NULL);
    pthread_attr_destroy(&attr);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return rc;
}

/* A forked child (a DataLoader worker) inherits the handler and the pipe but
 * not the thread: its signal would wake the PARENT's thread, which would
 * snapshot the parent, and the child's snapshot would never be written. Give
 * the child a pipe and a thread of its own. The new write end replaces the
 * old one under the same descriptor number (dup3), so a signal arriving
 * meanwhile never writes into a closed or reused descriptor. */
static void signal_after_fork_child(void)
{
    int p[2];
    if (sig_pipe[1] < 0 || pipe2(p, O_CLOEXEC) != 0)
        return;
    fcntl(p[1], F_SETFL, O_NONBLOCK);
    if (dup3(p[1], sig_pipe[1], O_CLOEXEC) < 0) {
        close(p[0]);
        close(p[1]);
        return;
    }
    close(p[1]);
    close(sig_pipe[0]);
    sig_pipe[0] = p[0];
    int rc = spawn_signal_thread();
    if (rc != 0)
        fprintf(stderr, "vramtrace: cannot set up snapshots on signal in process %d (%s)\n",
                (int)getpid(), strerror(rc));
}

static void start_signal_thread(int sig)
{
    if (pipe2(sig_pipe, O_CLOEXEC) != 0)
        goto fail;
    fcntl(sig_pipe[1], F_SETFL, O_NONBLOCK);
    int rc = spawn_signal_thread();
    if (rc != 0) {
        errno = rc;
        goto fail;
    }
    pthread_atfork(NULL, NULL, signal_after_fork_child);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    if (sigaction(sig, &sa, NULL) != 0)
        goto fail;
    return;
fail:
    fprintf(stderr, "vramtrace: cannot set up snapshots on signal %d (%s)\n", sig,
            strerror(errno));
}

void vt__api_init(void)
{
    const vt_config *c = vt__config();
    init_pid = getpid();
    if (c->signal > 0)
        start_signal_thread(c->signal);
    const char *out = getenv("VRAMTRACE_OUT");
    if (out && *out)
        atexit(exit_snapshot);
}
