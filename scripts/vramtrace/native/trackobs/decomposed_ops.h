// decomposed_ops.h - whether autograd runs an operator's
// CompositeImplicitAutograd decomposition instead of the operator itself
// (its parts reach the dispatch mode then, not the op): the op observer
// (observer.cpp) passes such an op through and looks at its parts. Read from
// the dispatcher's computed table, with OperatorHandle::lookup where this
// torch has it. No Python here, and nothing of the observer's state.
//
// Included by observer.cpp alone: the observer is one translation unit,
// built at first use against the torch in use (held_args.h says why).
#ifndef VT_TRACKOBS_DECOMPOSED_OPS_H
#define VT_TRACKOBS_DECOMPOSED_OPS_H

#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/DispatchKey.h>
#include <c10/core/DispatchKeySet.h>

#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

namespace trackobs {

// Whether an operator's computed table runs one kernel for both keys.
// OperatorHandle::lookup (torch 2.14 on) compares the kernels themselves;
// an older torch has only the table as text, a line a key ("CPU: registered
// at FILE:LINE [math kernel]"), whose registration site and kind tell one
// kernel from another (torch._C._dispatch_dump_table prints the same text).
template <typename H, typename = void>
struct has_lookup : std::false_type {};
template <typename H>
struct has_lookup<H, std::void_t<decltype(std::declval<const H &>().lookup(c10::DispatchKeySet()))>>
    : std::true_type {};

inline std::string_view computed_kernel(std::string_view table, std::string_view key)
{
    for (size_t at = 0; at < table.size();) {
        size_t end = table.find('\n', at);
        if (end == std::string_view::npos)
            end = table.size();
        std::string_view line = table.substr(at, end - at);
        if (line.size() > key.size() + 1 && line.substr(0, key.size()) == key &&
            line[key.size()] == ':')
            return line.substr(key.size() + 1);
        at = end + 1;
    }
    return {};
}

inline bool same_kernel_by_table(const c10::OperatorHandle &op, c10::DispatchKey a, c10::DispatchKey b)
{
    const std::string table = op.dumpComputedTable();
    const std::string_view ka = computed_kernel(table, c10::toString(a));
    return !ka.empty() && ka == computed_kernel(table, c10::toString(b));
}

// by_table: the text's answer whatever this torch has (the tests compare it
// with lookup's, trackobs_decomposed_by)
template <typename H>
bool same_kernel(const H &op, c10::DispatchKey a, c10::DispatchKey b, bool by_table)
{
    if constexpr (has_lookup<H>::value) {
        if (!by_table)
            return op.lookup(c10::DispatchKeySet(a))._equalsBoxedAndUnboxed(
                op.lookup(c10::DispatchKeySet(b)));
    }
    return same_kernel_by_table(op, a, b);
}

// Whether autograd runs this op's decomposition instead of it, so that
// dispatch reaches the Python key (the mode) with its parts: when its
// autograd slot holds the same kernel as its backend slot, its
// CompositeImplicitAutograd decomposition ("math kernel" in
// torch._C._dispatch_dump_table; aten::linear is one, and has an autograd
// kernel for nested tensors only). Where autograd is off (inference mode
// excludes its keys) the mode sees the op itself: op_started asks.
inline bool decomposed_by_autograd(const c10::OperatorName &name, bool by_table = false)
{
    auto op = c10::Dispatcher::singleton().findOp(name);
    if (!op)
        return false;
    if (!op->hasKernelForDispatchKey(c10::DispatchKey::CompositeImplicitAutograd))
        return false;
    using K = c10::DispatchKey;
    if (!op->hasComputedKernelForDispatchKey(K::AutogradCPU) ||
        !op->hasComputedKernelForDispatchKey(K::CPU))
        return false;
    return same_kernel(*op, K::AutogradCPU, K::CPU, by_table);
}

}  // namespace trackobs

#endif
