"""What a learned placer returns: :class:`LearnedPlacement` (no torch: the steered search returns one too)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class LearnedPlacement:
    """A placement by the learned placer: a device per node of the graph given, its simulated makespan (s) and
    memory overflow (bytes, 0 when it fits), the seconds taken, ``method`` (``zero-shot``, ``fine-tuned``,
    ``rollout``, ``steered``, or ``anneal`` for the annealing it is compared with) and the search rounds run."""

    placement: np.ndarray
    makespan: float
    overflow: float
    seconds: float
    method: str
    rounds: int
    interrupted: bool = False  # Ctrl-C or SIGTERM stopped the search: the best placement found until then
    terminated: bool = False  # it was SIGTERM
