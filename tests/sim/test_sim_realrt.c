/* tests/sim/test_sim_realrt.c - a plain C program linked against the REAL
 * toolkit's libcudart (-L<cuda>/lib64 -lcudart, no rpath to it) runs on the
 * simulator: with LD_LIBRARY_PATH at the sim directory, the dynamic linker
 * binds its versioned imports (cudaMalloc@libcudart.so.13) to the sim. */
#include <cuda_runtime_api.h>

#include "harness.h"
#include "test_sim_util.h"

#ifndef SIM_LIBDIR
#error "SIM_LIBDIR must name the sim build directory"
#endif

TEST(binary_linked_against_toolkit_runs_on_sim)
{
    const char *origin = cuda_malloc_origin();
    ASSERT(origin != NULL);
    ASSERT_STR_CONTAINS(origin, SIM_LIBDIR);
    ASSERT_STR_CONTAINS(origin, "libcudart.so.13");

    void *p;
    cudaStream_t s;
    ASSERT_OK(cudaStreamCreate(&s));
    ASSERT_OK(cudaMalloc(&p, 1 << 20));
    ASSERT_OK(cudaMemsetAsync(p, 7, 1 << 20, s));
    unsigned char host[16];
    ASSERT_OK(cudaMemcpyAsync(host, p, sizeof host, cudaMemcpyDeviceToHost, s));
    ASSERT_OK(cudaStreamSynchronize(s));
    ASSERT_EQ(host[15], 7);
    ASSERT_OK(cudaFree(p));
    ASSERT_OK(cudaStreamDestroy(s));

    simcuda_counters c;
    ASSERT(loaded_driver_stats(&c));
    ASSERT_EQ(c.allocs, 1);
    ASSERT_EQ(c.frees, 1);
}

TEST_MAIN()
