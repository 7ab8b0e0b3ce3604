"""The wall-clock budget of a search that runs in steps of simulations, kept so that the search ends within it.

A search that checks its clock only between steps overruns its budget by up to one step, which on a graph of a
million ops is seconds (one step of :func:`~baselines.anneal.anneal_units` judges 64 placements of a million
ops). :class:`SearchClock` starts counting when it is made, so that the set-up of the search counts too, and
sizes each step to the time left: :meth:`SearchClock.step` grants a step as many of the evaluations it wants as
are expected to end within the budget, at the seconds per evaluation that the last step took (before the first,
:data:`FIRST_STEP_FACTOR` times a timed simulation, and a first step that would take much of the time left is
a smaller probe), and none when not one fits.
"""

from __future__ import annotations

import math
import time

# Before the first step, an evaluation is expected to take this many times as long as one simulation: on a
# million-op graph, building a batch's placement rows costs about as much as judging them.
FIRST_STEP_FACTOR = 2.0
# A first step expected to take more than this share of the time left is a probe of PROBE_SHARE of the batch,
# which measures what an evaluation costs before a whole batch is spent on it.
PROBE_ABOVE = 0.25
PROBE_SHARE = 0.125


class SearchClock:
    """Budget ``seconds`` of wall-clock time (None: no time limit) counted from the clock's creation.

    Raises ``ValueError`` for a negative or NaN budget.
    """

    def __init__(self, seconds: float | None) -> None:
        if seconds is not None and not seconds >= 0:
            raise ValueError(f"a search budget must be zero or more seconds, got {seconds!r}")
        self.seconds = seconds
        self.began = time.perf_counter()
        self.per_evaluation = 0.0  # seconds one evaluation of the last step took (or the first estimate)
        self._step: tuple[float, int] | None = None  # (when the last step began, its evaluations)

    def elapsed(self) -> float:
        """Seconds since the clock was made."""
        return time.perf_counter() - self.began

    def progress(self) -> float:
        """Share of the budget spent, in [0, 1] (0 without a budget)."""
        if self.seconds is None:
            return 0.0
        return 1.0 if self.seconds == 0 else min(self.elapsed() / self.seconds, 1.0)

    def time_simulation(self, seconds: float) -> None:
        """One simulation took ``seconds``: before the first step, expect an evaluation to take
        :data:`FIRST_STEP_FACTOR` times that."""
        if self._step is None and math.isfinite(seconds) and seconds > 0:
            self.per_evaluation = FIRST_STEP_FACTOR * seconds

    def step(self, wanted: int) -> int:
        """Begin a step that wants ``wanted`` evaluations; returns how many it may make (``wanted`` without a
        budget, else as many as are expected to end within it, 0 meaning stop; a first step expected to take more
        than :data:`PROBE_ABOVE` of the time left makes :data:`PROBE_SHARE` of them). The last step is taken to
        have lasted from its :meth:`step` to this one."""
        now = time.perf_counter()
        if self._step is not None:
            began, evaluations = self._step
            self.per_evaluation = (now - began) / evaluations
        granted = wanted
        if self.seconds is not None:
            left = self.seconds - (now - self.began)
            if left <= 0:
                granted = 0
            elif self.per_evaluation > 0:
                granted = min(wanted, int(left / self.per_evaluation))
                if self._step is None and wanted * self.per_evaluation > PROBE_ABOVE * left:
                    granted = min(granted, max(1, int(wanted * PROBE_SHARE)))  # the first step: a probe
        self._step = (now, granted) if granted > 0 else None
        return granted
