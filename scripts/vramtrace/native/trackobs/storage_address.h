// storage_address.h - where a storage's memory is, as StorageImpl::data()
// reads it (a copy-on-write storage left as it is: nothing materialized),
// also where PyTorch refuses to hand the memory out. cudagraph trees
// (torch.compile's mode="reduce-overhead") mark each output that a later
// replay overwrote (torch._C._set_storage_access_error_msg sets the
// storage's throw_on_immutable_data_ptr_), so that the program's next read
// of it raises; its memory stays where it was, in the graph's pool. The
// recording only notes the address, never reads or writes the memory, and
// data() there threw out of every read: a walk at each mark failed whole,
// and the ops on the pool's memory went unrecorded.
//
// Included by observer.cpp's translation unit alone, built at first use
// against the torch in use: a PyTorch without the unchecked read has no
// storage that refuses data(), and reads it through data().
#ifndef VT_TRACKOBS_STORAGE_ADDRESS_H
#define VT_TRACKOBS_STORAGE_ADDRESS_H

#include <ATen/core/Tensor.h>
#include <c10/core/StorageImpl.h>

#include <cstdint>

namespace trackobs {

template <typename S>
inline auto storage_data_unchecked(S *s, int) -> decltype(s->_mutable_data_ptr_no_checks().get())
{
    return s->_mutable_data_ptr_no_checks().get();
}

template <typename S>
inline const void *storage_data_unchecked(S *s, long)
{
    return s->data();
}

// Whether s refuses data() to every reader (where this torch can say).
template <typename S>
inline auto storage_refuses_data(const S *s, int) -> decltype(bool(s->throw_on_immutable_data_ptr()))
{
    return s->throw_on_immutable_data_ptr();
}

template <typename S>
inline bool storage_refuses_data(const S *, long)
{
    return false;
}

// The address of storage s's memory (0 for one without memory).
inline uintptr_t storage_address(c10::StorageImpl *s)
{
    return reinterpret_cast<uintptr_t>(storage_data_unchecked(s, 0));
}

// The address of t's first element, as TensorImpl::const_data_ptr() reads
// it (0 for an empty tensor), also on a storage that refuses data() (t has
// a storage: the caller asked). Any other refusal (a wrapper's, a fake
// tensor's) is thrown on, for the caller's rule.
inline uintptr_t tensor_address(const at::Tensor &t)
{
    try {
        return reinterpret_cast<uintptr_t>(t.const_data_ptr());
    } catch (...) {
        c10::StorageImpl *s = t.storage().unsafeGetStorageImpl();
        if (!storage_refuses_data(s, 0))
            throw;
        // refused: TensorImpl's rule on the unchecked address
        if (t.numel() == 0)
            return 0;
        return storage_address(s) + static_cast<uintptr_t>(t.itemsize() * t.storage_offset());
    }
}

}  // namespace trackobs

#endif
