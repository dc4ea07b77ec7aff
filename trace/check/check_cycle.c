/*
 * trace/check/check_cycle.c - CYCLE: a storage that only a garbage collection
 * freed, because a reference cycle held its tensors until gc ran (see
 * check.h, "Rules").
 *
 * The recorder cannot see a cycle being freed, but a tracker running inside
 * the collector can: it records one holder per collection
 * (VT_HOLDER_GC_COLLECTION) and a reference from it to each tensor that
 * collection freed, just before the tensor's drop. A storage whose last
 * tensor died that way, and which was freed after it, waited for the
 * collector: however short the wait, it was the collector's schedule, not
 * the program's, that decided when the memory came back.
 */
#include <errno.h>

#include "check_internal.h"

/* The tensor of storage st that died last, if every tensor bound to it died
 * before the storage was freed; CK_NONE otherwise. */
static uint32_t last_to_die(const ck_model *m, const ck_storage *st)
{
    uint32_t last = CK_NONE;
    for (uint32_t t = st->first_tensor; t != CK_NONE; t = m->nodes[t].next_bound) {
        const ck_node *n = &m->nodes[t];
        if (!n->dropped || n->drop_seq > st->free_seq)
            return CK_NONE;     /* a tensor outlived the free: not a plain death */
        if (last == CK_NONE || n->drop_seq > m->nodes[last].drop_seq)
            last = t;
    }
    return last;
}

int vt__ck_rule_cycle(ck_model *m, const vt__check_options *opt, ck_findings *fs,
                      vt__check_report *r)
{
    int steps = opt->grace_mode == VT_CHECK_GRACE_STEPS ||
                (opt->grace_mode == VT_CHECK_GRACE_AUTO && m->nmarks > 0);
    int rc = 0;
    for (size_t i = 0; i < m->nst && !rc; i++) {
        ck_storage *st = &m->st[i];
        if (!st->freed || !st->ntensors || !st->nuses || st->fate_unknown)
            continue;
        uint32_t t = last_to_die(m, st);
        if (t == CK_NONE)
            continue;
        const ck_node *n = &m->nodes[t];
        if (!n->gc_seq || n->gc_seq > n->drop_seq)
            continue;
        const ck_use *last = &m->uses[st->first_use + st->nuses - 1];
        if (last->seq > n->gc_seq)
            continue;
        vt__check_finding *f =
            vt__ck_open_use_finding(m, opt, fs, r, (uint32_t)i, last, VT_CHECK_RULE_CYCLE, &rc);
        if (!f)
            continue;   /* ignored, or out of memory: rc ends the loop */
        f->grace_mode = steps ? VT_CHECK_GRACE_STEPS : VT_CHECK_GRACE_TIME;
        uint32_t j = f->last_use_step;
        uint32_t g = vt__ck_step_of(m, n->gc_seq);
        f->steps_unused = g > j + 1 ? g - j - 1 : 0;
        f->gc_seq = n->gc_seq;
        f->gc_time_ns = n->gc_time;
        f->linger_from_seq = n->gc_seq;
        f->linger_from_time_ns = n->gc_time;
        f->linger_ns = st->free_time > last->time ? st->free_time - last->time : 0;
        f->paused_ns = vt__ck_paused_time(m, last->time, st->free_time);
        f->byte_seconds = (double)f->bytes * ((double)f->linger_ns / 1e9);
        /* Just before the collection's reference: what the cycle was. */
        f->path_seq = n->gc_seq - 1;
        st->gc_freed = 1;
    }
    return rc;
}
