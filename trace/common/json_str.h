/* trace/common/json_str.h - the one string escaper, for every output that
 * shows text it did not write itself (names of functions, files, tensors,
 * marks: whatever a snapshot or a pickle holds).
 *
 * Every form replaces invalid UTF-8 (a stray byte, a lead byte no sequence
 * starts with, an overlong form, a surrogate, a cut sequence) with U+FFFD, one
 * per byte, so that what comes out is always valid UTF-8.
 *  - JSON: quotes and backslashes escaped, \n \r \t by name, other control
 *    characters as \u00XX; NULL is the empty string. The same text always
 *    comes out the same (vramtrace json, check --json, export, the viz pages).
 *  - JSON in a script: '<', '>' and '&' as \u00XX too, so the text can never
 *    close the <script> element of an HTML page it is embedded in. Every page
 *    embeds its data this way.
 *  - terminal text: control characters (C0, DEL, C1) as \xNN, so a name can
 *    neither start a new line of a report nor send an escape sequence.
 *  - plain UTF-8: only the invalid bytes replaced (pickle strings). */
#ifndef VT_COMMON_JSON_STR_H
#define VT_COMMON_JSON_STR_H

#include <stddef.h>
#include <stdio.h>

#include "buf.h"

/* A JSON string literal, quotes included, to `out`. */
void vt__json_str(FILE *out, const char *s);

/* The same into a buffer. With `in_script` '<', '>' and '&' are escaped too,
 * so the text can never close an inline <script> element it is embedded in. */
void vt__put_json_str(vt__buf *b, const char *s, int in_script);

/* `s` for a terminal (no quotes added), to `out`. */
void vt__text_str(FILE *out, const char *s);

/* The same into a buffer (no NUL added). */
void vt__put_text_str(vt__buf *b, const char *s);

/* `s` with its invalid UTF-8 replaced, into a buffer (no NUL added). */
void vt__put_utf8_str(vt__buf *b, const char *s);

/* Is `s` valid UTF-8 (vt__put_utf8_str would copy it unchanged)? */
int vt__utf8_valid(const char *s);

#endif
