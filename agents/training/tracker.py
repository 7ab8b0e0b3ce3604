"""The best placement each graph has had so far, and the learning curve: :class:`BestTracker`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np


class BestTracker:
    """The best placement of each graph seen in any episode (feasible first), when it was first seen (seconds
    of search), and the learning curve: the best makespans so far (seconds), averaged over the graphs seen,
    against environment steps."""

    def __init__(self) -> None:
        self.best: dict[str, tuple[tuple[bool, float], list[int]]] = {}
        self.found_at: dict[str, float] = {}  # graph -> search seconds when its best was first seen
        self.curve: list[tuple[int, float]] = []  # (environment steps, seconds)
        self.elapsed: Callable[[], float] = lambda: 0.0  # search seconds so far (SearchClock.elapsed)
        self.resumed_seconds = 0.0  # search seconds of the runs this one resumes
        self.step: list[Any] | None = None  # [micro-batches, schedule] the makespans are of (None: not recorded)

    def update(self, info: dict[str, Any], steps: int) -> None:
        """Take in one environment step's ``info`` (``graph``, ``best_makespan``, ``best_oom``,
        ``best_placement``) after ``steps`` steps in all."""
        key = (bool(info["best_oom"]), float(info["best_makespan"]))
        name = info["graph"]
        if info.get("best_placement") is not None and (name not in self.best or key < self.best[name][0]):
            self.best[name] = (key, np.asarray(info["best_placement"]).tolist())
            self.found_at[name] = self.elapsed()
        if not self.best:
            return
        level = float(np.mean([k[1] for k, _ in self.best.values()]))
        if not self.curve or self.curve[-1][1] != level or steps - self.curve[-1][0] >= 64:
            self.curve.append((steps, level))

    def best_makespan(self) -> float | None:
        """The best makespan so far (seconds; the mean over graphs for a suite), None before any."""
        return self.curve[-1][1] if self.curve else None

    def state(self) -> dict[str, Any]:
        """Plain data for ``tracker.json``."""
        return {"best": {name: [list(key), placement] for name, (key, placement) in self.best.items()},
                "found_at": self.found_at, "elapsed": self.elapsed(), "curve": self.curve, "step": self.step}

    def load(self, state: dict[str, Any]) -> None:
        """Continue from :meth:`state` of an earlier run."""
        self.best = {name: ((bool(k[0]), float(k[1])), p) for name, (k, p) in state["best"].items()}
        self.found_at = dict(state.get("found_at", {}))
        self.resumed_seconds = float(state.get("elapsed", 0.0))
        self.curve = [(int(s), float(v)) for s, v in state["curve"]]
        self.step = state.get("step")
