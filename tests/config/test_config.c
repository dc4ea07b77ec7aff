/* tests/config/test_config.c - VRAMTRACE_CONF parsing: every key, every
 * kind of mistake, and that mistakes never change anything else. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "harness.h"

/* Parse `text` and capture what was reported on stderr. */
static int parse(const char *text, vt__conf *c, char *msg, size_t msglen)
{
    vt__config_defaults(c);
    FILE *err = fmemopen(msg, msglen, "w");
    int n = vt__config_parse(text, c, err);
    fclose(err);
    return n;
}

/* Field by field: the struct has padding that memcmp would read. */
static int config_equal(const vt__conf *a, const vt__conf *b)
{
    return a->cache == b->cache && a->max_split_size == b->max_split_size &&
           a->roundup_power2_divisions == b->roundup_power2_divisions &&
           a->garbage_collection_threshold == b->garbage_collection_threshold &&
           a->per_process_memory_fraction == b->per_process_memory_fraction &&
           a->free_sync == b->free_sync && a->trace == b->trace &&
           a->max_events == b->max_events && a->stack_depth == b->stack_depth &&
           a->free_stacks == b->free_stacks && a->stacks == b->stacks &&
           a->signal == b->signal &&
           a->dump_on_oom == b->dump_on_oom && a->ipc_safe == b->ipc_safe;
}

TEST(defaults_match_the_documented_table)
{
    vt__conf c;
    vt__config_defaults(&c);
    ASSERT(c.cache);
    ASSERT_EQ(c.max_split_size, UINT64_MAX);
    ASSERT_EQ(c.roundup_power2_divisions, 0);
    ASSERT(c.per_process_memory_fraction == 1.0);
    ASSERT(c.garbage_collection_threshold == 0.0);
    ASSERT(!c.free_sync);
    ASSERT(c.trace);
    ASSERT_EQ(c.max_events, 1000000);
    ASSERT_EQ(c.stack_depth, 48);
    ASSERT(c.free_stacks);
    ASSERT_EQ(c.stacks, VT_STACKS_ALL);
    ASSERT_EQ(c.signal, 0);
    ASSERT(!c.dump_on_oom);
    ASSERT_EQ(c.ipc_safe, VT_IPC_SAFE_AUTO);
}

TEST(every_key_parses)
{
    char msg[512] = "";
    vt__conf c;
    int n = parse("cache:0, max_split_size_mb:128,roundup_power2_divisions:4,"
                  "garbage_collection_threshold:0.8,per_process_memory_fraction:0.5,"
                  "free_sync:1,trace:off,max_events:2048,stack_depth:16,free_stacks:false,"
                  "stacks:python,signal:SIGUSR2,dump_on_oom:true,ipc_safe:1", &c, msg, sizeof msg);
    ASSERT_MSG(n == 0, "unexpected problems: %s", msg);
    ASSERT(!c.cache);
    ASSERT_EQ(c.max_split_size, 128ull << 20);
    ASSERT_EQ(c.roundup_power2_divisions, 4);
    ASSERT(c.garbage_collection_threshold == 0.8);
    ASSERT(c.per_process_memory_fraction == 0.5);
    ASSERT(c.free_sync);
    ASSERT(!c.trace);
    ASSERT_EQ(c.max_events, 2048);
    ASSERT_EQ(c.stack_depth, 16);
    ASSERT(!c.free_stacks);
    ASSERT_EQ(c.stacks, VT_STACKS_PYTHON);
    ASSERT_EQ(c.signal, SIGUSR2);
    ASSERT(c.dump_on_oom);
    ASSERT_EQ(c.ipc_safe, VT_IPC_SAFE_ON);
    ASSERT_EQ(parse("ipc_safe:off", &c, msg, sizeof msg), 0);
    ASSERT_EQ(c.ipc_safe, VT_IPC_SAFE_OFF);
    ASSERT_EQ(parse("ipc_safe:auto", &c, msg, sizeof msg), 0);
    ASSERT_EQ(c.ipc_safe, VT_IPC_SAFE_AUTO);
}

TEST(unknown_key_is_named_with_the_valid_keys_and_the_rest_still_applies)
{
    char msg[512] = "";
    vt__conf c;
    int n = parse("max_split_size_mb:64,bogus_key:3,cache:0", &c, msg, sizeof msg);
    ASSERT_EQ(n, 1);
    ASSERT_STR_CONTAINS(msg, "unknown VRAMTRACE_CONF key 'bogus_key'");
    ASSERT_STR_CONTAINS(msg, "max_split_size_mb");
    ASSERT_EQ(strchr(msg, '\n') - msg + 1, (long)strlen(msg)); /* one line */
    ASSERT_EQ(c.max_split_size, 64ull << 20);
    ASSERT(!c.cache);
}

TEST(bad_values_keep_the_default_and_name_the_choices)
{
    static const struct { const char *text; const char *expect; } cases[] = {
        { "cache:maybe", "0 or 1" },
        { "max_split_size_mb:-5", "MiB" },
        { "roundup_power2_divisions:3", "power of two" },
        { "garbage_collection_threshold:1.5", "fraction" },
        { "per_process_memory_fraction:0", "fraction" },
        { "max_events:12", "event count" },
        { "stack_depth:999", "256" },
        { "signal:SIGFOO", "SIGUSR2" },
        { "stacks:cpp", "native, python or all" },
        { "ipc_safe:sometimes", "auto, 0 or 1" },
        { "max_events:", "event count" },
        { "ring:64KB", "256MB" },          /* room for fewer than 1024 events */
        { "ring:lots", "256MB" },
        { "ring:-1MB", "256MB" },
        { "nocolon", "not key:value" },
        /* found by fuzz_config: used to overflow computing SIGRTMIN + n */
        { "signal:RTMIN+9223372036854775807", "SIGUSR2" },
        { "signal:SIGRTMIN+-1", "SIGUSR2" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char msg[512] = "";
        vt__conf c, d;
        vt__config_defaults(&d);
        int n = parse(cases[i].text, &c, msg, sizeof msg);
        ASSERT_MSG(n == 1, "%s: %d problems", cases[i].text, n);
        ASSERT_STR_CONTAINS(msg, cases[i].expect);
        ASSERT_MSG(config_equal(&c, &d), "%s changed the config", cases[i].text);
    }
}

/* ring:SIZE is max_events in memory: the most events, a power of two of
 * them (the ring's slots are), whose slots fit in SIZE. */
TEST(ring_size_keeps_the_events_that_fit_in_it)
{
    static const struct { const char *text; uint64_t events, bytes; } cases[] = {
        { "ring:1MiB", 8192, 1 << 20 },          /* 13107 fit: 8192 slots, 640 KiB */
        { "ring:256MB", 2097152, 256000000 },    /* 3.2M fit: 2^21 slots, 160 MiB */
        { "ring:1G", 8388608, 1 << 30 },
        { "ring:80KiB", 1024, 80 << 10 },
        { "max_events:5000,ring:1MiB", 8192, 1 << 20 },   /* the later key wins */
        { "ring:1MiB,max_events:5000", 5000, 0 },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char msg[512] = "";
        vt__conf c;
        ASSERT_MSG(parse(cases[i].text, &c, msg, sizeof msg) == 0, "%s: %s", cases[i].text, msg);
        ASSERT_MSG(c.max_events == cases[i].events, "%s: %llu events", cases[i].text,
                   (unsigned long long)c.max_events);
        if (cases[i].bytes)   /* the most events, a power of two of them, that fit */
            ASSERT(c.max_events * VT_RING_EVENT_BYTES <= cases[i].bytes &&
                   2 * c.max_events * VT_RING_EVENT_BYTES > cases[i].bytes);
    }
    uint64_t b;
    ASSERT_EQ(vt__parse_bytes("1.5GiB", &b), 0);
    ASSERT_EQ(b, 3ull << 29);
    ASSERT_EQ(vt__parse_bytes("40GB", &b), 0);
    ASSERT_EQ(b, 40000000000ull);
    ASSERT_EQ(vt__parse_bytes("12", &b), 0);
    ASSERT_EQ(b, 12);
    ASSERT_EQ(vt__parse_bytes("12 parsecs", &b), -EINVAL);
    ASSERT_EQ(vt__parse_bytes("", &b), -EINVAL);
}

TEST(format_round_trips_through_parse)
{
    char msg[512] = "", text[512];
    vt__conf c, back;
    parse("cache:0,max_split_size_mb:256,signal:SIGRTMIN+2,stack_depth:8,stacks:native,"
          "ipc_safe:0", &c, msg, sizeof msg);
    vt__config_format(&c, text, sizeof text);
    ASSERT_EQ(parse(text, &back, msg, sizeof msg), 0);
    ASSERT(config_equal(&c, &back));
    ASSERT_STR_CONTAINS(text, "max_split_size_mb:256");
}

TEST(environment_is_read_once)
{
    setenv("VRAMTRACE_CONF", "stack_depth:7", 1);
    const vt__conf *c = vt__config();
    ASSERT_EQ(c->stack_depth, 7);
    setenv("VRAMTRACE_CONF", "stack_depth:9", 1);
    ASSERT_EQ(vt__config()->stack_depth, 7);
}

TEST_MAIN()
