/*
 * cli/cmd_json.c - `vramtrace json FILE [--events]`: the snapshot and its
 * reconstructed timeline as one JSON document (schema: docs/json-schema.md).
 *
 * Streamed straight to stdout, item by item: memory use is the snapshot's,
 * never a string of the whole output.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "report_util.h"

#define JSON_SCHEMA_VERSION 2

static const char usage_text[] =
    "usage: vramtrace json FILE [--events]\n"
    "\n"
    "Print the snapshot as JSON (schema: docs/json-schema.md): metadata,\n"
    "devices with peaks, counts, frames, stacks, segments and blocks,\n"
    "allocation lifetimes, memory the cache did not serve (uncached), marks.\n"
    "  --events   also list every event (large: one object per event)\n"
    VT_EXIT_HELP;

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

static void emit(FILE *o, const char *path, const vt__snapshot_data *s, const vt__timeline *tl,
                 int with_events)
{
    const vt_snapshot_meta *m = &s->meta;
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
            s->nevents, tl->first_seq, tl->last_seq, tl->first_time_ns, tl->last_time_ns,
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
    for (size_t i = 0; i < tl->ndevices; i++) {
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
        for (size_t p = 0; p < d->npoints; p++) {
            const vt__tl_point *pt = &d->points[p];
            fprintf(o, "%s[%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%" PRIu64 "]",
                    p ? "," : "", pt->seq, pt->time_ns, pt->allocated, pt->reserved,
                    pt->pending);
        }
        fputs("]}", o);
    }
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
        fprintf(o, ",\"line\":%u,\"first_line\":%u}", f->line, f->first_line);
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
        fprintf(o, ",\"device\":%d,\"pool\":\"%s\",\"blocks\":[", g->device,
                g->pool <= 2 ? pools[g->pool] : "?");
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
    for (size_t i = 0; i < tl->nlifetimes; i++) {
        const vt__lifetime *l = &tl->lifetimes[i];
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
        fprintf(o, ",\"alloc_stack\":%u,\"free_stack\":%u,\"flags\":", l->alloc_stack,
                l->free_stack);
        flags_list(o, l->flags);
        fputs(",\"streams\":[", o);
        for (uint32_t k = 0; k < l->nstreams; k++) {
            if (k)
                fputc(',', o);
            hex(o, tl->streams[l->first_stream + k]);
        }
        fputs("]}", o);
    }
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

    if (with_events) {
        fputs(",\n\"events\":[", o);
        for (size_t i = 0; i < s->nevents; i++) {
            const vt__event *e = &s->events[i];
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
        fputs("]", o);
    }
    fputs("}\n", o);
}

static int view_json(const char *path, const vt__snapshot_data *s, const vt__timeline *tl,
                     bool with_events)
{
    static char buf[1 << 16];
    setvbuf(stdout, buf, _IOFBF, sizeof buf);
    emit(stdout, path, s, tl, with_events);
    return 0;
}

int vt__cmd_json(int argc, char **argv)
{
    bool with_events = false;
    return vt__report_run("json", argc, argv, usage_text, "--events", &with_events, false,
                          view_json);
}
