// observer_floor.cpp - the floor of a per-op observer written in C++ against
// PyTorch's own hooks, for bench_observer_floor.py (built there with
// torch.utils.cpp_extension against the installed torch; not part of
// vramtrace, whose public API it calls: libvramtrace.so is loaded first).
//
// What it does is what a tracker needs at the least, per op and per
// allocation, without entering Python per op:
//   - a RecordFunction callback (PyTorch's profiler hook: every op through
//     the dispatcher, composite ops and their parts too, and each backward
//     node's apply as a bracket) that reads every input and output tensor
//     and stamps its StorageImpl with the op count (its last use);
//   - the CPU allocator wrapped (c10::SetCPUAllocator, the hook allocator
//     replacements use), seeing each allocation and, through the wrapper's
//     deleter, each free. Not the profiler's memory-reporting slot
//     (ThreadLocalDebugInfo PROFILER_STATE): while anything sits there
//     torch.profiler refuses to start ("Profiler is already enabled on this
//     thread"), which would change the program.
// Each outermost op reads the Python stack once (the GIL taken, the frames'
// code and instruction offset hashed); its parts and its allocations use it.
// A backward op uses the stack of the forward op that made its autograd node
// (by sequence number), as track() charges it.
//
// floor_start(1) also records what track() records, through vramtrace's
// public API into its ring: each host allocation declared with its stack and
// released, each new tensor (a TensorImpl not seen alive before) with its
// op's name and stack, each use with the op's stack; a Python stack is
// interned once per call site (its hash -> the stack id).
// The books under one mutex: the autograd engine runs ops on its own threads.
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

#include "vramtrace.h"

namespace {

// A Python stack: its hash, and its vramtrace id when recording (0: none).
struct Stack {
    uint64_t hash = 0;
    uint32_t id = 0;
};

// An allocation seen: what a tracker keeps of it.
struct Allocation {
    uint64_t bytes = 0;
    uint64_t born_op = 0;   // the op count when it was made
    Stack born;
};

// A tensor seen alive: its id in the trace. The weak reference keeps the
// TensorImpl's memory (not its data) from being reused while it is here, so
// an address seen again is the same tensor unless the reference expired.
struct Tensor {
    c10::weak_intrusive_ptr<c10::TensorImpl> impl;
    uint64_t id = 0;
};

std::mutex books_lock;   // guards everything below but the GIL's and the threads' own
std::unordered_map<const void *, Allocation> allocations;   // by address
std::unordered_map<const void *, uint64_t> last_use;        // StorageImpl -> op count
std::unordered_map<const c10::TensorImpl *, Tensor> tensors;
std::unordered_map<int64_t, Stack> node_stacks;   // autograd node -> its forward op's stack
uint64_t ops = 0, uses = 0, allocs = 0, frees = 0, recorded = 0;

std::unordered_map<uint64_t, uint32_t> stack_ids;   // under the GIL: hash -> stack id
uint64_t stacks_read = 0, frames_seen = 0;          // under the GIL

thread_local int op_depth = 0;                  // ops open on this thread
thread_local Stack op_stack;                    // the stack they are charged to
thread_local std::vector<int64_t> open_nodes;   // backward nodes applied, innermost last

std::atomic<bool> watching{false}, recording{false};
at::CallbackHandle callback = 0;

// The Python stack here. The ops run with the GIL released by the op's
// binding; PyGILState_Ensure takes it (or notes that this thread has it).
// Recording, the first time a call site is seen its frames are formatted
// "file:line function" and interned.
Stack python_stack()
{
    Stack s;
    if (!Py_IsInitialized())
        return s;
    PyGILState_STATE g = PyGILState_Ensure();
    stacks_read++;
    std::vector<PyFrameObject *> frames;   // innermost first, each a reference
    s.hash = 1469598103934665603ull;
    PyFrameObject *f = PyThreadState_GetFrame(PyThreadState_Get());
    while (f != nullptr && frames.size() < 64) {
        PyCodeObject *code = PyFrame_GetCode(f);
        s.hash = (s.hash ^ reinterpret_cast<uintptr_t>(code)) * 1099511628211ull;
        s.hash = (s.hash ^ static_cast<uint64_t>(PyFrame_GetLasti(f))) * 1099511628211ull;
        Py_DECREF(code);
        frames.push_back(f);
        f = frames.size() < 64 ? PyFrame_GetBack(f) : nullptr;
    }
    frames_seen += frames.size();
    if (recording) {
        auto it = stack_ids.find(s.hash);
        if (it != stack_ids.end()) {
            s.id = it->second;
        } else {
            std::vector<std::string> text;
            for (PyFrameObject *f : frames) {
                PyCodeObject *code = PyFrame_GetCode(f);
                const char *file = PyUnicode_AsUTF8(code->co_filename);
                const char *name = PyUnicode_AsUTF8(code->co_name);
                text.push_back(std::string(file ? file : "?") + ":" +
                               std::to_string(PyFrame_GetLineNumber(f)) + " " +
                               (name ? name : "?"));
                Py_DECREF(code);
            }
            std::vector<const char *> lines;
            for (const std::string &one : text)
                lines.push_back(one.c_str());
            s.id = vt_stack_intern_frames(lines.data(), lines.size());
            stack_ids.emplace(s.hash, s.id);
        }
    }
    for (PyFrameObject *f : frames)
        Py_DECREF(f);
    PyErr_Clear();   // a frame's text that could not be read
    PyGILState_Release(g);
    return s;
}

// The allocator in place before ours, and its deleter: every allocation is
// made by it; ours only takes note. Only simple allocations (the data is the
// context, freed by the allocator's raw deleter) are noted, so that
// raw_allocate/raw_deallocate keep working through the wrapper.
at::Allocator *wrapped = nullptr;
c10::DeleterFnPtr wrapped_delete = nullptr;

void noted_delete(void *p)
{
    if (watching) {
        std::lock_guard<std::mutex> g(books_lock);
        if (allocations.erase(p) > 0) {
            frees++;
            // charged to the op running on this thread, if any: a free runs
            // anywhere (a Python object's death, the engine), and reading
            // frames here would take the GIL inside a deleter
            if (recording && vt_storage_external_free_stack(p, op_stack.id) == 0)
                recorded++;
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
        Stack born = op_depth > 0 ? op_stack : python_stack();   // the GIL before our lock
        c10::Device device = d.device();
        void *p = d.release_context();
        {
            std::lock_guard<std::mutex> g(books_lock);
            allocations[p] = Allocation{n, ops, born};
            allocs++;
            if (recording && vt_storage_external_stack(p, n, -1, born.id) == 0)
                recorded++;
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

// A tensor of this op: its storage's last use; recording, its use (or, for a
// tensor not seen alive before, its birth) in the trace. Under books_lock.
void stamp(const at::Tensor &t, const char *op_name, bool output)
{
    if (!t.defined() || !t.has_storage())
        return;
    last_use[t.storage().unsafeGetStorageImpl()] = ops;
    uses++;
    if (!recording)
        return;
    auto it = tensors.find(t.unsafeGetTensorImpl());
    if (it != tensors.end() && it->second.impl.expired()) {
        vt_tensor_drop(it->second.id);
        recorded++;
        tensors.erase(it);
        it = tensors.end();
    }
    if (it != tensors.end()) {
        vt_tensor_use_stack(it->second.id, op_stack.id);
    } else {
        uint64_t id = vt_tensor_new_stack(t.data_ptr(), t.nbytes(), 0,
                                          output ? op_name : "input", op_stack.id);
        tensors.emplace(t.unsafeGetTensorImpl(),
                        Tensor{c10::weak_intrusive_ptr<c10::TensorImpl>(t.getIntrusivePtr()), id});
    }
    recorded++;
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
        open_nodes.push_back(fn.seqNr());
        return nullptr;
    }
    bool charged = false;
    if (!open_nodes.empty()) {   // a backward op: its forward op's stack
        std::lock_guard<std::mutex> g(books_lock);
        auto it = node_stacks.find(open_nodes.back());
        if ((charged = it != node_stacks.end()))
            op_stack = it->second;
    }
    if (!charged && op_depth == 0)   // an outermost op: read where Python is
        op_stack = python_stack();   // (before our lock: it takes the GIL)
    op_depth++;
    std::lock_guard<std::mutex> g(books_lock);
    if (fn.seqNr() >= 0 && open_nodes.empty())   // it makes autograd node fn.seqNr()
        node_stacks[fn.seqNr()] = op_stack;
    ops++;
    for (const c10::IValue &v : fn.inputs())
        stamp_all(v, fn.name(), false);
    return nullptr;
}

void op_ended(const at::RecordFunction &fn, at::ObserverContext *)
{
    if (fn.scope() == at::RecordScope::BACKWARD_FUNCTION) {
        if (!open_nodes.empty())
            open_nodes.pop_back();
        return;
    }
    if (op_depth > 0)
        op_depth--;
    std::lock_guard<std::mutex> g(books_lock);
    for (const c10::IValue &v : fn.outputs())
        stamp_all(v, fn.name(), true);
}

}  // namespace

extern "C" {

// Starts observing: ops of every thread, allocations by the CPU allocator;
// `record`: into vramtrace too. Returns 0, or -1 when the CPU allocator in
// place has no raw deleter (not the default kind: nothing to wrap).
int floor_start(int record)
{
    if (wrapped == nullptr) {
        wrapped = c10::GetCPUAllocator();
        wrapped_delete = wrapped->raw_deleter();
        if (wrapped_delete == nullptr) {
            wrapped = nullptr;
            return -1;
        }
        c10::SetCPUAllocator(&watch, 0);
    }
    op_depth = 0;
    recording = record != 0;
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
// stacks read. Called with the GIL held (ctypes.PyDLL): it guards the last
// counters.
void floor_counts(uint64_t out[9])
{
    std::lock_guard<std::mutex> g(books_lock);
    out[0] = ops;
    out[1] = uses;
    out[2] = allocs;
    out[3] = frees;
    out[4] = frames_seen;
    out[5] = allocations.size();
    out[6] = recorded;
    out[7] = stack_ids.size();
    out[8] = stacks_read;
}

}  // extern "C"
