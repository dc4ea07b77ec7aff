/* tests/sim/sim_ipc_event.c - interprocess events: cuIpcGetEventHandle,
 * cuIpcOpenEventHandle, and the state every process that has one open
 * shares.
 *
 * What the real driver does, and this one too (sources in README.md):
 *  - only an event made with CU_EVENT_INTERPROCESS (which needs
 *    CU_EVENT_DISABLE_TIMING, checked by cuEventCreate) has a handle; any
 *    other is CUDA_ERROR_INVALID_HANDLE (the runtime's
 *    cudaErrorInvalidResourceHandle);
 *  - the handle opens in another process as an event of its own that
 *    behaves like a local one made with CU_EVENT_DISABLE_TIMING: record,
 *    query, synchronize and stream waits work in either process, each
 *    seeing the other's records; it is destroyed with cuEventDestroy;
 *  - opened in the process that made it: CUDA_ERROR_INVALID_CONTEXT, as a
 *    memory handle (sim_ipc.c; an assumption: the documentation names no
 *    error for it, HIP's says invalid context);
 *  - using an opened event after its maker destroyed it is undefined: here
 *    it keeps working on the state it mapped, and the handle no longer
 *    opens (CUDA_ERROR_INVALID_HANDLE, as a freed allocation's).
 *
 * How: an interprocess event gets, when it is made, a page of a shared file
 * (/dev/shm/simcuda-ipc-PID-ID, sim_ipc.c's names) holding two counters:
 * how many records were taken, by any process, and the highest record
 * number completed. A record takes the next number and the stream that
 * runs it raises `done` to it; the event is complete when `done` has
 * reached the last number taken at the time of the call. Waits poll the
 * counter (a stream's wait in its worker, cuEventSynchronize in the
 * caller): another process's stream cannot wake ours. A record completing
 * before an older one of another stream or process makes the older one
 * count as complete too (records on one stream complete in order; CUDA
 * itself only promises anything for the last record).
 */
#include "sim_internal.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define IPC_EVENT_MAGIC 0x45504953u     /* 'SIPE' */
#define STATE_BYTES     4096u           /* one page of the file */

struct sim_ipc_event_state {
    _Atomic uint64_t last;              /* records taken, by every process */
    _Atomic uint64_t done;              /* the highest record number completed */
};

typedef struct ipc_event_handle {       /* the bytes of a CUipcEventHandle */
    uint32_t magic;
    int32_t  pid;                       /* the process that made the event */
    uint64_t id;                        /* its export id there */
} ipc_event_handle;
_Static_assert(sizeof(ipc_event_handle) <= sizeof(CUipcEventHandle),
               "an IPC event handle is 64 bytes");

/* The state in file `fd`, mapped here; NULL if it cannot be. */
static struct sim_ipc_event_state *map_state(int fd)
{
    void *p = mmap(NULL, STATE_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    return p == MAP_FAILED ? NULL : p;
}

CUresult sim_ipc_event_init(sim_event *ev)
{
    uint64_t id = sim_ipc_new_id();
    int fd = sim_ipc_create(id);
    if (fd < 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    struct sim_ipc_event_state *st = ftruncate(fd, STATE_BYTES) == 0 ? map_state(fd) : NULL;
    close(fd);
    if (!st) {
        sim_ipc_remove(id);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    ev->ipc = st;                       /* the file's zeros: no record yet */
    ev->ipc_pid = (int32_t)getpid();
    ev->ipc_id = id;
    return CUDA_SUCCESS;
}

void sim_ipc_event_fini(sim_event *ev)
{
    munmap(ev->ipc, STATE_BYTES);
    ev->ipc = NULL;
    if (ev->ipc_pid == (int32_t)getpid())
        sim_ipc_remove(ev->ipc_id);     /* its handle no longer opens */
}

uint64_t sim_ipc_event_record(sim_event *ev)
{
    return atomic_fetch_add_explicit(&ev->ipc->last, 1, memory_order_acq_rel) + 1;
}

void sim_ipc_event_done(sim_event *ev, uint64_t gen)
{
    uint64_t cur = atomic_load_explicit(&ev->ipc->done, memory_order_acquire);
    while (cur < gen &&
           !atomic_compare_exchange_weak_explicit(&ev->ipc->done, &cur, gen,
                                                  memory_order_acq_rel, memory_order_acquire))
        ;
}

uint64_t sim_ipc_event_last(sim_event *ev)
{
    return atomic_load_explicit(&ev->ipc->last, memory_order_acquire);
}

bool sim_ipc_event_reached(sim_event *ev, uint64_t gen)
{
    return atomic_load_explicit(&ev->ipc->done, memory_order_acquire) >= gen;
}

void sim_ipc_event_wait(sim_event *ev, uint64_t gen)
{
    const struct timespec pause = { 0, 20 * 1000 };   /* 20 us */
    while (!sim_ipc_event_reached(ev, gen))
        nanosleep(&pause, NULL);
}

SIM_API CUresult cuIpcGetEventHandle(CUipcEventHandle *pHandle, CUevent event)
{
    SIM_TRY(sim_check_init());
    sim_event *ev = (sim_event *)event;
    if (!ev || ev->magic != SIM_MAGIC_EVENT || !ev->ipc)
        return CUDA_ERROR_INVALID_HANDLE;
    if (!pHandle)
        return CUDA_ERROR_INVALID_VALUE;
    ipc_event_handle h = { .magic = IPC_EVENT_MAGIC, .pid = ev->ipc_pid, .id = ev->ipc_id };
    memset(pHandle, 0, sizeof *pHandle);
    memcpy(pHandle->reserved, &h, sizeof h);
    return CUDA_SUCCESS;
}

SIM_API CUresult cuIpcOpenEventHandle(CUevent *phEvent, CUipcEventHandle handle)
{
    sim_ctx *c;
    SIM_TRY(sim_current_ctx(&c));
    if (!phEvent)
        return CUDA_ERROR_INVALID_VALUE;
    ipc_event_handle h;
    memcpy(&h, handle.reserved, sizeof h);
    if (h.magic != IPC_EVENT_MAGIC)
        return CUDA_ERROR_INVALID_VALUE;
    if (h.pid == (int32_t)getpid())
        return CUDA_ERROR_INVALID_CONTEXT;   /* not in the process that made it */
    int fd = sim_ipc_open(h.pid, h.id);
    if (fd < 0)
        return CUDA_ERROR_INVALID_HANDLE;    /* destroyed, or its process exited */
    struct sim_ipc_event_state *st = map_state(fd);
    close(fd);
    if (!st)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUevent e;
    CUresult rc = cuEventCreate(&e, CU_EVENT_DISABLE_TIMING);
    if (rc != CUDA_SUCCESS) {
        munmap(st, STATE_BYTES);
        return rc;
    }
    sim_event *ev = (sim_event *)e;
    ev->flags |= CU_EVENT_INTERPROCESS;
    ev->ipc = st;
    ev->ipc_pid = h.pid;
    ev->ipc_id = h.id;
    *phEvent = e;
    return CUDA_SUCCESS;
}
