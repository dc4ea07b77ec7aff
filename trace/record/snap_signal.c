/*
 * trace/record/snap_signal.c - snapshots on the configured signal, and the exit
 * snapshot on SIGTERM, SIGINT and SIGHUP.
 *
 * A handler does nothing but count the request and write one byte to a pipe
 * (async-signal safe); a background thread started at initialization wakes
 * up and takes the snapshot, so no allocator state is ever touched from a
 * signal context. The counters, not the bytes, say what is owed: at exit the
 * snapshots still owed are written before the exit snapshot, never dropped.
 *
 * Termination signals: when an exit snapshot is asked for (VRAMTRACE_OUT) and
 * the program left SIGTERM/SIGINT/SIGHUP at their default action, the
 * handler only wakes the thread, which writes the exit snapshot and then
 * kills the process with the same signal at its default action, so the exit
 * status (and a core where the default makes one) is what it would have
 * been. The program runs on meanwhile, as if the signal had arrived a little
 * later; a second termination signal kills at once. A program that installs
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
#define NO_SANITIZE vt_no_sanitize

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

static void wake(void)
{
    char c = 0;
    if (write(sig_pipe[1], &c, 1) < 0) {
        /* Pipe full: the thread is awake already; the counters hold the rest. */
    }
}

static void on_snapshot_signal(int sig)
{
    (void)sig;
    int saved = errno;
    atomic_fetch_add(&snap_requested, 1);
    wake();
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
    /* No thread in this process (see signal_after_fork_child), or a second
     * signal while the snapshot is written: the default action, now. */
    if (getpid() != atomic_load(&thread_pid) || !atomic_compare_exchange_strong(&term_sig, &none, sig)) {
        die_of(sig);
        errno = saved;
        return;
    }
    wake();
    errno = saved;
}

/* Take the configured-signal snapshots still owed. */
static void take_owed(void)
{
    while (snap_done < atomic_load(&snap_requested)) {
        snap_done++;
        vt__snapshot_auto("signal");
    }
}

/* Posted by the signal thread once it runs: spawn_signal_thread returns
 * only then (below). */
static sem_t thread_running;

static void *signal_thread(void *arg)
{
    (void)arg;
    sem_post(&thread_running);
    char c;
    for (;;) {
        ssize_t n = read(sig_pipe[0], &c, 1);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return NULL;
        pthread_mutex_lock(&busy);
        take_owed();
        pthread_mutex_unlock(&busy);
        int sig = atomic_load(&term_sig);
        if (sig) {
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
    take_owed();
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
    if (snap_sig > 0 && install(snap_sig, on_snapshot_signal) != 0)
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
