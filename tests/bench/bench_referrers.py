"""bench_referrers: one level of track()'s holder walk, two ways; a whole walk, two ways.

A holder walk looks up the referrers of a whole level of objects in one call:
at a snapshot the first level is every stale tensor, thousands when a kept
loss holds its graph's activations. ``gc.get_referrers(*objs)`` compares
every reference of every object the collector tracks with each of objs in
turn; ``_trackfast.referrers_of(objs)`` (scripts/vramtrace/native/trackfast/
referrers.c) looks each reference up in a hash set, after listing the heap
with ``gc.get_objects()``. Both give the same referrers (the tests check
that); this measures their cost in one process that imported torch and
loaded vramtrace.torch (a real program's heap), for levels of 1 to 10,000
objects each held by a list of its own: the best of --rounds calls each, in
milliseconds, and their ratio. Then a whole walk up a chain of 1 to 8
attributes: a heap pass a level, against the ReferrerIndex (referrers.c:
every reference read in one pass, each level after the first two a lookup),
and what building that index costs in passes. Ends with a RESULT line;
asserts nothing about speed.

    python bench_referrers.py [--rounds N]   (needs torch and the built _trackfast)

Exit status 2 without _trackfast, 77 (skipped) without torch.
"""

from __future__ import annotations

import argparse
import gc
import sys
import time


def best_ms(fn, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        gc.collect()   # (each on the same heap: a walk's own cycles gone)
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times) * 1e3


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    try:
        import torch  # noqa: F401  (its heap is the program's)
    except ImportError:
        print("bench_referrers: no torch (skipped)")
        return 77
    import vramtrace.torch as vtt
    with vtt.track():
        pass
    mod = vtt._fast_path._trackfast
    if not mod or not hasattr(mod, "referrers_of"):
        print("bench_referrers: vramtrace._trackfast is not built", file=sys.stderr)
        return 2

    class Stale:
        pass

    objs = [Stale() for _ in range(10_000)]
    lists = [[o] for o in objs]
    print(f"heap: {len(gc.get_objects()):,} objects the collector tracks; best of "
          f"{args.rounds} calls")
    print(f"{'objects':>8} {'gc.get_referrers':>17} {'referrers_of':>13} {'ratio':>7}")
    result = []
    for n in (1, 32, 1000, 10_000):
        level = objs[:n]
        ms_gc = best_ms(lambda: gc.get_referrers(*level), args.rounds)
        ms_native = best_ms(lambda: mod.referrers_of(level), args.rounds)
        print(f"{n:>8,} {ms_gc:>14.1f} ms {ms_native:>10.1f} ms {ms_gc / ms_native:>6.1f}x")
        result += [f"gc_ms_{n}={ms_gc:.1f}", f"native_ms_{n}={ms_native:.1f}",
                   f"ratio_{n}={ms_gc / ms_native:.2f}"]
    del lists
    result += walk_by_depth(mod, args.rounds)
    print("RESULT " + " ".join(result))
    return 0


def walk_by_depth(mod, rounds: int) -> list:
    """A holder walk up a chain of ``depth`` objects, each an attribute of
    the next (two levels each: the owner's __dict__, then the owner), by a
    heap pass a level and through the ReferrerIndex after _INDEX_AFTER
    levels; and what building the index costs, in heap passes of one
    object (_referrers._index_passes, which the walks measure too)."""
    from vramtrace import _referrers

    class Link:
        pass

    start = Link()
    starts = {("t", 1): start}   # (the walk leaves out the dict it starts from)
    top, links, rows = start, [], []
    print(f"\nholder walk up a chain of attributes (best of {rounds})")
    print(f"{'depth':>8} {'levels':>7} {'a pass a level':>15} {'indexed':>10} {'ratio':>7}")
    for depth in (1, 2, 4, 8):
        while len(links) < depth:
            up = Link()
            up.held = top
            links.append(up)
            top = up

        def walk() -> int:
            res = _referrers.walk_referrers(starts, lambda o: None, max_depth=2 * depth)
            res.objects.clear()
            return res.levels
        walk()   # (its first reading of an owner's attributes makes the owner's __dict__)
        native = _referrers._native_index
        try:
            _referrers._native_index = None
            ms_passes = best_ms(walk, rounds)
        finally:
            _referrers._native_index = native
        ms_index = best_ms(walk, rounds)
        print(f"{depth:>8} {walk():>7} {ms_passes:>12.1f} ms {ms_index:>7.1f} ms "
              f"{ms_passes / ms_index:>6.2f}x")
        rows += [f"walk_passes_ms_{depth}={ms_passes:.1f}",
                 f"walk_indexed_ms_{depth}={ms_index:.1f}",
                 f"walk_ratio_{depth}={ms_passes / ms_index:.2f}"]
    ms_pass = best_ms(lambda: gc.get_referrers(start), rounds)
    ms_build = best_ms(lambda: mod.ReferrerIndex().close(), rounds)
    print(f"index built in {ms_build:.1f} ms, a heap pass of one object {ms_pass:.1f} ms: "
          f"{ms_build / ms_pass:.1f} passes")
    return rows + [f"index_build_ms={ms_build:.1f}", f"index_passes={ms_build / ms_pass:.2f}"]


if __name__ == "__main__":
    sys.exit(main())
