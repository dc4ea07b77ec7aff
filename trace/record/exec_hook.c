/*
 * trace/record/exec_hook.c - the exec family, so that a recording process writes its
 * snapshot before exec replaces it (atexit handlers never run across exec).
 *
 * Each wrapper calls vt__before_exec() and then the C library's own function
 * with the same arguments; errno and the return value are the library's. The
 * real functions are resolved when the recorder starts, never inside a
 * wrapper: a vfork() child shares the parent's memory and must not take the
 * dynamic linker's locks (vt__before_exec does nothing there either). The
 * execl* forms build their argv on the stack and call the matching v-form.
 */
#include "rec_internal.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <unistd.h>

#define VT_EXPORT __attribute__((visibility("default")))

typedef int (*execve_fn)(const char *, char *const[], char *const[]);
typedef int (*execvp_fn)(const char *, char *const[]);
typedef int (*fexecve_fn)(int, char *const[], char *const[]);

static execve_fn real_execve, real_execvpe;
static execvp_fn real_execv, real_execvp;
static fexecve_fn real_fexecve;

static void *next(const char *name)
{
    return dlsym(RTLD_NEXT, name);
}

void vt__exec_hooks_init(void)
{
    *(void **)&real_execve = next("execve");
    *(void **)&real_execvpe = next("execvpe");
    *(void **)&real_execv = next("execv");
    *(void **)&real_execvp = next("execvp");
    *(void **)&real_fexecve = next("fexecve");
}

static int missing(void)
{
    errno = ENOSYS;
    return -1;
}

VT_EXPORT int execve(const char *path, char *const argv[], char *const envp[])
{
    vt__before_exec();
    return real_execve ? real_execve(path, argv, envp) : missing();
}

VT_EXPORT int execvpe(const char *file, char *const argv[], char *const envp[])
{
    vt__before_exec();
    return real_execvpe ? real_execvpe(file, argv, envp) : missing();
}

VT_EXPORT int execv(const char *path, char *const argv[])
{
    vt__before_exec();
    return real_execv ? real_execv(path, argv) : missing();
}

VT_EXPORT int execvp(const char *file, char *const argv[])
{
    vt__before_exec();
    return real_execvp ? real_execvp(file, argv) : missing();
}

VT_EXPORT int fexecve(int fd, char *const argv[], char *const envp[])
{
    vt__before_exec();
    return real_fexecve ? real_fexecve(fd, argv, envp) : missing();
}

/* Declare `argv`: arg0 and the variadic arguments after it, up to and with
 * their NULL; leaves `ap` started, just past that NULL (execle's envp comes
 * next). A macro because only the variadic function itself can va_start
 * its arguments, and the list must live in its frame: the exec family is
 * async-signal-safe, callable in a forked child, so nothing here allocates. */
#define COLLECT_ARGV(arg0, argv, ap)                \
    size_t n_ = 1;                                  \
    va_start(ap, arg0);                             \
    while (va_arg(ap, char *) != NULL)              \
        n_++;                                       \
    va_end(ap);                                     \
    char *argv[n_ + 1];                             \
    va_start(ap, arg0);                             \
    argv[0] = (char *)(arg0);                       \
    for (size_t i_ = 1; i_ <= n_; i_++)             \
        argv[i_] = va_arg(ap, char *)

VT_EXPORT int execl(const char *path, const char *arg, ...)
{
    va_list ap;
    COLLECT_ARGV(arg, argv, ap);
    va_end(ap);
    return execv(path, argv);
}

VT_EXPORT int execlp(const char *file, const char *arg, ...)
{
    va_list ap;
    COLLECT_ARGV(arg, argv, ap);
    va_end(ap);
    return execvp(file, argv);
}

VT_EXPORT int execle(const char *path, const char *arg, ...)
{
    va_list ap;
    COLLECT_ARGV(arg, argv, ap);
    char *const *envp = va_arg(ap, char *const *);
    va_end(ap);
    return execve(path, argv, envp);
}
