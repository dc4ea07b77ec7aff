/*
 * viz/emit.h - the byte-level writers the HTML renderer needs besides the
 * shared buffer, varints and JSON strings (buf.h, json_str.h): deflate,
 * base64, HTML text, and a page's template filled in.
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

/* What a page puts in place of its template's marker @@VT_KEY@@ (`key`,
 * `klen` bytes, without the VT_): written to `out`.
 * @return 0, -EINVAL for a key the page does not know, -EIO. */
typedef int (*vt__template_fill)(FILE *out, const char *key, size_t klen, void *ctx);

/* Copy template `t` (a page's, NUL-terminated) to `out`, each @@VT_KEY@@
 * marker replaced by what `fill` writes for it.
 * @return 0, -EINVAL (a marker not closed or not known), -EIO, or fill's
 *         own error. */
int vt__write_template(FILE *out, const char *t, vt__template_fill fill, void *ctx);

#endif /* VT_VIZ_EMIT_H */
