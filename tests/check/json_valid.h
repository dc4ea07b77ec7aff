/* tests/check/json_valid.h - a strict little JSON validator (RFC 8259
 * grammar, no extensions) so the tests need no JSON library.
 * json_validate(text) returns NULL if `text` is exactly one JSON value
 * (surrounded by optional whitespace), else a short reason. */
#ifndef VT_TESTS_CHECK_JSON_VALID_H
#define VT_TESTS_CHECK_JSON_VALID_H

#include <ctype.h>
#include <string.h>

typedef struct jv { const char *p; const char *err; int depth; } jv;

static inline void jv_ws(jv *j) { while (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r') j->p++; }
static inline int jv_fail(jv *j, const char *why) { if (!j->err) j->err = why; return 0; }
static inline int jv_value(jv *j);

static inline int jv_string(jv *j)
{
    if (*j->p != '"') return jv_fail(j, "expected string");
    j->p++;
    for (;;) {
        unsigned char c = (unsigned char)*j->p;
        if (!c) return jv_fail(j, "unterminated string");
        if (c < 0x20) return jv_fail(j, "control character in string");
        j->p++;
        if (c == '"') return 1;
        if (c == '\\') {
            char e = *j->p++;
            if (e == 'u') {
                for (int i = 0; i < 4; i++, j->p++)
                    if (!isxdigit((unsigned char)*j->p)) return jv_fail(j, "bad \\u escape");
            } else if (!strchr("\"\\/bfnrt", e) || !e) {
                return jv_fail(j, "bad escape");
            }
        }
    }
}

static inline int jv_number(jv *j)
{
    if (*j->p == '-') j->p++;
    if (*j->p == '0') j->p++;
    else if (*j->p >= '1' && *j->p <= '9') while (isdigit((unsigned char)*j->p)) j->p++;
    else return jv_fail(j, "bad number");
    if (*j->p == '.') {
        j->p++;
        if (!isdigit((unsigned char)*j->p)) return jv_fail(j, "bad fraction");
        while (isdigit((unsigned char)*j->p)) j->p++;
    }
    if (*j->p == 'e' || *j->p == 'E') {
        j->p++;
        if (*j->p == '+' || *j->p == '-') j->p++;
        if (!isdigit((unsigned char)*j->p)) return jv_fail(j, "bad exponent");
        while (isdigit((unsigned char)*j->p)) j->p++;
    }
    return 1;
}

/* The members of an object (keyed: "name": value) or the elements of an
 * array, from the opening bracket through `close`. */
static inline int jv_items(jv *j, char close, int keyed)
{
    j->p++; jv_ws(j);
    if (*j->p == close) { j->p++; return 1; }
    for (;;) {
        jv_ws(j);
        if (keyed) {
            if (!jv_string(j)) return 0;
            jv_ws(j);
            if (*j->p++ != ':') return jv_fail(j, "expected ':'");
        }
        if (!jv_value(j)) return 0;
        jv_ws(j);
        if (*j->p == ',') { j->p++; continue; }
        if (*j->p == close) { j->p++; return 1; }
        return jv_fail(j, close == '}' ? "expected ',' or '}'" : "expected ',' or ']'");
    }
}

static inline int jv_value(jv *j)
{
    if (++j->depth > 200) return jv_fail(j, "too deep");
    jv_ws(j);
    int ok = 1;
    if (*j->p == '{') {
        ok = jv_items(j, '}', 1);
    } else if (*j->p == '[') {
        ok = jv_items(j, ']', 0);
    } else if (*j->p == '"') {
        ok = jv_string(j);
    } else if (!strncmp(j->p, "true", 4)) { j->p += 4;
    } else if (!strncmp(j->p, "false", 5)) { j->p += 5;
    } else if (!strncmp(j->p, "null", 4)) { j->p += 4;
    } else {
        ok = jv_number(j);
    }
    j->depth--;
    return ok;
}

static inline const char *json_validate(const char *text)
{
    jv j = { text, NULL, 0 };
    if (!text) return "no text";
    if (!jv_value(&j)) return j.err ? j.err : "invalid";
    jv_ws(&j);
    if (*j.p) return "trailing characters";
    return NULL;
}

/* Fails the test (harness.h's ASSERT_MSG, at the caller's line) unless
 * `text` is one JSON value; the message gives the reason and the text. */
#define ASSERT_JSON_VALID(text)                                             \
    do {                                                                    \
        const char *why_ = json_validate(text);                             \
        ASSERT_MSG(!why_, "invalid JSON (%s): %s", why_, (text));           \
    } while (0)

#endif /* VT_TESTS_CHECK_JSON_VALID_H */
