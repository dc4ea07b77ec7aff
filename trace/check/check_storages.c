/*
 * trace/check/check_storages.c - the storages of the checker's model that
 * vramtrace did not allocate (STORAGE_EXTERNAL: a CPU tensor's, another
 * allocator's), listed for the views that draw them (the HTML timeline).
 *
 * The list comes from the same model the rules judge (check_model.c), so a
 * view shows each external storage with the lifetime, owner name and last
 * use that a finding about it would state; it never matches the events
 * itself.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "errbuf.h"
#include "event_stream.h"
#include "check_internal.h"

int vt__check_list_external(const vt__snapshot_data *s, vt__check_storage **out, size_t *n,
                            char *err, size_t errlen)
{
    *out = NULL;
    *n = 0;
    size_t nx = 0;
    for (size_t i = 0; i < s->nevents; i++)
        nx += s->events[i].kind == VT_EV_STORAGE_EXTERNAL;
    if (nx == 0)
        return 0;
    vt__event_stream *es;
    if (vt__event_stream_of(s, &es) < 0)
        return vt__errf(err, errlen, -ENOMEM, "check: out of memory");
    int rc = vt__check_list_external_stream(s, es, nx, out, n, err, errlen);
    vt__event_stream_close(es);
    return rc;
}

int vt__check_list_external_stream(const vt__snapshot_data *s, struct vt__event_stream *es,
                                   size_t nx, vt__check_storage **out, size_t *n, char *err,
                                   size_t errlen)
{
    *out = NULL;
    *n = 0;
    if (nx == 0)
        return 0;
    ck_model m;
    memset(&m, 0, sizeof m);
    m.s = s;
    m.err = err;
    m.errlen = errlen;
    m.keep_records = 1;   /* every external storage is listed, judged or not */
    m.es = es;
    int rc = vt__ck_model_build(&m);
    m.es = NULL;
    if (rc < 0) {
        vt__ck_model_free(&m);
        return vt__errf(err, errlen, rc, "check: out of memory");
    }
    vt__check_storage *v = calloc(nx, sizeof *v);
    if (!v) {
        vt__ck_model_free(&m);
        return vt__errf(err, errlen, -ENOMEM, "check: out of memory");
    }
    size_t k = 0;
    for (size_t i = 0; i < m.nst && k < nx; i++) {
        const ck_storage *st = &m.st[i];
        if (!st->external)
            continue;
        vt__check_storage *o = &v[k++];
        o->addr = st->addr;
        o->bytes = vt__ck_storage_bytes(st);
        o->device = st->device;
        o->freed = st->freed;
        o->alloc_event = st->alloc_event;
        VT__CK_COPY_LIFETIME(o, st);
        o->nuses = st->nuses;
        if (st->owner != CK_NONE) {
            o->owner_id = m.nodes[st->owner].id;
            o->owner_name = m.nodes[st->owner].name;
        }
        if (st->nuses)
            VT__CK_COPY_LAST_USE(o, &m.uses[st->first_use + st->nuses - 1]);
    }
    vt__ck_model_free(&m);
    *out = v;
    *n = k;
    return 0;
}
