/*
 * tests/trace/test_annot.c - the annotation API records the right events.
 */
#include "rec_snap.h"
#include "vramtrace.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../harness.h"

static vt__snapshot_data *build(void)
{
    vt__snapshot_data *s = NULL;
    ASSERT_OK(vt__snapshot_build(&s));
    return s;
}

static const char *str(const vt__snapshot_data *s, uint32_t i) { return vt__snapshot_string(s, i); }

TEST(annotations_record_their_fields)
{
    static char storage[4096];
    uint64_t t1 = vt_tensor_new(storage, 4096, 0, "weight");
    uint64_t t2 = vt_tensor_new(storage + 1024, 512, t1, "weight.view");
    uint64_t h = vt_holder_new("optimizer");
    ASSERT_NE(t1, 0);
    ASSERT_NE(t2, 0);
    ASSERT_NE(h, 0);
    ASSERT_NE(t1, t2);
    ASSERT_NE(h, t1);
    ASSERT_NE(h, t2);
    vt_tensor_use(t2);
    ASSERT_OK(vt_ref(h, t1, "exp_avg"));
    ASSERT_OK(vt_unref(h, t1));
    vt_tensor_drop(t2);
    ASSERT_OK(vt_storage_external((void *)0xdead0000, 1 << 20, 2));
    ASSERT_OK(vt_storage_external_free((void *)0xdead0000));

    vt__snapshot_data *s = build();
    ASSERT_EQ(s->nevents, 9);
    const vt__event *e = s->events;
    ASSERT_EQ(e[0].kind, VT_EV_TENSOR_NEW);
    ASSERT_EQ(e[0].aux, t1);
    ASSERT_EQ(e[0].aux2, 0);
    ASSERT_EQ(e[0].addr, (uintptr_t)storage);
    ASSERT_EQ(e[0].size, 4096);
    ASSERT_STR_EQ(str(s, e[0].str), "weight");
    ASSERT_NE(e[0].stack, 0);
    ASSERT_EQ(e[1].kind, VT_EV_TENSOR_NEW);
    ASSERT_EQ(e[1].aux, t2);
    ASSERT_EQ(e[1].aux2, t1);
    ASSERT_EQ(e[1].addr, (uintptr_t)storage + 1024);
    ASSERT_EQ(e[1].size, 512);
    ASSERT_STR_EQ(str(s, e[1].str), "weight.view");
    ASSERT_EQ(e[2].kind, VT_EV_HOLDER_NEW);
    ASSERT_EQ(e[2].aux, h);
    ASSERT_STR_EQ(str(s, e[2].str), "optimizer");
    ASSERT_EQ(e[2].stack, 0);                   /* nothing reads a holder's stack */
    ASSERT_EQ(e[3].kind, VT_EV_TENSOR_USE);
    ASSERT_EQ(e[3].aux, t2);
    ASSERT_NE(e[3].stack, 0);
    const vt__frame *f[8];
    ASSERT_GE(vt__snapshot_stack_frames(s, e[3].stack, f, 8), 1);
    /* Our own frames (vt_tensor_use, the capture) are not in the stack. */
    ASSERT_STR_EQ(str(s, f[0]->function), "test_annotations_record_their_fields");
    ASSERT_EQ(e[4].kind, VT_EV_REF);
    ASSERT_EQ(e[4].aux, h);
    ASSERT_EQ(e[4].aux2, t1);
    ASSERT_STR_EQ(str(s, e[4].str), "exp_avg");
    ASSERT_EQ(e[5].kind, VT_EV_UNREF);
    ASSERT_EQ(e[5].aux, h);
    ASSERT_EQ(e[5].aux2, t1);
    ASSERT_EQ(e[6].kind, VT_EV_TENSOR_DROP);
    ASSERT_EQ(e[6].aux, t2);
    ASSERT_EQ(e[6].stack, 0);                   /* nor a drop's */
    ASSERT_EQ(e[7].kind, VT_EV_STORAGE_EXTERNAL);
    ASSERT_EQ(e[7].addr, 0xdead0000);
    ASSERT_EQ(e[7].size, 1 << 20);
    ASSERT_EQ(e[7].device, 2);
    ASSERT_NE(e[7].stack, 0);
    ASSERT_EQ(e[8].kind, VT_EV_STORAGE_EXTERNAL_FREE);
    ASSERT_EQ(e[8].addr, 0xdead0000);
    for (int i = 1; i < 9; i++) {
        ASSERT_EQ(e[i].seq, e[i - 1].seq + 1);
        ASSERT_GE(e[i].time_ns, e[i - 1].time_ns);
        ASSERT_EQ(e[i].thread, e[0].thread);
    }
    vt__snapshot_free(s);
}

TEST(bad_arguments_are_rejected)
{
    ASSERT_EQ(vt_ref(0, 1, "x"), -EINVAL);
    ASSERT_EQ(vt_ref(1, 0, "x"), -EINVAL);
    ASSERT_EQ(vt_unref(0, 1), -EINVAL);
    ASSERT_EQ(vt_storage_external(NULL, 1, 0), -EINVAL);
    ASSERT_EQ(vt_storage_external_free(NULL), -EINVAL);
    ASSERT_EQ(vt_storage_external_stack(NULL, 1, 0, 0), -EINVAL);
    ASSERT_EQ(vt_storage_external_free_stack(NULL, 0), -EINVAL);
    ASSERT_EQ(vt_tensor_name(0, "x"), -EINVAL);
    ASSERT_EQ(vt_tensor_name(1, NULL), -EINVAL);
    vt_tensor_use(0);
    vt_tensor_drop(0);
    vt_tensor_use_stack(0, 1);
    ASSERT_EQ(vt_stack_intern_frames(NULL, 3), 0);
    vt__snapshot_data *s = build();
    ASSERT_EQ(s->nevents, 0);
    vt__snapshot_free(s);
}

TEST(python_frames_become_synthetic_stack_frames)
{
    const char *frames[] = { "model.py:42 forward", "train.py:7 <module>", "no_location" };
    uint32_t st = vt_stack_intern_frames(frames, 3);
    ASSERT_NE(st, 0);
    ASSERT_EQ(vt_stack_intern_frames(frames, 3), st);
    const char *outer[] = { "train.py:7 <module>", "no_location" };
    uint32_t st2 = vt_stack_intern_frames(outer, 2);
    uint32_t parent;
    uint64_t ip;
    ASSERT_OK(vt__stacks_node(st, &parent, &ip));
    ASSERT_EQ(parent, st2);                     /* prefix shared */
    ASSERT_OK(vt_storage_external_stack((void *)0x1000, 64, -1, st2));
    uint64_t t0 = vt_tensor_new_stack((void *)0x1000, 16, 0, "x", st);
    uint64_t t1 = vt_tensor_new_stack((void *)0x1010, 16, t0, NULL, 0);
    ASSERT_NE(t0, 0);
    ASSERT_NE(t1, 0);
    ASSERT_NE(t0, t1);
    ASSERT_OK(vt_storage_external_free_stack((void *)0x1000, st2));
    uint64_t t = vt_tensor_new((void *)0x1000, 16, 0, NULL);
    vt_tensor_use_stack(t, st);

    vt__snapshot_data *s = build();
    ASSERT_EQ(s->nevents, 6);
    const vt__event *e = s->events;
    ASSERT_EQ(e[0].kind, VT_EV_STORAGE_EXTERNAL);
    ASSERT_EQ(e[0].addr, 0x1000);
    ASSERT_EQ(e[0].size, 64);
    ASSERT_EQ(e[0].device, -1);
    ASSERT_EQ(e[0].stack, st2);
    ASSERT_EQ(e[1].kind, VT_EV_TENSOR_NEW);
    ASSERT_EQ(e[1].aux, t0);
    ASSERT_EQ(e[1].aux2, 0);
    ASSERT_EQ(e[1].addr, 0x1000);
    ASSERT_EQ(e[1].size, 16);
    ASSERT_STR_EQ(str(s, e[1].str), "x");
    ASSERT_EQ(e[1].stack, st);
    ASSERT_EQ(e[2].kind, VT_EV_TENSOR_NEW);
    ASSERT_EQ(e[2].aux, t1);
    ASSERT_EQ(e[2].aux2, t0);
    ASSERT_EQ(e[2].str, 0);
    ASSERT_EQ(e[2].stack, 0);                   /* 0: no stack, none captured */
    ASSERT_EQ(e[3].kind, VT_EV_STORAGE_EXTERNAL_FREE);
    ASSERT_EQ(e[3].addr, 0x1000);
    ASSERT_EQ(e[3].stack, st2);
    e = &s->events[s->nevents - 1];
    ASSERT_EQ(e->kind, VT_EV_TENSOR_USE);
    ASSERT_EQ(e->aux, t);
    ASSERT_EQ(e->stack, st);
    const vt__frame *f[8];
    ASSERT_EQ(vt__snapshot_stack_frames(s, e->stack, f, 8), 3);
    ASSERT_EQ(f[0]->ip, 0);
    ASSERT_STR_EQ(str(s, f[0]->module), "python");
    ASSERT_STR_EQ(str(s, f[0]->file), "model.py");
    ASSERT_EQ(f[0]->line, 42);
    ASSERT_STR_EQ(str(s, f[0]->function), "forward");
    ASSERT_STR_EQ(str(s, f[1]->file), "train.py");
    ASSERT_EQ(f[1]->line, 7);
    ASSERT_STR_EQ(str(s, f[1]->function), "<module>");
    ASSERT_STR_EQ(str(s, f[2]->function), "no_location");
    ASSERT_EQ(f[2]->file, 0);
    ASSERT_EQ(f[2]->line, 0);
    vt__snapshot_free(s);
}

/* The IPs of stack `id`, outermost first; how many. */
static size_t outer_first(uint32_t id, uint64_t *ips, size_t max)
{
    uint64_t inner[512];
    size_t n = 0;
    while (id && n < 512) {
        uint32_t parent;
        if (vt__stacks_node(id, &parent, &inner[n]) != 0)
            break;
        n++;
        id = parent;
    }
    for (size_t i = 0; i < n && i < max; i++)
        ips[i] = inner[n - 1 - i];
    return n < max ? n : max;
}

static __attribute__((noipa)) uint32_t stack_here(void)
{
    return vt__stack_capture();
}

/* The stack recorded here with `lent` lent to the thread (0: none). */
static __attribute__((noipa)) uint32_t captured_lending(uint32_t lent)
{
    vt_thread_python_stack(lent);
    uint32_t st = stack_here();
    vt_thread_python_stack(0);
    return st;
}

/* Write `text` to dir/rel, making the folders on the way. */
static void put_file(const char *dir, const char *rel, const char *text)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, rel);
    for (char *p = path + strlen(dir) + 1; (p = strchr(p, '/')); p++) {
        *p = '\0';
        ASSERT(mkdir(path, 0700) == 0 || errno == EEXIST);
        *p = '/';
    }
    FILE *f = fopen(path, "w");
    ASSERT(f);
    fputs(text, f);
    fclose(f);
}

/* The frame of `stack`'s innermost frame in snapshot s. */
static const vt__frame *innermost(const vt__snapshot_data *s, uint32_t stack)
{
    const vt__frame *f[4];
    ASSERT_GE(vt__snapshot_stack_frames(s, stack, f, 4), 1);
    return f[0];
}

/* `pip install --target DIR` (or a PYTHONPATH entry of installed packages)
 * puts a library where the path rule sees the program's own code: the
 * recorder tells it by the *.dist-info beside it whose RECORD lists the
 * package, flags its frames VT_FRAME_INSTALLED, and vt_source_is_programs
 * says no. The program's own files stay its own: beside a --target install
 * in its own folder (`pip install -t .`), under a development install's
 * .egg-info, and a relative path is taken against the working directory. */
TEST(installed_packages_outside_site_packages_are_library_code)
{
    char root[] = "/tmp/vt-installed-XXXXXX";
    ASSERT(mkdtemp(root));
    /* /tmp/.../libs: pip install --target libs transformers six */
    put_file(root, "libs/transformers/__init__.py", "");
    put_file(root, "libs/transformers/models/bert.py", "");
    put_file(root, "libs/six.py", "");
    put_file(root, "libs/transformers-4.46.3.dist-info/RECORD",
             "transformers/__init__.py,sha256=abc,10\n"
             "transformers/models/bert.py,sha256=def,20\n"
             "transformers-4.46.3.dist-info/RECORD,,\n"
             "../../bin/transformers-cli,sha256=x,1\n");
    put_file(root, "libs/six-1.16.0.dist-info/RECORD",
             "six.py,sha256=abc,10\r\n__pycache__/six.cpython-311.pyc,,\r\n");
    /* /tmp/.../proj: the user's project, `pip install -t . requests` in it,
     * and a development install's egg-info */
    put_file(root, "proj/train.py", "");
    put_file(root, "proj/model/net.py", "");
    put_file(root, "proj/requests/api.py", "");
    put_file(root, "proj/requests-2.32.0.dist-info/RECORD", "\"requests/api.py\",sha256=a,1\n");
    put_file(root, "proj/proj.egg-info/top_level.txt", "model\n");

    char bert[4200], six[4200], train[4200], net[4200], req[4200], missing[4200];
    snprintf(bert, sizeof bert, "%s/libs/transformers/models/bert.py", root);
    snprintf(six, sizeof six, "%s/libs/six.py", root);
    snprintf(train, sizeof train, "%s/proj/train.py", root);
    snprintf(net, sizeof net, "%s/proj/model/net.py", root);
    snprintf(req, sizeof req, "%s/proj/requests/api.py", root);
    snprintf(missing, sizeof missing, "%s/libs/other/x.py", root);
    ASSERT_EQ(vt_source_is_programs(bert), 0);
    ASSERT_EQ(vt_source_is_programs(six), 0);
    ASSERT_EQ(vt_source_is_programs(req), 0);
    ASSERT_EQ(vt_source_is_programs(train), 1);
    ASSERT_EQ(vt_source_is_programs(net), 1);
    ASSERT_EQ(vt_source_is_programs(missing), 1);   /* no distribution lists it */
    ASSERT_EQ(vt_source_is_programs("<string>"), 1);
    char cwd[4096];
    ASSERT(getcwd(cwd, sizeof cwd));
    char libs[4200];
    snprintf(libs, sizeof libs, "%s/libs", root);
    ASSERT_OK(chdir(libs));
    ASSERT_EQ(vt_source_is_programs("transformers/__init__.py"), 0);
    ASSERT_EQ(vt_source_is_programs("other/x.py"), 1);
    ASSERT_OK(chdir(cwd));

    /* The snapshot carries the answer per frame, and the views read it. */
    char lib_frame[4300], user_frame[4300];
    snprintf(lib_frame, sizeof lib_frame, "%s:88 forward", bert);
    snprintf(user_frame, sizeof user_frame, "%s:12 step", train);
    const char *frames[] = { lib_frame, user_frame };
    uint32_t st = vt_stack_intern_frames(frames, 2);
    ASSERT_NE(st, 0);
    uint64_t t = vt_tensor_new_stack((void *)0x2000, 16, 0, "logits", st);
    ASSERT_NE(t, 0);
    vt__snapshot_data *s = build();
    const vt__frame *lib = innermost(s, s->events[s->nevents - 1].stack);
    ASSERT_STR_EQ(str(s, lib->file), bert);
    ASSERT_EQ(lib->flags, VT_FRAME_INSTALLED);
    ASSERT(!vt__frame_is_user_code(s, lib));
    uint32_t parent;
    uint64_t ip;
    ASSERT_OK(vt__stacks_node(st, &parent, &ip));
    const vt__frame *user = innermost(s, parent);
    ASSERT_STR_EQ(str(s, user->file), train);
    ASSERT_EQ(user->flags, 0);
    ASSERT(vt__frame_is_user_code(s, user));
    vt__snapshot_free(s);

    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    ASSERT_EQ(system(cmd), 0);
}

/* A thread lent frames (vt_thread_python_stack) records its native frames
 * with the lent ones outside them; lending 0 stops. */
TEST(frames_lent_to_a_thread_go_outside_its_native_frames)
{
    const char *frames[] = { "forward of main train.py:12", "train.py:30 <module>" };
    uint32_t lent = vt_stack_intern_frames(frames, 2);
    ASSERT_NE(lent, 0);
    uint64_t want[2], with_ips[512], alone_ips[512], after_ips[512];
    ASSERT_EQ(outer_first(lent, want, 2), 2);
    /* the first captures settle how deep the recorder unwinds past its own
     * frames: they see less */
    for (int i = 0; i < 4; i++)
        captured_lending(0);
    uint32_t before = captured_lending(0), with = captured_lending(lent);
    uint32_t after = captured_lending(0);
    ASSERT_NE(before, 0);
    ASSERT_NE(with, before);
    size_t n = outer_first(with, with_ips, 512), nalone = outer_first(before, alone_ips, 512);
    ASSERT_EQ(outer_first(after, after_ips, 512), nalone);
    ASSERT_EQ(n, nalone + 2);
    ASSERT_EQ(with_ips[0], want[0]);   /* the lent frames outermost, */
    ASSERT_EQ(with_ips[1], want[1]);
    for (size_t i = 2; i < n; i++)     /* then native frames only */
        ASSERT((with_ips[i] & VT_IP_SYNTHETIC) == 0);
    /* the innermost (captured_lending's call) as without lending */
    ASSERT_EQ(with_ips[n - 1], alone_ips[nalone - 1]);
    for (size_t i = 0; i < nalone; i++)   /* and stopped: native frames only */
        ASSERT((after_ips[i] & VT_IP_SYNTHETIC) == 0);
}

/* The calls an interpreter makes per op unwind nothing: a capture from this
 * call site would add new leaf nodes to the stack tree. */
TEST(stack_variants_drops_and_holders_unwind_nothing)
{
    const char *frames[] = { "step.py:3 step" };
    uint32_t st = vt_stack_intern_frames(frames, 1);
    ASSERT_NE(st, 0);
    uint32_t before = vt__stacks_count();
    ASSERT_OK(vt_storage_external_stack((void *)0x2000, 32, 0, st));
    uint64_t t = vt_tensor_new_stack((void *)0x2000, 32, 0, "y", st);
    vt_tensor_use_stack(t, st);
    uint64_t h = vt_holder_new("cache");
    ASSERT_OK(vt_ref(h, t, "[0]"));
    ASSERT_OK(vt_unref(h, t));
    vt_tensor_drop(t);
    ASSERT_OK(vt_storage_external_free_stack((void *)0x2000, 0));
    ASSERT_EQ(vt__stacks_count(), before);
    vt_tensor_use(t);                           /* the capturing call does add */
    ASSERT_GT(vt__stacks_count(), before);

    vt__snapshot_data *s = build();
    ASSERT_EQ(s->nevents, 9);
    for (size_t i = 0; i < 3; i++)
        ASSERT_EQ(s->events[i].stack, st);
    for (size_t i = 3; i < 8; i++)
        ASSERT_EQ(s->events[i].stack, 0);
    ASSERT_NE(s->events[8].stack, 0);
    vt__snapshot_free(s);
}

/* A rename keeps the tensor's id (aux) and carries the new name; like a drop
 * it unwinds nothing (no view reads a stack for it). */
TEST(tensor_name_records_a_rename_without_a_stack)
{
    static char storage[256];
    uint64_t t = vt_tensor_new_stack(storage, sizeof storage, 0, "aten.mm out[0]", 0);
    uint32_t before = vt__stacks_count();
    ASSERT_OK(vt_tensor_name(t, "fc2 out"));
    ASSERT_OK(vt_tensor_name(t, ""));           /* empty: nameless from now on */
    ASSERT_OK(vt_tensor_name(987654321, "never made"));  /* unknown ids are the readers' call */
    ASSERT_EQ(vt__stacks_count(), before);

    vt__snapshot_data *s = build();
    ASSERT_EQ(s->nevents, 4);
    const vt__event *e = s->events;
    ASSERT_EQ(e[0].kind, VT_EV_TENSOR_NEW);
    ASSERT_STR_EQ(str(s, e[0].str), "aten.mm out[0]");
    for (size_t i = 1; i < 4; i++) {
        ASSERT_EQ(e[i].kind, VT_EV_TENSOR_NAME);
        ASSERT_EQ(e[i].stack, 0);
        ASSERT_EQ(e[i].aux2, 0);
        ASSERT_EQ(e[i].addr, 0);
        ASSERT_EQ(e[i].size, 0);
        ASSERT_EQ(e[i].device, -1);
        ASSERT_EQ(e[i].thread, e[0].thread);
        ASSERT_GE(e[i].seq, e[i - 1].seq + 1);
    }
    ASSERT_EQ(e[1].aux, t);
    ASSERT_STR_EQ(str(s, e[1].str), "fc2 out");
    ASSERT_EQ(e[2].aux, t);
    ASSERT_EQ(e[2].str, 0);
    ASSERT_EQ(e[3].aux, 987654321);
    ASSERT_STR_EQ(str(s, e[3].str), "never made");
    vt__snapshot_free(s);
}

TEST(a_tensor_declared_again_keeps_its_id_and_says_so)
{
    const char *frames[] = { "train.py:12 <module>" };
    uint32_t st = vt_stack_intern_frames(frames, 1);
    uint64_t t = vt_tensor_new_stack((void *)0x2000, 32, 0, "logits", st);
    uint64_t v = vt_tensor_new_stack((void *)0x2010, 16, t, "view", st);
    ASSERT_OK(vt_tensor_again(t, (void *)0x2000, 32, 0, "logits", st, 0));
    ASSERT_OK(vt_tensor_again(v, (void *)0x2010, 16, t, "view", 0, 499));
    ASSERT_EQ(vt_tensor_again(0, (void *)0x2000, 32, 0, "x", st, 0), -EINVAL);
    vt__snapshot_data *s = build();
    ASSERT_EQ(s->nevents, 4);
    const vt__event *e = &s->events[2];
    ASSERT_EQ(e->kind, VT_EV_TENSOR_NEW);
    ASSERT_EQ(e->aux, t);                       /* no new id */
    ASSERT_EQ(e->aux2, VT_TENSOR_AGAIN);
    ASSERT_EQ(VT_TENSOR_BASE(e->aux2), 0);
    ASSERT_EQ(e->addr, 0x2000);
    ASSERT_EQ(e->size, 32);
    ASSERT_EQ(e->stack, st);                    /* where it was made */
    ASSERT_STR_EQ(str(s, e->str), "logits");
    ASSERT_EQ(e->stream, 0);
    ASSERT_EQ(e[1].aux, v);
    ASSERT_EQ(e[1].stream, 499);                /* its rest: the usual gap */
    ASSERT_EQ(VT_TENSOR_BASE(e[1].aux2), t);
    ASSERT(e[1].aux2 & VT_TENSOR_AGAIN);
    vt__snapshot_free(s);
}

/* trace:0 */
TEST(annotations_with_tracing_off_hand_out_ids_and_record_nothing)
{
    uint64_t a = vt_tensor_new((void *)0x10, 1, 0, "a");
    uint64_t b = vt_holder_new("b");
    ASSERT_NE(a, 0);
    ASSERT_NE(b, 0);
    ASSERT_NE(a, b);
    vt_tensor_use(a);
    ASSERT_NE(vt_tensor_new_stack((void *)0x10, 1, a, "c", 0), 0);
    ASSERT_OK(vt_storage_external_stack((void *)0x10, 1, 0, 0));
    ASSERT_OK(vt_ref(b, a, NULL));
    ASSERT_OK(vt_tensor_name(a, "renamed"));
    ASSERT_EQ(vt_tensor_name(0, "x"), -EINVAL);
    ASSERT_OK(vt_tensor_again(a, (void *)0x10, 1, 0, "a", 0, 0));
    ASSERT_EQ(vt_stack_intern_frames((const char *const[]){ "x.py:1 f" }, 1), 0);
    vt__snapshot_data *s = build();
    ASSERT_EQ(s->nevents, 0);
    vt__snapshot_free(s);
}

TEST_MAIN()
