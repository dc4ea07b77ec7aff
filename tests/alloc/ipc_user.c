/* tests/alloc/ipc_user.c - a library that may export device memory over
 * legacy IPC: it imports cudaIpcGetMemHandle. test_alloc_ipc.c dlopens it
 * to see the IPC-safe mode's detection switch on. */
#include <cuda_runtime_api.h>

int ipc_user_export(void *p, cudaIpcMemHandle_t *h);
__attribute__((visibility("default"))) int ipc_user_export(void *p, cudaIpcMemHandle_t *h)
{
    return (int)cudaIpcGetMemHandle(h, p);
}
