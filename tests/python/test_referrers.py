"""The referrer walk on plain Python objects: labels, holder names, bounds."""

from __future__ import annotations

import functools
import gc

from vramtrace import _referrers
from vramtrace._referrers import holder_name, walk_referrers


class Payload:
    """Stands in for a tensor."""


class Context:
    def __init__(self) -> None:
        self.output_tensors: list = []


class Slotted:
    __slots__ = ("held",)


def _walk(target, **kw):
    return walk_referrers({("t", 1): target}, lambda o: None, **kw)


def _labels(res):
    return {(res.names.get(e.src, e.src[0]), e.label) for e in res.edges}


def _chains(res, key=("t", 1), limit=8):
    """Every chain (root name, labels...) that ends at key."""
    ins = {}
    for e in res.edges:
        ins.setdefault(e.dst, []).append(e)
    out = []

    def go(node, suffix, seen):
        if node not in ins or len(seen) > limit:
            out.append(res.names.get(node, "tensor") + "".join(suffix))
            return
        for e in ins[node]:
            if e.src in seen:
                out.append("(cycle) " + res.names.get(e.src, "?") + e.label + "".join(suffix))
                continue
            go(e.src, [e.label + " -> "] + suffix, seen | {e.src})

    go(key, [], frozenset({key}))
    return out


def test_list_index_and_attribute_of_owner():
    p = Payload()
    ctx = Context()
    ctx.output_tensors += [Payload(), p]
    res = _walk(p)
    assert ("list", "[1]") in _labels(res)
    assert ("Context", ".output_tensors") in _labels(res)
    assert any(c.startswith("frame") and "local 'ctx' in test_list_index_and_attribute_of_owner"
               in c and c.endswith("[1] -> ") for c in _chains(res)), _chains(res)
    del ctx


def test_dict_key_label():
    p = Payload()
    holder = {"acts": p}
    res = _walk(p)
    assert ("dict", "['acts']") in _labels(res)
    del holder


def test_a_tuple_keys_plain_values_are_shown_and_the_rest_by_type():
    p, q = Payload(), Payload()
    ctx = Context()
    holder = {(3, "mask", None): p, (ctx, 7): q}
    assert ("dict", "[(3, 'mask', None)]") in _labels(_walk(p))
    assert ("dict", "[(<Context>, 7)]") in _labels(_walk(q))
    del holder


def test_a_c_types_fields_are_attributes_as_slots_are():
    """A callback bound with functools.partial (a hook registered with its
    tensor) holds what it binds in C fields, which no __dict__ lists:
    named by the field (``.args``, ``.keywords``), not an unnamed referent;
    a slot's field as before, a private one as Python mangles it."""
    p, q = Payload(), Payload()
    hook = functools.partial(print, p, extra=q)
    res = _walk(p)
    assert ("partial", ".args") in _labels(res), _labels(res)
    assert not any(lb == "(referent)" for _, lb in _labels(res)), res.edges
    assert ("partial", ".keywords") in _labels(_walk(q)), _labels(_walk(q))

    class Private:
        __slots__ = ("__held",)

        def __init__(self, x):
            self.__held = x

    keeper = Private(p)
    assert ("Private", "._Private__held") in _labels(_walk(p)), _labels(_walk(p))
    del hook, keeper


def test_an_lru_caches_results_are_held_by_its_cache_under_the_calls_arguments():
    """functools.lru_cache keeps its results in a dict of its own that no
    attribute reaches: the hop is the cache of the function it wraps, keyed
    by the call (a mask or rotary table cached per length: a leak when the
    lengths vary), not an unnamed referent."""
    @functools.lru_cache(maxsize=None)
    def mask_of(n, kind):
        return Payload()

    class Model:
        def __init__(self):
            self.mask_of = mask_of

        @functools.cache
        def table(self, n):
            return Payload()

    model = Model()
    res = _walk(mask_of(300, "causal"))
    assert ("lru_cache mask_of", "'s cache[(300, 'causal')]") in _labels(res), _labels(res)
    assert not any(lb == "(referent)" or lb.startswith("[") for _, lb in _labels(res)), res.edges
    assert any("local 'model'" in c and c.endswith(".mask_of -> 's cache[(300, 'causal')] -> ")
               for c in _chains(res)), _chains(res)
    res = _walk(model.table(5))
    assert ("lru_cache table", "'s cache[(<Model>, 5)]") in _labels(res), _labels(res)


def test_a_bounded_lru_caches_keys_and_results_are_named_by_the_call():
    """The decorator's default cache (maxsize=128) keeps its entries in a
    linked list no Python code can read, not in the dict the unbounded one
    keeps: a result held there is named under its call as in the unbounded
    cache, and an argument held in the key (a mask cached by the batch
    tensor itself) as the cache's key; before, both were an unnamed
    "(referent)" of the wrapper."""
    @functools.lru_cache
    def mask_for(batch):
        return Payload()

    @functools.lru_cache(maxsize=4)
    def table(n, kind):
        return Payload()

    batches = [Payload() for _ in range(3)]
    results = [mask_for(b) for b in batches]
    tables = [table(n, "rope") for n in (8, 16)]
    del results[:], tables[:]
    res = _walk(mask_for(batches[1]))
    assert ("lru_cache mask_for", "'s cache[(<Payload>,)]") in _labels(res), _labels(res)
    assert not any(lb == "(referent)" for _, lb in _labels(res)), _labels(res)
    res = _walk(table(16, "rope"))
    assert ("lru_cache table", "'s cache[(16, 'rope')]") in _labels(res), _labels(res)
    # a result that is itself a dict is a result, not the cache's dict
    @functools.lru_cache
    def state_of(n):
        return {"weight": Payload()}

    res = _walk(state_of(3)["weight"])
    assert ("lru_cache state_of", "'s cache[3]") in _labels(res), _labels(res)
    assert not any(lb == "'s cache" for _, lb in _labels(res)), _labels(res)
    # the argument: held by the cache's key (a tuple) and the program's list
    arg = batches[2]
    del batches
    res = _walk(arg)
    assert ("lru_cache mask_for", "'s cache.key (<Payload>,)") in _labels(res), _labels(res)
    assert any(c.endswith("'s cache.key (<Payload>,) -> [0] -> ") for c in _chains(res)), \
        _chains(res)


def test_a_suspended_generators_locals_are_named_by_the_generator_and_where_it_waits():
    """Since Python 3.11 a generator's frame lives inside it: the collector
    reports the generator, not a frame, as what refers to its locals. A
    batch generator that keeps what it produced is named by its function,
    the line it waits at and the local; before, "generator(referent)"."""
    def batches(n):
        produced = []
        for _ in range(n):
            produced.append(Payload())
            yield produced[-1]   # WAITS_HERE

    async def waiter(x):
        kept = x
        await _Suspend()
        return kept

    line = next(i for i, text in enumerate(open(__file__), 1) if "# WAITS_HERE" in text)
    it = batches(3)
    first = next(it)
    next(it)
    res = _walk(first)
    name = f"generator batches (test_referrers.py:{line})"
    assert (name, "local 'produced'") in _labels(res), _labels(res)
    assert any("local 'it' in test_a_suspended" in c and c.endswith(" -> local 'produced' -> [0] -> ")
               for c in _chains(res)), _chains(res)
    assert not any(lb == "(referent)" for _, lb in _labels(res)), _labels(res)
    held = Payload()
    co = waiter(held)
    co.send(None)
    res = _walk(held)
    assert any(n.startswith("coroutine waiter (test_referrers.py:") and lb == "local 'kept'"
               for n, lb in _labels(res)), _labels(res)
    co.close()


def test_a_suspended_generators_local_that_a_nested_function_reads_is_named_as_a_local():
    """A @contextmanager whose hook appends to its local list (`acts`, read
    by the lambda: a cell) keeps the list in that cell: the chain read
    `generator capture (…)(referent) → cell.cell_contents → list[*]`. It
    reads `generator capture (…) local 'acts' → [0]` now."""
    def capture():
        acts = []
        hook = lambda x: acts.append(x)   # noqa: E731 (a cell for 'acts')
        yield hook   # CAPTURE_WAITS

    gen = capture()
    hook = next(gen)
    held = Payload()
    hook(held)
    del hook
    res = _walk(held)
    line = next(i for i, text in enumerate(open(__file__), 1) if "# CAPTURE_WAITS" in text)
    name = f"generator capture (test_referrers.py:{line})"
    assert (name, "local 'acts'") in _labels(res), _labels(res)
    assert any(c.endswith(" -> local 'acts' -> [0] -> ") for c in _chains(res)), _chains(res)
    assert not any(lb in ("(referent)", "cell_contents") for _, lb in _labels(res)), \
        _labels(res)
    gen.close()


class _Suspend:
    def __await__(self):
        yield


def test_itertools_cycle_and_tee_hold_what_they_keep_in_fields_named_as_slots():
    """A DataLoader cycled with itertools.cycle keeps every batch of its
    first pass (pytorch/pytorch#23900); a tee keeps what one copy has read
    and the other has not. Both keep them in C fields no attribute reaches:
    named as slots are, not "(referent)"."""
    import itertools

    def read_three(wrap, keep):
        """wrap(an iterator over four items), its (first) copy read three
        times, and item ``keep``: the items' list itself is gone."""
        items = [Payload() for _ in range(4)]
        its = wrap(iter(items))
        for _ in range(3):
            next(its[0] if isinstance(its, tuple) else its)
        return its, items[keep]

    cyc, second = read_three(itertools.cycle, 1)
    res = _walk(second)
    assert ("cycle", ".saved") in _labels(res), _labels(res)
    assert any("local 'cyc' in test_itertools" in c and c.endswith(" -> .saved -> [1] -> ")
               for c in _chains(res)), _chains(res)
    (ahead, behind), third = read_three(itertools.tee, 2)
    res = _walk(third)
    assert ("_tee_dataobject", ".values[2]") in _labels(res), _labels(res)
    assert ("_tee", ".dataobj") in _labels(res), _labels(res)
    # (the list the tee's source iterates is the list iterator's "(referent)")
    assert not any(n.startswith("_tee") and lb == "(referent)" for n, lb in _labels(res)), \
        _labels(res)
    del ahead, behind, cyc


class ItemsAndAttributes(dict):
    """transformers' ModelOutput: a dict (subclass) whose fields are also
    attributes, in the instance's own __dict__."""

    def __init__(self, **fields):
        super().__init__(**fields)
        for k, v in fields.items():
            setattr(self, k, v)


def test_a_dict_subclass_with_attributes_is_the_holder_of_both():
    """The instance's __dict__ is the instance's, also when the instance is
    a dict itself: every chain to the field reaches the list that keeps the
    instance (a chain from a lone "dict" holder named nothing)."""
    p = Payload()
    kept = [ItemsAndAttributes(logits=p)]
    res = _walk(p)
    chains = _chains(res)
    assert any("local 'kept'" in c and c.endswith("[0] -> .logits -> ") for c in chains), chains
    assert ("ItemsAndAttributes", ".logits") in _labels(res), _labels(res)
    assert ("ItemsAndAttributes", "['logits']") in _labels(res), _labels(res)
    assert not any(c.startswith("dict") for c in chains), chains
    del kept


def test_closure_cell_names_variable_and_function():
    p = Payload()

    def make():
        x = p

        def hook():
            return x
        return hook

    fn = make()
    res = _walk(p)
    assert ("function hook", "closure cell 'x' of hook") in _labels(res)
    del fn


def test_lambda_holder_is_named_lambda():
    class Req:
        def __init__(self, t):
            self.awaited = t
    r = Req(Payload())
    cbs = [lambda: r]
    line = cbs[0].__code__.co_firstlineno
    res = _walk(r.awaited)
    labels = _labels(res)
    assert ("Req", ".awaited") in labels
    # named by where it was written: lambdas all share the name <lambda>
    assert (f"function <lambda at test_referrers.py:{line}>",
            "closure cell 'r' of <lambda>") in labels
    assert ("list", "[0]") in labels
    del cbs


def test_frame_local_label_has_function_file_and_line():
    p = Payload()
    res = _walk(p)
    locals_ = [e.label for e in res.edges if e.src[0] == "f"]
    assert any(lb.startswith("local 'p' in test_frame_local_label_has_function_file_and_line "
                             "test_referrers.py:") for lb in locals_), locals_


def test_a_walk_out_of_time_before_its_first_pass_still_names_the_frame_locals():
    """A walk whose deadline passed before its first heap pass (a tick's,
    after the walk from the stale tensors spent it) still names what the
    running frames' locals hold: a start held by a local, and one held in a
    tuple a local holds (an LSTM's (h, c) state), read without a pass; one
    held by an object's list is not found (that takes a pass)."""
    p, q = Payload(), Payload()
    state = (p, q)
    ctx = Context()
    ctx.output_tensors.append(Payload())
    res = walk_referrers({("t", 1): p, ("t", 2): q, ("t", 3): ctx.output_tensors[0]},
                         lambda o: None, skip_files=(_referrers.__file__,),
                         deadline=0.0, clock=lambda: 1.0)
    assert res.cut_off and res.levels == 0
    fn = "test_a_walk_out_of_time_before_its_first_pass_still_names_the_frame_locals"
    assert any(c.startswith("frame") and f"local 'state' in {fn}" in c and "[1]" in c
               for c in _chains(res, ("t", 2))), _chains(res, ("t", 2))
    assert any(f"local 'p' in {fn}" in c for c in _chains(res, ("t", 1))), _chains(res, ("t", 1))
    assert _chains(res, ("t", 3)) == ["tensor"], _chains(res, ("t", 3))
    del state, ctx


def test_a_walk_of_the_running_frames_names_locals_long_lists_dicts_and_a_scripts_globals():
    """walk_running_frames (a mark whose credit pays no walk): without a
    heap pass, a start in a long list a local holds (a step appends to it:
    more than a walk's 16 items), in a dict a local holds, and in a list a
    script's top level holds (``module __main__.kept``, as a walk names
    it); nothing expanded, so it retracts nothing; what only an object
    holds is not found."""
    import sys
    import types
    starts = {("t", i): Payload() for i in range(1, 6)}
    history = [Payload() for _ in range(40)] + [starts[("t", 1)]]
    by_step = {"step 7": starts[("t", 2)]}
    ctx = Context()
    ctx.output_tensors.append(starts[("t", 3)])
    script = types.ModuleType("vt_walked_script")
    sys.modules[script.__name__] = script
    got = {}

    def walk_now():
        got["res"] = _referrers.walk_running_frames(
            starts, lambda o: None, skip_files=(_referrers.__file__,))
    script.__dict__.update(walk_now=walk_now, first=starts[("t", 4)], second=starts[("t", 5)])
    try:
        # a script's top level, running while the walk reads the frames
        exec(compile("kept = [first]\nalso = second\nwalk_now()\n", "script.py", "exec"),
             script.__dict__)
    finally:
        del sys.modules[script.__name__]
    res = got.pop("res")
    fn = "test_a_walk_of_the_running_frames_names_locals_long_lists_dicts_and_a_scripts_globals"
    assert any(f"local 'history' in {fn}" in c and "[40]" in c
               for c in _chains(res, ("t", 1))), _chains(res, ("t", 1))
    assert any(f"local 'by_step' in {fn}" in c and "['step 7']" in c
               for c in _chains(res, ("t", 2))), _chains(res, ("t", 2))
    assert _chains(res, ("t", 3)) == ["tensor"], _chains(res, ("t", 3))
    assert "module vt_walked_script.kept -> [0] -> " in _chains(res, ("t", 4)), \
        _chains(res, ("t", 4))
    assert "module vt_walked_script.also -> " in _chains(res, ("t", 5)), _chains(res, ("t", 5))
    assert res.levels == 0 and not res.expanded
    del history, by_step, ctx, script


def test_a_walk_of_the_running_frames_reads_containers_in_containers():
    """A replay memory (a deque of namedtuples) and a list of the same
    transitions kept besides: a walk of the running frames alone names a
    start through both, three containers deep at most (it read one: the
    transitions' tensors of a DQN kept in a list were found with no holder),
    and a start deeper than that is not found."""
    import collections
    step = collections.namedtuple("Step", "state reward")
    starts = {("t", i): Payload() for i in range(1, 4)}
    memory = collections.deque([step(Payload(), Payload()) for _ in range(5)], maxlen=8)
    memory.append(step(starts[("t", 1)], Payload()))
    seen = [step(Payload(), starts[("t", 2)])]
    deep = [[[[starts[("t", 3)]]]]]
    res = _referrers.walk_running_frames(starts, lambda o: None,
                                         skip_files=(_referrers.__file__,))
    fn = "test_a_walk_of_the_running_frames_reads_containers_in_containers"
    assert any(f"local 'memory' in {fn}" in c and "-> [5] -> [0] -> " in c
               for c in _chains(res, ("t", 1))), _chains(res, ("t", 1))
    assert any(f"local 'seen' in {fn}" in c and "-> [0] -> [1] -> " in c
               for c in _chains(res, ("t", 2))), _chains(res, ("t", 2))
    assert not any("local 'deep'" in c for c in _chains(res, ("t", 3))), \
        _chains(res, ("t", 3))
    del memory, seen, deep


def _fail_holding(payload):
    batch = payload        # a local of a frame that raises: kept by the traceback
    raise ValueError("bad batch")


def test_a_stored_exception_holds_its_frames_locals_through_its_traceback():
    """`failures.append(e)`: the list holds the exception, its traceback,
    the frame that raised and that frame's locals: every hop named."""
    failures = []
    p = Payload()
    try:
        _fail_holding(p)
    except ValueError as e:
        failures.append(e)
    res = _walk(p)
    chains = _chains(res, limit=12)
    line = _fail_holding.__code__.co_firstlineno + 2
    assert any(c.endswith("-> [0] -> .__traceback__ -> .tb_next -> .tb_frame -> local 'batch' -> ")
               for c in chains), chains
    names = set(res.names.values())
    assert {"ValueError", "traceback", f"frame of _fail_holding (test_referrers.py:{line})"} <= names
    # naming the local did not keep anything alive: the frame's locals dict is empty again
    frame = failures[0].__traceback__.tb_next.tb_frame
    assert frame.f_locals["batch"] is p        # (reading them again fills it)
    del frame, failures


def test_slots_attribute():
    s = Slotted()
    s.held = Payload()
    res = _walk(s.held)
    assert ("Slotted", ".held") in _labels(res)


def test_module_global_is_a_root():
    import types
    mod = types.ModuleType("fake_mod")
    mod.cache = Payload()
    res = _walk(mod.cache)
    assert ("module fake_mod", ".cache") in _labels(res)


def test_a_module_with_more_functions_than_the_breadth_is_still_the_root():
    """Each function of a module refers to its namespace (__globals__), which
    names no holder; they take none of the walk's breadth, or a module with
    more functions than it (timm's hooks: one closure per block) would be
    crowded out and the chain would end at a bare dict['stash']."""
    import types
    mod = types.ModuleType("hooks_mod")
    gc.collect()   # the module into the oldest generation: its functions are met first
    exec("stash = {}\n" + "".join(f"def hook{i}(): return stash\n" for i in range(20)),
         mod.__dict__)
    mod.stash["block0"] = [Payload()]
    res = _walk(mod.stash["block0"][0], max_breadth=4)
    assert ("module hooks_mod", ".stash") in _labels(res), _chains(res)


def test_an_object_with_more_referrers_than_the_breadth_is_still_reached_from_its_module():
    """A framework's trainer is referred to by dozens of its own parts (each
    connector and loop keeps `.trainer`); the module global that holds it
    is a root, not crowded out by them: Lightning's validation outputs were
    named through a cycle among the trainer's parts at the exit walk, not
    from `module __main__.trainer`."""
    import types

    class Trainer:
        pass

    class Connector:
        def __init__(self, trainer):
            self.trainer = trainer

    mod = types.ModuleType("train_mod")
    mod.trainer = Trainer()
    gc.collect()   # the module into the oldest generation: the connectors are met first
    mod.trainer.parts = [Connector(mod.trainer) for _ in range(20)]
    mod.trainer.outputs = [Payload()]
    res = _walk(mod.trainer.outputs[0], max_breadth=4)
    assert ("module train_mod", ".trainer") in _labels(res), _chains(res)


def test_cycle_garbage_is_found_without_a_root(no_gc):
    class Node:
        pass
    a, b = Node(), Node()
    a.o, b.o = b, a
    a.t = Payload()
    t = a.t
    del a, b
    res = walk_referrers({("t", 1): t}, lambda o: None, use_frames=False)
    labels = _labels(res)
    assert ("Node", ".t") in labels and ("Node", ".o") in labels
    assert any(c.startswith("(cycle) Node.o") for c in _chains(res)), _chains(res)


def test_walk_keeps_nothing_alive_and_hides_itself():
    import weakref
    p = Payload()
    lst = [p]
    r = weakref.ref(lst[0])
    res = _walk(p)
    names = set(res.names.values())
    assert not any("WalkResult" in n or "_Walker" in n for n in names), names
    del res, p, lst
    gc.collect()
    assert r() is None


def test_bounds_are_respected():
    p = Payload()
    nested = p
    for _ in range(50):
        nested = [nested]
    res = _walk(p, max_depth=5, use_frames=False)
    depth_lists = [e for e in res.edges if e.label == "[0]"]
    assert len(depth_lists) <= 5
    many = [[p] for _ in range(100)]
    res = _walk(p, max_breadth=4, use_frames=False)
    assert sum(1 for e in res.edges if e.dst == ("t", 1)) <= 4
    res = _walk(p, max_nodes=10, use_frames=False)
    assert len({e.src for e in res.edges}) <= 10
    del many, nested


def test_the_bound_on_objects_counts_the_holders_not_the_starts():
    """max_nodes bounds the holders a walk finds: a snapshot's walk starts
    from every stale tensor, thousands where a kept loss holds its graph,
    and a bound that counted them found no holder at all. A walk that
    reached the bound says so (capped)."""
    ps = [Payload() for _ in range(40)]
    lists = [[p] for p in ps]
    starts = {("t", i): p for i, p in enumerate(ps)}
    res = walk_referrers(starts, lambda o: None, max_nodes=100, max_depth=1, use_frames=False)
    assert len({e.src for e in res.edges}) == 41 and not res.capped   # each list, and ps
    res = walk_referrers(starts, lambda o: None, max_nodes=10, max_depth=1, use_frames=False)
    assert len({e.src for e in res.edges}) == 10 and res.capped
    del lists


def test_tracked_tensor_holding_another_is_itself():
    owner = Context()
    p = Payload()
    owner.output_tensors = p  # attribute directly
    res = walk_referrers({("t", 1): p}, lambda o: ("t", 2) if o is owner else None,
                         use_frames=False)
    assert any(e.src == ("t", 2) and e.label == ".output_tensors" for e in res.edges)


def test_holder_names():
    assert holder_name([]) == "list"
    assert holder_name({}) == "dict"
    fn = lambda: 0  # noqa: E731
    assert holder_name(fn) == f"function <lambda at test_referrers.py:{fn.__code__.co_firstlineno}>"
    assert holder_name(Context()) == "Context"
    assert holder_name(gc) == "module gc"
    assert holder_name(functools.lru_cache(maxsize=4)(len)) == "lru_cache len"


def test_a_thread_locals_attributes_are_named_as_its_own():
    """threading.local keeps each thread's attributes in a dict of their
    own, a value of a dict keyed by weak references: the chain read
    `_local(referent) → dict[<ReferenceType>] → dict['masks']`; it reads
    `threading.local.masks`, an attribute of the local (a subclass's by its
    class), for this thread's attributes and another thread's."""
    import threading

    class Ctx(threading.local):
        pass
    loc, ctx = threading.local(), Ctx()
    p, q, r = Payload(), Payload(), Payload()
    loc.masks = {7: p}
    ctx.held = q

    made, done = threading.Event(), threading.Event()

    def elsewhere():   # (a thread's attributes live while the thread does)
        loc.theirs = r
        made.set()
        done.wait()
    t = threading.Thread(target=elsewhere, daemon=True)
    t.start()
    made.wait()
    for res, holder, label in ((_walk(p), "threading.local", ".masks"),
                               (_walk(q), "Ctx", ".held"),
                               (_walk(r), "threading.local", ".theirs")):
        assert (holder, label) in _labels(res), _labels(res)
        assert not any(lb == "[<ReferenceType>]" or (h, lb) == (holder, "(referent)")
                       for h, lb in _labels(res)), _labels(res)
    assert any("local 'loc'" in c and c.endswith(".masks -> [7] -> ")
               for c in _chains(_walk(p))), _chains(_walk(p))
    done.set()
    t.join()
    del loc, ctx


def test_a_builtin_iterators_fields_are_named_as_slots():
    """A list an iterator walks keeps what the iterator has passed (a
    prefetch list of batches, consumed one a step): the hop from the
    iterator read `(referent)`; it reads `list_iterator.seq`, and
    enumerate's, zip's, map's and filter's fields by what they hold."""
    p = Payload()
    batches = [p]
    it = iter(batches)
    del batches
    assert ("list_iterator", ".seq") in _labels(_walk(p)), _labels(_walk(p))
    assert any("local 'it'" in c and c.endswith(".seq -> [0] -> ") for c in _chains(_walk(p))), \
        _chains(_walk(p))
    del it
    q = Payload()
    fn = (lambda v: v).__get__(q)   # a bound method: it holds q
    keep = {"d": iter({1: q}.values()), "s": iter({q}),
            "z": zip(iter([q]), iter([1])), "m": map(fn, [1]), "f": filter(fn, [1]),
            "e": enumerate(iter([q]))}
    labels = _labels(_walk(q))
    for holder, label in (("dict_valueiterator", ".dict"), ("set_iterator", ".set"),
                          ("zip", ".iterators"), ("map", ".func"), ("filter", ".func"),
                          ("enumerate", ".iterator")):
        assert (holder, label) in labels, (holder, label, labels)
    assert not any(lb == "(referent)" for _, lb in labels), labels
    a, b = next(keep["z"])   # the tuple it yielded, kept to be reused, holds q
    del a, b
    assert ("zip", ".last") in _labels(_walk(q)), _labels(_walk(q))
    del keep
