/*
 * tests/trace/test_format_versions.c - the format's version rules: a newer
 * minor's unknown sections and trailing bytes skipped, each minor's
 * additions (true peaks, TENSOR_NAME, stacks_truncated, FIRST_LINES,
 * framework settings) round-tripped and absent from older files, and what
 * an older minor cannot hold rejected.
 */
#include "harness.h"
#include "test_format_gen.h"
#include "format_test_util.h"

/* What a reader of a file older than 1.12 sees of `s`: no free names its
 * block's allocation stack. */
static void without_1_12_fields(vt__snapshot_data *s)
{
    for (size_t i = 0; i < s->nevents; i++)
        if (s->events[i].kind == VT_EV_FREE_REQUESTED)
            s->events[i].aux2 = 0;
}

/* What a reader of a file older than 1.2 sees of `s`. */
static void without_1_2_fields(vt__snapshot_data *s)
{
    s->meta.flags = 0;
    for (size_t i = 0; i < s->ndevices; i++)
        s->devices[i].peak_allocated = s->devices[i].peak_reserved =
            s->devices[i].peak_active = 0;
    without_1_12_fields(s);
}

/* format.h, 1.12: a free names its block's allocation stack (aux2); in a
 * file of an older minor, whose frees' aux2 meant nothing, it is dropped. */
TEST(a_frees_allocation_stack_is_read_from_1_12_on)
{
    vt__snapshot_data *s = gen_small();
    ASSERT_EQ(s->events[0].kind, VT_EV_FREE_REQUESTED);
    ASSERT(s->events[0].aux2 != 0);
    struct raw_section secs[6];
    unpack_snapshot(s, secs);
    vt__snapshot_data *r = decode_repacked(secs, 6, 12);
    ASSERT_EQ(r->events[0].aux2, s->events[0].aux2);
    vt__snapshot_free(r);
    r = decode_repacked(secs, 6, 11);
    ASSERT_EQ(r->events[0].aux2, 0);
    r->meta.format_version = VT_FORMAT_VERSION;
    without_1_12_fields(s);
    same_snapshot(s, r);
    vt__snapshot_free(r);
    free_sections(secs, 6);
    vt__snapshot_free(s);
}

TEST(newer_minor_version_unknown_section_is_skipped)
{
    vt__snapshot_data *s = gen_small();
    struct raw_section secs[7];
    unpack_snapshot(s, secs);
    secs[6] = (struct raw_section){ 99, (unsigned char *)strdup("future stuff"), 12, 1 };
    /* trailing metadata bytes are future fields too */
    struct raw_section *m = by_id(secs, VT_SECTION_META);
    m->raw = realloc(m->raw, m->n + 3);
    memcpy(m->raw + m->n, "\x01\x02\x03", 3);
    m->n += 3;
    vt__snapshot_data *r = decode_repacked(secs, 7, VT_FORMAT_MINOR + 1);
    ASSERT_EQ(r->meta.format_version, (1u << 16) | (VT_FORMAT_MINOR + 1));
    r->meta.format_version = VT_FORMAT_VERSION;
    same_snapshot(s, r);
    vt__snapshot_free(r);
    free_sections(secs, 7);
    vt__snapshot_free(s);
}

TEST(format_1_1_file_reads_without_true_peaks)
{
    /* A 1.1 writer wrote META without the 1.2 flags and peaks: strip them
     * (they are META's last bytes) and label the file 1.1. */
    vt__snapshot_data *s = gen_small();
    ASSERT(s->meta.flags & VT_META_DEVICE_PEAKS);
    struct raw_section secs[6];
    unpack_snapshot(s, secs);
    struct raw_section *m = by_id(secs, VT_SECTION_META);
    vt__buf tail = { 0 };
    vt__put_varint(&tail, s->meta.flags);
    for (size_t i = 0; i < s->ndevices; i++) {
        vt__put_varint(&tail, s->devices[i].peak_allocated);
        vt__put_varint(&tail, s->devices[i].peak_reserved);
        vt__put_varint(&tail, s->devices[i].peak_active);
    }
    ASSERT(m->n > tail.n && memcmp(m->raw + m->n - tail.n, tail.p, tail.n) == 0);
    m->n -= tail.n;
    free(tail.p);
    vt__snapshot_data *r = decode_repacked(secs, 6, 1);
    ASSERT_EQ(r->meta.format_version, 0x10001u);
    ASSERT_EQ(r->meta.flags, 0);
    ASSERT_EQ(r->devices[0].peak_allocated, 0);
    ASSERT_EQ(r->nevents, s->nevents);
    ASSERT_EQ(r->nblocks, s->nblocks);
    vt__snapshot_free(r);
    free_sections(secs, 6);
    vt__snapshot_free(s);
}

/* A gen over an existing snapshot, to append to it. */
static struct snap_builder gen_reopen(vt__snapshot_data *s)
{
    return (struct snap_builder){ .s = s, .cap_blob = s->strings_blob_size, .cap_str = s->nstrings,
                         .cap_ev = s->nevents, .cap_node = s->nstack_nodes,
                         .cap_frame = s->nframes, .cap_seg = s->nsegments,
                         .cap_blk = s->nblocks, .cap_dev = s->ndevices };
}

/* gen_small() plus a TENSOR_NAME (format 1.1) of its tensor 7. */
static vt__snapshot_data *gen_small_renamed(void)
{
    vt__snapshot_data *s = gen_small();
    struct snap_builder g = gen_reopen(s);
    uint64_t t = s->events[s->nevents - 1].time_ns;
    vt__event *e = gen_ev(&g, VT_EV_TENSOR_NAME, 25, t + 5);
    e->aux = 7;
    e->str = gen_str(&g, "fc2 out");
    e->device = -1;
    return s;
}

TEST(tensor_name_round_trips_in_a_format_1_1_file)
{
    ASSERT_EQ(VT_FORMAT_MAJOR, 1);
    ASSERT_GE(VT_FORMAT_MINOR, 1);
    ASSERT_EQ(VT_EV_TENSOR_NAME, 25);
    ASSERT_EQ(vt__event_kind_minor(VT_EV_TENSOR_NAME), 1);
    ASSERT_EQ(vt__event_kind_minor(VT_EV_FINDING), 0);
    ASSERT_EQ(vt__event_kind_minor(VT_EV_KIND_COUNT), -1);
    ASSERT_EQ(vt__event_kind_minor(14), -1);
    ASSERT_EQ(vt__event_kind_minor(VT_EV_STREAM_DESTROY), 5);
    ASSERT_EQ(vt__event_kind_minor(VT_EV_EMPTY_CACHE), 5);
    vt__snapshot_data *s = gen_small_renamed();
    size_t size;
    unsigned char *data = encode(s, &size);
    ASSERT_EQ(vt__rd_le(data + 8, 2), 1);      /* written as the current 1.x */
    ASSERT_EQ(vt__rd_le(data + 10, 2), VT_FORMAT_MINOR);
    vt__snapshot_data *r = decode_ok(data, size);
    ASSERT_EQ(r->meta.format_version, (uint32_t)VT_FORMAT_VERSION);
    same_snapshot(s, r);
    const vt__event *e = &r->events[r->nevents - 1];
    ASSERT_EQ(e->kind, VT_EV_TENSOR_NAME);
    ASSERT_EQ(e->aux, 7);
    ASSERT_EQ(e->device, -1);
    ASSERT_STR_EQ(vt__snapshot_string(r, e->str), "fc2 out");
    vt__snapshot_free(r);

    /* a file of a newer minor holds it too */
    struct raw_section secs[6];
    unpack(data, secs);
    r = decode_repacked(secs, 6, VT_FORMAT_MINOR + 1);
    ASSERT_EQ(r->events[r->nevents - 1].kind, VT_EV_TENSOR_NAME);
    vt__snapshot_free(r);
    free_sections(secs, 6);
    free(data);
    vt__snapshot_free(s);
}

/* format.h: 1.2 appends stacks_truncated to META; a 1.1 file (no such
 * field) reads as 0, and a 1.1 reader skips it as trailing bytes. */
TEST(stacks_truncated_round_trips_and_is_zero_in_a_format_1_1_file)
{
    vt__snapshot_data *s = gen_small();
    s->meta.stacks_truncated = 5;
    vt__snapshot_data *r = round_trip(s);
    ASSERT_EQ(r->meta.stacks_truncated, 5);
    same_snapshot(s, r);
    vt__snapshot_free(r);
    vt__snapshot_free(s);

    /* The same bytes claiming 1.1: the field is trailing bytes to ignore. */
    s = gen_small();
    s->meta.stacks_truncated = 5;
    struct raw_section secs[6];
    unpack_snapshot(s, secs);
    r = decode_repacked(secs, 6, 1);
    ASSERT_EQ(r->meta.format_version, 0x10001u);
    ASSERT_EQ(r->meta.stacks_truncated, 0);
    ASSERT_EQ(r->meta.stacks_dropped, s->meta.stacks_dropped);
    ASSERT_EQ(r->nevents, s->nevents);
    vt__snapshot_free(r);
    free_sections(secs, 6);
    vt__snapshot_free(s);
}

/* gen_small() with two Python frames (ip 0, module "python"), as the
 * recorder writes them: where forward and backward are defined. */
static vt__snapshot_data *gen_small_with_first_lines(void)
{
    vt__snapshot_data *s = gen_small();
    ASSERT_GE(s->nframes, 3);
    for (size_t i = 1; i <= 2; i++) {
        s->frames[i].ip = s->frames[i].module_offset = 0;
        s->frames[i].first_line = 30 + (uint32_t)i;
    }
    return s;
}

/* gen_small_with_first_lines() and its file's seven sections, FIRST_LINES last. */
static vt__snapshot_data *first_lines_sections(struct raw_section secs[7])
{
    vt__snapshot_data *s = gen_small_with_first_lines();
    size_t size;
    unsigned char *data = encode(s, &size);
    ASSERT_EQ(unpack_all(data, secs, 7), 7);
    ASSERT_EQ(secs[6].id, VT_SECTION_FIRST_LINES);
    free(data);
    return s;
}

/* s encoded: a file of `nsections` sections, `id` among them (0: none looked
 * for; find_section fails the test when it is not there). @return the file,
 * its size in *size. */
static unsigned char *encode_sections(const vt__snapshot_data *s, uint64_t nsections, uint32_t id,
                                      size_t *size)
{
    unsigned char *data = encode(s, size);
    ASSERT_EQ(vt__rd_le(data + 32, 4), nsections);
    if (id) {
        uint64_t off, len;
        find_section(data, id, &off, &len);
    }
    return data;
}

/* format.h, 1.4: FIRST_LINES holds each frame's first line; a writer leaves
 * it out when no frame has one (the file is then a 1.3 writer's, bar the
 * version). */
TEST(first_lines_round_trip_and_are_left_out_when_none)
{
    vt__snapshot_data *s = gen_small_with_first_lines();
    size_t size;
    unsigned char *data = encode_sections(s, 7, VT_SECTION_FIRST_LINES, &size);
    vt__snapshot_data *r = decode_ok(data, size);
    ASSERT_EQ(r->frames[1].first_line, 31);
    ASSERT_EQ(r->frames[2].first_line, 32);
    ASSERT_EQ(r->frames[0].first_line, 0);
    same_snapshot(s, r);
    vt__snapshot_free(r);
    free(data);
    vt__snapshot_free(s);

    s = gen_small();
    data = encode_sections(s, 6, 0, &size);
    r = decode_ok(data, size);
    for (size_t i = 0; i < r->nframes; i++)
        ASSERT_EQ(r->frames[i].first_line, 0);
    same_snapshot(s, r);
    vt__snapshot_free(r);
    free(data);
    vt__snapshot_free(s);
}

/* format.h, 1.8: FRAME_FLAGS holds what the recording machine knew of each
 * frame (VT_FRAME_INSTALLED); a writer leaves it out when every frame's
 * flags are 0, and a file claiming 1.7 has it ignored, as a 1.7 reader
 * ignores it. Views take a flagged frame for library code. */
static vt__snapshot_data *gen_python_frames(void)
{
    struct snap_builder g = gen_begin();
    uint32_t user = gen_frame(&g, 0, "python", "step", "/home/u/train.py", 12);
    uint32_t lib = gen_frame(&g, 0, "python", "forward", "/opt/pylibs/transformers/bert.py", 88);
    uint32_t native = gen_frame(&g, 0x400100, "/usr/bin/python3", "main", "main.c", 10);
    gen_node(&g, gen_node(&g, gen_node(&g, 0, native), user), lib);
    vt__event *e = gen_ev(&g, VT_EV_MARK, 1, 100);
    e->str = gen_str(&g, "step 1");
    g.s->frames[0].first_line = 0;
    g.s->frames[1].first_line = 80;   /* so FIRST_LINES is written too */
    return g.s;
}

TEST(frame_flags_round_trip_are_left_out_when_none_and_mark_library_code)
{
    vt__snapshot_data *s = gen_python_frames();
    ASSERT(vt__frame_is_user_code(s, &s->frames[0]));
    ASSERT(vt__frame_is_user_code(s, &s->frames[1]));   /* by its path alone */
    ASSERT(!vt__frame_is_user_code(s, &s->frames[2]));
    s->frames[1].flags = VT_FRAME_INSTALLED | (1u << 20);   /* and a bit of a later minor */
    ASSERT(!vt__frame_is_user_code(s, &s->frames[1]));

    size_t size;
    unsigned char *data = encode_sections(s, 8, VT_SECTION_FRAME_FLAGS, &size);
    vt__snapshot_data *r = decode_ok(data, size);
    ASSERT_EQ(r->frames[1].flags, VT_FRAME_INSTALLED | (1u << 20));
    ASSERT_EQ(r->frames[0].flags, 0);
    ASSERT(!vt__frame_is_user_code(r, &r->frames[1]));
    ASSERT(vt__frame_is_user_code(r, &r->frames[0]));
    same_snapshot(s, r);
    vt__snapshot_free(r);

    /* claimed 1.7: the section is skipped, the frame is taken by its path */
    struct raw_section secs[8];
    ASSERT_EQ(unpack_all(data, secs, 8), 8);
    ASSERT_EQ(secs[7].id, VT_SECTION_FRAME_FLAGS);
    r = decode_repacked(secs, 8, 7);
    ASSERT_EQ(r->frames[1].flags, 0);
    ASSERT(vt__frame_is_user_code(r, &r->frames[1]));
    vt__snapshot_free(r);

    /* a count that is not the frames', and bytes left over: refused */
    secs[7].count--;
    expect_repacked_reject(secs, 8, VT_FORMAT_MINOR, "section 'frame flags'");
    ASSERT_STR_CONTAINS(err, "frame flags for");
    secs[7].count++;
    secs[7].raw = realloc(secs[7].raw, secs[7].n + 1);
    secs[7].raw[secs[7].n++] = 0;
    expect_repacked_reject(secs, 8, VT_FORMAT_MINOR, "after the last frame's flags");
    free_sections(secs, 8);
    free(data);

    s->frames[1].flags = 0;
    data = encode_sections(s, 7, 0, &size);   /* FIRST_LINES only */
    free(data);
    vt__snapshot_free(s);
}

TEST(framework_settings_round_trip_in_meta)
{
    vt__snapshot_data *s = gen_small();
    s->meta.flags |= VT_META_FRAMEWORK_SETTINGS;
    s->meta.framework_settings = s->meta.host;     /* any string of the table */
    vt__snapshot_data *r = round_trip(s);
    ASSERT(r->meta.flags & VT_META_FRAMEWORK_SETTINGS);
    ASSERT_STR_EQ(vt__snapshot_string(r, r->meta.framework_settings),
                  vt__snapshot_string(s, s->meta.host));
    vt__snapshot_free(r);
    vt__snapshot_free(s);
}

/* A 1.3 file (no FIRST_LINES) reads whole, every first line 0; and a
 * FIRST_LINES section in a file claiming 1.3 is ignored, as a 1.3 reader
 * ignores it (it never knew the section). */
TEST(format_1_3_file_reads_with_no_first_lines)
{
    struct raw_section secs[7];
    vt__snapshot_data *s = first_lines_sections(secs);
    for (size_t with = 6; with <= 7; with++) {
        vt__snapshot_data *r = decode_repacked(secs, with, 3);
        ASSERT_EQ(r->meta.format_version, 0x10003u);
        ASSERT_EQ(r->nframes, s->nframes);
        for (size_t i = 0; i < r->nframes; i++) {
            ASSERT_EQ(r->frames[i].first_line, 0);
            ASSERT_EQ(r->frames[i].line, s->frames[i].line);
            ASSERT_EQ(r->frames[i].function, s->frames[i].function);
        }
        ASSERT_EQ(r->nevents, s->nevents);
        ASSERT_EQ(r->nstack_nodes, s->nstack_nodes);
        vt__snapshot_free(r);
    }
    free_sections(secs, 7);
    vt__snapshot_free(s);
}

TEST(bad_first_lines_are_rejected_naming_the_section)
{
    struct raw_section secs[7];
    vt__snapshot_data *s = first_lines_sections(secs);
    struct raw_section *fl = &secs[6];
    /* a count that is not the frames' */
    fl->count--;
    expect_repacked_reject(secs, 7, VT_FORMAT_MINOR, "section 'first lines'");
    ASSERT_STR_CONTAINS(err, "first lines for");
    fl->count++;
    /* a first line beyond 2^31 - 1: the last frame's varint made 2^31 */
    ASSERT_EQ(fl->raw[fl->n - 1], 0);
    fl->raw = realloc(fl->raw, fl->n + 4);
    memcpy(fl->raw + fl->n - 1, "\x80\x80\x80\x80\x08", 5);
    fl->n += 4;
    expect_repacked_reject(secs, 7, VT_FORMAT_MINOR, "section 'first lines'");
    ASSERT_STR_CONTAINS(err, "out of range");
    /* bytes left over */
    memcpy(fl->raw + fl->n - 5, "\x00\x01\x02\x03\x04", 5);
    expect_repacked_reject(secs, 7, VT_FORMAT_MINOR, "after the last first line");
    free_sections(secs, 7);
    /* the writer refuses what the reader would */
    s->frames[1].first_line = (uint32_t)INT32_MAX + 1;
    void *out;
    size_t size;
    ASSERT(vt__snapfile_encode(s, &out, &size, err, sizeof err) < 0);
    ASSERT_STR_CONTAINS(err, "first line");
    vt__snapshot_free(s);
}

/* format.h: a kind belongs to the minor that introduced it; a 1.0 file
 * cannot hold TENSOR_NAME (a 1.0 reader would reject it as unknown in a file
 * of its own minor, and so does this one). */
TEST(tensor_name_in_a_file_claiming_format_1_0_is_rejected)
{
    vt__snapshot_data *s = gen_small_renamed();
    struct raw_section secs[6];
    unpack_snapshot(s, secs);
    expect_repacked_reject(secs, 6, 0, "section 'events'");
    ASSERT_STR_CONTAINS(err, "event 15 has kind 25, which format 1.1 introduced, in a file "
                             "of format 1.0");
    /* the same bytes as 1.1 are fine: only the claimed version changed (a
     * 1.1 file has no META flags and true peaks: those bytes are skipped) */
    vt__snapshot_data *r = decode_repacked(secs, 6, 1);
    ASSERT_EQ(r->meta.format_version, 0x10001u);
    r->meta.format_version = VT_FORMAT_VERSION;
    without_1_2_fields(s);
    same_snapshot(s, r);
    vt__snapshot_free(r);
    /* and a 1.0 file without it is still read (as 1.0) */
    vt__snapshot_free(s);
    s = gen_small();
    free_sections(secs, 6);
    unpack_snapshot(s, secs);
    r = decode_repacked(secs, 6, 0);
    ASSERT_EQ(r->meta.format_version, 0x10000u);
    r->meta.format_version = VT_FORMAT_VERSION;
    without_1_2_fields(s);
    same_snapshot(s, r);
    vt__snapshot_free(r);
    free_sections(secs, 6);
    vt__snapshot_free(s);
}

/* format.h, 1.10: an observed framework allocator's segments (pools
 * VT_POOL_FRAMEWORK_* in memory) travel in FRAMEWORK_STATE, as SMALL and
 * LARGE, after STATE's own; STATE keeps only the others, so an older
 * reader, which skips the section, reads what it read before; a file
 * claiming 1.9 has no such section (skipped, as a 1.9 reader does). */
TEST(framework_state_round_trips_in_a_section_an_older_file_cannot_have)
{
    vt__snapshot_data *s = gen_small();
    size_t own = s->nsegments, own_blocks = s->nblocks;
    struct snap_builder g = gen_reopen(s);
    gen_segment(&g, 0x7000000000, 0x200000, 0, VT_POOL_FRAMEWORK_SMALL, 0);
    gen_block(&g, 0x1000, 4000, 0, 2, 1, VT_BLOCK_ACTIVE_ALLOCATED);
    gen_block(&g, 0x1000, 4096, 0, 3, 1, VT_BLOCK_ACTIVE_PENDING_FREE);
    gen_block(&g, 0x1fe000, 0, 0, 0, 0, VT_BLOCK_INACTIVE);
    gen_segment(&g, 0x7000400000, 0x1400000, 0, VT_POOL_FRAMEWORK_LARGE, 0);
    gen_block(&g, 0x1400000, 0x1400000, 0, 0, 1, VT_BLOCK_ACTIVE_ALLOCATED);
    size_t size;
    unsigned char *data = encode(s, &size);
    vt__snapshot_data *r = decode_ok(data, size);
    same_snapshot(s, r);
    ASSERT_EQ(r->nsegments, own + 2);
    ASSERT_EQ(r->segments[own].pool, VT_POOL_FRAMEWORK_SMALL);
    ASSERT_EQ(r->segments[own + 1].pool, VT_POOL_FRAMEWORK_LARGE);
    ASSERT(vt__pool_is_framework(r->segments[own].pool));
    ASSERT_EQ(vt__pool_kind(r->segments[own + 1].pool), VT_POOL_LARGE);
    vt__snapshot_free(r);

    struct raw_section secs[7];
    ASSERT_EQ(unpack_all(data, secs, 7), 7);
    int state = -1, framework = -1;
    for (int i = 0; i < 7; i++) {
        state = secs[i].id == VT_SECTION_STATE ? i : state;
        framework = secs[i].id == VT_SECTION_FRAMEWORK_STATE ? i : framework;
    }
    ASSERT(state >= 0 && framework >= 0);
    ASSERT_EQ(secs[state].count, own);
    ASSERT_EQ(secs[framework].count, 2);
    /* labelled 1.9: the section is not of its version, left out */
    vt__snapshot_data *old = decode_repacked(secs, 7, 9);
    ASSERT_EQ(old->nsegments, own);
    ASSERT_EQ(old->nblocks, own_blocks);
    for (size_t i = 0; i < old->nsegments; i++)
        ASSERT(!vt__pool_is_framework(old->segments[i].pool));
    vt__snapshot_free(old);
    /* a framework segment of a pool the section cannot hold is refused:
     * its first segment's pool byte follows six varints (nsegments,
     * nblocks, addr, size, stream, device) */
    size_t at = 0;
    for (int v = 0; v < 6; v++)
        while (secs[framework].raw[at++] & 0x80)
            ;
    ASSERT_EQ(secs[framework].raw[at], VT_POOL_SMALL);
    secs[framework].raw[at] = VT_POOL_UNCACHED;
    expect_repacked_reject(secs, 7, VT_FORMAT_MINOR, "section 'framework state'");
    ASSERT_STR_CONTAINS(err, "unknown pool 2");
    free_sections(secs, 7);
    free(data);
    vt__snapshot_free(s);
}

/* format.h, 1.14: the private pools of the states' segments (a CUDA graph's)
 * travel in SEGMENT_POOLS, numbered STATE's then FRAMEWORK_STATE's; a file
 * claiming 1.13 has no such section (skipped: every segment the default
 * pool's), and an entry naming no segment, a repeated one, or pool 0 is
 * refused. */
TEST(segment_pools_round_trip_in_a_section_an_older_file_cannot_have)
{
    vt__snapshot_data *s = gen_small();
    size_t own = s->nsegments;
    ASSERT(own >= 2);
    s->segments[1].private_pool = 3;
    struct snap_builder g = gen_reopen(s);
    gen_segment(&g, 0x7000000000, 0x200000, 0, VT_POOL_FRAMEWORK_SMALL, 0);
    gen_block(&g, 0x200000, 0, 0, 0, 0, VT_BLOCK_INACTIVE);
    gen_segment(&g, 0x7000400000, 0x1400000, 0, VT_POOL_FRAMEWORK_LARGE, 0);
    gen_block(&g, 0x1400000, 0x1400000, 0, 0, 1, VT_BLOCK_ACTIVE_ALLOCATED);
    s->segments[own + 1].private_pool = (1ull << 55) + 2;   /* as large as an id gets */
    size_t size;
    unsigned char *data = encode(s, &size);
    vt__snapshot_data *r = decode_ok(data, size);
    same_snapshot(s, r);
    ASSERT_EQ(r->segments[1].private_pool, 3);
    ASSERT_EQ(r->segments[own].private_pool, 0);
    ASSERT_EQ(r->segments[own + 1].private_pool, (1ull << 55) + 2);
    vt__snapshot_free(r);

    struct raw_section secs[8];
    ASSERT_EQ(unpack_all(data, secs, 8), 8);
    int pools = -1;
    for (int i = 0; i < 8; i++)
        pools = secs[i].id == VT_SECTION_SEGMENT_POOLS ? i : pools;
    ASSERT(pools >= 0);
    ASSERT_EQ(secs[pools].count, 2);
    /* entries: segment 1 (+1), then the framework's second (own + 1) */
    ASSERT_EQ(secs[pools].raw[0], 1);
    ASSERT_EQ(secs[pools].raw[1], 3);
    ASSERT_EQ(secs[pools].raw[2], own);
    vt__snapshot_data *old = decode_repacked(secs, 8, 13);
    for (size_t i = 0; i < old->nsegments; i++)
        ASSERT_EQ(old->segments[i].private_pool, 0);
    vt__snapshot_free(old);
    secs[pools].raw[1] = 0;
    expect_repacked_reject(secs, 8, VT_FORMAT_MINOR, "pool id 0");
    secs[pools].raw[1] = 3;
    secs[pools].raw[2] = 0;   /* segment 1 again */
    expect_repacked_reject(secs, 8, VT_FORMAT_MINOR, "section 'segment pools'");
    secs[pools].raw[2] = (unsigned char)(own + 1);   /* past the last segment */
    expect_repacked_reject(secs, 8, VT_FORMAT_MINOR, "names segment");
    free_sections(secs, 8);
    free(data);
    vt__snapshot_free(s);
}

TEST_MAIN()

/* format.h, 1.9: PAUSE (26), the recording tool's own pause of the program
 * (aux its length): it round-trips, and a file claiming 1.8 cannot hold it. */
TEST(pause_round_trips_and_a_format_1_8_file_cannot_hold_it)
{
    ASSERT_EQ(VT_EV_PAUSE, 26);
    ASSERT_EQ(vt__event_kind_minor(VT_EV_PAUSE), 9);
    vt__snapshot_data *s = gen_small();
    struct snap_builder g = gen_reopen(s);
    const vt__event *last = &s->events[s->nevents - 1];
    vt__event *e = gen_ev(&g, VT_EV_PAUSE, last->seq + 1, last->time_ns + 300000000);
    e->aux = 250000000;
    e->device = -1;
    size_t size;
    unsigned char *data = encode(s, &size);
    vt__snapshot_data *r = decode_ok(data, size);
    same_snapshot(s, r);
    ASSERT_EQ(r->events[r->nevents - 1].kind, VT_EV_PAUSE);
    ASSERT_EQ(r->events[r->nevents - 1].aux, 250000000);
    vt__snapshot_free(r);
    struct raw_section secs[6];
    unpack(data, secs);
    expect_repacked_reject(secs, 6, 8, "section 'events'");
    ASSERT_STR_CONTAINS(err, "has kind 26, which format 1.9 introduced, in a file of format 1.8");
    free_sections(secs, 6);
    free(data);
    vt__snapshot_free(s);
}
