/* tests/sim/test_sim_ipc.c - legacy interprocess memory handles between two
 * real processes: the exporter is this test, the importer sim_ipc_peer,
 * started with fork+exec (SIM_IPC_PEER is its path). */
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

static void to_hex(const cudaIpcMemHandle_t *h, char *out)
{
    for (size_t i = 0; i < sizeof h->reserved; i++)
        sprintf(out + 2 * i, "%02x", (unsigned char)h->reserved[i]);
}

/* Run sim_ipc_peer with these arguments; its exit status (-1: no status). */
static int run_peer(const char *mode, const cudaIpcMemHandle_t *h, const char *a, const char *b)
{
    char hex[2 * sizeof h->reserved + 1];
    to_hex(h, hex);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        execl(SIM_IPC_PEER, SIM_IPC_PEER, mode, hex, a, b, (char *)NULL);
        _exit(127);
    }
    int st = 0;
    if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st))
        return -1;
    return WEXITSTATUS(st);
}

TEST(exported_allocation_is_shared_both_ways_with_another_process)
{
    enum { N = 1 << 20 };
    void *before = NULL, *buf = NULL, *after = NULL;
    ASSERT_OK(cudaMalloc(&before, 4096));
    ASSERT_OK(cudaMalloc(&buf, N));
    ASSERT_OK(cudaMalloc(&after, 4096));
    ASSERT_OK(cudaMemset(buf, 0x11, N));
    /* The handle names the whole allocation: an interior pointer gives the
     * handle of the base. */
    cudaIpcMemHandle_t h, hi;
    ASSERT_OK(cudaIpcGetMemHandle(&h, buf));
    ASSERT_OK(cudaIpcGetMemHandle(&hi, (char *)buf + 4096));
    ASSERT_EQ(memcmp(&h, &hi, sizeof h), 0);
    /* Written after the export: the importer sees it too. */
    ASSERT_OK(cudaMemset(buf, 0x5a, N));
    ASSERT_OK(cudaDeviceSynchronize());
    int legacy = 0;
    ASSERT_EQ(cuPointerGetAttribute(&legacy, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE,
                                    (CUdeviceptr)(uintptr_t)buf), CUDA_SUCCESS);
    ASSERT_EQ(legacy, 1);
    ASSERT_EQ(run_peer("check-write", &h, "1048576", "8192"), 0);
    unsigned char back[64 + 2];
    ASSERT_OK(cudaMemcpy(back, (char *)buf + 8192 - 1, sizeof back, cudaMemcpyDeviceToHost));
    ASSERT_EQ(back[0], 0x5a);
    for (int i = 1; i <= 64; i++)
        ASSERT_EQ(back[i], 0xa5);
    ASSERT_EQ(back[65], 0x5a);
    ASSERT_OK(cudaFree(before));
    ASSERT_OK(cudaFree(after));
    ASSERT_OK(cudaFree(buf));
}

TEST(an_open_handle_is_reference_counted_in_the_importer)
{
    void *buf = NULL;
    ASSERT_OK(cudaMalloc(&buf, 8192));
    ASSERT_OK(cudaMemset(buf, 0x5a, 8192));
    cudaIpcMemHandle_t h;
    ASSERT_OK(cudaIpcGetMemHandle(&h, buf));
    ASSERT_EQ(run_peer("open-twice", &h, NULL, NULL), 0);
    ASSERT_OK(cudaFree(buf));
}

TEST(handle_does_not_open_in_the_exporting_process)
{
    void *buf = NULL, *p = NULL;
    ASSERT_OK(cudaMalloc(&buf, 4096));
    cudaIpcMemHandle_t h;
    ASSERT_OK(cudaIpcGetMemHandle(&h, buf));
    ASSERT_EQ(cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess),
              cudaErrorDeviceUninitialized);   /* "invalid device context" */
    ASSERT_EQ(cudaIpcOpenMemHandle(&p, h, 0x80), cudaErrorInvalidValue);
    ASSERT_EQ(cudaIpcCloseMemHandle(buf), cudaErrorInvalidValue);
    cudaGetLastError();
    ASSERT_OK(cudaFree(buf));
}

TEST(legacy_ipc_refuses_pool_managed_and_host_memory)
{
    void *pool = NULL, *managed = NULL, *pinned = NULL;
    char host[64];
    cudaIpcMemHandle_t h;
    ASSERT_OK(cudaMallocAsync(&pool, 4096, 0));
    ASSERT_OK(cudaMallocManaged(&managed, 4096, cudaMemAttachGlobal));
    ASSERT_OK(cudaMallocHost(&pinned, 4096));
    ASSERT_EQ(cudaIpcGetMemHandle(&h, pool), cudaErrorInvalidValue);
    ASSERT_EQ(cudaIpcGetMemHandle(&h, managed), cudaErrorInvalidValue);
    ASSERT_EQ(cudaIpcGetMemHandle(&h, pinned), cudaErrorInvalidValue);
    ASSERT_EQ(cudaIpcGetMemHandle(&h, host), cudaErrorInvalidValue);
    int legacy = 1;
    ASSERT_EQ(cuPointerGetAttribute(&legacy, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE,
                                    (CUdeviceptr)(uintptr_t)pool), CUDA_SUCCESS);
    ASSERT_EQ(legacy, 0);
    cudaGetLastError();
    ASSERT_OK(cudaFreeAsync(pool, 0));
    ASSERT_OK(cudaFree(managed));
    ASSERT_OK(cudaFreeHost(pinned));
    ASSERT_OK(cudaDeviceSynchronize());
}

TEST(handle_of_freed_memory_no_longer_opens)
{
    void *buf = NULL;
    ASSERT_OK(cudaMalloc(&buf, 4096));
    cudaIpcMemHandle_t h, again;
    ASSERT_OK(cudaIpcGetMemHandle(&h, buf));
    ASSERT_OK(cudaFree(buf));
    char err[16];
    snprintf(err, sizeof err, "%d", (int)cudaErrorInvalidResourceHandle);
    ASSERT_EQ(run_peer("open-fails", &h, err, NULL), 0);
    /* The same address handed out again is a new allocation: a new handle. */
    void *p2 = NULL;
    ASSERT_OK(cudaMalloc(&p2, 4096));
    ASSERT_OK(cudaIpcGetMemHandle(&again, p2));
    ASSERT_NE(memcmp(&h, &again, sizeof h), 0);
    ASSERT_OK(cudaFree(p2));
}

TEST(driver_entry_points_come_from_get_proc_address)
{
    void *fn = NULL;
    CUdriverProcAddressQueryResult st;
    ASSERT_EQ(cuGetProcAddress("cuIpcGetMemHandle", &fn, 13000, 0, &st), CUDA_SUCCESS);
    ASSERT_EQ(st, CU_GET_PROC_ADDRESS_SUCCESS);
    ASSERT_PTR_EQ(fn, (void *)(uintptr_t)cuIpcGetMemHandle);
    ASSERT_EQ(cuGetProcAddress("cuIpcOpenMemHandle", &fn, 13000, 0, &st), CUDA_SUCCESS);
    ASSERT_PTR_EQ(fn, (void *)(uintptr_t)cuIpcOpenMemHandle_v2);
    ASSERT_EQ(cuGetProcAddress("cuIpcCloseMemHandle", &fn, 13000, 0, &st), CUDA_SUCCESS);
    ASSERT_PTR_EQ(fn, (void *)(uintptr_t)cuIpcCloseMemHandle);
}

TEST_MAIN()
