/*
 * cli/cmd_run.c - `vramtrace run`: run a program with libvramtrace preloaded.
 *
 *   vramtrace run [-o SNAPSHOT] [--track] [--no-cache] [--conf K:V,...] -- CMD [ARGS...]
 *
 * Sets LD_PRELOAD (ours first, an existing list kept after it),
 * VRAMTRACE_CONF (the environment's, then --conf, then --no-cache: later
 * keys win) and VRAMTRACE_OUT. The library is found through VRAMTRACE_LIB,
 * next to this executable's build directory, or in the install's library
 * directory.
 *
 * With -o: the path is checked before CMD starts (a new name in a writable
 * directory, or a regular file); a private run directory is passed down as
 * VRAMTRACE_RUN_DIR, where every process of the run registers the snapshots
 * it writes (trace/record/runlog.c). At the end run lists them all, gives each
 * exit snapshot its plain name (the -o pattern expanded) where no other exit
 * snapshot has the same one: the only one, or each rank's under a %r pattern
 * (each writes a pid-tagged name meanwhile), and exits non-zero when one was
 * lost.
 *
 * A Python program gets vramtrace's bootstrap on PYTHONPATH
 * (vramtrace/_boot/sitecustomize.py): in a PyTorch program it observes
 * PyTorch's caching allocator and marks optimizer steps. What a process could
 * not do there (the observer not built) it leaves in the run directory's
 * notes, and run repeats each note once at the end.
 *
 * Signals sent to run (kill, a container runtime, a scheduler) are passed on
 * to CMD; the terminal's own (^C, ^\, hangup) reach CMD directly and are not
 * sent twice. With a snapshot signal configured (signal:SIG), CMD passes
 * that one on to every process of the run that registered for it
 * (trace/record/snap_signal.c): one signal to run dumps every rank. The exit status is CMD's (128+N when it died of signal N, as
 * shells report it), or 1 when CMD succeeded but a snapshot was lost.
 *
 * A process whose snapshot holds an out-of-memory gets the short form of
 * `vramtrace oom` (oom_explain.h) on stderr at the end.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "commands.h"
#include "config.h"
#include "grow.h"
#include "oom_explain.h"
#include "outfile.h"
#include "pytorch.h"
#include "report_util.h"

#define LIBNAME "libvramtrace.so"

static void usage(FILE *out)
{
    fprintf(out,
            "usage: vramtrace " VT__USAGE_RUN "\n"
            "\n"
            "Run CMD with the vramtrace allocator preloaded (LD_PRELOAD=" LIBNAME "):\n"
            "every device allocation it makes (cudaMalloc, cuMemAlloc, cudaMallocAsync, ...,\n"
            "through a shared or static CUDA runtime or the driver) is served from the\n"
            "cache and recorded.\n"
            "\n"
            "In a Python program that uses PyTorch, PyTorch's own caching allocator is\n"
            "observed, not replaced: every tensor's block is recorded with its stack,\n"
            "PyTorch's segments go to the device as without vramtrace, and each\n"
            "optimizer step is marked \"step N\" (unless the program marks steps itself;\n"
            "a program that makes none is stepped by its backward passes in `check`).\n"
            "The observer is compiled once per torch version (announced on stderr).\n"
            "If it cannot be, the run says so and the snapshot shows segments only.\n"
            "\n"
            "options:\n"
            "  -o, --output FILE   write the snapshot to FILE when CMD exits (VRAMTRACE_OUT;\n"
            "                      patterns: %%p pid, %%h host, %%r rank (RANK,\n"
            "                      OMPI_COMM_WORLD_RANK, SLURM_PROCID or LOCAL_RANK),\n"
            "                      %%t time, %%n snapshot counter); default:\n"
            "                      vramtrace-NAME.PID.vtsnap in the current directory, NAME\n"
            "                      the script of a Python command (train for python\n"
            "                      train.py, the module for python -m), else CMD's name\n"
            "  --track             PyTorch: run the whole program under vramtrace.torch.track(),\n"
            "                      which also records who holds each tensor (torch:track)\n"
            "  --no-cache          record only: every allocation goes to the device (cache:0)\n"
            "  --conf K:V,...      allocator/tracing settings (VRAMTRACE_CONF syntax), merged\n"
            "                      over VRAMTRACE_CONF from the environment, checked before\n"
            "                      CMD starts; torch:off leaves PyTorch unobserved\n"
            "  -h, --help          this text\n"
            "\n"
            "Only processes that recorded something write a snapshot (a wrapper such as\n"
            "timeout or bash -c does not); when several write under one name, each file\n"
            "gets its pid (-o 'rank%%r.vtsnap' gives each rank its own name), but for\n"
            "the only one that used a device (beside its DataLoader workers), and\n"
            "every snapshot of the run is listed at the end; a process that ran out of\n"
            "device memory gets the short form of `vramtrace oom` for its snapshot (the\n"
            "fixes a replay verified). Signals sent to run are\n"
            "passed on to CMD; with --conf signal:SIG, CMD passes SIG on to every\n"
            "process of the run, so each rank writes a snapshot. The exit status is CMD's (128+N if it died of signal N),\n"
            "or 1 if CMD succeeded but a snapshot could not be written. The library is\n"
            "taken from VRAMTRACE_LIB if set, else found next to this program or in its\n"
            "lib dir.\n");
}

static int is_file(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

/* The library to preload, as an absolute path; NULL with a message if none. */
static char *find_library(void)
{
    const char *env = getenv("VRAMTRACE_LIB");
    if (env && *env) {
        char *p = realpath(env, NULL);
        if (!p || !is_file(p)) {
            fprintf(stderr, "vramtrace run: VRAMTRACE_LIB=%s: no such library\n", env);
            free(p);
            return NULL;
        }
        return p;
    }
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) {
        fprintf(stderr, "vramtrace run: cannot locate this executable; set VRAMTRACE_LIB\n");
        return NULL;
    }
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (slash)
        *slash = '\0';
    /* Build tree (cli/vramtrace, ./libvramtrace.so), then installs (bin/ and lib*). */
    static const char *const rel[] = {
        "/../" LIBNAME, "/" LIBNAME,
        "/../lib/" LIBNAME, "/../lib64/" LIBNAME,
        "/../lib/x86_64-linux-gnu/" LIBNAME, "/../lib/aarch64-linux-gnu/" LIBNAME,
        "/../lib/" LIBNAME ".0", "/../lib64/" LIBNAME ".0",
        "/../lib/x86_64-linux-gnu/" LIBNAME ".0",
    };
    char cand[PATH_MAX + 64];
    for (size_t i = 0; i < sizeof rel / sizeof rel[0]; i++) {
        snprintf(cand, sizeof cand, "%s%s", exe, rel[i]);
        if (is_file(cand))
            return realpath(cand, NULL);
    }
    fprintf(stderr, "vramtrace run: cannot find " LIBNAME " near %s; set VRAMTRACE_LIB\n", exe);
    return NULL;
}

/* Append "k:v" items of `src` to the list, replacing an earlier same key. */
struct kv_list { char *items[64]; int n; };

static int kv_add(struct kv_list *l, const char *src)
{
    char *copy = strdup(src);
    if (!copy)
        return -1;
    for (char *save = NULL, *tok = strtok_r(copy, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        while (*tok == ' ')
            tok++;
        if (!*tok)
            continue;
        const char *colon = strchr(tok, ':');
        size_t klen = colon ? (size_t)(colon - tok) : strlen(tok);
        int slot = l->n;
        for (int i = 0; i < l->n; i++)
            if (strncmp(l->items[i], tok, klen) == 0
                && (l->items[i][klen] == ':' || l->items[i][klen] == '\0'))
                slot = i;
        if (slot == l->n) {
            if (l->n == (int)(sizeof l->items / sizeof l->items[0]))
                break;
            l->n++;
        } else {
            free(l->items[slot]);
        }
        l->items[slot] = strdup(tok);
    }
    free(copy);
    return 0;
}

static char *kv_join(const struct kv_list *l)
{
    size_t len = 1;
    for (int i = 0; i < l->n; i++)
        len += strlen(l->items[i]) + 1;
    char *s = malloc(len);
    if (!s)
        return NULL;
    s[0] = '\0';
    for (int i = 0; i < l->n; i++) {
        if (i)
            strcat(s, ",");
        strcat(s, l->items[i]);
    }
    return s;
}

static char *absolute(const char *path)
{
    if (path[0] == '/')
        return strdup(path);
    char cwd[PATH_MAX];
    if (!getcwd(cwd, sizeof cwd))
        return strdup(path);
    size_t n = strlen(cwd) + strlen(path) + 2;
    char *s = malloc(n);
    if (s)
        snprintf(s, n, "%s/%s", cwd, path);
    return s;
}

/* ---- the output path, checked before the program runs ------------------ */

/* A plain -o path must be a regular file or a new name in a writable
 * directory: a long run must not learn at its end that nothing can be
 * written. A pattern (%h, %r ...) is checked for its directory when that
 * part has no pattern. */
static int check_output(const char *out)
{
    char err[1024];
    if (!strchr(out, '%') && vt__outfile_check(out, err, sizeof err) != 0) {
        fprintf(stderr, "vramtrace run: -o: %s\n", err);
        return -1;
    }
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", out);
    char *slash = strrchr(dir, '/');
    if (!slash)
        snprintf(dir, sizeof dir, ".");
    else if (slash == dir)
        dir[1] = '\0';
    else
        *slash = '\0';
    if (strchr(dir, '%'))
        return 0;
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode) || access(dir, W_OK | X_OK) != 0) {
        int e = errno;
        fprintf(stderr, "vramtrace run: -o %s: cannot write snapshots in %s: %s\n", out, dir,
                stat(dir, &st) == 0 && !S_ISDIR(st.st_mode) ? "not a directory" : strerror(e));
        return -1;
    }
    return 0;
}

/* ---- the run directory: where the run's processes register snapshots ---- */

static int make_run_dir(char *dir, size_t len)
{
    const char *t = getenv("TMPDIR");
    snprintf(dir, len, "%s/vramtrace-run-XXXXXX", t && *t ? t : "/tmp");
    if (!mkdtemp(dir)) {
        /* fall back on /tmp when TMPDIR is unusable */
        snprintf(dir, len, "/tmp/vramtrace-run-XXXXXX");
        if (!mkdtemp(dir)) {
            fprintf(stderr, "vramtrace run: cannot make a run directory in %s: %s\n",
                    t && *t ? t : "/tmp", strerror(errno));
            return -1;
        }
    }
    char f[PATH_MAX + 16];
    snprintf(f, sizeof f, "%s/snapshots", dir);
    int fd = open(f, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) {
        fprintf(stderr, "vramtrace run: cannot make %s: %s\n", f, strerror(errno));
        rmdir(dir);
        return -1;
    }
    close(fd);
    return 0;
}

static void remove_run_dir(const char *dir)
{
    if (!dir[0])
        return;
    char f[PATH_MAX + 16];
    snprintf(f, sizeof f, "%s/snapshots", dir);
    unlink(f);
    snprintf(f, sizeof f, "%s/notes", dir);
    unlink(f);
    snprintf(f, sizeof f, "%s/signal", dir);
    unlink(f);
    rmdir(dir);
}

/* What the run's processes could not do (vramtrace/_autorun.py writes
 * "pid<TAB>message" lines): each message once, with how many processes said it. */
static void report_notes(const char *rundir)
{
    char f[PATH_MAX + 16];
    snprintf(f, sizeof f, "%s/notes", rundir);
    FILE *fp = fopen(f, "r");
    if (!fp)
        return;
    char *seen[32];
    int count[32], n = 0;
    char buf[4096];
    while (fgets(buf, sizeof buf, fp)) {
        buf[strcspn(buf, "\n")] = '\0';
        char *msg = strchr(buf, '\t');
        msg = msg ? msg + 1 : buf;
        int k = 0;
        while (k < n && strcmp(seen[k], msg) != 0)
            k++;
        if (k < n) {
            count[k]++;
        } else if (n < (int)(sizeof seen / sizeof seen[0]) && (seen[n] = strdup(msg))) {
            count[n++] = 1;
        }
    }
    fclose(fp);
    for (int k = 0; k < n; k++) {
        if (count[k] > 1)
            fprintf(stderr, "vramtrace run: (%d processes) %s\n", count[k], seen[k]);
        else
            fprintf(stderr, "vramtrace run: %s\n", seen[k]);
        free(seen[k]);
    }
}

/* ---- the Python bootstrap ----------------------------------------------- */

static int has_boot(const char *dir)
{
    char f[PATH_MAX + 128];
    snprintf(f, sizeof f, "%s/sitecustomize.py", dir);
    return is_file(f);
}

/* The folder of vramtrace's Python bootstrap (vramtrace/_boot), or NULL:
 * inside the wheel's package next to this program (vramtrace/_bin/), in the
 * source tree of a build tree's program, in the install's Python folder. */
static char *find_python_boot(void)
{
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0)
        return NULL;
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (slash)
        *slash = '\0';
    char cand[PATH_MAX + 64];
    snprintf(cand, sizeof cand, "%s/../_boot", exe);
    if (has_boot(cand))
        return realpath(cand, NULL);
    snprintf(cand, sizeof cand, "%s/../build.ninja", exe);
#ifdef VT_PY_SOURCE_DIR
    if (is_file(cand) && has_boot(VT_PY_SOURCE_DIR "/vramtrace/_boot"))
        return realpath(VT_PY_SOURCE_DIR "/vramtrace/_boot", NULL);
#endif
#ifdef VT_PY_INSTALL_DIR
    if (has_boot(VT_PY_INSTALL_DIR "/vramtrace/_boot"))
        return realpath(VT_PY_INSTALL_DIR "/vramtrace/_boot", NULL);
#endif
    return NULL;
}

/* PYTHONPATH with the bootstrap first. @return 0, -1 without a bootstrap. */
static int set_python_boot(void)
{
    char *boot = find_python_boot();
    if (!boot)
        return -1;
    const char *old = getenv("PYTHONPATH");
    size_t len = strlen(boot) + (old ? strlen(old) : 0) + 2;
    char *pp = malloc(len);
    if (!pp) {
        free(boot);
        return -1;
    }
    snprintf(pp, len, "%s%s%s", boot, old && *old ? ":" : "", old && *old ? old : "");
    setenv("PYTHONPATH", pp, 1);
    free(pp);
    free(boot);
    return 0;
}

/* One registered snapshot (trace/record/runlog.c writes the lines). */
struct snap_line {
    char kind[16];
    long pid;
    int ok;
    char path[PATH_MAX];
    char plain[PATH_MAX];   /* an exit snapshot's name without its pid, or "" */
    char rank[16];          /* from the launcher's environment, or "" */
    bool host_only;         /* it used no device (a DataLoader worker) */
    uint64_t recorded;      /* events the process had recorded (0: not said) */
    uint64_t ring;          /* the most its ring keeps */
};

/* KIND PID ok|failed PATH [PLAIN [RANK [device|host [RECORDED RING]]]],
 * tab-separated; empty fields kept. A line without the device field (a
 * library older than this program) counts as a device's. */
static int parse_line(char *line, struct snap_line *l)
{
    char *f[9] = { NULL };
    int n = 0;
    line[strcspn(line, "\n")] = '\0';
    for (char *rest = line, *t; n < 9 && (t = strsep(&rest, "\t")) != NULL;)
        f[n++] = t;
    if (n < 4 || !f[0][0] || !f[3][0])
        return -1;
    snprintf(l->kind, sizeof l->kind, "%s", f[0]);
    l->pid = strtol(f[1], NULL, 10);
    l->ok = !strcmp(f[2], "ok");
    snprintf(l->path, sizeof l->path, "%s", f[3]);
    snprintf(l->plain, sizeof l->plain, "%s", n > 4 ? f[4] : "");
    snprintf(l->rank, sizeof l->rank, "%s", n > 5 ? f[5] : "");
    l->host_only = n > 6 && !strcmp(f[6], "host");
    l->recorded = n > 8 ? strtoull(f[7], NULL, 10) : 0;
    l->ring = n > 8 ? strtoull(f[8], NULL, 10) : 0;
    return 0;
}

/* A snapshot whose ring overwrote the run's start: said once per process,
 * with a ring that would have kept it all where that is a sensible size
 * (VT_RING_EVENT_BYTES slots, a power of two of them: docs/configuration.md). */
static void say_ring_overflow(const struct snap_line *l)
{
    if (!l->ok || !l->ring || l->recorded <= l->ring)
        return;
    uint64_t slots = 1;
    while (slots < l->recorded + l->recorded / 4)   /* room to run a bit longer */
        slots <<= 1;
    fprintf(stderr, "vramtrace run: %s kept the last %" PRIu64 " of %" PRIu64 " events (the "
                    "ring is full): what the run made and freed before them is not in it, what "
                    "it still held then is", l->path, l->ring, l->recorded);
    uint64_t mib = (slots * VT_RING_EVENT_BYTES + (1u << 20) - 1) >> 20;
    if (mib <= 4096)
        fprintf(stderr, "; VRAMTRACE_CONF=ring:%" PRIu64 "MiB keeps a run this long\n", mib);
    else
        fputs("; a larger ring keeps more (VRAMTRACE_CONF=ring:SIZE)\n", stderr);
}

/* A process that ran out of device memory: the short form of `vramtrace
 * oom` for its snapshot (its exit snapshot, else its latest OOM one), at
 * most a few processes. */
static void explain_ooms(const struct snap_line *lines, size_t n)
{
    int shown = 0;
    for (size_t k = 0; k < n && shown < 4; k++) {
        const struct snap_line *l = &lines[k];
        if (!l->ok || (strcmp(l->kind, "exit") && strcmp(l->kind, "oom")))
            continue;
        bool later = false;   /* the same process wrote a better one */
        for (size_t j = 0; j < n && !later; j++)
            later = j != k && lines[j].ok && lines[j].pid == l->pid
                    && (!strcmp(lines[j].kind, "exit") ? strcmp(l->kind, "exit") != 0
                                                       : !strcmp(lines[j].kind, "oom") &&
                                                         !strcmp(l->kind, "oom") && j > k);
        if (later)
            continue;
        vt__snapshot_data *s = NULL;
        vt__timeline *tl = NULL;
        char err[512];
        if (vt__snapshot_load(l->path, &s, err, sizeof err) != 0)
            continue;
        bool any = false;
        for (size_t i = 0; i < s->nevents && !any; i++)
            any = s->events[i].kind == VT_EV_OOM;
        vt__oom_report *r = NULL;
        if (any && vt__report_text_names(s) == 0
            && vt__timeline_build(s, &tl, err, sizeof err) == 0
            && vt__oom_explain(s, tl, NULL, &r, err, sizeof err) == 0) {
            fflush(stderr);
            vt__oom_print(stderr, l->path, s, r, true);
            shown++;
        }
        vt__oom_free(r);
        vt__timeline_free(tl);
        vt__snapshot_free(s);
    }
}

/* List what the run's processes wrote; the only exit snapshot gets the
 * plain name, or, of several, the only one that used a device (the
 * program beside its DataLoader workers, whose CPU tensors `run --track`
 * records). @return the number of snapshots that could not be written. */
static int report_snapshots(const char *rundir, const char *out, const int *status)
{
    char f[PATH_MAX + 16];
    snprintf(f, sizeof f, "%s/snapshots", rundir);
    FILE *fp = fopen(f, "r");
    struct snap_line *lines = NULL;
    size_t n = 0, cap = 0;
    char buf[3 * PATH_MAX];
    while (fp && fgets(buf, sizeof buf, fp)) {
        if (vt__grow_from((void **)&lines, &cap, n + 1, sizeof *lines, 8))
            break;
        if (parse_line(buf, &lines[n]) == 0)
            n++;
    }
    if (fp)
        fclose(fp);
    int lost = 0;
    size_t kept_pid = 0, got_name = 0;   /* exit snapshots, by their final names */
    for (size_t k = 0; k < n; k++) {
        struct snap_line *l = &lines[k];
        /* The plain name, where no other exit snapshot of the run expands to
         * it: the only one, or each rank's own under -o 'rank%r.vtsnap'; or
         * where the others recorded host events alone (the program's
         * DataLoader workers under --track): the one that used a device. */
        size_t same = 0, same_device = 0;
        for (size_t j = 0; j < n; j++) {
            bool shares = lines[j].ok && !strcmp(lines[j].kind, "exit") &&
                          !strcmp(lines[j].plain, l->plain);
            same += shares;
            same_device += shares && !lines[j].host_only;
        }
        bool named = same == 1 || (same_device == 1 && !l->host_only);
        if (l->ok && named && !strcmp(l->kind, "exit") && l->plain[0]
            && strcmp(l->plain, l->path) != 0) {
            char err[1024];
            if (vt__outfile_check(l->plain, err, sizeof err) != 0)
                fprintf(stderr, "vramtrace run: %s; keeping %s\n", err, l->path);
            else if (rename(l->path, l->plain) != 0)
                fprintf(stderr, "vramtrace run: cannot rename %s to %s: %s\n", l->path,
                        l->plain, strerror(errno));
            else
                memcpy(l->path, l->plain, sizeof l->path);
        }
        if (l->ok && !strcmp(l->kind, "exit") && l->plain[0]) {
            bool has_name = !strcmp(l->path, l->plain);
            kept_pid += !has_name;
            got_name += has_name;
        }
        char rank[32] = "";
        if (l->rank[0])
            snprintf(rank, sizeof rank, ", rank %s", l->rank);
        if (l->ok) {
            /* which of several to read: a DataLoader worker's says so */
            fprintf(stderr, "vramtrace run: snapshot written to %s (%s%s, pid %ld%s)\n", l->path,
                    l->kind, rank, l->pid, l->host_only ? ", no device memory" : "");
            if (!strcmp(l->kind, "exit"))
                say_ring_overflow(l);
        } else {
            fprintf(stderr, "vramtrace run: snapshot LOST: %s (%s%s, pid %ld): see the message "
                            "above\n", l->path, l->kind, rank, l->pid);
            lost++;
        }
    }
    /* Several exit snapshots left with their pids (two processes used a
     * device: mp.spawn workers, ranks without a rank variable): said once,
     * with where to read them together. */
    if (kept_pid >= 2 && got_name == 0)
        fprintf(stderr, "vramtrace run: %zu processes wrote exit snapshots for %s: each keeps "
                        "its pid in its name (`vramtrace compare` reads them side by side, "
                        "`vramtrace check` takes them all)\n",
                kept_pid, out);
    explain_ooms(lines, n);
    free(lines);
    if (n == 0)
        fprintf(stderr, "vramtrace run: no exit snapshot for %s (%s)\n", out,
                WIFSIGNALED(*status) ? "the program was killed before it could write one"
                                     : "no process of the program recorded anything, or the "
                                       "one that did ended without exit handlers (_exit)");
    return lost;
}

/* ---- the child, and the signals sent to us on its behalf --------------- */

static volatile sig_atomic_t child_pid;

/* A signal meant for the program reaches us when someone signals this pid
 * (kill, a container runtime, a job scheduler): pass it on. Signals the
 * terminal sends to its whole foreground group (^C, ^\, hangup, resize)
 * reached the program already: those are not sent twice. */
static void forward(int sig, siginfo_t *si, void *uc)
{
    (void)uc;
    if (si->si_code == SI_KERNEL || si->si_pid == getpid())
        return;
    pid_t p = (pid_t)child_pid;
    if (p > 0)
        kill(p, sig);
}

static bool forwarded(int sig)
{
    switch (sig) {
    case SIGKILL: case SIGSTOP:                      /* cannot be caught */
    case SIGCHLD:                                    /* ours */
    case SIGSEGV: case SIGBUS: case SIGFPE: case SIGILL: case SIGTRAP: case SIGSYS:
    case SIGTSTP: case SIGTTIN: case SIGTTOU:        /* job control stays the terminal's */
        return false;
    default:
        return true;
    }
}

/* Run argv with every catchable signal forwarded to it; its wait status in
 * *status. @return 0, or -1 with a message. */
static int run_child(char **argv, int *status)
{
    sigset_t all, old;
    sigfillset(&all);
    sigprocmask(SIG_BLOCK, &all, &old);   /* no signal between fork and handlers */
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "vramtrace run: fork: %s\n", strerror(errno));
        sigprocmask(SIG_SETMASK, &old, NULL);
        return -1;
    }
    if (pid == 0) {
        sigprocmask(SIG_SETMASK, &old, NULL);
        execvp(argv[0], argv);
        int e = errno;
        fprintf(stderr, "vramtrace run: cannot run '%s': %s\n", argv[0], strerror(e));
        _exit(e == ENOENT ? 127 : 126);
    }
    child_pid = pid;
    for (int sig = 1; sig < NSIG; sig++) {
        struct sigaction cur;
        if (!forwarded(sig) || sigaction(sig, NULL, &cur) != 0 || cur.sa_handler == SIG_IGN)
            continue;                     /* an ignored signal stays ignored */
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = forward;
        sa.sa_flags = SA_SIGINFO | SA_RESTART;
        sigfillset(&sa.sa_mask);
        sigaction(sig, &sa, NULL);        /* glibc's reserved signals refuse: fine */
    }
    sigprocmask(SIG_SETMASK, &old, NULL);
    while (waitpid(pid, status, 0) < 0) {
        if (errno != EINTR) {
            fprintf(stderr, "vramtrace run: waitpid: %s\n", strerror(errno));
            return -1;
        }
    }
    child_pid = 0;
    return 0;
}

/* The name a Python command runs: "train" for `python3 -u train.py`, "pkg.mod"
 * for `python -m pkg.mod`; NULL when cmd is not a Python interpreter's or
 * names none (`python -c ...`, a bare `python`). */
static const char *python_target(char **cmd, size_t *len)
{
    const char *prog = strrchr(cmd[0], '/') ? strrchr(cmd[0], '/') + 1 : cmd[0];
    if (strncmp(prog, "python", 6) != 0)
        return NULL;
    for (int k = 1; cmd[k]; k++) {
        const char *a = cmd[k];
        if (!strcmp(a, "-m") && cmd[k + 1]) {
            *len = strlen(cmd[k + 1]);
            return cmd[k + 1];
        }
        if (!strcmp(a, "-c") || !strcmp(a, "-"))
            return NULL;
        if (!strcmp(a, "-W") || !strcmp(a, "-X") || !strcmp(a, "--check-hash-based-pycs")) {
            k++;                         /* an option with a value */
            continue;
        }
        if (a[0] == '-')
            continue;
        const char *base = strrchr(a, '/') ? strrchr(a, '/') + 1 : a;
        size_t n = strlen(base);
        *len = n > 3 && !strcmp(base + n - 3, ".py") ? n - 3 : n;
        return base;
    }
    return NULL;
}

/* Without -o (memray and heaptrack write a file by default too): the
 * snapshot goes to vramtrace-NAME.PID.vtsnap in the current directory, NAME
 * what the command runs (python_target, else its program's name) with
 * anything but [A-Za-z0-9._-] replaced, PID this command's. */
static void default_output(char **cmd, char *out, size_t len)
{
    size_t n = 0;
    const char *name = python_target(cmd, &n);
    if (!name) {
        name = strrchr(cmd[0], '/') ? strrchr(cmd[0], '/') + 1 : cmd[0];
        n = strlen(name);
    }
    char safe[64];
    size_t m = 0;
    for (size_t k = 0; k < n && m + 1 < sizeof safe; k++) {
        char c = name[k];
        safe[m++] = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                            c == '.' || c == '_' || c == '-'
                        ? c : '_';
    }
    safe[m] = '\0';
    snprintf(out, len, "vramtrace-%s.%ld.vtsnap", m ? safe : "run", (long)getpid());
}

/* Settings given on run's command line are checked before the program
 * starts: a typo would otherwise cost a whole run made with the default
 * (VRAMTRACE_CONF from the environment is the library's to judge, as
 * without run: it warns and keeps the default). */
static bool conf_ok(const char *text)
{
    char msg[512];
    if (!vt__config_check(text, NULL, msg, sizeof msg))
        return true;
    fprintf(stderr, "vramtrace run: bad --conf '%s': %s; the program was not started "
                    "(every key: docs/configuration.md)\n", text, msg);
    return false;
}

int vt__cmd_run(int argc, char **argv)
{
    const char *out = NULL;
    int no_cache = 0, track = 0;
    struct kv_list conf = { .n = 0 };
    int i = 1;
    const char *env_conf = getenv("VRAMTRACE_CONF");
    if (env_conf)
        kv_add(&conf, env_conf);
    for (; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--")) {
            i++;
            break;
        }
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--no-cache")) {
            no_cache = 1;
        } else if (!strcmp(a, "--track")) {
            track = 1;
        } else if (!strcmp(a, "-o") || !strcmp(a, "--output") || !strcmp(a, "--conf")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "vramtrace run: %s needs a value (see vramtrace run --help)\n", a);
                return 2;
            }
            if (!strcmp(a, "--conf")) {
                if (!conf_ok(argv[++i]))
                    return 2;
                kv_add(&conf, argv[i]);
            } else {
                out = argv[++i];
            }
        } else if (!strncmp(a, "--output=", 9)) {
            out = a + 9;
        } else if (!strncmp(a, "--conf=", 7)) {
            if (!conf_ok(a + 7))
                return 2;
            kv_add(&conf, a + 7);
        } else if (!strncmp(a, "-o", 2) && a[2]) {
            out = a + 2;
        } else if (a[0] == '-') {
            vt__cli_unknown_option("run", a);
            return 2;
        } else {
            break;   /* the command, without a "--" */
        }
    }
    if (i >= argc) {
        fprintf(stderr, "vramtrace run: no command given\n"
                        "usage: vramtrace " VT__USAGE_RUN "\n");
        return 2;
    }
    if (no_cache)
        kv_add(&conf, "cache:0");
    if (track)
        kv_add(&conf, "torch:track");

    char *lib = find_library();
    if (!lib)
        return 2;
    const char *old = getenv("LD_PRELOAD");
    size_t plen = strlen(lib) + (old ? strlen(old) : 0) + 2;
    char *preload = malloc(plen);
    char *confs = kv_join(&conf);
    if (!out && getenv("VRAMTRACE_OUT") && *getenv("VRAMTRACE_OUT"))
        out = getenv("VRAMTRACE_OUT");   /* set by the caller: the same as -o */
    char default_out[128] = "";
    if (!out) {
        default_output(argv + i, default_out, sizeof default_out);
        out = default_out;
    }
    char *outabs = out ? absolute(out) : NULL;
    if (!preload || !confs || (out && !outabs)) {
        fprintf(stderr, "vramtrace run: out of memory\n");
        return 2;
    }
    snprintf(preload, plen, "%s%s%s", lib, old && *old ? ":" : "", old && *old ? old : "");
    if (outabs && check_output(outabs) != 0) {
        if (!default_out[0])
            return 2;
        /* no -o asked for: the program runs anyway, without a snapshot */
        fprintf(stderr, "vramtrace run: running without a snapshot (-o FILE chooses where)\n");
        free(outabs);
        outabs = NULL;
    }
    char rundir[PATH_MAX] = "";
    if (make_run_dir(rundir, sizeof rundir) != 0)
        return 2;
    /* Without it a Python program still runs, recorded as any program. */
    if (set_python_boot() != 0 && track)
        fprintf(stderr, "vramtrace run: --track: vramtrace's Python package was not found "
                        "next to this program; PyTorch is recorded without it\n");
    setenv("LD_PRELOAD", preload, 1);
    if (conf.n)
        setenv("VRAMTRACE_CONF", confs, 1);
    if (outabs)
        setenv("VRAMTRACE_OUT", outabs, 1);
    if (rundir[0])
        setenv("VRAMTRACE_RUN_DIR", rundir, 1);

    int status = 0;
    if (run_child(argv + i, &status) != 0) {
        remove_run_dir(rundir);
        return 2;
    }
    int rc = WIFEXITED(status) ? WEXITSTATUS(status)
           : WIFSIGNALED(status) ? 128 + WTERMSIG(status) : 1;
    report_notes(rundir);
    if (outabs) {
        int lost = report_snapshots(rundir, outabs, &status);
        if (lost && rc == 0)
            rc = 1;
        if (default_out[0] && !lost && access(outabs, F_OK) == 0)
            fprintf(stderr, "vramtrace run: `vramtrace check %s` names what stays alive and "
                            "what holds it\n", default_out);
    }
    remove_run_dir(rundir);
    if (WIFSIGNALED(status))
        fprintf(stderr, "vramtrace run: %s died of signal %d\n", argv[i], WTERMSIG(status));
    free(lib);
    free(preload);
    free(confs);
    free(outabs);
    for (int k = 0; k < conf.n; k++)
        free(conf.items[k]);
    return rc;
}
