/* tests/sim/driver_module.c - modules loaded at run time and the functions
 * in them (cuModuleLoadData, cuModuleGetFunction, cuFuncGetAttribute, ...),
 * and the context limits their loaders ask about.
 *
 * Device code never runs here, but programs load it: Triton's launcher
 * (which torch 2.14 uses in eager mode, torch._native: a batched outer
 * product such as attention over one new token) compiles a kernel to a
 * cubin, loads it with cuModuleLoadData, looks its kernel up by name, reads
 * its attributes and launches it with cuLaunchKernelEx; inductor
 * (torch.compile's default backend) loads its kernels from files with
 * cuModuleLoad, through libcaffe2_nvrtc.so. Without these entry points
 * neither helper library even loads (they link them). A module
 * here keeps a copy of its image and the kernel names in it: those of a
 * cubin are its ELF symbol table's global functions (read with libelf), those
 * of PTX its `.entry` directives. A function's attributes are those of a
 * plain kernel on the simulated device, as runtime_kernel_attrs.c gives
 * them (sm_90 limits, 32 registers, no static shared memory): the cubin's
 * own register count is not read. Fat binaries, the cuLibrary* API and
 * the JIT linker are not modelled (the linker's entry points answer
 * CUDA_ERROR_NOT_SUPPORTED); tensor maps are checked and kept opaque.
 * Sources: cuda.h (CUDA 13.0) on each entry point; Triton's
 * backends/nvidia/driver.c for what a loader calls; tests/sim/README.md.
 */
#include "sim_internal.h"
#include "kernel_limits.h"

#include <gelf.h>
#include <libelf.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct sim_function sim_function;

typedef struct sim_module sim_module;
struct sim_module {
    sim_module      *next;        /* the loaded modules */
    char            *image;       /* the caller's image, copied */
    size_t           size;
    bool             elf;         /* a cubin; else PTX text */
    sim_function    *fns;         /* looked up so far: one handle a name */
};

/* The loaded modules and their functions: a handle is checked against them
 * (an unloaded module's or function's handle is INVALID_HANDLE, never read).
 * Few modules, few functions each: a list. */
static pthread_mutex_t modules_lock = PTHREAD_MUTEX_INITIALIZER;
static sim_module *modules;

struct sim_function {
    sim_function *next;
    int           max_dyn_smem;   /* CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES */
    int           carveout;       /* CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT */
    int           non_portable_cluster;
    int           cluster_policy;
    char          name[];
};

/* The bytes of an ELF image whose length the caller does not give: up to
 * the end of its section and program header tables, which a linker puts
 * after the sections' data. 0 if it is no 64-bit ELF of a CUDA device. */
static size_t elf_image_size(const unsigned char *p)
{
    if (memcmp(p, ELFMAG, SELFMAG) != 0 || p[EI_CLASS] != ELFCLASS64)
        return 0;
    Elf64_Ehdr h;
    memcpy(&h, p, sizeof h);
    if (h.e_machine != EM_CUDA)
        return 0;
    size_t end = sizeof h;
    size_t sh = (size_t)h.e_shoff + (size_t)h.e_shnum * h.e_shentsize;
    size_t ph = (size_t)h.e_phoff + (size_t)h.e_phnum * h.e_phentsize;
    if (sh > end)
        end = sh;
    if (ph > end)
        end = ph;
    return end;
}

/* Whether a cubin has a kernel (a global function symbol) named `name`. */
static bool cubin_has_kernel(sim_module *m, const char *name)
{
    elf_version(EV_CURRENT);
    Elf *e = elf_memory(m->image, m->size);
    if (!e)
        return false;
    bool found = false;
    size_t strndx;
    Elf_Scn *scn = NULL;
    while (!found && (scn = elf_nextscn(e, scn)) != NULL) {
        GElf_Shdr sh;
        if (!gelf_getshdr(scn, &sh) || sh.sh_type != SHT_SYMTAB || sh.sh_entsize == 0)
            continue;
        strndx = sh.sh_link;
        Elf_Data *d = elf_getdata(scn, NULL);
        size_t n = d ? sh.sh_size / sh.sh_entsize : 0;
        for (size_t i = 0; i < n && !found; i++) {
            GElf_Sym sym;
            if (!gelf_getsym(d, (int)i, &sym) || GELF_ST_TYPE(sym.st_info) != STT_FUNC ||
                GELF_ST_BIND(sym.st_info) != STB_GLOBAL)
                continue;
            const char *s = elf_strptr(e, strndx, sym.st_name);
            found = s && strcmp(s, name) == 0;
        }
    }
    elf_end(e);
    return found;
}

/* Whether PTX text declares an entry `name` (".entry name(" or ".entry name "). */
static bool ptx_has_kernel(const sim_module *m, const char *name)
{
    size_t len = strlen(name);
    for (const char *p = strstr(m->image, ".entry"); p; p = strstr(p + 6, ".entry")) {
        const char *q = p + 6;
        while (*q == ' ' || *q == '\t')
            q++;
        if (strncmp(q, name, len) == 0 && (q[len] == '(' || q[len] == ' ' || q[len] == '\t' ||
                                            q[len] == '\n' || q[len] == '\r'))
            return true;
    }
    return false;
}

/* Load `image` (`size` bytes, or 0: its length read from it, as
 * cuModuleLoadData must: a cubin's from its header tables, PTX's to its
 * NUL) as a module of the current context. */
static CUresult load_image(CUmodule *module, const void *image, size_t size)
{
    sim_ctx *c;
    SIM_TRY(sim_current_ctx(&c));
    if (!module || !image)
        return CUDA_ERROR_INVALID_VALUE;
    const unsigned char *p = image;
    if (size && size < SELFMAG)
        return CUDA_ERROR_INVALID_IMAGE;
    size_t elf_size = elf_image_size(p);
    bool elf = elf_size != 0;
    if (elf && size && size < elf_size)
        return CUDA_ERROR_INVALID_IMAGE;   /* cut short */
    if (!elf) {
        if (memcmp(p, ELFMAG, SELFMAG) == 0)
            return CUDA_ERROR_INVALID_IMAGE;   /* an ELF, not for a CUDA device */
        size_t text = size ? strnlen(image, size) : strlen(image);
        if (size && text == size)
            return CUDA_ERROR_INVALID_IMAGE;   /* PTX is NUL-terminated text */
        if (!strstr(image, ".version") || !strstr(image, ".target"))
            return CUDA_ERROR_INVALID_IMAGE;
        elf_size = text + 1;
    }
    size = elf_size;
    sim_module *m = calloc(1, sizeof *m);
    char *copy = malloc(size);
    if (!m || !copy) {
        free(m);
        free(copy);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    memcpy(copy, image, size);
    m->image = copy;
    m->size = size;
    m->elf = elf;
    pthread_mutex_lock(&modules_lock);
    m->next = modules;
    modules = m;
    pthread_mutex_unlock(&modules_lock);
    *module = (CUmodule)m;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuModuleLoadData(CUmodule *module, const void *image)
{
    return load_image(module, image, 0);
}

/* The JIT options (log buffers, optimization level, ...) change how PTX is
 * compiled; nothing is compiled here: checked for presence, not applied. */
SIM_API CUresult cuModuleLoadDataEx(CUmodule *module, const void *image, unsigned int numOptions,
                                    CUjit_option *options, void **optionValues)
{
    if (numOptions && (!options || !optionValues))
        return CUDA_ERROR_INVALID_VALUE;
    return load_image(module, image, 0);
}

/* A cubin or PTX file (what PyTorch's inductor loads, through
 * libcaffe2_nvrtc, which links this). */
SIM_API CUresult cuModuleLoad(CUmodule *module, const char *fname)
{
    sim_ctx *c;
    SIM_TRY(sim_current_ctx(&c));
    if (!module || !fname)
        return CUDA_ERROR_INVALID_VALUE;
    FILE *f = fopen(fname, "rb");
    if (!f)
        return CUDA_ERROR_FILE_NOT_FOUND;
    char *buf = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n + 4096 + 1 > cap) {
            cap = cap ? 2 * cap : 1 << 16;
            char *more = realloc(buf, cap);
            if (!more) {
                free(buf);
                fclose(f);
                return CUDA_ERROR_OUT_OF_MEMORY;
            }
            buf = more;
        }
        size_t got = fread(buf + n, 1, 4096, f);
        n += got;
        if (got < 4096)
            break;
    }
    fclose(f);
    CUresult rc = CUDA_ERROR_INVALID_IMAGE;
    if (n > 0) {
        buf[n] = 0;   /* PTX read as text */
        rc = load_image(module, buf, n + 1);
    }
    free(buf);
    return rc;
}

/* The loaded module of handle ``h``, or NULL; modules_lock held. */
static sim_module *loaded(CUmodule h)
{
    sim_module *m = modules;
    while (m && m != (sim_module *)h)
        m = m->next;
    return m;
}

SIM_API CUresult cuModuleUnload(CUmodule h)
{
    SIM_TRY(sim_check_init());
    pthread_mutex_lock(&modules_lock);
    sim_module *m = loaded(h);
    if (m) {
        sim_module **at = &modules;
        while (*at != m)
            at = &(*at)->next;
        *at = m->next;
    }
    pthread_mutex_unlock(&modules_lock);
    if (!m)
        return CUDA_ERROR_INVALID_HANDLE;
    for (sim_function *f = m->fns, *next; f; f = next) {
        next = f->next;
        free(f);
    }
    free(m->image);
    free(m);
    return CUDA_SUCCESS;
}

/* One handle a name, as the driver hands out (the same CUfunction for the
 * same kernel of a module). */
SIM_API CUresult cuModuleGetFunction(CUfunction *hfunc, CUmodule h, const char *name)
{
    SIM_TRY(sim_check_init());
    CUresult rc = CUDA_SUCCESS;
    pthread_mutex_lock(&modules_lock);
    sim_module *m = loaded(h);
    if (!m || !hfunc || !name) {
        pthread_mutex_unlock(&modules_lock);
        return !m ? CUDA_ERROR_INVALID_HANDLE : CUDA_ERROR_INVALID_VALUE;
    }
    sim_function *f = m->fns;
    while (f && strcmp(f->name, name) != 0)
        f = f->next;
    if (!f && !(m->elf ? cubin_has_kernel(m, name) : ptx_has_kernel(m, name))) {
        rc = CUDA_ERROR_NOT_FOUND;
    } else if (!f) {
        size_t len = strlen(name) + 1;
        f = calloc(1, sizeof *f + len);
        if (!f) {
            rc = CUDA_ERROR_OUT_OF_MEMORY;
        } else {
            f->max_dyn_smem = SIM_SMEM_DEFAULT;
            f->carveout = -1;
            memcpy(f->name, name, len);
            f->next = m->fns;
            m->fns = f;
        }
    }
    pthread_mutex_unlock(&modules_lock);
    if (rc == CUDA_SUCCESS)
        *hfunc = (CUfunction)f;
    return rc;
}

/* The function of a loaded module that handle ``h`` is: checked under
 * modules_lock, then read without it (a program that unloads a module while
 * it uses its functions has a bug of its own). */
static CUresult function_arg(CUfunction h, sim_function **out)
{
    SIM_TRY(sim_check_init());
    sim_function *found = NULL;
    pthread_mutex_lock(&modules_lock);
    for (sim_module *m = modules; m && !found; m = m->next)
        for (sim_function *f = m->fns; f && !found; f = f->next)
            if (f == (sim_function *)h)
                found = f;
    pthread_mutex_unlock(&modules_lock);
    if (!found)
        return CUDA_ERROR_INVALID_HANDLE;
    *out = found;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuFuncGetAttribute(int *pi, CUfunction_attribute attrib, CUfunction hfunc)
{
    sim_function *f;
    SIM_TRY(function_arg(hfunc, &f));
    if (!pi)
        return CUDA_ERROR_INVALID_VALUE;
    switch (attrib) {
    case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK:       *pi = 1024; break;
    case CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES:
    case CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES:
    case CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES:
    case CU_FUNC_ATTRIBUTE_CACHE_MODE_CA:
    case CU_FUNC_ATTRIBUTE_CLUSTER_SIZE_MUST_BE_SET:
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH:
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT:
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH:      *pi = 0; break;
    case CU_FUNC_ATTRIBUTE_NUM_REGS:                    *pi = SIM_REGS_PER_THREAD; break;
    case CU_FUNC_ATTRIBUTE_PTX_VERSION:
    case CU_FUNC_ATTRIBUTE_BINARY_VERSION:              *pi = 90; break;
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES: *pi = f->max_dyn_smem; break;
    case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT: *pi = f->carveout; break;
    case CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED: *pi = f->non_portable_cluster; break;
    case CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE: *pi = f->cluster_policy; break;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

/* The attributes cuda.h lists as settable, range-checked; the required
 * cluster sizes are the compiler's here (none): NOT_PERMITTED as cuda.h says
 * for a compiled-in one would be wrong, so they are accepted only as 0.
 * Anything else (Triton tries an attribute of its own first, 17) is
 * read-only or unknown: INVALID_VALUE. */
SIM_API CUresult cuFuncSetAttribute(CUfunction hfunc, CUfunction_attribute attrib, int value)
{
    sim_function *f;
    SIM_TRY(function_arg(hfunc, &f));
    switch (attrib) {
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:
        if (value < 0 || value > SIM_SMEM_OPTIN)
            return CUDA_ERROR_INVALID_VALUE;
        f->max_dyn_smem = value;
        return CUDA_SUCCESS;
    case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT:
        if (value < -1 || value > 100)
            return CUDA_ERROR_INVALID_VALUE;
        f->carveout = value;
        return CUDA_SUCCESS;
    case CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED:
        if (value != 0 && value != 1)
            return CUDA_ERROR_INVALID_VALUE;
        f->non_portable_cluster = value;
        return CUDA_SUCCESS;
    case CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE:
        if (value < CU_CLUSTER_SCHEDULING_POLICY_DEFAULT ||
            value > CU_CLUSTER_SCHEDULING_POLICY_LOAD_BALANCING)
            return CUDA_ERROR_INVALID_VALUE;
        f->cluster_policy = value;
        return CUDA_SUCCESS;
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH:
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT:
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH:
        return value == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
}

/* A hint: checked and kept nowhere (nothing here depends on it). */
SIM_API CUresult cuFuncSetCacheConfig(CUfunction hfunc, CUfunc_cache config)
{
    sim_function *f;
    SIM_TRY(function_arg(hfunc, &f));
    return config >= CU_FUNC_CACHE_PREFER_NONE && config <= CU_FUNC_CACHE_PREFER_EQUAL
               ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* How many clusters of the configuration fit on the device at once: the
 * multiprocessors (132) over the cluster's blocks, one block a
 * multiprocessor (the cluster size comes from the launch attributes; 1
 * without one). CUDA C Programming Guide, "Thread Block Clusters". */
SIM_API CUresult cuOccupancyMaxActiveClusters(int *numClusters, CUfunction func,
                                              const CUlaunchConfig *config)
{
    sim_function *f;
    SIM_TRY(function_arg(func, &f));
    if (!numClusters || !config || (config->numAttrs && !config->attrs))
        return CUDA_ERROR_INVALID_VALUE;
    unsigned blocks = 1;
    for (unsigned i = 0; i < config->numAttrs; i++)
        if (config->attrs[i].id == CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION) {
            const CUlaunchAttributeValue *v = &config->attrs[i].value;
            blocks = v->clusterDim.x * v->clusterDim.y * v->clusterDim.z;
        }
    /* sm_90: 8 blocks a cluster portably, 16 where the function allows it */
    if (blocks == 0 || blocks > (f->non_portable_cluster ? 16u : 8u))
        return CUDA_ERROR_INVALID_CLUSTER_SIZE;
    if (config->sharedMemBytes > (unsigned)f->max_dyn_smem)
        return CUDA_ERROR_INVALID_VALUE;
    *numClusters = (int)(SIM_MULTIPROCESSORS / blocks);
    return CUDA_SUCCESS;
}

/* Blocks of the function resident on a multiprocessor at once: the
 * runtime's figure (kernel_limits.h); the dynamic shared memory must be
 * what the function may use. */
SIM_API CUresult cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int *numBlocks, CUfunction func,
                                                                      int blockSize,
                                                                      size_t dynamicSMemSize,
                                                                      unsigned int flags)
{
    sim_function *f;
    SIM_TRY(function_arg(func, &f));
    if (!numBlocks || (flags & ~(unsigned)CU_OCCUPANCY_DISABLE_CACHING_OVERRIDE) ||
        dynamicSMemSize > (size_t)f->max_dyn_smem)
        return CUDA_ERROR_INVALID_VALUE;
    int n = sim_blocks_per_sm(blockSize, dynamicSMemSize);
    if (n < 0)
        return CUDA_ERROR_INVALID_VALUE;
    *numBlocks = n;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int *numBlocks, CUfunction func,
                                                             int blockSize, size_t dynamicSMemSize)
{
    return cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(numBlocks, func, blockSize,
                                                                dynamicSMemSize, 0);
}

/* ---- the JIT linker: not modelled ------------------------------------------
 * Linking several images into one needs the images' relocations; PyTorch
 * links (cuLinkCreate) only for its jiterator's link-time optimization,
 * which no test here reaches. Its library links these entry points, so
 * they exist, check their arguments and answer CUDA_ERROR_NOT_SUPPORTED
 * (tests/sim/README.md, "What is not modelled"). */

SIM_API CUresult cuLinkCreate_v2(unsigned int numOptions, CUjit_option *options, void **optionValues,
                                 CUlinkState *stateOut)
{
    SIM_TRY(sim_check_init());
    if (!stateOut || (numOptions && (!options || !optionValues)))
        return CUDA_ERROR_INVALID_VALUE;
    return CUDA_ERROR_NOT_SUPPORTED;
}

SIM_API CUresult cuLinkAddData_v2(CUlinkState state, CUjitInputType type, void *data, size_t size,
                                  const char *name, unsigned int numOptions, CUjit_option *options,
                                  void **optionValues)
{
    (void)state; (void)type; (void)size; (void)name; (void)numOptions; (void)options;
    (void)optionValues;
    SIM_TRY(sim_check_init());
    return data ? CUDA_ERROR_INVALID_HANDLE : CUDA_ERROR_INVALID_VALUE;   /* no state exists */
}

SIM_API CUresult cuLinkAddFile_v2(CUlinkState state, CUjitInputType type, const char *path,
                                  unsigned int numOptions, CUjit_option *options, void **optionValues)
{
    (void)state; (void)type; (void)numOptions; (void)options; (void)optionValues;
    SIM_TRY(sim_check_init());
    return path ? CUDA_ERROR_INVALID_HANDLE : CUDA_ERROR_INVALID_VALUE;
}

SIM_API CUresult cuLinkComplete(CUlinkState state, void **cubinOut, size_t *sizeOut)
{
    (void)state;
    SIM_TRY(sim_check_init());
    return cubinOut && sizeOut ? CUDA_ERROR_INVALID_HANDLE : CUDA_ERROR_INVALID_VALUE;
}

SIM_API CUresult cuLinkDestroy(CUlinkState state)
{
    (void)state;
    SIM_TRY(sim_check_init());
    return CUDA_ERROR_INVALID_HANDLE;
}

/* ---- tensor maps -------------------------------------------------------------
 * A TMA descriptor: 128 opaque bytes the kernel reads. Nothing reads it
 * here; the layout rules cuda.h gives for cuTensorMapEncodeTiled are
 * checked (rank, alignments, sizes, strides, box, element strides), and the
 * descriptor holds the global address and rank. */
SIM_API CUresult cuTensorMapEncodeTiled(CUtensorMap *tensorMap, CUtensorMapDataType tensorDataType,
                                        cuuint32_t tensorRank, void *globalAddress,
                                        const cuuint64_t *globalDim, const cuuint64_t *globalStrides,
                                        const cuuint32_t *boxDim, const cuuint32_t *elementStrides,
                                        CUtensorMapInterleave interleave, CUtensorMapSwizzle swizzle,
                                        CUtensorMapL2promotion l2Promotion,
                                        CUtensorMapFloatOOBfill oobFill)
{
    (void)tensorDataType; (void)swizzle; (void)l2Promotion; (void)oobFill;
    SIM_TRY(sim_check_init());
    bool interleaved = interleave != CU_TENSOR_MAP_INTERLEAVE_NONE;
    uintptr_t align = interleaved && interleave == CU_TENSOR_MAP_INTERLEAVE_32B ? 32 : 16;
    if (!tensorMap || ((uintptr_t)tensorMap % 64) || !globalAddress || !globalDim ||
        !boxDim || !elementStrides || (tensorRank > 1 && !globalStrides) ||
        tensorRank < (interleaved ? 3u : 1u) || tensorRank > 5 ||
        (uintptr_t)globalAddress % align)
        return CUDA_ERROR_INVALID_VALUE;
    for (cuuint32_t i = 0; i < tensorRank; i++) {
        if (globalDim[i] == 0 || globalDim[i] > (1ull << 32) || boxDim[i] == 0 || boxDim[i] > 256 ||
            elementStrides[i] == 0 || elementStrides[i] > 8)
            return CUDA_ERROR_INVALID_VALUE;
        if (i + 1 < tensorRank &&
            (globalStrides[i] % align || globalStrides[i] >= (1ull << 40)))
            return CUDA_ERROR_INVALID_VALUE;
    }
    memset(tensorMap, 0, sizeof *tensorMap);
    memcpy(tensorMap->opaque, &globalAddress, sizeof globalAddress);
    tensorMap->opaque[1] = tensorRank;
    return CUDA_SUCCESS;
}

/* ---- context limits ----------------------------------------------------- */

/* One set for the process (the sim has primary contexts only, one a device,
 * and no program here sets them per device). Defaults as cuCtxGetLimit
 * reports them on an sm_90 device. */
static pthread_mutex_t limits_lock = PTHREAD_MUTEX_INITIALIZER;
static size_t limits[CU_LIMIT_MAX] = {
    [CU_LIMIT_STACK_SIZE] = 1024,
    [CU_LIMIT_PRINTF_FIFO_SIZE] = 1048576,
    [CU_LIMIT_MALLOC_HEAP_SIZE] = 8388608,
    [CU_LIMIT_DEV_RUNTIME_SYNC_DEPTH] = 2,
    [CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT] = 2048,
    [CU_LIMIT_MAX_L2_FETCH_GRANULARITY] = 64,
    [CU_LIMIT_PERSISTING_L2_CACHE_SIZE] = 0,
};

static bool limit_known(CUlimit limit)
{
    return (int)limit >= 0 && limit < CU_LIMIT_MAX && limit != CU_LIMIT_SHMEM_SIZE &&
           limit != CU_LIMIT_CIG_ENABLED && limit != CU_LIMIT_CIG_SHMEM_FALLBACK_ENABLED;
}

SIM_API CUresult cuCtxGetLimit(size_t *pvalue, CUlimit limit)
{
    sim_ctx *c;
    SIM_TRY(sim_current_ctx(&c));
    if (!pvalue || !limit_known(limit))
        return CUDA_ERROR_UNSUPPORTED_LIMIT;
    pthread_mutex_lock(&limits_lock);
    *pvalue = limits[limit];
    pthread_mutex_unlock(&limits_lock);
    return CUDA_SUCCESS;
}

SIM_API CUresult cuCtxSetLimit(CUlimit limit, size_t value)
{
    sim_ctx *c;
    SIM_TRY(sim_current_ctx(&c));
    if (!limit_known(limit))
        return CUDA_ERROR_UNSUPPORTED_LIMIT;
    if (limit == CU_LIMIT_MAX_L2_FETCH_GRANULARITY && value != 0 && value != 32 &&
        value != 64 && value != 128)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&limits_lock);
    limits[limit] = value;
    pthread_mutex_unlock(&limits_lock);
    return CUDA_SUCCESS;
}
