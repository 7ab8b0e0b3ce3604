"""The search clock and the stop request: when a run's budget is spent, and Ctrl-C."""

from __future__ import annotations

import signal
import sys
import time
from types import FrameType
from typing import Any


class SearchClock:
    """Search seconds: the wall time of training, from its start (environments and agent built) to its end,
    plus the search seconds of the runs this one resumes. ``budget_seconds`` bounds this run's training;
    it is checked after every environment step, and before an update that would not end within it (see
    :class:`agents.training.run.TrackBest`)."""

    def __init__(self, budget_seconds: float, resumed_seconds: float = 0.0) -> None:
        self.budget_seconds = budget_seconds
        self.resumed_seconds = resumed_seconds
        self._start: float | None = None
        self._stop: float | None = None

    def start(self) -> None:
        """Training starts now."""
        self._start = time.perf_counter()

    def stop(self) -> None:
        """Training ends now."""
        self._stop = time.perf_counter()

    def elapsed(self) -> float:
        """Search seconds so far."""
        if self._start is None:
            return self.resumed_seconds
        end = time.perf_counter() if self._stop is None else self._stop
        return self.resumed_seconds + end - self._start

    def remaining(self) -> float:
        """Seconds of this run's budget left (negative once overrun; the whole budget before the start)."""
        if self._start is None:
            return self.budget_seconds
        end = time.perf_counter() if self._stop is None else self._stop
        return self.budget_seconds - (end - self._start)

    def expired(self) -> bool:
        """Whether this run's training has used up its budget."""
        return self._start is not None and time.perf_counter() - self._start >= self.budget_seconds


class StopOnCtrlC:
    """While active, Ctrl-C (SIGINT) or SIGTERM asks training to stop at the next step (``requested``;
    ``terminated`` says it was SIGTERM), so the run still ends with all its outputs and checkpoint; a second
    signal interrupts at once (``KeyboardInterrupt``). Outside the main thread (where signals cannot be caught)
    it does nothing."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self.requested = False
        self.terminated = False
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> StopOnCtrlC:
        try:
            self._previous = {number: signal.signal(number, self._handle) for number in self.SIGNALS}
        except ValueError:  # not the main thread
            self._previous = {}
        return self

    def __exit__(self, *exc: object) -> None:
        for number, previous in self._previous.items():
            signal.signal(number, previous)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True
        self.terminated = signum == signal.SIGTERM
        word = "terminated" if self.terminated else "interrupted"
        print(f"{word}: stopping after this step, keeping the best placement found so far", file=sys.stderr)


def ignore_ctrl_c(env: Any) -> Any:
    """``make_vec_env`` wrapper for SubprocVecEnv workers: Ctrl-C is the main process's to handle."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    return env
