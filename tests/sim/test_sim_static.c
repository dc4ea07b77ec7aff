/* tests/sim/test_sim_static.c - a program linked against libcudart_static.a
 * (plus -ldl -lpthread), like nvcc's default: no libcudart or libcuda in its
 * DT_NEEDED; the runtime inside it finds the driver with dlopen and
 * cuGetProcAddress_v2, which the driver's counters prove. */
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <string.h>

#include "harness.h"
#include "test_sim_util.h"

extern ElfW(Dyn) _DYNAMIC[];

/* Does this executable's own dynamic section need a library named like `prefix`? */
static int needs(const char *prefix)
{
    const char *strtab = NULL;
    for (ElfW(Dyn) *d = _DYNAMIC; d->d_tag != DT_NULL; d++)
        if (d->d_tag == DT_STRTAB)
            strtab = (const char *)d->d_un.d_ptr;
    ASSERT(strtab != NULL);
    for (ElfW(Dyn) *d = _DYNAMIC; d->d_tag != DT_NULL; d++)
        if (d->d_tag == DT_NEEDED && strncmp(strtab + d->d_un.d_val, prefix, strlen(prefix)) == 0)
            return 1;
    return 0;
}

TEST(static_runtime_has_no_cuda_dt_needed)
{
    ASSERT_EQ(needs("libc."), 1);                    /* the check itself works */
    ASSERT_EQ(needs("libcudart"), 0);
    ASSERT_EQ(needs("libcuda"), 0);
}

TEST(static_runtime_reaches_driver_through_get_proc_address)
{
    /* Before any runtime call the driver is not loaded. */
    ASSERT_PTR_EQ(dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD), NULL);
    void *p;
    ASSERT_OK(cudaMalloc(&p, 1 << 20));
    simcuda_counters c;
    ASSERT_MSG(loaded_driver_stats(&c), "the runtime did not load the simulated libcuda.so.1");
    ASSERT_EQ(c.mem_alloc_calls, 1);
    ASSERT_EQ(c.bytes_in_use, 1 << 20);
    ASSERT_OK(cudaFree(p));
    ASSERT(loaded_driver_stats(&c));
    ASSERT_EQ(c.frees, 1);
    /* The runtime in this binary is the archive's, not a shared one. */
    const char *origin = cuda_malloc_origin();
    ASSERT(origin != NULL);
    ASSERT_MSG(strstr(origin, "libcudart") == NULL, "cudaMalloc from %s", origin);
}

TEST_MAIN()
