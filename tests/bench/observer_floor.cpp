// observer_floor.cpp - the floor of a per-op observer written in C++ against
// PyTorch's own hooks, for bench_observer_floor.py (built there, against the
// installed torch's headers; not part of vramtrace).
//
// What it does is what a tracker needs at the least, per op and per
// allocation, without entering Python per op:
//   - a RecordFunction callback (PyTorch's profiler hook, every op through
//     the dispatcher, composite ops and their parts too) that reads every
//     input and output tensor and stamps its StorageImpl with the op count
//     (its last use);
//   - the CPU allocator wrapped (c10::SetCPUAllocator, the hook allocator
//     replacements use): each allocation recorded with the Python stack that
//     asked for it (the GIL taken, the frames' code and instruction offset
//     hashed), each free through the wrapper's deleter. Not the profiler's
//     memory-reporting slot (ThreadLocalDebugInfo PROFILER_STATE): while
//     anything sits there torch.profiler refuses to start ("Profiler is
//     already enabled on this thread"), which would change the program.
// The books under one mutex: the autograd engine runs ops on its own threads.
//
// Built with -DWITH_VRAMTRACE (libvramtrace.so loaded RTLD_GLOBAL first, its
// symbols resolved at load), floor_start(1) also records what track()
// records, through vramtrace's public API into its ring: each host
// allocation declared with its stack and released, each new tensor (a
// TensorImpl not seen alive before) with its op's name and stack, each use
// with the stack of the op (a backward op: the stack of the forward op
// that made its autograd node, by sequence number). Python stacks are
// interned once per call site (a hash of the frames' code and instruction
// offset -> the stack id).
#include <Python.h>

#include <ATen/record_function.h>
#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#ifdef WITH_VRAMTRACE
#include "vramtrace.h"
#endif

namespace {

struct Storage {
    uint64_t bytes = 0;
    uint64_t born_stack = 0;   // hash of the Python frames at allocation
    uint64_t last_use = 0;     // op count at its last use
};

std::mutex books_lock;
std::unordered_map<const void *, Storage> by_data;   // allocations, by address
std::unordered_map<const void *, uint64_t> last_use; // StorageImpl -> op count
uint64_t ops = 0, uses = 0, allocs = 0, frees = 0, frames_seen = 0, stacks_read = 0;
at::CallbackHandle callback = 0;
std::atomic<bool> recording{false};   // into vramtrace (WITH_VRAMTRACE only)

#ifdef WITH_VRAMTRACE
// A tensor seen alive: its id in the trace. The weak reference keeps the
// TensorImpl's memory (not its data) from being reused while it is here, so
// an address seen again is the same tensor unless the reference expired.
struct Tensor {
    c10::weak_intrusive_ptr<c10::TensorImpl> impl;
    uint64_t id = 0;
};
std::unordered_map<const c10::TensorImpl *, Tensor> tensors;
std::unordered_map<uint64_t, uint32_t> stack_ids;   // frames' hash -> stack id
uint64_t recorded = 0;                               // events handed to vramtrace
thread_local uint32_t op_stack = 0;                  // the stack of this thread's op
// A forward op's stack by the sequence number of the autograd node it made;
// the backward nodes being applied on this thread (their numbers), innermost
// last: a backward op is charged to the forward op's stack, as track() does.
std::unordered_map<int64_t, uint32_t> node_stacks;
thread_local std::vector<int64_t> open_nodes;
#endif

// The Python stack here, hashed (code object, instruction offset per
// frame); with WITH_VRAMTRACE and recording, its vramtrace stack id (the
// frames formatted "file:line function" and interned the first time a call
// site is seen). The allocator and the ops run with the GIL released by the
// op's binding; PyGILState_Ensure takes it (or notes that this thread has it).
uint64_t python_stack(uint32_t *stack_id)
{
    if (!Py_IsInitialized())
        return 0;
    PyGILState_STATE g = PyGILState_Ensure();
    stacks_read++;
    uint64_t h = 1469598103934665603ull;
    PyFrameObject *f = PyThreadState_GetFrame(PyThreadState_Get());
    PyFrameObject *innermost = f;
    Py_XINCREF(innermost);
    int depth = 0;
    for (; f != nullptr && depth < 64; depth++) {
        PyCodeObject *code = PyFrame_GetCode(f);
        h = (h ^ reinterpret_cast<uintptr_t>(code)) * 1099511628211ull;
        h = (h ^ static_cast<uint64_t>(PyFrame_GetLasti(f))) * 1099511628211ull;
        Py_DECREF(code);
        PyFrameObject *back = PyFrame_GetBack(f);
        Py_DECREF(f);
        f = back;
        frames_seen++;
    }
    Py_XDECREF(f);
#ifdef WITH_VRAMTRACE
    if (stack_id != nullptr) {
        auto it = stack_ids.find(h);   // under the GIL: one thread at a time
        if (it != stack_ids.end()) {
            *stack_id = it->second;
        } else {
            std::vector<std::string> text;
            PyFrameObject *t = innermost;
            Py_XINCREF(t);
            for (int i = 0; t != nullptr && i < depth; i++) {
                PyCodeObject *code = PyFrame_GetCode(t);
                const char *file = PyUnicode_AsUTF8(code->co_filename);
                const char *name = PyUnicode_AsUTF8(code->co_name);
                text.push_back(std::string(file ? file : "?") + ":" +
                               std::to_string(PyFrame_GetLineNumber(t)) + " " +
                               (name ? name : "?"));
                Py_DECREF(code);
                PyFrameObject *back = PyFrame_GetBack(t);
                Py_DECREF(t);
                t = back;
            }
            Py_XDECREF(t);
            std::vector<const char *> frames;
            for (const std::string &one : text)
                frames.push_back(one.c_str());
            *stack_id = vt_stack_intern_frames(frames.data(), frames.size());
            stack_ids.emplace(h, *stack_id);
        }
    }
#else
    (void)stack_id;
#endif
    Py_XDECREF(innermost);
    PyGILState_Release(g);
    return h;
}

// The allocator in place before ours, and its deleter: every allocation is
// made by it; ours only takes note. Only simple allocations (the data is the
// context, freed by the allocator's raw deleter) are noted, so that
// raw_allocate/raw_deallocate keep working through the wrapper.
at::Allocator *wrapped = nullptr;
c10::DeleterFnPtr wrapped_delete = nullptr;
std::atomic<bool> watching{false};

void noted_delete(void *p)
{
    if (watching) {
        std::lock_guard<std::mutex> g(books_lock);
        if (by_data.erase(p) > 0) {
            frees++;
#ifdef WITH_VRAMTRACE
            // the stack of the op running on this thread, if any: a free
            // runs anywhere (a Python object's death, the engine), and
            // reading frames here would take the GIL inside a deleter
            if (recording && vt_storage_external_free_stack(p, op_stack) == 0)
                recorded++;
#endif
        }
    }
    wrapped_delete(p);
}

struct AllocationWatch final : public at::Allocator {
    at::DataPtr allocate(size_t n) override
    {
        at::DataPtr d = wrapped->allocate(n);
        if (!watching || d.get() == nullptr || d.get() != d.get_context() ||
            d.get_deleter() != wrapped_delete)
            return d;
        uint32_t stack_id = 0;
        uint64_t stack = 0;
#ifdef WITH_VRAMTRACE
        if (recording && !open_nodes.empty())   // in a backward op: its (forward) stack
            stack_id = op_stack;
        else
#endif
            stack = python_stack(recording ? &stack_id : nullptr);   // GIL before lock
        c10::Device device = d.device();
        void *p = d.release_context();
        {
            std::lock_guard<std::mutex> g(books_lock);
            by_data[p] = Storage{static_cast<uint64_t>(n), stack, ops};
            allocs++;
#ifdef WITH_VRAMTRACE
            if (recording && vt_storage_external_stack(p, n, -1, stack_id) == 0)
                recorded++;
#endif
        }
        return at::DataPtr(p, p, &noted_delete, device);
    }
    c10::DeleterFnPtr raw_deleter() const override { return &noted_delete; }
    void copy_data(void *dest, const void *src, std::size_t count) const override
    {
        wrapped->copy_data(dest, src, count);
    }
};
AllocationWatch watch;

// A tensor of this op: its storage's last use; recording, its use (or, an
// output not seen alive before, its birth) in the trace.
void stamp(const at::Tensor &t, const char *op_name, bool output)
{
    if (!t.defined() || !t.has_storage())
        return;
    last_use[t.storage().unsafeGetStorageImpl()] = ops;
    uses++;
#ifdef WITH_VRAMTRACE
    if (!recording)
        return;
    const c10::TensorImpl *impl = t.unsafeGetTensorImpl();
    auto it = tensors.find(impl);
    if (it != tensors.end() && it->second.impl.expired()) {
        vt_tensor_drop(it->second.id);
        recorded++;
        tensors.erase(it);
        it = tensors.end();
    }
    if (it != tensors.end()) {
        vt_tensor_use_stack(it->second.id, op_stack);
    } else {
        uint64_t id = vt_tensor_new_stack(t.data_ptr(), t.nbytes(), 0,
                                          output ? op_name : "input", op_stack);
        tensors.emplace(impl, Tensor{c10::weak_intrusive_ptr<c10::TensorImpl>(
                                         t.getIntrusivePtr()), id});
    }
    recorded++;
#else
    (void)op_name;
    (void)output;
#endif
}

void stamp_all(const c10::IValue &v, const char *op_name, bool output)
{
    if (v.isTensor()) {
        stamp(v.toTensor(), op_name, output);
    } else if (v.isTensorList()) {
        for (const at::Tensor &t : v.toTensorList().vec())
            stamp(t, op_name, output);
    }
}

std::unique_ptr<at::ObserverContext> op_started(const at::RecordFunction &fn)
{
    if (fn.scope() == at::RecordScope::BACKWARD_FUNCTION) {   // a node's apply begins
#ifdef WITH_VRAMTRACE
        open_nodes.push_back(fn.seqNr());
#endif
        return nullptr;
    }
#ifdef WITH_VRAMTRACE
    if (recording) {
        bool charged = false;
        if (!open_nodes.empty()) {   // a backward op: the forward op's stack
            std::lock_guard<std::mutex> g(books_lock);
            auto it = node_stacks.find(open_nodes.back());
            if (it != node_stacks.end()) {
                op_stack = it->second;
                charged = true;
            }
        }
        if (!charged) {
            python_stack(&op_stack);   // before the lock: it takes the GIL
            if (fn.seqNr() >= 0) {     // it makes autograd node fn.seqNr()
                std::lock_guard<std::mutex> g(books_lock);
                node_stacks[fn.seqNr()] = op_stack;
            }
        }
    }
#endif
    std::lock_guard<std::mutex> g(books_lock);
    ops++;
    for (const c10::IValue &v : fn.inputs())
        stamp_all(v, fn.name(), false);
    return nullptr;
}

void op_ended(const at::RecordFunction &fn, at::ObserverContext *)
{
    if (fn.scope() == at::RecordScope::BACKWARD_FUNCTION) {
#ifdef WITH_VRAMTRACE
        if (!open_nodes.empty())
            open_nodes.pop_back();
#endif
        return;
    }
    std::lock_guard<std::mutex> g(books_lock);
    for (const c10::IValue &v : fn.outputs())
        stamp_all(v, fn.name(), true);
}

}  // namespace

extern "C" {

// Starts observing: ops of every thread, allocations by the CPU allocator;
// `record`: into vramtrace too. Returns 0, -1 when the CPU allocator in
// place has no raw deleter (not the default kind: nothing to wrap), -2 for
// `record` in a build without WITH_VRAMTRACE.
int floor_start(int record)
{
#ifdef WITH_VRAMTRACE
    recording = record != 0;
#else
    if (record)
        return -2;
#endif
    if (wrapped == nullptr) {
        wrapped = c10::GetCPUAllocator();
        wrapped_delete = wrapped->raw_deleter();
        if (wrapped_delete == nullptr) {
            wrapped = nullptr;
            return -1;
        }
        c10::SetCPUAllocator(&watch, 0);
    }
    watching = true;
    callback = at::addGlobalCallback(at::RecordFunctionCallback(op_started, op_ended)
                                         .needsInputs(true)
                                         .needsOutputs(true)
                                         .scopes({at::RecordScope::FUNCTION,
                                                  at::RecordScope::BACKWARD_FUNCTION}));
    return 0;
}

// Stops observing. The wrapper stays the CPU allocator (passing through):
// storages it made are freed through its deleter whenever they die.
void floor_stop(void)
{
    watching = false;
    recording = false;
    at::removeCallback(callback);
    callback = 0;
}

// ops, tensor uses, allocations, frees, Python frames read, live
// allocations, events handed to vramtrace, distinct stacks interned, Python
// stacks read (read after floor_stop: the GIL guards the stack counters)
void floor_counts(uint64_t out[9])
{
    std::lock_guard<std::mutex> g(books_lock);
    out[0] = ops;
    out[1] = uses;
    out[2] = allocs;
    out[3] = frees;
    out[4] = frames_seen;
    out[5] = by_data.size();
#ifdef WITH_VRAMTRACE
    out[6] = recorded;
    out[7] = stack_ids.size();
#else
    out[6] = out[7] = 0;
#endif
    out[8] = stacks_read;
}

}  // extern "C"
