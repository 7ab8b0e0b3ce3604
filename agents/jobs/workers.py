"""Where jobs run on this machine: :class:`JobRunner` (in this process, one after another) and
:class:`WorkerProcesses` (``spawn``-ed worker processes that each take the next job when they finish one)."""

from __future__ import annotations

import importlib
import multiprocessing
import os
import signal
import sys
from collections import deque
from collections.abc import Callable, Sequence
from multiprocessing.connection import wait
from typing import Any

from placement_env.child_processes import exit_with_parent

from .job import Describe, Failure, FanOut, Job, OnDone, Outcome
from .progress import JobsProgress


def importable(function: Callable[..., Any]) -> Callable[..., Any]:
    """``function`` as its module's importable name: a function of a module run as ``python -m package.module``
    belongs to ``__main__``, which a worker cannot import; the same function of ``package.module`` can be."""
    if getattr(function, "__module__", None) != "__main__":
        return function
    spec = getattr(sys.modules["__main__"], "__spec__", None)
    if spec is None or not spec.name:
        raise ValueError(f"job function {function.__name__!r} lives in a script, not an importable module")
    return getattr(importlib.import_module(spec.name), function.__name__)


def prepare_worker(cpus: float, preload: tuple[str, ...]) -> None:
    """A worker's start: torch (when the jobs use it) gets as many threads as a job has CPUs, and the jobs'
    modules are imported now, while the driver is still busy, rather than with the first job."""
    os.environ["OMP_NUM_THREADS"] = str(max(1, int(cpus)))
    try:
        import torch
    except ImportError:  # jobs that need no torch, on a machine without it
        pass
    else:
        torch.set_num_threads(max(1, int(cpus)))
    for module in preload:
        importlib.import_module(module)


def _worker_loop(connection: Any, cpus: float, preload: tuple[str, ...], parent: int) -> None:
    """A worker process: run the jobs the driver sends until it sends ``None``; end within
    :data:`PARENT_POLL_SECONDS` of the driver's death, whatever it is doing."""
    exit_with_parent(parent)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the driver alone answers Ctrl-C ...
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # ... and SIGTERM, which ends a worker as it comes
    prepare_worker(cpus, preload)
    while True:
        message = connection.recv()
        if message is None:
            return
        key, function, args = message
        try:
            value = function(*args)
        except BaseException as error:  # noqa: BLE001 -- reported to the driver, which decides
            connection.send((key, False, f"{type(error).__name__}: {error}"))
        else:
            connection.send((key, True, value))


class JobRunner:
    """Runs jobs where a :class:`FanOut` says; a context manager that holds its workers (or its Ray connection)
    from ``__enter__`` to ``__exit__``, across any number of :meth:`run` calls. Open it early
    (:func:`open_runner`) and the workers start while the driver still checks its input."""

    def __init__(self, fanout: FanOut, preload: tuple[str, ...] = ()) -> None:
        self.fanout, self.preload = fanout, preload

    def __enter__(self) -> JobRunner:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def run(self, jobs: Sequence[Job], on_done: OnDone, describe: Describe,
            progress: JobsProgress) -> dict[str, Outcome]:
        """Every job in this process, one after another."""
        outcomes: dict[str, Outcome] = {}
        for job in jobs:
            progress.started(1)
            try:
                value = job.function(*job.args)
            except KeyboardInterrupt:
                raise
            except Exception as error:  # noqa: BLE001 -- reported as the job's failure; the others go on
                outcomes[job.key] = Failure(f"{type(error).__name__}: {error}")
                progress.finished(job.label, f"failed: {outcomes[job.key].message}", False, 0)
                continue
            on_done(job, value)
            outcomes[job.key] = value
            progress.finished(job.label, describe(value), True, 0)
        return outcomes


class _Worker:
    def __init__(self, context: Any, cpus: float, preload: tuple[str, ...]) -> None:
        self.connection, child = context.Pipe()
        self.process = context.Process(target=_worker_loop, args=(child, cpus, preload, os.getpid()), daemon=True)
        self.process.start()
        child.close()
        self.job: Job | None = None

    def stop(self, wait: float = 5.0) -> None:
        if self.process.is_alive():
            self.process.terminate()
            self.process.join(wait)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()
        self.connection.close()


class WorkerProcesses(JobRunner):
    """``fanout.workers`` processes on this machine (``spawn``: a driver that has loaded torch never forks)."""

    def __enter__(self) -> WorkerProcesses:

        self._context = multiprocessing.get_context("spawn")
        self.workers = [self._start() for _ in range(self.fanout.workers)]
        return self

    def _start(self) -> _Worker:
        return _Worker(self._context, self.fanout.cpus_per_run, self.preload)

    def __exit__(self, *exc: object) -> None:
        for worker in self.workers:
            if worker.job is None and worker.process.is_alive():
                try:
                    worker.connection.send(None)
                except OSError:
                    pass
        for worker in self.workers:
            worker.stop(wait=5.0 if worker.job is None else 1.0)
        self.workers = []

    def run(self, jobs: Sequence[Job], on_done: OnDone, describe: Describe,
            progress: JobsProgress) -> dict[str, Outcome]:
        """Every job in the workers, each taking the next when it finishes one; ``{job key: its value, or a Failure}``.
"""

        idle = [w for w in self.workers if w.job is None][len(jobs):]
        if idle and len(jobs) < len(self.workers):  # fewer jobs than workers: the idle ones end, freeing memory
            progress.note(f"notice: {len(jobs)} job(s) for {len(self.workers)} workers; "
                          f"{len(self.workers) - len(idle)} worker(s) run them")
            for worker in idle:
                worker.connection.send(None)
                worker.stop()
            self.workers = [w for w in self.workers if w not in idle]
        pending = deque(jobs)
        attempts = {job.key: 0 for job in jobs}
        outcomes: dict[str, Outcome] = {}
        workers = self.workers

        def running() -> int:
            return min(len(workers), len(pending) + sum(w.job is not None for w in workers))

        while pending or any(w.job is not None for w in workers):
            for worker in workers:
                if worker.job is None and pending:
                    job = pending.popleft()
                    attempts[job.key] += 1
                    worker.job = job
                    worker.connection.send((job.key, importable(job.function), job.args))
            busy = [w for w in workers if w.job is not None]
            progress.started(len(busy))
            ready = set(wait([w.connection for w in busy] + [w.process.sentinel for w in busy], timeout=1.0))
            for worker in busy:
                current = worker.job
                assert current is not None
                job = current
                if worker.connection in ready:
                    try:
                        _, ok, value = worker.connection.recv()
                    except (EOFError, OSError):  # it died while sending: as if it died while working
                        pass
                    else:
                        worker.job = None
                        if ok:
                            on_done(job, value)
                            outcomes[job.key] = value
                            progress.finished(job.label, describe(value), True, running())
                        else:
                            outcomes[job.key] = Failure(value)
                            progress.finished(job.label, f"failed: {value}", False, running())
                        continue
                if worker.process.sentinel in ready or not worker.process.is_alive():
                    worker.process.join(1.0)
                    why = f"its worker process died (exit code {worker.process.exitcode})"
                    worker.job = None
                    worker.stop()
                    workers[workers.index(worker)] = self._start()
                    if attempts[job.key] <= self.fanout.max_retries:
                        progress.note(f"{job.label}: {why}; running it again "
                                      f"(attempt {attempts[job.key] + 1} of {self.fanout.max_retries + 1})")
                        pending.appendleft(job)
                    else:
                        outcomes[job.key] = Failure(why)
                        progress.finished(job.label, f"failed: {why}", False, running())
        return outcomes

