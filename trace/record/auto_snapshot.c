/*
 * trace/record/auto_snapshot.c - snapshots on demand, at exit, before exec and on OOM; phase
 * marks; output names.
 *
 * Names. Every automatic snapshot of a run must get a name of its own, even
 * when the pattern in VRAMTRACE_OUT is a plain file name and a launcher, its
 * ranks and their forked workers all inherit it:
 *  - a rank taken from the launcher's environment (vt__rank_env) is added as
 *    "-rank<N>" when the pattern has no %r, so ranks never share a file;
 *  - signal, OOM, exec and vt_snapshot(NULL) snapshots carry the pid (unless
 *    the pattern has %p) and "-<reason>-<n>" (unless it has %n), and never
 *    replace an existing file: a taken name moves on to the next n (after an
 *    exec the pid stays and the counter starts again);
 *  - the exit snapshot is written only by a process that recorded something
 *    (vt__process_recorded): a wrapper (`timeout`, `bash -c`, a launcher)
 *    never writes an empty snapshot over the program's. It goes to the plain
 *    name in the process that loaded vramtrace first; a forked child that
 *    recorded adds its pid. Under `vramtrace run` (VRAMTRACE_RUN_DIR set)
 *    every exit snapshot carries the pid and is registered (runlog.c); `run`
 *    renames it to its plain name when no other exit snapshot has that name.
 */
#include "vramtrace.h"
#include "rec_internal.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "config.h"
#include "outfile.h"
#include "vramtrace/format.h"

#define DEFAULT_PATTERN "vramtrace-%p-%n.vtsnap"
#define EXT ".vtsnap"

static _Atomic unsigned snapshot_counter;
static pid_t image_pid;          /* pid when this program image started */
static uint64_t own_events_base; /* ring head when this process began (fork) */

const char *vt__rank_env(void)
{
    /* Global ranks first (torchrun, Open MPI, Slurm), the node-local one last. */
    static const char *const vars[] = { "RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID",
                                        "LOCAL_RANK" };
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        if (v && *v)
            return v;
    }
    return NULL;
}

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
                const char *r = vt__rank_env();
                snprintf(tmp, sizeof tmp, "%s", r ? r : "0");
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

/* Insert "-tag" before the ".vtsnap" of `path`, or append it. */
static int add_tag(char *path, size_t len, const char *tag)
{
    size_t l = strlen(path), el = strlen(EXT), tl = strlen(tag);
    size_t at = l > el && strcmp(path + l - el, EXT) == 0 ? l - el : l;
    if (l + tl + 2 > len)
        return -ENAMETOOLONG;
    memmove(path + at + tl + 1, path + at, l - at + 1);
    path[at] = '-';
    memcpy(path + at + 1, tag, tl);
    return 0;
}

/* The pattern snapshots not named by the program follow. */
static const char *out_pattern(void)
{
    const char *out = getenv("VRAMTRACE_OUT");
    return out && *out ? out : DEFAULT_PATTERN;
}

/* Expand the pattern with counter n and the tags of the rules above.
 * reason NULL: the exit snapshot. */
static int snapshot_name(const char *reason, unsigned n, bool with_pid, char *out, size_t len)
{
    const char *pat = out_pattern();
    int rc = vt__expand_path(pat, n, out, len);
    const char *rank = vt__rank_env();
    char tag[300];
    if (rc == 0 && rank && !strstr(pat, "%r")) {
        snprintf(tag, sizeof tag, "rank%s", rank);
        rc = add_tag(out, len, tag);
    }
    if (rc == 0 && with_pid && !strstr(pat, "%p")) {
        snprintf(tag, sizeof tag, "%d", (int)getpid());
        rc = add_tag(out, len, tag);
    }
    if (rc == 0 && reason && !strstr(pat, "%n")) {
        snprintf(tag, sizeof tag, "%s-%u", reason, n);
        rc = add_tag(out, len, tag);
    }
    if (rc != 0)
        fprintf(stderr, "vramtrace: the snapshot path '%s' expands to a path too long; no "
                        "snapshot written\n", pat);
    return rc;
}

/* A snapshot not named by the program (signal, OOM, exec, vt_snapshot(NULL)):
 * a new file, never one that exists. `path` receives the name written. */
static int auto_snapshot(const char *reason, bool announce, char *path, size_t len)
{
    char err[768];
    int rc;
    for (int attempt = 0; attempt < 1000; attempt++) {
        unsigned n = atomic_fetch_add(&snapshot_counter, 1) + 1;
        rc = snapshot_name(reason, n, true, path, len);
        if (rc != 0)
            return rc;
        rc = vt__snapshot_write(path, VT_OUTFILE_NO_REPLACE, err, sizeof err);
        if (rc != -EEXIST)
            break;
    }
    if (rc != 0)
        fprintf(stderr, "vramtrace: %s\n", err);
    else if (announce)
        fprintf(stderr, "vramtrace: %s snapshot written to %s\n", reason, path);
    vt__runlog_add(reason, path, NULL, rc);
    return rc;
}

/* vt_snapshot() of the public header. */
int vt_snapshot(const char *path)
{
    char buf[4096];
    if (!path)
        return auto_snapshot("snapshot", false, buf, sizeof buf);
    int rc = vt__snapshot_write_path(path);
    vt__runlog_add("snapshot", path, NULL, rc);
    return rc;
}

int vt__snapshot_auto(const char *reason)
{
    char path[4096];
    return auto_snapshot(reason, true, path, sizeof path);
}

int vt__snapshot_auto_named(const char *reason, char *path, size_t len)
{
    return auto_snapshot(reason, true, path, len);
}

int vt_mark(const char *label)
{
    if (!vt__rec_on())
        return 0;
    vt__trace(.kind = VT_EV_MARK, .device = -1, .str = vt__string_intern(label));
    return 0;
}

/* A pause of a process that recorded nothing of its own is not recorded:
 * the tool's work is not the program's, and a process's only event would
 * make it write an exit snapshot (torchrun's launcher under `run --track`,
 * whose tracker pauses it at the exit snapshot's walk, wrote one beside
 * rank 0's). */
int vt_paused(uint64_t ns)
{
    if (ns == 0 || !vt__process_recorded())
        return 0;
    vt__trace(.kind = VT_EV_PAUSE, .device = -1, .aux = ns);
    return 0;
}

int vt_trace_window(uint64_t *recorded, uint64_t *capacity)
{
    if (!recorded || !capacity)
        return -EINVAL;
    bool on = vt__rec_on();
    *recorded = on ? vt__ring_head() : 0;
    *capacity = on ? vt__ring_capacity() : 0;
    return 0;
}

bool vt__process_recorded(void)
{
    if (vt__activity_noted())
        return true;
    return vt__rec_on() && vt__ring_head() > own_events_base;
}

bool vt__process_recorded_signal_safe(void)
{
    if (vt__activity_noted())
        return true;
    return atomic_load_explicit(&vt__rec_state, memory_order_acquire) == VT_REC_ON &&
           vt__ring_head() > own_events_base;
}

bool vt__exit_snapshot_wanted(void)
{
    const char *out = getenv("VRAMTRACE_OUT");
    return out && *out;
}

static void write_exit_snapshot(void)
{
    if (!vt__exit_snapshot_wanted() || !vt__process_recorded())
        return;
    /* Under `vramtrace run` each process writes its own name, and run
     * renames the only one; elsewhere the first program image owns the plain
     * name and a forked child adds its pid. */
    bool in_run = vt__runlog_active();
    char path[4096], plain[4096], err[768];
    unsigned n = atomic_fetch_add(&snapshot_counter, 1) + 1;
    if (snapshot_name(NULL, n, in_run || getpid() != image_pid, path, sizeof path) != 0)
        return;
    int rc = vt__snapshot_write(path, 0, err, sizeof err);
    if (rc != 0)
        fprintf(stderr, "vramtrace: %s\n", err);
    if (in_run && snapshot_name(NULL, n, false, plain, sizeof plain) != 0)
        plain[0] = '\0';
    vt__runlog_add("exit", path, in_run ? plain : NULL, rc);
}

static pthread_once_t exit_once = PTHREAD_ONCE_INIT;

void vt__exit_snapshot(void)
{
    pthread_once(&exit_once, write_exit_snapshot);
}

/* A training loop that catches OOM and retries would otherwise write a
 * snapshot per attempt. The first oom_snapshots - 1 OOMs get a file each;
 * the last file is then the LATEST OOM: rewritten by later ones, at most
 * once per OOM_REWRITE_INTERVAL_NS so a retry loop is not stalled, and once
 * more at exit when an OOM came after its last rewrite (a program that
 * probes OOM at start-up still gets its real OOM recorded). */
#define OOM_REWRITE_INTERVAL_NS 1000000000ull

static pthread_mutex_t oom_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned oom_count;              /* OOMs seen (under oom_lock) */
static char oom_latest[4096];           /* the rotating file, once written */
static uint64_t oom_latest_ns;          /* when it was last written */
static bool oom_latest_stale;           /* an OOM came after that */

static void rewrite_latest(void)
{
    char err[768];
    int rc = vt__snapshot_write(oom_latest, 0, err, sizeof err);
    if (rc)
        fprintf(stderr, "vramtrace: %s\n", err);
    oom_latest_ns = vt__now_ns();
    oom_latest_stale = false;
}

static void oom_at_exit(void)
{
    pthread_mutex_lock(&oom_lock);
    if (oom_latest_stale && oom_latest[0])
        rewrite_latest();
    pthread_mutex_unlock(&oom_lock);
}

void vt__trace_out_of_memory(void)
{
    vt__rec_init();                    /* trace:0 too: the state still tells */
    vt__note_activity();
    const vt__conf *c = vt__config();
    if (!c->dump_on_oom)
        return;
    unsigned limit = c->oom_snapshots ? c->oom_snapshots : 1;
    pthread_mutex_lock(&oom_lock);
    unsigned n = ++oom_count;
    if (n == 1)   /* the first: every rank's memory at the moment one ran out */
        vt__signal_oom_pass_on();
    if (n < limit || (n == limit && !oom_latest[0])) {
        char path[sizeof oom_latest];
        if (vt__snapshot_auto_named("oom", path, sizeof path) == 0 && n == limit) {
            memcpy(oom_latest, path, sizeof path);
            oom_latest_ns = vt__now_ns();
            fprintf(stderr, "vramtrace: %u out-of-memory snapshots written "
                            "(VRAMTRACE_CONF oom_snapshots:%u); later OOMs replace %s with "
                            "the latest\n", limit, limit, oom_latest);
        }
    } else if (oom_latest[0]) {
        oom_latest_stale = true;
        if (vt__now_ns() - oom_latest_ns >= OOM_REWRITE_INTERVAL_NS)
            rewrite_latest();
    }
    pthread_mutex_unlock(&oom_lock);
}

int vt_program_ended(void)
{
    if (getpid() != vt__known_pid())   /* a vfork()/clone() child: never */
        return 0;
    oom_at_exit();
    vt__exit_snapshot();
    return 0;
}

static void at_exit(void)
{
    vt__signal_at_exit();          /* queued signal snapshots, the latest OOM, then ... */
    oom_at_exit();
    vt__exit_snapshot();
    vt__signal_exit_done();        /* ... death by a pending termination signal */
}

void vt__before_exec(void)
{
    /* vfork() or clone() children share our memory: never work there. */
    if (getpid() != vt__known_pid())
        return;
    vt__signal_at_exit();
    if (vt__exit_snapshot_wanted() && vt__process_recorded())
        vt__snapshot_auto("exec");
}

/* The child's own history starts here: what the parent recorded and holds
 * is inherited (a FORK event in the ring tells the views). */
static void api_after_fork_child(void)
{
    vt__activity_forget();
    atomic_store(&snapshot_counter, 0);
    if (vt__rec_on() && vt__ring_head() > 0)
        vt__trace(.kind = VT_EV_FORK, .device = -1, .aux = (uint64_t)getppid());
    own_events_base = vt__rec_on() ? vt__ring_head() : 0;
}

/* Set up once, when the library is loaded, whether tracing is on or not:
 * snapshots still describe the allocator's state without events. */
static void auto_snapshot_init(void)
{
    vt__rec_init();
    image_pid = getpid();
    own_events_base = 0;
    vt__exec_hooks_init();
    pthread_atfork(NULL, NULL, api_after_fork_child);
    vt__signal_init();
    atexit(at_exit);
}

static pthread_once_t init_once = PTHREAD_ONCE_INIT;

__attribute__((constructor)) static void auto_snapshot_ctor(void)
{
    pthread_once(&init_once, auto_snapshot_init);
}
