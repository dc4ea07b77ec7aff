/*
 * trace/common/demangle.h - C++ names as people read them.
 *
 * libstdc++'s own __cxa_demangle, wherever it can be had: the recorder asks
 * the process it runs in (a C++ program has libstdc++, also when a Python
 * extension brought it in privately, RTLD_LOCAL, where RTLD_DEFAULT does not
 * find it), and may not load anything; a reader (the CLI) may load it, so a
 * snapshot whose names were left mangled reads demangled on any machine with
 * libstdc++.
 */
#ifndef VT_COMMON_DEMANGLE_H
#define VT_COMMON_DEMANGLE_H

#include <stdbool.h>
#include <stddef.h>

typedef char *(*vt__demangle_fn)(const char *mangled, char *buf, size_t *len, int *status);

/* __cxa_demangle, or NULL when there is none: one loaded in the process (by
 * name or private), else, when `may_load`, libstdc++.so.6 loaded for it. */
vt__demangle_fn vt__demangler(bool may_load);

/* `name` demangled with `fn` (malloc'd, the caller frees), or NULL when it
 * is not a mangled C++ name or cannot be demangled. */
char *vt__demangle(vt__demangle_fn fn, const char *name);

#endif /* VT_COMMON_DEMANGLE_H */
