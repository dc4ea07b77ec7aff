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
#if __has_include(<c10/core/AllocatorConfig.h>)
#include <c10/core/AllocatorConfig.h>
#define VT_HAVE_ACCEL_CONFIG 1
#endif

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <type_traits>
#include <utility>

namespace {

namespace alloc = c10::cuda::CUDACachingAllocator;

}  // namespace

// TraceEntry is c10::CachingDeviceAllocator's since torch 2.11 and
// c10::cuda::CUDACachingAllocator's before (2.2 to 2.10; 2.0 and 2.1 have no
// trace tracker to observe with): named through both, it is found in
// whichever has it (the namespace declared for a torch that has none of that
// name).
namespace c10::CachingDeviceAllocator {}
namespace torch_allocator_names {
using namespace c10::cuda::CUDACachingAllocator;
using namespace c10::CachingDeviceAllocator;
}  // namespace torch_allocator_names

namespace {

using TraceEntry = torch_allocator_names::TraceEntry;

// vramtrace's entry points (include/vramtrace.h), passed in as addresses so
// that this object links nothing of vramtrace's.
using pool_event_fn = int (*)(int kind, int device, uint64_t addr, uint64_t size,
                              uint64_t stream, uint64_t aux);
using pool_observe_fn = int (*)(const void *pool_code, const void *observer_code);
using pool_oom_fn = int (*)(int device, uint64_t request, uint64_t free_bytes, uint64_t total,
                            uint64_t stream, uint64_t pool);

// Event kinds and pools of vramtrace/format.h (values fixed by the format).
enum : int { EV_ALLOC = 1, EV_FREE_REQUESTED = 2, EV_FREE_COMPLETED = 3,
             EV_SEGMENT_ALLOC = 4, EV_SEGMENT_FREE = 5, EV_OOM = 7 };
enum : uint64_t { POOL_SMALL = 0, POOL_LARGE = 1 };
constexpr uint64_t kSmallSegment = 2u << 20;   // PyTorch's small-pool segment size

pool_event_fn record = nullptr;
pool_oom_fn record_oom = nullptr;   // nullptr: an older libvramtrace, OOMs by `record`
bool attached = false;

// The first of `divisions` equal steps between the powers of two around
// `size` that is not below it (1200 in 4 steps between 1024 and 2048: 1280);
// `divisions` counts as the largest power of two not above it, and a step
// that comes out 0 gives the next power of two.
uint64_t power2_division_ceiling(uint64_t size, uint64_t divisions)
{
    if ((size & (size - 1)) == 0)
        return size;
    const uint64_t floor2 = uint64_t(1) << (63 - __builtin_clzll(size));
    const uint64_t step = floor2 >> (63 - __builtin_clzll(divisions));
    if (step == 0)
        return floor2 << 1;
    const uint64_t down = size & ~(step - 1);
    return down == size ? size : down + step;
}

// The block size PyTorch counts for a request of `size` bytes in its
// allocated figures (its round_size): 512-byte multiples (kMinBlockSize), or
// with roundup_power2_divisions (PYTORCH_CUDA_ALLOC_CONF) set for the size,
// the next of that many steps between two powers of two. The replay's model
// of PyTorch's allocator has the same rules (round_size and should_split in
// alloc/replay/torch_malloc.c); this object, built against torch at run time
// and linking nothing of libvramtrace's, keeps its own copy: a change to one
// is a change to both (tests: test_torch_observed_recording's whole blocks against
// memory_allocated(), test_replay's torch rules).
uint64_t block_size(uint64_t size)
{
    constexpr uint64_t kMin = 512;
    if (size < kMin)
        return kMin;
#ifdef VT_HAVE_ACCEL_CONFIG
    const uint64_t divisions =
        c10::CachingAllocator::AcceleratorAllocatorConfig::roundup_power2_divisions(size);
    if (divisions > 1 && size > kMin * divisions)
        return power2_division_ceiling(size, divisions);
#endif
    return (size + kMin - 1) / kMin * kMin;
}

// A block of the large pool handed out whole, because what would be left of
// the free block it came from is too small to split (1 MiB or less; or any
// remainder of a request of max_split_size or more: PyTorch's should_split),
// is larger than its request: 20 MiB for a 19.5 MiB tensor in a fresh 20 MiB
// segment, and memory_allocated() counts all of it. The trace entry gives
// only the request, so the free block is
// found here: PyTorch hands a block out from the start of a free block, and
// merges free neighbours when a block's free completes, so the free block at
// an allocation's address runs to the next block still allocated (free
// requested but not completed counts as allocated: PyTorch merges neither)
// or to its segment's end. Followed for the large pool's segments this
// observer saw allocated (SEGMENT_ALLOC of more than a small segment); the
// small pool splits any remainder (its blocks are their rounded request), so
// do expandable segments (SEGMENT_MAP: not followed), and a segment from
// before the observer attached is not known: there the rounded request is
// what is counted, as before.
struct DeviceBlocks {
    std::map<uint64_t, uint64_t> segments;   // large-pool segment start -> size
    std::map<uint64_t, uint64_t> blocks;     // allocated block start -> counted size
};
constexpr int kMaxDevices = 64;
constexpr uint64_t kSmallSize = 1u << 20;   // PyTorch's kSmallSize: the small pool's largest
// PyTorch's max_split_size (PYTORCH_CUDA_ALLOC_CONF; unlimited by default):
// a request of that size or more is never split off a larger block.
uint64_t max_split_size()
{
#ifdef VT_HAVE_ACCEL_CONFIG
    return c10::CachingAllocator::AcceleratorAllocatorConfig::max_split_size();
#else
    return UINT64_MAX;
#endif
}

// One per device, each touched only under that device's allocator lock (the
// tracker is called with it held); never destroyed (PyTorch may free blocks
// after static destructors ran).
DeviceBlocks *const device_blocks = new DeviceBlocks[kMaxDevices];

// The size PyTorch counts for the block it hands out at `addr` for a
// request of `size` bytes, remembered until the block's free completes.
uint64_t block_allocated(int dev, uint64_t addr, uint64_t size)
{
    uint64_t rounded = block_size(size);
    if (dev < 0 || dev >= kMaxDevices || rounded <= kSmallSize)
        return rounded;   // the small pool (or a device out of range)
    DeviceBlocks &d = device_blocks[dev];
    auto seg = d.segments.upper_bound(addr);
    if (seg == d.segments.begin())
        return rounded;
    --seg;
    const uint64_t seg_end = seg->first + seg->second;
    if (addr >= seg_end)
        return rounded;   // in no segment followed
    auto next = d.blocks.upper_bound(addr);
    const uint64_t free_end = next != d.blocks.end() && next->first < seg_end ? next->first : seg_end;
    const uint64_t free_size = free_end - addr;
    const bool split = rounded < max_split_size() && free_size - rounded > kSmallSize;
    const uint64_t counted = free_size >= rounded && !split ? free_size : rounded;
    try {
        d.blocks[addr] = counted;
    } catch (...) {   // out of memory: never into PyTorch's allocation; the
        d.segments.erase(seg);   // segment, missing a block, is no longer followed
        return rounded;
    }
    return counted;
}

void block_freed(int dev, uint64_t addr)
{
    if (dev >= 0 && dev < kMaxDevices)
        device_blocks[dev].blocks.erase(addr);
}

void segment_allocated(int dev, uint64_t addr, uint64_t size, bool large)
{
    if (large && dev >= 0 && dev < kMaxDevices) {
        try {
            device_blocks[dev].segments[addr] = size;
        } catch (...) {   // out of memory: the segment is not followed
        }
    }
}

void segment_freed(int dev, uint64_t addr, uint64_t size)
{
    if (dev < 0 || dev >= kMaxDevices)
        return;
    DeviceBlocks &d = device_blocks[dev];
    d.segments.erase(addr);
    // none should be left; a block this observer missed must not outlive it
    d.blocks.erase(d.blocks.lower_bound(addr), d.blocks.lower_bound(addr + size));
}

// The private pool a segment serves (TraceEntry::mempool_, PyTorch 2.6 on:
// its pool's owner_MempoolId(), {0, 0} for the default pool): a CUDA graph's
// ({capture id, 0}) or one the program made (graph_pool_handle(),
// torch.cuda.MemPool: {0, uid}), as one nonzero id; 0 for the default pool
// and where the entry does not say (an older torch).
template <typename T, typename = void>
struct has_mempool : std::false_type {};
template <typename T>
struct has_mempool<T, std::void_t<decltype(std::declval<const T &>().mempool_)>>
    : std::true_type {};

template <typename T>
uint64_t private_pool(const T &e)
{
    if constexpr (has_mempool<T>::value) {
        const uint64_t first = static_cast<uint64_t>(e.mempool_.first);
        const uint64_t second = static_cast<uint64_t>(e.mempool_.second);
        constexpr uint64_t kMax = (uint64_t(1) << 54) - 1;   // VT_POOL_EVENT_PRIVATE's room
        if (first)
            return (first & kMax) << 1;
        if (second)
            return ((second & kMax) << 1) | 1;
    }
    (void)e;
    return 0;
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
        fn(EV_ALLOC, dev, addr, size, stream, block_allocated(dev, addr, size));
        break;
    case TraceEntry::FREE_REQUESTED:
        fn(EV_FREE_REQUESTED, dev, addr, size, stream, 0);
        break;
    case TraceEntry::FREE_COMPLETED:
        block_freed(dev, addr);
        fn(EV_FREE_COMPLETED, dev, addr, size, stream, 0);
        break;
    case TraceEntry::SEGMENT_ALLOC:
    case TraceEntry::SEGMENT_MAP:   // expandable segments: each mapped range
        segment_allocated(dev, addr, size,
                          e.action_ == TraceEntry::SEGMENT_ALLOC && size != kSmallSegment);
        // (VT_POOL_EVENT_PRIVATE: the pool kind, the private pool above it)
        fn(EV_SEGMENT_ALLOC, dev, addr, size, stream,
           (size == kSmallSegment ? POOL_SMALL : POOL_LARGE) | (private_pool(e) << 8));
        break;
    case TraceEntry::SEGMENT_FREE:
    case TraceEntry::SEGMENT_UNMAP:
        segment_freed(dev, addr, size);
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
        // and the pool the request was for: during a CUDA graph's capture
        // PyTorch's entry names the graph's private pool (seen on 2.14:
        // torch.cuda.memory._snapshot()'s "oom" entry, pool_id (1, 0))
        if (pool_oom_fn oom = record_oom)
            oom(dev, size, addr, static_cast<uint64_t>(dtotal), stream, private_pool(e));
        else
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
// initialization: the per-device allocators must exist). `event`, `observe`
// and `oom` are the addresses of vramtrace's vt_pool_event, vt_pool_observe
// and vt_pool_oom (NULL: an older library without it). Returns 0; 1 when
// PyTorch uses another allocator than its caching one (nothing to observe:
// `why` says which); -1 with the reason in `why` when attaching failed.
extern "C" int pool_observer_attach(void *event, void *observe, void *oom, char *why,
                                    size_t len)
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
        if (oom)
            std::memcpy(&record_oom, &oom, sizeof record_oom);
        alloc::attachAllocatorTraceTracker(on_entry);
        attached = true;
        return 0;
    } catch (const std::exception &ex) {
        put_why(why, len, std::string("attaching to PyTorch's allocator failed: ") + ex.what());
        return -1;
    }
}
