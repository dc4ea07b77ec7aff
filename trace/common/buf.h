/*
 * trace/common/buf.h - the one byte buffer, LEB128 varint and zigzag: the
 * growable vt__buf the snapshot writer, the pickle writer and the viz write
 * into, and the bounds-checked vt__cur the readers read from.
 *
 * A failed allocation is sticky: `oom` is set, later writes are dropped, and
 * the writer checks once at the end.
 *
 * The reader's cursor never reads past its end: a failed read sets `bad`
 * and returns 0, so decoders check once per item instead of per field.
 */
#ifndef VT_COMMON_BUF_H
#define VT_COMMON_BUF_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

static inline uint64_t vt__zigzag(int64_t v) { return ((uint64_t)v << 1) ^ (uint64_t)(v >> 63); }
static inline int64_t vt__unzigzag(uint64_t v) { return (int64_t)(v >> 1) ^ -(int64_t)(v & 1); }

/* ---- writer buffer ------------------------------------------------------ */

typedef struct vt__buf {
    unsigned char *p;
    size_t n, cap;
    int oom;                 /* sticky: an allocation failed */
} vt__buf;

static inline void vt__buf_free(vt__buf *b)
{
    free(b->p);
    *b = (vt__buf){ 0 };
}

/* Room for `extra` more bytes. @return 1, or 0 after an allocation failed. */
static inline int vt__buf_reserve(vt__buf *b, size_t extra)
{
    if (b->oom)
        return 0;
    if (extra <= b->cap - b->n)
        return 1;
    size_t c = b->cap ? b->cap : 256;
    while (c - b->n < extra) {
        if (c > SIZE_MAX / 2) {
            b->oom = 1;
            return 0;
        }
        c *= 2;
    }
    unsigned char *q = realloc(b->p, c);
    if (!q) {
        b->oom = 1;
        return 0;
    }
    b->p = q;
    b->cap = c;
    return 1;
}

static inline void vt__put_u8(vt__buf *b, uint8_t v)
{
    if (vt__buf_reserve(b, 1))
        b->p[b->n++] = v;
}

static inline void vt__put_bytes(vt__buf *b, const void *d, size_t len)
{
    if (len && vt__buf_reserve(b, len)) {
        memcpy(b->p + b->n, d, len);
        b->n += len;
    }
}

static inline void vt__put_varint(vt__buf *b, uint64_t v)
{
    if (!vt__buf_reserve(b, 10))
        return;
    unsigned char *p = b->p + b->n;
    while (v >= 0x80) {
        *p++ = (unsigned char)(v | 0x80);
        v >>= 7;
    }
    *p++ = (unsigned char)v;
    b->n = (size_t)(p - b->p);
}

static inline void vt__put_svarint(vt__buf *b, int64_t v) { vt__put_varint(b, vt__zigzag(v)); }

static inline void vt__put_str(vt__buf *b, const char *s) { vt__put_bytes(b, s, strlen(s)); }

static inline void vt__put_printf(vt__buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static inline void vt__put_printf(vt__buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n <= 0 || !vt__buf_reserve(b, (size_t)n + 1))
        return;
    va_start(ap, fmt);
    vsnprintf((char *)b->p + b->n, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->n += (size_t)n;
}

static inline void vt__put_le(vt__buf *b, uint64_t v, int bytes)
{
    for (int i = 0; i < bytes; i++)
        vt__put_u8(b, (uint8_t)(v >> (8 * i)));
}

/* ---- reader cursor ------------------------------------------------------ */

typedef struct vt__cur {
    const unsigned char *p, *end, *start;
    int bad;                 /* sticky: VT_CUR_* why a read failed, 0 while fine */
} vt__cur;

/* vt__cur.bad: the first reason a read failed. */
enum { VT_CUR_OK = 0, VT_CUR_TRUNCATED = 1, VT_CUR_OVERLONG = 2 };

static inline void vt__cur_fail(vt__cur *c, int why)
{
    if (!c->bad)
        c->bad = why;
}

static inline vt__cur vt__cur_make(const void *p, size_t n)
{
    vt__cur c = { p, (const unsigned char *)p + n, p, 0 };
    return c;
}

static inline size_t vt__cur_off(const vt__cur *c) { return (size_t)(c->p - c->start); }
static inline size_t vt__cur_left(const vt__cur *c) { return (size_t)(c->end - c->p); }

static inline uint8_t vt__get_u8(vt__cur *c)
{
    if (c->p >= c->end) {
        vt__cur_fail(c, VT_CUR_TRUNCATED);
        return 0;
    }
    return *c->p++;
}

static inline uint64_t vt__get_varint(vt__cur *c)
{
    const unsigned char *p = c->p;
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        if (p >= c->end) {
            vt__cur_fail(c, VT_CUR_TRUNCATED);
            return 0;
        }
        unsigned char x = *p++;
        if (shift == 63 && x > 1) { /* more than 64 bits */
            vt__cur_fail(c, VT_CUR_OVERLONG);
            return 0;
        }
        v |= (uint64_t)(x & 0x7f) << shift;
        if (!(x & 0x80)) {
            c->p = p;
            return v;
        }
    }
    vt__cur_fail(c, VT_CUR_OVERLONG);   /* 10 bytes, all with "more follows" */
    return 0;
}

/* Why a cursor failed, for messages. */
static inline const char *vt__cur_why(const vt__cur *c)
{
    return c->bad == VT_CUR_OVERLONG ? "has a varint longer than 10 bytes (malformed)"
                                     : "is truncated";
}

static inline int64_t vt__get_svarint(vt__cur *c) { return vt__unzigzag(vt__get_varint(c)); }

static inline uint64_t vt__rd_le(const unsigned char *p, int bytes)
{
    uint64_t v = 0;
    for (int i = bytes - 1; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

#endif /* VT_COMMON_BUF_H */
