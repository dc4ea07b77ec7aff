/* tests/common/test_helpers.c - the helpers every product shares
 * (trace/common/): one byte formatter, one JSON string escaper, one buffer
 * with varints, one growable array, one error-buffer helper. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "errbuf.h"
#include "format_bytes.h"
#include "grow.h"
#include "harness.h"
#include "json_str.h"
#include "u64map.h"

#define MiB (1024ull * 1024)

TEST(sizes_use_binary_units_with_at_most_two_decimals)
{
    char b[VT_FMT_BYTES_LEN];
    ASSERT_STR_EQ(vt__fmt_bytes(0, b), "0 B");
    ASSERT_STR_EQ(vt__fmt_bytes(512, b), "512 B");
    ASSERT_STR_EQ(vt__fmt_bytes(1536, b), "1.5 KiB");
    ASSERT_STR_EQ(vt__fmt_bytes(64 * MiB, b), "64 MiB");
    ASSERT_STR_EQ(vt__fmt_bytes(2 * 1024 * MiB + 256 * MiB, b), "2.25 GiB");
    ASSERT_STR_EQ(vt__fmt_bytes(UINT64_MAX, b), "16 EiB");
    ASSERT_STR_EQ(vt__fmt_byte_seconds(3.0 * MiB, b), "3.00 MiB\xc2\xb7s");
    ASSERT_STR_EQ(vt__fmt_byte_seconds(-1, b), "0.00 B\xc2\xb7s");
}

TEST(durations_use_s_ms_or_us_with_three_digits)
{
    char b[VT_FMT_BYTES_LEN];
    ASSERT_STR_EQ(vt__fmt_duration(62300, b), "62.3 \xc2\xb5s");
    ASSERT_STR_EQ(vt__fmt_duration(62500000, b), "62.5 ms");
    ASSERT_STR_EQ(vt__fmt_duration(1250000000, b), "1.25 s");
    ASSERT_STR_EQ(vt__fmt_duration(86400000000000ull, b), "86400 s");
    ASSERT_STR_EQ(vt__fmt_duration(0, b), "0 \xc2\xb5s");
}

/* The JSON text of `s` through the FILE writer. */
static char *json_file(const char *s)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    ASSERT(f != NULL);
    vt__json_str(f, s);
    fclose(f);
    return text;
}

/* The JSON text of `s` through the buffer writer. */
static char *json_buf(const char *s, int in_script)
{
    vt__buf b = { 0 };
    vt__put_json_str(&b, s, in_script);
    vt__put_u8(&b, 0);
    ASSERT(!b.oom);
    return (char *)b.p;
}

TEST(json_strings_escape_quotes_controls_and_invalid_utf8)
{
    static const struct { const char *in, *out; } cases[] = {
        { "plain", "\"plain\"" },
        { "say \"hi\"\\", "\"say \\\"hi\\\"\\\\\"" },
        { "a\nb\tc\rd\x01", "\"a\\nb\\tc\\rd\\u0001\"" },
        { "caf\xc3\xa9 \xe2\x86\x92", "\"caf\xc3\xa9 \xe2\x86\x92\"" },  /* valid UTF-8 kept */
        { "bad \xff end", "\"bad \\ufffd end\"" },
        { "cut \xe2\x86", "\"cut \\ufffd\\ufffd\"" },
        /* lead bytes no sequence starts with, followed by continuation bytes */
        { "\xf8\x80\x80", "\"\\ufffd\\ufffd\\ufffd\"" },
        { "\xf5\x80\x80\x80|\xff\xbf\xbf", "\"\\ufffd\\ufffd\\ufffd\\ufffd|\\ufffd\\ufffd\\ufffd\"" },
        { "\xc0\xaf \xed\xa0\x80", "\"\\ufffd\\ufffd \\ufffd\\ufffd\\ufffd\"" },  /* overlong, surrogate */
        { "<b>&", "\"<b>&\"" },
        { NULL, "\"\"" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *f = json_file(cases[i].in), *b = json_buf(cases[i].in, 0);
        ASSERT_STR_EQ(f, cases[i].out);
        ASSERT_STR_EQ(b, cases[i].out);
        free(f);
        free(b);
    }
}

/* Terminal text: no control character gets through (a name cannot start a
 * line of its own or send an escape sequence), and the text is valid UTF-8. */
TEST(text_strings_escape_control_characters_and_invalid_utf8)
{
    static const struct { const char *in, *out; } cases[] = {
        { "plain caf\xc3\xa9", "plain caf\xc3\xa9" },
        { "a.py\nSUMMARY: vramtrace: no leaks.", "a.py\\x0aSUMMARY: vramtrace: no leaks." },
        { "\x1b]0;title\x07\x1b[2J", "\\x1b]0;title\\x07\\x1b[2J" },
        { "del\x7f c1\xc2\x9b[2J", "del\\x7f c1\\x9b[2J" },
        { "nbsp\xc2\xa0 bad\xff", "nbsp\xc2\xa0 bad\xef\xbf\xbd" },
        { NULL, "" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *text = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&text, &len);
        ASSERT(f != NULL);
        vt__text_str(f, cases[i].in);
        fclose(f);
        ASSERT_STR_EQ(text, cases[i].out);
        free(text);
    }
    vt__buf b = { 0 };
    vt__put_utf8_str(&b, "caf\xe9 \xe2\x86\x92\n");
    vt__put_u8(&b, 0);
    ASSERT_STR_EQ((char *)b.p, "caf\xef\xbf\xbd \xe2\x86\x92\n");
    ASSERT(vt__utf8_valid((char *)b.p));
    ASSERT(!vt__utf8_valid("caf\xe9"));
    vt__buf_free(&b);
}

TEST(json_strings_inside_a_script_cannot_close_it)
{
    char *b = json_buf("</script><b>&", 1);
    ASSERT_STR_EQ(b, "\"\\u003c/script\\u003e\\u003cb\\u003e\\u0026\"");
    free(b);
}

TEST(varints_and_zigzag_round_trip)
{
    static const int64_t values[] = { 0, 1, -1, 63, -64, 64, 300, -300, INT64_MAX, INT64_MIN };
    vt__buf b = { 0 };
    for (size_t i = 0; i < sizeof values / sizeof values[0]; i++) {
        vt__put_svarint(&b, values[i]);
        vt__put_varint(&b, (uint64_t)values[i]);
    }
    vt__put_printf(&b, "%s-%d", "end", 7);
    ASSERT(!b.oom);
    vt__cur c = vt__cur_make(b.p, b.n);
    for (size_t i = 0; i < sizeof values / sizeof values[0]; i++) {
        ASSERT_EQ(vt__get_svarint(&c), values[i]);
        ASSERT_EQ(vt__get_varint(&c), (uint64_t)values[i]);
    }
    ASSERT_EQ(vt__cur_left(&c), 5);
    ASSERT(!memcmp(c.p, "end-7", 5));
    ASSERT_EQ(vt__zigzag(-1), 1);
    ASSERT_EQ(vt__zigzag(1), 2);
    c.p = c.end;   /* a read past the end fails, sticky, and returns 0 */
    ASSERT_EQ(vt__get_varint(&c), 0);
    ASSERT_EQ(c.bad, VT_CUR_TRUNCATED);
    vt__buf_free(&b);
    ASSERT(b.p == NULL && b.n == 0);
}

TEST(grow_doubles_and_refuses_an_overflowing_size)
{
    int *a = NULL;
    size_t cap = 0;
    ASSERT_EQ(vt__grow((void **)&a, &cap, 1, sizeof *a), 0);
    ASSERT_EQ(cap, 16);
    ASSERT_EQ(vt__grow((void **)&a, &cap, 17, sizeof *a), 0);
    ASSERT_EQ(cap, 32);
    a[31] = 7;
    ASSERT_EQ(vt__grow((void **)&a, &cap, SIZE_MAX / 2, sizeof *a), -ENOMEM);
    ASSERT_EQ(cap, 32);
    ASSERT_EQ(a[31], 7);
    free(a);
}

TEST(grow_push_appends_zeroed_elements_from_the_first_capacity_asked)
{
    uint64_t *a = NULL;
    size_t cap = 0, n = 0;
    ASSERT_EQ(vt__grow_from((void **)&a, &cap, 1, sizeof *a, 4), 0);
    ASSERT_EQ(cap, 4);
    for (int i = 0; i < 5; i++) {
        a[n > 0 ? n - 1 : 0] = 0xdeadbeef;        /* dirty the last one */
        uint64_t *x = vt__grow_push((void **)&a, &cap, &n, sizeof *a);
        ASSERT(x != NULL);
        ASSERT_EQ(*x, 0);
        ASSERT_PTR_EQ(x, &a[n - 1]);
    }
    ASSERT_EQ(n, 5);
    ASSERT_EQ(cap, 8);
    free(a);
}

/* Keys that share their low bits (block addresses) collide in runs, which
 * is where a deletion must shift the run back. */
TEST(u64map_finds_every_key_through_growth_and_deletions)
{
    enum { N = 20000 };
    vt__u64map m;
    ASSERT_EQ(vt__u64map_init(&m, 16), 0);
    ASSERT_EQ(vt__u64map_get(&m, 0), VT__U64MAP_NONE);
    for (uint32_t i = 0; i < N; i++)
        ASSERT_EQ(vt__u64map_put(&m, (uint64_t)i << 9, i), 0);
    ASSERT_EQ(vt__u64map_put(&m, UINT64_MAX, 7), 0);
    ASSERT_EQ(m.n, N + 1);
    for (uint32_t i = 0; i < N; i += 3)
        vt__u64map_del(&m, (uint64_t)i << 9);
    vt__u64map_del(&m, 12345);                   /* absent: nothing happens */
    for (uint32_t i = 0; i < N; i++)
        ASSERT_EQ(vt__u64map_get(&m, (uint64_t)i << 9), i % 3 ? i : VT__U64MAP_NONE);
    ASSERT_EQ(vt__u64map_get(&m, UINT64_MAX), 7);
    ASSERT_EQ(vt__u64map_put(&m, 3 << 9, 99), 0);  /* held: replaced */
    ASSERT_EQ(vt__u64map_get(&m, 3 << 9), 99);
    ASSERT_EQ(m.n, N + 1 - (N + 2) / 3 + 1);
    vt__u64map_free(&m);
    ASSERT_EQ(vt__u64map_get(&m, 1 << 9), VT__U64MAP_NONE);
}

TEST(error_buffer_takes_the_name_first_and_returns_the_code)
{
    char err[64];
    ASSERT_EQ(vt__errf_in(err, sizeof err, -EINVAL, "x.vtsnap", "bad %s", "header"), -EINVAL);
    ASSERT_STR_EQ(err, "x.vtsnap: bad header");
    ASSERT_EQ(vt__errf(err, sizeof err, -ENOMEM, "out of %s", "memory"), -ENOMEM);
    ASSERT_STR_EQ(err, "out of memory");
    char small[8];
    vt__errf_in(small, sizeof small, -EIO, "long-name.vtsnap", "message");
    ASSERT_STR_EQ(small, "message");   /* a name that leaves no room: the reason alone */
    vt__errf_in(small, sizeof small, -EIO, NULL, "a longer message");
    ASSERT_STR_EQ(small, "a longe");   /* cut, never overrun */
    ASSERT_EQ(vt__errf(NULL, 0, -EIO, "nowhere"), -EIO);
}

TEST_MAIN()
