/* viz/emit.c - buffer, varint, base64 and JSON writers (see emit.h). */
#include "emit.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

void vt__buf_free(vt__buf *b)
{
    free(b->data);
    *b = (vt__buf){ 0 };
}

static int reserve(vt__buf *b, size_t more)
{
    if (b->failed)
        return -1;
    if (b->len + more <= b->cap)
        return 0;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + more) {
        if (cap > SIZE_MAX / 2) {
            b->failed = 1;
            return -1;
        }
        cap *= 2;
    }
    unsigned char *p = realloc(b->data, cap);
    if (!p) {
        b->failed = 1;
        return -1;
    }
    b->data = p;
    b->cap = cap;
    return 0;
}

void vt__buf_put(vt__buf *b, const void *p, size_t n)
{
    if (n == 0 || reserve(b, n))
        return;
    memcpy(b->data + b->len, p, n);
    b->len += n;
}

void vt__buf_puts(vt__buf *b, const char *s)
{
    vt__buf_put(b, s, strlen(s));
}

void vt__buf_printf(vt__buf *b, const char *fmt, ...)
{
    char small[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if ((size_t)n < sizeof small) {
        vt__buf_put(b, small, (size_t)n);
        return;
    }
    if (reserve(b, (size_t)n + 1))
        return;
    va_start(ap, fmt);
    vsnprintf((char *)b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

void vt__buf_varint(vt__buf *b, uint64_t v)
{
    unsigned char tmp[10];
    size_t n = 0;
    do {
        unsigned char byte = v & 0x7f;
        v >>= 7;
        tmp[n++] = byte | (v ? 0x80 : 0);
    } while (v);
    vt__buf_put(b, tmp, n);
}

void vt__buf_zigzag(vt__buf *b, int64_t v)
{
    vt__buf_varint(b, v >= 0 ? (uint64_t)v << 1 : (((uint64_t)(-(v + 1))) << 1) | 1);
}

void vt__buf_json_str(vt__buf *b, const char *s)
{
    static const char hexd[] = "0123456789abcdef";
    vt__buf_put(b, "\"", 1);
    const char *run = s;
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&')
            continue;
        vt__buf_put(b, run, (size_t)(s - run));
        char e[7] = { '\\', 'u', '0', '0', hexd[c >> 4], hexd[c & 15], 0 };
        if (c == '"')
            vt__buf_puts(b, "\\\"");
        else if (c == '\\')
            vt__buf_puts(b, "\\\\");
        else if (c == '\n')
            vt__buf_puts(b, "\\n");
        else if (c == '\t')
            vt__buf_puts(b, "\\t");
        else
            vt__buf_put(b, e, 6);
        run = s + 1;
    }
    vt__buf_put(b, run, (size_t)(s - run));
    vt__buf_put(b, "\"", 1);
}

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
