/*
 * vramtrace/format.h - the snapshot file format (.vtsnap).
 *
 * Everything a third-party reader needs to parse a snapshot without linking
 * vramtrace. The constants below are part of the format: their values never
 * change once released; new kinds are only ever appended.
 */
#ifndef VRAMTRACE_FORMAT_H
#define VRAMTRACE_FORMAT_H

#include <stdint.h>

/* ------------------------------------------------------------------------ */
/*  Event kinds                                                             */
/* ------------------------------------------------------------------------ */
/* Field use per kind (fields of one event: seq, time_ns, thread, device,
 * stream, addr, req_size, size, stack, aux, aux2, str):
 *
 *   ALLOC            addr/size of the block handed out, req_size as asked,
 *                    stream = allocating stream, stack = allocation stack,
 *                    aux (since 1.3) = VT_ALLOC_* flags: VT_ALLOC_NO_STREAM
 *                    when the allocation was ordered on no stream (cudaMalloc,
 *                    cuMemAlloc; stream then reads 0, as the legacy stream's
 *                    does, but the cache keeps such blocks apart from the
 *                    legacy stream's: a replay needs to know which)
 *   FREE_REQUESTED   addr/size, stream = freeing stream (0 when unknown:
 *                    plain cudaFree), stack = free stack, aux = 1 if the
 *                    block must wait for events (pending) before reuse,
 *                    aux2 (since 1.12) = the block's allocation stack (0:
 *                    not known), so that a window whose ring overwrote the
 *                    block's ALLOC still knows where it was made
 *   FREE_COMPLETED   addr/size: the block became reusable (pending events done)
 *   SEGMENT_ALLOC    addr/size of a backend allocation (cudaMalloc/cuMemAlloc)
 *                    aux = pool (VT_POOL_*), aux2 (since 1.14) = the observed
 *                    framework's private pool it serves (a CUDA graph's, or a
 *                    torch.cuda.MemPool's: a nonzero id, the same for every
 *                    segment of that pool), 0 for its default pool
 *   SEGMENT_FREE     addr/size of a backend free
 *   STREAM_USE       addr = block, stream = the extra stream (vt_record_stream)
 *   OOM              req_size = request, aux = bytes free on the device,
 *                    aux2 = bytes reserved by the cache, addr (since 1.13)
 *                    = VT_OOM_* flags: VT_OOM_FRAMEWORK for the OOM of an
 *                    observed framework allocator (PyTorch's, as it reported
 *                    it); in a recording of one (1.13 on), an OOM without it
 *                    is a library's own request that vramtrace's cache
 *                    served outside the framework's (cuBLAS making a handle).
 *                    Since 1.15 addr's bits above its low byte,
 *                    VT_OOM_POOL(addr), name the observed framework's
 *                    private pool the request was for (a CUDA graph's while
 *                    it was captured, a torch.cuda.MemPool's: the id its
 *                    SEGMENT_ALLOCs carry in aux2), 0 for its default pool
 *   MARK             str = label
 *   BAD_FREE         addr = the pointer, aux = VT_BAD_FREE_* reason
 *   PASSTHROUGH      addr/size of a call not cached (managed, host, VMM,
 *                    pitched, arrays, explicit pools, registered host),
 *                    aux = VT_PASS_* which call, aux2 = 1 for the release.
 *                    A release names its own call, or VT_PASS_FOREIGN_FREE
 *                    (cudaFree of a pointer the cache does not own): views
 *                    match a release to the allocation open at its addr
 *   FORK             (since 1.2) aux = the parent's pid: this process was
 *                    forked here. It is recorded first thing in the child
 *                    (when the parent had recorded anything). Every
 *                    allocation made before the last FORK of a file (or
 *                    before its window, when the FORK is in it) is the
 *                    parent's, inherited: views do not report it as this
 *                    process's leak
 *   STREAM_DESTROY   (since 1.5) stream = a stream the program destroyed
 *                    while the cache held segments allocated for it, on
 *                    this device. Recorded before what the destruction does
 *                    to them: the SEGMENT_FREEs of the ones that held no
 *                    allocated block follow; the others go back (a
 *                    SEGMENT_FREE) when their last block is freed. A replay
 *                    destroys the stream at this point, as the cache did
 *   EMPTY_CACHE      (since 1.5) the program asked the cache to give its
 *                    unused memory back (vt_empty_cache,
 *                    torch.cuda.empty_cache); the SEGMENT_FREEs follow. A
 *                    replay empties its cache at this point
 *   TENSOR_NEW       aux = tensor id, aux2 = base tensor id (0: none),
 *                    addr = data_ptr, size = nbytes, str = name; since 1.8
 *                    aux2 may instead be VT_TENSOR_SAVED_ONLY: the tensor
 *                    was found by a walk on memory whose recorded tensors
 *                    all died: it stands for a saved tensor in C++ that
 *                    keeps the memory (an autograd node's), or is a tensor
 *                    the program holds that no op showed (a compiled
 *                    graph's output made by its generated code); its making
 *                    is not a use of the storage, and it does not take the
 *                    storage over.
 *                    Since 1.11 aux2 may also carry VT_TENSOR_AGAIN (with
 *                    the base id or VT_TENSOR_SAVED_ONLY beside it): tensor
 *                    aux, declared earlier, is declared again as it is now
 *                    (stack = where it was made; stream = the longest it
 *                    stayed unused before a use, 0: none seen, its usual gap
 *                    that the window may not show: in marks where the program
 *                    marks its steps, else in ns), because a run longer than
 *                    the ring overwrites the first declaration of what it
 *                    still holds. Not a new tensor and not a use: a reader
 *                    that knows aux from a TENSOR_NEW in the window ignores
 *                    it; one that does not takes the tensor as made before
 *                    the window, unused since the window began (until a
 *                    TENSOR_USE in it says otherwise)
 *   TENSOR_USE       aux = tensor id, stack = stack of the use
 *   TENSOR_DROP      aux = tensor id
 *   STORAGE_EXTERNAL addr/size, device: a storage vramtrace did not allocate
 *   STORAGE_EXTERNAL_FREE addr
 *   HOLDER_NEW       aux = holder id, str = name, aux2 (since 1.5) =
 *                    VT_HOLDER_* flags (0 in older files):
 *                    VT_HOLDER_GC_COLLECTION: the holder is one run of a
 *                    garbage collector; each REF from it names a tensor that
 *                    this run freed (a reference cycle kept it until then),
 *                    recorded just before that tensor's TENSOR_DROP
 *   REF              aux = from id, aux2 = to id, str = label
 *   UNREF            aux = from id, aux2 = to id
 *   FINDING          reserved for checker findings embedded in a snapshot
 *   TENSOR_NAME      (since 1.1) aux = tensor id, str = its new name: the
 *                    tensor keeps its id, storage and uses; views show the
 *                    latest name a tensor has in the snapshot (also for what
 *                    happened before the rename). With a holder id: the
 *                    holder's name where the snapshot has none for it (its
 *                    HOLDER_NEW left the ring); a named holder keeps its own
 *   PAUSE            (since 1.9) aux = its length in ns: the tool that
 *                    records stopped the program just before this event for
 *                    its own work (a tracker's holder walk at a mark or a
 *                    tick; vt_paused), on the recording thread. The program
 *                    did nothing meanwhile: `check`'s time rule does not
 *                    count it as time a storage was held
 *
 * Each kind exists from the format version that introduced it: 1..10 and
 * 16..24 from 1.0, TENSOR_NAME from 1.1, FORK from 1.2, STREAM_DESTROY and
 * EMPTY_CACHE from 1.5, PAUSE from 1.9 (see "Versions and compatibility").
 */
enum vt_event_kind {
    VT_EV_ALLOC = 1,
    VT_EV_FREE_REQUESTED = 2,
    VT_EV_FREE_COMPLETED = 3,
    VT_EV_SEGMENT_ALLOC = 4,
    VT_EV_SEGMENT_FREE = 5,
    VT_EV_STREAM_USE = 6,
    VT_EV_OOM = 7,
    VT_EV_MARK = 8,
    VT_EV_BAD_FREE = 9,
    VT_EV_PASSTHROUGH = 10,
    VT_EV_FORK = 11,              /* format 1.2 */
    VT_EV_STREAM_DESTROY = 12,    /* format 1.5 */
    VT_EV_EMPTY_CACHE = 13,       /* format 1.5 */
    /* 14..15 reserved for allocator events */
    VT_EV_TENSOR_NEW = 16,
    VT_EV_TENSOR_USE = 17,
    VT_EV_TENSOR_DROP = 18,
    VT_EV_STORAGE_EXTERNAL = 19,
    VT_EV_STORAGE_EXTERNAL_FREE = 20,
    VT_EV_HOLDER_NEW = 21,
    VT_EV_REF = 22,
    VT_EV_UNREF = 23,
    VT_EV_FINDING = 24,
    VT_EV_TENSOR_NAME = 25,       /* format 1.1 */
    VT_EV_PAUSE = 26,             /* format 1.9 */
    VT_EV_KIND_COUNT
};

/* Flags of an ALLOC event's aux (format 1.3; 0 in older files, where an
 * allocation on stream 0 may have been ordered on no stream). */
enum vt_alloc_flags {
    VT_ALLOC_NO_STREAM = 1,  /* cudaMalloc / cuMemAlloc: ordered on no stream */
    VT_ALLOC_POOL_BLOCK = 2, /* (1.6) a block of an observed framework allocator
                                (vt_pool_event; VT_META_POOL_OBSERVED) */
};

/* Flags of a HOLDER_NEW event's aux2 (format 1.5; 0 in older files, where a
 * collection's holder is an ordinary holder). */
enum vt_holder_flags {
    VT_HOLDER_GC_COLLECTION = 1,  /* one run of a garbage collector (Python's gc) */
};

/* The largest request the small pool serves (vramtrace's cache, as
 * PyTorch's kSmallSize): VT_POOL_SMALL's requests. */
#define VT_POOL_SMALL_MAX_REQUEST (1ull << 20)

/* Pools a block or segment belongs to. */
enum vt_pool {
    VT_POOL_SMALL = 0,       /* requests <= 1 MiB, 2 MiB segments */
    VT_POOL_LARGE = 1,       /* larger requests */
    VT_POOL_UNCACHED = 2,    /* cache:0 pass-through allocations */
    /* In memory only (a file has them in section FRAMEWORK_STATE, as
     * SMALL and LARGE): a segment of an observed framework allocator
     * (PyTorch's), of its small or large pool. Its blocks are the
     * framework's, as VT_ALLOC_POOL_BLOCK ALLOCs are; the STATE section's
     * blocks in a VT_META_POOL_OBSERVED snapshot are libraries' own. */
    VT_POOL_FRAMEWORK_SMALL = 3,
    VT_POOL_FRAMEWORK_LARGE = 4,
};

/* States of a block in the allocator-state section (as PyTorch names them). */
enum vt_block_state {
    VT_BLOCK_ACTIVE_ALLOCATED = 0,    /* handed out to the program */
    VT_BLOCK_ACTIVE_PENDING_FREE = 1, /* freed, waiting for stream events */
    VT_BLOCK_INACTIVE = 2,            /* free in the cache */
};

/* Reasons of a BAD_FREE event. */
enum vt_bad_free_reason {
    VT_BAD_FREE_UNKNOWN_POINTER = 1,  /* never allocated by anyone we know */
    VT_BAD_FREE_INTERIOR = 2,         /* points inside a block, not at its start */
    VT_BAD_FREE_DOUBLE = 3,           /* the block is already free */
    VT_BAD_FREE_AFTER_RESET = 4,      /* live when a device reset freed everything */
};

/* Calls seen but not cached (PASSTHROUGH aux). */
enum vt_passthrough_call {
    VT_PASS_MANAGED = 1,          /* cudaMallocManaged / cuMemAllocManaged */
    VT_PASS_HOST = 2,             /* cudaMallocHost / cuMemAllocHost */
    VT_PASS_FROM_POOL = 3,        /* cudaMallocFromPoolAsync */
    VT_PASS_VMM_CREATE = 4,       /* cuMemCreate / cuMemRelease */
    VT_PASS_VMM_MAP = 5,          /* cuMemMap / cuMemUnmap */
    VT_PASS_FOREIGN_FREE = 6,     /* a free of a pointer the cache does not own */
    VT_PASS_PITCH = 7,            /* (1.3) cuMemAllocPitch: cudaMallocPitch, cudaMalloc3D */
    VT_PASS_ARRAY = 8,            /* (1.3) cuArrayCreate / cuArray3DCreate / cuArrayDestroy:
                                     addr = the array handle, size = its texels' bytes */
    VT_PASS_HOST_REGISTER = 9,    /* (1.3) cuMemHostRegister / cuMemHostUnregister */
    VT_PASS_GRAPH = 10,           /* (1.3) cudaMallocAsync on a capturing stream: a graph
                                     memory node, the driver's */
};

/* ------------------------------------------------------------------------ */
/*  File layout                                                             */
/* ------------------------------------------------------------------------ */
/* Magic, version and compatibility rule, header, section table, section
 * encodings.
 *
 * All integers are little-endian. "varint" is unsigned LEB128 (7 bits per
 * byte, low group first, high bit = more follows, at most 10 bytes);
 * "svarint" is a varint of the zigzag encoding ((v << 1) ^ (v >> 63)).
 * CRC32C is the Castagnoli CRC (polynomial 0x1EDC6F41, reflected, initial
 * and final XOR 0xFFFFFFFF; CRC32C("123456789") = 0xE3069283).
 *
 * Versions and compatibility
 *   A file carries major.minor. A reader accepts every file whose major equals
 *   its own and rejects any other major with "written by a newer vramtrace
 *   (format 2.x); this reader understands 1.x". Minor versions only ADD:
 *   readers skip unknown sections, ignore trailing bytes at the end of the
 *   metadata section, ignore event columns beyond the ones they know, honour
 *   larger header_size / table_entry_size, and (for files of a NEWER minor
 *   only) accept event kinds they do not know; views ignore those events.
 *   An event kind belongs to the minor that introduced it (Event kinds
 *   above): a file of minor m may hold only kinds of minors <= m, so a reader
 *   rejects a kind that is newer than the file's own minor even when the
 *   reader knows it (a 1.0 file with TENSOR_NAME is corrupt, exactly as a 1.0
 *   reader would find it). A writer writes its own minor (this one: 1.14).
 *   History: 1.0 first release; 1.1 adds event kind TENSOR_NAME (25). A 1.0
 *   reader reads a 1.1 file whole and skips its TENSOR_NAME events (tensors
 *   then keep the name of their TENSOR_NEW). 1.2 adds event kind FORK (11),
 *   which an older reader skips (it then shows a forked child's inherited
 *   allocations as alive like its own), and appends to META stacks_truncated,
 *   a flags word (VT_META_*: whether STATE is the allocator's complete state
 *   at the snapshot, whether the allocator's true peaks follow) and those
 *   peaks per device; older readers ignore them as trailing META bytes. A 1.2
 *   reader reading an older file reads stacks_truncated as 0, takes STATE as
 *   complete when it has a segment (the recorder wrote it whole whenever the
 *   allocator could describe itself) and has no true peaks to show.
 *   1.3 adds PASSTHROUGH calls (aux) VT_PASS_PITCH (7), VT_PASS_ARRAY (8),
 *   VT_PASS_HOST_REGISTER (9) and VT_PASS_GRAPH (10): allocations that left
 *   no event before, or that the cache served before (graph memory). Every
 *   1.x reader reads them (PASSTHROUGH aux is data, not validated); views
 *   since 1.3 show PASSTHROUGH allocations (of any file version) as kinds of
 *   their own, and a call they do not know (a newer minor's) as "other".
 *   1.3 also gives ALLOC events flags in aux (VT_ALLOC_NO_STREAM), which older
 *   readers ignore; in older files aux of ALLOC is 0.
 *   1.4 adds section FIRST_LINES (7): for Python frames, the line where the
 *   function is defined. Older readers skip it as an unknown section and
 *   show the frames as before; a 1.4 reader reading an older file (which
 *   never has one) gives every frame first line 0 (unknown), and ignores a
 *   FIRST_LINES section in a file older than 1.4.
 *   1.5 gives HOLDER_NEW events flags in aux2 (VT_HOLDER_GC_COLLECTION),
 *   which older readers ignore (they then see a collection as an ordinary
 *   holder); in older files aux2 of HOLDER_NEW is 0.
 *   1.5 also adds event kinds STREAM_DESTROY (12) and EMPTY_CACHE (13), which an
 *   older reader keeps as kinds it does not know (views skip them); without
 *   them (older files) a replay keeps a destroyed stream's segments and an
 *   emptied cache's segments cached.
 *   1.6 adds META flags VT_META_POOL_OBSERVED and VT_META_POOL_UNSEEN (a
 *   framework's caching allocator, PyTorch's, seen or not seen block by
 *   block) and the ALLOC flag VT_ALLOC_POOL_BLOCK, which older readers drop
 *   with the other unknown bits: they then count an observed process's blocks
 *   and its libraries' own device allocations alike as allocated, and say
 *   nothing of an unseen framework allocator.
 *   1.7 adds META flag VT_META_FRAMEWORK_SETTINGS and, after the peaks, the
 *   string of the observed framework allocator's settings (vt_pool_settings:
 *   PyTorch's PYTORCH_CUDA_ALLOC_CONF text), which a replay under the
 *   framework's rules starts from; older readers skip it (trailing META
 *   bytes) and replay from the framework's defaults.
 *   1.8 adds section FRAME_FLAGS (8): per frame, what the recording machine
 *   knew of it that its names do not say (VT_FRAME_*: a Python file of a
 *   package an installer put outside site-packages). Older readers skip it
 *   as an unknown section and take such frames by their path alone; a 1.8
 *   reader reading an older file gives every frame flags 0, and ignores a
 *   FRAME_FLAGS section in a file older than 1.8.
 *   1.8 also gives TENSOR_NEW aux2 the value VT_TENSOR_SAVED_ONLY (a tensor
 *   standing for memory only a saved tensor keeps), which an older reader
 *   takes for a view of a tensor it does not know (it then counts the
 *   tensor's making as a use of the storage).
 *   1.9 adds event kind PAUSE (26): the recording tool's own pauses of the
 *   program, which an older reader skips (its `check` then counts them as
 *   the program's time: a temporary the program replaced at its next op
 *   after a long pause may read as held).
 *   1.10 adds section FRAMEWORK_STATE (9): an observed framework
 *   allocator's segments with the blocks alive in them, which an older
 *   reader skips (its views then miss, after the ring overwrote their
 *   events, the framework's early segments and the blocks still alive in
 *   them, as before).
 *   1.11 gives TENSOR_NEW aux2 the flag VT_TENSOR_AGAIN (a live tensor
 *   declared again, so that a snapshot whose ring overwrote its first
 *   declaration still knows it), which an older reader takes for a view of
 *   a tensor it does not know, made (and used) then: it then sees such a
 *   tensor used at its declaration, and a tensor it knew twice.
 *   1.12 gives FREE_REQUESTED aux2 the block's allocation stack, which an
 *   older reader ignores (it then knows a block made before the window,
 *   freed in it, by its free alone, as before); in older files it is 0.
 *   1.13 gives OOM addr the flag VT_OOM_FRAMEWORK (0 before), which an older
 *   reader ignores (it then takes a library's OOM next to an observed
 *   framework for the framework's, as before; so does a reader of an older
 *   file).
 *   1.14 gives SEGMENT_ALLOC aux2 the private pool a framework segment
 *   serves (0 before), which an older reader ignores (it then takes a CUDA
 *   graph's pool for the framework's default pool, as before; so does a
 *   reader of an older file), and adds section SEGMENT_POOLS (10): the same
 *   for the segments of the states, which an older reader skips.
 *   1.15 gives OOM addr the private pool the request was for above its
 *   flags (VT_OOM_POOL; 0 before), which an older reader ignores (it then
 *   takes a request made during a CUDA graph's capture for one of the
 *   default pool, as before; so does a reader of an older file).
 *
 * Header (VT_FILE_HEADER_SIZE = 64 bytes at offset 0)
 *    0  8  magic "\x89VTSNAP\n" (89 56 54 53 4E 41 50 0A)
 *    8  2  major version (VT_FORMAT_MAJOR)
 *   10  2  minor version (VT_FORMAT_MINOR)
 *   12  4  header_size (>= 64)
 *   16  8  file_size (the whole file; a shorter file is truncated)
 *   24  8  table_offset (the section table; the writer puts it at header_size)
 *   32  4  section_count
 *   36  4  table_entry_size (>= 48)
 *   40  4  table_crc: CRC32C of the section table (count * entry size bytes)
 *   44 16  reserved, zero
 *   60  4  header_crc: CRC32C of bytes 0..59
 *
 * Section table entry (VT_FILE_ENTRY_SIZE = 48 bytes)
 *    0  4  id (VT_SECTION_*)          4  4  flags (bit 0: zstd-compressed)
 *    8  8  offset of the stored bytes 16  8  stored_size
 *   24  8  raw_size (after decompression; = stored_size when not compressed)
 *   32  8  count (items in the section, see each section)
 *   40  4  crc: CRC32C of the stored bytes    44  4  reserved, zero
 * A compressed section is exactly one zstd frame (with its content size).
 * Every section of this version appears exactly once, except FIRST_LINES
 * and FRAME_FLAGS, which appear at most once (a writer may leave them out
 * when no frame has a first line or a flag; absent, every first line and
 * every frame's flags are 0); order is free.
 *
 * Size bounds (so that a reader knows what a section may cost before it
 * allocates anything, and a small hostile file cannot make it allocate
 * gigabytes): a compressed section decodes to at most
 * VT_MAX_COMPRESSION_RATIO times its stored bytes (a writer whose data
 * compresses better stores that section uncompressed instead); and where its
 * count bounds a section, raw_size is at most what count items can take in
 * their longest encoding: META at most VT_MAX_META_BYTES, FRAMES
 * count * VT_MAX_FRAME_BYTES, FIRST_LINES count * VT_MAX_FIRST_LINE_BYTES,
 * FRAME_FLAGS count * VT_MAX_FRAME_FLAG_BYTES, SEGMENT_POOLS
 * count * VT_MAX_SEGMENT_POOL_BYTES,
 * STACKS (count - 1) * VT_MAX_STACK_NODE_BYTES,
 * EVENTS VT_MAX_EVENTS_HEADER_BYTES + count * VT_MAX_EVENT_BYTES (this
 * version needs at most 114 bytes per event; columns that a later minor adds
 * must fit in the rest, larger per-event data goes into a section of its
 * own). STRINGS and STATE are bounded by the ratio alone (strings and blocks
 * per segment have no fixed size). These bounds hold for every version 1.x.
 *
 * Section encodings (the raw bytes after decompression):
 *
 *   META (count 1): svarint pid, svarint rank, varint host, command_line,
 *     config, library_version (string indexes), varint clock_base_monotonic_ns,
 *     clock_base_realtime_ns, snapshot_time_ns, events_recorded,
 *     events_overwritten, stacks_dropped, varint ndevices, then per device
 *     svarint ordinal, varint name (string), varint total_bytes.
 *     Since 1.2, then: varint stacks_truncated, varint flags (VT_META_*), and
 *     when flags has VT_META_DEVICE_PEAKS, per device in the same order varint
 *     peak_allocated, peak_reserved, peak_active (bytes, the allocator's own
 *     peaks as vt_get_stats keeps them: since the start of the process or the
 *     last vt_reset_peak_stats, whatever the event window kept).
     Since 1.7, when flags has VT_META_FRAMEWORK_SETTINGS: varint
     framework_settings (string).
 *     stacks_dropped counts the stack captures of the whole run that could
 *     not be interned whole because the recorder's stack table was full.
 *     Such a capture keeps the deepest prefix of its stack that the table
 *     already held (its outer callers, outermost first: a path from the root
 *     that stops short of the call site), or no stack when not even the
 *     outermost frame was known. stacks_truncated counts the events in this
 *     file whose stack is such a prefix; their stack ids are ordinary ids.
 *     The strings of a snapshot are only those that its events, frames and
 *     metadata name: string indexes are the file's own, not the recorder's.
 *
 *   STRINGS (count = number of strings, >= 1): string 0 is "" and is not
 *     stored; then for each string 1..count-1: varint length, that many bytes
 *     (UTF-8 as recorded, no NUL).
 *
 *   FRAMES (count = frames): per frame svarint (ip - previous ip), svarint
 *     (module_offset - previous module_offset), varint module, build_id,
 *     function, file (string indexes), varint line. A frame of the Python
 *     interpreter's own stack (a Python function running, not native code)
 *     has ip 0, module "python", no build id, and its file, line and
 *     function.
 *
 *   FRAME_FLAGS (since 1.8, optional; count = frames): per frame, in the
 *     order of FRAMES, varint flags (VT_FRAME_*; a reader ignores bits it
 *     does not know). A writer leaves the section out when every frame's
 *     flags are 0.
 *
 *   FIRST_LINES (since 1.4, optional; count = frames, the FRAMES section's
 *     count): per frame, in the order of FRAMES, varint first_line: the line
 *     of its file where the frame's function is defined, as CPython's code
 *     object has it (co_firstlineno: the function's first decorator, else
 *     its `def`; 1 for a module's top-level code), so that a view can say
 *     "model.py:88 in forward, defined at line 80". 0: not known (native
 *     frames, Python frames of other origins). At most 2^31 - 1.
 *
 *   STACKS (count = nodes, >= 1): node 0 is the root and is not stored; for
 *     each node i in 1..count-1: varint (i - parent) (>= 1, so a parent always
 *     precedes its children), varint frame (< number of frames).
 *
 *   STATE (count = segments): varint nsegments, varint nblocks, then per
 *     segment: svarint (addr - end of the previous segment), varint size,
 *     varint stream, svarint device, byte pool, varint nblocks, followed by its
 *     blocks: varint size (> 0), varint req_size, svarint (stream - segment's
 *     stream), varint alloc_seq, varint stack, byte state. Block addresses are
 *     implied: the blocks tile the segment in address order, so their sizes
 *     must add up to the segment size exactly.
 *
 *   FRAMEWORK_STATE (1.10, optional; count = segments): as STATE, for an
 *     observed framework allocator's segments (pool SMALL or LARGE, its
 *     own pools): its blocks alive at the snapshot (alloc_seq and stack as
 *     its ALLOC event had them, also where the ring lost that event) and
 *     its free space. Written when a snapshot has such segments.
 *
 *   SEGMENT_POOLS (1.14, optional; count = entries): the private pools of
 *     the states' segments (a CUDA graph's, a torch.cuda.MemPool's: SEGMENT_ALLOC
 *     aux2's id), so that a window whose ring overwrote a pool's
 *     SEGMENT_ALLOC still knows it. The segments are numbered from 0 in file
 *     order, STATE's then FRAMEWORK_STATE's; per entry, in increasing order of
 *     segment: varint (its segment's number - the previous entry's, the
 *     first against 0; >= 1 after the first), varint the pool's id (> 0). A
 *     segment without an entry serves its allocator's default pool. Written
 *     when a snapshot has such segments.
 *
 *   EVENTS (count = events): varint n, varint ncolumns (15 in 1.0 to 1.5), varint
 *     byte length of each column, then the columns back to back. Column c
 *     holds field f of every event in seq order:
 *      0 kind      1 byte
 *      1 seq       varint (seq - (previous seq + 1)); the first: seq itself,
 *                  so sequence numbers are strictly increasing by construction
 *      2 time_ns   svarint (time - previous time), first against 0
 *      3 thread    svarint (thread - previous thread)
 *      4 device    1 byte (int8)
 *      5 stream    1 byte: 0..7 = position in a move-to-front list of the 8
 *                  most recent streams (initially all 0), 8 = the stream is
 *                  the next varint of column 6; either way it then moves to
 *                  the front of the list
 *      6 stream literals (varints)
 *      7 addr      svarint (addr - previous addr of an event of the same kind)
 *      8 size      1 byte: 0..15 = move-to-front list of 16 recent sizes
 *                  (initially all 0), 16 = next varint of column 9
 *      9 size literals (varints)
 *     10 req_size  svarint (size - req_size)
 *     11 stack     varint       12 aux  varint     13 aux2  varint
 *     14 str       varint
 *   Columns of fixed width (0, 4, 5, 8) hold exactly n bytes; every column is
 *   consumed exactly.
 *
 * A reader validates all of it (magic, version, CRCs, sizes, and every
 * index: strings, frames, stack nodes, block tiling, event kinds) and names
 * the file, the section and the byte offset of the first problem.
 */
#define VT_FILE_MAGIC "\x89VTSNAP\n"
#define VT_FILE_MAGIC_SIZE 8
#define VT_FORMAT_MAJOR 1
#define VT_FORMAT_MINOR 15
/* the META section's format_version = major << 16 | minor */
#define VT_FORMAT_VERSION ((VT_FORMAT_MAJOR << 16) | VT_FORMAT_MINOR)
#define VT_FILE_HEADER_SIZE 64
#define VT_FILE_ENTRY_SIZE 48
#define VT_SECTION_FLAG_ZSTD 1u

/* META flags (format 1.2). */
enum vt_meta_flag {
    VT_META_STATE_COMPLETE = 1u << 0, /* STATE is the allocator's whole state at
                                         the snapshot: the truth of what is alive */
    VT_META_DEVICE_PEAKS = 1u << 1,   /* per-device true peaks follow */
    VT_META_IPC_SAFE = 1u << 2,       /* the allocator was IPC-safe at the snapshot:
                                         blocks ordered on no stream got a device
                                         allocation of their own (VRAMTRACE_CONF
                                         ipc_safe:1, or auto and switched on) */
    VT_META_POOL_OBSERVED = 1u << 3,  /* (1.6) a framework's own caching allocator
                                         (PyTorch's) was observed: its blocks are
                                         ALLOC/FREE_* events and the device
                                         allocations it made its segments
                                         (SEGMENT_ALLOC/FREE); STATE describes
                                         vramtrace's cache only, so it is not
                                         complete */
    VT_META_POOL_UNSEEN = 1u << 4,    /* (1.6) a framework's caching allocator ran
                                         that could not be observed: its ALLOCs
                                         are whole segments of it, not the
                                         objects (tensors) inside them */
    VT_META_FRAMEWORK_SETTINGS = 1u << 5, /* (1.7) the observed framework allocator's
                                         settings follow (a string: PyTorch's
                                         PYTORCH_CUDA_ALLOC_CONF text) */
};

/* Size bounds of the raw (decoded) sections, see "Size bounds" above. */
#define VT_MAX_COMPRESSION_RATIO 1024
#define VT_MAX_META_BYTES (1u << 20)
#define VT_MAX_FRAME_BYTES 70          /* 2 svarints + 5 varints */
#define VT_MAX_FIRST_LINE_BYTES 5      /* 1 varint below 2^31 */
#define VT_MAX_FRAME_FLAG_BYTES 5      /* 1 varint of 32 bits */
#define VT_MAX_STACK_NODE_BYTES 20     /* 2 varints */
#define VT_MAX_SEGMENT_POOL_BYTES 20   /* 2 varints */
#define VT_MAX_EVENTS_HEADER_BYTES (16u << 10)
#define VT_MAX_EVENT_BYTES 160

enum vt_section_id {
    VT_SECTION_META = 1,
    VT_SECTION_STRINGS = 2,
    VT_SECTION_FRAMES = 3,
    VT_SECTION_STACKS = 4,
    VT_SECTION_STATE = 5,
    VT_SECTION_EVENTS = 6,
    VT_SECTION_FIRST_LINES = 7,   /* format 1.4 */
    VT_SECTION_FRAME_FLAGS = 8,   /* format 1.8 */
    VT_SECTION_FRAMEWORK_STATE = 9,   /* format 1.10 */
    VT_SECTION_SEGMENT_POOLS = 10,    /* format 1.14 */
};

/* OOM addr (format 1.13): the observed framework allocator's own OOM. */
#define VT_OOM_FRAMEWORK 1ull
/* OOM addr (format 1.15): the private pool the request was for, above the
 * flags' byte (0: the default pool), put and read. */
#define VT_OOM_IN_POOL(id) ((uint64_t)(id) << 8)
#define VT_OOM_POOL(addr) ((uint64_t)(addr) >> 8)

/* TENSOR_NEW aux2 (format 1.8): not a base tensor's id, see TENSOR_NEW. */
#define VT_TENSOR_SAVED_ONLY (1ull << 63)
/* TENSOR_NEW aux2 (format 1.11): a flag beside the base id (or
 * VT_TENSOR_SAVED_ONLY): the tensor declared again, see TENSOR_NEW. */
#define VT_TENSOR_AGAIN (1ull << 62)
/* A TENSOR_NEW's aux2 without the VT_TENSOR_AGAIN flag: the base tensor's
 * id, 0 or VT_TENSOR_SAVED_ONLY. */
#define VT_TENSOR_BASE(aux2) ((aux2) & ~VT_TENSOR_AGAIN)

/* Frame flags (FRAME_FLAGS section, format 1.8). */
enum vt_frame_flag {
    VT_FRAME_INSTALLED = 1u << 0, /* a Python file of an installed package that
                                     lies outside site-packages and
                                     dist-packages (`pip install --target DIR`,
                                     a PYTHONPATH entry of installed packages):
                                     its directory holds the package's
                                     *.dist-info, whose RECORD lists the file's
                                     package. Library code, not the program's */
};

/* Event columns of format 1.0 to 1.5 (EVENTS section). */
enum vt_event_column {
    VT_COL_KIND, VT_COL_SEQ, VT_COL_TIME, VT_COL_THREAD, VT_COL_DEVICE,
    VT_COL_STREAM, VT_COL_STREAM_LIT, VT_COL_ADDR, VT_COL_SIZE, VT_COL_SIZE_LIT,
    VT_COL_REQ_SIZE, VT_COL_STACK, VT_COL_AUX, VT_COL_AUX2, VT_COL_STR,
    VT_COL_COUNT
};

#endif /* VRAMTRACE_FORMAT_H */
