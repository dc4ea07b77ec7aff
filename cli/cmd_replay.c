/*
 * cli/cmd_replay.c - `vramtrace replay SNAPSHOT [--conf K:V,...] [--capacity SIZE]
 * [--sweep] [--json]`: would the recorded run fit with other allocator
 * settings, or on a device of another size?
 *
 * The recorded allocations and frees go, in order, through vramtrace's own
 * allocator on a host-only device (alloc/replay/replay.h). One replay prints, per
 * device: peak allocated and reserved (and the recording's, for comparison),
 * fragmentation at the reserved peak, the device calls the allocator made,
 * and where it ran out of memory (event, time, call site, live bytes), if it
 * did. --sweep replays a grid of settings and ranks them by peak reserved;
 * with --capacity, the ones that fit come first; its last line recommends
 * the best that fits (as PYTORCH_CUDA_ALLOC_CONF or VRAMTRACE_CONF text,
 * defaults left out) and by how much it beats the recorded settings, or
 * says to keep them, or that none fits.
 *
 * Exit status (the commands' convention, commands.h): 0 when the replay ran,
 * whether or not it ran out of memory; 2 for bad arguments or a snapshot that
 * cannot be read or replayed.
 */
#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "commands.h"
#include "event_stream.h"
#include "order.h"
#include "pytorch.h"
#include "config.h"
#include "replay.h"
#include "report_util.h"

static const char usage_text[] =
    "usage: vramtrace " VT__USAGE_REPLAY "\n"
    "\n"
    "Replay the recorded allocations and frees (a .vtsnap, or a PyTorch snapshot\n"
    "pickle) under an allocator's rules on a simulated device, and report peak\n"
    "allocated and reserved bytes, fragmentation at the reserved peak, the device\n"
    "calls made, and where the run would run out of memory.\n"
    "  --rules R        auto (default): PyTorch's caching allocator's rules for a\n"
    "                   recording of it (a PyTorch snapshot, or `vramtrace run` of a\n"
    "                   PyTorch program), vramtrace's allocator otherwise;\n"
    "                   vramtrace; pytorch (see docs/replay.md)\n"
    "  --conf K:V,...   allocator settings over the recorded ones (keys as in\n"
    "                   VRAMTRACE_CONF or PYTORCH_CUDA_ALLOC_CONF: max_split_size_mb,\n"
    "                   roundup_power2_divisions, garbage_collection_threshold,\n"
    "                   per_process_memory_fraction, expandable_segments, cache)\n"
    "  --capacity SIZE  device memory, e.g. 40G, 81920M, 40GiB (K/M/G/T: powers of\n"
    "                   1024; KB/MB/GB/TB: of 1000), or 'unlimited';\n"
    "                   default: the recorded device's\n"
    "  --sweep          replay a grid of settings (max_split_size_mb,\n"
    "                   roundup_power2_divisions, garbage_collection_threshold,\n"
    "                   expandable_segments),\n"
    "                   ranked by peak reserved; with --capacity, which ones fit\n"
    "  --jobs N         replays run at once by --sweep (default: the CPUs)\n"
    "  --json           one JSON document instead of text\n"
    VT_EXIT_HELP;

/* "40G", "40GiB", "40GB", "1.5T", "81920M", "123" (bytes), "unlimited". */
static int parse_capacity(const char *v, uint64_t *out)
{
    if (!strcasecmp(v, "unlimited")) {
        *out = VT_REPLAY_UNLIMITED;
        return 0;
    }
    return vt__parse_bytes(v, out);
}

/* Seconds since the recording's first event. */
static double rel_s(const vt__replay_result *r, uint64_t t)
{
    uint64_t first = r->first_time_ns;
    return t > first ? (double)(t - first) / 1e9 : 0.0;
}

static const char *cap_text(uint64_t cap, char *buf)
{
    if (cap == VT_REPLAY_UNLIMITED) {
        snprintf(buf, 32, "unlimited");
        return buf;
    }
    return vt__fmt_bytes(cap, buf);
}

static double frag_at_peak(const vt__replay_device *d)
{
    /* measured after the call that set the peak: the share of reserved
     * bytes not handed out */
    uint64_t peak = d->peak_reserved;
    return peak && d->allocated_at_peak <= peak
               ? 100.0 * (double)(peak - d->allocated_at_peak) / (double)peak : 0.0;
}

static void print_site(const vt__snapshot_data *s, uint32_t stack)
{
    const vt__frame *f = vt__report_site_frame(s, stack);
    if (f)
        vt__report_frame_text(stdout, s, f);
    else
        printf("<no stack recorded>");
}

static void print_text(const char *path, const vt__snapshot_data *s, const vt__replay_result *r,
                       const char *origin)
{
    char b1[32], b2[32], b3[32], b4[32];
    printf("replay of %s: %zu events, %zu allocator calls replayed\n", path, r->events, r->replayed);
    printf("rules: %s\n", r->rules == VT_REPLAY_RULES_PYTORCH
                              ? "pytorch (a model of PyTorch's caching allocator)"
                              : "vramtrace (vramtrace's allocator)");
    printf("settings: %s (%s)\n", r->conf, origin);
    if (r->events_lost)
        printf("note: the recording lost its first %" PRIu64 " events (ring overflow): the "
               "replay starts where the window starts\n", r->events_lost);
    if (r->seeded)
        printf("note: %zu allocations (%s) made before the window and held when it opened "
               "are made first, in segments of the replay's choosing\n", r->seeded,
               vt__fmt_bytes(r->seeded_bytes, b1));
    if (r->skipped_frees)
        printf("note: %zu frees of allocations the replay never held were skipped\n",
               r->skipped_frees);
    for (size_t i = 0; i < r->ndevices; i++) {
        const vt__replay_device *d = &r->devices[i];
        printf("device %d (capacity %s):\n", d->ordinal, cap_text(d->capacity, b1));
        printf("  peak allocated  %-12s (recorded %s)\n", vt__fmt_bytes(d->peak_allocated, b1),
               vt__fmt_bytes(d->recorded_peak_allocated, b2));
        printf("  peak reserved   %-12s (recorded %s)\n", vt__fmt_bytes(d->peak_reserved, b1),
               vt__fmt_bytes(d->recorded_peak_reserved, b2));
        printf("  fragmentation at the reserved peak: %.1f %% (%s allocated of %s, after event %zu, %.3f s)\n",
               frag_at_peak(d), vt__fmt_bytes(d->allocated_at_peak, b1),
               vt__fmt_bytes(d->peak_reserved, b2), d->peak_event,
               rel_s(r, d->peak_time_ns));
        printf("  segments: %" PRIu64 " allocated, %" PRIu64 " released (recorded: %" PRIu64
               " allocated, %" PRIu64 " released)\n", d->segment_allocs, d->segment_frees,
               d->recorded_segment_allocs, d->recorded_segment_frees);
        printf("  device calls: %" PRIu64 " malloc (%" PRIu64 " refused), %" PRIu64 " free, "
               "%" PRIu64 " event record, %" PRIu64 " event query, %" PRIu64 " event sync\n",
               d->device_mallocs + d->device_failed_mallocs, d->device_failed_mallocs,
               d->device_frees, d->event_records, d->event_queries, d->event_syncs);
        if (d->device_maps || d->device_unmaps)
            printf("  expandable segments: %" PRIu64 " chunks mapped, %" PRIu64 " unmapped\n",
                   d->device_maps, d->device_unmaps);
    }
    if (r->segments_identical)
        printf("segment allocations: identical to the recording (%zu)\n", r->segments_compared);
    else
        printf("segment allocations: differ from the recording from the %zu%s on\n",
               r->first_segment_difference + 1,
               (r->first_segment_difference + 1) % 10 == 1 && (r->first_segment_difference + 1) % 100 != 11 ? "st"
               : (r->first_segment_difference + 1) % 10 == 2 && (r->first_segment_difference + 1) % 100 != 12 ? "nd"
               : (r->first_segment_difference + 1) % 10 == 3 && (r->first_segment_difference + 1) % 100 != 13 ? "rd" : "th");
    if (r->oom.happened) {
        const vt__replay_oom *o = &r->oom;
        printf("OUT OF MEMORY at event %zu (seq %" PRIu64 ", %.3f s): %s asked on device %d, "
               "stream 0x%" PRIx64 "\n", o->event_index, o->seq, rel_s(r, o->time_ns),
               vt__fmt_bytes(o->req_size, b1), o->device, o->stream);
        printf("  call site: ");
        print_site(s, o->stack);
        printf("\n  live: %s in %" PRIu64 " blocks (%s asked), reserved %s, device free %s\n",
               vt__fmt_bytes(o->allocated, b1), o->live_blocks, vt__fmt_bytes(o->requested, b2),
               vt__fmt_bytes(o->reserved, b3), vt__fmt_bytes(o->device_free, b4));
    } else {
        printf("fits: no out-of-memory");
        if (r->ndevices && r->devices[0].capacity != VT_REPLAY_UNLIMITED)
            printf(" at %s", cap_text(r->devices[0].capacity, b1));
        printf("\n");
    }
    if (r->recorded_ooms)
        printf("the recording ran out of memory %zu times; the replay served %zu of those "
               "requests%s\n", r->recorded_ooms, r->recorded_ooms_served,
               r->recorded_ooms_served ? " (then gave them back: what the program would have "
                                         "done next is not recorded)" : "");
}

static void json_u64(const char *key, uint64_t v, int comma)
{
    printf("\"%s\": %" PRIu64 "%s", key, v, comma ? ", " : "");
}

/* The counters of vt__replay_device that print as plain numbers, by group. */
struct counter {
    const char *key;
    size_t offset;             /* of a uint64_t in vt__replay_device */
};
#define COUNTER(key, member) { key, offsetof(vt__replay_device, member) }

static const struct counter replay_counters[] = {
    COUNTER("segment_allocs", segment_allocs), COUNTER("segment_frees", segment_frees),
    COUNTER("alloc_retries", alloc_retries),   COUNTER("fence_events", fence_events),
};
static const struct counter device_call_counters[] = {
    COUNTER("malloc", device_mallocs),         COUNTER("malloc_refused", device_failed_mallocs),
    COUNTER("free", device_frees),             COUNTER("map_chunk", device_maps),
    COUNTER("unmap_chunk", device_unmaps),     COUNTER("event_create", event_creates),
    COUNTER("event_record", event_records),    COUNTER("event_query", event_queries),
    COUNTER("event_sync", event_syncs),
};
static const struct counter recorded_counters[] = {
    COUNTER("peak_allocated", recorded_peak_allocated),
    COUNTER("peak_reserved", recorded_peak_reserved),
    COUNTER("segment_allocs", recorded_segment_allocs),
    COUNTER("segment_frees", recorded_segment_frees),
};

/* "key": value pairs of d, separated by ", " (and followed by one when
 * `comma`). */
static void json_counters(const vt__replay_device *d, const struct counter *c, size_t n, int comma)
{
    for (size_t i = 0; i < n; i++) {
        uint64_t v;
        memcpy(&v, (const char *)d + c[i].offset, sizeof v);
        json_u64(c[i].key, v, comma || i + 1 < n);
    }
}
#define JSON_COUNTERS(d, table, comma) \
    json_counters(d, table, sizeof table / sizeof *table, comma)

static void print_device_json(const vt__replay_device *d)
{
    printf("{");
    printf("\"device\": %d, ", d->ordinal);
    if (d->capacity == VT_REPLAY_UNLIMITED)
        printf("\"capacity\": null, ");
    else
        json_u64("capacity", d->capacity, 1);
    json_u64("peak_allocated", d->peak_allocated, 1);
    json_u64("peak_reserved", d->peak_reserved, 1);
    json_u64("allocated_at_peak", d->allocated_at_peak, 1);
    printf("\"fragmentation_at_peak\": %.4f, ", frag_at_peak(d) / 100.0);
    printf("\"peak_event\": %zu, ", d->peak_event);
    JSON_COUNTERS(d, replay_counters, 1);
    printf("\"device_calls\": {");
    JSON_COUNTERS(d, device_call_counters, 0);
    printf("}, \"recorded\": {");
    JSON_COUNTERS(d, recorded_counters, 0);
    printf("}}");
}

static void print_oom_json(const vt__snapshot_data *s, const vt__replay_result *r)
{
    const vt__replay_oom *o = &r->oom;
    if (!o->happened) {
        printf("null");
        return;
    }
    printf("{\"event_index\": %zu, ", o->event_index);
    json_u64("seq", o->seq, 1);
    printf("\"time_s\": %.6f, \"device\": %d, ", rel_s(r, o->time_ns), o->device);
    json_u64("stream", o->stream, 1);
    json_u64("size", o->req_size, 1);
    json_u64("live_bytes", o->allocated, 1);
    json_u64("live_requested_bytes", o->requested, 1);
    json_u64("live_blocks", o->live_blocks, 1);
    json_u64("reserved", o->reserved, 1);
    json_u64("device_free", o->device_free, 1);
    printf("\"call_site\": ");
    vt__report_frame_json(stdout, s, vt__report_site_frame(s, o->stack));
    printf("}");
}

static void print_result_json(const vt__snapshot_data *s, const vt__replay_result *r)
{
    printf("\"rules\": \"%s\", \"settings\": ", vt__replay_rules_name(r->rules));
    vt__json_str(stdout, r->conf);
    printf(", \"events\": %zu, \"replayed\": %zu, \"skipped_frees\": %zu, \"seeded\": %zu, ",
           r->events, r->replayed, r->skipped_frees, r->seeded);
    json_u64("seeded_bytes", r->seeded_bytes, 1);
    json_u64("events_lost", r->events_lost, 1);
    printf("\"recorded_ooms\": %zu, \"recorded_ooms_served\": %zu, ", r->recorded_ooms,
           r->recorded_ooms_served);
    printf("\"expandable_segments\": %s, ", r->expandable_segments ? "true" : "false");
    printf("\"segments_identical\": %s, \"first_segment_difference\": ",
           r->segments_identical ? "true" : "false");
    if (r->segments_identical)
        printf("null");
    else
        printf("%zu", r->first_segment_difference);
    printf(", \"devices\": [");
    for (size_t i = 0; i < r->ndevices; i++) {
        printf("%s", i ? ", " : "");
        print_device_json(&r->devices[i]);
    }
    printf("], \"oom\": ");
    print_oom_json(s, r);
}

/* ---- --sweep ------------------------------------------------------------- */

static const char *const sweep_split[] = { "unlimited", "32", "64", "128", "256", "512" };
static const char *const sweep_roundup[] = { "0", "2", "4", "8", "16" };
static const char *const sweep_gc[] = { "0", "0.6", "0.8" };
static const char *const sweep_expandable[] = { "0", "1" };
#define N_OF(a) (sizeof a / sizeof *a)

struct ranked { size_t index; };
static const vt__replay_result *rank_results;
static const int *rank_status;

static int cmp_ranked(const void *a, const void *b)
{
    size_t x = ((const struct ranked *)a)->index, y = ((const struct ranked *)b)->index;
    int fx = rank_status[x] ? 2 : rank_results[x].oom.happened, fy = rank_status[y] ? 2 : rank_results[y].oom.happened;
    if (fx != fy)
        return fx - fy;
    uint64_t px = vt__replay_peak_reserved(&rank_results[x]);
    uint64_t py = vt__replay_peak_reserved(&rank_results[y]);
    int c = vt__order(px, py);
    return c ? c : vt__order(x, y);
}

/* A sweep label as the setting a user writes: the keys left at their
 * defaults dropped ("max_split_size_mb:unlimited,...,expandable_segments:1"
 * -> "expandable_segments:True" for PyTorch, ":1" for vramtrace). */
static void setting_text(const char *label, bool torch, char *out, size_t len)
{
    static const char *const defaults[] = { "max_split_size_mb:unlimited",
        "roundup_power2_divisions:0", "garbage_collection_threshold:0",
        "expandable_segments:0" };
    size_t used = 0;
    out[0] = '\0';
    for (const char *p = label; *p;) {
        size_t n = strcspn(p, ",");
        bool dflt = false;
        for (size_t k = 0; k < N_OF(defaults); k++)
            dflt |= n == strlen(defaults[k]) && !strncmp(p, defaults[k], n);
        if (!dflt && used + 1 < len) {
            bool expandable_on = torch && n == strlen("expandable_segments:1") &&
                                 !strncmp(p, "expandable_segments:1", n);
            int w = snprintf(out + used, len - used, "%s%.*s", used ? "," : "",
                             expandable_on ? (int)strlen("expandable_segments:True") : (int)n,
                             expandable_on ? "expandable_segments:True" : p);
            if (w > 0)
                used += (size_t)w < len - used ? (size_t)w : len - used - 1;
        }
        p += n + (p[n] == ',');
    }
}

/* One line: the best setting that fits (the first ranked), and by how much
 * it beats the recorded settings; or that none does. */
static void print_recommendation(const vt__replay_result *res, const int *status,
                                 const char (*labels)[160], const struct ranked *order, size_t n,
                                 uint64_t cap)
{
    char b1[32], b2[32], b3[32], conf[256];
    const vt__replay_result *best = &res[order[0].index];
    bool torch = best->rules == VT_REPLAY_RULES_PYTORCH;
    const char *var = torch ? "PYTORCH_CUDA_ALLOC_CONF" : "VRAMTRACE_CONF";
    uint64_t bp = vt__replay_peak_reserved(best), rp = vt__replay_peak_reserved(&res[0]);
    if (status[order[0].index] || (cap != VT_REPLAY_UNLIMITED && best->oom.happened)) {
        size_t i = order[0].index;
        for (size_t j = 0; j < n; j++)   /* the OOMs' ranks: the least reserved */
            if (!status[order[j].index]) {
                i = order[j].index;
                break;
            }
        printf("recommendation: none: no setting tried fits in %s; the least reserved when it "
               "ran out was %s (%s)\n", cap_text(cap, b1),
               vt__fmt_bytes(vt__replay_peak_reserved(&res[i]), b2), labels[i]);
        return;
    }
    if (order[0].index == 0 || bp >= rp) {
        printf("recommendation: keep the recorded settings: no setting tried peaks lower "
               "(%s reserved)\n", vt__fmt_bytes(rp, b1));
        return;
    }
    setting_text(labels[order[0].index], torch, conf, sizeof conf);
    if (res[0].oom.happened)
        printf("recommendation: %s=%s fits, peaking at %s reserved of %s; the recorded "
               "settings ran out\n", var, *conf ? conf : "(defaults)", vt__fmt_bytes(bp, b1),
               cap_text(cap, b2));
    else
        printf("recommendation: %s=%s peaks at %s reserved, %s (%.1f%%) less than the "
               "recorded settings' %s\n", var, *conf ? conf : "(defaults)",
               vt__fmt_bytes(bp, b1), vt__fmt_bytes(rp - bp, b2),
               100.0 * (double)(rp - bp) / (double)rp, vt__fmt_bytes(rp, b3));
}

/* s: every section but the events, which each replay reads from its own
 * copy of es (serr: where es says a damaged file). */
static int run_sweep(const char *path, const vt__snapshot_data *s, vt__event_stream *es,
                     char *serr, const char *user_conf, uint64_t capacity, vt__replay_rules rules,
                     unsigned jobs, int json)
{
    /* the garbage collection threshold is a fraction of the capacity: only
     * with a capacity does it do anything */
    bool capped = capacity != VT_REPLAY_UNLIMITED;
    if (!capacity)
        for (size_t k = 0; k < s->ndevices; k++)
            capped |= s->devices[k].total_bytes != 0;
    size_t ngc = capped ? N_OF(sweep_gc) : 1;
    size_t n = N_OF(sweep_split) * N_OF(sweep_roundup) * ngc * N_OF(sweep_expandable) + 1;
    char (*confs)[256] = calloc(n, sizeof *confs);
    const char **conf_ptrs = calloc(n, sizeof *conf_ptrs);
    char (*labels)[160] = calloc(n, sizeof *labels);
    vt__replay_result *res = calloc(n, sizeof *res);
    int *status = calloc(n, sizeof *status);
    char (*errs)[256] = calloc(n, sizeof *errs);
    struct ranked *order = calloc(n, sizeof *order);
    int rc = VT_EXIT_FAILURE;
    if (!confs || !conf_ptrs || !labels || !res || !status || !errs || !order) {
        fprintf(stderr, "vramtrace replay: out of memory\n");
        goto out;
    }
    const char *base = user_conf ? user_conf : "";
    /* first: the settings as recorded (plus --conf) */
    snprintf(confs[0], sizeof confs[0], "%s", base);
    snprintf(labels[0], sizeof labels[0], "as recorded%s", *base ? " + --conf" : "");
    size_t k = 1;
    for (size_t a = 0; a < N_OF(sweep_split); a++)
        for (size_t b = 0; b < N_OF(sweep_roundup); b++)
            for (size_t c = 0; c < ngc; c++)
                for (size_t e = 0; e < N_OF(sweep_expandable); e++, k++) {
                    snprintf(labels[k], sizeof labels[k],
                             "max_split_size_mb:%s,roundup_power2_divisions:%s,"
                             "garbage_collection_threshold:%s,expandable_segments:%s",
                             sweep_split[a], sweep_roundup[b], sweep_gc[c], sweep_expandable[e]);
                    snprintf(confs[k], sizeof confs[k], "%s%s%s", base, *base ? "," : "",
                             labels[k]);
                }
    for (size_t i = 0; i < n; i++)
        conf_ptrs[i] = confs[i];
    vt__replay_options sweep_opt = { .capacity = capacity, .rules = rules };
    if (vt__replay_sweep_confs_stream(s, es, serr, conf_ptrs, n, &sweep_opt, jobs, res, status,
                                      errs)) {
        fprintf(stderr, "vramtrace replay: cannot start the sweep\n");
        goto out;
    }
    if (status[0]) {
        fprintf(stderr, "vramtrace replay: %s: %s\n", path, errs[0]);
        goto out;
    }
    for (size_t i = 0; i < n; i++)
        order[i].index = i;
    rank_results = res;
    rank_status = status;
    qsort(order, n, sizeof *order, cmp_ranked);
    uint64_t cap0 = res[0].ndevices ? res[0].devices[0].capacity : VT_REPLAY_UNLIMITED;
    char b1[32], b2[32], b3[32];
    if (json) {
        printf("{\"file\": ");
        vt__json_str(stdout, path);
        printf(", \"capacity\": ");
        if (cap0 == VT_REPLAY_UNLIMITED)
            printf("null");
        else
            printf("%" PRIu64, cap0);
        printf(", \"rules\": \"%s\", \"runs\": [", vt__replay_rules_name(res[0].rules));
        for (size_t j = 0; j < n; j++) {
            size_t i = order[j].index;
            printf("%s{\"rank\": %zu, \"label\": ", j ? ", " : "", j + 1);
            vt__json_str(stdout, labels[i]);
            if (status[i]) {
                printf(", \"error\": ");
                vt__json_str(stdout, errs[i]);
                printf("}");
                continue;
            }
            printf(", \"fits\": %s, ", res[i].oom.happened ? "false" : "true");
            print_result_json(s, &res[i]);
            printf("}");
        }
        printf("]}\n");
    } else {
        printf("sweep of %s: %zu settings, device capacity %s, rules %s, ranked by peak "
               "reserved\n", path, n, cap_text(cap0, b1), vt__replay_rules_name(res[0].rules));
        printf("%4s  %-12s %-12s %6s  %-22s %s\n", "rank", "reserved", "allocated", "frag",
               "fits", "settings");
        for (size_t j = 0; j < n; j++) {
            size_t i = order[j].index;
            if (status[i]) {
                printf("%4zu  error: %s  %s\n", j + 1, errs[i], labels[i]);
                continue;
            }
            const vt__replay_result *r = &res[i];
            const vt__replay_device *d = &r->devices[0];
            char fits[48];
            if (r->oom.happened)
                snprintf(fits, sizeof fits, "OOM at event %zu", r->oom.event_index);
            else
                snprintf(fits, sizeof fits, "%s", cap0 == VT_REPLAY_UNLIMITED ? "-" : "fits");
            printf("%4zu  %-12s %-12s %5.1f%%  %-22s %s\n", j + 1,
                   vt__fmt_bytes(vt__replay_peak_reserved(r), b2),
                   vt__fmt_bytes(d->peak_allocated, b3), frag_at_peak(d), fits, labels[i]);
        }
        if (cap0 != VT_REPLAY_UNLIMITED) {
            size_t nfit = 0;
            for (size_t i = 0; i < n; i++)
                nfit += !status[i] && !res[i].oom.happened;
            printf("%zu of %zu settings fit in %s%s\n", nfit, n, cap_text(cap0, b1),
                   res[0].oom.happened ? "; the recorded settings do not" : "");
        }
        print_recommendation(res, status, (const char (*)[160])labels, order, n, cap0);
    }
    rc = 0;
out:
    free(confs);
    free(conf_ptrs);
    free(labels);
    free(res);
    free(status);
    free(errs);
    free(order);
    return rc;
}

int vt__cmd_replay(int argc, char **argv)
{
    const char *path = NULL, *conf = NULL;
    uint64_t capacity = 0;
    int json = 0, sweep = 0;
    vt__replay_rules rules = VT_REPLAY_RULES_AUTO;
    long jobs = sysconf(_SC_NPROCESSORS_ONLN);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(usage_text, stdout);
            return 0;
        } else if (!strcmp(a, "--json")) {
            json = 1;
        } else if (!strcmp(a, "--sweep")) {
            sweep = 1;
        } else if (!strcmp(a, "--conf") || !strcmp(a, "--capacity") || !strcmp(a, "--jobs") ||
                   !strcmp(a, "--rules")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "vramtrace replay: %s needs a value (see --help)\n", a);
                return VT_EXIT_FAILURE;
            }
            const char *v = argv[++i];
            if (!strcmp(a, "--conf")) {
                conf = v;
            } else if (!strcmp(a, "--rules")) {
                if (!strcmp(v, "auto")) {
                    rules = VT_REPLAY_RULES_AUTO;
                } else if (!strcmp(v, "vramtrace")) {
                    rules = VT_REPLAY_RULES_VRAMTRACE;
                } else if (!strcmp(v, "pytorch")) {
                    rules = VT_REPLAY_RULES_PYTORCH;
                } else {
                    fprintf(stderr, "vramtrace replay: bad --rules '%s' (expected auto, vramtrace "
                                    "or pytorch)\n", v);
                    return VT_EXIT_FAILURE;
                }
            } else if (!strcmp(a, "--capacity")) {
                if (parse_capacity(v, &capacity)) {
                    fprintf(stderr, "vramtrace replay: bad --capacity '%s' (expected a size such "
                                    "as 40G, 81920M, 40GiB, 40GB, or 'unlimited')\n", v);
                    return VT_EXIT_FAILURE;
                }
            } else {
                char *end;
                jobs = strtol(v, &end, 10);
                if (*end || jobs < 1 || jobs > 1024) {
                    fprintf(stderr, "vramtrace replay: bad --jobs '%s' (expected 1 to 1024)\n", v);
                    return VT_EXIT_FAILURE;
                }
            }
        } else if (a[0] == '-' && a[1]) {
            vt__cli_unknown_option("replay", a);
            return VT_EXIT_FAILURE;
        } else if (!path) {
            path = a;
        } else {
            fprintf(stderr, "vramtrace replay: one snapshot at a time ('%s' is a second one)\n", a);
            return VT_EXIT_FAILURE;
        }
    }
    if (!path) {
        fputs(usage_text, stderr);
        return VT_EXIT_FAILURE;
    }
    /* The events as a stream, under either rules; a sweep's children each
     * read the parent's stream on their own (a pickle converted once). */
    char serr[1024], err[512];
    vt__snapshot_data *s = NULL;
    vt__event_stream *es = NULL;
    if (vt__report_open_stream("replay", path, &s, &es, serr, sizeof serr) != 0)
        return VT_EXIT_FAILURE;
    if (sweep) {
        /* a damaged file is said here first, once, as a whole snapshot's
         * reading says it, not by each child */
        vt__event ev;
        int r;
        while ((r = vt__event_stream_next(es, &ev)) == 1)
            ;
        int rc = VT_EXIT_FAILURE;
        if (r < 0)
            fprintf(stderr, "vramtrace replay: %s\n", serr);
        else
            rc = run_sweep(path, s, es, serr, conf, capacity, rules,
                           jobs < 1 ? 1 : (unsigned)jobs, json);
        vt__event_stream_close(es);
        vt__snapshot_free(s);
        return rc;
    }
    vt__replay_options opt = { .conf = conf, .capacity = capacity, .rules = rules };
    vt__replay_result r;
    int st = es ? vt__replay_run_stream(s, es, &opt, &r, err, sizeof err)
                : vt__replay_run(s, &opt, &r, err, sizeof err);
    vt__event_stream_close(es);
    if (st) {
        vt__report_stream_failed("replay", path, serr, err);
        vt__snapshot_free(s);
        return VT_EXIT_FAILURE;
    }
    /* recorded settings that are all defaults translate to no keys: still
     * "as recorded" */
    /* an observed PyTorch run records vramtrace's settings in its config, and
     * PyTorch's as the framework's settings (format 1.7) */
    int recorded = r.rules == VT_REPLAY_RULES_PYTORCH && (s->meta.flags & VT_META_POOL_OBSERVED)
                       ? (s->meta.flags & VT_META_FRAMEWORK_SETTINGS) != 0
                       : *vt__snapshot_string(s, s->meta.config) != '\0';
    const char *origin = conf ? (recorded ? "recorded, then --conf" : "defaults, then --conf")
                              : (recorded ? "as recorded" : "defaults: none recorded");
    if (json) {
        printf("{\"file\": ");
        vt__json_str(stdout, path);
        printf(", \"settings_origin\": ");
        vt__json_str(stdout, origin);
        printf(", ");
        print_result_json(s, &r);
        printf("}\n");
    } else {
        print_text(path, s, &r, origin);
    }
    vt__replay_result_free(&r);
    vt__snapshot_free(s);
    return 0;
}
