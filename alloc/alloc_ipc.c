/*
 * alloc/alloc_ipc.c - IPC-safe mode: a cudaMalloc block at the start of a
 * device allocation of its own, when the program may export it.
 *
 * Why: cudaIpcGetMemHandle (cuIpcGetMemHandle) exports the whole device
 * allocation that holds the pointer, and the importing process opens the
 * allocation's base. PyTorch sends the offset from cuMemGetAddressRange
 * with the handle, so a block inside a cached segment is right for it; a
 * raw program sends the handle alone, and its importer (which need not run
 * under vramtrace) would read the segment's first bytes, not the block's.
 * The block must then be at offset 0 of its segment.
 *
 * What changes in the mode (alloc_heap.c, alloc_segment.c): an allocation
 * ordered on no stream (cudaMalloc, cuMemAlloc: the only memory legacy IPC
 * exports; stream-ordered memory is not legacy-exportable) gets a segment of
 * its own, of its rounded size, never split, and a freed one serves again
 * only a request of about its size (up to 1/8 larger), so repeated
 * same-size allocations still skip the device. Expandable segments are not
 * used for it (VMM memory is refused by legacy IPC). cuMemGetAddressRange
 * and the handle keep agreeing: both describe the segment, which is now the
 * block.
 *
 * When (VRAMTRACE_CONF ipc_safe): 1 always, 0 never, auto (the default)
 * when some loaded object references cudaIpcGetMemHandle or
 * cuIpcGetMemHandle (an undefined dynamic symbol: it calls it through the
 * shared runtime or driver). Looked for before the first cudaMalloc and
 * again after a dlopen or dlsym (their hooks bump a generation; the next
 * cudaMalloc looks, at no more than the objects' count when nothing was
 * loaded: dlpi_adds). The hooks run before the real call (they jump to
 * it), so a look racing a dlopen may come before its library is there;
 * the dlsym that usually follows a dlopen brings another look. The CUDA libraries themselves, PyTorch's (libtorch*,
 * libc10*: they send the offset) and vramtrace are not counted.
 *
 * A program linked with the static runtime (nvcc's default) imports
 * nothing, and its runtime's one object, cudart_static.o, defines every
 * entry point, so a definition says nothing about use. What does is a call:
 * the program's code is looked through for a direct call or jump to its
 * cudaIpcGetMemHandle (x86-64 E8/E9 rel32, aarch64 BL/B), whose address
 * comes from the program file's symbol table (a program exports nothing, so
 * it is not in memory). Only the program itself is looked at so: a shared
 * library calls its own functions through its PLT.
 *
 * Not seen: a static runtime inside a shared library, a stripped program,
 * and entry points fetched at run time (cuGetProcAddress, dlsym). For those the
 * export itself is the signal: a handle asked for a block inside a segment
 * (vt__alloc_ipc_exporting) prints one line naming the pointer, its offset
 * and the fix, and in auto mode switches the mode on for what comes next.
 * That handle is still the driver's: the block cannot move.
 */
#include <fcntl.h>
#include <link.h>
#include <stddef.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "alloc_internal.h"

atomic_bool vt__ipc_on;                    /* auto mode switched on (sticky) */
atomic_uint vt__ipc_loads_gen = 1;         /* bumped by the dlopen and dlsym hooks */
atomic_uint vt__ipc_scanned_gen;           /* the generation last scanned */
static pthread_mutex_t scan_lock = PTHREAD_MUTEX_INITIALIZER;

vt__no_sanitize void vt__alloc_ipc_loads_changed(void)
{
    atomic_fetch_add_explicit(&vt__ipc_loads_gen, 1, memory_order_relaxed);
}

/* Objects whose references do not count: the runtime and driver (they
 * define the entry points), PyTorch (it sends the offset), ourselves. */
static bool excluded(const char *path)
{
    static const char *const prefixes[] = {
        "libcudart", "libcuda.", "libtorch", "libc10", "libvramtrace", "linux-vdso", "linux-gate",
    };
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    for (size_t i = 0; i < sizeof prefixes / sizeof prefixes[0]; i++)
        if (strncmp(base, prefixes[i], strlen(prefixes[i])) == 0)
            return true;
    return false;
}

static bool is_export_call(const char *name)
{
    return strcmp(name, "cudaIpcGetMemHandle") == 0 || strcmp(name, "cuIpcGetMemHandle") == 0;
}

/* A dynamic-section address: glibc relocates them in place for most
 * objects, not for all (the vdso): one below the load bias is relative. */
static uintptr_t dyn_addr(const struct dl_phdr_info *info, ElfW(Addr) v)
{
    return v < info->dlpi_addr ? info->dlpi_addr + v : v;
}

/* The number of dynamic symbols by the GNU hash table: one past the last
 * symbol of the longest chain (the standard walk; there is no count). */
static size_t gnu_hash_nsyms(const uint32_t *gnu)
{
    uint32_t nbuckets = gnu[0], symoffset = gnu[1], bloom_words = gnu[2];
    const uint32_t *buckets = gnu + 4 + bloom_words * (sizeof(ElfW(Addr)) / 4);
    const uint32_t *chain = buckets + nbuckets;
    uint32_t last = 0;
    for (uint32_t i = 0; i < nbuckets; i++)
        if (buckets[i] > last)
            last = buckets[i];
    if (last < symoffset)
        return symoffset;
    while (!(chain[last - symoffset] & 1))
        last++;
    return (size_t)last + 1;
}

/* Does the object import cudaIpcGetMemHandle or cuIpcGetMemHandle? Reads
 * its dynamic symbol table in memory, every symbol: undefined ones mostly
 * sit before the first hashed one, but a non-PIE program's reference whose
 * address it takes is hashed too (it carries the canonical address). */
static bool imports_export_call(const struct dl_phdr_info *info)
{
    const ElfW(Dyn) *dyn = NULL;
    for (int i = 0; i < info->dlpi_phnum; i++)
        if (info->dlpi_phdr[i].p_type == PT_DYNAMIC)
            dyn = (const ElfW(Dyn) *)(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
    if (!dyn)
        return false;
    const ElfW(Sym) *syms = NULL;
    const char *strs = NULL;
    size_t strsz = 0, nsyms = 0;
    const uint32_t *gnu = NULL, *sysv = NULL;
    for (; dyn->d_tag != DT_NULL; dyn++) {
        switch (dyn->d_tag) {
        case DT_SYMTAB: syms = (const ElfW(Sym) *)dyn_addr(info, dyn->d_un.d_ptr); break;
        case DT_STRTAB: strs = (const char *)dyn_addr(info, dyn->d_un.d_ptr); break;
        case DT_STRSZ: strsz = dyn->d_un.d_val; break;
        case DT_GNU_HASH: gnu = (const uint32_t *)dyn_addr(info, dyn->d_un.d_ptr); break;
        case DT_HASH: sysv = (const uint32_t *)dyn_addr(info, dyn->d_un.d_ptr); break;
        default: break;
        }
    }
    if (!syms || !strs)
        return false;
    if (sysv)
        nsyms = sysv[1];           /* nchain: the symbol count */
    else if (gnu)
        nsyms = gnu_hash_nsyms(gnu);
    for (size_t i = 1; i < nsyms; i++) {
        const ElfW(Sym) *s = &syms[i];
        if (s->st_shndx != SHN_UNDEF || s->st_name >= strsz)
            continue;
        if (is_export_call(strs + s->st_name))
            return true;
    }
    return false;
}

/* The address of the program's own cudaIpcGetMemHandle, from the symbol
 * table of its file (/proc/self/exe); 0 if it has none (a dynamically
 * linked or stripped program). The file is mapped, not read: only the
 * section headers and the symbol table are touched. */
static uintptr_t program_export_entry(const struct dl_phdr_info *info)
{
    int fd = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    struct stat st;
    uintptr_t found = 0;
    void *map = MAP_FAILED;
    if (fstat(fd, &st) == 0 && (size_t)st.st_size >= sizeof(ElfW(Ehdr)))
        map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED)
        return 0;
    const unsigned char *file = map;
    size_t size = (size_t)st.st_size;
    const ElfW(Ehdr) *eh = map;
    if (memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0 || eh->e_shentsize != sizeof(ElfW(Shdr)) ||
        eh->e_shoff > size || eh->e_shnum > (size - eh->e_shoff) / sizeof(ElfW(Shdr)))
        goto out;
    const ElfW(Shdr) *sh = (const ElfW(Shdr) *)(file + eh->e_shoff);
    for (size_t i = 0; i < eh->e_shnum && !found; i++) {
        if (sh[i].sh_type != SHT_SYMTAB || sh[i].sh_link >= eh->e_shnum ||
            sh[i].sh_entsize != sizeof(ElfW(Sym)))
            continue;
        const ElfW(Shdr) *strsh = &sh[sh[i].sh_link];
        if (sh[i].sh_offset > size || sh[i].sh_size > size - sh[i].sh_offset ||
            strsh->sh_offset > size || strsh->sh_size > size - strsh->sh_offset)
            continue;
        const ElfW(Sym) *syms = (const ElfW(Sym) *)(file + sh[i].sh_offset);
        const char *strs = (const char *)(file + strsh->sh_offset);
        size_t nsyms = sh[i].sh_size / sizeof(ElfW(Sym));
        for (size_t k = 1; k < nsyms; k++) {
            const ElfW(Sym) *s = &syms[k];
            if (ELF64_ST_TYPE(s->st_info) != STT_FUNC || s->st_shndx == SHN_UNDEF ||
                s->st_name >= strsh->sh_size ||
                memchr(strs + s->st_name, 0, strsh->sh_size - s->st_name) == NULL)
                continue;
            if (strcmp(strs + s->st_name, "cudaIpcGetMemHandle") == 0) {
                found = info->dlpi_addr + s->st_value;
                break;
            }
        }
    }
out:
    munmap(map, size);
    return found;
}

/* Does the object's code hold a direct call or jump to `target`? Its
 * executable segments, in memory, instruction encodings of this machine. */
static bool calls(const struct dl_phdr_info *info, uintptr_t target)
{
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_X) || !(ph->p_flags & PF_R))
            continue;
        const unsigned char *code = (const unsigned char *)(info->dlpi_addr + ph->p_vaddr);
        size_t n = ph->p_memsz < ph->p_filesz ? ph->p_memsz : ph->p_filesz;
#if defined(__x86_64__)
        for (size_t k = 0; k + 5 <= n; k++) {
            if (code[k] != 0xe8 && code[k] != 0xe9)
                continue;
            int32_t rel;
            memcpy(&rel, code + k + 1, sizeof rel);
            if ((uintptr_t)(code + k + 5) + (uintptr_t)(intptr_t)rel == target)
                return true;
        }
#elif defined(__aarch64__)
        for (size_t k = 0; k + 4 <= n; k += 4) {
            uint32_t insn;
            memcpy(&insn, code + k, sizeof insn);
            if ((insn & 0x7c000000u) != 0x14000000u)   /* B and BL: imm26 */
                continue;
            int64_t off = (int64_t)((int32_t)(insn << 6) >> 6) * 4;
            if ((uintptr_t)(code + k) + (uintptr_t)off == target)
                return true;
        }
#else
        (void)code;
        (void)n;
        (void)target;
#endif
    }
    return false;
}

struct scan {
    bool first;                      /* the next object is the first of this look */
    bool found;
    unsigned long long adds;         /* objects ever loaded, as of this look */
};

static unsigned long long scanned_adds;   /* under scan_lock: as of the last whole look */
static bool program_looked_at;            /* under scan_lock: its code does not change */

static int scan_object(struct dl_phdr_info *info, size_t size, void *arg)
{
    struct scan *sc = arg;
    if (sc->first) {
        sc->first = false;
        if (size >= offsetof(struct dl_phdr_info, dlpi_adds) + sizeof info->dlpi_adds) {
            sc->adds = info->dlpi_adds;
            if (sc->adds == scanned_adds)
                return 1;   /* nothing loaded since the last look */
        }
    }
    const char *name = info->dlpi_name ? info->dlpi_name : "";   /* "": the program */
    if (*name && excluded(name))
        return 0;
    if (imports_export_call(info)) {
        sc->found = true;
        return 1;   /* one is enough */
    }
    if (!*name && !program_looked_at) {   /* a static runtime in it, and a call to it */
        program_looked_at = true;
        uintptr_t entry = program_export_entry(info);
        if (entry && calls(info, entry)) {
            sc->found = true;
            return 1;
        }
    }
    return 0;
}

void vt__ipc_scan(void)
{
    /* A thread that finds another looking goes on with what is known; a
     * child forked while a look was under way never blocks on the lock. */
    if (pthread_mutex_trylock(&scan_lock) != 0)
        return;
    unsigned gen = atomic_load_explicit(&vt__ipc_loads_gen, memory_order_relaxed);
    if (gen != atomic_load_explicit(&vt__ipc_scanned_gen, memory_order_relaxed)) {
        struct scan sc = { .first = true };
        dl_iterate_phdr(scan_object, &sc);
        scanned_adds = sc.adds;
        if (sc.found)
            atomic_store_explicit(&vt__ipc_on, true, memory_order_relaxed);
        atomic_store_explicit(&vt__ipc_scanned_gen, gen, memory_order_relaxed);
    }
    pthread_mutex_unlock(&scan_lock);
}

void vt__alloc_ipc_exporting(const void *ptr)
{
    uint64_t addr = (uint64_t)(uintptr_t)ptr;
    for (int d = 0, n = vt__heap_count(); d < n; d++) {
        vt__heap *h = vt__heap_get(d, false);
        if (!h)
            continue;
        vt__heap_lock(h);
        vt__segment *s = vt__segs_find(h, addr, NULL);
        uint64_t base = s ? s->addr : 0, size = s ? s->size : 0;
        bool vmm = s && s->va_size;
        vt__heap_unlock(h);
        if (!s)
            continue;
        if (addr == base && !vmm)
            return;   /* the importer opens exactly this pointer */
        const vt__conf *cfg = vt__config();
        const char *later = cfg->ipc_safe == VT_IPC_SAFE_AUTO ? "; later allocations are ipc-safe"
                                                              : "";
        if (vmm)   /* an expandable segment: the driver refuses VMM memory */
            fprintf(stderr,
                    "vramtrace: cudaIpcGetMemHandle(%p): the block is in an expandable segment "
                    "(VMM memory, which legacy IPC refuses). Run with VRAMTRACE_CONF=ipc_safe:1 "
                    "(or expandable_segments:0)%s\n", ptr, later);
        else
            fprintf(stderr,
                    "vramtrace: cudaIpcGetMemHandle(%p): the block is %llu bytes into a cached "
                    "segment of %llu bytes; an importer that does not add that offset reads "
                    "other bytes. Run with VRAMTRACE_CONF=ipc_safe:1 (or cache:0)%s\n",
                    ptr, (unsigned long long)(addr - base), (unsigned long long)size, later);
        if (cfg->ipc_safe == VT_IPC_SAFE_AUTO)
            atomic_store_explicit(&vt__ipc_on, true, memory_order_relaxed);
        return;
    }
}
