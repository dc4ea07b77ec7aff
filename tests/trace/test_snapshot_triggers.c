/*
 * tests/trace/test_snapshot_triggers.c - when the recorder writes snapshots
 * by itself (exit, termination signals, exec, OOM), under which names, and
 * what it never overwrites.
 *
 * Linked with the recorder's objects directly (internal functions). Each
 * test's VRAMTRACE_CONF / VRAMTRACE_OUT comes from tests/trace/meson.build:
 * the recorder reads them before main(). Most tests fork a child that does
 * the recording, so that its exit is the event under test.
 */
#include "rec_snap.h"
#include "snapfile.h"
#include "timeline.h"
#include "vramtrace.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>

#include "../harness.h"
#include "rec_files.h"

/* A fresh folder `dir`, and fork(): the child's stderr goes to the file
 * dir/stderr, whose name is put in `log`. */
static pid_t fork_with_stderr_in_fresh_dir(char *dir, size_t dir_len, char *log, size_t log_len)
{
    make_tmpdir(dir, dir_len);
    snprintf(log, log_len, "%s/stderr", dir);
    pid_t pid = fork();
    ASSERT(pid >= 0);
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(fd, 2);
    }
    return pid;
}

/* What the file `log` holds (at most len - 1 bytes, NUL-terminated): its length. */
static size_t read_log(const char *log, char *buf, size_t len)
{
    FILE *f = fopen(log, "r");
    ASSERT(f != NULL);
    size_t n = fread(buf, 1, len - 1, f);
    fclose(f);
    buf[n] = '\0';
    return n;
}

/* ---- who writes the exit snapshot -------------------------------------- */

/* VRAMTRACE_OUT=<builddir>/trig-quiet-%p.vtsnap. A process that recorded
 * nothing of its own (a wrapper; here a forked child of a process that did
 * record) writes no exit snapshot; one that recorded does. A tool's pause
 * (vt_paused) is not the program's own: a child that only paused writes none
 * (torchrun's launcher under `run --track` wrote one). */
TEST(process_that_recorded_nothing_writes_no_exit_snapshot)
{
    vt_mark("the parent's");
    pid_t quiet = fork();
    if (quiet == 0)
        exit(0);
    ASSERT(WIFEXITED(wait_child(quiet)));
    pid_t paused = fork();
    if (paused == 0) {
        vt_paused(250000000);
        exit(0);
    }
    ASSERT(WIFEXITED(wait_child(paused)));
    pid_t busy = fork();
    if (busy == 0) {
        vt_mark("the child's");
        exit(0);
    }
    ASSERT(WIFEXITED(wait_child(busy)));
    char path[600];
    out_for(quiet, "", path, sizeof path);
    ASSERT_MSG(access(path, F_OK) != 0, "%s: written by a process that recorded nothing", path);
    out_for(paused, "", path, sizeof path);
    ASSERT_MSG(access(path, F_OK) != 0, "%s: written by a process that only paused", path);
    out_for(busy, "", path, sizeof path);
    ASSERT_EQ(has_mark(path, "the child's"), 1);
    unlink(path);
    unsetenv("VRAMTRACE_OUT");
}

/* ---- termination signals ------------------------------------------------ */

/* This test again in a fresh process (fork, then exec of this program with
 * VT_TRIG_CHILD set), which runs the child's part: vramtrace's thread can
 * start there, also under ThreadSanitizer, unlike in a forked child of this
 * multi-threaded process. */
static pid_t spawn_self(const char *test)
{
    setenv("VT_TRIG_CHILD", "1", 1);
    pid_t pid = fork();
    ASSERT(pid >= 0);
    if (pid == 0) {
        /* The program starts with the termination signals at their default,
         * whatever this test inherited (under nohup SIGHUP is ignored, and
         * vramtrace leaves an ignored signal ignored, by design). */
        signal(SIGTERM, SIG_DFL);
        signal(SIGINT, SIG_DFL);
        signal(SIGHUP, SIG_DFL);
        char *argv[] = { (char *)"test_snapshot_triggers", (char *)test, NULL };
        execv("/proc/self/exe", argv);
        _exit(126);
    }
    unsetenv("VT_TRIG_CHILD");
    return pid;
}

static int in_child(void)
{
    return getenv("VT_TRIG_CHILD") != NULL;
}

/* The child records, then gets `sig`: it must die of `sig` (as without
 * vramtrace) with its exit snapshot written. */
static void dies_of_signal_with_exit_snapshot(int sig, const char *test)
{
    if (in_child()) {
        alarm(50);
        vt_mark("before the signal");
        raise(sig);
        for (;;)
            pause();      /* the default action would have ended us: so must vramtrace */
    }
    pid_t pid = spawn_self(test);
    int status = wait_child(pid);
    ASSERT_MSG(WIFSIGNALED(status) && WTERMSIG(status) == sig,
               "status 0x%x: the child must die of signal %d", status, sig);
    assert_marked_and_remove(pid, "", "before the signal");
    unsetenv("VRAMTRACE_OUT");
}

/* VRAMTRACE_OUT=<builddir>/trig-term-%p.vtsnap */
TEST(sigterm_writes_the_exit_snapshot_and_dies_of_sigterm)
{
    dies_of_signal_with_exit_snapshot(SIGTERM, "sigterm_writes_the_exit_snapshot_and_dies_of_sigterm");
}

/* VRAMTRACE_OUT=<builddir>/trig-int-%p.vtsnap */
TEST(sigint_writes_the_exit_snapshot_and_dies_of_sigint)
{
    dies_of_signal_with_exit_snapshot(SIGINT, "sigint_writes_the_exit_snapshot_and_dies_of_sigint");
}

static volatile sig_atomic_t own_handler_ran;
static void own_handler(int sig)
{
    (void)sig;
    own_handler_ran = 1;
}

/* VRAMTRACE_OUT=<builddir>/trig-own-%p.vtsnap. A program's own SIGTERM
 * handler is never replaced: it runs, the program exits as it decides, and
 * the exit snapshot is written at exit. */
TEST(program_sigterm_handler_runs_and_the_exit_snapshot_follows)
{
    if (in_child()) {
        alarm(50);
        signal(SIGTERM, own_handler);
        vt_mark("own handler");
        raise(SIGTERM);
        exit(own_handler_ran ? 7 : 3);
    }
    pid_t pid = spawn_self("program_sigterm_handler_runs_and_the_exit_snapshot_follows");
    int status = wait_child(pid);
    ASSERT_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 7,
               "status 0x%x: the program's handler must run", status);
    assert_marked_and_remove(pid, "", "own handler");
    unsetenv("VRAMTRACE_OUT");
}

/* VRAMTRACE_OUT=<builddir>/trig-dfl-%p.vtsnap. The handler that writes the
 * exit snapshot is invisible: the program reads SIG_DFL, and setting SIG_DFL
 * again (as Python does before it dies of SIGINT) keeps the snapshot. */
TEST(termination_signals_still_read_as_default)
{
    /* Checked in a program started with them at their default (spawn_self):
     * the test process itself may have inherited them otherwise. */
    if (in_child()) {
        alarm(50);
        const int sigs[] = { SIGTERM, SIGINT, SIGHUP };
        for (int i = 0; i < 3; i++) {
            struct sigaction old;
            ASSERT_OK(sigaction(sigs[i], NULL, &old));
            ASSERT_MSG(old.sa_handler == SIG_DFL && !(old.sa_flags & SA_SIGINFO),
                       "signal %d does not read as SIG_DFL", sigs[i]);
            ASSERT(signal(sigs[i], SIG_DFL) == SIG_DFL);
        }
        vt_mark("reset to default");
        struct sigaction dfl;
        memset(&dfl, 0, sizeof dfl);
        dfl.sa_handler = SIG_DFL;
        sigaction(SIGTERM, &dfl, NULL);
        raise(SIGTERM);
        for (;;)
            pause();
    }
    pid_t pid = spawn_self("termination_signals_still_read_as_default");
    int status = wait_child(pid);
    ASSERT_MSG(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM,
               "status 0x%x (exit 1: a signal did not read as SIG_DFL, see above)", status);
    assert_marked_and_remove(pid, "", "reset to default");
    unsetenv("VRAMTRACE_OUT");
}

/* VRAMTRACE_CONF=signal:SIGUSR2, VRAMTRACE_OUT=<builddir>/trig-queued-%p.vtsnap.
 * A snapshot signal that arrives right before exit is still written. */
TEST(signal_snapshot_queued_at_exit_is_written)
{
    pid_t pid = fork();
    if (pid == 0) {
        vt_mark("queued");
        raise(SIGUSR2);
        exit(0);          /* at once: the thread may not have woken yet */
    }
    ASSERT(WIFEXITED(wait_child(pid)));
    assert_marked_and_remove(pid, "-signal-1", "queued");
    assert_marked_and_remove(pid, "", "queued");   /* and the exit snapshot after it */
    unsetenv("VRAMTRACE_OUT");
}

/* ---- names ---------------------------------------------------------------- */

/* VRAMTRACE_OUT unset; set here. Automatic snapshots carry the pid and a
 * reason; several in one second with %t, a forked child's, and a name that
 * exists already never collide: nothing is overwritten. */
TEST(automatic_snapshots_carry_the_pid_and_never_share_a_name)
{
    char dir[64], path[256];
    out_in_fresh_dir(dir, sizeof dir, "t-%t.vtsnap");
    vt_mark("named");
    for (int i = 0; i < 3; i++)
        ASSERT_OK(vt__snapshot_auto("signal"));
    pid_t pid = fork();
    if (pid == 0)
        _exit(vt__snapshot_auto("oom") == 0 ? 0 : 3);
    int status = wait_child(pid);
    ASSERT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    ASSERT_EQ(count_files(dir), 4);

    /* a plain name: p-PID-signal-N; an existing file is skipped, not replaced */
    set_out(dir, "p.vtsnap");
    unsigned next = 4;                     /* three signal snapshots counted already */
    char taken[256];
    snprintf(taken, sizeof taken, "%s/p-%d-signal-%u.vtsnap", dir, (int)getpid(), next);
    int fd = open(taken, O_WRONLY | O_CREAT | O_EXCL, 0644);
    ASSERT(fd >= 0);
    ASSERT_EQ(write(fd, "keep", 4), 4);
    close(fd);
    ASSERT_OK(vt__snapshot_auto("signal"));
    struct stat st;
    ASSERT_OK(stat(taken, &st));
    ASSERT_EQ(st.st_size, 4);                       /* untouched */
    snprintf(path, sizeof path, "%s/p-%d-signal-%u.vtsnap", dir, (int)getpid(), next + 1);
    ASSERT_EQ(has_mark(path, "named"), 1);
    remove_out_dir(dir);
}

/* VRAMTRACE_OUT unset; set here. A rank from the launcher's environment
 * names the file when the pattern has no %r. */
TEST(rank_from_the_launcher_names_the_snapshot)
{
    char dir[64], path[256];
    out_in_fresh_dir(dir, sizeof dir, "r.vtsnap");
    setenv("SLURM_PROCID", "6", 1);
    vt_mark("ranked");
    ASSERT_OK(vt__snapshot_auto("signal"));
    snprintf(path, sizeof path, "%s/r-rank6-%d-signal-1.vtsnap", dir, (int)getpid());
    ASSERT_EQ(has_mark(path, "ranked"), 1);
    unsetenv("SLURM_PROCID");
    remove_out_dir(dir);
}

/* ---- what is never overwritten -------------------------------------------- */

TEST(snapshot_never_replaces_a_device_fifo_directory_or_symlink)
{
    char dir[64], fifo[128], sub[128], link[128], target[128];
    make_tmpdir(dir, sizeof dir);
    snprintf(fifo, sizeof fifo, "%s/fifo", dir);
    snprintf(sub, sizeof sub, "%s/sub", dir);
    snprintf(link, sizeof link, "%s/link.vtsnap", dir);
    snprintf(target, sizeof target, "%s/target.vtsnap", dir);
    ASSERT_OK(mkfifo(fifo, 0600));
    ASSERT_OK(mkdir(sub, 0700));
    ASSERT_OK(symlink(target, link));
    /* A device of our own as root: should the check ever break, the
     * machine's /dev/null must not be what is lost. */
    char dev[128];
    snprintf(dev, sizeof dev, "%s/null", dir);
    int own_dev = geteuid() == 0;
    if (own_dev)
        ASSERT_OK(mknod(dev, S_IFCHR | 0666, makedev(1, 3)));
    else
        snprintf(dev, sizeof dev, "/dev/null");
    struct stat st;
    ASSERT(vt_snapshot(dev) < 0);
    ASSERT(lstat(dev, &st) == 0 && S_ISCHR(st.st_mode));
    ASSERT(vt_snapshot(fifo) < 0);
    ASSERT(lstat(fifo, &st) == 0 && S_ISFIFO(st.st_mode));
    ASSERT_EQ(vt_snapshot(sub), -EISDIR);
    ASSERT(lstat(sub, &st) == 0 && S_ISDIR(st.st_mode));
    ASSERT(vt_snapshot(link) < 0);
    ASSERT(lstat(link, &st) == 0 && S_ISLNK(st.st_mode));
    ASSERT(access(target, F_OK) != 0);              /* not followed either */
    ASSERT_EQ(count_files(dir), 3 + own_dev);       /* no temporary file left */
    remove_tree(dir);
}

/* A writer killed during a write leaves TARGET.tmp.PID behind; the next
 * write of the same target removes it once its process is gone and it is
 * older than a minute, and leaves the others alone. */
TEST(stale_temporary_files_of_dead_writers_are_swept)
{
    pid_t dead[2];
    for (int i = 0; i < 2; i++) {
        dead[i] = fork();
        if (dead[i] == 0)
            _exit(0);
        wait_child(dead[i]);
    }
    char dir[64], target[128], stale[160], fresh[160], alive[160];
    make_tmpdir(dir, sizeof dir);
    snprintf(target, sizeof target, "%s/s.vtsnap", dir);
    snprintf(stale, sizeof stale, "%s.tmp.%d", target, (int)dead[0]);
    snprintf(fresh, sizeof fresh, "%s.tmp.%d", target, (int)dead[1]);
    snprintf(alive, sizeof alive, "%s.tmp.%d", target, (int)getppid());
    const char *files[] = { stale, fresh, alive };
    struct timespec old[2] = { { time(NULL) - 600, 0 }, { time(NULL) - 600, 0 } };
    for (int i = 0; i < 3; i++) {
        int fd = open(files[i], O_WRONLY | O_CREAT | O_EXCL, 0644);
        ASSERT(fd >= 0);
        ASSERT_OK(ftruncate(fd, 1 << 20));
        if (i != 1)
            ASSERT_OK(futimens(fd, old));
        close(fd);
    }
    ASSERT_OK(vt_snapshot(target));
    ASSERT_MSG(access(stale, F_OK) != 0, "%s: a dead writer's old file stays", stale);
    ASSERT_MSG(access(fresh, F_OK) == 0, "%s: a recent file was removed", fresh);
    ASSERT_MSG(access(alive, F_OK) == 0, "%s: a live writer's file was removed", alive);
    remove_tree(dir);
}

/* VRAMTRACE_OUT unset. The error of a failed write is one line that names
 * the file once. */
TEST(write_error_is_one_line_naming_the_file_once)
{
    char dir[64], log[128];
    pid_t pid = fork_with_stderr_in_fresh_dir(dir, sizeof dir, log, sizeof log);
    if (pid == 0) {
        _exit(vt_snapshot("/nonexistent-vt-dir/lost.vtsnap") < 0 ? 0 : 3);
    }
    int status = wait_child(pid);
    ASSERT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    char buf[2048];
    size_t n = read_log(log, buf, sizeof buf);
    ASSERT_MSG(n > 0 && strchr(buf, '\n') == buf + n - 1, "not one line: %s", buf);
    const char *first = strstr(buf, "lost.vtsnap");
    ASSERT_MSG(first && !strstr(first + 1, "lost.vtsnap"), "the path repeats: %s", buf);
    ASSERT_STR_CONTAINS(buf, "No such file or directory");
    remove_tree(dir);
}

/* ---- OOM snapshots --------------------------------------------------------- */

/* VRAMTRACE_CONF=dump_on_oom:1,oom_snapshots:2,
 * VRAMTRACE_OUT=<builddir>/trig-oom-%p.vtsnap. A probe OOM at start-up and
 * a later real one: the first gets its file, the last file always holds the
 * latest OOM, and the limit is said once. */
TEST(oom_snapshots_beyond_the_limit_keep_the_latest)
{
    char dir[64], log[128];
    pid_t pid = fork_with_stderr_in_fresh_dir(dir, sizeof dir, log, sizeof log);
    if (pid == 0) {
        vt_mark("probe");
        vt__trace_out_of_memory();
        vt_mark("second");
        vt__trace_out_of_memory();
        vt_mark("the real one");
        vt__trace_out_of_memory();       /* within a second: written at exit */
        vt__trace_out_of_memory();
        exit(0);
    }
    ASSERT(WIFEXITED(wait_child(pid)));
    char path[600];
    out_for(pid, "-oom-1", path, sizeof path);
    ASSERT_EQ(has_mark(path, "probe"), 1);
    ASSERT_EQ(has_mark(path, "second"), 0);
    unlink(path);
    assert_marked_and_remove(pid, "-oom-2", "the real one");
    out_for(pid, "-oom-3", path, sizeof path);
    ASSERT(access(path, F_OK) != 0);
    out_for(pid, "", path, sizeof path);             /* the exit snapshot */
    unlink(path);
    char buf[4096];
    read_log(log, buf, sizeof buf);
    const char *msg = strstr(buf, "out-of-memory snapshots written");
    ASSERT_MSG(msg && !strstr(msg + 1, "out-of-memory snapshots written"),
               "the limit must be said once: %s", buf);
    ASSERT_STR_CONTAINS(buf, "oom_snapshots:2");
    remove_out_dir(dir);
}

/* ---- fork ------------------------------------------------------------------ */

/* A forked child's snapshot marks what the parent allocated before the fork
 * as inherited, not as the child's own live allocations. */
TEST(forked_child_marks_the_parents_allocations_as_inherited)
{
    char dir[64], path[128], err[512];
    make_tmpdir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/child.vtsnap", dir);
    vt__trace(.kind = VT_EV_ALLOC, .stream = 1, .addr = 0x10000, .req_size = 4096, .size = 4096);   /* kept by the parent */
    vt__trace(.kind = VT_EV_ALLOC, .stream = 1, .addr = 0x20000, .req_size = 4096, .size = 4096);
    vt__trace(.kind = VT_EV_FREE_REQUESTED, .stream = 1, .addr = 0x20000, .req_size = 4096,
              .size = 4096);
    pid_t pid = fork();
    if (pid == 0) {
        vt__trace(.kind = VT_EV_ALLOC, .stream = 1, .addr = 0x30000, .req_size = 8192,
                  .size = 8192);   /* the child's */
        _exit(vt_snapshot(path) == 0 ? 0 : 3);
    }
    int status = wait_child(pid);
    ASSERT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    vt__snapshot_data *s = NULL;
    ASSERT_MSG(vt__snapfile_read(path, &s, err, sizeof err) == 0, "%s", err);
    ASSERT_EQ(s->meta.format_version & 0xffff, VT_FORMAT_MINOR);   /* the writer's own (>= 1.2: FORK) */
    size_t forks = 0;
    for (size_t i = 0; i < s->nevents; i++)
        if (s->events[i].kind == VT_EV_FORK) {
            forks++;
            ASSERT_EQ(s->events[i].aux, getpid());
        }
    ASSERT_EQ(forks, 1);
    vt__timeline *tl = NULL;
    ASSERT_OK(vt__timeline_build(s, &tl, err, sizeof err));
    ASSERT_EQ(tl->fork_parent_pid, getpid());
    int seen = 0;
    for (size_t i = 0; i < tl->nlifetimes; i++) {
        const vt__lifetime *l = &tl->lifetimes[i];
        if (l->addr == 0x10000) {
            ASSERT_EQ(l->flags & (VT_LT_ALIVE | VT_LT_INHERITED), VT_LT_ALIVE | VT_LT_INHERITED);
            seen |= 1;
        } else if (l->addr == 0x30000) {
            ASSERT_EQ(l->flags & (VT_LT_ALIVE | VT_LT_INHERITED), VT_LT_ALIVE);
            seen |= 2;
        }
    }
    ASSERT_EQ(seen, 3);
    vt__timeline_free(tl);
    vt__snapshot_free(s);
    remove_tree(dir);
}

TEST_MAIN()
