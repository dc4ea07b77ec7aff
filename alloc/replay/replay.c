/*
 * alloc/replay/replay.c - vt__replay_run (replay.h): the rules chosen, the
 * devices and their capacities set, then one engine replays the recording:
 * vramtrace's allocator (replay_alloc.c) or PyTorch's, modelled
 * (replay_torch.c), both through the one walk of the events (replay_walk.c).
 */
#include <errno.h>
#include <string.h>

#include "errbuf.h"
#include "replay_internal.h"

/* The devices the recording allocated on, each with the capacity the
 * replay gives it; the recording's start. */
static int setup_devices(const vt__snapshot_data *s, vt__event_stream *es,
                         const vt__replay_options *opt, const vt__seeds *seeds,
                         vt__replay_result *r, char *err, size_t errlen)
{
    int n = seeds->ndevices, rc = vt__event_stream_rewind(es);
    vt__event ev;
    for (size_t i = 0; rc == 0 && (rc = vt__event_stream_next(es, &ev)) == 1; i++) {
        rc = 0;
        const vt__event *e = &ev;
        if (i == 0)
            r->first_time_ns = e->time_ns;
        if (e->kind != VT_EV_ALLOC || e->device < 0)
            continue;
        if (e->device >= VT_REPLAY_MAX_DEVICES)
            return vt__errf(err, errlen, -EINVAL, "device %d: a replay handles devices 0 to %d",
                        e->device, VT_REPLAY_MAX_DEVICES - 1);
        if (e->device + 1 > n)
            n = e->device + 1;
    }
    if (rc < 0)
        return rc;   /* a damaged file: the stream's err says it */
    if (n == 0)
        return vt__errf(err, errlen, -EINVAL, "the snapshot holds no allocation to replay");
    for (int d = 0; d < n; d++) {
        uint64_t cap = opt->capacity;
        if (!cap) {
            cap = VT_REPLAY_UNLIMITED;
            for (size_t k = 0; k < s->ndevices; k++)
                if (s->devices[k].ordinal == d && s->devices[k].total_bytes)
                    cap = s->devices[k].total_bytes;
        }
        r->devices[d].ordinal = d;
        r->devices[d].capacity = cap;
    }
    r->ndevices = (size_t)n;
    return 0;
}

static vt__replay_rules auto_rules(const vt__snapshot_data *s)
{
    return vt__replay_is_torch(s) ? VT_REPLAY_RULES_PYTORCH : VT_REPLAY_RULES_VRAMTRACE;
}

const char *vt__replay_rules_name(vt__replay_rules rules)
{
    switch (rules) {
    case VT_REPLAY_RULES_VRAMTRACE: return "vramtrace";
    case VT_REPLAY_RULES_PYTORCH: return "pytorch";
    default: return "auto";
    }
}

int vt__replay_run_stream(const vt__snapshot_data *s, vt__event_stream *es,
                          const vt__replay_options *opt, vt__replay_result *out, char *err,
                          size_t errlen)
{
    static const vt__replay_options defaults = { 0 };
    if (!opt)
        opt = &defaults;
    if (err && errlen)
        err[0] = '\0';
    memset(out, 0, sizeof *out);
    if (!s || !es)
        return vt__errf(err, errlen, -EINVAL, "no snapshot");
    vt__replay_rules rules = opt->rules == VT_REPLAY_RULES_AUTO ? auto_rules(s) : opt->rules;
    if (rules != VT_REPLAY_RULES_VRAMTRACE && rules != VT_REPLAY_RULES_PYTORCH)
        return vt__errf(err, errlen, -EINVAL, "unknown replay rules %d", (int)opt->rules);
    vt__seeds read = { 0 };
    const vt__seeds *seeds = opt->seeds;
    int rc = 0;
    if (!seeds && (rc = vt__replay_seeds(s, es, &read, err, errlen)))
        return rc == -ENOMEM ? vt__errf(err, errlen, rc, "out of host memory") : rc;
    if (!seeds)
        seeds = &read;
    if ((rc = setup_devices(s, es, opt, seeds, out, err, errlen)) == 0) {
        out->rules = rules;
        out->events = vt__event_stream_count(es);
        out->events_lost = s->meta.events_overwritten;
        rc = rules == VT_REPLAY_RULES_PYTORCH
                 ? vt__replay_torch(s, es, opt, seeds, out, err, errlen)
                 : vt__replay_alloc(s, es, opt, seeds, out, err, errlen);
    }
    vt__seeds_free(&read);
    return rc;
}

int vt__replay_run(const vt__snapshot_data *s, const vt__replay_options *opt,
                   vt__replay_result *out, char *err, size_t errlen)
{
    if (!s) {
        memset(out, 0, sizeof *out);
        return vt__errf(err, errlen, -EINVAL, "no snapshot");
    }
    vt__event_stream *es;
    if (vt__event_stream_of(s, &es))
        return vt__errf(err, errlen, -ENOMEM, "out of host memory");
    int rc = vt__replay_run_stream(s, es, opt, out, err, errlen);
    vt__event_stream_close(es);
    return rc;
}
