"""The random generators' states as plain data, so that a checkpoint resumes the streams where they stopped.

:func:`capture` returns the states of Python's ``random``, NumPy's global generator and PyTorch's global
generator (and of any ``torch.Generator`` given by name) as JSON-able data; :func:`restore` sets them back and
raises ``ValueError`` naming the entry when one is malformed (a checkpoint from anywhere is read without trusting
it). Rebuilding a model re-seeds these generators from the seed (stable-baselines3's ``set_random_seed``, the
project's algorithms' ``torch.manual_seed``); restoring after the rebuild is what makes a resumed run draw what an
uninterrupted one would have drawn next.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch

TORCH_STATE_BYTES = torch.get_rng_state().numel()  # 5056 for the Mersenne Twister on the CPU


def torch_state(generator: torch.Generator | None = None) -> list[int]:
    """The state of ``generator`` (PyTorch's global CPU generator when None) as a list of bytes."""
    state = torch.get_rng_state() if generator is None else generator.get_state()
    return [int(b) for b in state.tolist()]


def set_torch_state(state: Any, generator: torch.Generator | None = None, where: str = "torch") -> None:
    """Set ``generator`` (the global one when None) to ``state`` from :func:`torch_state`; ``ValueError`` naming
    ``where`` when ``state`` is not such a list."""
    if (not isinstance(state, list) or len(state) != TORCH_STATE_BYTES
            or not all(isinstance(b, int) and 0 <= b < 256 for b in state)):
        raise ValueError(f"checkpoint: the generator state {where!r} is not {TORCH_STATE_BYTES} bytes")
    tensor = torch.tensor(state, dtype=torch.uint8)
    try:
        if generator is None:
            torch.set_rng_state(tensor)
        else:
            generator.set_state(tensor)
    except RuntimeError as error:
        raise ValueError(f"checkpoint: the generator state {where!r} is refused by PyTorch ({error})") from None


def capture(**generators: torch.Generator) -> dict[str, Any]:
    """The global generators' states (``python``, ``numpy``, ``torch``) and those of ``generators`` (by name)."""
    version, internal, gauss = random.getstate()
    kind, keys, position, has_gauss, cached = np.random.get_state()
    return {"python": [version, list(internal), gauss],
            "numpy": [kind, [int(k) for k in keys], int(position), int(has_gauss), float(cached)],
            "torch": torch_state(),
            **{name: torch_state(generator) for name, generator in generators.items()}}


def restore(state: Any, **generators: torch.Generator) -> None:
    """Set the global generators and ``generators`` (by name) to ``state`` from :func:`capture`. Raises
    ``ValueError`` naming the entry that is missing or malformed; nothing is set then."""
    if not isinstance(state, dict):
        raise ValueError("checkpoint: the generators' states are not a mapping")
    missing = [name for name in ("python", "numpy", "torch", *generators) if name not in state]
    if missing:
        raise ValueError(f"checkpoint: the generators' states lack {', '.join(missing)}")
    try:
        version, internal, gauss = state["python"]
        python = (int(version), tuple(int(k) for k in internal), None if gauss is None else float(gauss))
        kind, keys, position, has_gauss, cached = state["numpy"]
        numpy_state = (str(kind), np.asarray(keys, dtype=np.uint32), int(position), int(has_gauss), float(cached))
        previous = random.getstate(), np.random.get_state()
        random.setstate(python)
        np.random.set_state(numpy_state)
    except (TypeError, ValueError, OverflowError) as error:
        raise ValueError(f"checkpoint: the Python or NumPy generator state is malformed ({error})") from None
    try:
        for name in generators:  # checked before the global one is set
            set_torch_state(state[name], torch.Generator(), name)
        set_torch_state(state["torch"], None, "torch")
        for name, generator in generators.items():
            set_torch_state(state[name], generator, name)
    except ValueError:
        random.setstate(previous[0])
        np.random.set_state(previous[1])
        raise
