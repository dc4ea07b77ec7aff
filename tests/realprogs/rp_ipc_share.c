/* tests/realprogs/rp_ipc_share.c - a raw program that shares one of its
 * buffers with another process over legacy IPC (the cuda-samples simpleIPC
 * pattern): it allocates several buffers (small ones, which a caching
 * allocator would put side by side in one segment), fills them, exports the
 * middle one with cudaIpcGetMemHandle and sends the bare handle to an
 * importer: this program again (fork+exec), run WITHOUT vramtrace
 * (LD_PRELOAD and VRAMTRACE_* removed from its environment), which opens
 * the handle, checks the bytes and writes some back. The exporter then
 * checks it sees the importer's write and that the neighbours are intact.
 * The importer also checks PyTorch's way (the pointer's offset from
 * cuMemGetAddressRange sent along): right in every mode, since the range
 * and the handle describe the same allocation.
 *
 * Built three times: as rp_ipc_share (calls cudaIpcGetMemHandle: vramtrace sees
 * the import and is ipc-safe from the start) and, with RP_IPC_FETCHED, as
 * rp_ipc_fetched, which fetches cuIpcGetMemHandle at run time
 * (cudaGetDriverEntryPointByVersion): vramtrace cannot know until the first export,
 * which it reports on stderr; this variant shares once to trigger that
 * (result on stderr only) and then checks a second share; and as
 * rp_ipc_static, linked with the static runtime (nvcc's default), which
 * imports nothing: vramtrace finds the call to cudaIpcGetMemHandle in its
 * code and is ipc-safe from the start.
 *
 *   rp_ipc_share                          the exporter
 *   rp_ipc_share import HEX SIZE SEED OFFSET   the importer
 */
#include <cuda.h>
#include <stdbool.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "realprog.h"

extern char **environ;

#define PATTERN_SEED 7u
#define WRITE_BACK   64                  /* bytes the importer overwrites with 0xa5 */

static int importer(const char *hex, size_t n, unsigned seed, size_t off, FILE *out)
{
    cudaIpcMemHandle_t h;
    if (strlen(hex) != 2 * sizeof h.reserved)
        return 1;
    for (size_t i = 0; i < sizeof h.reserved; i++) {
        unsigned v;
        if (sscanf(hex + 2 * i, "%2x", &v) != 1)
            return 1;
        h.reserved[i] = (char)v;
    }
    void *p = NULL;
    CHECK(cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess));
    unsigned char *got = malloc(n), *want = malloc(n);
    if (!got || !want)
        return 1;
    rp_pattern(want, n, seed);
    /* PyTorch's way: the offset sent with the handle, added here */
    CHECK(cudaMemcpy(got, (char *)p + off, n, cudaMemcpyDeviceToHost));
    bool at_offset = memcmp(got, want, n) == 0;
    /* a raw program's: the bare handle */
    CHECK(cudaMemcpy(got, p, n, cudaMemcpyDeviceToHost));
    bool ok = memcmp(got, want, n) == 0;
    fprintf(out, "importer: data at the sent offset %s\n", at_offset ? "ok" : "WRONG");
    fprintf(out, "importer: data %s\n", ok ? "ok" : "WRONG");
    CHECK(cudaMemset(p, 0xa5, WRITE_BACK));
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaIpcCloseMemHandle(p));
    free(got);
    free(want);
    return ok && at_offset ? 0 : 2;
}

/* This program as the importer, in the environment minus vramtrace. */
static int spawn_importer(const cudaIpcMemHandle_t *h, size_t n, size_t off, bool quiet)
{
    char hex[2 * sizeof h->reserved + 1], size[32], seed[16], offset[32];
    for (size_t i = 0; i < sizeof h->reserved; i++)
        sprintf(hex + 2 * i, "%02x", (unsigned char)h->reserved[i]);
    snprintf(size, sizeof size, "%zu", n);
    snprintf(seed, sizeof seed, "%u", PATTERN_SEED);
    snprintf(offset, sizeof offset, "%zu", off);
    size_t nenv = 0;
    while (environ[nenv])
        nenv++;
    char **env = calloc(nenv + 1, sizeof *env);
    if (!env)
        return -1;
    for (size_t i = 0, j = 0; i < nenv; i++)
        if (strncmp(environ[i], "LD_PRELOAD=", 11) != 0 && strncmp(environ[i], "VRAMTRACE", 9) != 0)
            env[j++] = environ[i];
    char *argv[] = { "rp_ipc_importer", quiet ? "import-quiet" : "import", hex, size, seed,
                     offset, NULL };
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        execve("/proc/self/exe", argv, env);
        _exit(127);
    }
    free(env);
    int st = 0;
    if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st))
        return -1;
    return WEXITSTATUS(st);
}

static void export_handle(cudaIpcMemHandle_t *h, void *p)
{
#ifdef RP_IPC_FETCHED
    CUresult (*get)(CUipcMemHandle *, CUdeviceptr) = NULL;
    enum cudaDriverEntryPointQueryResult st;
    CHECK(cudaGetDriverEntryPointByVersion("cuIpcGetMemHandle", (void **)&get, 13000,
                                            cudaEnableDefault, &st));
    CUipcMemHandle ch;
    if (!get || get(&ch, (CUdeviceptr)(uintptr_t)p) != CUDA_SUCCESS) {
        printf("cuIpcGetMemHandle failed\n");
        exit(1);
    }
    memcpy(h->reserved, ch.reserved, sizeof h->reserved);
#else
    CHECK(cudaIpcGetMemHandle(h, p));
#endif
}

/* What PyTorch sends with a handle: the pointer's offset in the device
 * allocation the handle exports (cuMemGetAddressRange). */
static size_t offset_in_allocation(void *p)
{
    CUresult (*range)(CUdeviceptr *, size_t *, CUdeviceptr) = NULL;
    enum cudaDriverEntryPointQueryResult st;
    CHECK(cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", (void **)&range, 13000,
                                            cudaEnableDefault, &st));
    CUdeviceptr base = 0;
    size_t size = 0;
    if (!range || range(&base, &size, (CUdeviceptr)(uintptr_t)p) != CUDA_SUCCESS) {
        printf("cuMemGetAddressRange failed\n");
        exit(1);
    }
    return (size_t)((uintptr_t)p - base);
}

static bool all_bytes(const void *dev, size_t n, unsigned char v)
{
    unsigned char *host = malloc(n);
    CHECK(cudaMemcpy(host, dev, n, cudaMemcpyDeviceToHost));
    bool ok = true;
    for (size_t i = 0; i < n; i++)
        ok &= host[i] == v;
    free(host);
    return ok;
}

/* One share: three buffers, the middle one exported. @return true when
 * both sides saw the other's bytes and nothing else changed. */
static bool share(FILE *out, bool quiet)
{
    enum { A = 1000, B = 8192, C = 3000 };
    void *a = NULL, *b = NULL, *c = NULL;
    CHECK(cudaMalloc(&a, A));
    CHECK(cudaMalloc(&b, B));
    CHECK(cudaMalloc(&c, C));
    unsigned char *pat = malloc(B), *back = malloc(B);
    rp_pattern(pat, B, PATTERN_SEED);
    CHECK(cudaMemset(a, 0x11, A));
    CHECK(cudaMemcpy(b, pat, B, cudaMemcpyHostToDevice));
    CHECK(cudaMemset(c, 0x33, C));
    cudaIpcMemHandle_t h;
    export_handle(&h, b);
    int st = spawn_importer(&h, B, offset_in_allocation(b), quiet);
    fprintf(out, "importer exit status %d\n", st);
    CHECK(cudaMemcpy(back, b, B, cudaMemcpyDeviceToHost));
    bool seen = true;
    for (int i = 0; i < WRITE_BACK; i++)
        seen &= back[i] == 0xa5;
    bool rest = memcmp(back + WRITE_BACK, pat + WRITE_BACK, B - WRITE_BACK) == 0;
    bool neighbours = all_bytes(a, A, 0x11) && all_bytes(c, C, 0x33);
    fprintf(out, "exporter: importer's write seen: %s\n", seen ? "yes" : "no");
    fprintf(out, "exporter: rest of the buffer intact: %s\n", rest ? "yes" : "no");
    fprintf(out, "exporter: neighbouring buffers intact: %s\n", neighbours ? "yes" : "no");
    CHECK(cudaFree(a));
    CHECK(cudaFree(b));
    CHECK(cudaFree(c));
    free(pat);
    free(back);
    return st == 0 && seen && rest && neighbours;
}

int main(int argc, char **argv)
{
    if (argc == 6 && (!strcmp(argv[1], "import") || !strcmp(argv[1], "import-quiet")))
        return importer(argv[2], strtoull(argv[3], NULL, 0), (unsigned)atoi(argv[4]),
                        strtoull(argv[5], NULL, 0), !strcmp(argv[1], "import") ? stdout : stderr);
#ifdef RP_IPC_FETCHED
    share(stderr, true);   /* the export vramtrace learns from; its result is not compared */
#endif
    bool ok = share(stdout, false);
    printf("%s\n", ok ? "shared correctly" : "SHARING FAILED");
    return ok ? 0 : 3;
}
