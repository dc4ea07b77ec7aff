/*
 * trace/record/snapshot_take.c - a vt__snapshot_data of the live process.
 *
 * The snapshot copies the event ring (writers go on meanwhile: allocation is
 * never blocked for longer than it takes to copy), asks the allocator's state
 * provider for its segments and blocks, and exports only the stack nodes that
 * events and blocks reference (plus their ancestors), renumbered densely, with
 * each unique IP symbolized once, and only the strings that its events name.
 * No recorder lock is held while the provider runs: building needs no lock at
 * all (the ring and the stack tree are read lock-free; the interned strings
 * are held from before the ring copy, so that none its events name is freed,
 * and looked up one short lock at a time); only the file write is serialized,
 * so that two snapshots to one path do not mix.
 */
#include "rec_snap.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "config.h"
#include "fork_lock.h"
#include "grow.h"
#include "order.h"
#include "snapfile.h"

const char *vt_version_string(void);

/* These arrays have no capacity field: they are only ever filled here, one
 * item at a time, so their capacity is what vt__grow left for `n` items. */
static int grow(void **arr, size_t n, size_t elem)
{
    size_t cap = n;
    if (n) {
        cap = 16;
        while (cap < n)
            cap *= 2;
    }
    return vt__grow(arr, &cap, n + 1, elem);
}

int vt__snapshot_add_segment(vt__snapshot_data *snap, const vt__snap_segment *seg)
{
    if (!snap || !seg)
        return -EINVAL;
    if (grow((void **)&snap->segments, snap->nsegments, sizeof *seg) != 0)
        return -ENOMEM;
    vt__snap_segment *s = &snap->segments[snap->nsegments++];
    *s = *seg;
    s->first_block = (uint32_t)snap->nblocks;
    s->nblocks = 0;
    return 0;
}

int vt__snapshot_add_block(vt__snapshot_data *snap, const vt__snap_block *block)
{
    if (!snap || !block || snap->nsegments == 0)
        return -EINVAL;
    if (grow((void **)&snap->blocks, snap->nblocks, sizeof *block) != 0)
        return -ENOMEM;
    snap->blocks[snap->nblocks++] = *block;
    snap->segments[snap->nsegments - 1].nblocks++;
    return 0;
}

int vt__snapshot_add_device(vt__snapshot_data *snap, int ordinal, const char *name,
                            uint64_t total_bytes)
{
    if (!snap)
        return -EINVAL;
    if (grow((void **)&snap->devices, snap->ndevices, sizeof *snap->devices) != 0)
        return -ENOMEM;
    snap->devices[snap->ndevices++] = (vt__snap_device){
        .ordinal = ordinal, .name = vt__string_intern(name), .total_bytes = total_bytes,
    };
    return 0;
}

static int read_rank(void)
{
    const char *v = vt__rank_env();
    if (!v)
        return -1;
    char *end;
    long r = strtol(v, &end, 10);
    return (*end == '\0' && r >= 0 && r <= INT32_MAX) ? (int)r : -1;
}

/* argv joined by spaces, from /proc/self/cmdline. */
static uint32_t command_line(vt__strtab *st)
{
    char buf[8192];
    int fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return 0;
    while (n > 0 && buf[n - 1] == '\0')
        n--;
    for (ssize_t i = 0; i < n; i++)
        if (buf[i] == '\0')
            buf[i] = ' ';
    buf[n] = '\0';
    uint32_t i = vt__strtab_add(st, buf);
    return i == UINT32_MAX ? 0 : i;
}

static void fill_meta(vt__snapshot_data *s, vt__strtab *st)
{
    vt__snapshot_meta *m = &s->meta;
    struct timespec mono, real;
    clock_gettime(CLOCK_MONOTONIC, &mono);
    clock_gettime(CLOCK_REALTIME, &real);
    m->clock_base_monotonic_ns = (uint64_t)mono.tv_sec * 1000000000u + (uint64_t)mono.tv_nsec;
    m->clock_base_realtime_ns = (uint64_t)real.tv_sec * 1000000000u + (uint64_t)real.tv_nsec;
    m->pid = (int32_t)getpid();
    m->rank = read_rank();
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    uint32_t i;
    m->host = (i = vt__strtab_add(st, host)) == UINT32_MAX ? 0 : i;
    m->command_line = command_line(st);
    char conf[1024];
    vt__config_format(vt__config(), conf, sizeof conf);
    m->config = (i = vt__strtab_add(st, conf)) == UINT32_MAX ? 0 : i;
    m->library_version = (i = vt__strtab_add(st, vt_version_string())) == UINT32_MAX ? 0 : i;
    char fw[1024];
    vt__pool_settings(fw, sizeof fw);
    if (*fw && (i = vt__strtab_add(st, fw)) != UINT32_MAX) {
        m->framework_settings = i;
        m->flags |= VT_META_FRAMEWORK_SETTINGS;
    }
    m->stacks_dropped = vt__stacks_dropped();
}

static uint32_t frame_index(const uint64_t *ips, size_t n, uint64_t ip)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (ips[mid] < ip)
            lo = mid + 1;
        else
            hi = mid;
    }
    return (uint32_t)lo;
}

/* The live tree's nodes being exported: old id -> new id, and what is known
 * of the nodes already given a new id. */
typedef struct stack_export {
    uint32_t count;        /* old ids are 1..count-1 */
    uint32_t *remap;       /* [old id] new id; 0 = not yet, BAD_CHAIN = cannot export */
    vt__stack_node *nodes;  /* [new id] parent (new id) and, until symbolized, nothing */
    uint64_t *ip;          /* [new id] its IP */
    uint32_t next;         /* next new id (<= count: each old id gets one at most) */
    uint64_t bad;          /* references to chains that failed a check */
} stack_export;

#define BAD_CHAIN UINT32_MAX

/* The new id of old stack `id` (VT_STACK_TRUNCATED cleared), exporting its
 * not yet exported ancestors outermost first, so that a parent always gets a
 * smaller new id than its children whatever the live ids are. Every parent
 * followed is checked: in range, and a chain no longer than the deepest
 * stack the tree can hold (anything longer is a cycle). A chain that fails
 * is exported as no stack (0). */
static uint32_t export_one(stack_export *x, uint32_t id)
{
    id &= ~VT_STACK_TRUNCATED;
    if (id == 0)
        return 0;
    if (id >= x->count) {
        x->bad++;
        return 0;
    }
    uint32_t path[VT_STACK_MAX_DEPTH + 1], parent[VT_STACK_MAX_DEPTH + 1];
    uint64_t ip[VT_STACK_MAX_DEPTH + 1];
    size_t n = 0;
    uint32_t cur = id;
    bool ok = true;
    while (cur != 0 && x->remap[cur] == 0) {
        if (n == VT_STACK_MAX_DEPTH + 1 || vt__stacks_node(cur, &parent[n], &ip[n]) != 0 ||
            parent[n] >= x->count) {
            ok = false;
            break;
        }
        path[n++] = cur;
        cur = parent[n - 1];
    }
    if (cur != 0 && x->remap[cur] == BAD_CHAIN)
        ok = false;
    if (!ok) {
        for (size_t i = 0; i < n; i++)
            x->remap[path[i]] = BAD_CHAIN;
        x->bad++;
        return 0;
    }
    while (n-- > 0) {
        if (x->next >= x->count) {        /* cannot happen: one new id per old id */
            x->bad++;
            return 0;
        }
        uint32_t nid = x->next++;
        x->nodes[nid] = (vt__stack_node){
            .parent = parent[n] ? x->remap[parent[n]] : 0,
        };
        x->ip[nid] = ip[n];
        x->remap[path[n]] = nid;
    }
    return x->remap[id] == BAD_CHAIN ? 0 : x->remap[id];
}

/* Export the nodes referenced by events and blocks, and their ancestors,
 * renumbered densely in order of first reference. Events whose stack was
 * truncated (the tree was full) are counted in meta.stacks_truncated. */
static int export_stacks(vt__snapshot_data *s, vt__strtab *st)
{
    stack_export x = { .count = vt__stacks_count(), .next = 1 };
    if (x.count == 0)
        x.count = 1;
    int rc = -ENOMEM;
    uint64_t *ips = NULL;
    x.remap = calloc(x.count, sizeof *x.remap);
    x.nodes = calloc(x.count, sizeof *x.nodes);
    x.ip = calloc(x.count, sizeof *x.ip);
    if (!x.remap || !x.nodes || !x.ip)
        goto out;
    uint64_t truncated = 0;
    for (size_t i = 0; i < s->nevents; i++) {
        uint32_t id = s->events[i].stack;
        truncated += (id & VT_STACK_TRUNCATED) != 0;
        s->events[i].stack = export_one(&x, id);
        /* a free names its block's allocation stack too (format 1.12) */
        if (s->events[i].kind == VT_EV_FREE_REQUESTED && s->events[i].aux2)
            s->events[i].aux2 = export_one(&x, (uint32_t)s->events[i].aux2);
    }
    for (size_t i = 0; i < s->nblocks; i++)
        s->blocks[i].stack = export_one(&x, s->blocks[i].stack);
    s->meta.stacks_truncated = truncated;

    size_t nnodes = x.next, nips = nnodes - 1;
    ips = malloc((nips ? nips : 1) * sizeof *ips);
    if (!ips)
        goto out;
    memcpy(ips, x.ip + 1, nips * sizeof *ips);
    qsort(ips, nips, sizeof *ips, vt__qsort_u64);
    size_t nuniq = 0;
    for (size_t i = 0; i < nips; i++)
        if (nuniq == 0 || ips[nuniq - 1] != ips[i])
            ips[nuniq++] = ips[i];
    s->frames = calloc(nuniq ? nuniq : 1, sizeof *s->frames);
    if (!s->frames)
        goto out;
    s->nframes = nuniq;
    vt__symbolize(ips, nuniq, s->frames, st);
    for (size_t i = 1; i < nnodes; i++)
        x.nodes[i].frame = frame_index(ips, nuniq, x.ip[i]);
    s->stack_nodes = x.nodes;
    s->nstack_nodes = nnodes;
    x.nodes = NULL;
    rc = 0;
out:
    free(x.remap);
    free(x.nodes);
    free(x.ip);
    free(ips);
    return rc;
}

/* This thread's pending request (CLOCK_MONOTONIC ns), 0: none. */
static _Thread_local uint64_t requested_ns;

void vt__snapshot_requested(int on)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    requested_ns = on ? (uint64_t)now.tv_sec * 1000000000u + (uint64_t)now.tv_nsec : 0;
}

int vt__snapshot_build(vt__snapshot_data **out)
{
    *out = NULL;
    vt__rec_init();
    vt__snapshot_data *s = calloc(1, sizeof *s);
    if (!s)
        return -ENOMEM;
    vt__strtab st = { 0 };
    vt__strings_hold();
    int rc = vt__ring_copy(&s->events, &s->nevents, &s->meta.events_recorded,
                           &s->meta.events_overwritten);
    if (rc == 0) {
        vt__state_provider p = vt__trace_state_provider();
        int prc = p ? p(s) : 0;
        if (prc < 0)
            fprintf(stderr, "vramtrace: the allocator could not describe its state (%s); "
                            "the snapshot has events only\n", strerror(-prc));
        /* The provider may have added a few before failing: keep the
         * segments/blocks consistent by dropping all of them. */
        if (prc < 0) {
            free(s->segments); s->segments = NULL; s->nsegments = 0;
            free(s->blocks); s->blocks = NULL; s->nblocks = 0;
            s->meta.flags &= ~(uint32_t)VT_META_DEVICE_PEAKS;
        } else if (p) {
            s->meta.flags |= VT_META_STATE_COMPLETE;
        }
        /* An observed framework allocator's blocks are not in our state: it
         * describes vramtrace's own cache, neither the whole of what is alive
         * nor its peaks. */
        uint32_t pool = vt__pool_meta_flags();
        s->meta.flags |= pool;
        if (pool & VT_META_POOL_OBSERVED) {
            s->meta.flags &= ~(uint32_t)(VT_META_STATE_COMPLETE | VT_META_DEVICE_PEAKS);
            vt__pool_add_devices(s);   /* before the strings are exported: its name */
            /* its segments and live blocks, which the ring may have lost the
             * events of (without them: as before, the window's alone) */
            if (vt__pool_state_add(s) != 0)
                fprintf(stderr, "vramtrace: PyTorch's allocator state could not be listed "
                                "(out of memory); the snapshot shows its blocks and segments "
                                "from the kept events only\n");
        }
        rc = vt__strtab_init(&st);
        if (rc == 0)
            rc = vt__strings_export(s, &st);   /* after the provider: device names */
    }
    vt__strings_release();
    if (rc == 0) {
        fill_meta(s, &st);
        rc = export_stacks(s, &st);
    }
    if (rc == 0) {
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        s->meta.snapshot_time_ns = (uint64_t)now.tv_sec * 1000000000u + (uint64_t)now.tv_nsec;
        /* the program's time stopped then; kept until forgotten, so that
         * every snapshot of the request has it (at exit: a stale OOM
         * snapshot rewritten first, then the exit snapshot) */
        if (requested_ns && requested_ns < s->meta.snapshot_time_ns)
            s->meta.snapshot_time_ns = requested_ns;
        s->strings_blob = st.blob;
        s->strings_blob_size = st.size;
        s->string_offsets = st.offsets;
        s->nstrings = st.n;
        free(st.slots);
        *out = s;
        return 0;
    }
    vt__strtab_free(&st);
    vt__snapshot_free(s);
    return rc;
}

static pthread_mutex_t write_lock = PTHREAD_MUTEX_INITIALIZER;

/* fork() while another thread writes a snapshot would leave write_lock held
 * forever in the child, and the child's own snapshot (VRAMTRACE_OUT with %p
 * at exit, a DataLoader worker's vt_snapshot) would hang it: the fork waits
 * for the write to end. */
VT__LOCK_ACROSS_FORK(snapshot_write, write_lock)

int vt__snapshot_write(const char *path, int flags, char *err, size_t errlen)
{
    if (!path || !*path) {
        snprintf(err, errlen, "no snapshot path");
        return -EINVAL;
    }
    /* Before anything is allocated: a signal handler that interrupted this
     * thread inside the allocator (or inside malloc, under it) would wait
     * for a lock its own thread holds. */
    vt__state_provider p = vt__trace_state_provider();
    if (p && p(NULL) == -EDEADLK) {
        snprintf(err, errlen, "no snapshot %s: asked on a thread interrupted inside the "
                              "allocator (a signal handler?); VRAMTRACE_CONF=signal:SIG takes "
                              "snapshots on a signal", path);
        return -EDEADLK;
    }
    vt__snapshot_data *s;
    int rc = vt__snapshot_build(&s);
    if (rc != 0) {
        snprintf(err, errlen, "cannot build a snapshot for %s: %s", path, strerror(-rc));
        return rc;
    }
    err[0] = '\0';
    pthread_mutex_lock(&write_lock);
    rc = vt__snapfile_write_flags(s, path, flags, err, errlen);
    pthread_mutex_unlock(&write_lock);
    if (rc != 0 && !err[0])
        snprintf(err, errlen, "cannot write snapshot %s: %s", path, strerror(-rc));
    vt__snapshot_free(s);
    return rc;
}

int vt__snapshot_write_path(const char *path)
{
    char err[768];
    int rc = vt__snapshot_write(path, 0, err, sizeof err);
    if (rc != 0)
        fprintf(stderr, "vramtrace: %s\n", err);
    return rc;
}
