"""vramtrace.torch.track() against a recording fake library: the names it
gives tensors (the user's line, its code and the op; a backward op's under
its forward's line; names given by the program)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import vramtrace.torch as vtt  # noqa: E402
from conftest import made_by, new_by_name, storage_nbytes  # noqa: E402


def test_op_outputs_are_named_and_their_storage_declared(fake):
    with vtt.track() as tr:
        a = torch.randn(16, 8)
        b = a @ a.t()
    news = fake.of("tensor_new")
    mm = new_by_name(fake, "aten.mm out[0]")
    assert len(mm) == 1
    # named by the line that made it, as the user wrote it
    line = test_op_outputs_are_named_and_their_storage_declared.__code__.co_firstlineno + 3
    assert mm[0][5] == f"b = a @ a.t() (test_track_names.py:{line}, aten.mm out[0])", mm[0][5]
    nbytes, ptr = storage_nbytes(b)
    assert ("storage", ptr, nbytes, -1) in fake.events
    assert mm[0][2] == b.data_ptr() and mm[0][3] == 16 * 16 * 4
    assert tr.tensor_id(b) == mm[0][1]
    # the transposed view names its base
    t_new = new_by_name(fake, "aten.t out[0]")[0]
    assert t_new[4] == tr.tensor_id(a)
    assert any(made_by(e[5], "aten.randn out[0]") for e in news)


def test_a_backward_output_is_not_named_as_the_forward_one_of_the_same_op(fake):
    # names are cached per (op, output, stack); without a stack (0) a forward
    # op's output and a backward op's of the same op share the rest of it
    with vtt.track() as tr:
        mm = torch.ops.aten.mm.default
        forward = tr._out_name(mm, 0, 0, True)
        backward = tr._out_name(mm, 0, 0, False)
        assert (forward, backward) == ("aten.mm out[0]", "backward: aten.mm out[0]")
        assert tr._out_name(mm, 0, 0, True) == forward


def test_names_stay_each_lines_when_more_sites_than_the_slots_in_front_of_the_books(fake, tmp_path):
    # An op's outputs' names come from C slots in front of the books' names
    # (native/trackfast/op_cache.c, 1,024 of them, a slot taken by another
    # key replaced): more sites than slots, each run twice, each output
    # still named by its own line, the second time as the first.
    sites = 1500
    src = tmp_path / "many_sites.py"
    src.write_text("def run(a, out):\n" + "".join(
        f"    out.append(a + {k})\n" for k in range(sites)))
    ns: dict = {}
    exec(compile(src.read_text(), str(src), "exec"), ns)
    a = torch.ones(2)
    with vtt.track():
        first, again = [], []
        ns["run"](a, first)
        ns["run"](a, again)
    names = [e[5] for e in new_by_name(fake, "aten.add out[0]")]
    assert len(names) == 2 * sites, len(names)
    for k in range(sites):
        want = f"out.append(a + {k}) (many_sites.py:{k + 2}, aten.add out[0])"
        assert names[k] == want and names[sites + k] == want, (k, names[k], names[sites + k])


def test_a_backward_op_runs_under_its_forwards_frames_out_to_the_programs_line(real_lib):
    """The frames a backward op is lent (or, through the mode, run under):
    the forward's innermost 16, and further out through the program's own
    innermost frame where none of those is (a model called through a
    library's layers), never past it; both ways of seeing ops take them
    from here (tests/torch/test_torch_pyframes.py runs one on a device)."""
    lib_file = "/venv/lib/python3.11/site-packages/torch/nn/modules/module.py"
    mine = "/home/me/train.py"
    deep = [("_call_impl", lib_file, 1794)] * 20 + [("main", mine, 12), ("<module>", mine, 30)]
    shallow = [("forward", mine, 5)] + deep
    library_only = [("_call_impl", lib_file, 1794)] * 30
    with vtt.track() as tr:
        assert tr._frames_to_lend(deep) == deep[:21]              # through main's line
        assert tr._frames_to_lend(shallow) == shallow[:16]        # the program's within 16
        assert tr._frames_to_lend(library_only) == library_only[:16]
        assert tr._frames_to_lend(deep[:10]) == deep[:10]


def _site_names(path, source: str, lines) -> list:
    """The names of an op's output (aten.mm out[0]) made at each of ``lines``
    of ``source``, written to ``path``."""
    from vramtrace.torch._naming import _site_name
    path.write_text(source)
    return [_site_name(str(path), line, "aten.mm out[0]") for line in lines]


def test_a_site_on_a_decorator_is_named_by_its_functions_def(tmp_path):
    """A compiled function's tensors stand at its first line (torch.compile's
    frames), which for a decorated forward, as transformers writes them, is
    a decorator: named by the def it decorates, with that line's number."""
    assert _site_names(tmp_path / "model.py",
                       "class M:\n"
                       "    @add_docstrings(DOC)\n"
                       "    @replace_return(Out)\n"
                       "    def forward(self, input_ids=None):\n"
                       "        return self.lm_head(h)\n", [2, 5]) == [
        "def forward(self, input_ids=None): (model.py:4, aten.mm out[0])",
        "return self.lm_head(h) (model.py:5, aten.mm out[0])"]


def test_a_sites_name_quotes_its_code_without_the_comment(tmp_path):
    """A trailing comment is not what made the tensor, and a long one took
    the characters the code needed (nanoGPT with a leak marked by a
    comment was named `kept.append(logits[:, -1, :].detach()) # LEAK: a
    vie...`); a `#` inside a string is code and stays."""
    assert _site_names(tmp_path / "train.py",
                       "kept.append(logits[:, -1, :].detach())   # LEAK: a view pins all the logits\n"
                       "tag = torch.tensor(ord('#'))  # the tag\n"
                       "# a line of comment only\n", [1, 2, 3]) == [
        "kept.append(logits[:, -1, :].detach()) (train.py:1, aten.mm out[0])",
        "tag = torch.tensor(ord('#')) (train.py:2, aten.mm out[0])",
        "aten.mm out[0] at train.py:3"]


def test_tensors_made_under_a_default_device_are_named_by_the_users_line(fake):
    """torch.set_default_device and `with torch.device(...)` run every
    factory through a function mode of torch's (utils/_device.py): the name
    is still the user's line, not that mode's `return func(*args, **kwargs)`."""
    with vtt.track():
        with torch.device("cpu"):
            z = torch.zeros(32)
    made = new_by_name(fake, "aten.zeros out[0]")
    assert len(made) == 1
    line = test_tensors_made_under_a_default_device_are_named_by_the_users_line \
        .__code__.co_firstlineno + 6
    assert made[0][5] == f"z = torch.zeros(32) (test_track_names.py:{line}, aten.zeros out[0])", made
    del z


def test_memory_resize_gives_a_tensor_without_any_is_named_by_that_line(fake):
    """`torch.empty(0)` has no memory to track; the `resize_` that gives it
    some makes it, named by that line and op (as torch.load's rebuild, whose
    `set_` gives an empty tensor the loaded memory: test_torch_observed_track), not
    as an input "first used by" it."""
    with vtt.track() as tr:
        buf = torch.empty(0)
        buf.resize_(1 << 12)
    line = test_memory_resize_gives_a_tensor_without_any_is_named_by_that_line \
        .__code__.co_firstlineno + 7
    made = [e for e in fake.of("tensor_new") if e[1] == tr.tensor_id(buf)]
    assert [e[5] for e in made] == [
        f"buf.resize_(1 << 12) (test_track_names.py:{line}, aten.resize_ out[0])"], made
    del buf


def test_memory_no_op_made_first_written_as_an_out_argument_is_named_by_that_op(fake):
    """What torch.compile's generated code does (inductor): a buffer made
    without an op (`empty_strided_cpu`, which calls no operator) and first
    written as an op's `out=` argument (`extern_kernels.mm(a, b, out=buf)`):
    named by that line and op, not as an input "first used by" it. A tensor
    made before track() and first written in place is an input still."""
    from torch._C._dynamo.guards import _empty_strided_cpu
    a = torch.randn(8, 8)
    old = torch.zeros(8)
    with vtt.track() as tr:
        buf = _empty_strided_cpu((8, 8), (8, 1), torch.float32)
        torch.mm(a, a, out=buf)
        old.add_(1)
    line = test_memory_no_op_made_first_written_as_an_out_argument_is_named_by_that_op \
        .__code__.co_firstlineno + 11
    made = [e[5] for e in fake.of("tensor_new") if e[1] == tr.tensor_id(buf)]
    assert made == [f"torch.mm(a, a, out=buf) (test_track_names.py:{line}, aten.mm out[0])"], made
    made = [e[5] for e in fake.of("tensor_new") if e[1] == tr.tensor_id(old)]
    assert made == [f'input, first used by "old.add_(1)" (test_track_names.py:{line + 1})'], made
    del buf


def test_name_right_after_the_op_names_the_tensor_from_its_creation(fake):
    with vtt.track() as tr:
        h = vtt.name(torch.ones(3) * 2, "fc2 out")
        h.add_(1)
    tid = tr.tensor_id(h)
    assert [e[5] for e in fake.of("tensor_new") if e[1] == tid] == ["fc2 out"]
    assert not fake.of("tensor_name") and ("drop", tid) not in fake.events
    assert not new_by_name(fake, "aten.mul out[0]")


def test_name_renames_a_recorded_tensor_when_the_library_can(fake):
    with vtt.track() as tr:
        h = torch.ones(3) * 2
        first = tr.tensor_id(h)          # records it
        vtt.name(h, "fc2 out")
    assert ("tensor_name", first, "fc2 out") in fake.events
    assert tr.tensor_id(h) == first


def test_name_before_tracking_is_taken_when_first_seen(fake):
    w = vtt.name(torch.ones(5), "weight")
    with vtt.track() as tr:
        w.mul_(2)
    assert fake.names[tr.tensor_id(w)] == "weight"
