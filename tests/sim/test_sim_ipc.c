/* tests/sim/test_sim_ipc.c - legacy interprocess memory and event handles
 * between two real processes: the exporter is this test, the importer
 * sim_ipc_peer, started with fork+exec (SIM_IPC_PEER is its path). */
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
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

/* An event handle as the memory handle's 64 bytes (sim_ipc_peer reads both). */
static cudaIpcMemHandle_t as_mem_handle(const cudaIpcEventHandle_t *h)
{
    cudaIpcMemHandle_t m;
    _Static_assert(sizeof m.reserved == sizeof h->reserved, "handles of one size");
    memcpy(m.reserved, h->reserved, sizeof m.reserved);
    return m;
}

TEST(an_event_handle_is_only_for_interprocess_events_and_other_processes)
{
    cudaEvent_t plain, shared, ev = NULL;
    cudaIpcEventHandle_t h;
    ASSERT_OK(cudaEventCreateWithFlags(&plain, cudaEventDisableTiming));
    ASSERT_EQ(cudaIpcGetEventHandle(&h, plain), cudaErrorInvalidResourceHandle);
    ASSERT_EQ(cudaEventCreateWithFlags(&shared, cudaEventInterprocess), cudaErrorInvalidValue);
    ASSERT_OK(cudaEventCreateWithFlags(&shared, cudaEventInterprocess | cudaEventDisableTiming));
    ASSERT_EQ(cudaIpcGetEventHandle(NULL, shared), cudaErrorInvalidValue);
    ASSERT_OK(cudaIpcGetEventHandle(&h, shared));
    ASSERT_EQ(cudaIpcOpenEventHandle(&ev, h), cudaErrorDeviceUninitialized);  /* this process */
    cudaIpcEventHandle_t zero;
    memset(&zero, 0, sizeof zero);
    ASSERT_EQ(cudaIpcOpenEventHandle(&ev, zero), cudaErrorInvalidValue);
    /* once its maker destroyed it, the handle no longer opens */
    ASSERT_OK(cudaEventDestroy(shared));
    cudaIpcMemHandle_t m = as_mem_handle(&h);
    char err[16];
    snprintf(err, sizeof err, "%d", (int)cudaErrorInvalidResourceHandle);
    ASSERT_EQ(run_peer("event-open-fails", &m, err, NULL), 0);
    ASSERT_OK(cudaEventDestroy(plain));
    cudaGetLastError();
}

/* A host function that holds its stream until *arg is set. */
static void CUDART_CB hold_until_released(void *arg)
{
    const struct timespec pause = { 0, 1000 * 1000 };
    while (!atomic_load((atomic_int *)arg))
        nanosleep(&pause, NULL);
}

TEST(an_interprocess_event_orders_work_across_processes)
{
    /* This process records the event behind work that waits for a release;
     * the peer opens it, sees it and a stream waiting for it not ready,
     * says so, then synchronizes with it: released here only then, so its
     * synchronize returns once this record completed. Then the peer records
     * the event itself, which this process sees complete. */
    static atomic_int released;
    atomic_store(&released, 0);
    cudaStream_t s;
    cudaEvent_t ev;
    ASSERT_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    ASSERT_OK(cudaEventCreateWithFlags(&ev, cudaEventInterprocess | cudaEventDisableTiming |
                                                cudaEventBlockingSync));
    ASSERT_OK(cudaLaunchHostFunc(s, hold_until_released, &released));
    ASSERT_OK(cudaEventRecord(ev, s));
    cudaIpcEventHandle_t h;
    ASSERT_OK(cudaIpcGetEventHandle(&h, ev));
    ASSERT_EQ(cudaEventQuery(ev), cudaErrorNotReady);

    cudaIpcMemHandle_t m = as_mem_handle(&h);
    char hex[2 * sizeof m.reserved + 1];
    to_hex(&m, hex);
    int out[2];
    ASSERT_EQ(pipe(out), 0);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(out[1], 1);
        close(out[0]);
        execl(SIM_IPC_PEER, SIM_IPC_PEER, "event-pending", hex, (char *)NULL);
        _exit(127);
    }
    ASSERT_MSG(pid > 0, "fork");
    close(out[1]);
    FILE *said = fdopen(out[0], "r");
    char line[64] = "";
    ASSERT_MSG(fgets(line, sizeof line, said) != NULL, "the peer said nothing");
    ASSERT_STR_EQ(line, "pending\n");
    ASSERT_EQ(cudaEventQuery(ev), cudaErrorNotReady);
    atomic_store(&released, 1);
    ASSERT_OK(cudaStreamSynchronize(s));
    int st = 0;
    ASSERT_EQ(waitpid(pid, &st, 0), pid);
    ASSERT_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the peer failed (status %d)", st);
    ASSERT_MSG(fgets(line, sizeof line, said) != NULL, "no second line");
    ASSERT_STR_EQ(line, "ok\n");
    fclose(said);
    /* the peer's own record completed: the event is */
    ASSERT_OK(cudaEventQuery(ev));
    ASSERT_OK(cudaEventSynchronize(ev));
    ASSERT_OK(cudaEventDestroy(ev));
    ASSERT_OK(cudaStreamDestroy(s));
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
    ASSERT_EQ(cuGetProcAddress("cuIpcGetEventHandle", &fn, 13000, 0, &st), CUDA_SUCCESS);
    ASSERT_PTR_EQ(fn, (void *)(uintptr_t)cuIpcGetEventHandle);
    ASSERT_EQ(cuGetProcAddress("cuIpcOpenEventHandle", &fn, 13000, 0, &st), CUDA_SUCCESS);
    ASSERT_PTR_EQ(fn, (void *)(uintptr_t)cuIpcOpenEventHandle);
}

TEST_MAIN()
