/* tests/sim/sim_ipc_peer.c - the other process of the IPC tests
 * (test_sim_ipc.c): opens a memory handle given in hex and does what the
 * mode says. A program of its own, started with fork+exec: CUDA is not
 * fork-safe, so a forked child never touches the parent's device.
 *
 *   sim_ipc_peer MODE HANDLE_HEX [ARGS]
 *     check-write SIZE OFFSET  the first SIZE bytes are 0x5a: write 0xa5 at
 *                              OFFSET..OFFSET+64 and print "ok"
 *     open-twice               two opens give one pointer; the mapping
 *                              stays after one close; a third close fails
 *     open-fails ERR           opening fails with cudaError ERR
 *   HANDLE_HEX an event handle (the same 64 bytes):
 *     event-open-fails ERR     opening it fails with cudaError ERR
 *     event-pending            the exporter's record is pending: the event and
 *                              a stream waiting for it are not ready; prints
 *                              "pending", then waits for the record (the
 *                              exporter completes it on reading that line),
 *                              records the event itself, prints "ok"
 * Exit status 0 when everything held, 1 (with a line on stderr) if not.
 */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(const char *what, int got)
{
    fprintf(stderr, "sim_ipc_peer: %s (got %d)\n", what, got);
    return 1;
}

/* The 64 bytes of a handle, memory or event, from hex. */
static int parse_handle(const char *hex, cudaIpcMemHandle_t *h)
{
    if (strlen(hex) != 2 * sizeof h->reserved)
        return -1;
    for (size_t i = 0; i < sizeof h->reserved; i++) {
        unsigned v;
        if (sscanf(hex + 2 * i, "%2x", &v) != 1)
            return -1;
        h->reserved[i] = (char)v;
    }
    return 0;
}

/* The event modes: what another process sees of an interprocess event. */
static int event_mode(const char *mode, const cudaIpcMemHandle_t *mh, int argc, char **argv)
{
    cudaIpcEventHandle_t h;
    _Static_assert(sizeof h.reserved == sizeof mh->reserved, "handles of one size");
    memcpy(h.reserved, mh->reserved, sizeof h.reserved);
    cudaEvent_t ev = NULL;
    cudaError_t e;
    if (strcmp(mode, "event-open-fails") == 0 && argc == 4) {
        e = cudaIpcOpenEventHandle(&ev, h);
        return e == (cudaError_t)atoi(argv[3]) ? 0 : fail("event open did not fail as expected", e);
    }
    if (strcmp(mode, "event-pending") != 0)
        return fail("unknown mode", 0);
    if ((e = cudaIpcOpenEventHandle(&ev, h)) != cudaSuccess)
        return fail("cudaIpcOpenEventHandle", e);
    cudaStream_t s;
    if ((e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)) != cudaSuccess)
        return fail("stream", e);
    if ((e = cudaEventQuery(ev)) != cudaErrorNotReady)
        return fail("the exporter's pending record must leave the event not ready", e);
    if ((e = cudaStreamWaitEvent(s, ev, 0)) != cudaSuccess)
        return fail("cudaStreamWaitEvent", e);
    if ((e = cudaStreamQuery(s)) != cudaErrorNotReady)
        return fail("a stream waiting for the pending record must not be ready", e);
    printf("pending\n");
    fflush(stdout);
    if ((e = cudaEventSynchronize(ev)) != cudaSuccess || (e = cudaEventQuery(ev)) != cudaSuccess)
        return fail("synchronize with the exporter's record", e);
    if ((e = cudaStreamSynchronize(s)) != cudaSuccess || (e = cudaStreamQuery(s)) != cudaSuccess)
        return fail("the waiting stream after the record completed", e);
    float ms = 0;
    if ((e = cudaEventElapsedTime(&ms, ev, ev)) != cudaErrorInvalidResourceHandle)
        return fail("an opened event has no timing", e);
    if ((e = cudaEventRecord(ev, s)) != cudaSuccess || (e = cudaEventSynchronize(ev)) != cudaSuccess)
        return fail("a record of the importer's own", e);
    if ((e = cudaEventDestroy(ev)) != cudaSuccess || (e = cudaStreamDestroy(s)) != cudaSuccess)
        return fail("destroy", e);
    printf("ok\n");
    return 0;
}

int main(int argc, char **argv)
{
    cudaIpcMemHandle_t h;
    if (argc < 3 || parse_handle(argv[2], &h) != 0)
        return fail("usage: sim_ipc_peer MODE HANDLE_HEX [ARGS]", argc);
    const char *mode = argv[1];
    if (strncmp(mode, "event-", 6) == 0)
        return event_mode(mode, &h, argc, argv);
    void *p = NULL;
    if (strcmp(mode, "open-fails") == 0 && argc == 4) {
        cudaError_t e = cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess);
        return e == (cudaError_t)atoi(argv[3]) ? 0 : fail("open did not fail as expected", e);
    }
    cudaError_t e = cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess);
    if (e != cudaSuccess)
        return fail("cudaIpcOpenMemHandle", e);
    if (strcmp(mode, "check-write") == 0 && argc == 5) {
        size_t size = strtoull(argv[3], NULL, 0), off = strtoull(argv[4], NULL, 0);
        unsigned char *host = malloc(size);
        if (!host || cudaMemcpy(host, p, size, cudaMemcpyDeviceToHost) != cudaSuccess)
            return fail("copy out", 0);
        for (size_t i = 0; i < size; i++)
            if (host[i] != 0x5a)
                return fail("exported bytes differ at offset", (int)i);
        if ((e = cudaMemset((char *)p + off, 0xa5, 64)) != cudaSuccess ||
            (e = cudaDeviceSynchronize()) != cudaSuccess)
            return fail("write back", e);
        free(host);
        if ((e = cudaIpcCloseMemHandle(p)) != cudaSuccess)
            return fail("close", e);
        printf("ok\n");
        return 0;
    }
    if (strcmp(mode, "open-twice") == 0) {
        void *q = NULL;
        if ((e = cudaIpcOpenMemHandle(&q, h, cudaIpcMemLazyEnablePeerAccess)) != cudaSuccess)
            return fail("second open", e);
        if (q != p)
            return fail("second open gave another pointer", 0);
        if ((e = cudaIpcCloseMemHandle(p)) != cudaSuccess)
            return fail("first close", e);
        unsigned char c = 0;
        if ((e = cudaMemcpy(&c, q, 1, cudaMemcpyDeviceToHost)) != cudaSuccess || c != 0x5a)
            return fail("mapping gone after the first of two closes", e);
        if ((e = cudaIpcCloseMemHandle(q)) != cudaSuccess)
            return fail("second close", e);
        if ((e = cudaIpcCloseMemHandle(q)) != cudaErrorInvalidValue)
            return fail("a third close must be invalid value", e);
        printf("ok\n");
        return 0;
    }
    return fail("unknown mode", 0);
}
