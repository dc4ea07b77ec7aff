"""Example suite for the pytest plugin: four leaks and their fixed twins.

Run by ../test_pytest_plugin.py with --vramtrace-leaks: exactly the *_leak
tests must fail, each naming its holder and the line (marked LEAK_...)."""

import weakref

import pytest
import torch

CACHE = []                   # a module-level cache
LOSSES = []                  # a module-level record of losses
TABLE = torch.ones(256)      # made at import: the module's, not a test's


class Node:
    def __init__(self, buf):
        self.buf = buf
        self.other = None


def test_cycle_leak():
    a = Node(torch.randn(1024))  # LEAK_CYCLE
    b = Node(None)
    a.other, b.other = b, a


def test_cycle_fixed():
    a = Node(torch.randn(1024))
    b = Node(None)
    a.other, b.other = weakref.ref(b), a


def test_cache_leak():
    x = torch.randn(2048)
    CACHE.append(x * 2)  # LEAK_CACHE


def test_cache_fixed():
    x = torch.randn(2048)
    CACHE.append(float((x * 2).sum()))


def _loss_of_a_step():
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(),
                                torch.nn.Linear(128, 128), torch.nn.Tanh(),
                                torch.nn.Linear(128, 1))
    return model(torch.randn(32, 64)).square().mean()  # LOSS_LINE


def test_graph_leak():
    LOSSES.append(_loss_of_a_step())  # LEAK_GRAPH: the loss keeps its graph


def test_graph_fixed():
    LOSSES.append(_loss_of_a_step().item())


@pytest.fixture(scope="module")
def model():
    return torch.nn.Linear(64, 64)   # kept on purpose by a module-scoped fixture


def test_hook_leak(model):
    seen = torch.zeros(4096)  # LEAK_HOOK
    model.register_forward_hook(lambda mod, args, out: seen.add_(out.detach().sum()))
    model(torch.randn(2, 64))


def test_hook_fixed(model):
    seen = torch.zeros(4096)
    handle = model.register_forward_hook(lambda mod, args, out: seen.add_(out.detach().sum()))
    model(torch.randn(2, 64))
    handle.remove()


class Affine(torch.nn.Module):
    """Parameters made as ``nn.Parameter(torch.zeros(n))``, as transformers'
    Conv1D makes its bias: the temporary the parameter wraps dies at once."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = torch.nn.Parameter(torch.ones(256))
        self.shift = torch.nn.Parameter(torch.zeros(256))

    def forward(self, x):
        return x * self.scale + self.shift


@pytest.fixture(scope="module")
def affine():
    return Affine()


def test_a_module_fixtures_parameters_and_the_grads_left_on_them_are_not_the_tests(affine):
    affine(torch.randn(8, 256)).sum().backward()   # the first to use it; grads left on it
    assert affine.scale.grad is not None


def test_module_global_is_not_the_tests():
    assert float((TABLE * 2).sum()) == 512


@pytest.fixture
def scratch():
    buf = torch.zeros(1000)
    yield buf
    buf.zero_()   # a function-scoped fixture's tensor dies with its teardown


def test_function_fixture_is_torn_down_first(scratch):
    scratch.add_(1)


@pytest.mark.vramtrace_allow_leaks
def test_allowed_leak():
    CACHE.append(torch.ones(100))


def test_ignored_leak():
    CACHE.append(torch.full((300,), 2.0))  # the runner ignores this line's tensors
