/*
 * tests/trace/test_recorder_lib.c - the recorder inside libvramtrace.so, with
 * the real allocator on the simulated device: allocation events carry the
 * caller's stack with every frame of the library skipped, and vt_snapshot()
 * writes the allocator's state next to the events. Public API only.
 */
#include "snapfile.h"
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

static vt_snapshot_data *snapshot_now(char *path, size_t len)
{
    char dir[] = "/tmp/vt-reclib-XXXXXX";
    ASSERT(mkdtemp(dir) != NULL);
    snprintf(path, len, "%s/s.vtsnap", dir);
    ASSERT_OK(vt_snapshot(path));
    vt_snapshot_data *s = NULL;
    char err[256] = "";
    int rc = vt_snapfile_read(path, &s, err, sizeof err);
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
    vt_snapshot_data *s = snapshot_now(path, sizeof path);

    int allocs = 0, frees = 0, marks = 0;
    for (size_t i = 0; i < s->nevents; i++) {
        const vt_event *e = &s->events[i];
        const vt_frame *f[8];
        if (e->kind == VT_EV_ALLOC && (e->addr == (uintptr_t)keep || e->addr == (uintptr_t)gone)) {
            allocs++;
            ASSERT_GE(vt_snapshot_stack_frames(s, e->stack, f, 8), 3);
            ASSERT_STR_EQ(vt_snapshot_string(s, f[0]->function), "alloc_site");
            ASSERT_STR_CONTAINS(vt_snapshot_string(s, f[0]->file), "test_recorder_lib.c");
            ASSERT_STR_EQ(vt_snapshot_string(s, f[1]->function),
                          "test_allocator_events_carry_the_callers_stack_without_library_frames");
        }
        if (e->kind == VT_EV_FREE_REQUESTED && e->addr == (uintptr_t)gone) {
            frees++;
            ASSERT_GE(vt_snapshot_stack_frames(s, e->stack, f, 8), 2);
            ASSERT_STR_EQ(vt_snapshot_string(s, f[0]->function), "free_site");
        }
        if (e->kind == VT_EV_MARK)
            marks += !strcmp(vt_snapshot_string(s, e->str), "after free");
    }
    ASSERT_EQ(allocs, 2);
    ASSERT_EQ(frees, 1);
    ASSERT_EQ(marks, 1);

    /* The allocator's state: the live block, with the same stack as its event. */
    int found = 0;
    for (size_t i = 0; i < s->nblocks; i++) {
        const vt_block *b = &s->blocks[i];
        if (b->addr != (uintptr_t)keep)
            continue;
        found = 1;
        ASSERT_EQ(b->state, VT_BLOCK_ACTIVE_ALLOCATED);
        ASSERT_EQ(b->req_size, 1000);
        const vt_frame *f[2];
        ASSERT_GE(vt_snapshot_stack_frames(s, b->stack, f, 2), 1);
        ASSERT_STR_EQ(vt_snapshot_string(s, f[0]->function), "alloc_site");
    }
    ASSERT(found);
    ASSERT_GE(s->ndevices, 1);
    ASSERT_GE(s->nsegments, 1);
    ASSERT_STR_CONTAINS(vt_snapshot_string(s, s->frames[0].module), "/");
    vt_snapshot_free(s);
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
    vt_snapshot_data *s = snapshot_now(path, sizeof path);
    int uses = 0;
    for (size_t i = 0; i < s->nevents; i++) {
        const vt_event *e = &s->events[i];
        if (e->kind == VT_EV_TENSOR_USE && e->aux == t) {
            const vt_frame *f[2];
            ASSERT_GE(vt_snapshot_stack_frames(s, e->stack, f, 2), 1);
            ASSERT_STR_EQ(vt_snapshot_string(s, f[0]->function),
                          "test_annotations_through_the_shared_library");
            uses++;
        }
    }
    ASSERT_EQ(uses, 1);
    vt_snapshot_free(s);
    remove_snapshot(path);
    free_site(p, 4096);
}

TEST_MAIN()
