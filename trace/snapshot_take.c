/*
 * trace/snapshot_take.c - a vt_snapshot_data of the live process.
 *
 * The snapshot copies the event ring (writers go on meanwhile: allocation is
 * never blocked for longer than it takes to copy), asks the allocator's state
 * provider for its segments and blocks, and exports only the stack nodes that
 * events and blocks reference (plus their ancestors), renumbered densely, with
 * each unique IP symbolized once. No recorder lock is held while the provider
 * runs: building needs no lock at all (the ring and the stack tree are read
 * lock-free, the string table is copied under its own short lock); only the
 * file write is serialized, so that two snapshots to one path do not mix.
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
#include "snapfile.h"

const char *vt_version_string(void);

/* Arrays here grow to the next power of two: no capacity field is needed. */
static int grow(void **arr, size_t n, size_t elem)
{
    if (n != 0 && (n & (n - 1)) != 0)
        return 0;
    size_t cap = n ? n * 2 : 8;
    void *p = realloc(*arr, cap * elem);
    if (!p)
        return -ENOMEM;
    *arr = p;
    return 0;
}

int vt__snapshot_add_segment(vt_snapshot_data *snap, const vt_segment *seg)
{
    if (!snap || !seg)
        return -EINVAL;
    if (grow((void **)&snap->segments, snap->nsegments, sizeof *seg) != 0)
        return -ENOMEM;
    vt_segment *s = &snap->segments[snap->nsegments++];
    *s = *seg;
    s->first_block = (uint32_t)snap->nblocks;
    s->nblocks = 0;
    return 0;
}

int vt__snapshot_add_block(vt_snapshot_data *snap, const vt_block *block)
{
    if (!snap || !block || snap->nsegments == 0)
        return -EINVAL;
    if (grow((void **)&snap->blocks, snap->nblocks, sizeof *block) != 0)
        return -ENOMEM;
    snap->blocks[snap->nblocks++] = *block;
    snap->segments[snap->nsegments - 1].nblocks++;
    return 0;
}

int vt__snapshot_add_device(vt_snapshot_data *snap, int ordinal, const char *name,
                            uint64_t total_bytes)
{
    if (!snap)
        return -EINVAL;
    if (grow((void **)&snap->devices, snap->ndevices, sizeof *snap->devices) != 0)
        return -ENOMEM;
    snap->devices[snap->ndevices++] = (vt_device_info){
        .ordinal = ordinal, .name = vt__string_intern(name), .total_bytes = total_bytes,
    };
    return 0;
}

static int read_rank(void)
{
    const char *v = getenv("RANK");
    if (!v || !*v)
        v = getenv("OMPI_COMM_WORLD_RANK");
    if (!v || !*v)
        return -1;
    char *end;
    long r = strtol(v, &end, 10);
    return (*end == '\0' && r >= 0 && r <= INT32_MAX) ? (int)r : -1;
}

/* argv joined by spaces, from /proc/self/cmdline. */
static uint32_t command_line(vt_strtab *st)
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

static void fill_meta(vt_snapshot_data *s, vt_strtab *st)
{
    vt_snapshot_meta *m = &s->meta;
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
    m->stacks_dropped = vt__stacks_dropped();
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
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

/* Export the nodes referenced by events and blocks, and their ancestors. */
static int export_stacks(vt_snapshot_data *s, vt_strtab *st)
{
    uint32_t count = vt__stacks_count();
    uint32_t *remap = calloc(count ? count : 1, sizeof *remap);
    uint32_t *parent = calloc(count ? count : 1, sizeof *parent);
    uint64_t *ip = calloc(count ? count : 1, sizeof *ip);
    int rc = -ENOMEM;
    uint64_t *ips = NULL;
    if (!remap || !parent || !ip)
        goto out;
    for (size_t i = 0; i < s->nevents; i++)
        if (s->events[i].stack < count)
            remap[s->events[i].stack] = 1;
    for (size_t i = 0; i < s->nblocks; i++)
        if (s->blocks[i].stack < count)
            remap[s->blocks[i].stack] = 1;
    remap[0] = 0;
    /* A parent's id is always smaller than its children's (it was interned
     * first), so one descending pass closes the set over ancestors. */
    size_t nref = 0;
    for (uint32_t id = count; id-- > 1;) {
        if (!remap[id])
            continue;
        if (vt__stacks_node(id, &parent[id], &ip[id]) != 0) {
            remap[id] = 0;
            continue;
        }
        if (parent[id])
            remap[parent[id]] = 1;
        nref++;
    }
    ips = malloc((nref ? nref : 1) * sizeof *ips);
    s->stack_nodes = malloc((nref + 1) * sizeof *s->stack_nodes);
    if (!ips || !s->stack_nodes)
        goto out;
    size_t nips = 0;
    for (uint32_t id = 1; id < count; id++)
        if (remap[id])
            ips[nips++] = ip[id];
    qsort(ips, nips, sizeof *ips, cmp_u64);
    size_t nuniq = 0;
    for (size_t i = 0; i < nips; i++)
        if (nuniq == 0 || ips[nuniq - 1] != ips[i])
            ips[nuniq++] = ips[i];
    s->frames = calloc(nuniq ? nuniq : 1, sizeof *s->frames);
    if (!s->frames)
        goto out;
    s->nframes = nuniq;
    vt__symbolize(ips, nuniq, s->frames, st);

    s->stack_nodes[0] = (vt_stack_node){ 0, 0 };
    uint32_t next = 1;
    for (uint32_t id = 1; id < count; id++) {
        if (!remap[id])
            continue;
        remap[id] = next;
        s->stack_nodes[next++] = (vt_stack_node){
            .parent = parent[id] ? remap[parent[id]] : 0,
            .frame = frame_index(ips, nuniq, ip[id]),
        };
    }
    s->nstack_nodes = next;
    for (size_t i = 0; i < s->nevents; i++)
        s->events[i].stack = s->events[i].stack < count ? remap[s->events[i].stack] : 0;
    for (size_t i = 0; i < s->nblocks; i++)
        s->blocks[i].stack = s->blocks[i].stack < count ? remap[s->blocks[i].stack] : 0;
    rc = 0;
out:
    free(remap);
    free(parent);
    free(ip);
    free(ips);
    return rc;
}

int vt__snapshot_build(vt_snapshot_data **out)
{
    *out = NULL;
    vt__rec_init();
    vt_snapshot_data *s = calloc(1, sizeof *s);
    if (!s)
        return -ENOMEM;
    vt_strtab st = { 0 };
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
        rc = vt__strings_clone(&st);   /* after the provider: device names */
    }
    if (rc == 0) {
        fill_meta(s, &st);
        rc = export_stacks(s, &st);
    }
    if (rc == 0) {
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        s->meta.snapshot_time_ns = (uint64_t)now.tv_sec * 1000000000u + (uint64_t)now.tv_nsec;
        s->strings_blob = st.blob;
        s->strings_blob_size = st.size;
        s->string_offsets = st.offsets;
        s->nstrings = st.n;
        free(st.slots);
        *out = s;
        return 0;
    }
    vt__strtab_free(&st);
    vt_snapshot_free(s);
    return rc;
}

static pthread_mutex_t write_lock = PTHREAD_MUTEX_INITIALIZER;

/* fork() while another thread writes a snapshot would leave write_lock held
 * forever in the child, and the child's own snapshot (VRAMTRACE_OUT with %p
 * at exit, a DataLoader worker's vt_snapshot) would hang it. Hold the lock
 * across the fork, as strings.c does: the fork waits for the write to end. */
static void fork_prepare(void) { pthread_mutex_lock(&write_lock); }
static void fork_release(void) { pthread_mutex_unlock(&write_lock); }

__attribute__((constructor)) static void snapshot_atfork(void)
{
    pthread_atfork(fork_prepare, fork_release, fork_release);
}

int vt__snapshot_write_path(const char *path)
{
    if (!path || !*path)
        return -EINVAL;
    vt_snapshot_data *s;
    int rc = vt__snapshot_build(&s);
    if (rc != 0) {
        fprintf(stderr, "vramtrace: cannot build a snapshot for %s: %s\n", path, strerror(-rc));
        return rc;
    }
    char err[512] = "";
    pthread_mutex_lock(&write_lock);
    rc = vt_snapfile_write(s, path, err, sizeof err);
    pthread_mutex_unlock(&write_lock);
    if (rc != 0)
        fprintf(stderr, "vramtrace: cannot write snapshot %s: %s\n", path,
                err[0] ? err : strerror(-rc));
    vt_snapshot_free(s);
    return rc;
}
