// storage_reads.h - what the recording (_trackfast) asks of a storage in
// C++ instead of through Python: a weak handle on it, the storage a tensor
// is on, its strong count, where its memory is now. Exported with the
// observer (tensor_facts.h declares their types for _trackfast); they read
// only the StorageImpl or TensorImpl given, nothing of the observer's state.
//
// Included by observer.cpp alone: the observer is one translation unit,
// built at first use against the torch in use (held_args.h says why).
#ifndef VT_TRACKOBS_STORAGE_READS_H
#define VT_TRACKOBS_STORAGE_READS_H

#include <c10/core/StorageImpl.h>
#include <c10/core/TensorImpl.h>
#include <c10/util/intrusive_ptr.h>

#include <cstdint>

#include "storage_address.h"

extern "C" {

// trackobs_make_weak(storage): a weak handle on a StorageImpl whose tensor
// the recording holds, as UntypedStorage._weak_ref() makes it
// (tensor_facts.h): its weak count taken, its address returned.
__attribute__((visibility("default"))) uint64_t trackobs_make_weak(uint64_t storage)
{
    if (storage == 0)
        return 0;
    return reinterpret_cast<uintptr_t>(
        c10::raw::intrusive_ptr::make_weak(reinterpret_cast<c10::StorageImpl *>(storage)));
}

// trackobs_storage_key(impl, out): the StorageImpl of the tensor whose
// TensorImpl is `impl`, as torch._C._storage_id reads it
// (storage().unsafeGetStorageImpl()): a mark asks it of every live tracked
// tensor (one moved by `.data =` shows no op), and _storage_id's Python
// call was 110 ns each, 0.34 ms a mark at 3,000 kept tensors. 1: out[0] =
// it; -1: no storage, or one that throws when read (a wrapper subclass's):
// the caller asks Python, which says so its own way.
__attribute__((visibility("default"))) int trackobs_storage_key(uint64_t impl, uint64_t *out)
{
    auto *t = reinterpret_cast<c10::TensorImpl *>(impl);
    if (t == nullptr)
        return -1;
    try {
        if (!t->has_storage())
            return -1;
        out[0] = reinterpret_cast<uintptr_t>(t->storage().unsafeGetStorageImpl());
        return 1;
    } catch (...) {
        return -1;
    }
}

// trackobs_storage_use_count(handle): the strong count of the StorageImpl
// behind weak handle `handle` (0 once it is gone), as
// torch._C._storage_Use_Count reads it (c10::raw::weak_intrusive_ptr::
// use_count): a storage left without tracked tensors is asked whether
// anything else still holds it at every such death, and a Python call each
// time was a good part of what a tensor's death cost. The handle stays the
// caller's.
__attribute__((visibility("default"))) uint64_t trackobs_storage_use_count(uint64_t handle)
{
    if (handle == 0)
        return 0;
    return c10::raw::weak_intrusive_ptr::use_count(reinterpret_cast<c10::StorageImpl *>(handle));
}

// trackobs_storage_now(handle, out): where the storage behind weak handle
// `handle` (trackobs_make_weak's or UntypedStorage._weak_ref()'s) is now,
// read as StorageImpl::data(), which leaves a copy-on-write storage as it is:
// UntypedStorage.data_ptr(), what Python could ask instead, materializes it
// (a copy the program never made). 1: alive, out = {data, nbytes}; 0: gone;
// -1: it cannot be read here (a fake or symbolic storage): ask Python.
// Locking the weak handle for the read is what _new_with_weak_ptr does; the
// handle stays the caller's.
__attribute__((visibility("default"))) int trackobs_storage_now(uint64_t handle, uint64_t *out)
{
    if (handle == 0)
        return 0;
    auto weak = c10::weak_intrusive_ptr<c10::StorageImpl>::reclaim(
        reinterpret_cast<c10::StorageImpl *>(handle));
    int alive = -1;
    try {
        c10::intrusive_ptr<c10::StorageImpl> s = weak.lock();
        if (!s) {
            alive = 0;
        } else {
            out[0] = trackobs::storage_address(s.get());
            out[1] = static_cast<uint64_t>(s->nbytes());
            alive = 1;
        }
    } catch (...) {
        alive = -1;
    }
    (void)weak.release();
    return alive;
}

}  // extern "C"

#endif
