// vramtrace/native/pool_observer.cpp - PyTorch's caching allocator, observed.
//
// Built at first use against the torch in use (vramtrace/_pool_observer.py),
// like track()'s op observer: it needs torch's headers and C++ ABI.
//
// PyTorch calls every tracker attached to its CUDA caching allocator with each
// TraceEntry (alloc, free_requested, free_completed, segment_alloc/free/map/
// unmap, oom), whether or not its own recorder (_record_memory_history) is on,
// on the thread that allocates and with that device's allocator lock held.
// The tracker below hands each one to vramtrace's vt_pool_event(), which
// captures the stack and writes one event into the ring: it takes no lock of
// its own, never the GIL, and never calls back into the allocator.
//
// The allocator's own segments reach the device untouched: vt_pool_observe()
// tells vramtrace's hooks that device calls made from libc10_cuda.so are the
// allocator's, and this object's own frames are left out of the stacks.

#include <c10/cuda/CUDACachingAllocator.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

namespace {

using c10::CachingDeviceAllocator::TraceEntry;
namespace alloc = c10::cuda::CUDACachingAllocator;

// vramtrace's entry points (include/vramtrace.h), passed in as addresses so
// that this object links nothing of vramtrace's.
using pool_event_fn = int (*)(int kind, int device, uint64_t addr, uint64_t size,
                              uint64_t stream, uint64_t aux);
using pool_observe_fn = int (*)(const void *pool_code, const void *observer_code);

// Event kinds and pools of vramtrace/format.h (values fixed by the format).
enum : int { EV_ALLOC = 1, EV_FREE_REQUESTED = 2, EV_FREE_COMPLETED = 3,
             EV_SEGMENT_ALLOC = 4, EV_SEGMENT_FREE = 5, EV_OOM = 7 };
enum : uint64_t { POOL_SMALL = 0, POOL_LARGE = 1 };
constexpr uint64_t kSmallSegment = 2u << 20;   // PyTorch's small-pool segment size

pool_event_fn record = nullptr;
bool attached = false;

// The block size PyTorch counts for a request of `size` bytes in its
// allocated figures: 512-byte multiples (kMinBlockSize). A block handed out
// whole because its remainder was too small to split is larger; the trace
// entry does not say so, and the figures differ by that remainder.
uint64_t block_size(uint64_t size)
{
    constexpr uint64_t kMin = 512;
    return size < kMin ? kMin : (size + kMin - 1) / kMin * kMin;
}

void on_entry(const TraceEntry &e)
{
    pool_event_fn fn = record;
    if (!fn)
        return;
    const int dev = static_cast<int>(e.device_);
    const uint64_t addr = static_cast<uint64_t>(e.addr_);
    const uint64_t size = static_cast<uint64_t>(e.size_);
    const uint64_t stream = reinterpret_cast<uintptr_t>(e.stream_);
    switch (e.action_) {
    case TraceEntry::ALLOC:
        fn(EV_ALLOC, dev, addr, size, stream, block_size(size));
        break;
    case TraceEntry::FREE_REQUESTED:
        fn(EV_FREE_REQUESTED, dev, addr, size, stream, 0);
        break;
    case TraceEntry::FREE_COMPLETED:
        fn(EV_FREE_COMPLETED, dev, addr, size, stream, 0);
        break;
    case TraceEntry::SEGMENT_ALLOC:
    case TraceEntry::SEGMENT_MAP:   // expandable segments: each mapped range
        fn(EV_SEGMENT_ALLOC, dev, addr, size, stream,
           size == kSmallSegment ? POOL_SMALL : POOL_LARGE);
        break;
    case TraceEntry::SEGMENT_FREE:
    case TraceEntry::SEGMENT_UNMAP:
        fn(EV_SEGMENT_FREE, dev, addr, size, stream, 0);
        break;
    case TraceEntry::OOM: {
        // addr_: the device's free bytes; its total (the current device is
        // the one that ran out, as for PyTorch's own cudaMemGetInfo just
        // before) tells a report what other processes held
        size_t dfree = 0, dtotal = 0;
        if (cudaMemGetInfo(&dfree, &dtotal) != cudaSuccess) {
            (void)cudaGetLastError();   // leave no error for PyTorch to find
            dtotal = 0;
        }
        fn(EV_OOM, dev, static_cast<uint64_t>(dtotal), size, stream, addr);
        break;
    }
    default:   // SNAPSHOT, ANNOTATE: nothing allocated
        break;
    }
}

void put_why(char *why, size_t len, const std::string &s)
{
    if (why && len)
        std::snprintf(why, len, "%s", s.c_str());
}

}  // namespace

// Attach to PyTorch's CUDA caching allocator (after CUDA's lazy
// initialization: the per-device allocators must exist). `event` and
// `observe` are the addresses of vramtrace's vt_pool_event and
// vt_pool_observe. Returns 0; 1 when PyTorch uses another allocator than its
// caching one (nothing to observe: `why` says which); -1 with the reason in
// `why` when attaching failed.
extern "C" int vt_torch_pool_attach(void *event, void *observe, char *why, size_t len)
{
    if (attached)
        return 0;
    if (!event || !observe) {
        put_why(why, len, "vramtrace's library has no vt_pool_event (an older libvramtrace)");
        return -1;
    }
    try {
        alloc::CUDAAllocator *a = alloc::get();
        if (!a) {
            put_why(why, len, "PyTorch's CUDA allocator does not exist yet");
            return -1;
        }
        std::string name = a->name();
        if (name != "native") {
            // no cache of PyTorch's own: each of its allocations is one the
            // preload sees (cudaMallocAsync) or one vramtrace makes itself
            // (use_allocator()); other pluggable allocators are their own
            put_why(why, len, "PyTorch's CUDA allocator is '" + name +
                                  "', not its caching allocator: its allocations are recorded "
                                  "as the device calls it makes");
            return 1;
        }
        pool_observe_fn observe_fn;
        std::memcpy(&observe_fn, &observe, sizeof observe_fn);
        // An address inside libc10_cuda.so (the allocator's code), and one
        // inside this object.
        const void *pool_code = static_cast<const void *>(&alloc::allocator);
        const void *own_code = reinterpret_cast<const void *>(&on_entry);
        if (observe_fn(pool_code, own_code) != 0) {
            put_why(why, len, "libc10_cuda.so was not found among the loaded objects");
            return -1;
        }
        std::memcpy(&record, &event, sizeof record);
        alloc::attachAllocatorTraceTracker(on_entry);
        attached = true;
        return 0;
    } catch (const std::exception &ex) {
        put_why(why, len, std::string("attaching to PyTorch's allocator failed: ") + ex.what());
        return -1;
    }
}
