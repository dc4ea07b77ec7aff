/* trace/common/json_str.c - the string escaper (see json_str.h). */
#include "json_str.h"

#include <stdint.h>

/* Length of the valid UTF-8 sequence at p (1..4), 0 if invalid. */
static int utf8_len(const unsigned char *p)
{
    if (p[0] < 0x80)
        return 1;
    int n = p[0] >= 0xc2 && p[0] <= 0xdf ? 2
            : p[0] >= 0xe0 && p[0] <= 0xef ? 3
            : p[0] >= 0xf0 && p[0] <= 0xf4 ? 4 : 0;
    if (!n)
        return 0;
    for (int i = 1; i < n; i++)
        if ((p[i] & 0xc0) != 0x80)
            return 0;
    if (n == 3 && ((p[0] == 0xe0 && p[1] < 0xa0) || (p[0] == 0xed && p[1] >= 0xa0)))
        return 0;
    if (n == 4 && ((p[0] == 0xf0 && p[1] < 0x90) || (p[0] == 0xf4 && p[1] >= 0x90)))
        return 0;
    return n;
}

enum mode { JSON, JSON_SCRIPT, TEXT, UTF8 };

typedef void put_fn(void *ctx, const void *p, size_t n);

static void escape(const char *str, enum mode mode, put_fn *put, void *ctx)
{
    static const char hexd[] = "0123456789abcdef";
    const unsigned char *p = (const unsigned char *)(str ? str : "");
    const unsigned char *run = p;   /* bytes copied as they are */
    int json = mode == JSON || mode == JSON_SCRIPT;
    if (json)
        put(ctx, "\"", 1);
    while (*p) {
        unsigned char c = *p;
        int n = utf8_len(p);
        const char *esc = NULL;
        char u[7] = { '\\', 'u', '0', '0', hexd[c >> 4], hexd[c & 15], 0 };
        char x[5] = { '\\', 'x', hexd[c >> 4], hexd[c & 15], 0 };
        if (n == 0) {
            esc = json ? "\\ufffd" : "\xef\xbf\xbd";
            n = 1;
        } else if (json) {
            if (c == '"')
                esc = "\\\"";
            else if (c == '\\')
                esc = "\\\\";
            else if (c == '\n')
                esc = "\\n";
            else if (c == '\r')
                esc = "\\r";
            else if (c == '\t')
                esc = "\\t";
            else if (c < 0x20 || (mode == JSON_SCRIPT && (c == '<' || c == '>' || c == '&')))
                esc = u;
        } else if (mode == TEXT) {
            if (c < 0x20 || c == 0x7f)
                esc = x;
            else if (c == 0xc2 && p[1] < 0xa0) {   /* C1: U+0080..U+009F */
                x[2] = hexd[p[1] >> 4];
                x[3] = hexd[p[1] & 15];
                esc = x;
            }
        }
        if (esc) {
            put(ctx, run, (size_t)(p - run));
            put(ctx, esc, strlen(esc));
            run = p + n;
        }
        p += n;
    }
    put(ctx, run, (size_t)(p - run));
    if (json)
        put(ctx, "\"", 1);
}

static void put_file(void *ctx, const void *p, size_t n)
{
    if (n)
        fwrite(p, 1, n, ctx);
}

static void put_buf(void *ctx, const void *p, size_t n)
{
    vt__put_bytes(ctx, p, n);
}

void vt__json_str(FILE *out, const char *s)
{
    escape(s, JSON, put_file, out);
}

void vt__put_json_str(vt__buf *b, const char *s, int in_script)
{
    escape(s, in_script ? JSON_SCRIPT : JSON, put_buf, b);
}

void vt__text_str(FILE *out, const char *s)
{
    escape(s, TEXT, put_file, out);
}

void vt__put_text_str(vt__buf *b, const char *s)
{
    escape(s, TEXT, put_buf, b);
}

void vt__put_utf8_str(vt__buf *b, const char *s)
{
    escape(s, UTF8, put_buf, b);
}

int vt__utf8_valid(const char *s)
{
    for (const unsigned char *p = (const unsigned char *)s; *p;) {
        int n = utf8_len(p);
        if (!n)
            return 0;
        p += n;
    }
    return 1;
}
