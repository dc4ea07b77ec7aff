/*
 * viz/emit.h - the byte-level writers the HTML renderer needs: a growable
 * buffer, LEB128 varints, base64 and JSON strings that are safe inside an
 * inline <script> element.
 */
#ifndef VT_VIZ_EMIT_H
#define VT_VIZ_EMIT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* A growable byte buffer. Allocation failure is sticky: `failed` is set, later
 * writes are dropped, and the caller checks once at the end. */
typedef struct vt__buf {
    unsigned char *data;
    size_t len;
    size_t cap;
    int failed;            /* an allocation failed */
} vt__buf;

void vt__buf_free(vt__buf *b);
void vt__buf_put(vt__buf *b, const void *p, size_t n);
void vt__buf_puts(vt__buf *b, const char *s);
void vt__buf_printf(vt__buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Unsigned LEB128: 7 bits a byte, low first, high bit = more follows. */
void vt__buf_varint(vt__buf *b, uint64_t v);
/* Signed values as zigzag varints (0, -1, 1, -2 ... -> 0, 1, 2, 3 ...). */
void vt__buf_zigzag(vt__buf *b, int64_t v);
/* A JSON string literal, quotes included. '<', '>' and '&' are escaped so the
 * text can never close the <script> element it is embedded in. */
void vt__buf_json_str(vt__buf *b, const char *s);

/* Write `n` bytes as base64 (standard alphabet, padded, no line breaks).
 * @return 0 or -EIO. */
int vt__write_base64(FILE *f, const unsigned char *p, size_t n);

/* Write text with HTML's special characters escaped. @return 0 or -EIO. */
int vt__write_html_text(FILE *f, const char *s);

#endif /* VT_VIZ_EMIT_H */
