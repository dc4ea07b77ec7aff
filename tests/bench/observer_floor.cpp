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
#include <Python.h>

#include <ATen/record_function.h>
#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>

#include <atomic>
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
        if (by_data.erase(p) > 0)
            frees++;
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
        uint64_t stack = python_stack();   // before the lock: it takes the GIL
        c10::Device device = d.device();
        void *p = d.release_context();
        {
            std::lock_guard<std::mutex> g(books_lock);
            by_data[p] = Storage{static_cast<uint64_t>(n), stack, ops};
            allocs++;
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

// Starts observing: ops of every thread, allocations by the CPU allocator.
// Returns 0, or -1 when the CPU allocator in place has no raw deleter (not
// the default kind: nothing to wrap).
int floor_start(void)
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
    watching = true;
    callback = at::addGlobalCallback(at::RecordFunctionCallback(op_started, op_ended)
                                         .needsInputs(true)
                                         .needsOutputs(true)
                                         .scopes({at::RecordScope::FUNCTION}));
    return 0;
}

// Stops observing. The wrapper stays the CPU allocator (passing through):
// storages it made are freed through its deleter whenever they die.
void floor_stop(void)
{
    watching = false;
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
