/* tests/sim/kernel_limits.h - what a kernel may use on the simulated sm_90
 * device, and how many of its blocks fit on a multiprocessor: one copy for
 * the runtime's registered kernels (runtime_kernel_attrs.c), the driver's
 * loaded ones (driver_module.c) and the device's attributes (sim_device.c).
 * Device code never runs, so every kernel is a plain one: 32 registers a
 * thread, no static shared memory.
 * Figures: CUDA C Programming Guide, compute capability 9.0 table;
 * cudaDeviceGetAttribute as sim_device.c reports it. */
#ifndef SIM_KERNEL_LIMITS_H
#define SIM_KERNEL_LIMITS_H

#include <stddef.h>

#define SIM_MULTIPROCESSORS   132        /* = CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT (an H200's) */
#define SIM_REGS_PER_THREAD   32
#define SIM_REGS_PER_SM       65536      /* 64 K 32-bit registers per multiprocessor (and per block) */
#define SIM_SMEM_RESERVED     1024       /* the driver's shared memory reserved per block */
#define SIM_SMEM_PER_SM       233472     /* 228 KiB per multiprocessor */
#define SIM_SMEM_OPTIN        232448     /* = CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN */
#define SIM_SMEM_DEFAULT      49152      /* dynamic shared memory without opting in */
#define SIM_BLOCKS_PER_SM     32
#define SIM_THREADS_PER_SM    2048

/* Blocks of `block_size` threads and `dyn_smem` bytes of dynamic shared
 * memory resident on one multiprocessor at once: the least of what its
 * threads, registers, shared memory and block slots allow. -1: a size no
 * block can have. */
static inline int sim_blocks_per_sm(int block_size, size_t dyn_smem)
{
    if (block_size <= 0 || block_size > 1024 || dyn_smem > SIM_SMEM_OPTIN)
        return -1;
    int warps = (block_size + 31) / 32;
    int by_threads = SIM_THREADS_PER_SM / (warps * 32);
    int by_regs = SIM_REGS_PER_SM / (warps * 32 * SIM_REGS_PER_THREAD);
    int by_smem = dyn_smem ? (int)(SIM_SMEM_PER_SM / (dyn_smem + SIM_SMEM_RESERVED)) : SIM_BLOCKS_PER_SM;
    int n = SIM_BLOCKS_PER_SM;
    if (by_threads < n) n = by_threads;
    if (by_regs < n) n = by_regs;
    if (by_smem < n) n = by_smem;
    return n;
}

#endif
