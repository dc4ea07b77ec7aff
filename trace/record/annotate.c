/*
 * trace/record/annotate.c - the annotation API of the reference-graph checker.
 *
 * Frameworks (the PyTorch helper through ctypes, C programs directly) tell
 * vramtrace about logical tensors, the storages they live in, the objects
 * that hold them and the references between those. Every call is one event in
 * the same ring as the allocator's, so the checker sees allocations and
 * references on one time line. Tensor and holder ids come from one counter
 * and are never 0; with tracing off the calls still hand out ids and record
 * nothing.
 *
 * Stacks are recorded only where a reader uses them: TENSOR_NEW and
 * TENSOR_USE (the checker's uses, the last one shown), STORAGE_EXTERNAL and
 * its _FREE (a storage's allocation and release). Drops, renames, holders
 * and references carry none. Every call that captures a native stack has a
 * _stack twin taking one from vt_stack_intern_frames() instead, for
 * interpreters whose native stack shows only their own loop.
 */
#include "vramtrace.h"
#include "rec_internal.h"

#include <errno.h>

#include "vramtrace/format.h"
#include "user_code.h"

static _Atomic uint64_t next_id = 1;

static uint64_t new_id(void)
{
    return atomic_fetch_add_explicit(&next_id, 1, memory_order_relaxed);
}

static uint64_t tensor_new(const void *data_ptr, size_t nbytes, uint64_t base_tensor,
                           const char *name, uint32_t stack)
{
    uint64_t id = new_id();
    vt__trace(.kind = VT_EV_TENSOR_NEW, .device = -1, .addr = (uint64_t)(uintptr_t)data_ptr,
              .req_size = nbytes, .size = nbytes, .stack = stack, .aux = id,
              .aux2 = base_tensor, .str = vt__string_intern(name));
    return id;
}

VT_REC_TEXT uint64_t vt_tensor_new(const void *data_ptr, size_t nbytes, uint64_t base_tensor,
                                   const char *name)
{
    if (!vt__rec_on())
        return new_id();
    return tensor_new(data_ptr, nbytes, base_tensor, name, vt__stack_capture());
}

uint64_t vt_tensor_new_stack(const void *data_ptr, size_t nbytes, uint64_t base_tensor,
                             const char *name, uint32_t stack)
{
    if (!vt__rec_on())
        return new_id();
    return tensor_new(data_ptr, nbytes, base_tensor, name, stack);
}

int vt_tensor_again(uint64_t id, const void *data_ptr, size_t nbytes, uint64_t base_tensor,
                    const char *name, uint32_t stack, uint64_t rest)
{
    if (id == 0)
        return -EINVAL;
    if (!vt__rec_on())
        return 0;
    vt__trace(.kind = VT_EV_TENSOR_NEW, .device = -1, .addr = (uint64_t)(uintptr_t)data_ptr,
              .req_size = nbytes, .size = nbytes, .stack = stack, .aux = id,
              .aux2 = base_tensor | VT_TENSOR_AGAIN, .stream = rest,
              .str = vt__string_intern(name));
    return 0;
}

VT_REC_TEXT void vt_tensor_use(uint64_t id)
{
    if (id == 0 || !vt__rec_on())
        return;
    vt__trace(.kind = VT_EV_TENSOR_USE, .device = -1, .stack = vt__stack_capture(), .aux = id);
}

void vt_tensor_use_stack(uint64_t id, uint32_t stack)
{
    if (id == 0 || !vt__rec_on())
        return;
    vt__trace(.kind = VT_EV_TENSOR_USE, .device = -1, .stack = stack, .aux = id);
}

/* No stack: neither the checker nor the views read one for a drop (the
 * storage's release has its own), and an unwind costs more than the event. */
void vt_tensor_drop(uint64_t id)
{
    if (id == 0 || !vt__rec_on())
        return;
    vt__trace(.kind = VT_EV_TENSOR_DROP, .device = -1, .aux = id);
}

/* No stack: a rename is not a use, and reports show only the final name. */
int vt_tensor_name(uint64_t id, const char *name)
{
    if (id == 0 || !name)
        return -EINVAL;
    if (!vt__rec_on())
        return 0;
    vt__trace(.kind = VT_EV_TENSOR_NAME, .device = -1, .aux = id,
              .str = vt__string_intern(name));
    return 0;
}

static int storage_external(const void *ptr, size_t nbytes, int device, uint32_t stack)
{
    vt__trace(.kind = VT_EV_STORAGE_EXTERNAL, .device = device,
              .addr = (uint64_t)(uintptr_t)ptr, .req_size = nbytes, .size = nbytes,
              .stack = stack);
    return 0;
}

VT_REC_TEXT int vt_storage_external(const void *ptr, size_t nbytes, int device)
{
    if (!ptr)
        return -EINVAL;
    if (!vt__rec_on())
        return 0;
    return storage_external(ptr, nbytes, device, vt__stack_capture());
}

int vt_storage_external_stack(const void *ptr, size_t nbytes, int device, uint32_t stack)
{
    if (!ptr)
        return -EINVAL;
    if (!vt__rec_on())
        return 0;
    return storage_external(ptr, nbytes, device, stack);
}

VT_REC_TEXT int vt_storage_external_free(const void *ptr)
{
    if (!ptr)
        return -EINVAL;
    if (!vt__rec_on())
        return 0;
    vt__trace(.kind = VT_EV_STORAGE_EXTERNAL_FREE, .device = -1,
              .addr = (uint64_t)(uintptr_t)ptr, .stack = vt__stack_capture_free());
    return 0;
}

int vt_storage_external_free_stack(const void *ptr, uint32_t stack)
{
    if (!ptr)
        return -EINVAL;
    if (!vt__rec_on())
        return 0;
    vt__trace(.kind = VT_EV_STORAGE_EXTERNAL_FREE, .device = -1,
              .addr = (uint64_t)(uintptr_t)ptr, .stack = stack);
    return 0;
}

/* No stack, as for a drop: nothing reads one. */
uint64_t vt_holder_new_flags(const char *name, unsigned flags)
{
    uint64_t id = new_id();
    if (!vt__rec_on())
        return id;
    vt__trace(.kind = VT_EV_HOLDER_NEW, .device = -1, .aux = id, .aux2 = flags,
              .str = vt__string_intern(name));
    return id;
}

uint64_t vt_holder_new(const char *name)
{
    return vt_holder_new_flags(name, 0);
}

int vt_ref(uint64_t from, uint64_t to, const char *label)
{
    if (from == 0 || to == 0)
        return -EINVAL;
    if (!vt__rec_on())
        return 0;
    vt__trace(.kind = VT_EV_REF, .device = -1, .aux = from, .aux2 = to,
              .str = vt__string_intern(label));
    return 0;
}

int vt_unref(uint64_t from, uint64_t to)
{
    if (from == 0 || to == 0)
        return -EINVAL;
    if (!vt__rec_on())
        return 0;
    vt__trace(.kind = VT_EV_UNREF, .device = -1, .aux = from, .aux2 = to);
    return 0;
}

uint32_t vt_stack_intern_frames(const char *const *frames, size_t n)
{
    if (!frames || n == 0 || !vt__rec_on())
        return 0;
    if (n > VT_STACK_MAX_DEPTH)
        n = VT_STACK_MAX_DEPTH;    /* keep the innermost */
    uint64_t ips[VT_STACK_MAX_DEPTH];
    for (size_t i = 0; i < n; i++) {
        uint32_t s = vt__string_intern_pinned(frames[i] && *frames[i] ? frames[i] : "?");
        ips[i] = VT_IP_SYNTHETIC | s;
    }
    return vt__stack_intern_ips(ips, n);
}

int vt_source_is_programs(const char *file)
{
    return vt__source_is_programs(file) && !vt__source_is_installed(file);
}
