"""What a fan-out is made of: :class:`Job` (a unit of work), :class:`Failure` (a job that did not finish) and
:class:`FanOut` (where jobs run). Plain data: no process, no Ray, nothing started."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

RAY_LOCAL = "local"  # --ray with no address: start a Ray instance on this machine


@dataclass(frozen=True)
class Job:
    """One unit of work: ``function(*args)``, run wherever the :class:`FanOut` says. ``function`` must be a
    module-level function (workers import it by name) and ``args`` picklable; ``key`` names the job in the cache
    and the report, ``label`` in the progress lines."""

    key: str
    label: str
    function: Callable[..., Any]
    args: tuple = ()


@dataclass(frozen=True)
class Failure:
    """A job that did not finish: ``message`` says why (the exception, or how its worker died)."""

    message: str


@dataclass(frozen=True)
class FanOut:
    """Where jobs run: ``workers`` processes (1: in this process), or Ray when ``ray`` is given (``"local"``,
    ``"auto"`` or an address); ``cpus_per_run`` CPUs per job (Ray's request, and each worker's torch threads);
    ``max_retries`` reruns of a job whose worker died."""

    workers: int = 1
    ray: str | None = None
    cpus_per_run: float = 1.0
    max_retries: int = 2

    def __post_init__(self) -> None:
        if isinstance(self.workers, bool) or not isinstance(self.workers, int) or self.workers < 1:
            raise ValueError(f"--workers must be a whole number >= 1, got {self.workers!r}")
        if not (isinstance(self.cpus_per_run, (int, float)) and 0 < self.cpus_per_run < math.inf):
            raise ValueError(f"--cpus-per-run must be positive and finite, got {self.cpus_per_run!r}")
        if self.ray is not None and not str(self.ray).strip():
            raise ValueError("--ray: give an address (HOST:PORT or auto), or nothing for a local instance")
        if isinstance(self.max_retries, bool) or not isinstance(self.max_retries, int) or self.max_retries < 0:
            raise ValueError(f"max_retries must be a whole number >= 0, got {self.max_retries!r}")

    def describe(self) -> str:
        """Where the jobs run, in words (for the progress report)."""
        if self.ray is not None:
            where = "a local Ray instance" if self.ray == RAY_LOCAL else f"the Ray cluster at {self.ray}"
            return f"{where}, {self.cpus_per_run:g} CPU(s) per run"
        return "this process" if self.workers == 1 else f"{self.workers} worker processes"


IN_PROCESS = FanOut()  # one job after another in this process


Outcome = Any  # a job's value, or a Failure
Describe = Callable[[Any], str]
OnDone = Callable[[Job, Any], None]
