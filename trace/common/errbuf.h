/* trace/errbuf.h - the one way a function that fails says why: it writes one
 * line into the caller's buffer (err, errlen; NULL or 0 for none) and returns
 * its error code, so that `return vt__errf(err, errlen, -EINVAL, "...")` is a
 * whole failure path. Used by the reader/writer library, the checker and the
 * viz; header-only so that each of them stays buildable on its own. */
#ifndef VT_TRACE_ERRBUF_H
#define VT_TRACE_ERRBUF_H

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>

static inline int vt__errf(char *err, size_t errlen, int rc, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static inline int vt__errf(char *err, size_t errlen, int rc, const char *fmt, ...)
{
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return rc;
}

#endif
