/*
 * alloc/hooks/dl_override.c - our dlsym, dlopen and dlclose.
 *
 * Why override dlsym: dlsym(handle, name) on a specific handle searches that
 * object and its dependencies, never the preloaded libvramtrace, so a runtime
 * or library that dlopens libcuda.so.1 and dlsyms cuGetProcAddress_v2 or
 * cuMemAllocAsync (the static CUDA runtime, CuPy, XLA, cudarc) would never
 * see the hooks. Our dlsym asks the real one and hands out the hook when the
 * answer is a hooked driver function (procaddr.c decides, by identity).
 *
 * Why the entry points are assembly: glibc's dlsym and dlopen look at their
 * return address. dlsym(RTLD_NEXT, ...) means "after the CALLER's object",
 * dlsym(RTLD_DEFAULT, ...) searches the caller's scope, and dlopen uses the
 * caller's RUNPATH and namespace. A C wrapper that calls the real function
 * would make every answer relative to libvramtrace. So the entry decides in C
 * (vt__hk_dlsym_route) and then JUMPS to the chosen function with the
 * caller's return address still on the stack: the real dlsym sees the
 * original caller. Only the handful of hooked names take the C path.
 *
 * Both glibc symbol versions are defined (dlsym@GLIBC_2.2.5 for binaries
 * built before glibc 2.34, dlsym@@GLIBC_2.34 after); the version nodes come
 * from hooks.map. The real functions come from dlvsym(RTLD_NEXT, ...), which
 * we do not override, so resolving them never re-enters our dlsym.
 */
#include <dlfcn.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "allocator.h"
#include "hooks_internal.h"
#include "recorder.h"

/* Bounds of libvramtrace in memory, defined by the linker. */
extern const char __ehdr_start[] __attribute__((visibility("hidden")));
extern char _end[] __attribute__((visibility("hidden")));

HK_EARLY bool vt__hk_is_self(const void *addr)
{
    return (const char *)addr >= __ehdr_start && (const char *)addr < _end;
}

typedef void *(*dlsym_fn)(void *, const char *);
typedef void *(*dlopen_fn)(const char *, int);

/* Read by the assembly entries: the real functions, once resolved. */
__attribute__((visibility("hidden"))) _Atomic(dlsym_fn) vt__hk_real_dlsym_fn;
__attribute__((visibility("hidden"))) _Atomic(dlopen_fn) vt__hk_real_dlopen_fn;

/* dlvsym hands back a data pointer; ISO C converts to function pointers only
 * through memcpy. A result inside libvramtrace is our own entry (an odd libc
 * search order) and would recurse: refuse it. */
HK_EARLY static void *real_by_version(const char *name)
{
    static const char *const versions[] = { "GLIBC_2.34", "GLIBC_2.2.5" };
    for (size_t i = 0; i < sizeof versions / sizeof versions[0]; i++) {
        void *p = dlvsym(RTLD_NEXT, name, versions[i]);
        if (p && !vt__hk_is_self(p))
            return p;
    }
    return NULL;
}

/* The real function `name`, resolved once into `cache`; NULL when libc has
 * none. */
#define REAL_ONCE(fn_type, cache, name)                                      \
    HK_EARLY static fn_type real_##name(void)                               \
    {                                                                       \
        fn_type f = atomic_load_explicit(&(cache), memory_order_acquire);   \
        if (vt__likely(f != NULL))                                           \
            return f;                                                       \
        void *p = real_by_version(#name);                                   \
        if (!p)                                                             \
            return NULL;                                                    \
        memcpy(&f, &p, sizeof f);                                           \
        atomic_store_explicit(&(cache), f, memory_order_release);           \
        return f;                                                           \
    }

/* real_dlsym() and real_dlopen(): a macro because the two caches have
 * different function types (and the assembly entries read them as such). */
REAL_ONCE(dlsym_fn, vt__hk_real_dlsym_fn, dlsym)
REAL_ONCE(dlopen_fn, vt__hk_real_dlopen_fn, dlopen)

void *vt__hk_real_dlsym(void *handle, const char *name)
{
    dlsym_fn f = real_dlsym();
    return f ? f(handle, name) : NULL;
}

/* The C half of a dlsym whose name is hooked: ask the real dlsym (relative to
 * libvramtrace; for RTLD_NEXT that finds the driver's function, which is the
 * one to replace) and hand out the hook if the answer is a hooked one. */
__attribute__((visibility("hidden"))) void *vt__hk_dlsym_hooked(void *handle, const char *name);
void *vt__hk_dlsym_hooked(void *handle, const char *name)
{
    void *p = vt__hk_real_dlsym(handle, name);
    if (!p)
        return NULL;
    return vt__hk_substitute(name, p, 0, false);
}

/* Called by the dlsym entry. @return the function to jump to with the
 * caller's arguments and return address: the real dlsym, or
 * vt__hk_dlsym_hooked; NULL when there is no real dlsym (dlsym returns NULL). */
__attribute__((visibility("hidden"))) void *vt__hk_dlsym_route(void *handle, const char *name,
                                                               const void *caller);
HK_EARLY void *vt__hk_dlsym_route(void *handle, const char *name, const void *caller)
{
    (void)handle;
    dlsym_fn f = real_dlsym();
    if (vt__unlikely(f == NULL))
        return NULL;
    void *target;
    /* An embedder looks up libpython's entry points after loading it: the
     * recorder looks for Python again (vt__trace_modules_loaded). */
    if (!vt__hk_is_self(caller)) {
        vt__trace_modules_loaded();
        vt__alloc_ipc_loads_changed();
    }
    /* vramtrace itself (the allocator's driver table) always gets the truth. */
    if (name && vt__hk_is_hooked_name(name) && !vt__hk_is_self(caller)) {
        dlsym_fn h = vt__hk_dlsym_hooked;
        memcpy(&target, &h, sizeof target);
    } else {
        memcpy(&target, &f, sizeof target);
    }
    return target;
}

/* A library loaded with RTLD_DEEPBIND resolves its own dependencies before the
 * global scope: its cudaMalloc binds to its libcudart, its dlsym to libc's, and
 * the preload never sees its allocations. We cannot undo that (the flag is the
 * library's explicit wish); we say so once. */
static atomic_int deepbind_warned;

__attribute__((visibility("hidden"))) void *vt__hk_dlopen_route(const char *file, int flags,
                                                                const void *caller);
HK_EARLY void *vt__hk_dlopen_route(const char *file, int flags, const void *caller)
{
    dlopen_fn f = real_dlopen();
    /* The library may be libpython: the recorder looks for Python again at
     * its next capture (it cannot after the load: we jump, not call). */
    if (!vt__hk_is_self(caller)) {
        vt__trace_modules_loaded();
        vt__alloc_ipc_loads_changed();   /* the IPC-safe mode looks at it too */
    }
    if ((flags & RTLD_DEEPBIND) && file && !vt__hk_is_self(caller)
        && !atomic_exchange(&deepbind_warned, 1))
        fprintf(stderr, "vramtrace: %s is loaded with RTLD_DEEPBIND: the CUDA calls it and "
                        "its dependencies make may bypass vramtrace (not cached, not traced)\n",
                file);
    void *target;
    memcpy(&target, &f, sizeof target);
    return target;
}

/* dlclose: after a library is unloaded, libunwind's cache and the recorder's
 * remembered stack walks may describe code that is gone (or that a later
 * dlopen maps at the same address), so the recorder forgets them. The
 * caller's address does not matter to dlclose: a plain C wrapper will do. */
typedef int (*dlclose_fn)(void *);
static _Atomic(dlclose_fn) real_dlclose_fn;

static int dlclose_common(void *handle)
{
    dlclose_fn f = atomic_load_explicit(&real_dlclose_fn, memory_order_acquire);
    if (vt__unlikely(f == NULL)) {
        void *p = real_by_version("dlclose");
        if (!p)
            return -1;   /* no dlclose in this process: dlerror() has the reason */
        memcpy(&f, &p, sizeof f);
        atomic_store_explicit(&real_dlclose_fn, f, memory_order_release);
    }
    int rc = f(handle);
    if (rc == 0)
        vt__trace_modules_changed();
    return rc;
}

__attribute__((visibility("default"))) int vt__hk_dlclose(void *handle);
__attribute__((visibility("default"))) int vt__hk_dlclose_old(void *handle);
int vt__hk_dlclose(void *handle) { return dlclose_common(handle); }
int vt__hk_dlclose_old(void *handle) { return dlclose_common(handle); }
__asm__(".symver vt__hk_dlclose, dlclose@@GLIBC_2.34\n"
        ".symver vt__hk_dlclose_old, dlclose@GLIBC_2.2.5\n");

#if defined(__x86_64__)
/* Both entries: keep the arguments, ask the route (C) with the caller's return
 * address, restore the arguments and jump. At entry %rsp is 8 mod 16; two
 * pushes and 8 more bytes align it for the call. */
#define HK_DL_ENTRY(entry, route)                                              \
    "    .p2align 4\n"                                                          \
    "    .globl " entry "\n"                                                    \
    "    .type " entry ", @function\n"                                          \
    entry ":\n"                                                                 \
    "    .cfi_startproc\n"                                                      \
    "    pushq %rdi\n"                                                          \
    "    .cfi_adjust_cfa_offset 8\n"                                            \
    "    pushq %rsi\n"                                                          \
    "    .cfi_adjust_cfa_offset 8\n"                                            \
    "    subq $8, %rsp\n"                                                       \
    "    .cfi_adjust_cfa_offset 8\n"                                            \
    "    movq 24(%rsp), %rdx\n"                                                 \
    "    call " route "\n"                                                      \
    "    addq $8, %rsp\n"                                                       \
    "    .cfi_adjust_cfa_offset -8\n"                                           \
    "    popq %rsi\n"                                                           \
    "    .cfi_adjust_cfa_offset -8\n"                                           \
    "    popq %rdi\n"                                                           \
    "    .cfi_adjust_cfa_offset -8\n"                                           \
    "    testq %rax, %rax\n"                                                    \
    "    jz 1f\n"                                                               \
    "    jmp *%rax\n"                                                           \
    "1:  xorl %eax, %eax\n"                                                     \
    "    ret\n"                                                                 \
    "    .cfi_endproc\n"                                                        \
    "    .size " entry ", .-" entry "\n"

__asm__(
    "    .pushsection .text\n"
    HK_DL_ENTRY("vt__hk_dlsym_entry", "vt__hk_dlsym_route")
    HK_DL_ENTRY("vt__hk_dlsym_entry_old", "vt__hk_dlsym_route")
    HK_DL_ENTRY("vt__hk_dlopen_entry", "vt__hk_dlopen_route")
    HK_DL_ENTRY("vt__hk_dlopen_entry_old", "vt__hk_dlopen_route")
    "    .symver vt__hk_dlsym_entry, dlsym@@GLIBC_2.34\n"
    "    .symver vt__hk_dlsym_entry_old, dlsym@GLIBC_2.2.5\n"
    "    .symver vt__hk_dlopen_entry, dlopen@@GLIBC_2.34\n"
    "    .symver vt__hk_dlopen_entry_old, dlopen@GLIBC_2.2.5\n"
    "    .popsection\n");
#else
/* Other architectures: no dlsym/dlopen override yet (a C wrapper would make
 * RTLD_NEXT and dlopen's RUNPATH relative to libvramtrace). Programs that
 * reach the driver through dlsym then bypass the cache there. */
#endif
