"""The parameter update of a training loop without an optimizer, as
pytorch/examples' word_language_model makes it by default: each parameter
stepped through ``.data`` against its gradient (no optimizer step, so
`vramtrace run` has none to mark). Shared by this folder's programs that
step by hand; knows nothing of vramtrace."""

from typing import Any, Iterable, Optional


def sgd(params: Iterable[Any], lr: float) -> None:
    """``p.data.add_(p.grad, alpha=-lr)`` for each parameter."""
    for p in params:
        p.data.add_(p.grad, alpha=-lr)


def step(model: Any, opt: Optional[Any], lr: float = 0.01) -> None:
    """``opt.step()``, or the model's parameters stepped by hand where
    there is no optimizer (``opt`` None)."""
    if opt is None:
        sgd(model.parameters(), lr)
    else:
        opt.step()
