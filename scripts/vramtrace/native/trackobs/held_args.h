// held_args.h - an op's arguments (or outputs) held back weakly by the op
// observer (observer.cpp), and brought back as arguments when it hands the
// op over: what is still alive then, and of a dead tensor its storage, if
// that lives on. No Python here, and nothing of the observer's state.
//
// Included by observer.cpp alone: the observer is one translation unit,
// built at first use against the torch in use, and each more unit would
// cost the seconds of ATen's headers again.
#ifndef VT_TRACKOBS_HELD_ARGS_H
#define VT_TRACKOBS_HELD_ARGS_H

#include <ATen/core/Tensor.h>
#include <ATen/core/List.h>
#include <ATen/core/ivalue.h>
#include <c10/core/StorageImpl.h>
#include <c10/util/SmallVector.h>
#include <c10/util/intrusive_ptr.h>

#include <cstdint>
#include <optional>
#include <vector>

#include "storage_address.h"

namespace trackobs {

using WeakImpl = c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>;

using WeakStorage = c10::weak_intrusive_ptr<c10::StorageImpl>;

// An op's arguments (or its outputs) held back, weakly: each argument a
// tensor, a list of tensors, or anything else (handed over as None, as the
// recording ignores it), and their tensors in order, a list's items in
// order. An engine op's inputs keep their storages too, weakly: a backward
// op reads a saved output through a tensor of its own (SavedVariable::unpack
// makes one on the saved storage), dead by the hand-over; its storage, still
// alive, is what the op used (storage_uses below). Inline for the few
// arguments an op has: a backward holds dozens of ops a step, and a heap
// block per argument was a good part of what holding one cost.
struct HeldTensor {
    std::optional<WeakImpl> tensor;       // nullopt: an undefined tensor
    std::optional<WeakStorage> storage;   // its storage (engine inputs), nullopt: none
};
struct HeldArgs {
    enum Kind : uint8_t { OTHER, TENSOR, LIST };
    struct Arg {
        Kind kind;
        uint32_t n;   // its tensors (a list's items; a tensor: 1)
    };
    c10::SmallVector<Arg, 6> args;
    c10::SmallVector<HeldTensor, 4> tensors;
};

// An op's arguments brought back (revived below), and the (StorageImpl*,
// data pointer) pairs of its dead inputs' live storages: inline for the
// few an op has (a heap block each cost every op handed over).
using IValues = c10::SmallVector<c10::IValue, 6>;
using StorageUses = c10::SmallVector<uint64_t, 8>;

// Whether ``v`` is an argument the recording reads as a list of tensors: a
// Tensor[] or Tensor?[] (a list whose first item is a tensor or None).
inline bool is_tensor_list(const c10::IValue &v)
{
    if (v.isTensorList())
        return true;
    if (!v.isList() || v.toListRef().empty())
        return false;
    const c10::IValue &first = v.toListRef()[0];
    return first.isTensor() || first.isNone();
}

// ``values`` held weakly into ``held``; with ``storages``, each tensor's
// storage too.
inline void hold_weakly(c10::ArrayRef<c10::IValue> values, HeldArgs &held, bool storages = false)
{
    auto hold = [&](const at::Tensor *t) {
        HeldTensor &h = held.tensors.emplace_back();
        if (t == nullptr || !t->defined())
            return;
        h.tensor.emplace(t->getIntrusivePtr());
        if (storages && t->has_storage())
            h.storage.emplace(t->storage().getWeakStorageImpl());
    };
    for (const c10::IValue &v : values) {
        if (v.isTensor()) {
            held.args.push_back({HeldArgs::TENSOR, 1});
            hold(&v.toTensor());
        } else if (is_tensor_list(v)) {
            c10::ArrayRef<c10::IValue> items = v.toListRef();
            held.args.push_back({HeldArgs::LIST, static_cast<uint32_t>(items.size())});
            for (const c10::IValue &item : items)
                hold(item.isTensor() ? &item.toTensor() : nullptr);
        } else {
            held.args.push_back({HeldArgs::OTHER, 0});
        }
    }
}

// ``held`` as the op's arguments again: the tensors still alive, an
// undefined tensor (None to the recording) for each one gone. Sets
// ``alive`` and ``dead`` to the tensors found alive and gone. Where
// ``storage_uses`` is given, a dead tensor whose storage (held with it) is
// alive adds that storage to it: its StorageImpl and data pointer, read as
// StorageImpl::data() reads it (a copy-on-write storage left as it is).
inline IValues revived(HeldArgs &held, size_t &alive, size_t &dead,
                       StorageUses *storage_uses = nullptr)
{
    alive = dead = 0;
    IValues out;
    out.reserve(held.args.size());
    size_t next = 0;   // the next of held.tensors
    auto lock = [&]() -> at::Tensor {
        HeldTensor &h = held.tensors[next++];
        if (!h.tensor)
            return at::Tensor();
        auto t = h.tensor->lock();
        if (t) {
            alive++;
            return at::Tensor(std::move(t));
        }
        dead++;
        if (storage_uses != nullptr && h.storage) {
            c10::intrusive_ptr<c10::StorageImpl> s = h.storage->lock();
            if (s) {
                storage_uses->push_back(reinterpret_cast<uintptr_t>(s.get()));
                storage_uses->push_back(storage_address(s.get()));
            }
        }
        return at::Tensor();
    };
    for (const HeldArgs::Arg &a : held.args) {
        if (a.kind == HeldArgs::TENSOR) {
            out.emplace_back(lock());
        } else if (a.kind == HeldArgs::LIST) {
            c10::List<at::Tensor> list;
            list.reserve(a.n);
            for (uint32_t k = 0; k < a.n; k++)
                list.push_back(lock());
            out.emplace_back(std::move(list));
        } else {
            out.emplace_back();
        }
    }
    return out;
}

}  // namespace trackobs

#endif
