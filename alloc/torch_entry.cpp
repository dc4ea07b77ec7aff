/* alloc/torch_entry.cpp - the two entry points vramtrace.torch.use_allocator()
 * hands to PyTorch's CUDAPluggableAllocator (libvramtrace_torch.so).
 *
 * Why C++ at all: PyTorch calls a pluggable allocator's alloc function and
 * uses whatever pointer it returns; a NULL for a non-empty request becomes a
 * tensor at address 0 (PyTorch 2.14: no check), which a kernel then faults on
 * or, on the simulated device, silently "works". The error handling PyTorch
 * documents for pluggable allocators is a C++ exception thrown from the
 * alloc function (its own tests throw std::runtime_error; RMM throws
 * std::bad_alloc): it unwinds through PyTorch's C++ into the Python binding,
 * which raises RuntimeError with the exception's message, and the program can
 * catch it and go on. The core library stays C (and free of libstdc++, since
 * it is preloaded into every program); only this small library, loaded by
 * PyTorch itself, is C++.
 */
#include <cstdio>
#include <new>

#include "vramtrace.h"

#define VT_TORCH_API extern "C" __attribute__((visibility("default")))

namespace {

/* std::bad_alloc, so code that catches allocation failures generically
 * catches it; its message says what PyTorch's own OOM message says first. */
class out_of_memory : public std::bad_alloc {
public:
    out_of_memory(ssize_t size, int device)
    {
        std::snprintf(msg_, sizeof msg_,
                      "CUDA out of memory (vramtrace): tried to allocate %zd bytes on device %d "
                      "after releasing the cache (vramtrace.stats() and a snapshot say what "
                      "holds the memory)", size, device);
    }
    const char *what() const noexcept override { return msg_; }

private:
    char msg_[256];
};

} // namespace

/* vt_malloc, but a failed non-empty request throws instead of returning
 * NULL (see the top of this file). */
VT_TORCH_API void *vt_torch_malloc(ssize_t size, int device, cudaStream_t stream)
{
    void *p = vt_malloc(size, device, stream);
    if (p == nullptr && size > 0)
        throw out_of_memory(size, device);
    return p;
}

/* vt_free, unchanged: it never fails in a way PyTorch could act on. */
VT_TORCH_API void vt_torch_free(void *ptr, ssize_t size, int device, cudaStream_t stream)
{
    vt_free(ptr, size, device, stream);
}
