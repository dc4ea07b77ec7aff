/*
 * alloc/replay/replay_sweep.c - several settings replayed side by side.
 *
 * The allocator is one per process and reads some settings once, so each
 * setting runs in a child process of its own (forked after the snapshot was
 * read: the events are shared, copy on write; or each child reads them as
 * a stream of its own: the parent's stream, forked, or the file opened
 * again), which writes its result into a pipe; up to `jobs` children run
 * at once.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "pytorch.h"
#include "replay_internal.h"

typedef struct child_msg {
    int status;
    char err[256];
    vt__replay_result result;   /* curve never kept: no pointer crosses */
} child_msg;

/* All n bytes through a pipe (written when `out`, else read), across
 * short transfers and signals. @return 0, or -1 (an error or the other end
 * gone). */
static int transfer_all(int fd, char *p, size_t n, bool out)
{
    while (n) {
        ssize_t k = out ? write(fd, p, n) : read(fd, p, n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return -1;
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

/* Where a sweep's children find the events: s's, a stream each child reads
 * on its own (es: the parent's, forked; its reads do not move a shared
 * offset), or the file at path, which each child opens. */
typedef struct source {
    const vt__snapshot_data *s;
    vt__event_stream *es;
    char *stream_err;          /* where es writes its errors */
    const char *path;
} source;

/* One setting, from src. */
static void run_child(const source *src, const vt__replay_options *o, int fd)
{
    const vt__snapshot_data *s = src->s;
    const char *path = src->path;
    child_msg *m = calloc(1, sizeof *m);
    if (!m)
        _exit(1);
    vt__replay_options opt = *o;
    opt.curve = false;
    if (path) {
        char serr[256];
        vt__snapshot_data *h;
        vt__event_stream *es;
        serr[0] = 0;
        if ((m->status = vt__snapshot_open(path, &h, &es, serr, sizeof serr)) == 0) {
            m->status = vt__replay_run_stream(h, es, &opt, &m->result, m->err, sizeof m->err);
            vt__event_stream_close(es);
            vt__snapshot_free(h);
        }
        if (serr[0])   /* the file's own trouble, as its reader says it */
            snprintf(m->err, sizeof m->err, "%s", serr);
    } else if (src->es) {
        src->stream_err[0] = 0;
        m->status = vt__replay_run_stream(s, src->es, &opt, &m->result, m->err, sizeof m->err);
        if (src->stream_err[0])   /* the file's own trouble, as its reader says it */
            snprintf(m->err, sizeof m->err, "%s", src->stream_err);
    } else {
        m->status = vt__replay_run(s, &opt, &m->result, m->err, sizeof m->err);
    }
    vt__replay_result_free(&m->result);
    int rc = transfer_all(fd, (char *)m, sizeof *m, true);
    free(m);   /* _exit would return it too; a leak checker following the child counts it */
    _exit(rc ? 1 : 0);
}

typedef struct running { pid_t pid; int fd; size_t index; } running;

static void collect(running *c, vt__replay_result *out, int *status, char (*errs)[256])
{
    child_msg *m = calloc(1, sizeof *m);
    int ok = m && transfer_all(c->fd, (char *)m, sizeof *m, false) == 0;
    close(c->fd);
    int ws = 0;
    while (waitpid(c->pid, &ws, 0) < 0 && errno == EINTR)
        ;
    if (ok) {
        out[c->index] = m->result;
        status[c->index] = m->status;
        if (errs)
            snprintf(errs[c->index], 256, "%s", m->err);
    } else {
        memset(&out[c->index], 0, sizeof out[c->index]);
        status[c->index] = -ECHILD;
        if (errs)
            snprintf(errs[c->index], 256, "the replay process failed (%s)",
                     WIFSIGNALED(ws) ? strsignal(WTERMSIG(ws)) : "no result");
    }
    free(m);
}

/* The options of confs[i] over base's. @return them, or NULL. */
static vt__replay_options *conf_options(const char *const *confs, size_t n,
                                        const vt__replay_options *base)
{
    vt__replay_options *opts = calloc(n ? n : 1, sizeof *opts);
    for (size_t i = 0; opts && i < n; i++)
        opts[i] = (vt__replay_options){ .conf = confs[i], .capacity = base->capacity,
                                       .rules = base->rules,
                                       .ignore_recorded_conf = base->ignore_recorded_conf };
    return opts;
}

static int sweep(const source *src, const vt__replay_options *opts, size_t n, unsigned jobs,
                 vt__replay_result *out, int *status, char (*errs)[256]);

/* The sweep of confs, each over base's options, its children reading src:
 * what the three vt__replay_sweep_confs* do once they know their source. */
static int sweep_confs(const source *src, const char *const *confs, size_t n,
                       const vt__replay_options *base, unsigned jobs, vt__replay_result *out,
                       int *status, char (*errs)[256])
{
    if ((!confs && n) || !base)
        return -EINVAL;
    vt__replay_options *opts = conf_options(confs, n, base);
    if (!opts)
        return -ENOMEM;
    int rc = sweep(src, opts, n, jobs, out, status, errs);
    free(opts);
    return rc;
}

int vt__replay_sweep_confs(const vt__snapshot_data *s, const char *const *confs, size_t n,
                           const vt__replay_options *base, unsigned jobs, vt__replay_result *out,
                           int *status, char (*errs)[256])
{
    if (!s)
        return -EINVAL;
    return sweep_confs(&(source){ .s = s }, confs, n, base, jobs, out, status, errs);
}

int vt__replay_sweep_confs_stream(const vt__snapshot_data *s, vt__event_stream *es,
                                  char *stream_err, const char *const *confs, size_t n,
                                  const vt__replay_options *base, unsigned jobs,
                                  vt__replay_result *out, int *status, char (*errs)[256])
{
    if (!s || !es || !stream_err)
        return -EINVAL;
    return sweep_confs(&(source){ .s = s, .es = es, .stream_err = stream_err }, confs, n, base,
                       jobs, out, status, errs);
}

int vt__replay_sweep_confs_file(const char *path, const char *const *confs, size_t n,
                                const vt__replay_options *base, unsigned jobs,
                                vt__replay_result *out, int *status, char (*errs)[256])
{
    if (!path)
        return -EINVAL;
    return sweep_confs(&(source){ .path = path }, confs, n, base, jobs, out, status, errs);
}

int vt__replay_sweep(const vt__snapshot_data *s, const vt__replay_options *opts, size_t n,
                     unsigned jobs, vt__replay_result *out, int *status,
                     char (*errs)[256])
{
    if (!s || (!opts && n))
        return -EINVAL;
    return sweep(&(source){ .s = s }, opts, n, jobs, out, status, errs);
}

/* What was held when the window opened, read once here for every child
 * (they inherit it), from s's events or the stream; a file's each child
 * reads (nothing of it is held here). Left NULL where it cannot be read:
 * each child then reads it, and says what failed. */
static const vt__seeds *read_seeds(const source *src, vt__seeds *sd)
{
    if (src->path)
        return NULL;
    vt__event_stream *es = src->es;
    if (!es && vt__event_stream_of(src->s, &es))
        return NULL;
    char err[256];
    int rc = vt__replay_seeds(src->s, es, sd, err, sizeof err);
    if (es != src->es)
        vt__event_stream_close(es);
    return rc ? NULL : sd;
}

static int sweep(const source *src, const vt__replay_options *given, size_t n, unsigned jobs,
                 vt__replay_result *out, int *status, char (*errs)[256])
{
    if (jobs < 1)
        jobs = 1;
    running *run = calloc(jobs, sizeof *run);
    vt__replay_options *opts = malloc((n ? n : 1) * sizeof *opts);
    if (!run || !opts) {
        free(run);
        free(opts);
        return -ENOMEM;
    }
    vt__seeds sd = { 0 };
    const vt__seeds *seeds = read_seeds(src, &sd);
    for (size_t i = 0; i < n; i++) {
        opts[i] = given[i];
        if (!opts[i].seeds)
            opts[i].seeds = seeds;
    }
    size_t nrun = 0, next = 0;
    fflush(NULL);   /* a child must not flush the parent's buffers again */
    while (next < n || nrun) {
        if (next < n && nrun < jobs) {
            int fds[2];
            if (pipe(fds)) {
                status[next] = -errno;
                memset(&out[next], 0, sizeof out[next]);
                next++;
                continue;
            }
            pid_t pid = fork();
            if (pid == 0) {
                close(fds[0]);
                run_child(src, &opts[next], fds[1]);
            }
            close(fds[1]);
            if (pid < 0) {
                close(fds[0]);
                status[next] = -errno;
                memset(&out[next], 0, sizeof out[next]);
                next++;
                continue;
            }
            run[nrun++] = (running){ pid, fds[0], next++ };
            continue;
        }
        /* results come in order of start: wait for the oldest */
        collect(&run[0], out, status, errs);
        memmove(&run[0], &run[1], (nrun - 1) * sizeof *run);
        nrun--;
    }
    free(run);
    free(opts);
    vt__seeds_free(&sd);
    return 0;
}
