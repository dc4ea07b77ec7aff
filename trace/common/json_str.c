/* trace/common/json_str.c - JSON string literals (see json_str.h). */
#include "json_str.h"

#include <stdint.h>

/* Length of the valid UTF-8 sequence at p (1..4), 0 if invalid. */
static int utf8_len(const unsigned char *p)
{
    if (p[0] < 0x80)
        return 1;
    int n = p[0] >= 0xf0 && p[0] <= 0xf4 ? 4 : p[0] >= 0xe0 ? 3 : p[0] >= 0xc2 && p[0] < 0xe0 ? 2 : 0;
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

typedef void put_fn(void *ctx, const void *p, size_t n);

static void escape(const char *str, int in_script, put_fn *put, void *ctx)
{
    static const char hexd[] = "0123456789abcdef";
    const unsigned char *p = (const unsigned char *)(str ? str : "");
    const unsigned char *run = p;   /* bytes copied as they are */
    put(ctx, "\"", 1);
    while (*p) {
        unsigned char c = *p;
        int n = 1;
        const char *esc = NULL;
        char u[7] = { '\\', 'u', '0', '0', hexd[c >> 4], hexd[c & 15], 0 };
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
        else if (c < 0x20 || (in_script && (c == '<' || c == '>' || c == '&')))
            esc = u;
        else if ((n = utf8_len(p)) == 0) {
            esc = "\\ufffd";
            n = 1;
        }
        if (esc) {
            put(ctx, run, (size_t)(p - run));
            put(ctx, esc, strlen(esc));
            run = p + n;
        }
        p += n;
    }
    put(ctx, run, (size_t)(p - run));
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
    escape(s, 0, put_file, out);
}

void vt__put_json_str(vt__buf *b, const char *s, int in_script)
{
    escape(s, in_script, put_buf, b);
}
