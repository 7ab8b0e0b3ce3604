"""What a run tells while it trains: a bar in a terminal, a line every few seconds elsewhere.

A background thread reports from the run's clock and tracker, so the report keeps coming while an update runs
(torch releases the interpreter lock in its kernels). The bar's total is the budget in seconds, the limit that
stops a run in practice; the steps and their limit, and the best makespan so far, ride beside it.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from typing import Any

PROGRESS_MODES = ("bar", "lines", "off")


class ProgressReport:
    """``mode``: ``"bar"`` (tqdm on stderr, refreshed every second), ``"lines"`` (a line on stderr every
    ``every`` seconds), or ``"off"``. ``elapsed`` gives the search seconds so far, ``steps`` the steps taken,
    ``best`` the best makespan so far (seconds, None before the first); ``step_name`` says what a step is
    (``environment steps``, or ``proposals`` for the guided search) and ``step_limit`` is ``--timesteps``."""

    def __init__(self, mode: str, budget_seconds: float, step_limit: int, elapsed: Callable[[], float],
                 steps: Callable[[], int], best: Callable[[], float | None], every: float = 5.0,
                 step_name: str = "environment steps") -> None:
        if mode not in PROGRESS_MODES:
            raise ValueError(f"progress must be one of {', '.join(PROGRESS_MODES)}, got {mode!r}")
        self.mode, self.budget, self.step_limit = mode, budget_seconds, step_limit
        self.elapsed, self.steps, self.best, self.step_name = elapsed, steps, best, step_name
        self.every = 1.0 if mode == "bar" else every
        self._done = threading.Event()
        self._thread: threading.Thread | None = None
        self._bar: Any = None

    def text(self) -> str:
        """The steps, their limit and the best makespan so far, in words."""
        best = self.best()
        shown = "none yet" if best is None else f"{best * 1e3:.3f} ms"
        return f"{self.steps():,} {self.step_name} (stops at --timesteps {self.step_limit:,}), best {shown}"

    def _report(self) -> None:
        if self._bar is not None:
            self._bar.n = min(self.budget, round(self.elapsed(), 1))
            self._bar.set_postfix_str(self.text(), refresh=False)
            self._bar.refresh()
        else:
            print(f"training: {self.elapsed():.0f} s of {self.budget:g} s, {self.text()}", file=sys.stderr,
                  flush=True)

    def _loop(self) -> None:
        while not self._done.wait(self.every):
            self._report()

    def __enter__(self) -> ProgressReport:
        if self.mode == "off":
            return self
        if self.mode == "bar":
            from tqdm import tqdm

            self._bar = tqdm(total=self.budget, unit="s", desc="training", file=sys.stderr,
                             bar_format="{desc}: {percentage:3.0f}%|{bar}| {n:.0f}/{total:g} s {postfix}")
        self._thread = threading.Thread(target=self._loop, name="progress", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._thread is None:
            return
        self._done.set()
        self._thread.join()
        self._report()
        if self._bar is not None:
            self._bar.close()
