/*
 * tests/replay/test_replay.c - the host-only device and the replay engine,
 * on snapshots built in memory (the live recordings are in
 * test_replay_cli.py). One test per process: the allocator is one per
 * process, and so is a replay. Every replay under PyTorch's rules (a model:
 * any number of them in a process) is made again from the snapshot's events
 * read as a stream, in chunks that end inside events, and must agree.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend_host.h"
#include "event_stream.h"
#include "harness.h"
#include "replay.h"
#include "replay_dump.h"
#include "snapfile.h"

int vt__alloc_check_invariants(int device);   /* alloc/alloc_check.c */

#define MIB (1ull << 20)

/* ---- the host device ----------------------------------------------------- */

TEST(host_device_takes_the_lowest_free_range_and_keeps_to_its_capacity)
{
    uint64_t cap = 100 * MIB;
    ASSERT_EQ(vt__host_setup(1, &cap), 0);
    uint64_t a, b, c, d;
    ASSERT_EQ(vt__backend_malloc(0, 40 * MIB, &a), 0);
    ASSERT_EQ(vt__backend_malloc(0, 40 * MIB, &b), 0);
    ASSERT_GT(b, a);
    ASSERT_EQ(a % (2 * MIB), 0);            /* 2 MiB aligned, as the driver places them */
    ASSERT_EQ(vt__backend_malloc(0, 40 * MIB, &c), 2);   /* 120 > 100 MiB */
    ASSERT_EQ(vt__backend_free(0, a), 0);
    ASSERT_EQ(vt__backend_malloc(0, 20 * MIB, &c), 0);
    ASSERT_EQ(c, a);                        /* the freed range, lowest first */
    ASSERT_EQ(vt__backend_malloc(0, 20 * MIB, &d), 0);
    ASSERT_EQ(d, a + 20 * MIB);
    uint64_t free_b, total;
    ASSERT_EQ(vt__backend_mem_info(0, &free_b, &total), 0);
    ASSERT_EQ(total, cap);
    ASSERT_EQ(free_b, 20 * MIB);
    ASSERT_EQ(vt__backend_free(0, a + 4096), 1);  /* not an allocation */
    vt__host_calls calls;
    vt__host_get_calls(0, &calls);
    ASSERT_EQ(calls.mallocs, 4);
    ASSERT_EQ(calls.failed_mallocs, 1);
    ASSERT_EQ(calls.frees, 1);
    ASSERT_EQ(vt__host_used(0), 80 * MIB);
    vt__host_teardown();
}

TEST(host_device_freed_ranges_coalesce)
{
    uint64_t cap = VT_HOST_UNLIMITED;
    ASSERT_EQ(vt__host_setup(1, &cap), 0);
    uint64_t a, b, c, big;
    ASSERT_EQ(vt__backend_malloc(0, 2 * MIB, &a), 0);
    ASSERT_EQ(vt__backend_malloc(0, 2 * MIB, &b), 0);
    ASSERT_EQ(vt__backend_malloc(0, 2 * MIB, &c), 0);
    ASSERT_EQ(vt__backend_free(0, a), 0);
    ASSERT_EQ(vt__backend_free(0, c), 0);
    ASSERT_EQ(vt__backend_free(0, b), 0);
    ASSERT_EQ(vt__backend_malloc(0, 6 * MIB, &big), 0);
    ASSERT_EQ(big, a);                      /* the three ranges are one again */
    uint64_t total;
    ASSERT_EQ(vt__backend_total_mem(0, &total), 0);
    ASSERT_EQ(total, 0);                    /* unlimited reads as unknown */
    vt__host_teardown();
}

TEST(host_device_event_on_a_logical_stream_completes_when_the_clock_reaches_it)
{
    uint64_t cap = VT_HOST_UNLIMITED;
    ASSERT_EQ(vt__host_setup(2, (uint64_t[]){ cap, cap }), 0);
    void *ev, *other;
    ASSERT_EQ(vt__backend_event_create(0, &ev), 0);
    ASSERT_EQ(vt__backend_event_create(0, &other), 0);
    vt__host_set_now(10);
    ASSERT_EQ(vt__backend_event_record(0, ev, vt__host_logical_stream(15)), 0);
    ASSERT_EQ(vt__backend_event_record(0, other, 0x7f00001234), 0);   /* a real stream: done */
    ASSERT_EQ(vt__backend_event_query(0, other), 0);
    ASSERT_EQ(vt__backend_event_query(0, ev), VT_BACKEND_NOT_READY);
    vt__host_set_now(14);
    ASSERT_EQ(vt__backend_event_query(0, ev), VT_BACKEND_NOT_READY);
    vt__host_set_now(15);
    ASSERT_EQ(vt__backend_event_query(0, ev), 0);
    /* per-thread stream keys (bit 63) are not logical streams */
    ASSERT_EQ(vt__backend_event_record(0, other, (1ull << 63) | VT_HOST_LOGICAL_STREAM | 99), 0);
    ASSERT_EQ(vt__backend_event_query(0, other), 0);
    /* recorded again: pending again, until waited for */
    ASSERT_EQ(vt__backend_event_record(0, ev, vt__host_logical_stream(40)), 0);
    ASSERT_EQ(vt__backend_event_query(0, ev), VT_BACKEND_NOT_READY);
    ASSERT_EQ(vt__backend_event_sync(0, ev), 0);          /* waited for: done */
    ASSERT_EQ(vt__backend_event_query(0, ev), 0);
    vt__host_calls calls;
    vt__host_get_calls(0, &calls);
    ASSERT_EQ(calls.event_creates, 2);
    ASSERT_EQ(calls.event_records, 4);
    ASSERT_EQ(calls.event_syncs, 1);
    vt__host_get_calls(1, &calls);
    ASSERT_EQ(calls.event_records, 0);
    vt__backend_event_destroy(0, ev);
    vt__backend_event_destroy(0, other);
    vt__host_teardown();
}

/* ---- snapshots built in memory ------------------------------------------- */

typedef struct built {
    vt__snapshot_data s;
    vt__event ev[256];
    vt__snap_device dev;
    char blob[256];
    uint32_t offs[2];
    vt__snap_segment seg[8];
    vt__snap_block blk[8];
} built;

static built *snap_new(uint64_t total, const char *config)
{
    built *b = calloc(1, sizeof *b);
    ASSERT(b);
    b->s.events = b->ev;
    b->dev = (vt__snap_device){ .ordinal = 0, .total_bytes = total };
    b->s.devices = &b->dev;
    b->s.ndevices = 1;
    /* string 0 "", string 1 the recorded config */
    b->blob[0] = '\0';
    snprintf(b->blob + 1, sizeof b->blob - 1, "%s", config ? config : "");
    b->offs[0] = 0;
    b->offs[1] = 1;
    b->s.strings_blob = b->blob;
    b->s.strings_blob_size = 2 + strlen(b->blob + 1);
    b->s.string_offsets = b->offs;
    b->s.nstrings = 2;
    b->s.meta.config = config ? 1 : 0;
    return b;
}

static void ev(built *b, uint8_t kind, uint64_t addr, uint64_t size, uint64_t stream, uint64_t aux)
{
    size_t i = b->s.nevents++;
    b->ev[i] = (vt__event){ .seq = i + 1, .time_ns = 1000 * (i + 1), .kind = kind, .addr = addr,
                           .req_size = size, .size = size, .stream = stream, .aux = aux,
                           .device = 0, .thread = 1 };
}

/* A segment alive at the snapshot, in `pool`, wholly one block handed out
 * (allocated at seq alloc_seq: 0, before the window). */
static void state_block(built *b, uint8_t pool, uint64_t addr, uint64_t size,
                        uint64_t alloc_seq)
{
    size_t k = b->s.nsegments++;
    b->blk[k] = (vt__snap_block){ .addr = addr, .size = size, .req_size = size,
                                  .alloc_seq = alloc_seq,
                                  .state = VT_BLOCK_ACTIVE_ALLOCATED };
    b->seg[k] = (vt__snap_segment){ .addr = addr, .size = size, .first_block = (uint32_t)k,
                                    .nblocks = 1, .pool = pool };
    b->s.segments = b->seg;
    b->s.blocks = b->blk;
    b->s.nblocks = b->s.nsegments;
    b->s.meta.flags |= VT_META_STATE_COMPLETE;
}

/* r, b's replay under PyTorch's rules, is the replay of b's events read as
 * a stream from a file, chunk by chunk (1 to 64 bytes, and the default),
 * figure for figure, the reserved curve included. */
static void streamed_is_whole(built *b, const vt__replay_options *opt, const vt__replay_result *r)
{
    char path[] = "/tmp/vt-test-replay-XXXXXX", err[512];
    int fd = mkstemp(path);
    ASSERT(fd >= 0);
    close(fd);
    ASSERT_MSG(vt__snapfile_write(&b->s, path, err, sizeof err) == 0, "%s", err);
    vt__replay_options o = *opt;
    o.curve = true;
    vt__replay_result w;
    char *want = NULL;
    size_t nwant;
    FILE *f = open_memstream(&want, &nwant);
    ASSERT(f);
    replay_dump(f, vt__replay_run(&b->s, &o, &w, err, sizeof err), err, &w);
    fclose(f);
    vt__replay_result_free(&w);
    ASSERT_EQ(w.oom.happened, r->oom.happened);
    ASSERT_EQ(vt__replay_peak_reserved(&w), vt__replay_peak_reserved(r));
    static const size_t chunks[] = { 1, 3, 8, 29, 64, 0 };
    for (size_t k = 0; k < sizeof chunks / sizeof *chunks; k++) {
        vt__snapshot_data *h;
        vt__event_stream *es;
        char serr[512];
        ASSERT_MSG(vt__snapfile_open_stream(path, chunks[k], &h, &es, serr, sizeof serr) == 0,
                   "%s", serr);
        vt__replay_result s;
        char *got = NULL;
        size_t ngot;
        f = open_memstream(&got, &ngot);
        ASSERT(f);
        replay_dump(f, vt__replay_run_stream(h, es, &o, &s, err, sizeof err), err, &s);
        fclose(f);
        ASSERT_MSG(!strcmp(want, got), "streamed in %zu-byte chunks:\n--- whole:\n%s\n"
                   "--- streamed:\n%s", chunks[k], want, got);
        vt__replay_result_free(&s);
        free(got);
        vt__event_stream_close(es);
        vt__snapshot_free(h);
    }
    free(want);
    unlink(path);
}

/* b replayed with opt, which must succeed. */
static vt__replay_result replay_ok(built *b, const vt__replay_options *opt)
{
    vt__replay_result r;
    char err[256];
    int rc = vt__replay_run(&b->s, opt, &r, err, sizeof err);
    ASSERT_MSG(rc == 0, "replay failed: %d %s", rc, err);
    if (r.rules == VT_REPLAY_RULES_PYTORCH)
        streamed_is_whole(b, opt, &r);
    return r;
}

static vt__replay_result run(built *b, const char *conf, uint64_t capacity)
{
    vt__replay_options opt = { .conf = conf, .capacity = capacity, .curve = true };
    vt__replay_result r = replay_ok(b, &opt);
    ASSERT_EQ(vt__alloc_check_invariants(-1), 0);
    return r;
}

TEST(same_stream_free_is_reused_at_once)
{
    built *b = snap_new(0, NULL);
    ev(b, VT_EV_ALLOC, 0x1000, 30 * MIB, 7, 0);
    ev(b, VT_EV_FREE_REQUESTED, 0x1000, 30 * MIB, 7, 0);
    ev(b, VT_EV_FREE_COMPLETED, 0x1000, 30 * MIB, 7, 0);
    ev(b, VT_EV_ALLOC, 0x2000, 30 * MIB, 7, 0);
    vt__replay_result r = run(b, NULL, 0);
    ASSERT_EQ(r.devices[0].segment_allocs, 1);
    ASSERT_EQ(r.devices[0].peak_reserved, 30 * MIB);
    ASSERT_EQ(r.devices[0].peak_allocated, 30 * MIB);
    ASSERT_EQ(r.replayed, 3);
    ASSERT(!r.oom.happened);
    ASSERT_EQ(r.devices[0].capacity, VT_REPLAY_UNLIMITED);
    vt__replay_result_free(&r);
    free(b);
}

/* A block freed on another stream than its own waits for that stream: until
 * the recorded FREE_COMPLETED the replay must not reuse it, after it must. */
TEST(cross_stream_free_waits_for_its_recorded_completion)
{
    built *b = snap_new(0, NULL);
    ev(b, VT_EV_ALLOC, 0x1000, 30 * MIB, 7, 0);
    ev(b, VT_EV_FREE_REQUESTED, 0x1000, 30 * MIB, 9, 1);   /* freed on stream 9: pending */
    ev(b, VT_EV_ALLOC, 0x2000, 30 * MIB, 7, 0);            /* before completion: new segment */
    ev(b, VT_EV_FREE_COMPLETED, 0x1000, 30 * MIB, 7, 0);
    ev(b, VT_EV_ALLOC, 0x3000, 30 * MIB, 7, 0);            /* after it: the freed block */
    vt__replay_result r = run(b, NULL, 0);
    ASSERT_EQ(r.devices[0].segment_allocs, 2);
    ASSERT_EQ(r.devices[0].peak_reserved, 60 * MIB);
    ASSERT_GE(r.devices[0].fence_events, 1);
    ASSERT_GE(r.devices[0].event_queries, 1);
    vt__replay_result_free(&r);
    free(b);
}

/* The same recording, the free completing before the next allocation: one
 * segment. The replay follows the recorded timing, not a fixed rule. */
TEST(cross_stream_free_completed_early_is_reused)
{
    built *b = snap_new(0, NULL);
    ev(b, VT_EV_ALLOC, 0x1000, 30 * MIB, 7, 0);
    ev(b, VT_EV_FREE_REQUESTED, 0x1000, 30 * MIB, 9, 1);
    ev(b, VT_EV_MARK, 0, 0, 0, 0);
    ev(b, VT_EV_FREE_COMPLETED, 0x1000, 30 * MIB, 7, 0);
    ev(b, VT_EV_ALLOC, 0x2000, 30 * MIB, 7, 0);
    vt__replay_result r = run(b, NULL, 0);
    ASSERT_EQ(r.devices[0].segment_allocs, 1);
    vt__replay_result_free(&r);
    free(b);
}

TEST(record_stream_use_keeps_the_block_until_its_recorded_completion)
{
    built *b = snap_new(0, NULL);
    ev(b, VT_EV_ALLOC, 0x1000, 30 * MIB, 7, 0);
    ev(b, VT_EV_STREAM_USE, 0x1000, 30 * MIB, 11, 0);
    ev(b, VT_EV_FREE_REQUESTED, 0x1000, 30 * MIB, 7, 1);
    ev(b, VT_EV_ALLOC, 0x2000, 30 * MIB, 7, 0);
    ev(b, VT_EV_ALLOC, 0x3000, 30 * MIB, 7, 0);
    ev(b, VT_EV_FREE_COMPLETED, 0x1000, 30 * MIB, 7, 0);
    ev(b, VT_EV_ALLOC, 0x4000, 30 * MIB, 7, 0);
    vt__replay_result r = run(b, NULL, 0);
    ASSERT_EQ(r.devices[0].segment_allocs, 3);
    ASSERT_EQ(r.replayed, 5);   /* the stream use is covered by the free's completion */
    vt__replay_result_free(&r);
    free(b);
}

TEST(capacity_out_of_memory_names_the_event_and_the_live_bytes)
{
    built *b = snap_new(0, NULL);
    ev(b, VT_EV_ALLOC, 0x1000, 40 * MIB, 0, 0);
    ev(b, VT_EV_ALLOC, 0x2000, 40 * MIB, 0, 0);
    ev(b, VT_EV_ALLOC, 0x3000, 40 * MIB, 0, 0);
    b->ev[2].stack = 5;
    ev(b, VT_EV_ALLOC, 0x4000, 40 * MIB, 0, 0);
    vt__replay_result r = run(b, NULL, 100 * MIB);
    ASSERT(r.oom.happened);
    ASSERT_EQ(r.oom.event_index, 2);
    ASSERT_EQ(r.oom.seq, 3);
    ASSERT_EQ(r.oom.stack, 5);
    ASSERT_EQ(r.oom.req_size, 40 * MIB);
    ASSERT_EQ(r.oom.allocated, 80 * MIB);
    ASSERT_EQ(r.oom.live_blocks, 2);
    ASSERT_EQ(r.oom.device_free, 20 * MIB);
    ASSERT_EQ(r.devices[0].capacity, 100 * MIB);
    ASSERT_EQ(r.replayed, 3);           /* stops there, as the program would */
    vt__replay_result_free(&r);
    free(b);
}

/* A (40 MiB) is last used at event 1 but freed only at the end: a 100 MiB
 * device cannot hold B and C beside it; freed right after event 1, all fit. */
static built *moved_frees_snapshot(void)
{
    built *b = snap_new(0, NULL);
    ev(b, VT_EV_ALLOC, 0x1000, 40 * MIB, 0, 0);      /* 0: A */
    ev(b, VT_EV_MARK, 0, 0, 0, 0);                   /* 1: its last use */
    ev(b, VT_EV_ALLOC, 0x2000, 40 * MIB, 0, 0);      /* 2: B */
    ev(b, VT_EV_ALLOC, 0x3000, 40 * MIB, 0, 0);      /* 3: C */
    ev(b, VT_EV_FREE_REQUESTED, 0x1000, 40 * MIB, 0, 0);
    ev(b, VT_EV_FREE_REQUESTED, 0x2000, 40 * MIB, 0, 0);
    return b;
}

static const vt__replay_free_at moved[] = {
    { .alloc_event = 0, .at_event = 1 },
    { .alloc_event = 2, .at_event = 1 },             /* before its ALLOC: ignored */
    { .alloc_event = 1, .at_event = 2 },             /* not an ALLOC: ignored */
};

static void moved_frees_case(vt__replay_rules rules)
{
    built *b = moved_frees_snapshot();
    vt__replay_options opt = { .capacity = 100 * MIB, .rules = rules };
    vt__replay_result r;
    char err[256];
    ASSERT_EQ(vt__replay_run(&b->s, &opt, &r, err, sizeof err), 0);
    ASSERT(r.oom.happened);                          /* as recorded: C does not fit */
    ASSERT_EQ(r.oom.event_index, 3);
    vt__replay_result_free(&r);
    opt.free_at = moved;
    opt.nfree_at = 3;
    ASSERT_EQ(vt__replay_run(&b->s, &opt, &r, err, sizeof err),
              rules == VT_REPLAY_RULES_PYTORCH ? 0 : -EBUSY);
    if (rules == VT_REPLAY_RULES_PYTORCH) {          /* a model: it replays again */
        ASSERT(!r.oom.happened);
        ASSERT_EQ(r.early_frees, 1);
        ASSERT_EQ(r.skipped_frees, 0);
        vt__replay_result_free(&r);
    }
    free(b);
}

TEST(moved_frees_free_an_allocation_right_after_the_given_event_under_pytorchs_rules)
{
    moved_frees_case(VT_REPLAY_RULES_PYTORCH);
}

TEST(moved_frees_free_an_allocation_right_after_the_given_event)
{
    /* freed after event 1 instead, everything fits, and its recorded free
     * is not counted as a free of an allocation the replay does not know */
    built *b = moved_frees_snapshot();
    vt__replay_options opt = { .capacity = 100 * MIB, .free_at = moved, .nfree_at = 3 };
    vt__replay_result r = replay_ok(b, &opt);
    ASSERT(!r.oom.happened);
    ASSERT_EQ(r.early_frees, 1);
    ASSERT_EQ(r.skipped_frees, 0);
    ASSERT_EQ(r.devices[0].peak_allocated, 80 * MIB);
    ASSERT_EQ(vt__alloc_check_invariants(-1), 0);
    vt__replay_result_free(&r);
    free(b);
}

/* A program that caught an OOM and went on, then ran out again: A (40 MiB),
 * an 80 MiB request that failed (caught), B (40 MiB), then C (40 MiB), which
 * ran out. On 100 MiB the replay fails at the caught request; told that
 * OOMs before C's were caught (caught_before), it lets that one fail as it
 * did and runs out at C, as the program did. */
TEST(recorded_ooms_before_caught_before_fail_as_recorded_and_the_replay_goes_on)
{
    built *b = snap_new(0, NULL);
    ev(b, VT_EV_ALLOC, 0x1000, 40 * MIB, 0, 0);      /* 0: A */
    ev(b, VT_EV_OOM, 0, 80 * MIB, 0, 0);             /* 1: caught */
    ev(b, VT_EV_ALLOC, 0x2000, 40 * MIB, 0, 0);      /* 2: B */
    ev(b, VT_EV_OOM, 0, 40 * MIB, 0, 0);             /* 3: C, the end */
    vt__replay_options opt = { .capacity = 100 * MIB, .rules = VT_REPLAY_RULES_PYTORCH };
    vt__replay_result r;
    char err[256];
    ASSERT_EQ(vt__replay_run(&b->s, &opt, &r, err, sizeof err), 0);
    ASSERT(r.oom.happened);
    ASSERT_EQ(r.oom.event_index, 1);
    ASSERT_EQ(r.recorded_ooms_failed, 0);
    vt__replay_result_free(&r);
    opt.caught_before = 3;
    ASSERT_EQ(vt__replay_run(&b->s, &opt, &r, err, sizeof err), 0);
    ASSERT(r.oom.happened);
    ASSERT_EQ(r.oom.event_index, 3);
    ASSERT_EQ(r.oom.req_size, 40 * MIB);
    ASSERT_EQ(r.recorded_ooms_failed, 1);
    vt__replay_result_free(&r);
    free(b);
}

TEST(recorded_device_total_is_the_default_capacity)
{
    built *b = snap_new(50 * MIB, NULL);
    ev(b, VT_EV_ALLOC, 0x1000, 40 * MIB, 0, 0);
    ev(b, VT_EV_ALLOC, 0x2000, 40 * MIB, 0, 0);
    vt__replay_result r = run(b, NULL, 0);
    ASSERT_EQ(r.devices[0].capacity, 50 * MIB);
    ASSERT(r.oom.happened);
    ASSERT_EQ(r.oom.event_index, 1);
    vt__replay_result_free(&r);
    free(b);
}

/* The settings recorded in the snapshot apply; --conf goes over them. */
TEST(recorded_settings_apply_and_conf_overrides_them)
{
    built *b = snap_new(0, "cache:1,max_split_size_mb:64,roundup_power2_divisions:4,"
                           "garbage_collection_threshold:0,per_process_memory_fraction:1,"
                           "free_sync:0,trace:1");
    ev(b, VT_EV_ALLOC, 0x1000, 29 * MIB, 0, 0);
    vt__replay_options opt = { .conf = "roundup_power2_divisions:0" };
    vt__replay_result r = replay_ok(b, &opt);
    ASSERT_MSG(strstr(r.conf, "max_split_size_mb:64,roundup_power2_divisions:0") != NULL,
               "%s", r.conf);
    ASSERT(strstr(r.conf, "free_sync") == NULL);   /* allocator keys only */
    /* 29 MiB in a 30 MiB segment; the recorded 4 divisions would give 32 MiB
     * (recorded_settings_apply checks that) */
    ASSERT_EQ(r.devices[0].peak_reserved, 30 * MIB);
    free(b);
}

TEST(recorded_settings_apply)
{
    built *b = snap_new(0, "cache:1,max_split_size_mb:64,roundup_power2_divisions:4,"
                           "garbage_collection_threshold:0,per_process_memory_fraction:1");
    ev(b, VT_EV_ALLOC, 0x1000, 29 * MIB, 0, 0);
    vt__replay_result r = run(b, NULL, 0);
    ASSERT_MSG(strstr(r.conf, "roundup_power2_divisions:4") != NULL, "%s", r.conf);
    ASSERT_EQ(r.devices[0].peak_reserved, 32 * MIB);
    vt__replay_result_free(&r);
    free(b);
}

/* A run that was IPC-safe (its snapshot says so) replays IPC-safe: two
 * small cudaMalloc blocks are two device allocations, not one shared
 * segment (the replaying process itself imports no IPC call: auto alone
 * would share). */
TEST(ipc_safe_recording_replays_ipc_safe)
{
    built *b = snap_new(0, "cache:1,ipc_safe:auto");
    b->s.meta.flags |= VT_META_IPC_SAFE;
    ev(b, VT_EV_ALLOC, 0x1000, 1000, 0, VT_ALLOC_NO_STREAM);
    ev(b, VT_EV_ALLOC, 0x2000, 1000, 0, VT_ALLOC_NO_STREAM);
    vt__replay_result r = run(b, NULL, 0);
    ASSERT_EQ(r.devices[0].segment_allocs, 2);
    ASSERT_EQ(r.devices[0].peak_reserved, 2048);
    vt__replay_result_free(&r);
    free(b);
}

TEST(pytorch_settings_are_translated)
{
    char buf[256];
    vt__snapshot_data s = { 0 };
    char blob[] = "\0PYTORCH_CUDA_ALLOC_CONF=roundup_power2_divisions:4,max_split_size=134217728,"
                  "garbage_collection_threshold=0.5,expandable_segments=False";
    uint32_t offs[] = { 0, 1 };
    s.strings_blob = blob;
    s.strings_blob_size = sizeof blob;
    s.string_offsets = offs;
    s.nstrings = 2;
    s.meta.config = 1;
    vt__replay_recorded_conf(&s, buf, sizeof buf);
    ASSERT_MSG(!strcmp(buf, "max_split_size_mb:128,garbage_collection_threshold:0.5,"
                            "roundup_power2_divisions:4"), "%s", buf);
    char blob2[] = "\0PYTORCH_CUDA_ALLOC_CONF=None,max_split_size=-1,"
                   "garbage_collection_threshold=0,expandable_segments=False";
    s.strings_blob = blob2;
    s.strings_blob_size = sizeof blob2;
    vt__replay_recorded_conf(&s, buf, sizeof buf);
    ASSERT_MSG(!strcmp(buf, ""), "%s", buf);
}

/* The ring lost the window's start: 30 MiB freed at event 1 and 20 MiB
 * alive at the end (the state's, made before the window) were held when
 * it opened. A replay that starts empty fits a 60 MiB device (30 MiB at
 * most); the program did not: they are made first. */
static built *held_before_the_window_snapshot(void)
{
    built *b = snap_new(60 * MIB, NULL);
    b->s.meta.events_overwritten = 1000;
    ev(b, VT_EV_ALLOC, 0x1000, 30 * MIB, 0, 0);             /* 0 */
    ev(b, VT_EV_FREE_REQUESTED, 0x9000000, 30 * MIB, 0, 0); /* 1: made before the window */
    ev(b, VT_EV_FREE_REQUESTED, 0x1000, 30 * MIB, 0, 0);    /* 2 */
    state_block(b, VT_POOL_LARGE, 0x20000000, 20 * MIB, 0);
    return b;
}

TEST(allocations_held_when_the_window_opened_are_made_first)
{
    built *b = held_before_the_window_snapshot();
    vt__replay_result r = run(b, NULL, 0);
    ASSERT_EQ(r.seeded, 2);
    ASSERT_EQ(r.seeded_bytes, 50 * MIB);
    ASSERT_EQ(r.skipped_frees, 0);          /* the early free found its seed */
    ASSERT(r.oom.happened);                 /* 20 + 30 + 30 MiB > 60 MiB */
    ASSERT_EQ(r.oom.event_index, 0);
    ASSERT_EQ(r.oom.req_size, 30 * MIB);
    ASSERT_EQ(r.devices[0].recorded_peak_allocated, 80 * MIB);
    vt__replay_result_free(&r);
    free(b);
}

TEST(allocations_held_when_the_window_opened_are_freed_where_the_recording_frees_them)
{
    built *b = held_before_the_window_snapshot();
    vt__replay_result r = run(b, NULL, 100 * MIB);
    ASSERT(!r.oom.happened);
    ASSERT_EQ(r.seeded, 2);
    ASSERT_EQ(r.devices[0].peak_allocated, 80 * MIB);
    ASSERT_EQ(r.replayed, 2 + 3);            /* the seeds, then every event */
    vt__replay_result_free(&r);
    free(b);
}

TEST(segments_are_compared_with_the_recording)
{
    built *b = snap_new(0, NULL);
    ev(b, VT_EV_SEGMENT_ALLOC, 0x1000, 20 * MIB, 0, 1);
    ev(b, VT_EV_ALLOC, 0x1000, 3 * MIB, 0, 0);
    ev(b, VT_EV_SEGMENT_ALLOC, 0x9000000, 2 * MIB, 0, 0);
    ev(b, VT_EV_ALLOC, 0x9000000, 4096, 0, 0);
    vt__replay_result r = run(b, NULL, 0);
    /* 3 MiB requests share 18 MiB segments (a whole number of them), not 20 */
    ASSERT(!r.segments_identical);
    ASSERT_EQ(r.first_segment_difference, 0);
    ASSERT_EQ(r.devices[0].recorded_peak_reserved, 22 * MIB);
    ASSERT_EQ(r.devices[0].peak_reserved, 20 * MIB);
    ASSERT_EQ(r.ncurve, 2);
    ASSERT_EQ(r.curve[1].reserved, 20 * MIB);
    vt__replay_result_free(&r);
    free(b);
    built *c = snap_new(0, NULL);   /* a second replay in one process is refused */
    ev(c, VT_EV_ALLOC, 0x1000, 3 * MIB, 0, 0);
    char err[128];
    vt__replay_result r2;
    ASSERT_EQ(vt__replay_run(&c->s, NULL, &r2, err, sizeof err), -EBUSY);
    free(c);
}

TEST(bad_input_is_refused_with_one_line)
{
    built *b = snap_new(0, NULL);
    char err[256];
    vt__replay_result r;
    ASSERT_EQ(vt__replay_run(&b->s, NULL, &r, err, sizeof err), -EINVAL);   /* nothing to replay */
    ASSERT(strstr(err, "no allocation") && !strchr(err, '\n'));
    ev(b, VT_EV_ALLOC, 0x1000, 3 * MIB, 0, 0);
    vt__replay_options opt = { .conf = "max_split_size_mb:0" };
    ASSERT_EQ(vt__replay_run(&b->s, &opt, &r, err, sizeof err), -EINVAL);
    ASSERT_MSG(strstr(err, "max_split_size_mb") && !strchr(err, '\n'), "%s", err);
    opt.conf = "no_such_key:1";
    ASSERT_EQ(vt__replay_run(&b->s, &opt, &r, err, sizeof err), -EINVAL);
    ASSERT_MSG(strstr(err, "no_such_key"), "%s", err);
    b->ev[0].device = 40;
    ASSERT_EQ(vt__replay_run(&b->s, NULL, &r, err, sizeof err), -EINVAL);
    ASSERT_MSG(strstr(err, "device 40"), "%s", err);
    b->ev[0].device = 0;
    ASSERT_EQ(vt__replay_run(&b->s, NULL, &r, err, sizeof err), 0);   /* still usable */
    free(b);
}

/* What a sweep of at most three settings gives: each one's status, error
 * and result. */
typedef struct sweep {
    int               status[3];
    char              errs[3][256];
    vt__replay_result out[3];
} sweep;

/* b replayed with each of confs[0..n) over `base`, `jobs` processes at a
 * time (vt__replay_sweep_confs), which must run; each setting's own status
 * in w. */
static void sweep_ok(built *b, const char *const *confs, size_t n, const vt__replay_options *base,
                     unsigned jobs, sweep *w)
{
    ASSERT(n <= sizeof w->status / sizeof *w->status);
    ASSERT_EQ(vt__replay_sweep_confs(&b->s, confs, n, base, jobs, w->out, w->status, w->errs), 0);
}

TEST(sweep_runs_each_setting_in_its_own_process)
{
    built *b = snap_new(0, NULL);
    for (int i = 0; i < 6; i++)
        ev(b, VT_EV_ALLOC, 0x1000 + (uint64_t)i * 0x1000, 17 * MIB, 0, 0);
    const char *confs[] = { "", "roundup_power2_divisions:2", "max_split_size_mb:x" };
    sweep w;
    sweep_ok(b, confs, 3, &(vt__replay_options){ .capacity = 100 * MIB }, 2, &w);
    ASSERT_EQ(w.status[0], 0);
    ASSERT_EQ(w.status[1], 0);
    ASSERT_EQ(w.status[2], -EINVAL);
    ASSERT(strstr(w.errs[2], "max_split_size_mb"));
    /* 17 MiB requests get 18 MiB segments: 5 fit in 100 MiB; with 2
     * divisions they round to 24 MiB: 4 fit */
    ASSERT(w.out[0].oom.happened);
    ASSERT_EQ(w.out[0].oom.event_index, 5);
    ASSERT_EQ(w.out[0].devices[0].peak_reserved, 90 * MIB);
    ASSERT(w.out[1].oom.happened);
    ASSERT_EQ(w.out[1].oom.event_index, 4);
    ASSERT_EQ(w.out[1].devices[0].peak_reserved, 96 * MIB);
    /* the parent's allocator was never touched: it can still replay */
    vt__replay_result r = run(b, NULL, 0);
    ASSERT(!r.oom.happened);
    ASSERT_EQ(r.devices[0].peak_reserved, 6 * 18 * MIB);
    vt__replay_result_free(&r);
    free(b);
}

/* Forty 5 MiB blocks, one in four kept, then nine 12 MiB ones: at 200 MiB
 * fixed segments (four blocks each, all pinned) run out of memory; one
 * expandable range coalesces the freed neighbours into 15 MiB holes. */
TEST(expandable_segments_fit_pinned_fragmentation_in_replay)
{
    built *b = snap_new(0, NULL);
    for (uint64_t i = 0; i < 40; i++)
        ev(b, VT_EV_ALLOC, 0x10000000 + i * 0x1000000, 5 * MIB, 0, 0);
    for (uint64_t i = 0; i < 40; i++)
        if (i % 4 != 1) {
            ev(b, VT_EV_FREE_REQUESTED, 0x10000000 + i * 0x1000000, 5 * MIB, 0, 0);
            ev(b, VT_EV_FREE_COMPLETED, 0x10000000 + i * 0x1000000, 5 * MIB, 0, 0);
        }
    for (uint64_t i = 0; i < 9; i++)
        ev(b, VT_EV_ALLOC, 0x90000000 + i * 0x1000000, 12 * MIB, 0, 0);
    const char *confs[] = { "", "expandable_segments:1" };
    sweep w;
    sweep_ok(b, confs, 2, &(vt__replay_options){ .capacity = 200 * MIB }, 2, &w);
    ASSERT_EQ(w.status[0], 0);
    ASSERT_EQ(w.status[1], 0);
    ASSERT(w.out[0].oom.happened);
    ASSERT_EQ(w.out[0].oom.event_index, 40 + 60);   /* the first 12 MiB block */
    ASSERT(!w.out[0].expandable_segments);
    ASSERT(!w.out[1].oom.happened);
    ASSERT(w.out[1].expandable_segments);
    ASSERT_EQ(w.out[1].devices[0].peak_reserved, 200 * MIB);
    ASSERT_EQ(w.out[1].devices[0].device_maps, 100);   /* 200 MiB of 2 MiB chunks */
    ASSERT_EQ(w.out[1].devices[0].device_mallocs, 0);
    free(b);
}

/* ---- PyTorch's rules (replay_torch.c, torch_*.c) ------------------------- */

static vt__replay_result run_torch(built *b, const char *conf, uint64_t capacity)
{
    vt__replay_options opt = { .conf = conf, .capacity = capacity,
                              .rules = VT_REPLAY_RULES_PYTORCH };
    vt__replay_result r = replay_ok(b, &opt);
    ASSERT_EQ(r.rules, VT_REPLAY_RULES_PYTORCH);
    return r;
}

/* an allocation freed at once */
static void alloc_free(built *b, uint64_t addr, uint64_t size)
{
    ev(b, VT_EV_ALLOC, addr, size, 0, 0);
    ev(b, VT_EV_FREE_REQUESTED, addr, size, 0, 1);
    ev(b, VT_EV_FREE_COMPLETED, addr, size, 0, 0);
}

TEST(torch_rules_small_requests_share_2_mib_segments_large_ones_20_mib_or_their_own)
{
    built *b = snap_new(0, NULL);
    for (uint64_t i = 0; i < 3; i++)
        ev(b, VT_EV_ALLOC, 0x1000 + i * 0x1000, 1000, 0, 0);   /* 1 KiB blocks */
    ev(b, VT_EV_ALLOC, 0x100000, 3 * MIB, 0, 0);              /* a 20 MiB segment, split */
    /* over the 17 MiB left there: its own segment, rounded to 2 MiB (20 MiB);
     * 1 MiB - 512 left is not worth a split: handed out whole */
    ev(b, VT_EV_ALLOC, 0x10000000, 19 * MIB + 1, 0, 0);
    vt__replay_result r = run_torch(b, NULL, 0);
    ASSERT_EQ(r.devices[0].segment_allocs, 3);
    ASSERT_EQ(r.devices[0].peak_reserved, 2 * MIB + 20 * MIB + 20 * MIB);
    ASSERT_EQ(r.devices[0].peak_allocated, 3 * 1024 + 3 * MIB + 20 * MIB);
    free(b);
}

TEST(torch_rules_split_large_blocks_only_with_more_than_1_mib_left)
{
    built *b = snap_new(0, NULL);
    ev(b, VT_EV_ALLOC, 0x1000, 19 * MIB, 0, 0);   /* a 20 MiB segment, 1 MiB left: whole */
    alloc_free(b, 0x9000000, 5 * MIB);            /* a 20 MiB segment, split */
    ev(b, VT_EV_ALLOC, 0xa000000, 4 * MIB, 0, 0); /* from the cached 20 MiB */
    vt__replay_result r = run_torch(b, NULL, 0);
    ASSERT_EQ(r.devices[0].segment_allocs, 2);
    ASSERT_EQ(r.devices[0].peak_reserved, 40 * MIB);
    ASSERT_EQ(r.devices[0].peak_allocated, 20 * MIB + 5 * MIB);
    free(b);
}

TEST(torch_rules_max_split_size_keeps_oversize_blocks_for_large_requests)
{
    built *b = snap_new(0, NULL);
    alloc_free(b, 0x1000, 60 * MIB);
    ev(b, VT_EV_ALLOC, 0x10000000, 30 * MIB, 0, 0);   /* not from the oversize 60 MiB */
    ev(b, VT_EV_ALLOC, 0x20000000, 50 * MIB, 0, 0);   /* from it: less than 20 MiB over */
    vt__replay_result r = run_torch(b, "max_split_size_mb:40", 0);
    ASSERT_EQ(r.devices[0].peak_reserved, 90 * MIB);
    ASSERT_EQ(r.devices[0].segment_allocs, 2);
    vt__replay_result u = run_torch(b, NULL, 0);        /* unlimited: 30 MiB splits the 60 */
    ASSERT_EQ(u.devices[0].peak_reserved, 110 * MIB);
    free(b);
}

TEST(torch_rules_pending_free_comes_back_at_its_recorded_completion)
{
    built *b = snap_new(0, NULL);
    ev(b, VT_EV_ALLOC, 0x1000, 30 * MIB, 0, 0);
    ev(b, VT_EV_FREE_REQUESTED, 0x1000, 30 * MIB, 0, 1);   /* used on another stream */
    ev(b, VT_EV_ALLOC, 0x9000000, 30 * MIB, 0, 0);         /* cannot have it yet */
    ev(b, VT_EV_FREE_COMPLETED, 0x1000, 30 * MIB, 0, 0);
    ev(b, VT_EV_ALLOC, 0x1000, 30 * MIB, 0, 0);            /* can now */
    vt__replay_result r = run_torch(b, NULL, 0);
    ASSERT_EQ(r.devices[0].peak_reserved, 60 * MIB);
    ASSERT_EQ(r.devices[0].segment_allocs, 2);
    free(b);
}

TEST(torch_rules_expandable_segments_grow_in_20_mib_pages_and_unmap_when_emptied)
{
    built *b = snap_new(0, NULL);
    ev(b, VT_EV_ALLOC, 0x1000, 30 * MIB, 0, 0);         /* maps 40 MiB */
    ev(b, VT_EV_ALLOC, 0x9000000, 5 * MIB, 0, 0);       /* in the 10 MiB left */
    ev(b, VT_EV_ALLOC, 0xa000000, 30 * MIB, 0, 0);      /* 5 MiB free + 40 MiB more */
    ev(b, VT_EV_FREE_REQUESTED, 0x9000000, 5 * MIB, 0, 1);
    ev(b, VT_EV_FREE_COMPLETED, 0x9000000, 5 * MIB, 0, 0);
    ev(b, VT_EV_EMPTY_CACHE, 0, 0, 0, 0);               /* nothing whole to unmap */
    ev(b, VT_EV_FREE_REQUESTED, 0x1000, 30 * MIB, 0, 1);
    ev(b, VT_EV_FREE_COMPLETED, 0x1000, 30 * MIB, 0, 0);
    ev(b, VT_EV_FREE_REQUESTED, 0xa000000, 30 * MIB, 0, 1);
    ev(b, VT_EV_FREE_COMPLETED, 0xa000000, 30 * MIB, 0, 0);
    ev(b, VT_EV_EMPTY_CACHE, 0, 0, 0, 0);               /* everything */
    vt__replay_result r = run_torch(b, "expandable_segments:True", 1 << 30);
    ASSERT(r.expandable_segments);
    ASSERT_EQ(r.devices[0].peak_reserved, 80 * MIB);
    ASSERT_EQ(r.devices[0].device_maps, 4);
    ASSERT_EQ(r.devices[0].device_unmaps, 4);
    ASSERT_EQ(r.devices[0].peak_allocated, 65 * MIB);
    free(b);
}

TEST(torch_rules_garbage_collection_releases_the_oldest_cached_blocks)
{
    built *b = snap_new(100 * MIB, NULL);
    alloc_free(b, 0x1000, 30 * MIB);
    alloc_free(b, 0x9000000, 40 * MIB);
    ev(b, VT_EV_ALLOC, 0x20000000, 50 * MIB, 0, 0);
    /* over half of the allowed 100 MiB: the older 30 MiB block goes first,
     * and that is enough */
    vt__replay_result r = run_torch(b, "per_process_memory_fraction:1,"
                                      "garbage_collection_threshold:0.5", 0);
    ASSERT_EQ(r.devices[0].peak_reserved, 90 * MIB);
    ASSERT_EQ(r.devices[0].alloc_retries, 0);
    ASSERT_EQ(r.devices[0].segment_frees, 1);
    /* without it the device refuses, and the retry frees the whole cache */
    vt__replay_result n = run_torch(b, "per_process_memory_fraction:1", 0);
    ASSERT_EQ(n.devices[0].peak_reserved, 70 * MIB);
    ASSERT_EQ(n.devices[0].alloc_retries, 1);
    ASSERT_EQ(n.devices[0].segment_frees, 2);
    ASSERT(!n.oom.happened);
    free(b);
}

TEST(torch_rules_retry_frees_the_cache_then_runs_out_of_memory)
{
    built *b = snap_new(100 * MIB, NULL);
    ev(b, VT_EV_ALLOC, 0x1000, 60 * MIB, 0, 0);
    alloc_free(b, 0x9000000, 30 * MIB);
    ev(b, VT_EV_ALLOC, 0x20000000, 50 * MIB, 0, 0);
    vt__replay_result r = run_torch(b, NULL, 0);
    ASSERT(r.oom.happened);
    ASSERT_EQ(r.oom.event_index, 4);
    ASSERT_EQ(r.oom.reserved, 60 * MIB);
    ASSERT_EQ(r.devices[0].alloc_retries, 1);
    ASSERT_EQ(r.devices[0].peak_reserved, 90 * MIB);
    free(b);
}

TEST(torch_rules_roundup_power2_divisions_round_to_the_next_step)
{
    built *b = snap_new(0, NULL);
    ev(b, VT_EV_ALLOC, 0x1000, 5 * MIB + 1, 0, 0);   /* 4..8 MiB in 4 steps: 6 MiB */
    vt__replay_result r = run_torch(b, "roundup_power2_divisions:4", 0);
    ASSERT_EQ(r.devices[0].peak_allocated, 6 * MIB);
    vt__replay_result p = run_torch(b, NULL, 0);
    ASSERT_EQ(p.devices[0].peak_allocated, 5 * MIB + 512);
    free(b);
}

TEST(auto_rules_pick_pytorchs_for_an_observed_recording_outside_memory_counts_against_capacity)
{
    built *b = snap_new(100 * MIB, "cache:1,max_split_size_mb:unlimited");
    b->s.meta.flags = VT_META_POOL_OBSERVED;
    ev(b, VT_EV_SEGMENT_ALLOC, 0x1000, 50 * MIB, 0, VT_POOL_LARGE);   /* a library's own */
    ev(b, VT_EV_ALLOC, 0x1000, 50 * MIB, 0, VT_ALLOC_NO_STREAM);
    ev(b, VT_EV_SEGMENT_ALLOC, 0x9000000, 60 * MIB, 0, VT_POOL_LARGE);
    ev(b, VT_EV_ALLOC, 0x9000000, 60 * MIB, 0, VT_ALLOC_POOL_BLOCK);
    vt__replay_options opt = { 0 };
    vt__replay_result r = replay_ok(b, &opt);
    ASSERT_EQ(r.rules, VT_REPLAY_RULES_PYTORCH);
    ASSERT(r.oom.happened);                  /* 50 + 60 MiB > 100 MiB */
    ASSERT_EQ(r.oom.event_index, 3);
    opt.capacity = 120 * MIB;
    r = replay_ok(b, &opt);
    ASSERT(!r.oom.happened);
    ASSERT_EQ(r.devices[0].peak_reserved, 60 * MIB);             /* PyTorch's own */
    ASSERT_EQ(r.devices[0].recorded_peak_reserved, 60 * MIB);
    ASSERT(r.segments_identical);
    /* vramtrace's settings of the run are not PyTorch's: not applied */
    ASSERT_MSG(strstr(r.conf, "max_split_size_mb:unlimited") != NULL, "%s", r.conf);
    free(b);
}

/* PyTorch's cache keeps a freed 60 MiB block on a 100 MiB device when a
 * library asks 50 MiB of its own (an OOM without VT_OOM_FRAMEWORK, format
 * 1.13): PyTorch does not give its cache back for it, so the replay runs
 * out there; with the cache emptied before it (empty_cache_at), it fits.
 * The same request as PyTorch's own (VT_OOM_FRAMEWORK) is served from its
 * cache. */
TEST(a_librarys_request_beside_pytorchs_cache_fits_only_once_the_cache_is_emptied)
{
    for (int framework = 0; framework < 2; framework++) {
        built *b = snap_new(100 * MIB, NULL);
        b->s.meta.flags = VT_META_POOL_OBSERVED;
        b->s.meta.format_version = VT_FORMAT_MAJOR << 16 | 13;
        ev(b, VT_EV_SEGMENT_ALLOC, 0x9000000, 60 * MIB, 0, VT_POOL_LARGE);
        ev(b, VT_EV_ALLOC, 0x9000000, 60 * MIB, 0, VT_ALLOC_POOL_BLOCK);
        ev(b, VT_EV_FREE_REQUESTED, 0x9000000, 60 * MIB, 0, 0);
        ev(b, VT_EV_FREE_COMPLETED, 0x9000000, 60 * MIB, 0, 0);
        ev(b, VT_EV_OOM, framework ? VT_OOM_FRAMEWORK : 0, 50 * MIB, 0, 0);   /* 4 */
        ASSERT_EQ(vt__snapshot_oom_outside_framework(&b->s, &b->ev[4]), !framework);
        vt__replay_options opt = { .rules = VT_REPLAY_RULES_PYTORCH };
        vt__replay_result r = replay_ok(b, &opt);
        ASSERT_EQ(r.oom.happened, !framework);
        if (!framework) {
            ASSERT_EQ(r.oom.event_index, 4);
            opt.empty_cache_at = 4 + 1;
            r = replay_ok(b, &opt);
            ASSERT(!r.oom.happened);
        }
        b->s.meta.format_version = VT_FORMAT_MAJOR << 16 | 12;   /* an older file: PyTorch's */
        ASSERT(!vt__snapshot_oom_outside_framework(&b->s, &b->ev[4]));
        free(b);
    }
}

/* A CUDA graph's private pool (SEGMENT_ALLOC aux2, format 1.14) on a
 * 100 MiB device: two 30 MiB segments captured, one still holding the
 * graph's output, the other wholly free; then PyTorch's default pool asks
 * 50 MiB. PyTorch serves no default-pool request from a private pool and
 * gives a live graph's segments back for nothing, so the replay runs out
 * there as the program did (before: the pool was the default pool's, and
 * its free segment served the request). Once the graph is deleted
 * (graphs_deleted_at) the retry's release of the cache gives the free
 * segment back, never the one still in use, and the request fits; a
 * request that needs both still does not. The pool's blocks are not
 * re-placed: both segments are held as recorded. */
TEST(a_cuda_graphs_private_pool_is_held_as_recorded_until_its_graph_is_deleted)
{
    for (uint64_t ask = 50; ask <= 70; ask += 20) {
        built *b = snap_new(100 * MIB, NULL);
        b->s.meta.flags = VT_META_POOL_OBSERVED;
        ev(b, VT_EV_SEGMENT_ALLOC, 0x1000000, 10 * MIB, 0, VT_POOL_LARGE);   /* default pool */
        ev(b, VT_EV_ALLOC, 0x1000000, 10 * MIB, 0, VT_ALLOC_POOL_BLOCK);
        ev(b, VT_EV_SEGMENT_ALLOC, 0x9000000, 30 * MIB, 7, VT_POOL_LARGE);   /* the capture's */
        b->ev[2].aux2 = 3;
        ev(b, VT_EV_ALLOC, 0x9000000, 30 * MIB, 7, VT_ALLOC_POOL_BLOCK);
        ev(b, VT_EV_SEGMENT_ALLOC, 0xb000000, 30 * MIB, 7, VT_POOL_LARGE);
        b->ev[4].aux2 = 3;
        ev(b, VT_EV_ALLOC, 0xb000000, 30 * MIB, 7, VT_ALLOC_POOL_BLOCK);
        ev(b, VT_EV_FREE_REQUESTED, 0xb000000, 30 * MIB, 7, 0);
        ev(b, VT_EV_FREE_COMPLETED, 0xb000000, 30 * MIB, 7, 0);
        ev(b, VT_EV_ALLOC, 0x5000000, ask * MIB, 0, VT_ALLOC_POOL_BLOCK);      /* 8 */
        vt__replay_options opt = { .rules = VT_REPLAY_RULES_PYTORCH };
        vt__replay_result r = replay_ok(b, &opt);
        ASSERT(r.oom.happened);
        ASSERT_EQ(r.oom.event_index, 8);
        ASSERT_EQ(r.oom.reserved, 10 * MIB);   /* the default pool's; the graph's outside it */
        opt.graphs_deleted_at = 8 + 1;
        r = replay_ok(b, &opt);
        ASSERT_EQ(r.oom.happened, ask == 70);   /* 10 + 30 still held: 60 MiB left */
        /* deleted before the capture's blocks were freed: the same */
        b->s.nevents = 9;
        opt.graphs_deleted_at = 6 + 1;
        r = replay_ok(b, &opt);
        ASSERT_EQ(r.oom.happened, ask == 70);
        free(b);
    }
}

TEST(imported_pytorch_snapshot_replays_an_emptied_cache_it_has_no_event_for)
{
    built *b = snap_new(0, "pytorch");
    b->s.meta.config = 0;
    b->s.meta.library_version = 1;            /* what `vramtrace import` writes */
    ev(b, VT_EV_SEGMENT_ALLOC, 0x1000, 30 * MIB, 0, VT_POOL_LARGE);
    alloc_free(b, 0x1000, 30 * MIB);
    ev(b, VT_EV_SEGMENT_FREE, 0x1000, 30 * MIB, 0, 0);   /* torch.cuda.empty_cache() */
    ev(b, VT_EV_SEGMENT_ALLOC, 0x1000, 30 * MIB, 0, VT_POOL_LARGE);
    ev(b, VT_EV_ALLOC, 0x1000, 30 * MIB, 0, 0);
    vt__replay_options opt = { 0 };
    vt__replay_result r = replay_ok(b, &opt);
    ASSERT_EQ(r.rules, VT_REPLAY_RULES_PYTORCH);
    ASSERT_EQ(r.devices[0].segment_frees, 1);
    ASSERT_EQ(r.devices[0].segment_allocs, 2);
    ASSERT(r.segments_identical);
    ASSERT_EQ(r.devices[0].peak_reserved, 30 * MIB);
    free(b);
}

TEST(sweep_carries_the_rules_and_refuses_a_bad_pytorch_key)
{
    built *b = snap_new(0, NULL);
    ev(b, VT_EV_ALLOC, 0x1000, 3 * MIB, 0, 0);
    const char *confs[] = { "", "expandable_segments:True", "no_such_key:1" };
    sweep w;
    vt__replay_options base = { .rules = VT_REPLAY_RULES_PYTORCH };
    sweep_ok(b, confs, 3, &base, 2, &w);
    ASSERT_EQ(w.status[0], 0);
    ASSERT_EQ(w.out[0].rules, VT_REPLAY_RULES_PYTORCH);
    ASSERT_EQ(w.out[0].devices[0].peak_reserved, 20 * MIB);
    ASSERT_EQ(w.out[1].devices[0].peak_reserved, 20 * MIB);   /* one 20 MiB page */
    ASSERT(w.out[1].expandable_segments);
    ASSERT_EQ(w.status[2], -EINVAL);
    ASSERT_MSG(strstr(w.errs[2], "no_such_key") != NULL, "%s", w.errs[2]);
    /* AUTO: a recording of vramtrace's allocator keeps vramtrace's rules */
    base.rules = VT_REPLAY_RULES_AUTO;
    sweep_ok(b, confs, 1, &base, 1, &w);
    ASSERT_EQ(w.out[0].rules, VT_REPLAY_RULES_VRAMTRACE);
    free(b);
}

TEST(torch_rules_start_with_the_frameworks_blocks_and_a_librarys_segments_held_before_the_window)
{
    /* an observed PyTorch: its 20 MiB weights and a library's 10 MiB
     * workspace were made before the window; then a 25 MiB tensor (a 26
     * MiB segment) on a 50 MiB device: 56 MiB, where an empty start fits */
    built *b = snap_new(50 * MIB, NULL);
    b->s.meta.flags = VT_META_POOL_OBSERVED;
    b->s.meta.events_overwritten = 1000;
    ev(b, VT_EV_SEGMENT_ALLOC, 0x30000000, 26 * MIB, 0, VT_POOL_LARGE);
    ev(b, VT_EV_ALLOC, 0x30000000, 25 * MIB, 0, VT_ALLOC_POOL_BLOCK);
    state_block(b, VT_POOL_FRAMEWORK_LARGE, 0x10000000, 20 * MIB, 0);
    state_block(b, VT_POOL_LARGE, 0x20000000, 10 * MIB, 0);   /* the library's */
    vt__replay_result r = run_torch(b, NULL, 0);
    ASSERT_EQ(r.seeded, 1);                  /* the library's block is not PyTorch's */
    ASSERT_EQ(r.seeded_bytes, 20 * MIB);
    ASSERT(r.oom.happened);
    ASSERT_EQ(r.oom.event_index, 1);
    vt__replay_result big = run_torch(b, NULL, 60 * MIB);
    ASSERT(!big.oom.happened);
    ASSERT_EQ(big.devices[0].peak_reserved, 46 * MIB);   /* 20 + 26: PyTorch's own */
    ASSERT_EQ(big.devices[0].peak_held, 56 * MIB);       /* and the library's 10 */
    ASSERT_EQ(big.devices[0].recorded_peak_reserved, 46 * MIB);
    ASSERT(big.segments_identical);                      /* the 26 MiB one */
    ASSERT_EQ(big.segments_compared, 1);
    free(b);
}

TEST_MAIN()
