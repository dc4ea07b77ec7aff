/*
 * tests/trace/test_strings.c - interned strings are kept as long as the
 * events that name them: bounded memory however many unique labels a program
 * makes, snapshots that carry exactly their events' strings, and stack frame
 * strings that stay.
 */
#include "rec_snap.h"
#include "snapfile.h"
#include "vramtrace.h"

#include <pthread.h>
#include <stdatomic.h>
#include <sys/wait.h>

#include "../harness.h"

#define RING 4096               /* max_events of these tests (meson.build) */
#define GEN_STRINGS 32768       /* interned.c: strings per generation */

static vt__snapshot_data *build(void)
{
    vt__snapshot_data *s = NULL;
    ASSERT_OK(vt__snapshot_build(&s));
    return s;
}

static vt__snapshot_data *through_a_file(vt__snapshot_data *s, size_t *file_size)
{
    char dir[] = "/tmp/vt-strings-XXXXXX", path[64], err[512];
    ASSERT(mkdtemp(dir) != NULL);
    snprintf(path, sizeof path, "%s/s.vtsnap", dir);
    ASSERT_MSG(vt__snapfile_write(s, path, err, sizeof err) == 0, "%s", err);
    vt__snapshot_free(s);
    FILE *f = fopen(path, "rb");
    ASSERT(f != NULL);
    fseek(f, 0, SEEK_END);
    *file_size = (size_t)ftell(f);
    fclose(f);
    ASSERT_MSG(vt__snapfile_read(path, &s, err, sizeof err) == 0, "%s", err);
    unlink(path);
    rmdir(dir);
    return s;
}

/* Five million "epoch 3 step N" labels grew the table without end; now at
 * most the ring's worth of labels plus two generations are kept. */
TEST(unique_labels_keep_interned_memory_bounded_by_the_ring)
{
    enum { MARKS = 400000 };
    char label[64];
    vt__strings_usage st;
    uint64_t most_gens = 0, most_bytes = 0, most_strings = 0;
    for (unsigned i = 0; i < MARKS; i++) {
        snprintf(label, sizeof label, "epoch 3 step %u", i);
        ASSERT_OK(vt_mark(label));
        if (i % 1000 == 999) {
            vt__strings_stats(&st);
            most_gens = st.event_generations > most_gens ? st.event_generations : most_gens;
            most_bytes = st.bytes > most_bytes ? st.bytes : most_bytes;
            most_strings = st.event_strings > most_strings ? st.event_strings : most_strings;
        }
    }
    vt__strings_stats(&st);
    ASSERT_EQ(st.refused, 0);
    /* the ring's 4096 events need one generation; the current one and the one
     * just retired come on top */
    ASSERT_LE(most_gens, (RING + GEN_STRINGS - 1) / GEN_STRINGS + 2);
    ASSERT_LE(most_strings, RING + 2 * GEN_STRINGS);
    ASSERT_LT(most_strings, MARKS / 4);
    ASSERT_LE(most_bytes, 3 * (GEN_STRINGS * 12 + (2u << 20) + 4096));

    /* The snapshot has every kept mark's label, and only those. */
    vt__snapshot_data *s = build();
    ASSERT_EQ(s->nevents, RING);
    for (size_t i = 0; i < s->nevents; i++) {
        ASSERT_EQ(s->events[i].kind, VT_EV_MARK);
        snprintf(label, sizeof label, "epoch 3 step %zu", MARKS - RING + i);
        ASSERT_STR_EQ(vt__snapshot_string(s, s->events[i].str), label);
    }
    ASSERT_LE(s->nstrings, RING + 16);   /* + "", host, command line, config, version */
    size_t file_size;
    s = through_a_file(s, &file_size);
    /* Reading it takes what its kept events need, not what the run interned. */
    ASSERT_LE(s->nstrings, RING + 16);
    ASSERT_LE(s->strings_blob_size, RING * 24 + 16384);
    ASSERT_LE(file_size, 256 * 1024);
    ASSERT_STR_EQ(vt__snapshot_string(s, s->events[RING - 1].str), "epoch 3 step 399999");
    vt__snapshot_free(s);
}

/* The label of an overwritten event can go; used again, it comes back under
 * a new index, and no index ever names another string. */
TEST(label_of_an_overwritten_event_is_forgotten_and_interned_again)
{
    ASSERT_OK(vt_mark("the first epoch"));
    uint32_t old = vt__string_intern("the first epoch");
    char buf[64];
    ASSERT_EQ(vt__strings_get(old, buf, sizeof buf), 15);
    for (unsigned i = 0; i < 3 * GEN_STRINGS; i++) {
        snprintf(buf, sizeof buf, "step %u", i);
        ASSERT_OK(vt_mark(buf));
    }
    ASSERT_EQ(vt__strings_get(old, buf, sizeof buf), -1);
    uint32_t again = vt__string_intern("the first epoch");
    ASSERT_NE(again, 0);
    ASSERT_NE(again, old);
    ASSERT_EQ(vt__strings_get(again, buf, sizeof buf), 15);
    ASSERT_STR_EQ(buf, "the first epoch");
}

/* Frame strings are named by stack nodes, which live for good: they outlast
 * every event that named them. */
TEST(stack_frame_strings_outlive_the_events_that_named_them)
{
    const char *frames[] = { "model.py:42 forward", "train.py:7 <module>" };
    uint32_t st = vt_stack_intern_frames(frames, 2);
    ASSERT_NE(st, 0);
    ASSERT_OK(vt_storage_external_stack((void *)0x1000, 64, -1, st));
    char buf[32];
    for (unsigned i = 0; i < 3 * GEN_STRINGS; i++) {
        snprintf(buf, sizeof buf, "step %u", i);
        ASSERT_OK(vt_mark(buf));
    }
    vt_tensor_use_stack(vt_tensor_new((void *)0x1000, 16, 0, "x"), st);
    vt__strings_usage stats;
    vt__strings_stats(&stats);
    ASSERT_EQ(stats.pinned_strings, 2);
    vt__snapshot_data *s = build();
    const vt__event *e = &s->events[s->nevents - 1];
    ASSERT_EQ(e->kind, VT_EV_TENSOR_USE);
    const vt__frame *f[4];
    ASSERT_EQ(vt__snapshot_stack_frames(s, e->stack, f, 4), 2);
    ASSERT_STR_EQ(vt__snapshot_string(s, f[0]->function), "forward");
    ASSERT_STR_EQ(vt__snapshot_string(s, f[0]->file), "model.py");
    ASSERT_STR_EQ(vt__snapshot_string(s, f[1]->function), "<module>");
    ASSERT_STR_EQ(vt__snapshot_string(s, s->events[s->nevents - 2].str), "x");
    vt__snapshot_free(s);
}

/* A thread makes a new label per event while snapshots are taken: each
 * snapshot has the label of every mark it kept (generations retired meanwhile
 * are not freed under it), in order. The marking thread laps the ring, so a
 * snapshot may keep no event at all (its copier starved while the ring went
 * round, every try: ring.c) - then all it recorded is counted overwritten -
 * but the snapshots together must have checked some labels. */
static atomic_bool marking;
static atomic_uint marks_made;

static void *mark_forever(void *arg)
{
    (void)arg;
    char label[48];
    for (unsigned i = 0; atomic_load(&marking); i++) {
        snprintf(label, sizeof label, "churn %u", i);
        vt_mark(label);
        atomic_store(&marks_made, i + 1);
    }
    return NULL;
}

TEST(snapshots_keep_the_labels_of_their_events_while_labels_churn)
{
    atomic_store(&marking, true);
    pthread_t t;
    ASSERT_OK(pthread_create(&t, NULL, mark_forever, NULL));
    unsigned last = 0;
    size_t labels_checked = 0;
    for (int n = 0; n < 12; n++) {
        /* let at least a generation's worth of labels go by */
        while (atomic_load(&marks_made) < last + GEN_STRINGS / 2)
            sched_yield();
        last = atomic_load(&marks_made);
        vt__snapshot_data *s = build();
        if (s->nevents == 0)
            ASSERT_EQ(s->meta.events_overwritten, s->meta.events_recorded);
        labels_checked += s->nevents;
        long prev = -1;
        for (size_t i = 0; i < s->nevents; i++) {
            const vt__event *e = &s->events[i];
            ASSERT_EQ(e->kind, VT_EV_MARK);
            unsigned k;
            const char *l = vt__snapshot_string(s, e->str);
            ASSERT_MSG(sscanf(l, "churn %u", &k) == 1, "event seq %" PRIu64 ": label '%s'",
                       e->seq, l);
            if (prev >= 0 && e->seq == s->events[i - 1].seq + 1)
                ASSERT_EQ(k, (unsigned long)prev + 1);
            prev = k;
        }
        vt__snapshot_free(s);
    }
    atomic_store(&marking, false);
    pthread_join(t, NULL);
    ASSERT_GT(labels_checked, 0);
    vt__strings_usage st;
    vt__strings_stats(&st);
    ASSERT_LE(st.event_generations, (RING + GEN_STRINGS - 1) / GEN_STRINGS + 2);
}

/* A process forked while a snapshot held the strings (as here, by hand)
 * has no snapshot running: it frees generations like any other. */
TEST(child_forked_during_a_snapshot_still_frees_labels)
{
    vt__strings_hold();
    pid_t pid = fork();
    ASSERT(pid >= 0);
    if (pid == 0) {
        char label[32];
        for (unsigned i = 0; i < 4 * GEN_STRINGS; i++) {
            snprintf(label, sizeof label, "child step %u", i);
            vt_mark(label);
        }
        vt__strings_usage st;
        vt__strings_stats(&st);
        _exit(st.event_generations <= (RING + GEN_STRINGS - 1) / GEN_STRINGS + 2 ? 0 : 3);
    }
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    vt__strings_release();
    ASSERT_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child: status 0x%x", status);
}

TEST_MAIN()
