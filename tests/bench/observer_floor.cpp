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
//   - a MemoryReportingInfoBase (the profiler's "profile_memory" hook: the
//     CPU allocator reports every allocation and free to it) that records a
//     storage's birth with the Python stack that asked for it (the GIL taken,
//     the frames' code and instruction offset hashed) and forgets it at free.
// Both under one mutex: the autograd engine runs ops on its own threads.
#include <Python.h>

#include <ATen/record_function.h>
#include <c10/core/Allocator.h>
#include <c10/util/ThreadLocalDebugInfo.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>

namespace {

struct Storage {
    uint64_t bytes = 0;
    uint64_t born_stack = 0;   // hash of the Python frames at allocation
    uint64_t last_use = 0;     // op count at its last use
};

std::mutex books_lock;
std::unordered_map<const void *, Storage> by_data;   // allocations, by address
std::unordered_map<const void *, uint64_t> last_use; // StorageImpl -> op count
uint64_t ops = 0, uses = 0, allocs = 0, frees = 0, frames_seen = 0;
at::CallbackHandle callback = 0;

// The Python stack at this allocation, hashed (code object, instruction
// offset per frame). The allocator runs with the GIL released by the op's
// binding; PyGILState_Ensure takes it (or notes that this thread has it).
uint64_t python_stack()
{
    if (!Py_IsInitialized())
        return 0;
    PyGILState_STATE g = PyGILState_Ensure();
    uint64_t h = 1469598103934665603ull;
    PyFrameObject *f = PyThreadState_GetFrame(PyThreadState_Get());
    for (int depth = 0; f != nullptr && depth < 64; depth++) {
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
    PyGILState_Release(g);
    return h;
}

struct AllocationWatch final : public c10::MemoryReportingInfoBase {
    void reportMemoryUsage(void *ptr, int64_t size, size_t, size_t, c10::Device) override
    {
        if (size > 0) {
            uint64_t stack = python_stack();   // before the lock: it takes the GIL
            std::lock_guard<std::mutex> g(books_lock);
            by_data[ptr] = Storage{static_cast<uint64_t>(size), stack, ops};
            allocs++;
        } else if (size < 0) {
            std::lock_guard<std::mutex> g(books_lock);
            by_data.erase(ptr);
            frees++;
        }
    }
    bool memoryProfilingEnabled() const override { return true; }
};

void stamp(const c10::IValue &v)
{
    auto one = [](const at::Tensor &t) {
        if (t.defined() && t.has_storage()) {
            last_use[t.storage().unsafeGetStorageImpl()] = ops;
            uses++;
        }
    };
    if (v.isTensor()) {
        one(v.toTensor());
    } else if (v.isTensorList()) {
        for (const at::Tensor &t : v.toTensorList().vec())
            one(t);
    }
}

std::unique_ptr<at::ObserverContext> op_started(const at::RecordFunction &fn)
{
    std::lock_guard<std::mutex> g(books_lock);
    ops++;
    for (const c10::IValue &v : fn.inputs())
        stamp(v);
    return nullptr;
}

void op_ended(const at::RecordFunction &fn, at::ObserverContext *)
{
    std::lock_guard<std::mutex> g(books_lock);
    for (const c10::IValue &v : fn.outputs())
        stamp(v);
}

}  // namespace

extern "C" {

// Starts observing on this thread (the allocation watch is thread-local
// debug info: PyTorch carries it to the autograd engine's threads).
void floor_start(void)
{
    callback = at::addGlobalCallback(at::RecordFunctionCallback(op_started, op_ended)
                                         .needsInputs(true)
                                         .needsOutputs(true)
                                         .scopes({at::RecordScope::FUNCTION}));
    c10::ThreadLocalDebugInfo::_push(c10::DebugInfoKind::PROFILER_STATE,
                                     std::make_shared<AllocationWatch>());
}

void floor_stop(void)
{
    c10::ThreadLocalDebugInfo::_pop(c10::DebugInfoKind::PROFILER_STATE);
    at::removeCallback(callback);
    callback = 0;
}

// ops, tensor uses, allocations, frees, Python frames read, live allocations
void floor_counts(uint64_t out[6])
{
    std::lock_guard<std::mutex> g(books_lock);
    out[0] = ops;
    out[1] = uses;
    out[2] = allocs;
    out[3] = frees;
    out[4] = frames_seen;
    out[5] = by_data.size();
}

}  // extern "C"
