/* trace/common/errbuf.h - the one way a function that fails says why: it
 * writes one line into the caller's buffer (err, errlen; NULL or 0 for none)
 * and returns its error code, so that
 * `return vt__errf(err, errlen, -EINVAL, "...")` is a whole failure path.
 * vt__errf_in() puts the name of what failed ("file.vtsnap: ") first, as the
 * readers do. Header-only so that every product stays buildable on its own. */
#ifndef VT_COMMON_ERRBUF_H
#define VT_COMMON_ERRBUF_H

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>

static inline int vt__verrf_in(char *err, size_t errlen, int rc, const char *name,
                               const char *fmt, va_list ap)
{
    if (!err || !errlen)
        return rc;
    size_t n = 0;
    if (name) {
        int k = snprintf(err, errlen, "%s: ", name);
        n = k > 0 && (size_t)k < errlen ? (size_t)k : 0;
    }
    vsnprintf(err + n, errlen - n, fmt, ap);
    return rc;
}

static inline int vt__errf(char *err, size_t errlen, int rc, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static inline int vt__errf(char *err, size_t errlen, int rc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vt__verrf_in(err, errlen, rc, NULL, fmt, ap);
    va_end(ap);
    return rc;
}

/* "NAME: message" (name may be NULL: the message alone). */
static inline int vt__errf_in(char *err, size_t errlen, int rc, const char *name,
                              const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static inline int vt__errf_in(char *err, size_t errlen, int rc, const char *name,
                              const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vt__verrf_in(err, errlen, rc, name, fmt, ap);
    va_end(ap);
    return rc;
}

#endif
