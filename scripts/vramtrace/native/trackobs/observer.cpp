// observer.cpp - track()'s per-op entry on PyTorch's own op hook, instead of
// a TorchDispatchMode (docs/TRACK_OBSERVER.md says why, with the figures).
//
// A TorchDispatchMode costs every op a round trip through Python before
// anything is recorded: PyTorch converts the op's arguments to Python, looks
// the mode's rule up, calls __torch_dispatch__, which calls the OpOverload
// back into the dispatcher, and converts the result back (1.3x on a loop of
// 50 us ops). This file sees the same ops from a RecordFunction callback
// (ATen/record_function.h, the profiler's hook) and hands each to the
// tracker's C recording (_trackfast's Dispatcher.observed) once it has run:
// one GIL acquisition and the op's tensors wrapped, with what the recording
// needs of their storages read here (tensor_facts.h), nothing else in Python.
//
// Which ops. RecordFunction runs for every call through the dispatcher:
// composite ops and their parts, and the ops a kernel calls inside. The mode
// sees an op when dispatch reaches the Python key, below autograd: an op
// whose autograd kernel is its CompositeImplicitAutograd decomposition is
// not seen itself but its parts are (unless autograd's keys are excluded, as
// in inference mode), and nothing a kernel calls is seen (the mode is popped
// while the op runs). So: such an op is passed through (its parts are looked
// at: decomposed_by_autograd), and while an op this file looks at is open on
// a thread, the ops inside it are not looked at: neither are the ops the
// tracker's own recording runs (it runs inside that window).
//
// Threads. The callback is thread-local: PyTorch hands it, with the rest of
// the thread's state, to the autograd engine threads running this thread's
// backward (as it hands the mode). Ops of the thread that installed it, and
// of the Python threads that joined it since (trackobs_join: `vramtrace run
// --track` follows every thread the program starts), go to `on_owner`;
// those of other threads (the engine's) to `on_other`, the same C recording
// for backward ops (Dispatcher.observed_engine), with the stack id of the
// forward op's frames instead of a sequence number: an engine thread runs
// no Python of the program, so there is nothing to capture. Those are held
// back, weakly, and handed over later with what is still alive (engine_ops
// below says when, and why).
//
// Built at first use against the installed torch by
// torch.utils.cpp_extension (vramtrace/_trackobs.py): its C++ ABI is that
// torch's. A plain library with a C interface, loaded with ctypes.PyDLL (its
// calls hold the GIL): no pybind11, whose headers would triple the build.
// Exported: trackobs_install, trackobs_join, trackobs_uninstall, trackobs_drain,
// and the storage reads of storage_reads.h (trackobs_make_weak,
// trackobs_storage_now, trackobs_storage_key, trackobs_storage_use_count).
#include <Python.h>

#include <ATen/SequenceNumber.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/record_function.h>
#include <c10/util/SmallVector.h>
// autograd's Node: node.h from torch 2.13 on (function.h includes it);
// declared in function.h before
#if __has_include(<torch/csrc/autograd/node.h>)
#include <torch/csrc/autograd/node.h>
#else
#include <torch/csrc/autograd/function.h>
#endif
#include <c10/core/StorageImpl.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/util/intrusive_ptr.h>

#include <time.h>

#include <algorithm>
#include <atomic>
#include <string_view>
#include <exception>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "decomposed_ops.h"
#include "frames_of_memory.h"
#include "held_args.h"
#include "storage_address.h"
#include "storage_reads.h"
#include "tensor_facts.h"

// torch/csrc/autograd/python_variable.h (libtorch_python), declared here:
// that header brings pybind11 in. The Python tensor of `var`, a new
// reference: the one it has, or a new one.
PyObject *THPVariable_Wrap(const at::TensorBase &var);

namespace {

using namespace trackobs;   // held_args.h, decomposed_ops.h

// What an operator (one schema, keyed by its name's address in the
// registry) is to the tracker: the OpOverload the mode would have been given
// (a strong reference, kept for the process; nullptr: none found, not
// looked at), and whether autograd runs its decomposition instead of it.
struct Op {
    PyObject *func = nullptr;
    bool decomposed = false;
};

// Never destroyed: an op may run (and call back here) after static
// destructors ran, from another library's exit handler.
std::mutex &ops_lock = *new std::mutex;               // guards known_ops
auto &known_ops = *new std::unordered_map<const char *, Op>;   // schema name -> Op

// Set by trackobs_install, cleared by trackobs_uninstall; read by any thread running
// an op while it is installed (under the GIL once an op is handed over).
std::atomic<bool> active{false};
PyObject *on_owner = nullptr;    // Dispatcher.observed(func, args, out, facts, seq)
PyObject *on_other = nullptr;    // Dispatcher.observed_engine(func, args, out, facts, stack
                                 // [, storage uses])
PyObject *op_for = nullptr;      // op_for(name, overload) -> OpOverload or None
PyObject *engine_frames = nullptr;   // engine_frames() -> stack id to lend, 0: none
// _trackfast's table of them, read without the GIL (set under it)
std::atomic<vt__lent_read_fn> lent_read{nullptr};
std::atomic<const void *> lent_table{nullptr};
// _trackfast's Dispatcher.marking: the thread doing a mark's work now (the
// tracker records nothing then), read without the GIL
std::atomic<const unsigned long *> marking{nullptr};
// _trackfast's engine_uses and its Dispatcher (set under the GIL, called under it)
vt__engine_uses_fn engine_uses = nullptr;
void *engine_uses_self = nullptr;
void (*lend)(uint32_t) = nullptr;    // vt_thread_python_stack, or nullptr
const vt__gc_hold_api *gc = nullptr;  // _trackfast's hold on the collector's count, or nullptr

// The collector's count held while this scope, under the GIL, does the
// observer's own Python work (the tracker's, never the program's: see
// scripts/vramtrace/native/trackfast/gc_schedule.c).
struct GcHeld {
    long token = 0;
    GcHeld() { if (gc != nullptr) token = gc->hold(); }
    ~GcHeld() { if (gc != nullptr) gc->release(token); }
    GcHeld(const GcHeld &) = delete;
    GcHeld &operator=(const GcHeld &) = delete;
};
at::CallbackHandle handle = 0;

// Which threads run the program's forward ops: the installing one and those
// that joined, each for the installation it joined (`session`, counted at
// each trackobs_install): a thread that joined an earlier one keeps its
// callback (removed only by the thread itself) and is ignored.
std::atomic<uint64_t> session{0};
thread_local uint64_t joined = 0;           // the session this thread joined, 0: none
thread_local at::CallbackHandle own_handle = 0;   // its callback, if it joined
// at::RecordFunction::currentThreadId() of the installing thread: an
// autograd node records the id of the thread that made it, and nodes of
// different threads share sequence numbers (each thread counts its own)
std::atomic<uint64_t> owner_rf_thread{0};

// Whether another thread does a mark's work now: what this thread's ops
// made would go unrecorded (the mark's Python lets the GIL go now and then).
bool marking_elsewhere()
{
    const unsigned long *m = marking.load(std::memory_order_acquire);
    if (m == nullptr)
        return false;
    unsigned long who = __atomic_load_n(m, __ATOMIC_RELAXED);
    return who != 0 && who != PyThread_get_thread_ident();
}

// The GIL, taken when no other thread does a mark's work (what this
// thread's op made would go unrecorded then; the mark's Python lets the GIL
// go now and then, so the GIL may come mid-mark): while one does, the GIL is
// let go again and the thread waits, 50 ms in all at most (a mark rarely
// takes longer). Only where the op's thread let the GIL go itself
// (PyTorch's bindings do around an op): never while the program holds it.
PyGILState_STATE gil_outside_marks()
{
    PyGILState_STATE gil = PyGILState_Ensure();
    for (int waited = 0; gil == PyGILState_UNLOCKED && waited < 500 && marking_elsewhere();
         waited++) {
        PyGILState_Release(gil);
        struct timespec pause = {0, 100000};   // 0.1 ms
        nanosleep(&pause, nullptr);
        gil = PyGILState_Ensure();
    }
    return gil;
}

bool follows_this_thread()
{
    return joined != 0 && joined == session.load(std::memory_order_relaxed);
}

// The key under which the frames to lend for autograd node ``seq`` made by
// RecordFunction thread ``thread`` are found: the number itself for the
// installing thread's nodes, with the thread's id above it for another
// thread's (40 bits of numbers: a thread's trillionth node wraps into the
// next thread's ids, which only costs a lookup).
int64_t node_key(uint64_t thread, uint64_t seq)
{
    if (thread == owner_rf_thread.load(std::memory_order_relaxed))
        return static_cast<int64_t>(seq);
    return static_cast<int64_t>(((thread & 0x7fffff) << 40) | (seq & ((1ull << 40) - 1)));
}

thread_local int open_ops = 0;   // ops looked at, open on this thread

// An alias made for a tensor subclass. Tensor._make_subclass (nn.Parameter,
// nn.Buffer) and Tensor.as_subclass (every __torch_function__ subclass's
// results) run aten::detach / aten::alias and then give the new tensor a
// Python object of the subclass, which PyTorch refuses when the tensor has
// one already: wrapping such an output when its op ends would make the
// program's own call fail. Both run the op with the GIL held, which
// PyTorch's generated bindings never do: such outputs are handed over at the
// next op this thread starts (or when the observer is uninstalled), with
// whatever Python object the program gave them by then; weakly held
// meanwhile, so that nothing lives longer than the program lets it (one that
// died is never handed over, as the mode, which these calls hide themselves
// from, never sees it).
// An op held back: handed over later with the tensors still alive then.
struct Deferred {
    PyObject *func = nullptr;     // the OpOverload (kept for the process)
    HeldArgs inputs, outputs;
    int64_t seq = -1;             // the autograd counter when it ran
    bool engine = false;          // an engine thread's op: recorded as a backward op
    uint32_t forward = 0;         // there: the frames lent to it
    c10::SmallVector<uintptr_t, 2> made;  // there: its outputs' StorageImpls
    bool all_or_none = false;     // an alias: handed over only if all its tensors live
};
thread_local std::vector<Deferred> *deferred = nullptr;

// The autograd engine threads' ops, held back until the owner thread's
// next op, a flush of the books (trackobs_drain: a mark, a snapshot, the end
// of the block) or the observer's uninstall. A backward's ops are mostly
// gradients made and freed inside it: handed over as each ends, every one
// of them would be given a Python object, recorded and seen die, one GIL
// acquisition per op (more than half of what tracking a device program
// cost). Held weakly, only what is still alive is handed over, under one
// acquisition; the memory a dead one had is in the trace anyway (the
// allocator's own records, under the forward frames lent to the thread).
// What changes: a backward op's use of a tensor dead by the hand-over is
// recorded as a use of its storage, when that lives on (a saved output,
// read through a tensor SavedVariable::unpack makes for each backward: a
// graph kept across batches reads every batch's again), and not at all when
// the storage died too (its last use is its forward op's, in the same
// step); an output is recorded at the hand-over, not when made. Of those
// handed over, an op whose outputs all died (a backward's gradients flow
// through and are gone) goes to _trackfast's engine_uses with its live
// inputs' own Python objects (record_engine_uses): no tensor is given one,
// nor the op's tuples made.
std::mutex &engine_lock = *new std::mutex;                 // guards engine_ops
auto &engine_ops = *new std::vector<Deferred>;
std::atomic<bool> engine_waiting{false};
constexpr size_t MAX_HELD = 1 << 16;   // an engine thread hands over itself beyond

void hand_over_deferred();
void hand_over_held();

bool alias_for_subclass(const at::RecordFunction &fn)
{
    std::string_view name(fn.name());
    return name == "aten::detach" || name == "aten::alias";
}

// The inputs of an op looked at: IValue copies (a reference each) taken when
// it starts, since RecordFunction hands them to start callbacks only.
struct Started : at::ObserverContext {
    PyObject *func = nullptr;
    c10::SmallVector<c10::IValue, 6> inputs;   // inline: an op has a few
    bool engine = false;       // on another thread than the owner's
    uint32_t forward = 0;      // there: the forward op's frames (a stack id), 0: none
};

// An op starting on another thread than the owner's (an autograd engine
// thread: it runs no Python code): the stack id of the Python frames of the
// forward op it differentiates, lent to the thread while the op runs, so
// that what it allocates is recorded under them (as the mode does by running
// the op inside functions named after those frames), and given to the
// recording with the op. 0: none known.
uint32_t lend_forward_frames()
{
    if (!Py_IsInitialized())
        return 0;
    // the node whose backward runs, read here: asking Python would give the
    // node a Python object, kept as long as the graph (the program's count)
    auto node = torch::autograd::get_current_node();
    if (node == nullptr)
        return 0;
    // A node no forward op made (AccumulateGrad, which autograd gives the
    // largest number so that it runs first: a parameter's .grad) has no
    // frames anywhere: asking Python would take the GIL on this thread for
    // every parameter of every backward, to hear 0.
    if (node->sequence_nr() == std::numeric_limits<uint64_t>::max())
        return 0;
    auto seq = static_cast<unsigned long long>(node_key(node->thread_id(), node->sequence_nr()));
    // written when the forward op was recorded: no GIL to take
    vt__lent_read_fn read = lent_read.load(std::memory_order_acquire);
    const void *table = lent_table.load(std::memory_order_acquire);
    uint32_t sid = read != nullptr && table != nullptr && active.load(std::memory_order_relaxed)
                       ? read(table, seq) : 0;
    if (sid != 0) {
        if (lend != nullptr)
            lend(sid);
        return sid;
    }
    PyGILState_STATE gil = PyGILState_Ensure();
    if (engine_frames != nullptr && active.load(std::memory_order_relaxed)) {
        GcHeld held;
        PyObject *arg = PyLong_FromUnsignedLongLong(seq);
        PyObject *r = arg ? PyObject_CallOneArg(engine_frames, arg) : nullptr;
        Py_XDECREF(arg);
        if (r != nullptr)
            sid = static_cast<uint32_t>(PyLong_AsUnsignedLong(r));
        Py_XDECREF(r);
        PyErr_Clear();
    }
    PyGILState_Release(gil);
    if (sid == static_cast<uint32_t>(-1))
        return 0;
    if (sid != 0 && lend != nullptr)
        lend(sid);
    return sid;
}

// Each thread's last answers from known_ops, by the name's address: an
// entry there never changes, and the map's lock and hash cost every op
// (a backward's ops take them on the engine thread).
struct SeenOp {
    const char *key = nullptr;
    Op op;
};
constexpr size_t SEEN_OPS = 64;   // a power of two
thread_local SeenOp seen_ops[SEEN_OPS];

SeenOp &seen_slot(const char *key)
{
    return seen_ops[(reinterpret_cast<uintptr_t>(key) >> 4) & (SEEN_OPS - 1)];
}

// The Op for fn's operator, looked up (GIL taken) the first time it is seen.
// Keyed by the address of its schema's name, which lives as long as the
// operator's registration; a RecordFunction named by a string of its own (a
// profiler scope, no operator) is never an op here, nor cached (its name's
// memory is freed with it and reused).
Op lookup(const at::RecordFunction &fn)
{
    const char *key = fn.name();
    SeenOp &seen = seen_slot(key);
    if (seen.key == key)
        return seen.op;
    {
        std::lock_guard<std::mutex> g(ops_lock);
        auto it = known_ops.find(key);
        if (it != known_ops.end()) {
            seen.key = key;
            seen.op = it->second;
            return it->second;
        }
    }
    auto name = fn.operator_name();
    if (!name)
        return Op{};
    Op op;
    op.decomposed = decomposed_by_autograd(*name);
    if (Py_IsInitialized()) {
        PyGILState_STATE gil = PyGILState_Ensure();
        {
            GcHeld held;   // the OpOverload PyTorch makes and keeps is the tracker's
            PyObject *f = op_for ? PyObject_CallFunction(op_for, "ss", name->name.c_str(),
                                                         name->overload_name.c_str())
                                 : nullptr;
            if (f == nullptr)
                PyErr_Clear();
            if (f == Py_None)
                Py_CLEAR(f);
            op.func = f;   // kept for the process: the map is never emptied
        }
        PyGILState_Release(gil);
    }
    PyObject *lost = nullptr;   // looked up by another thread meanwhile
    Op kept;
    {
        std::lock_guard<std::mutex> g(ops_lock);   // never held while taking the GIL
        auto [it, added] = known_ops.emplace(key, op);
        if (!added)
            lost = op.func;
        kept = it->second;
    }
    if (lost != nullptr) {
        PyGILState_STATE gil = PyGILState_Ensure();
        {
            GcHeld held;
            Py_DECREF(lost);
        }
        PyGILState_Release(gil);
    }
    return kept;
}

// Whether this thread runs with autograd's dispatch keys excluded
// (inference mode): the functionality bit, whatever the backend.
bool autograd_excluded()
{
    return c10::impl::tls_local_dispatch_key_set().excluded_.has(
        c10::DispatchKey::AutogradFunctionality);
}

std::unique_ptr<at::ObserverContext> op_started(const at::RecordFunction &fn)
{
    if (open_ops > 0 || !active.load(std::memory_order_relaxed))
        return nullptr;   // inside an op looked at: the kernel's, or the tracker's own
    if (own_handle != 0 && !follows_this_thread())
        return nullptr;   // joined an earlier installation: not the program's now
    try {
        hand_over_deferred();
        Op op = lookup(fn);
        if (op.func == nullptr || (op.decomposed && !autograd_excluded()))
            return nullptr;   // its parts are looked at
        auto started = std::make_unique<Started>();
        started->func = op.func;
        c10::ArrayRef<const c10::IValue> in = fn.inputs();
        started->inputs.assign(in.begin(), in.end());
        open_ops++;   // first: what lending runs in Python is not the program's
        // not a thread that runs the program's forward ops: an engine
        // thread (PyTorch handed it the callback with a joined thread's state)
        started->engine = !follows_this_thread();
        if (started->engine)
            started->forward = lend_forward_frames();
        return started;
    } catch (...) {   // never into the program's op
        return nullptr;
    }
}

// What the recording needs to know of a tensor's storage (tensor_facts.h),
// read here in C++ instead of through Python; storage 0 where it cannot be
// read (no storage, symbolic sizes, a wrapper that refuses data access):
// the recording then asks Python, as the mode's does.
vt__tensor_facts facts_of(const at::Tensor &t)
{
    vt__tensor_facts f{};
    try {
        if (!t.has_storage())
            return f;
        const c10::Storage &s = t.storage();
        f.storage_ptr = storage_address(s.unsafeGetStorageImpl());
        f.storage_nbytes = static_cast<uint64_t>(s.nbytes());
        if (f.storage_ptr == 0 && t.key_set().has(c10::DispatchKey::Python)) {
            // a tensor subclass's, without memory (a FakeTensor's, on the
            // meta device): nothing to track, and nothing more to read, as
            // its device and sizes may be its __torch_dispatch__'s to say
            // (the program's Python; a FakeTensor's failed on torch 2.11,
            // read before its __new__ had set its fake_mode)
            f.storage = reinterpret_cast<uintptr_t>(s.unsafeGetStorageImpl());
            f.device = -1;
            return f;
        }
        f.tensor_ptr = tensor_address(t);
        f.tensor_nbytes = static_cast<uint64_t>(t.nbytes());
        f.device = t.is_cuda() ? static_cast<int64_t>(t.get_device()) : -1;
        f.is_view = t.is_view() ? 1 : 0;
        f.storage = reinterpret_cast<uintptr_t>(s.unsafeGetStorageImpl());
    } catch (...) {
        f = vt__tensor_facts{};
    }
    return f;
}

// The Python objects the recording is given, and the facts of their tensors
// (nullptr: none wanted), in the order it meets them.
struct Wrapper {
    c10::SmallVectorImpl<vt__tensor_facts> *facts;

    // A tensor as the mode is given it: None for an undefined one and for a
    // Python number the binding wrapped into a 0-dim tensor (the mode gets
    // the number back). A new reference, or nullptr with an exception set.
    PyObject *wrap(const at::Tensor &t)
    {
        if (!t.defined() || t.unsafeGetTensorImpl()->is_wrapped_number())
            return Py_NewRef(Py_None);
        // a new Python object lives as long as the tensor: the program's
        long made = gc != nullptr ? gc->count() : 0;
        PyObject *obj = THPVariable_Wrap(t);
        if (gc != nullptr)
            gc->as_program(gc->count() - made);
        if (obj != nullptr && facts != nullptr)
            facts->push_back(facts_of(t));
        return obj;
    }

    // A tensor, a list of tensors (None for undefined ones) or None: the
    // arguments the recording looks at. A new reference, or nullptr with an
    // exception set.
    PyObject *to_python(const c10::IValue &v)
    {
        if (v.isTensor())
            return wrap(v.toTensor());
        if (is_tensor_list(v)) {
            c10::ArrayRef<c10::IValue> items = v.toListRef();
            PyObject *list = PyList_New(static_cast<Py_ssize_t>(items.size()));
            if (list == nullptr)
                return nullptr;
            for (size_t i = 0; i < items.size(); i++) {
                PyObject *item = items[i].isTensor() ? wrap(items[i].toTensor())
                                                     : Py_NewRef(Py_None);
                if (item == nullptr) {
                    Py_DECREF(list);
                    return nullptr;
                }
                PyList_SET_ITEM(list, static_cast<Py_ssize_t>(i), item);
            }
            return list;
        }
        return Py_NewRef(Py_None);
    }

    PyObject *tuple_of(c10::ArrayRef<c10::IValue> values)
    {
        PyObject *tuple = PyTuple_New(static_cast<Py_ssize_t>(values.size()));
        if (tuple == nullptr)
            return nullptr;
        for (size_t i = 0; i < values.size(); i++) {
            PyObject *item = to_python(values[i]);
            if (item == nullptr) {
                Py_DECREF(tuple);
                return nullptr;
            }
            PyTuple_SET_ITEM(tuple, static_cast<Py_ssize_t>(i), item);
        }
        return tuple;
    }
};

// The call itself, with the GIL held. The owner thread's op goes to
// on_owner(func, args, out, facts, seq): its tensors' facts, and the
// sequence number of the autograd node it made if it made one (the
// counter's last value; the recording keeps the first op's stack for a
// number). An engine thread's goes to on_other(func, args, out, facts,
// stack[, storage_uses]), with the stack id of the frames lent to it and,
// where its inputs had died by the hand-over on storages still alive, those
// storages (revived() below): bytes of (StorageImpl*, data pointer) pairs.
void call_recording(PyObject *func, c10::ArrayRef<c10::IValue> inputs,
                    c10::ArrayRef<c10::IValue> outputs, bool engine, uint32_t forward,
                    int64_t seq, c10::ArrayRef<uint64_t> storage_uses)
{
    c10::SmallVector<vt__tensor_facts, 8> facts;   // inline: an op has a few tensors
    PyObject *to = engine ? on_other : on_owner;
    if (to != nullptr && active.load(std::memory_order_relaxed)) {
        GcHeld held;
        PyObject *callee = Py_NewRef(to);   // uninstall() may run in the call
        Wrapper w{&facts};
        PyObject *args = w.tuple_of(inputs);
        PyObject *out = args ? w.tuple_of(outputs) : nullptr;
        // (facts, seq), or (facts, stack[, storage uses]) for an engine op
        PyObject *tail[3] = {nullptr, nullptr, nullptr};
        size_t ntail = 2;
        if (out != nullptr) {
            tail[0] = PyBytes_FromStringAndSize(
                reinterpret_cast<const char *>(facts.data()),
                static_cast<Py_ssize_t>(facts.size() * sizeof(vt__tensor_facts)));
            tail[1] = engine ? PyLong_FromUnsignedLong(forward) : PyLong_FromLongLong(seq);
            if (!storage_uses.empty()) {
                tail[2] = PyBytes_FromStringAndSize(
                    reinterpret_cast<const char *>(storage_uses.data()),
                    static_cast<Py_ssize_t>(storage_uses.size() * sizeof(uint64_t)));
                ntail = 3;
            }
        }
        PyObject *r = nullptr;
        if (tail[0] != nullptr && tail[1] != nullptr && (ntail == 2 || tail[2] != nullptr)) {
            PyObject *argv[6] = {func, args, out, tail[0], tail[1], tail[2]};
            r = PyObject_Vectorcall(callee, argv, 3 + ntail, nullptr);
        }
        if (r == nullptr)   // the recording reports its own failures; not the op's
            PyErr_WriteUnraisable(callee);
        Py_XDECREF(r);
        Py_XDECREF(args);
        Py_XDECREF(out);
        Py_XDECREF(tail[0]);
        Py_XDECREF(tail[1]);
        Py_XDECREF(tail[2]);
        Py_DECREF(callee);
    }
}

// The Python object a tensor has now, without making one (nullptr: none),
// by the PyObjectSlot of the torch built against: load_pyobj() (2.14's
// object preservation) or check_pyobj(bool) (earlier 2.x); known = false
// where neither exists, and backward ops are then handed over whole.
struct PyObjNow {
    bool known;
    PyObject *obj;
};
template <typename Slot>
auto pyobj_now(const Slot &slot, int) -> decltype(slot.load_pyobj(), PyObjNow{})
{
    return PyObjNow{true, slot.load_pyobj()};
}
template <typename Slot>
auto pyobj_now(const Slot &slot, long) -> decltype(slot.check_pyobj(false), PyObjNow{})
{
    auto obj = slot.check_pyobj(false);
    return PyObjNow{true, obj ? *obj : nullptr};
}
template <typename Slot>
PyObjNow pyobj_now(const Slot &, ...)
{
    return PyObjNow{false, nullptr};
}

// An engine op whose outputs all died by the hand-over (a backward's
// gradients flowing through it: most of its ops), recorded by _trackfast's
// engine_uses with the GIL held: the inputs still alive by their own Python
// objects (none is made: a tensor without one is taken as a use of its
// storage, as a dead input's is), the dead inputs' storages
// (``storage_uses``). Far cheaper than call_recording, which gives every
// tensor a Python object and runs the recording's whole op path. False:
// not done (an input the books do not know, a first sight, or no
// engine_uses): hand the op over whole.
bool record_engine_uses(const Deferred &d, c10::ArrayRef<c10::IValue> in,
                        StorageUses &storage_uses)
{
    if (engine_uses == nullptr)
        return false;
    constexpr size_t MAX_OBJS = 64;
    void *objs[MAX_OBJS];
    size_t n = 0;
    // the storages of live inputs without a Python object join the dead
    // inputs' (taken off again where the op goes the whole way)
    StorageUses &pairs = storage_uses;
    const size_t dead_pairs = pairs.size();
    auto whole = [&] {
        pairs.resize(dead_pairs);
        return false;
    };
    auto add = [&](const at::Tensor &t) -> bool {
        if (!t.defined() || t.unsafeGetTensorImpl()->is_wrapped_number())
            return true;   // None to the recording
        PyObjNow now = pyobj_now(*t.unsafeGetTensorImpl()->pyobj_slot(), 0);
        if (!now.known)
            return false;
        if (now.obj != nullptr) {
            if (n == MAX_OBJS)
                return false;
            objs[n++] = now.obj;
        } else if (t.has_storage()) {
            c10::StorageImpl *st = t.storage().unsafeGetStorageImpl();
            pairs.push_back(reinterpret_cast<uintptr_t>(st));
            pairs.push_back(storage_address(st));
        }
        return true;
    };
    for (const c10::IValue &v : in) {
        if (v.isTensor()) {
            if (!add(v.toTensor()))
                return whole();
        } else if (is_tensor_list(v)) {
            for (const c10::IValue &item : v.toListRef())
                if (item.isTensor() && !add(item.toTensor()))
                    return whole();
        }
    }
    if (n == 0 && pairs.empty())
        return true;
    // (engine_uses holds the collector's count itself: it makes no Python
    // object here to count)
    if (engine_uses(engine_uses_self, d.func, objs, n, d.forward, pairs.data(),
                    pairs.size() / 2) == 1)
        return whole();
    return true;
}

// Ops held back, handed over now, in order, with the GIL held: an alias
// only if all its tensors live (as the mode, which such calls hide from,
// never sees one that died), an engine op if any of its tensors does.
void hand_over_ops(std::vector<Deferred> &ops)
{
    open_ops++;   // the recording's own ops are not the program's
    // one hold of the collector's count for them all: each op's own (its
    // recording's) nests inside it, and the free lists are put back once
    GcHeld held;
    // An engine op lent no frames (AccumulateGrad's, which no forward op
    // made: its detach is what a parameter's .grad is) on memory an op
    // before it made: recorded under that op's frames, which the tensor it
    // made would have carried, had it lived until the hand-over.
    FramesOfMemory frames_of_memory;
    for (Deferred &d : ops) {
        if (d.engine && d.forward != 0) {
            for (uintptr_t storage : d.made)
                frames_of_memory.note(storage, d.forward);
        } else if (d.engine) {
            for (uintptr_t storage : d.made) {
                if (uint32_t frames = frames_of_memory.of(storage)) {
                    d.forward = frames;
                    break;
                }
            }
        }
        size_t ins_alive, ins_dead, outs_alive, outs_dead;
        StorageUses storage_uses;
        IValues in =
            revived(d.inputs, ins_alive, ins_dead, d.engine ? &storage_uses : nullptr);
        IValues out = revived(d.outputs, outs_alive, outs_dead);
        bool go = d.all_or_none ? ins_dead + outs_dead == 0 && outs_alive > 0
                                : ins_alive + outs_alive > 0 || !storage_uses.empty();
        if (go && active.load(std::memory_order_relaxed) &&
            !(d.engine && outs_alive == 0 && record_engine_uses(d, in, storage_uses)))
            call_recording(d.func, in, out, d.engine, d.forward, d.seq, storage_uses);
        in.clear();   // the references dropped under the GIL
        out.clear();
    }
    ops.clear();
    open_ops--;
}

// The aliases deferred on this thread, handed over now (the GIL held).
void hand_over_mine()
{
    if (deferred == nullptr || deferred->empty())
        return;
    std::vector<Deferred> now;
    now.swap(*deferred);
    hand_over_ops(now);
}

// The engine threads' ops held back, handed over now (the GIL held).
void hand_over_held()
{
    if (!engine_waiting.load(std::memory_order_acquire))
        return;
    std::vector<Deferred> now;
    {
        std::lock_guard<std::mutex> g(engine_lock);
        now.swap(engine_ops);
        // room for as many as this backward held: the next one's ops are
        // held without the vector growing (and moving them) op by op
        engine_ops.reserve(std::min(now.size(), MAX_HELD));
        engine_waiting.store(false, std::memory_order_release);
    }
    hand_over_ops(now);
}

// The aliases deferred on this thread and the engine threads' ops held
// back, handed over now (the GIL not held).
void hand_over_deferred()
{
    bool mine = deferred != nullptr && !deferred->empty();
    // the engine threads' ops: on a thread that runs forward ops only (an
    // engine thread starting its next op would hand over the one before,
    // still alive)
    bool engine = engine_waiting.load(std::memory_order_acquire) && follows_this_thread();
    if (!mine && !engine)
        return;
    if (marking_elsewhere())
        return;   // they would go unrecorded: handed over at a later op
    if (!active.load(std::memory_order_relaxed) || !Py_IsInitialized()) {
        if (mine)
            deferred->clear();
        return;
    }
    PyGILState_STATE gil = PyGILState_Ensure();
    // the aliases first: this thread made them before the backward it waited for
    hand_over_mine();
    if (engine)
        hand_over_held();
    PyGILState_Release(gil);
}

// The op ``started`` that ``fn`` ran, held weakly.
Deferred held_op(const Started *started, const at::RecordFunction &fn)
{
    Deferred d;
    d.func = started->func;
    hold_weakly(started->inputs, d.inputs, started->engine);
    hold_weakly(fn.outputs(), d.outputs);
    return d;
}

// An engine thread's op, held back (the GIL not held, not taken).
void hold_engine_op(Started *started, const at::RecordFunction &fn)
{
    Deferred d = held_op(started, fn);
    d.engine = true;
    d.forward = started->forward;
    for (const c10::IValue &v : fn.outputs())
        if (v.isTensor() && v.toTensor().defined() && v.toTensor().has_storage())
            d.made.push_back(
                reinterpret_cast<uintptr_t>(v.toTensor().storage().unsafeGetStorageImpl()));
    started->inputs.clear();   // a tensor's last reference dropped here takes the GIL itself
    size_t held;
    {
        std::lock_guard<std::mutex> g(engine_lock);
        engine_ops.push_back(std::move(d));
        held = engine_ops.size();
        engine_waiting.store(true, std::memory_order_release);
    }
    if (held >= MAX_HELD && Py_IsInitialized()) {   // a long backward: no more held
        PyGILState_STATE gil = PyGILState_Ensure();
        hand_over_held();
        PyGILState_Release(gil);
    }
}

void hand_over(Started *started, const at::RecordFunction &fn)
{
    if (!active.load(std::memory_order_relaxed) || !Py_IsInitialized())
        return;
    if (started->engine) {
        hold_engine_op(started, fn);
        return;
    }
    // the number the last node made on this thread took (-1: none yet)
    uint64_t next = at::sequence_number::peek();
    int64_t seq = next == 0 ? -1 : node_key(at::RecordFunction::currentThreadId(), next - 1);
    // PyTorch's generated bindings let the GIL go around an op; the two
    // calls that give an alias a subclass object hold it through: only their
    // aliases wait (a detach in backward, or Tensor.detach(), does not).
    if (alias_for_subclass(fn) && PyGILState_Check()) {
        if (deferred == nullptr)
            deferred = new std::vector<Deferred>;   // per thread, for the process
        Deferred d = held_op(started, fn);
        d.seq = seq;
        d.all_or_none = true;
        deferred->push_back(std::move(d));
    } else {
        PyGILState_STATE gil = gil_outside_marks();
        call_recording(started->func, started->inputs, fn.outputs(), false, 0, seq, {});
        started->inputs.clear();   // the references dropped under the GIL
        PyGILState_Release(gil);
        return;
    }
    PyGILState_STATE gil = PyGILState_Ensure();
    started->inputs.clear();
    PyGILState_Release(gil);
}

void op_ended(const at::RecordFunction &fn, at::ObserverContext *ctx)
{
    if (ctx == nullptr)
        return;
    Started *started = static_cast<Started *>(ctx);
    if (started->forward != 0 && lend != nullptr)   // its allocations are done
        lend(0);
    // An op that failed ends while its exception unwinds the stack: the
    // mode never records such an op (it raises inside __torch_dispatch__).
    if (std::uncaught_exceptions() == 0) {
        try {
            hand_over(started, fn);
        } catch (...) {
        }
    }
    open_ops--;
}

// The callback, as every thread that runs the program's ops installs it.
at::RecordFunctionCallback callback()
{
    return at::RecordFunctionCallback(op_started, op_ended)
        .needsInputs(true)
        .needsOutputs(true)
        .scopes({at::RecordScope::FUNCTION});
}

}  // namespace

extern "C" {

// trackobs_install(on_owner, on_other, op_for, engine_frames, lend, gc_api,
// lent_read, lent_table, marking, engine_uses, dispatcher): look at this thread's ops (and its
// backward's on the engine threads) until trackobs_uninstall(); `lend` is
// vramtrace's vt_thread_python_stack (0: no frames lent), `gc_api`
// _trackfast's vt__gc_hold_api (0: the count not held), `lent_read(lent_table,
// seq)` _trackfast's table of the frames to lend (0: engine_frames is
// asked), `marking` the address of _trackfast's Dispatcher.marking (0: a
// joined thread's op never waits for a mark), `engine_uses(dispatcher, ...)`
// _trackfast's record of a backward op whose outputs died (0: such ops are
// handed to on_other whole). One at a time: -1 if
// installed already, else 0. Called with the GIL held.
__attribute__((visibility("default"))) int trackobs_install(PyObject *owner_fn,
                                                          PyObject *other_fn,
                                                          PyObject *lookup_fn,
                                                          PyObject *frames_fn,
                                                          uintptr_t lend_fn,
                                                          uintptr_t gc_api,
                                                          uintptr_t lent_read_fn,
                                                          uintptr_t lent_table_addr,
                                                          uintptr_t marking_addr,
                                                          uintptr_t engine_uses_fn,
                                                          uintptr_t engine_uses_of)
{
    if (handle != 0)
        return -1;
    engine_uses = reinterpret_cast<vt__engine_uses_fn>(engine_uses_fn);
    engine_uses_self = reinterpret_cast<void *>(engine_uses_of);
    lent_table.store(reinterpret_cast<const void *>(lent_table_addr), std::memory_order_release);
    lent_read.store(reinterpret_cast<vt__lent_read_fn>(lent_read_fn), std::memory_order_release);
    marking.store(reinterpret_cast<const unsigned long *>(marking_addr), std::memory_order_release);
    gc = reinterpret_cast<const vt__gc_hold_api *>(gc_api);
    on_owner = Py_NewRef(owner_fn);
    on_other = Py_NewRef(other_fn);
    engine_frames = Py_NewRef(frames_fn);
    lend = reinterpret_cast<void (*)(uint32_t)>(lend_fn);
    Py_XSETREF(op_for, Py_NewRef(lookup_fn));
    if (own_handle != 0) {   // this thread joined an earlier installation
        at::removeCallback(own_handle);
        own_handle = 0;
    }
    owner_rf_thread.store(at::RecordFunction::currentThreadId(), std::memory_order_relaxed);
    joined = session.fetch_add(1, std::memory_order_relaxed) + 1;
    active = true;
    handle = at::addThreadLocalCallback(callback());
    return 0;
}

// trackobs_join(): this thread's ops are the program's forward ops too (and
// its backward's, on the engine threads, the program's backward ops), as the
// installing thread's are, until trackobs_uninstall(); called on the thread,
// with the GIL held. 0, or -1 when the observer is not installed.
__attribute__((visibility("default"))) int trackobs_join(void)
{
    if (handle == 0 || !active.load(std::memory_order_relaxed))
        return -1;
    uint64_t now = session.load(std::memory_order_relaxed);
    if (joined == now)
        return 0;   // the installing thread, or joined already
    if (own_handle != 0)   // joined an earlier installation
        at::removeCallback(own_handle);
    own_handle = at::addThreadLocalCallback(callback());
    joined = now;
    return 0;
}

// Stop looking at ops; called by the thread that installed it, with the GIL
// held. An op still open on another thread finds the observer inactive and
// records nothing.
__attribute__((visibility("default"))) void trackobs_uninstall(void)
{
    if (handle == 0)
        return;
    // this thread's last deferred aliases (the GIL is held: let go for the call)
    Py_BEGIN_ALLOW_THREADS
    hand_over_deferred();
    Py_END_ALLOW_THREADS
    active = false;
    at::removeCallback(handle);
    handle = 0;
    lent_read.store(nullptr, std::memory_order_release);
    lent_table.store(nullptr, std::memory_order_release);
    marking.store(nullptr, std::memory_order_release);
    engine_uses = nullptr;
    engine_uses_self = nullptr;
    Py_CLEAR(on_owner);
    Py_CLEAR(on_other);
    Py_CLEAR(engine_frames);
}

// trackobs_decomposed_by(name, overload, by_table): decomposed_by_autograd's
// answer for an operator (1, 0; -1: no such operator), read through
// OperatorHandle::lookup where this torch has it, or (by_table, and on a
// torch before 2.14 always) through its computed dispatch table's text: for
// the tests, which hold the two to each other on this torch's operators.
__attribute__((visibility("default"))) int trackobs_decomposed_by(const char *name,
                                                                  const char *overload,
                                                                  int by_table)
{
    c10::OperatorName op{name ? name : "", overload ? overload : ""};
    if (!c10::Dispatcher::singleton().findOp(op))
        return -1;
    try {
        return decomposed_by_autograd(op, by_table != 0) ? 1 : 0;
    } catch (...) {
        return -1;
    }
}

// trackobs_drain(): what is held back (the engine threads' ops, this
// thread's aliases) handed over now; called with the GIL held, before the
// books are read (Dispatcher.flush: a mark, a snapshot, the block's end).
__attribute__((visibility("default"))) void trackobs_drain(void)
{
    if (handle == 0 || !active.load(std::memory_order_relaxed))
        return;
    hand_over_mine();
    hand_over_held();
}

}  // extern "C"
