/* trace/common/json_str.h - the one JSON string escaper, for every view that
 * prints JSON (vramtrace json, check --json, export, the viz page): the same
 * text always comes out the same. Quotes and backslashes are escaped, \n \r \t
 * by name, other control characters as \u00XX, invalid UTF-8 as U+FFFD; NULL
 * is the empty string. */
#ifndef VT_COMMON_JSON_STR_H
#define VT_COMMON_JSON_STR_H

#include <stdio.h>

#include "buf.h"

/* A JSON string literal, quotes included, to `out`. */
void vt__json_str(FILE *out, const char *s);

/* The same into a buffer. With `in_script` '<', '>' and '&' are escaped too,
 * so the text can never close an inline <script> element it is embedded in. */
void vt__put_json_str(vt__buf *b, const char *s, int in_script);

#endif
