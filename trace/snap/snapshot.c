/*
 * trace/snap/snapshot.c - accessors of the in-memory snapshot model.
 *
 * Ownership rule shared by everyone who builds a vt__snapshot_data (the reader, the
 * recorder, tests): the struct itself and each array are separate malloc()
 * blocks, so vt__snapshot_free() can free() them one by one.
 */
#include <stdlib.h>
#include <string.h>

#include "snapshot.h"
#include "u64map.h"
#include "user_code.h"

const char *vt__snapshot_pool_note(const vt__snapshot_data *s)
{
    if (s->meta.flags & VT_META_POOL_UNSEEN)
        return "PyTorch's caching allocator ran unobserved in this process: its allocations "
               "here are whole segments, not tensors, so findings cover segments only (see "
               "`vramtrace run`'s message at the end of the run for why and the fix)";
    if (s->meta.flags & VT_META_POOL_OBSERVED)
        return "PyTorch's caching allocator observed: allocations are its tensors' blocks "
               "(allocated as torch.cuda.memory_allocated() counts); reserved is its segments "
               "and every other device allocation";
    return NULL;
}

bool vt__snapshot_oom_outside_framework(const vt__snapshot_data *s, const vt__event *e)
{
    return e->kind == VT_EV_OOM && (s->meta.flags & VT_META_POOL_OBSERVED) &&
           (s->meta.format_version & 0xffff) >= 13 && !(e->addr & VT_OOM_FRAMEWORK);
}

bool vt__frame_is_user_code(const vt__snapshot_data *s, const vt__frame *f)
{
    if (f->ip != 0 || strcmp(vt__snapshot_string(s, f->module), "python") != 0 ||
        (f->flags & VT_FRAME_INSTALLED))
        return false;
    return vt__source_is_programs(vt__snapshot_string(s, f->file));
}

bool vt__frame_is_library_code(const vt__snapshot_data *s, const vt__frame *f)
{
    if (f->ip != 0 || strcmp(vt__snapshot_string(s, f->module), "python") != 0)
        return false;
    const char *file = vt__snapshot_string(s, f->file);
    if (vt__source_is_torchs(file) || strstr(file, "/vramtrace/"))
        return false;
    if (f->flags & VT_FRAME_INSTALLED)
        return !strstr(file, "/torch/");
    return strstr(file, "/site-packages/") || strstr(file, "/dist-packages/");
}

const vt__frame *vt__snapshot_library_frame(const vt__snapshot_data *s, uint32_t id)
{
    const vt__frame *library = NULL;
    for (size_t steps = 0; id != 0 && id < s->nstack_nodes && steps < s->nstack_nodes; steps++) {
        const vt__stack_node *node = &s->stack_nodes[id];
        const vt__frame *f = node->frame < s->nframes ? &s->frames[node->frame] : NULL;
        if (f && vt__frame_is_user_code(s, f))
            return library;
        if (f && !library && vt__frame_is_library_code(s, f))
            library = f;
        id = node->parent;
    }
    return NULL;   /* no line of the program */
}

const char *vt__snapshot_string(const vt__snapshot_data *s, uint32_t index)
{
    if (!s || index >= s->nstrings || !s->string_offsets || !s->strings_blob)
        return "";
    uint32_t off = s->string_offsets[index];
    if (off >= s->strings_blob_size)
        return "";
    return s->strings_blob + off;
}

size_t vt__snapshot_stack_frames(const vt__snapshot_data *s, uint32_t id,
                                 const vt__frame **out, size_t max)
{
    size_t n = 0;
    if (!s)
        return 0;
    /* parent < id holds for validated snapshots; the step bound guards the
     * rest against cycles. */
    for (size_t steps = 0; id != 0 && id < s->nstack_nodes && steps < s->nstack_nodes; steps++) {
        const vt__stack_node *node = &s->stack_nodes[id];
        if (node->frame < s->nframes) {
            if (n < max && out)
                out[n] = &s->frames[node->frame];
            n++;
        }
        id = node->parent;
    }
    return n;
}

uint32_t vt__snapshot_user_node(const vt__snapshot_data *s, uint32_t id)
{
    if (!s)
        return 0;
    for (size_t steps = 0; id != 0 && id < s->nstack_nodes && steps < s->nstack_nodes; steps++) {
        const vt__stack_node *node = &s->stack_nodes[id];
        if (node->frame < s->nframes && vt__frame_is_user_code(s, &s->frames[node->frame]))
            return id;
        id = node->parent;
    }
    return 0;
}

uint64_t vt__snapshot_python_path(const vt__snapshot_data *s, uint32_t id)
{
    const vt__frame *fr[VT_SNAPSHOT_PYTHON_PATH_MAX];
    size_t n = 0;
    for (size_t steps = 0; s && id != 0 && id < s->nstack_nodes && steps < s->nstack_nodes;
         steps++) {
        const vt__stack_node *node = &s->stack_nodes[id];
        if (node->frame < s->nframes && vt__frame_is_python(s, &s->frames[node->frame]) &&
            n < VT_SNAPSHOT_PYTHON_PATH_MAX)
            fr[n++] = &s->frames[node->frame];
        id = node->parent;
    }
    /* outermost first; a frame by what it says (function, file, line), not
     * its index: the recorder keeps one per instruction, two calls on one
     * line are two frames */
    uint64_t h = 0x5079746870617468ull;
    while (n--)
        h = vt__mix64(h ^ vt__mix64((uint64_t)fr[n]->function << 32 ^ fr[n]->file) ^ fr[n]->line);
    return h;
}

bool vt__snapshot_node_is_user(const vt__snapshot_data *s, uint32_t node, uint8_t *memo)
{
    uint32_t fr = node < s->nstack_nodes ? s->stack_nodes[node].frame : UINT32_MAX;
    if (fr >= s->nframes)
        return false;
    if (!memo)
        return vt__frame_is_user_code(s, &s->frames[fr]);
    if (!memo[fr])
        memo[fr] = vt__frame_is_user_code(s, &s->frames[fr]) ? 1 : 2;
    return memo[fr] == 1;
}

static bool frame_is_autograd_engine(const vt__snapshot_data *s, uint32_t frame)
{
    if (frame >= s->nframes || vt__frame_is_python(s, &s->frames[frame]))
        return false;
    return strstr(vt__snapshot_string(s, s->frames[frame].function), "torch::autograd::Engine::");
}

bool vt__snapshot_stack_in_backward(const vt__snapshot_data *s, uint32_t id, uint8_t *memo)
{
    enum { UNKNOWN = 0, IN_BACKWARD = 1, NOT = 2 };
    /* up to the first node that answers: an engine frame (it and every
     * node under it ran in a backward pass), one answered before, or the
     * root (none did); the nodes walked take that answer */
    uint8_t answer = NOT;
    uint32_t stop = 0;
    for (uint32_t n = id, steps = 0; n != 0 && n < s->nstack_nodes && steps < s->nstack_nodes;
         n = s->stack_nodes[n].parent, steps++) {
        if (memo && memo[n] != UNKNOWN) {
            answer = memo[n];
            stop = n;
            break;
        }
        if (frame_is_autograd_engine(s, s->stack_nodes[n].frame)) {
            answer = IN_BACKWARD;
            stop = s->stack_nodes[n].parent;   /* it answers too */
            break;
        }
    }
    for (uint32_t n = id, steps = 0; memo && n != stop && n != 0 && n < s->nstack_nodes &&
                                     steps < s->nstack_nodes;
         n = s->stack_nodes[n].parent, steps++)
        memo[n] = answer;
    return answer == IN_BACKWARD;
}

uint64_t vt__snapshot_python_line(const vt__snapshot_data *s, uint32_t id)
{
    for (size_t steps = 0; s && id != 0 && id < s->nstack_nodes && steps < s->nstack_nodes;
         steps++) {
        const vt__stack_node *node = &s->stack_nodes[id];
        const vt__frame *f = node->frame < s->nframes ? &s->frames[node->frame] : NULL;
        if (f && f->line && vt__frame_is_python(s, f))
            return (uint64_t)f->file << 32 | f->line;
        id = node->parent;
    }
    return 0;
}

const vt__frame *vt__snapshot_user_frame(const vt__snapshot_data *s, uint32_t id)
{
    uint32_t node = vt__snapshot_user_node(s, id);
    return node ? &s->frames[s->stack_nodes[node].frame] : NULL;
}

const char *vt__frame_file(const vt__snapshot_data *s, const vt__frame *f)
{
    const char *file = vt__snapshot_string(s, f->file);
    return *file ? file : vt__snapshot_string(s, f->module);
}

uint32_t vt__frame_def_line(const vt__snapshot_data *s, const vt__frame *f)
{
    if (!f || !f->first_line || !strcmp(vt__snapshot_string(s, f->function), "<module>"))
        return 0;
    return f->first_line;
}

void vt__snapshot_free_arrays(vt__snapshot_data *s)
{
    free(s->devices);
    free(s->segments);
    free(s->blocks);
    free(s->events);
    free(s->stack_nodes);
    free(s->frames);
    free(s->strings_blob);
    free(s->string_offsets);
}

void vt__snapshot_free(vt__snapshot_data *s)
{
    if (!s)
        return;
    vt__snapshot_free_arrays(s);
    free(s);
}

int vt__snapshot_max_device(const vt__snapshot_data *s)
{
    int maxdev = -1;
    for (size_t i = 0; i < s->nsegments; i++)
        if (s->segments[i].device > maxdev)
            maxdev = s->segments[i].device;
    for (size_t i = 0; i < s->nevents; i++)
        if (s->events[i].device > maxdev)
            maxdev = s->events[i].device;
    return maxdev;
}
