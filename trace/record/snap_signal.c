/*
 * trace/record/snap_signal.c - snapshots on the configured signal, and the exit
 * snapshot on SIGTERM, SIGINT and SIGHUP.
 *
 * A handler does nothing but count the request and write a small record to
 * a pipe (async-signal safe); a background thread started at initialization wakes
 * up and takes the snapshot, so no allocator state is ever touched from a
 * signal context. The counters, not the pipe's records, say what is owed: at
 * exit the snapshots still owed are written before the exit snapshot, never
 * dropped.
 *
 * Every process of a run: under `vramtrace run` (VRAMTRACE_RUN_DIR), a
 * process with a snapshot signal registers in the run directory (runlog.c),
 * and its handler also takes the sender's pid (SA_SIGINFO) into the pipe. The
 * thread, not the handler, judges the sender: a signal from outside the run
 * (a user's kill, `vramtrace run` passing one on, a scheduler) is passed on
 * to every other registered process before this one takes its own snapshot,
 * so one signal to the launcher dumps every rank at once. A signal from a
 * process of the run (one passing it on, or the program signalling itself)
 * is never passed on again: no loops. A signal sent to the whole job at once
 * (`kill` of its process group, Slurm's `scancel --signal`) reaches every
 * process from outside, and each passes it on; the program run started
 * gets it a second time from run itself, which passes on what it is sent. So
 * in a run the snapshot signals read together are one request, and any
 * that comes within PASSED_ON_WINDOW_NS of the last one this process served
 * (the end of its signal snapshot, or its passing the signal on) is that
 * request again: neither taken nor passed on. One signal, one snapshot per
 * process. In a run, a
 * process that recorded nothing of its own (a launcher such as torchrun, a
 * shell, a DataLoader worker without CUDA) writes no signal snapshot: asked
 * for every rank, it is none, and its empty file would only take a rank's
 * name (%r reads 0 where no rank is set). It still passes the signal on.
 *
 * Termination signals: when an exit snapshot is asked for (VRAMTRACE_OUT) and
 * the program left SIGTERM/SIGINT/SIGHUP at their default action, the
 * handler only wakes the thread, which writes the exit snapshot and then
 * kills the process with the same signal at its default action, so the exit
 * status (and a core where the default makes one) is what it would have
 * been. The program runs on meanwhile, as if the signal had arrived a little
 * later; a second termination signal kills at once, and so does the first
 * in a process that has recorded nothing (it writes no snapshot: a shell or
 * a launcher under `vramtrace run`, which now always asks for one, ends as
 * without vramtrace even when it _exits right after). A program that installs
 * its own handler is never overridden (its handler runs, and a normal exit
 * writes the snapshot at exit); an ignored signal stays ignored.
 *
 * Our handler is invisible: sigaction() and signal() are wrapped so that the
 * program still reads SIG_DFL for these signals (Python, for one, installs
 * its KeyboardInterrupt handler for SIGINT only when it finds SIG_DFL, and
 * signal.getsignal() must keep answering SIG_DFL); setting SIG_DFL keeps our
 * handler in place, setting anything else replaces it. Every other signal
 * goes straight to the C library.
 */
#include "rec_internal.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "config.h"

static int sig_pipe[2] = { -1, -1 };
static _Atomic unsigned snap_requested;  /* configured-signal snapshots asked for */
static unsigned snap_done;               /* ... and taken (under `busy`) */
static _Atomic int term_sig;             /* termination signal received, 0 = none */
static _Atomic pid_t thread_pid;         /* process whose thread reads the pipe */
static _Atomic pid_t known_pid;          /* this process (updated at fork) */
static _Atomic bool pass_on;             /* in a run, registered: pass outside signals on */
static int snap_signal;                  /* the configured snapshot signal, 0 = none */
/* In a run: when this process last served a snapshot request (the end of
 * its signal snapshot, or its passing the signal on), 0 = never. */
static _Atomic uint64_t last_request_ns;

/* Passing a signal on takes milliseconds (a few /proc reads per process):
 * a signal this close to the request we served last is that request again
 * (a fellow passing it on, run passing on a signal the whole job got). A
 * second dump asked for on purpose comes later than this. */
#define PASSED_ON_WINDOW_NS UINT64_C(1000000000)
static pthread_mutex_t busy = PTHREAD_MUTEX_INITIALIZER;

static const int term_signals[] = { SIGTERM, SIGINT, SIGHUP };
/* Our handler stands for SIG_DFL on this signal (see the wrappers below). */
static _Atomic bool stands_for_default[NSIG];

typedef int (*sigaction_fn)(int, const struct sigaction *, struct sigaction *);
static sigaction_fn real_sigaction;

/* The wrappers can run before anything is initialized: a sanitizer's
 * runtime installs its own handlers through them while it starts, before
 * it could run instrumented code. They and what they call are left
 * uninstrumented. */
#define NO_SANITIZE vt__no_sanitize

/* Resolved before anything else of ours runs (the program's constructors
 * may already call sigaction). */
NO_SANITIZE __attribute__((constructor(101))) static void resolve_sigaction(void)
{
    *(void **)&real_sigaction = dlsym(RTLD_NEXT, "sigaction");
}

NO_SANITIZE static int call_sigaction(int sig, const struct sigaction *act,
                                      struct sigaction *old)
{
    if (!real_sigaction)
        resolve_sigaction();
    if (!real_sigaction) {
        errno = ENOSYS;
        return -1;
    }
    return real_sigaction(sig, act, old);
}

NO_SANITIZE static bool is_term_signal(int sig)
{
    return sig == SIGTERM || sig == SIGINT || sig == SIGHUP;
}

static int install(int sig, void (*fn)(int));
static void on_term_signal(int sig);
static _Atomic bool term_enabled;        /* exit snapshot on termination signals */

NO_SANITIZE static bool sets_default(const struct sigaction *act)
{
    return act && !(act->sa_flags & SA_SIGINFO) && act->sa_handler == SIG_DFL;
}

NO_SANITIZE __attribute__((visibility("default")))
int sigaction(int sig, const struct sigaction *act, struct sigaction *old)
{
    if (!is_term_signal(sig))
        return call_sigaction(sig, act, old);
    if (!atomic_load(&stands_for_default[sig])) {
        /* Back to the default (Python does so before it dies of SIGINT):
         * ours stands in again, so that the exit snapshot is written. */
        if (sets_default(act) && atomic_load(&term_enabled)
            && getpid() == atomic_load(&thread_pid)) {
            if (old && call_sigaction(sig, NULL, old) != 0)
                return -1;
            if (install(sig, on_term_signal) != 0)
                return -1;
            atomic_store(&stands_for_default[sig], true);
            return 0;
        }
        return call_sigaction(sig, act, old);
    }
    struct sigaction now;
    if (call_sigaction(sig, NULL, &now) != 0)
        return -1;
    if (old) {
        *old = now;
        old->sa_handler = SIG_DFL;          /* what the program set, or found */
        old->sa_flags &= ~SA_SIGINFO;
    }
    if (!act || sets_default(act))
        return 0;                           /* default it stays: ours keeps standing in */
    atomic_store(&stands_for_default[sig], false);
    return call_sigaction(sig, act, NULL);
}

NO_SANITIZE __attribute__((visibility("default")))
sighandler_t signal(int sig, sighandler_t handler)
{
    struct sigaction act, old;
    memset(&act, 0, sizeof act);
    act.sa_handler = handler;
    act.sa_flags = SA_RESTART;               /* BSD semantics, as glibc's signal() */
    sigemptyset(&act.sa_mask);
    sigaddset(&act.sa_mask, sig);
    if (sigaction(sig, &act, &old) != 0)
        return SIG_ERR;
    return old.sa_handler;
}

int vt__known_pid(void)
{
    return atomic_load(&known_pid);
}

/* The pipe carries records of one int32 (a pipe write that small is atomic):
 * the pid that sent a snapshot signal (0: unknown, the kernel or another pid
 * namespace, outside the run either way), NOT_A_SENDER for a plain wake, or
 * OOM_PASS_ON: this process ran out of memory (its own OOM snapshot is the
 * recorder's), so the run's other processes are signalled to dump theirs. */
#define NOT_A_SENDER (-1)
#define OOM_PASS_ON (-2)

static void wake_with(int32_t rec)
{
    if (write(sig_pipe[1], &rec, sizeof rec) < 0) {
        /* Pipe full: the thread is awake already; the counters hold the rest
         * (a sender lost here is not passed on: thousands are queued). */
    }
}

static void wake(void)
{
    wake_with(NOT_A_SENDER);
}

static void on_snapshot_signal(int sig)
{
    (void)sig;
    int saved = errno;
    atomic_fetch_add(&snap_requested, 1);
    wake();
    errno = saved;
}

/* The same, with who sent it: kill, sigqueue and tgkill fill si_pid (si_code
 * <= 0); anything the kernel raised says nothing of a sender. */
static void on_snapshot_signal_info(int sig, siginfo_t *si, void *uc)
{
    (void)sig;
    (void)uc;
    int saved = errno;
    atomic_fetch_add(&snap_requested, 1);
    wake_with(si && si->si_code <= 0 && si->si_pid > 0 ? (int32_t)si->si_pid : 0);
    errno = saved;
}

/* Die of `sig` as its default action would have made us. */
static void die_of(int sig)
{
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    atomic_store(&stands_for_default[sig], false);
    call_sigaction(sig, &dfl, NULL);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, sig);
    pthread_sigmask(SIG_UNBLOCK, &set, NULL);
    raise(sig);
}

static void on_term_signal(int sig)
{
    int saved = errno, none = 0;
    /* No thread in this process (see signal_after_fork_child), a process
     * that recorded nothing (it writes no snapshot: a shell, a launcher, a
     * worker without CUDA, which must end as without vramtrace, even by
     * _exit right after the signal), or a second signal while the snapshot
     * is written: the default action, now. */
    if (getpid() != atomic_load(&thread_pid) || !vt__process_recorded_signal_safe() ||
        !atomic_compare_exchange_strong(&term_sig, &none, sig)) {
        die_of(sig);
        errno = saved;
        return;
    }
    wake();
    errno = saved;
}

/* Take the configured-signal snapshots still owed, at most `max` of them,
 * the first `skip` counted done without a snapshot. In a run, a process that
 * recorded nothing of its own takes none. */
static void take_owed(unsigned max, unsigned skip)
{
    bool none = atomic_load(&pass_on) && !vt__process_recorded();
    for (; max && snap_done < atomic_load(&snap_requested); max--) {
        snap_done++;
        if (none)
            continue;
        if (skip) {
            skip--;
            continue;
        }
        vt__snapshot_auto("signal");
        atomic_store(&last_request_ns, vt__now_ns());
    }
}

/* Judge the snapshot signals in `rec`, read together in a run: they are one
 * request, whoever sent them, unless they come within PASSED_ON_WINDOW_NS of
 * the request this process served last: then they are that one again. A
 * new request from outside the run is passed on to the run's other
 * processes, once (the signals read together ask the others once, as the
 * kernel merges a signal sent again while it is pending); one a fellow
 * passed on is not passed on again (no loops). An out-of-memory record is
 * passed on whatever else came (vt__signal_oom_pass_on). @return how many of
 * the snapshot signals in `rec` (*requests) to count done without a
 * snapshot. */
static unsigned judge_senders(const int32_t *rec, size_t n, unsigned *requests)
{
    bool outside = false, oom = false;
    *requests = 0;
    for (size_t i = 0; i < n; i++) {
        if (rec[i] == NOT_A_SENDER)
            continue;
        if (rec[i] == OOM_PASS_ON) {
            oom = true;
            continue;
        }
        ++*requests;
        if (rec[i] <= 0 || !vt__runlog_fellow((pid_t)rec[i]))
            outside = true;
    }
    uint64_t last = atomic_load(&last_request_ns);
    bool again = last && vt__now_ns() - last < PASSED_ON_WINDOW_NS;
    bool ask = outside && !again;
    if (ask || oom) {
        int sent = vt__runlog_fan_out(snap_signal);
        if (ask)
            atomic_store(&last_request_ns, vt__now_ns());
        if (sent > 0)   /* a process alone in its run says nothing */
            fprintf(stderr, "vramtrace: %ssignal %d passed on to %d other process%s of the run\n",
                    ask ? "" : "out of memory: ", snap_signal, sent, sent == 1 ? "" : "es");
    }
    if (!*requests)
        return 0;
    return again ? *requests : *requests - 1;
}

void vt__signal_oom_pass_on(void)
{
    /* the signal thread passes it on: nothing here waits on another process */
    if (atomic_load(&pass_on) && sig_pipe[1] >= 0)
        wake_with(OOM_PASS_ON);
}

/* Posted by the signal thread once it runs: spawn_signal_thread returns
 * only then (below). */
static sem_t thread_running;

static void *signal_thread(void *arg)
{
    (void)arg;
    sem_post(&thread_running);
    int32_t rec[64];
    for (;;) {
        /* Records are written whole, so a read returns whole records. */
        ssize_t n = read(sig_pipe[0], rec, sizeof rec);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return NULL;
        /* Passing on, the records say what is owed now: a signal counted
         * while a snapshot is written is taken when its record is read,
         * judged by its sender. Its record may trail the count a moment;
         * what the records never tell (a full pipe) is taken at exit. */
        unsigned repeats = 0, requests = UINT_MAX;
        if (atomic_load(&pass_on))
            repeats = judge_senders(rec, (size_t)n / sizeof rec[0], &requests);
        pthread_mutex_lock(&busy);
        take_owed(requests, repeats);
        pthread_mutex_unlock(&busy);
        int sig = atomic_load(&term_sig);
        if (sig) {
            vt__signal_at_exit();   /* every signal snapshot owed, read or not */
            vt__exit_snapshot();
            die_of(sig);      /* the thread blocks it: some other thread dies */
            kill(getpid(), sig);
        }
    }
}

void vt__signal_at_exit(void)
{
    if (sig_pipe[0] < 0)
        return;
    pthread_mutex_lock(&busy);
    take_owed(UINT_MAX, 0);
    pthread_mutex_unlock(&busy);
}

void vt__signal_exit_done(void)
{
    int sig = atomic_load(&term_sig);
    if (sig)
        die_of(sig);
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
    sem_init(&thread_running, 0, 0);
    int rc = pthread_create(&t, &attr, signal_thread, NULL);
    pthread_attr_destroy(&attr);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc == 0) {
        atomic_store(&thread_pid, getpid());
        /* Return once the thread runs: a thread still starting holds locks
         * of the C runtime's (or a sanitizer's) allocator for a moment, and
         * a fork by the program at that moment would give the child those
         * locks held forever (seen: an AddressSanitizer build's forked
         * child hung in calloc). Waiting also means a signal arriving right
         * after initialization finds the thread there. */
        while (sem_wait(&thread_running) != 0 && errno == EINTR)
            ;
    }
    return rc;
}

#if VT_TSAN
#define NO_THREADS_IN_FORKED_CHILD 1
#endif

/* A forked child (a DataLoader worker) inherits the handlers and the pipe
 * but not the thread: its signal would wake the PARENT's thread, which would
 * snapshot the parent, and the child's snapshot would never be written. Give
 * the child a pipe and a thread of its own. The new write end replaces the
 * old one under the same descriptor number (dup3), so a signal arriving
 * meanwhile never writes into a closed or reused descriptor. */
static void signal_after_fork_child(void)
{
    atomic_store(&known_pid, getpid());
    atomic_store(&term_sig, 0);
    atomic_store(&snap_requested, 0);
    snap_done = 0;
    atomic_store(&last_request_ns, 0);
    pthread_mutex_init(&busy, NULL);   /* a thread of the parent may have held it */
#ifdef NO_THREADS_IN_FORKED_CHILD
    /* ThreadSanitizer cannot start a thread in the child of a multi-threaded
     * fork: termination signals take their default action at once there. */
    return;
#endif
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
    /* Not registered: shells fork for every command and DataLoader workers
     * record nothing; a line per fork would grow the run's list without
     * bound. Launchers start ranks with exec (torchrun, spawn, mpirun), and
     * the exec'd program registers. A forked child signalled from outside
     * still passes the signal on (pass_on is inherited). */
}

static int install(int sig, void (*fn)(int))
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = fn;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    return call_sigaction(sig, &sa, NULL);
}

/* The snapshot signal: with its sender under `vramtrace run` (to pass it on),
 * a plain handler elsewhere, as before runs could pass signals on. */
static int install_snapshot_signal(int sig)
{
    if (!vt__runlog_active())
        return install(sig, on_snapshot_signal);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_snapshot_signal_info;
    sa.sa_flags = SA_RESTART | SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    if (call_sigaction(sig, &sa, NULL) != 0)
        return -1;
    /* Registered only once the handler is in place: whoever reads the
     * registration may signal us at once. */
    atomic_store(&pass_on, vt__runlog_register_signal() == 0);
    return 0;
}

void vt__signal_init(void)
{
    atomic_store(&known_pid, getpid());
    pthread_atfork(NULL, NULL, signal_after_fork_child);
    int snap_sig = vt__config()->signal;
    bool on_term = vt__exit_snapshot_wanted();
    if (snap_sig <= 0 && !on_term)
        return;
    if (pipe2(sig_pipe, O_CLOEXEC) != 0)
        goto fail;
    fcntl(sig_pipe[1], F_SETFL, O_NONBLOCK);
    int rc = spawn_signal_thread();
    if (rc != 0) {
        errno = rc;
        goto fail;
    }
    snap_signal = snap_sig > 0 ? snap_sig : 0;
    if (snap_sig > 0 && install_snapshot_signal(snap_sig) != 0)
        goto fail;
    atomic_store(&term_enabled, on_term);
    for (size_t i = 0; on_term && i < sizeof term_signals / sizeof term_signals[0]; i++) {
        struct sigaction old;
        if (call_sigaction(term_signals[i], NULL, &old) == 0 && !(old.sa_flags & SA_SIGINFO)
            && old.sa_handler == SIG_DFL && install(term_signals[i], on_term_signal) == 0)
            atomic_store(&stands_for_default[term_signals[i]], true);
    }
    return;
fail:
    fprintf(stderr, "vramtrace: cannot set up snapshots on signals (%s)\n", strerror(errno));
}
