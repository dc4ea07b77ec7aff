/* viz/emit.c - deflate, base64, HTML text and template writers (see emit.h). */
#include "emit.h"

#include <errno.h>
#include <limits.h>
#include <string.h>

#ifdef VT_HAVE_ZLIB
#include <zlib.h>

int vt__deflate(vt__buf *out, const unsigned char *p, size_t n)
{
    z_stream z = { 0 };
    /* Level 1: the columns are varints already; higher levels cost seconds
     * on 10M events for a few percent. */
    if (deflateInit(&z, 1) != Z_OK)
        return -ENOMEM;
    int rc = Z_OK;
    z.next_in = (unsigned char *)p;
    while (rc != Z_STREAM_END) {
        /* avail_in is 32 bits: feed a large input in pieces */
        if (z.avail_in == 0 && n) {
            z.avail_in = n > UINT_MAX / 2 ? UINT_MAX / 2 : (uInt)n;
            n -= z.avail_in;
        }
        if (!vt__buf_reserve(out, 1 << 20)) {
            deflateEnd(&z);
            return -ENOMEM;
        }
        z.next_out = out->p + out->n;
        z.avail_out = (uInt)(out->cap - out->n > UINT_MAX / 2 ? UINT_MAX / 2 : out->cap - out->n);
        uInt room = z.avail_out;
        rc = deflate(&z, n || z.avail_in ? Z_NO_FLUSH : Z_FINISH);
        out->n += room - z.avail_out;
        if (rc != Z_OK && rc != Z_STREAM_END && rc != Z_BUF_ERROR) {
            deflateEnd(&z);
            return -ENOMEM;
        }
    }
    deflateEnd(&z);
    return 0;
}
#else
int vt__deflate(vt__buf *out, const unsigned char *p, size_t n)
{
    (void)out; (void)p; (void)n;
    return -ENOTSUP;
}
#endif

int vt__write_base64(FILE *f, const unsigned char *p, size_t n)
{
    static const char al[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char out[4096];
    size_t o = 0;
    size_t i = 0;
    for (; i + 3 <= n; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8 | p[i + 2];
        out[o++] = al[v >> 18];
        out[o++] = al[(v >> 12) & 63];
        out[o++] = al[(v >> 6) & 63];
        out[o++] = al[v & 63];
        if (o == sizeof out) {
            if (fwrite(out, 1, o, f) != o)
                return -EIO;
            o = 0;
        }
    }
    if (i < n) {
        uint32_t v = (uint32_t)p[i] << 16 | (i + 1 < n ? (uint32_t)p[i + 1] << 8 : 0);
        out[o++] = al[v >> 18];
        out[o++] = al[(v >> 12) & 63];
        out[o++] = i + 1 < n ? al[(v >> 6) & 63] : '=';
        out[o++] = '=';
    }
    if (o && fwrite(out, 1, o, f) != o)
        return -EIO;
    return 0;
}

int vt__write_html_text(FILE *f, const char *s)
{
    for (; *s; s++) {
        const char *e = NULL;
        switch (*s) {
        case '&': e = "&amp;"; break;
        case '<': e = "&lt;"; break;
        case '>': e = "&gt;"; break;
        case '"': e = "&quot;"; break;
        default: break;
        }
        if (e ? fputs(e, f) < 0 : fputc(*s, f) == EOF)
            return -EIO;
    }
    return 0;
}

int vt__write_template(FILE *out, const char *t, vt__template_fill fill, void *ctx)
{
    while (*t) {
        const char *m = strstr(t, "@@VT_");
        size_t n = m ? (size_t)(m - t) : strlen(t);
        if (n && fwrite(t, 1, n, out) != n)
            return -EIO;
        if (!m)
            break;
        const char *end = strstr(m + 5, "@@");
        if (!end)
            return -EINVAL;
        int rc = fill(out, m + 5, (size_t)(end - (m + 5)), ctx);
        if (rc)
            return rc;
        t = end + 2;
    }
    return ferror(out) ? -EIO : 0;
}
