/*
 * tests/trace/test_recorder_lib.c - the recorder inside libvramtrace.so, with
 * the real allocator on the simulated device: allocation events carry the
 * caller's stack with every frame of the library skipped, and vt_snapshot()
 * writes the allocator's state next to the events. Public API only.
 */
#include <pthread.h>
#include <stdatomic.h>

#include "snapfile.h"
#include "timeline.h"
#include "vramtrace.h"

#include "../harness.h"

static volatile int sink;

__attribute__((noinline)) static void *alloc_site(size_t n)
{
    void *p = vt_malloc((ssize_t)n, 0, NULL);
    __asm__ volatile("" ::: "memory");
    sink++;
    return p;
}

__attribute__((noinline)) static void free_site(void *p, size_t n)
{
    vt_free(p, (ssize_t)n, 0, NULL);
    __asm__ volatile("" ::: "memory");
    sink += 2;
}

static vt__snapshot_data *snapshot_now(char *path, size_t len)
{
    char dir[] = "/tmp/vt-reclib-XXXXXX";
    ASSERT(mkdtemp(dir) != NULL);
    snprintf(path, len, "%s/s.vtsnap", dir);
    ASSERT_OK(vt_snapshot(path));
    vt__snapshot_data *s = NULL;
    char err[256] = "";
    int rc = vt__snapfile_read(path, &s, err, sizeof err);
    ASSERT_MSG(rc == 0, "%s", err);
    return s;
}

static void remove_snapshot(const char *path)
{
    char dir[256];
    snprintf(dir, sizeof dir, "%s", path);
    *strrchr(dir, '/') = '\0';
    unlink(path);
    rmdir(dir);
}

TEST(allocator_events_carry_the_callers_stack_without_library_frames)
{
    void *keep = alloc_site(1000);
    void *gone = alloc_site(3000);
    ASSERT(keep && gone);
    free_site(gone, 3000);
    ASSERT_OK(vt_mark("after free"));
    char path[256];
    vt__snapshot_data *s = snapshot_now(path, sizeof path);

    int allocs = 0, frees = 0, marks = 0;
    for (size_t i = 0; i < s->nevents; i++) {
        const vt__event *e = &s->events[i];
        const vt__frame *f[8];
        if (e->kind == VT_EV_ALLOC && (e->addr == (uintptr_t)keep || e->addr == (uintptr_t)gone)) {
            allocs++;
            ASSERT_GE(vt__snapshot_stack_frames(s, e->stack, f, 8), 3);
            ASSERT_STR_EQ(vt__snapshot_string(s, f[0]->function), "alloc_site");
            ASSERT_STR_CONTAINS(vt__snapshot_string(s, f[0]->file), "test_recorder_lib.c");
            ASSERT_STR_EQ(vt__snapshot_string(s, f[1]->function),
                          "test_allocator_events_carry_the_callers_stack_without_library_frames");
        }
        if (e->kind == VT_EV_FREE_REQUESTED && e->addr == (uintptr_t)gone) {
            frees++;
            ASSERT_GE(vt__snapshot_stack_frames(s, e->stack, f, 8), 2);
            ASSERT_STR_EQ(vt__snapshot_string(s, f[0]->function), "free_site");
        }
        if (e->kind == VT_EV_MARK)
            marks += !strcmp(vt__snapshot_string(s, e->str), "after free");
    }
    ASSERT_EQ(allocs, 2);
    ASSERT_EQ(frees, 1);
    ASSERT_EQ(marks, 1);

    /* The allocator's state: the live block, with the same stack as its event. */
    int found = 0;
    for (size_t i = 0; i < s->nblocks; i++) {
        const vt__snap_block *b = &s->blocks[i];
        if (b->addr != (uintptr_t)keep)
            continue;
        found = 1;
        ASSERT_EQ(b->state, VT_BLOCK_ACTIVE_ALLOCATED);
        ASSERT_EQ(b->req_size, 1000);
        const vt__frame *f[2];
        ASSERT_GE(vt__snapshot_stack_frames(s, b->stack, f, 2), 1);
        ASSERT_STR_EQ(vt__snapshot_string(s, f[0]->function), "alloc_site");
    }
    ASSERT(found);
    ASSERT_GE(s->ndevices, 1);
    ASSERT_GE(s->nsegments, 1);
    ASSERT_STR_CONTAINS(vt__snapshot_string(s, s->frames[0].module), "/");
    vt__snapshot_free(s);
    remove_snapshot(path);
    free_site(keep, 1000);
}

TEST(annotations_through_the_shared_library)
{
    void *p = alloc_site(4096);
    uint64_t t = vt_tensor_new(p, 4096, 0, "x");
    vt_tensor_use(t);
    vt_tensor_drop(t);
    char path[256];
    vt__snapshot_data *s = snapshot_now(path, sizeof path);
    int uses = 0;
    for (size_t i = 0; i < s->nevents; i++) {
        const vt__event *e = &s->events[i];
        if (e->kind == VT_EV_TENSOR_USE && e->aux == t) {
            const vt__frame *f[2];
            ASSERT_GE(vt__snapshot_stack_frames(s, e->stack, f, 2), 1);
            ASSERT_STR_EQ(vt__snapshot_string(s, f[0]->function),
                          "test_annotations_through_the_shared_library");
            uses++;
        }
    }
    ASSERT_EQ(uses, 1);
    vt__snapshot_free(s);
    remove_snapshot(path);
    free_site(p, 4096);
}

/* With a ring of 1024 events (VRAMTRACE_CONF, set by meson), the 64 MiB
 * allocation is long overwritten at the snapshot: the window's peak misses
 * it, the allocator's own peak, recorded in the snapshot, does not. */
TEST(snapshot_records_the_allocators_true_peaks)
{
    void *big = alloc_site(64 << 20);
    ASSERT(big);
    free_site(big, 64 << 20);
    for (int i = 0; i < 1000; i++)
        free_site(alloc_site(4096), 4096);
    vt_stats st;
    ASSERT_OK(vt_get_stats(0, &st));
    char path[256];
    vt__snapshot_data *s = snapshot_now(path, sizeof path);
    ASSERT(s->meta.flags & VT_META_DEVICE_PEAKS);
    ASSERT(s->meta.events_overwritten > 0);
    ASSERT_EQ(s->ndevices, 1);
    ASSERT_EQ(s->devices[0].peak_allocated, (uint64_t)st.allocated_bytes[VT_STAT_ALL].peak);
    ASSERT_EQ(s->devices[0].peak_reserved, (uint64_t)st.reserved_bytes[VT_STAT_ALL].peak);
    ASSERT_EQ(s->devices[0].peak_active, (uint64_t)st.active_bytes[VT_STAT_ALL].peak);
    ASSERT_GE(s->devices[0].peak_allocated, (uint64_t)64 << 20);
    vt__timeline *tl;
    char err[256];
    ASSERT_MSG(vt__timeline_build(s, &tl, err, sizeof err) == 0, "%s", err);
    const vt__tl_device *d = vt__timeline_device(tl, 0);
    ASSERT(d);
    ASSERT_LT(d->peak_allocated, (uint64_t)64 << 20);   /* the window's peak: labelled apart */
    vt__timeline_free(tl);
    vt__snapshot_free(s);
    remove_snapshot(path);
}

/* Threads allocating and freeing while the main thread snapshots: with a
 * small ring (VRAMTRACE_CONF max_events, set by meson) writers lap the copy,
 * and the kept events may have gaps. Whatever the timing, every snapshot
 * must be consistent: what the views call alive is exactly what the
 * allocator state in the same file holds. */
static atomic_int churn_stop;

static void *churn(void *arg)
{
    uint64_t x = (uint64_t)(uintptr_t)arg * 0x9E3779B97F4A7C15ull + 1;
    void *live[64] = { 0 };
    size_t size[64] = { 0 };
    while (!atomic_load(&churn_stop)) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        unsigned k = (unsigned)(x % 64);
        if (live[k]) {
            vt_free(live[k], (ssize_t)size[k], 0, NULL);
            live[k] = NULL;
        } else {
            size[k] = 512u << (x >> 8) % 11;       /* 512 B .. 512 KiB */
            live[k] = vt_malloc((ssize_t)size[k], 0, NULL);
        }
    }
    for (unsigned k = 0; k < 64; k++)
        if (live[k])
            vt_free(live[k], (ssize_t)size[k], 0, NULL);
    return NULL;
}

TEST(live_snapshot_under_load_agrees_with_the_allocator_state)
{
    /* each snapshot copies and builds a 262144-event ring while four
     * threads keep writing it: two of them under ThreadSanitizer */
    enum { NTHREADS = 4, NSNAPS = HARNESS_STRESS(4, 2) };
    pthread_t th[NTHREADS];
    /* the allocator (and with it the state in snapshots) exists from the
     * first allocation: make it before the first snapshot can run */
    free_site(alloc_site(512), 512);
    for (uintptr_t i = 0; i < NTHREADS; i++)
        ASSERT_EQ(pthread_create(&th[i], NULL, churn, (void *)(i + 1)), 0);
    size_t gaps = 0, unseen = 0;
    for (int n = 0; n < NSNAPS; n++) {
        char path[256];
        vt__snapshot_data *s = snapshot_now(path, sizeof path);
        ASSERT(s->meta.flags & VT_META_STATE_COMPLETE);
        ASSERT(s->meta.flags & VT_META_DEVICE_PEAKS);
        vt__timeline *tl;
        char err[256];
        ASSERT_MSG(vt__timeline_build(s, &tl, err, sizeof err) == 0, "%s", err);
        ASSERT_EQ(tl->state_complete, 1);
        uint64_t alive = 0, nalive = 0, state = 0, nstate = 0;
        for (size_t i = 0; i < tl->nlifetimes; i++) {
            const vt__lifetime *l = &tl->lifetimes[i];
            if (!(l->flags & VT_LT_ALIVE))
                continue;
            alive += l->size;
            nalive++;
            /* each alive lifetime is an allocated block of the state */
            int found = 0;
            for (size_t b = 0; b < s->nblocks && !found; b++)
                found = s->blocks[b].addr == l->addr &&
                        s->blocks[b].state == VT_BLOCK_ACTIVE_ALLOCATED;
            ASSERT_MSG(found, "alive lifetime at 0x%llx is not in the allocator state",
                       (unsigned long long)l->addr);
        }
        for (size_t b = 0; b < s->nblocks; b++)
            if (s->blocks[b].state == VT_BLOCK_ACTIVE_ALLOCATED) {
                state += s->blocks[b].size;
                nstate++;
            }
        ASSERT_EQ(nalive, nstate);
        ASSERT_EQ(alive, state);
        /* the allocator's true peak is at least what the window shows */
        const vt__tl_device *d = vt__timeline_device(tl, 0);
        ASSERT(d && s->ndevices >= 1);
        ASSERT_GE(s->devices[0].peak_allocated, state);
        gaps += tl->ngaps;
        unseen += tl->nfree_unseen;
        vt__timeline_free(tl);
        vt__snapshot_free(s);
        remove_snapshot(path);
    }
    atomic_store(&churn_stop, 1);
    for (int i = 0; i < NTHREADS; i++)
        ASSERT_EQ(pthread_join(th[i], NULL), 0);
    printf("%d snapshots under load: %zu gaps, %zu lifetimes freed where the events do not "
           "show it\n", NSNAPS, gaps, unseen);
}

TEST_MAIN()
