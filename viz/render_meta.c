/*
 * viz/render_meta.c - the JSON metadata of the HTML page: what the columns
 * hold and where, the snapshot's facts, devices, memory the cache did not
 * serve, marks, streams, frames, findings, the replay's curve, the OOM
 * explained, and last the strings everything above refers to.
 */
#include <inttypes.h>
#include <string.h>

#include "json_str.h"
#include "render_internal.h"

static void json_key_str(vt__buf *b, const char *key, const char *val)
{
    vt__put_printf(b, "\"%s\":", key);
    vt__put_json_str(b, val, 1);
}

/* The replay's curve as {"label":..,"pts":[[device index, axis position
 * (-1: before the first event), bytes],...]}, or null. A point's event that
 * is not on the axis takes the axis position of the last one before it. */
static void write_overlay(struct render *r, vt__buf *m)
{
    const vt__viz_overlay *o = r->overlay;
    if (!o) {
        vt__put_str(m, "null");
        return;
    }
    vt__put_str(m, "{");
    json_key_str(m, "label", o->label ? o->label : "");
    vt__put_str(m, ",\"pts\":[");
    size_t kept = 0;
    for (size_t k = 0; k < o->npoints; k++) {
        int d = r->dev_index[o->device[k] + 128];   /* int8_t: always in range */
        if (d < 0)
            continue;
        int64_t pos = -1;
        for (uint32_t e = o->event[k] + 1; e-- > 0;)
            if (e < r->s->nevents && r->axis_of[e] != NONE) {
                pos = r->axis_of[e];
                break;
            }
        vt__put_printf(m, "%s[%d,%" PRId64 ",%" PRIu64 "]", kept++ ? "," : "", d, pos,
                       o->reserved[k]);
    }
    int64_t oom = -1;
    if (o->oom_event >= 0 && (uint64_t)o->oom_event < r->s->nevents)
        oom = (int64_t)axis_p1(r, (uint32_t)o->oom_event) - 1;
    vt__put_printf(m, "],\"oom\":%" PRId64 "}", oom);
}

/* The OOM explained (the JSON of `vramtrace oom`) with its place on the
 * axis: ,"oom":{"ax":N,"x":{...}} or ,"oom":null. Its text can only hold
 * '<' inside strings: written as \u003c, no "</script>" can close the tag. */
static void write_oom(struct render *r, vt__buf *m)
{
    const char *x = r->explained ? r->explained->json : NULL;
    if (!x) {
        vt__put_str(m, ",\"oom\":null");
        return;
    }
    size_t at = r->explained->event;   /* the OOM it explains, of several */
    int64_t ax = -1;
    if (at < r->s->nevents)
        ax = (int64_t)axis_p1(r, (uint32_t)at) - 1;
    vt__put_printf(m, ",\"oom\":{\"ax\":%" PRId64 ",\"x\":", ax);
    for (const char *p = x; *p; p++) {
        const char *lt = strchr(p, '<');
        size_t n = lt ? (size_t)(lt - p) : strlen(p);
        vt__put_bytes(m, p, n);
        if (!lt)
            break;
        vt__put_str(m, "\\u003c");
        p = lt;
    }
    vt__put_str(m, "}");
}

void vt__viz_write_meta(struct render *r, vt__buf *m, const struct columns *c,
                        const size_t *npoints)
{
    const struct section *sec = c->sec;
    size_t nsec = c->nsec, nxs = c->nxs;
    const vt__snapshot_data *s = r->s;
    const vt__timeline *tl = r->tl;
    vt__put_printf(m, "{\"v\":1,\"nAxis\":%" PRIu32 ",\"nLife\":%zu,\"nStack\":%" PRIu32 ",\"nXs\":%zu,\"t0\":%" PRIu64
                   ",\"checked\":%s,\"tq\":%" PRIu64 ",\"sizeShift\":%u,\"addrShift\":%u,",
                   r->naxis, r->nl + r->nx, r->nnodes, nxs, r->t0, r->check ? "true" : "false",
                   c->tq, c->size_shift, c->addr_shift);
    /* what the check left out as minor: the findings panel says it */
    if (r->check && r->check->nminor)
        vt__put_printf(m, "\"minor\":{\"n\":%zu,\"bytes\":%" PRIu64 ",\"held\":%" PRIu64
                       ",\"floor\":%" PRIu64 "},", r->check->nminor, r->check->minor_bytes,
                       r->check->minor_held_bytes, r->check->min_bytes);
    /* The page devices after the CUDA ones: external storages, by device
     * value (-1: the host, as `vramtrace check` says "on host"). */
    vt__put_printf(m, "\"nExt\":%zu,\"extKinds\":[", r->nx);
    for (int k = 0; k < r->nxkinds; k++) {
        if (r->xkind_dev[k] < 0)
            vt__put_printf(m, "%s\"CPU\"", k ? "," : "");
        else
            vt__put_printf(m, "%s\"cuda:%d (external)\"", k ? "," : "", r->xkind_dev[k]);
    }
    vt__put_str(m, "],\"info\":{");
    json_key_str(m, "command", vt__snapshot_string(s, s->meta.command_line));
    vt__put_str(m, ",");
    json_key_str(m, "host", vt__snapshot_string(s, s->meta.host));
    vt__put_str(m, ",");
    json_key_str(m, "version", vt__snapshot_string(s, s->meta.library_version));
    vt__put_str(m, ",");
    json_key_str(m, "config", vt__snapshot_string(s, s->meta.config));
    vt__put_printf(m, ",\"pid\":%" PRId32 ",\"rank\":%" PRId32 ",\"snapshotTime\":%" PRIu64
                   ",\"eventsRecorded\":%" PRIu64 ",\"eventsOverwritten\":%" PRIu64
                   ",\"gaps\":%zu,\"freeUnseen\":%zu},",
                   s->meta.pid, s->meta.rank,
                   s->meta.snapshot_time_ns > r->t0 ? s->meta.snapshot_time_ns - r->t0 : 0,
                   s->meta.events_recorded, s->meta.events_overwritten, tl->ngaps,
                   tl->nfree_unseen);

    vt__put_str(m, "\"devices\":[");
    for (size_t d = 0; d < tl->ndevices; d++) {
        uint32_t name = 0;
        uint64_t total = 0, true_peak = 0;
        for (size_t i = 0; i < s->ndevices; i++)
            if (s->devices[i].ordinal == tl->devices[d].device) {
                name = use_str(r, s->devices[i].name);
                total = s->devices[i].total_bytes;
                true_peak = s->devices[i].peak_allocated;
            }
        vt__put_printf(m, "%s{\"ord\":%d,\"name\":%" PRIu32 ",\"total\":%" PRIu64 ",\"npoints\":%zu",
                       d ? "," : "", tl->devices[d].device, name, total, npoints[d]);
        if (vt__viz_pools_seen(r))   /* CUDA graphs' pools' steps in section "pools" */
            vt__put_printf(m, ",\"npools\":%zu", d < r->pools.ndev ? r->pools.dev[d].n : 0);
        /* the allocator's own peak (format 1.2), whatever the window kept */
        if (s->meta.flags & VT_META_DEVICE_PEAKS)
            vt__put_printf(m, ",\"truePeak\":%" PRIu64 "}", true_peak);
        else
            vt__put_str(m, ",\"truePeak\":null}");
    }
    /* Memory the cache did not serve (passthrough.h): [kind, size, page stack
     * node, alive, device, ns from t0 at its allocation, at its release or -1]. */
    vt__put_str(m, "],\"uncached\":[");
    for (size_t k = 0; k < tl->npassthrough; k++) {
        const vt__passthrough *u = &tl->passthrough[k];
        vt__put_printf(m, "%s[\"%s\",%" PRIu64 ",%" PRIu32 ",%d,%d,%" PRIu64 ",%" PRId64 "]",
                       k ? "," : "", vt__passthrough_kind_name((enum vt__passthrough_kind)u->kind), u->size,
                       page_node(r, u->alloc_stack), u->alive ? 1 : 0, u->device,
                       u->alloc_time_ns > r->t0 ? u->alloc_time_ns - r->t0 : 0,
                       u->alive ? (int64_t)-1
                                : (int64_t)(u->free_time_ns > r->t0 ? u->free_time_ns - r->t0 : 0));
    }
    /* the steps as `check` judges them: the marks, or the steps the
     * backward passes of a trace without tell (marks_inferred) */
    size_t nsteps;
    bool inferred;
    const vt__tl_mark *steps = vt__timeline_steps(tl, &nsteps, &inferred);
    vt__put_printf(m, "],\"marks_inferred\":%s,\"marks\":[", inferred ? "true" : "false");
    for (size_t k = 0; k < nsteps; k++) {
        uint64_t p1 = axis_p1(r, steps[k].event);
        vt__put_printf(m, "%s[%" PRId64 ",%" PRIu32 "]", k ? "," : "", (int64_t)p1 - 1,
                       use_str(r, steps[k].label));
    }
    /* the tool's pauses: [ns from t0 at its start, at its end] */
    vt__put_str(m, "],\"pauses\":[");
    for (size_t k = 0; k < r->npauses; k++) {
        const uint64_t *p = &r->pauses[2 * k];
        vt__put_printf(m, "%s[%" PRIu64 ",%" PRIu64 "]", k ? "," : "",
                       p[0] > r->t0 ? p[0] - r->t0 : 0, p[1] > r->t0 ? p[1] - r->t0 : 0);
    }
    vt__put_str(m, "],\"streams\":[");
    for (uint32_t i = 0; i < r->nstreams; i++)
        vt__put_printf(m, "%s\"0x%" PRIx64 "\"", i ? "," : "", r->streams[i]);
    vt__put_str(m, "],\"frames\":{\"fn\":[");
    for (uint32_t i = 0; i < r->nframes; i++)
        vt__put_printf(m, "%s%" PRIu32, i ? "," : "", use_str(r, s->frames[r->frames[i]].function));
    vt__put_str(m, "],\"file\":[");
    for (uint32_t i = 0; i < r->nframes; i++)
        vt__put_printf(m, "%s%" PRIu32, i ? "," : "", use_str(r, s->frames[r->frames[i]].file));
    vt__put_str(m, "],\"line\":[");
    for (uint32_t i = 0; i < r->nframes; i++)
        vt__put_printf(m, "%s%" PRIu32, i ? "," : "", s->frames[r->frames[i]].line);
    vt__put_str(m, "],\"def\":[");
    for (uint32_t i = 0; i < r->nframes; i++)
        vt__put_printf(m, "%s%" PRIu32, i ? "," : "", vt__frame_def_line(s, &s->frames[r->frames[i]]));
    /* 1: the program's own code (vt__frame_is_user_code), as the text views
     * lead with it */
    vt__put_str(m, "],\"user\":[");
    for (uint32_t i = 0; i < r->nframes; i++)
        vt__put_printf(m, "%s%d", i ? "," : "", vt__frame_is_user_code(s, &s->frames[r->frames[i]]));
    /* enum vt__frame_fold: what the text views fold (without --all-frames),
     * so the page folds the same frames by the same rule */
    vt__put_str(m, "],\"fold\":[");
    for (uint32_t i = 0; i < r->nframes; i++)
        vt__put_printf(m, "%s%d", i ? "," : "", (int)vt__frame_fold(s, &s->frames[r->frames[i]]));
    /* 1: a library making its own workspace (vt__frame_makes_library_workspace),
     * which the page names an untensored block by */
    vt__put_str(m, "],\"ws\":[");
    for (uint32_t i = 0; i < r->nframes; i++)
        vt__put_printf(m, "%s%d", i ? "," : "",
                       vt__frame_makes_library_workspace(s, &s->frames[r->frames[i]]));
    /* 1: an installed library's code other than torch's (vt__frame_is_library_code):
     * a call site names the one inside the program's line, as summary and oom do
     * (vt__snapshot_library_frame) */
    vt__put_str(m, "],\"lib\":[");
    for (uint32_t i = 0; i < r->nframes; i++)
        vt__put_printf(m, "%s%d", i ? "," : "",
                       vt__frame_is_library_code(s, &s->frames[r->frames[i]]));
    vt__put_str(m, "],\"mod\":[");
    for (uint32_t i = 0; i < r->nframes; i++)
        vt__put_printf(m, "%s%" PRIu32, i ? "," : "", use_str(r, s->frames[r->frames[i]].module));
    vt__put_str(m, "],\"off\":[");
    for (uint32_t i = 0; i < r->nframes; i++)
        vt__put_printf(m, "%s%" PRIu64, i ? "," : "", (uint64_t)(s->frames[r->frames[i]].module_offset & ((1ull << 53) - 1)));
    vt__put_str(m, "]},\"findings\":[");
    vt__put_bytes(m, r->findings.p, r->findings.n);
    vt__put_str(m, "],\"replay\":");
    write_overlay(r, m);
    write_oom(r, m);
    vt__put_printf(m, ",\"deflated\":%s,\"sec\":[", c->deflated ? "true" : "false");
    for (size_t i = 0; i < nsec; i++) {
        size_t end = i + 1 < nsec ? sec[i + 1].start : c->raw_bytes;
        vt__put_printf(m, "%s[\"%s\",%zu,%d]", i ? "," : "", sec[i].name, end - sec[i].start, sec[i].rle);
    }
    /* Strings last: everything above may have added some. */
    vt__put_str(m, "],\"strings\":[\"\"");
    for (uint32_t i = 1; i < r->nstrs; i++) {
        vt__put_str(m, ",");
        vt__put_json_str(m, vt__snapshot_string(s, r->strs[i]), 1);
    }
    vt__put_str(m, "]}");
}
