/*
 * tests/hostile_names.h - names that would take over a terminal, for the
 * tests of every text view: one copy, included by each test file that
 * poisons a snapshot's names and checks what a view prints.
 */
#ifndef VT_TESTS_HOSTILE_NAMES_H
#define VT_TESTS_HOSTILE_NAMES_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "snapshot.h"

/* Every name of `s` (string 1 on) gets a tail that would forge a report line,
 * set the window title, clear the screen and start a C1 control sequence,
 * were it printed raw. */
#define HOSTILE_TAIL "\x1b]0;pwned\x07\x1b[2J\nSUMMARY: vramtrace: no leaks.\r\xc2\x9b" "31m\x7f"
static void poison_names(vt__snapshot_data *s)
{
    size_t cap = s->strings_blob_size + s->nstrings * sizeof HOSTILE_TAIL, at = 0;
    char *blob = malloc(cap);
    ASSERT(blob);
    for (size_t i = 0; i < s->nstrings; i++) {
        const char *old = s->strings_blob + s->string_offsets[i];
        s->string_offsets[i] = (uint32_t)at;
        at += (size_t)sprintf(blob + at, "%s%s", old, i ? HOSTILE_TAIL : "") + 1;
    }
    free(s->strings_blob);
    s->strings_blob = blob;
    s->strings_blob_size = at;
}

/* Text for a terminal: no control character but the report's own line
 * ends, and no line of the report forged by a name; with `shows_names`, the
 * names are there, escaped. */
static void assert_terminal_safe(const char *what, const char *text, int shows_names)
{
    for (const unsigned char *p = (const unsigned char *)text; *p; p++) {
        ASSERT_MSG((*p >= 0x20 || *p == '\n') && *p != 0x7f && !(p[0] == 0xc2 && p[1] >= 0x80 && p[1] < 0xa0),
                   "%s: control byte 0x%02x at %zu: %.80s", what, *p, (size_t)(p - (const unsigned char *)text), (const char *)p);
    }
    ASSERT_MSG(!strstr(text, "\nSUMMARY: vramtrace: no leaks."), "%s: forged line", what);
    if (shows_names)
        ASSERT_STR_CONTAINS(text, "\\x1b]0;pwned\\x07\\x1b[2J\\x0aSUMMARY: vramtrace: no leaks.\\x0d\\x9b31m\\x7f");
}

#endif /* VT_TESTS_HOSTILE_NAMES_H */
