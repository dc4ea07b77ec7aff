// hook_floor.cpp - bench_track_parts.py's "hook" variant: PyTorch's own cost
// of any op observer built on RecordFunction, as track()'s op observer asks
// for it (scripts/vramtrace/native/trackobs/observer.cpp: FUNCTION scope, the
// ops' inputs and outputs, a thread-local callback that the autograd engine's
// threads inherit), with a callback that does nothing. What the observer
// adds above this is its own; this much is PyTorch's: every op, the ones a
// kernel calls inside included, boxes its arguments and keeps its results for
// the callback, and the engine names each node's RecordFunction
// ("autograd::engine::evaluate_function: ...") once any FUNCTION callback is
// installed. Built at run time against the installed torch
// (torch.utils.cpp_extension), loaded with ctypes.
#include <ATen/record_function.h>

#include <atomic>

namespace {

// calls seen: the bench checks the hook ran (a hook installed nowhere would
// read as a floor of nothing); one relaxed add is all it does
std::atomic<unsigned long long> calls{0};

std::unique_ptr<at::ObserverContext> started(const at::RecordFunction &)
{
    calls.fetch_add(1, std::memory_order_relaxed);
    return nullptr;
}

void ended(const at::RecordFunction &, at::ObserverContext *) {}

}  // namespace

extern "C" {

// Installs the callback on the calling thread (and so on the engine threads
// running its backward). Returns its handle.
unsigned long long hook_floor_start(void)
{
    return at::addThreadLocalCallback(at::RecordFunctionCallback(started, ended)
                                          .needsInputs(true)
                                          .needsOutputs(true)
                                          .scopes({at::RecordScope::FUNCTION}));
}

// The calls the callback has seen, on every thread.
unsigned long long hook_floor_calls(void)
{
    return calls.load(std::memory_order_relaxed);
}

}  // extern "C"
