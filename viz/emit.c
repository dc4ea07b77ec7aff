/* viz/emit.c - base64 and HTML text writers (see emit.h). */
#include "emit.h"

#include <errno.h>

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
