"""A model before a method runs -> the same model after it: weights, buffers, training mode, grad
mode and random-number states restored, and a method that changed the weights named.

Methods share one model in `zoo eval` and `zoo bench`; a method that fine-tunes it in place,
leaves grad mode off or consumes the global RNG would silently change every method after it
(issue 36). Copying the state costs one copy of the weights per call: the zoo's models are
kilobytes to a few megabytes, against the many forward passes a method makes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import random
from collections.abc import Iterator
from typing import Any


@dataclasses.dataclass(frozen=True)
class Isolation:
    """What `isolated` found once the method returned."""

    changed: tuple[str, ...]
    """Names of the weights or buffers the method changed (they were restored)."""


@contextlib.contextmanager
def isolated(model: Any) -> Iterator[list[Isolation]]:
    """Run the block against `model` and put everything back afterwards, even if it raised.

    Yields a list that holds one Isolation once the block ends (empty while it runs)."""
    import numpy as np
    import torch

    state = _tensors(model)
    saved = {name: t.detach().clone() for name, t in state.items()}
    training = getattr(model, "training", None)
    grad = torch.is_grad_enabled()
    rng = torch.get_rng_state(), np.random.get_state(), random.getstate()
    cuda_rng = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None
    found: list[Isolation] = []
    try:
        yield found
    finally:
        torch.set_grad_enabled(grad)
        torch.set_rng_state(rng[0])
        np.random.set_state(rng[1])
        random.setstate(rng[2])
        if cuda_rng is not None:
            torch.cuda.set_rng_state_all(cuda_rng)
        if training is not None and getattr(model, "training", None) != training:
            model.train(training)
        found.append(Isolation(changed=_restore(_tensors(model), state, saved)))


def _restore(after: dict[str, Any], live: dict[str, Any], saved: dict[str, Any]) -> tuple[str, ...]:
    """Names whose tensor was replaced, added, removed or changed in value; each one whose shape
    still fits gets its saved values back."""
    import torch

    changed = sorted(set(after) ^ set(saved))
    with torch.no_grad():
        for name, before in saved.items():
            now = after.get(name)
            if now is None:
                continue
            same_kind = now.shape == before.shape and now.dtype == before.dtype
            if now is not live[name] or not same_kind or not torch.equal(now, before):
                changed.append(name)
                if same_kind:
                    now.copy_(before)
    return tuple(sorted(set(changed)))


def _tensors(model: Any) -> dict[str, Any]:
    """The model's parameters and buffers by name, the live tensors (not copies)."""
    named = getattr(model, "named_parameters", None)
    if named is None:
        return {}
    out = dict(model.named_parameters())
    out.update(dict(model.named_buffers()))
    return out
