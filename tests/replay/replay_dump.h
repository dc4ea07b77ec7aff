/* tests/replay/replay_dump.h - every figure of a replay's result, one per
 * line: what the tests that ask two replays to agree compare (a streamed one
 * and the whole one, a sweep's child and a replay of its own). */
#ifndef VT_TESTS_REPLAY_DUMP_H
#define VT_TESTS_REPLAY_DUMP_H

#include <inttypes.h>
#include <stdio.h>

#include "replay.h"

/* rc and err: what the replay returned and said. */
static inline void replay_dump(FILE *f, int rc, const char *err, const vt__replay_result *r)
{
    fprintf(f, "rc %d err %s\n", rc, rc ? err : "");
    if (rc)
        return;
    fprintf(f, "conf %s rules %d expandable %d ndevices %zu events %zu first %" PRIu64 "\n",
            r->conf, (int)r->rules, r->expandable_segments, r->ndevices, r->events,
            r->first_time_ns);
    fprintf(f, "replayed %zu skipped %zu early %zu ooms %zu served %zu lost %" PRIu64 "\n",
            r->replayed, r->skipped_frees, r->early_frees, r->recorded_ooms,
            r->recorded_ooms_served, r->events_lost);
    fprintf(f, "segments %d %zu %zu\n", r->segments_identical, r->segments_compared,
            r->first_segment_difference);
    for (size_t d = 0; d < r->ndevices; d++) {
        const vt__replay_device *v = &r->devices[d];
        fprintf(f, "device %d cap %" PRIu64 " peaks %" PRIu64 " %" PRIu64 " at %" PRIu64
                " event %zu t %" PRIu64 " segs %" PRIu64 " %" PRIu64 " retries %" PRIu64
                " sync %" PRIu64 " fences %" PRIu64 " calls %" PRIu64 " %" PRIu64 " %" PRIu64
                " %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64
                " recorded %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 "\n",
                v->ordinal, v->capacity, v->peak_allocated, v->peak_reserved,
                v->allocated_at_peak, v->peak_event, v->peak_time_ns, v->segment_allocs,
                v->segment_frees, v->alloc_retries, v->sync_all, v->fence_events,
                v->device_mallocs, v->device_failed_mallocs, v->device_frees, v->device_maps,
                v->device_unmaps, v->event_creates, v->event_records, v->event_queries,
                v->event_syncs, v->recorded_peak_reserved, v->recorded_peak_allocated,
                v->recorded_segment_allocs, v->recorded_segment_frees);
    }
    const vt__replay_oom *o = &r->oom;
    fprintf(f, "oom %d %zu %" PRIu64 " %" PRIu64 " %d %" PRIx64 " %" PRIu64 " %u %" PRIu64
            " %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 "\n", o->happened, o->event_index,
            o->seq, o->time_ns, o->device, o->stream, o->req_size, o->stack, o->allocated,
            o->requested, o->live_blocks, o->reserved, o->device_free);
    for (size_t k = 0; k < r->ncurve; k++)
        fprintf(f, "curve %zu %" PRIu64 " %" PRIu64 " %d\n", r->curve[k].event,
                r->curve[k].time_ns, r->curve[k].reserved, r->curve[k].device);
}
#endif /* VT_TESTS_REPLAY_DUMP_H */
