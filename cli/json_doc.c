/*
 * cli/json_doc.c - the JSON document of a snapshot and its timeline
 * (json_doc.h; schema: docs/json-schema.md), written item by item: never a
 * string of the whole output.
 *
 * Each part is written by a function of its own, called in the same order
 * from the whole snapshot (vt__json_doc_write) and from a stream of its
 * events (vt__json_doc_write_stream), which reads them:
 *  1. for the streamed timeline (two readings), which tells the timeline's
 *     walk (timeline_walk.c) each lifetime it retires; it gives the window,
 *     the counts, the devices' peaks, the marks and the uncached memory;
 *  2. per device, for the streamed timeline again (two readings each), told
 *     every point of the curves: the device's curve is written as it comes;
 *  3. when the events hold STREAM_USE, twice more for the streams each
 *     lifetime used (collect_streams);
 *  4. for the walk (one reading), which hands out every lifetime in order;
 *  5. with --events, once more for them.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "bsearch.h"
#include "errbuf.h"
#include "event_stream.h"
#include "grow.h"
#include "json_doc.h"
#include "order.h"
#include "report_util.h"
#include "u64map.h"

#define JSON_SCHEMA_VERSION 2
#define NONE VT_TL_NONE

static void hex(FILE *o, uint64_t v) { fprintf(o, "\"0x%" PRIx64 "\"", v); }

/* ,"key":"0x..." */
static void hex_field(FILE *o, const char *key, uint64_t v)
{
    fprintf(o, ",\"%s\":", key);
    hex(o, v);
}

/* ,"key":"..." with string `id` of the snapshot's table */
static void str_field(FILE *o, const vt__snapshot_data *s, const char *key, uint32_t id)
{
    fprintf(o, ",\"%s\":", key);
    vt__json_str(o, vt__snapshot_string(s, id));
}

/* Opens the i-th object of a list on a line of its own, its first field an
 * address: `,\n {"key":"0x..."` (no comma before the first). Every list of
 * addressed things starts its objects so. */
static void begin_item(FILE *o, size_t i, const char *key, uint64_t v)
{
    fprintf(o, "%s\n {\"%s\":", i ? "," : "", key);
    hex(o, v);
}

static void flags_list(FILE *o, uint32_t f)
{
    static const char *names[] = { "alive", "before_window", "pending_free", "free_lost",
                                   "from_state", "free_unseen", "after_window", "inherited",
                                   "outside_pool" };
    fputc('[', o);
    int first = 1;
    for (int i = 0; i < (int)(sizeof names / sizeof names[0]); i++)
        if (f & (1u << i)) {
            fprintf(o, "%s\"%s\"", first ? "" : ",", names[i]);
            first = 0;
        }
    fputc(']', o);
}

static void opt_u64(FILE *o, const char *key, uint64_t v, int known)
{
    if (known)
        fprintf(o, ",\"%s\":%" PRIu64, key, v);
    else
        fprintf(o, ",\"%s\":null", key);
}

/* Up to the first device's object: meta, window, counts. */
static void write_head(FILE *o, const char *path, const vt__snapshot_data *s,
                       const vt__timeline *tl, size_t nevents)
{
    const vt__snapshot_meta *m = &s->meta;
    char kb[32];
    fprintf(o, "{\"schema\":\"vramtrace-snapshot\",\"schema_version\":%d,\"file\":",
            JSON_SCHEMA_VERSION);
    vt__json_str(o, path);
    fprintf(o, ",\n\"meta\":{\"format_version\":\"%u.%u\",\"pid\":%d,\"rank\":%d",
            m->format_version >> 16, m->format_version & 0xffff, m->pid, m->rank);
    str_field(o, s, "host", m->host);
    str_field(o, s, "command_line", m->command_line);
    str_field(o, s, "config", m->config);
    str_field(o, s, "library_version", m->library_version);
    fputs(",\"framework_settings\":", o);
    if (m->flags & VT_META_FRAMEWORK_SETTINGS)
        vt__json_str(o, vt__snapshot_string(s, m->framework_settings));
    else
        fputs("null", o);
    fprintf(o, ",\"clock_base_monotonic_ns\":%" PRIu64 ",\"clock_base_realtime_ns\":%" PRIu64
               ",\"snapshot_time_ns\":%" PRIu64 ",\"events_recorded\":%" PRIu64
               ",\"events_overwritten\":%" PRIu64 ",\"stacks_dropped\":%" PRIu64
               ",\"stacks_truncated\":%" PRIu64 ",\"state_complete\":%s,\"ipc_safe\":%s"
               ",\"framework_allocator\":\"%s\"},\n",
            m->clock_base_monotonic_ns, m->clock_base_realtime_ns, m->snapshot_time_ns,
            m->events_recorded, m->events_overwritten, m->stacks_dropped, m->stacks_truncated,
            tl->state_complete ? "true" : "false", m->flags & VT_META_IPC_SAFE ? "true" : "false",
            m->flags & VT_META_POOL_OBSERVED ? "observed"
            : m->flags & VT_META_POOL_UNSEEN ? "unseen" : "none");

    fprintf(o, "\"window\":{\"events\":%zu,\"first_seq\":%" PRIu64 ",\"last_seq\":%" PRIu64
               ",\"first_time_ns\":%" PRIu64 ",\"last_time_ns\":%" PRIu64 ",\"gaps\":%zu"
               ",\"events_missing\":%" PRIu64 ",\"free_unseen\":%zu},\n",
            nevents, tl->first_seq, tl->last_seq, tl->first_time_ns, tl->last_time_ns,
            tl->ngaps, tl->events_missing, tl->nfree_unseen);
    fputs("\"counts\":{", o);
    int first = 1;
    for (unsigned k = 0; k < 256; k++)
        if (tl->kind_counts[k]) {
            fprintf(o, "%s\"%s\":%" PRIu64, first ? "" : ",", vt__kind_name(k, kb, sizeof kb),
                    tl->kind_counts[k]);
            first = 0;
        }
    fputs("},\n", o);
    fputs("\"devices\":[", o);
}

/* Device i's object up to its curve's points. */
static void write_device_head(FILE *o, const vt__snapshot_data *s, const vt__timeline *tl,
                              size_t i)
{
    const vt__snapshot_meta *m = &s->meta;
    const vt__tl_device *d = &tl->devices[i];
    const vt__snap_device *info = NULL;
    for (size_t j = 0; j < s->ndevices; j++)
        if (s->devices[j].ordinal == d->device)
            info = &s->devices[j];
    fprintf(o, "%s\n {\"ordinal\":%d,\"name\":", i ? "," : "", d->device);
    vt__json_str(o, info ? vt__snapshot_string(s, info->name) : "");
    opt_u64(o, "total_bytes", info ? info->total_bytes : 0, info != NULL);
    const vt__tl_point *pa = &d->points[d->peak_allocated_point];
    const vt__tl_point *pr = &d->points[d->peak_reserved_point];
    fprintf(o, ",\"peak_allocated\":%" PRIu64 ",\"peak_allocated_seq\":%" PRIu64
               ",\"peak_reserved\":%" PRIu64 ",\"peak_reserved_seq\":%" PRIu64
               ",\"reserved_at_allocated_peak\":%" PRIu64
               ",\"initial_allocated\":%" PRIu64 ",\"initial_reserved\":%" PRIu64
               ",\"final_allocated\":%" PRIu64 ",\"final_reserved\":%" PRIu64
               ",\"final_pending\":%" PRIu64 ",\"peak_active\":%" PRIu64,
            d->peak_allocated, pa->seq, d->peak_reserved, pr->seq, pa->reserved,
            d->initial_allocated, d->initial_reserved, d->final_allocated, d->final_reserved,
            d->final_pending, d->peak_active);
    int peaks = info && (m->flags & VT_META_DEVICE_PEAKS);
    opt_u64(o, "true_peak_allocated", peaks ? info->peak_allocated : 0, peaks);
    opt_u64(o, "true_peak_reserved", peaks ? info->peak_reserved : 0, peaks);
    opt_u64(o, "true_peak_active", peaks ? info->peak_active : 0, peaks);
    if (tl->state_complete) {
        vt__state_totals st;
        vt__report_state_totals(s, d->device, &st);
        fprintf(o, ",\"state\":{\"allocated\":%" PRIu64 ",\"allocated_blocks\":%" PRIu64
                   ",\"pending\":%" PRIu64 ",\"reserved\":%" PRIu64 "}",
                st.allocated, st.allocated_blocks, st.pending, st.reserved);
    } else {
        fputs(",\"state\":null", o);
    }
    fputs(",\"curve\":[", o);
}

/* Point p of a device's curve. */
static void write_point(FILE *o, size_t p, const vt__tl_point *pt)
{
    fprintf(o, "%s[%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%" PRIu64 "]", p ? "," : "",
            pt->seq, pt->time_ns, pt->allocated, pt->reserved, pt->pending);
}

/* From the end of the devices to the opening of the lifetimes: the tables. */
static void write_tables(FILE *o, const vt__snapshot_data *s)
{
    fputs("],\n", o);
    fputs("\"frames\":[", o);
    for (size_t i = 0; i < s->nframes; i++) {
        const vt__frame *f = &s->frames[i];
        begin_item(o, i, "ip", f->ip);
        str_field(o, s, "module", f->module);
        hex_field(o, "module_offset", f->module_offset);
        str_field(o, s, "build_id", f->build_id);
        str_field(o, s, "function", f->function);
        str_field(o, s, "file", f->file);
        fprintf(o, ",\"line\":%u,\"first_line\":%u,\"user_code\":%s}", f->line, f->first_line,
                vt__frame_is_user_code(s, f) ? "true" : "false");
    }
    fputs("],\n\"stacks\":[", o);
    for (size_t i = 0; i < s->nstack_nodes; i++) {
        if (i == 0)
            fputs("null", o);
        else
            fprintf(o, ",[%u,%u]", s->stack_nodes[i].parent, s->stack_nodes[i].frame);
    }
    fputs("],\n", o);

    fputs("\"segments\":[", o);
    static const char *states[] = { "active_allocated", "active_pending_free", "inactive" };
    static const char *pools[] = { "small", "large", "uncached" };
    for (size_t i = 0; i < s->nsegments; i++) {
        const vt__snap_segment *g = &s->segments[i];
        begin_item(o, i, "addr", g->addr);
        fprintf(o, ",\"size\":%" PRIu64, g->size);
        hex_field(o, "stream", g->stream);
        fprintf(o, ",\"device\":%d,\"pool\":\"%s\",\"framework\":%s,\"private_pool\":%" PRIu64
                   ",\"blocks\":[", g->device,
                vt__pool_kind(g->pool) <= 2 ? pools[vt__pool_kind(g->pool)] : "?",
                vt__pool_is_framework(g->pool) ? "true" : "false", g->private_pool);
        for (uint32_t k = 0; k < g->nblocks && g->first_block + k < s->nblocks; k++) {
            const vt__snap_block *b = &s->blocks[g->first_block + k];
            fprintf(o, "%s{\"addr\":", k ? "," : "");
            hex(o, b->addr);
            fprintf(o, ",\"size\":%" PRIu64 ",\"req_size\":%" PRIu64, b->size, b->req_size);
            hex_field(o, "stream", b->stream);
            fprintf(o, ",\"alloc_seq\":%" PRIu64 ",\"stack\":%u,\"state\":\"%s\"}", b->alloc_seq,
                    b->stack, b->state <= 2 ? states[b->state] : "?");
        }
        fputs("]}", o);
    }
    fputs("],\n", o);
    fputs("\"lifetimes\":[", o);
}

/* Lifetime i, the streams it used (n of them, sorted) as given. */
static void write_lifetime(FILE *o, size_t i, const vt__lifetime *l, const uint64_t *streams,
                           size_t n)
{
    begin_item(o, i, "addr", l->addr);
    fprintf(o, ",\"size\":%" PRIu64 ",\"req_size\":%" PRIu64 ",\"device\":%d", l->size,
            l->req_size, l->device);
    hex_field(o, "stream", l->stream);
    int known = l->alloc_event != VT_TL_NONE;
    opt_u64(o, "alloc_seq", l->alloc_seq, known || l->alloc_seq);
    opt_u64(o, "alloc_time_ns", l->alloc_time_ns, known);
    opt_u64(o, "free_seq", l->free_seq, l->free_event != VT_TL_NONE);
    opt_u64(o, "free_time_ns", l->free_time_ns, l->free_event != VT_TL_NONE);
    opt_u64(o, "release_seq", l->release_seq, l->release_event != VT_TL_NONE);
    fprintf(o, ",\"alloc_stack\":%u,\"free_stack\":%u,\"flags\":", l->alloc_stack, l->free_stack);
    flags_list(o, l->flags);
    fputs(",\"streams\":[", o);
    for (size_t k = 0; k < n; k++) {
        if (k)
            fputc(',', o);
        hex(o, streams[k]);
    }
    fputs("]}", o);
}

/* From the end of the lifetimes to the events (or the end): uncached, marks. */
static void write_tail(FILE *o, const vt__snapshot_data *s, const vt__timeline *tl)
{
    fputs("],\n", o);
    fputs("\"uncached\":[", o);
    for (size_t i = 0; i < tl->npassthrough; i++) {
        const vt__passthrough *u = &tl->passthrough[i];
        begin_item(o, i, "addr", u->addr);
        fprintf(o, ",\"size\":%" PRIu64 ",\"kind\":\"%s\",\"call\":%u,\"device\":%d",
                u->size, vt__passthrough_kind_name((enum vt__passthrough_kind)u->kind), u->call,
                u->device);
        hex_field(o, "stream", u->stream);
        fprintf(o, ",\"alloc_seq\":%" PRIu64 ",\"alloc_time_ns\":%" PRIu64, u->alloc_seq,
                u->alloc_time_ns);
        opt_u64(o, "free_seq", u->free_seq, !u->alive);
        opt_u64(o, "free_time_ns", u->free_time_ns, !u->alive);
        fprintf(o, ",\"alloc_stack\":%u,\"free_stack\":%u,\"alive\":%s,\"inherited\":%s}",
                u->alloc_stack, u->free_stack, u->alive ? "true" : "false",
                u->inherited ? "true" : "false");
    }
    fputs("],\n", o);

    fputs("\"marks\":[", o);
    for (size_t i = 0; i < tl->nmarks; i++) {
        fprintf(o, "%s{\"seq\":%" PRIu64 ",\"time_ns\":%" PRIu64 ",\"label\":", i ? "," : "",
                tl->marks[i].seq, tl->marks[i].time_ns);
        vt__json_str(o, vt__snapshot_string(s, tl->marks[i].label));
        fputc('}', o);
    }
    fputs("]", o);
}

/* Event i of the list --events adds (after its opening). */
static void write_event(FILE *o, const vt__snapshot_data *s, size_t i, const vt__event *e)
{
    char kb[32];
    fprintf(o, "%s\n {\"seq\":%" PRIu64 ",\"time_ns\":%" PRIu64 ",\"kind\":\"%s\""
               ",\"thread\":%u,\"device\":%d",
            i ? "," : "", e->seq, e->time_ns, vt__kind_name(e->kind, kb, sizeof kb),
            e->thread, e->device);
    hex_field(o, "stream", e->stream);
    hex_field(o, "addr", e->addr);
    fprintf(o, ",\"req_size\":%" PRIu64 ",\"size\":%" PRIu64 ",\"stack\":%u,\"aux\":%"
               PRIu64 ",\"aux2\":%" PRIu64 ",\"str\":",
            e->req_size, e->size, e->stack, e->aux, e->aux2);
    vt__json_str(o, vt__snapshot_string(s, e->str));
    fputc('}', o);
}

int vt__json_doc_write(FILE *o, const char *path, const vt__snapshot_data *s,
                       const vt__timeline *tl, bool with_events)
{
    write_head(o, path, s, tl, s->nevents);
    for (size_t i = 0; i < tl->ndevices; i++) {
        write_device_head(o, s, tl, i);
        for (size_t p = 0; p < tl->devices[i].npoints; p++)
            write_point(o, p, &tl->devices[i].points[p]);
        fputs("]}", o);
    }
    write_tables(o, s);
    for (size_t i = 0; i < tl->nlifetimes; i++) {
        const vt__lifetime *l = &tl->lifetimes[i];
        write_lifetime(o, i, l, tl->streams + l->first_stream, l->nstreams);
    }
    write_tail(o, s, tl);
    if (with_events) {
        fputs(",\n\"events\":[", o);
        for (size_t i = 0; i < s->nevents; i++)
            write_event(o, s, i, &s->events[i]);
        fputs("]", o);
    }
    fputs("}\n", o);
    return ferror(o) ? -EIO : 0;
}

/* ---- from a stream of the events ---------------------------------------- */

/* Step 2: the points of one device. */
struct device_points {
    FILE *o;
    size_t device, n;
};

static void on_point(void *ctx, size_t device, const vt__tl_point *pt)
{
    struct device_points *x = ctx;
    if (device == x->device)
        write_point(x->o, x->n++, pt);
}

/* A stream a lifetime used (a STREAM_USE at its addr while it was the
 * newest lifetime made there: the timeline's rule), the lifetime known by
 * the event that made it. */
struct use {
    uint32_t made;
    uint64_t stream;
};

static int cmp_use(const void *a, const void *b)
{
    const struct use *x = a, *y = b;
    int c = vt__order(x->made, y->made);
    return c ? c : vt__order(x->stream, y->stream);
}

/* What is known of the newest lifetime made at an address a STREAM_USE names. */
struct at_addr {
    uint32_t made;            /* the event that made it; NONE: none yet */
    int open;                 /* allocated and not freed */
};

/* Step 3: every (lifetime, stream) pair, sorted and unique, into
 * made[]/streams[] (n pairs). One reading finds the addresses STREAM_USE
 * events name (few), the next follows the newest lifetime made at each. */
static int collect_streams(vt__event_stream *es, uint32_t **made, uint64_t **streams, size_t *n)
{
    vt__u64map slot = { 0 };
    struct at_addr *at = NULL;
    struct use *u = NULL;
    size_t nat = 0, cap_at = 0, nu = 0, cap_u = 0;
    vt__event e;
    int rc = vt__u64map_init(&slot, 64) ? -ENOMEM : vt__event_stream_rewind(es);
    while (rc == 0 && (rc = vt__event_stream_next(es, &e)) == 1) {
        rc = 0;
        if (e.kind != VT_EV_STREAM_USE || vt__u64map_get(&slot, e.addr) != VT__U64MAP_NONE)
            continue;
        struct at_addr *a = vt__grow_push((void **)&at, &cap_at, &nat, sizeof *a);
        if (!a || vt__u64map_put(&slot, e.addr, (uint32_t)(nat - 1)))
            rc = -ENOMEM;
        else
            *a = (struct at_addr){ .made = NONE };
    }
    if (rc == 0)
        rc = vt__event_stream_rewind(es);
    for (uint32_t i = 0; rc == 0 && (rc = vt__event_stream_next(es, &e)) == 1; i++) {
        rc = 0;
        if (e.kind != VT_EV_ALLOC && e.kind != VT_EV_FREE_REQUESTED && e.kind != VT_EV_STREAM_USE)
            continue;
        uint32_t k = vt__u64map_get(&slot, e.addr);
        if (k == VT__U64MAP_NONE)
            continue;
        struct at_addr *a = &at[k];
        if (e.kind == VT_EV_ALLOC) {
            *a = (struct at_addr){ .made = i, .open = 1 };
        } else if (e.kind == VT_EV_FREE_REQUESTED) {
            if (!a->open)   /* a free without its ALLOC makes a lifetime */
                a->made = i;
            a->open = 0;
        } else if (a->made != NONE) {
            struct use *p = vt__grow_push((void **)&u, &cap_u, &nu, sizeof *p);
            if (!p)
                rc = -ENOMEM;
            else
                *p = (struct use){ a->made, e.stream };
        }
    }
    vt__u64map_free(&slot);
    free(at);
    if (rc < 0) {
        free(u);
        return rc;
    }
    if (nu > 1)
        qsort(u, nu, sizeof *u, cmp_use);
    *made = malloc((nu + 1) * sizeof **made);
    *streams = malloc((nu + 1) * sizeof **streams);
    if (!*made || !*streams) {
        free(u);
        return -ENOMEM;
    }
    *n = 0;
    for (size_t i = 0; i < nu; i++) {
        if (i && !cmp_use(&u[i], &u[i - 1]))
            continue;
        (*made)[*n] = u[i].made;
        (*streams)[(*n)++] = u[i].stream;
    }
    free(u);
    return 0;
}

/* Step 4. */
struct lifetimes {
    FILE *o;
    size_t n;                 /* written */
    const uint32_t *made;     /* collect_streams' pairs */
    const uint64_t *streams;
    size_t nuse;
};

static void on_lifetime(void *ctx, const vt__lifetime *l)
{
    struct lifetimes *x = ctx;
    uint32_t key = l->flags & VT_LT_FROM_STATE ? NONE
                   : l->alloc_event != NONE ? l->alloc_event : l->free_event;
    size_t a = x->nuse, b = x->nuse;
    if (key != NONE) {
        VT__PARTITION_POINT(x->nuse, i, x->made[i] < key, a);
        VT__PARTITION_POINT(x->nuse, i, x->made[i] <= key, b);
    }
    write_lifetime(x->o, x->n++, l, x->streams + a, b - a);
}

int vt__json_doc_write_stream(FILE *o, const char *path, const vt__snapshot_data *s,
                              vt__event_stream *es, bool with_events, char *err, size_t errlen)
{
    vt__tl_walk *walk = NULL;
    vt__timeline *tl = NULL;
    uint32_t *made = NULL;
    uint64_t *streams = NULL;
    size_t nuse = 0;
    /* Step 1: the walk told each lifetime the streamed timeline retires. */
    int rc = vt__tl_walk_build(s, es, "json", &walk, &tl, err, errlen);
    if (rc)
        goto out;
    write_head(o, path, s, tl, vt__event_stream_count(es));
    struct device_points dp = { .o = o };
    vt__tl_stream_hooks h2 = { .point = on_point, .ctx = &dp };
    for (dp.device = 0; rc == 0 && dp.device < tl->ndevices; dp.device++) {
        write_device_head(o, s, tl, dp.device);
        dp.n = 0;
        vt__timeline *again = NULL;
        rc = vt__timeline_build_stream_hooked(s, es, VT_TL_STREAM_CURVES, &h2, &again, err, errlen);
        vt__timeline_free(again);
        fputs("]}", o);
    }
    if (rc)
        goto out;
    write_tables(o, s);
    if (tl->kind_counts[VT_EV_STREAM_USE] && (rc = collect_streams(es, &made, &streams, &nuse)))
        goto out;
    struct lifetimes lx = { .o = o, .made = made, .streams = streams, .nuse = nuse };
    if ((rc = vt__tl_walk_run(walk, es, tl, on_lifetime, &lx)))
        goto out;
    write_tail(o, s, tl);
    if (with_events) {
        fputs(",\n\"events\":[", o);
        vt__event e;
        size_t i = 0;
        if ((rc = vt__event_stream_rewind(es)))
            goto out;
        while ((rc = vt__event_stream_next(es, &e)) == 1)
            write_event(o, s, i++, &e);
        if (rc < 0)
            goto out;
        rc = 0;
        fputs("]", o);
    }
    fputs("}\n", o);
    if (ferror(o))
        rc = vt__errf(err, errlen, -EIO, "json: write error");
out:
    if (rc == -ENOMEM)
        vt__errf(err, errlen, rc, "json: out of memory");
    free(made);
    free(streams);
    vt__tl_walk_close(walk);
    vt__timeline_free(tl);
    return rc < 0 ? rc : 0;
}
