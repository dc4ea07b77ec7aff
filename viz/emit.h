/*
 * viz/emit.h - the byte-level writers the HTML renderer needs besides the
 * shared buffer, varints and JSON strings (buf.h, json_str.h): deflate,
 * base64 and HTML text.
 */
#ifndef VT_VIZ_EMIT_H
#define VT_VIZ_EMIT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "buf.h"
#include "json_str.h"

/* Append `n` bytes deflated (the zlib format, which a browser's
 * DecompressionStream('deflate') reads) to `out`.
 * @return 0, -ENOTSUP when built without zlib, -ENOMEM. */
int vt__deflate(vt__buf *out, const unsigned char *p, size_t n);

/* Write `n` bytes as base64 (standard alphabet, padded, no line breaks).
 * @return 0 or -EIO. */
int vt__write_base64(FILE *f, const unsigned char *p, size_t n);

/* Write text with HTML's special characters escaped. @return 0 or -EIO. */
int vt__write_html_text(FILE *f, const char *s);

#endif /* VT_VIZ_EMIT_H */
