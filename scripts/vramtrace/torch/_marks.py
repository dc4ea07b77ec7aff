"""What the tracker does at each mark and snapshot.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Optional, Set

from .._lib import VramtraceError
from .. import _gc_hold
from ._walks import _LEAST_WALK_PASSES, tick_clock

# Seconds between the ticks of a program that makes no mark (_Marks._tick):
# its storages last used before a tick and unused since are walked at the
# next one, well within the 1 s `check`'s time rule waits at least before a
# finding.
_TICK_S = 0.5
_NO_TICK = float("inf")   # Tracker._next_tick once the program marks
# A program that marks and then goes quiet (an evaluation after each epoch of
# training: no optimizer step marks it) is ticked again once it has made no
# mark for _QUIET_STEPS of its usual steps (the median of its last
# _QUIET_GAPS gaps between marks), _QUIET_MIN_S at least: without walks
# there, what the quiet stretch keeps (a validation loss summed with its
# graph, every batch's activations) was found with no holder named.
_QUIET_STEPS = 4
_QUIET_MIN_S = 1.0
_QUIET_GAPS = 16
# When a tick's holder walk stops, whatever credit it has: this many seconds
# after the tick began (its sweep included), of CPU or of the wall clock,
# whichever runs out first (_walks.tick_clock). A program without marks is
# judged by time, against a grace of 1 s at least, and the tracker's pause
# must not make the program's own temporaries (those it replaces at its next
# op) outlive it. Before: credit of up to snapshot_walk_s spent at once
# paused hf_decode.py 1.2 s under load; then 0.2 s of CPU alone, 0.5 s of
# the wall clock on a loaded machine.
_TICK_WALK_S = 0.2
# The interpreter's switch interval while a mark, tick or snapshot works:
# another Python thread is handed the GIL after this long of the tracker's
# work at most, not every 5 ms. The collector's count is held meanwhile
# (gc_schedule.c), and what another thread makes or frees while it is held
# is lost from the count: the autograd engine's device thread, releasing a
# backward's graph, moved the program's count per step by +2 and -21 under
# `run --track` on a loaded machine (the differential suite's
# the_collectors_count_moves_per_step_as_untracked[cuda]). A tick's work is
# shorter than this; a mark's or snapshot's walk (seconds at most) still
# lets the program's other threads run now and then.
_MARK_SWITCH_S = 1.0
# A mark shorter than this (wall clock) is not timed on the CPU clock too
# (_on_mark): what it costs the walks' credit is its wall time.
_QUICK_MARK_S = 0.001


class _Marks:
    """The tracker's work at marks (a mixin of :class:`Tracker`)."""

    # -- marks and snapshots -------------------------------------------------
    @_gc_hold.held
    def _on_mark(self, kind: str, arg: str) -> None:
        # Runs just before the mark is recorded. The checker flags a storage
        # last used in step j that is still alive at mark j+2 (one complete
        # unused step), and looks up its holders at that mark: so walk every
        # storage not used since the previous mark, and do it now.
        # Nothing done here is the program's: ops that the walk or the
        # storage checks cause (reading saved tensors makes detach views)
        # are not recorded.
        # What the op observer holds back (a backward's ops) is recorded
        # first, as the program's: recording is off for the mark's own work.
        # (the books' fields read and written here on the Dispatcher itself,
        # not through the tracker's properties: every Python call a mark
        # makes costs it about a microsecond, its step having pushed it out
        # of the caches)
        fast = self._fast
        fast.flush()
        _gc_hold.program_read()   # what reading the program's objects makes is its own
        recording, fast.recording = fast.recording, False
        # another thread's op meanwhile waits for the mark (the op observer)
        # instead of going unrecorded: the mark's Python lets the GIL go
        marking, fast.marking = fast.marking, threading.get_ident()
        switch = sys.getswitchinterval()
        sys.setswitchinterval(max(switch, _MARK_SWITCH_S))
        began, began_wall = time.process_time(), time.perf_counter()
        clock = tick_clock() if kind == "tick" else None
        if self._last_mark_end is not None and self.walk_fraction is not None:
            # The program's own time: the CPU time since the last mark less
            # the share of it that recording ops and deaths took (timed on
            # the wall clock per op, which a syscall per op would not be).
            # CPU time, because other processes stretch the wall clock of
            # a busy machine and the walk would be paid by the program.
            cpu, wall = began - self._last_mark_end[0], began_wall - self._last_mark_end[1]
            busy = fast.busy - self._busy_at_mark
            own = cpu * max(0.0, 1.0 - busy / wall) if wall > 0 else 0.0
            self._credit = min(self._credit + self.walk_fraction * own, self._credit_ceiling())
            self._earned += self.walk_fraction * own
        try:
            threshold = fast.epoch
            if kind == "mark":
                fast.pass_ticks = 0   # the program's marks are its steps
            if kind in ("mark", "pass"):
                self._next_tick = _NO_TICK
                self._marked_at.append(began_wall)
            # The state of the models used since the last mark or tick
            # follows them at each, and at a snapshot for the window since
            # (under autocast a weight is read once, by the cast its cache
            # keeps); timed until the program marks. A snapshot ends no step.
            self._grads_follow_parameters(threshold, self._next_tick != _NO_TICK)
            if kind in ("mark", "pass", "tick"):
                fast.epoch += 1
            try:
                self._sweep(kind in ("snapshot", "tick"))
                # before a walk: the references it records name these tensors
                self._declare_tensors_again(kind == "snapshot")
                if self.collect_cycles:
                    self._collect_cycles()
                if self.walk and clock is not None:
                    self._walk_stale(threshold, until=_TICK_WALK_S, clock=clock)
                elif self.walk:
                    # a snapshot after a quiet stretch (an evaluation at the
                    # end, judged by `check` in steps of its own: check_clock.c)
                    # walks what that stretch made and uses too
                    # (no minimum, as `check`'s rule: a program with one
                    # mark has no usual step, and no quiet stretch then)
                    quiet = (kind == "snapshot" and len(self._marked_at) > 1
                             and self._quiet_for(0.0))
                    self._walk_stale(threshold + 1 if quiet else threshold, kind == "snapshot")
            except VramtraceError:
                raise
            except Exception as exc:
                self.errors += 1
                self._warn(f"vramtrace.torch: holder walk at {kind} {arg!r} failed: {exc!r}", 3)
        finally:
            sys.setswitchinterval(switch)
            fast.recording = recording
            fast.marking = marking
            end_wall = time.perf_counter()
            # a quick mark's CPU time taken for its wall time: reading the
            # process's CPU clock is a system call, a microsecond or more
            # on a virtual machine, at every mark of a program
            end = (began + (end_wall - began_wall) if end_wall - began_wall < _QUICK_MARK_S
                   else time.process_time())
            self.walk_seconds += end - began
            self._last_mark_end = (end, end_wall)
            self._busy_at_mark = fast.busy
            # All of a mark's work is paid from the credit, not just the walk.
            self._credit -= end - began
            # The program stood still meanwhile: recorded (PAUSE), so that
            # `check`, judging a program without marks by time, does not
            # take vramtrace's work for time the program held its tensors.
            # (in C where it can be: _ring_calls)
            self._record_pause(int((end_wall - began_wall) * 1e9))

    def _declare_tensors_again(self, snapshot: bool) -> None:
        """Every tensor the books hold declared again (vt_tensor_again,
        the oldest first, a quarter of the ring at most) once the program
        has recorded half a ring since the last time, and at a snapshot
        whose ring overwrote the run's start. A run longer than the ring
        (most training runs: a million events are a few hundred steps of a
        small model) overwrites the declarations of what the program made
        early and still holds, and `check` would see the storages of a leak
        that ended early without their tensors: alive, but not judged (a
        list of the first steps' outputs kept for debugging, a whole run
        long). Declared again, such a tensor is judged as made before the
        window and unused since it began (unless a use in it says
        otherwise). At most a declaration per tensor per half ring: a
        declaration is always within the last ring, and they fill at most a
        quarter of it (a program holding more tensors than that has its
        newest ones left out, whose own declarations are the youngest)."""
        got = self._trace_window()
        if got is None:
            return
        recorded, room = got
        if not (recorded > room if snapshot
                else self._half_ring_since(self._tensors_declared_at, got) is not None):
            return
        self._tensors_declared_at = recorded
        # a rest in marks; a program that ticks instead (no mark yet) is
        # judged by time: in ns, a tick every tick_s of its ops
        ticking = self._next_tick != _NO_TICK and self.tick_s
        scale = int(self.tick_s * 1e9) if ticking else 1
        self.declared_again += self._fast.declare_again(max(1, room // 4), scale)

    def _tick(self) -> None:
        """A mark's work without a mark, for a program that has made none
        (an evaluation or inference loop: no optimizer step marks it), every
        ``tick_s`` seconds of its ops: a model's parameters moved by
        ``Module.to()`` are found on their new memory, the state of the
        models it uses (buffers it never reads) is used with them, and the
        storages gone stale are walked for their holders, from the walks'
        credit as at a mark. No MARK is recorded: `check` judges such a
        program by time. A program that marks is ticked only while its
        marks have gone quiet (_gone_quiet), and judged by its marks still;
        the C path asks every ``tick_s`` however it marks."""
        if self._next_tick != _NO_TICK or self._gone_quiet():
            self._on_mark("tick", "")

    def _pass_ended(self) -> None:
        """A mark's work at the end of each backward pass (the C path asks
        at the owner thread's first op after one that reads a gradient it
        made, from the second pass on: an optimizer's mark may follow the
        first; pass_ended in native/trackfast/dispatch.c) while the program
        has made no mark: a training loop that steps its parameters by hand
        (``p.data.add_(p.grad, alpha=-lr)``, no optimizer to mark it) is
        judged by `check` in the steps its backward passes tell
        (trace/snap/timeline_steps.c), and its storages gone stale by a
        step are walked for their holders then, as an optimizer's marks
        would have them walked; ticked by time it was judged by time, its
        leaks of a few steps (a validation's kept graph) unseen beside a
        long run's grace. No MARK is recorded: the trace's passes tell the
        steps, and a step of several passes (micro-batches) is walked at
        each. Once its passes have gone quiet (an evaluation after
        training), it is ticked again, as a program whose marks have."""
        self._on_mark("pass", "")

    def _quiet_for(self, at_least: float) -> bool:
        """Whether a program that marks has made no mark for _QUIET_STEPS
        of its usual steps (the median gap between its recent marks), and
        for ``at_least`` seconds."""
        marked = self._marked_at
        if not marked:
            return False
        gaps = sorted(b - a for a, b in zip(marked, list(marked)[1:]))
        usual = gaps[len(gaps) // 2] if gaps else 0.0
        return time.perf_counter() - marked[-1] >= max(at_least, _QUIET_STEPS * usual)

    def _gone_quiet(self) -> bool:
        """_quiet_for a second at least (_QUIET_MIN_S): the ticks' rule."""
        return self._quiet_for(_QUIET_MIN_S)

    def _grads_follow_parameters(self, epoch: int, timed: bool = False) -> None:
        """A parameter's ``.grad`` is the parameter's state, not a tensor of
        its own step: it lives until the next backward replaces it or
        ``zero_grad`` frees it. Each step that used a parameter (``epoch``)
        uses its grad too, so a grad left after the last backward (an
        evaluation after training, a skipped optimizer step) is not a
        finding while its parameter is in use; a grad whose parameter is
        no longer used lingers like any tensor. ``timed``: at a tick (the
        check judges such a program by time, not by step): see
        _state_follows_models."""
        # Each parameter used since the mark has its .grad used and named
        # in C (native/trackfast/grads.c); what it leaves is named here: a
        # parameter still named by its first sight, or a .grad whose
        # parameter no lookup has named yet. The models are looked up (one
        # pass over the collector's objects) at most once a mark, by the
        # first ask that finds a parameter unknown (_may_look_up_models
        # says when): a model that grows a layer or a head after the
        # first lookup has it named at a later mark.
        models, todo = self._fast.follow_grads(epoch, self._param_labels, self._param_names,
                                               self._model_of)
        by_obj = self._by_obj
        look = bool(todo) and self._may_look_up_models()   # (asked only when needed)
        model_of = self._model_of
        for t, rec in todo:
            if rec.name.startswith("parameter"):
                # named as its model knows it, once a model holds it
                name, looked = self._param_name(t, look)
                look = look and not looked
                if name:
                    self._name_param(t, rec, name)
                # a model this mark's lookup found is in use in this mark's
                # step too: its state follows it now, not a mark later
                mid = model_of.get(id(t))
                if mid is not None:
                    models.add(mid)
            g = getattr(t, "_grad", None)
            grec = by_obj.get(id(g)) if g is not None else None
            if grec is not None and grec.tid and not grec.name.endswith(".grad"):
                name, looked = self._param_name(t, look)
                look = look and not looked
                if name:
                    self._fast.name_grad(grec, name + ".grad")
            del t, g
        del todo
        self._state_follows_models(models, epoch, timed)

    def _may_look_up_models(self) -> bool:
        """Whether this mark may look the models up (a pass over the
        collector's objects, like a level of a holder walk): the first time
        always (a model's names are what its parameters are called from the
        first mark on), later from the walks' budget, as a walk would be
        (a program that makes a parameter every step would otherwise pay a
        heap pass a step)."""
        if not self.model_lookups:
            return True
        return self._credit_pays_a_pass()

    def _credit_ceiling(self) -> float:
        """The most credit the walks keep (CPU seconds): a walk waits for
        no more than this."""
        return max(1.0, self.snapshot_walk_s)

    def _credit_pays_a_pass(self) -> bool:
        """Whether the walks' credit pays for a pass over the collector's
        objects (a mark's heap pass besides the walk: the models' lookup,
        the bases only views keep) and still a walk's first level after it
        (_walks._LEAST_WALK_PASSES); always without a time budget. Paid as soon
        as a pass's worth came, such a pass took the credit every walk
        waited for: actor_critic.py keeps a view of each step's critic
        output, whose base only the view keeps, and its run --track made 9
        heap passes for bases and one walk in 60 marks."""
        return self.walk_fraction is None or (
            self._credit >= self._pass_cost * (1 + _LEAST_WALK_PASSES))

    def _state_follows_models(self, models: Set[Optional[int]], epoch: int,
                              timed: bool = False) -> None:
        """A model's parameters and buffers are its state, not tensors of
        a step: each step that used a model (one of its parameters, at
        ``epoch``) uses them all, so that a buffer the model never reads (a
        causal mask kept for another attention path, a ``position_ids``
        table) or a frozen layer it skips is not a finding while the model
        is in use. A buffer is named as its model knows it. ``models``: ids
        from the last lookup of models (_Naming._param_name). ``timed``: a
        use now also for what was used in the step already, which a check
        by time needs (a buffer made by the ``.to()`` that began the window
        was used in it, before the model's last use). The uses are made in
        C (``follow_state``, native/trackfast/grads.c: a model's every
        parameter and buffer, each mark); what it leaves is renaming."""
        for mid in models:
            got = self._model_state.get(mid) if mid is not None else None
            if got is None or got[0]() is None:
                continue
            for t, name in self._fast.follow_state(got[1], epoch, timed):
                self._rename(t, name)
                t = None
