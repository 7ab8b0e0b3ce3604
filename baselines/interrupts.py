"""What a search keeps when Ctrl-C (or SIGTERM) stops it: the best placement it had found, carried on the interrupt.

A search that catches :class:`KeyboardInterrupt` (SIGTERM arrives as its subclass
:class:`placement_env.cli.Terminated`) attaches its best placement with :func:`with_best` and raises the same
exception again, so that its type and every handler above it stay as they were; a caller that can use the
placement (``python -m agents.place`` writes it) reads it with :func:`best_of`. :func:`baselines.anneal.anneal_units`
attaches its best; :func:`baselines.starts.best_of_starts` the best of its searches so far.
"""

from __future__ import annotations

import numpy as np

_ATTRIBUTE = "search_best"


def with_best(stop: KeyboardInterrupt, placement: np.ndarray, makespan: float, overflow: float) -> KeyboardInterrupt:
    """``stop`` carrying ``(placement, makespan, overflow)`` (a device per node, seconds, bytes), unless it already
    carries a better one (less overflow, then a shorter makespan)."""
    found = best_of(stop)
    if found is None or (overflow, makespan) < (found[2], found[1]):
        setattr(stop, _ATTRIBUTE, (placement, float(makespan), float(overflow)))
    return stop


def best_of(stop: BaseException) -> tuple[np.ndarray, float, float] | None:
    """The ``(placement, makespan, overflow)`` an interrupt carries (:func:`with_best`), or None."""
    return getattr(stop, _ATTRIBUTE, None)
