"""Fan independent jobs out: in this process, to local worker processes, or to a Ray cluster.

The experiments, the benchmark and pretraining each split their work into :class:`Job` s (one training run, one
method on one cell, one expert placement), hand them to :func:`run_jobs` with a :class:`FanOut` saying where
they run, and receive each result in the driver as it arrives (``on_done``), which writes it to the run cache:

* ``FanOut()`` (``--workers 1``, the default): one job after another in this process, as before;
* ``FanOut(workers=N)``: N worker processes on this machine (started fresh with ``spawn``, so a driver that has
  loaded torch never forks), each taking the next job when it finishes one;
* ``FanOut(ray="local")`` (``--ray``): a Ray instance started here (``--workers`` CPUs, default all), and
  ``FanOut(ray="auto")`` or ``FanOut(ray="HOST:PORT")`` (``--ray ADDRESS``): a running Ray cluster. Every job is a
  Ray task asking for ``cpus_per_run`` CPUs, so the cluster packs them.

Faults: a worker that dies in the middle of a job (killed, out of memory) loses only that job's work, which is
run again up to ``max_retries`` times (Ray's ``max_retries`` on Ray) and then reported as failed; a job that
raises an exception is reported as failed at once (it would raise again). Failures do not stop the other jobs.
Ctrl-C in the driver stops the workers (terminated, or the Ray tasks cancelled) and raises
:class:`KeyboardInterrupt`; since only the driver writes results, and only whole ones, the cache stays
consistent and a rerun resumes. Workers ignore SIGINT, so a Ctrl-C that a terminal sends to the whole process
group reaches the driver alone.

One progress report covers all jobs: a line per finished job on stdout (done / running / failed, elapsed,
estimated time left), which is what a log keeps, and a bar on stderr when stderr is a terminal.
"""

from __future__ import annotations

import importlib
import math
import os
import signal
import sys
import time
from collections import deque
from collections.abc import Callable, Sequence
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
        if self.ray is not None:
            where = "a local Ray instance" if self.ray == RAY_LOCAL else f"the Ray cluster at {self.ray}"
            return f"{where}, {self.cpus_per_run:g} CPU(s) per run"
        return "this process" if self.workers == 1 else f"{self.workers} worker processes"


IN_PROCESS = FanOut()  # one job after another in this process


def add_fanout_args(parser: Any) -> None:
    """``--workers``, ``--ray [ADDRESS]`` and ``--cpus-per-run`` on an ``argparse`` parser."""
    parser.add_argument("--workers", type=int, default=None, metavar="N",
                        help="run N jobs at a time in worker processes on this machine (default 1: in this "
                             "process); with --ray alone, the local Ray instance's CPUs")
    parser.add_argument("--ray", nargs="?", const=RAY_LOCAL, default=None, metavar="ADDRESS",
                        help="run every job as a Ray task: alone, on a Ray instance started here; 'auto' or an "
                             "address (as 'ray start --head' prints) joins a running cluster (pip install "
                             "'device-placement[ray]')")
    parser.add_argument("--cpus-per-run", type=float, default=1.0, metavar="C",
                        help="CPUs each job asks for (Ray packs jobs by it; torch threads per worker; default 1)")


def fanout_from_args(args: Any) -> FanOut:
    """The :class:`FanOut` of parsed :func:`add_fanout_args` arguments (``ValueError`` naming a bad one)."""
    fanout = FanOut(workers=1 if args.workers is None else args.workers, ray=args.ray,
                    cpus_per_run=args.cpus_per_run)
    if fanout.ray is not None:
        if args.workers is not None and fanout.ray != RAY_LOCAL:
            raise ValueError("--workers with --ray ADDRESS: the cluster decides how many jobs run; give one of them")
        try:
            importlib.import_module("ray")
        except ImportError:
            raise ValueError("--ray needs Ray: pip install 'device-placement[ray]'") from None
    return fanout


# ----------------------------------------------------------------------------------------------- progress

def _clock(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


class JobsProgress:
    """Counts jobs done / running / failed; a line per finished job on stdout, a bar on stderr in a terminal."""

    def __init__(self, total: int, title: str, bar: bool | None = None) -> None:
        self.total, self.title = total, title
        self.done = self.failed = self.running = 0
        self.began = time.perf_counter()
        self._bar: Any = None
        if total and (sys.stderr.isatty() if bar is None else bar):
            from tqdm import tqdm

            self._bar = tqdm(total=total, desc=title, unit="run", file=sys.stderr, leave=False)

    def status(self) -> str:
        elapsed = time.perf_counter() - self.began
        finished = self.done + self.failed
        left = f"~{_clock(elapsed / finished * (self.total - finished))} left" if finished else "time left unknown"
        return (f"{finished}/{self.total} {self.title}: {self.done} done, {self.running} running, {self.failed} "
                f"failed; {_clock(elapsed)} elapsed, {left}")

    def _refresh(self) -> None:
        if self._bar is not None:
            self._bar.n = self.done + self.failed
            self._bar.set_postfix_str(f"running {self.running}, failed {self.failed}", refresh=False)
            self._bar.refresh()

    def started(self, running: int) -> None:
        self.running = running
        self._refresh()

    def finished(self, label: str, text: str, ok: bool, running: int) -> None:
        self.running = running
        if ok:
            self.done += 1
        else:
            self.failed += 1
        line = f"[{self.status()}] {label}: {text}"
        if self._bar is not None:
            self._bar.clear()
        print(line, flush=True)
        self._refresh()

    def note(self, line: str) -> None:
        if self._bar is not None:
            self._bar.clear()
        print(line, flush=True)
        self._refresh()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None


# ------------------------------------------------------------------------------------------------ workers

def _importable(function: Callable[..., Any]) -> Callable[..., Any]:
    """``function`` as its module's importable name: a function of a module run as ``python -m package.module``
    belongs to ``__main__``, which a worker cannot import; the same function of ``package.module`` can be."""
    if getattr(function, "__module__", None) != "__main__":
        return function
    spec = getattr(sys.modules["__main__"], "__spec__", None)
    if spec is None or not spec.name:
        raise ValueError(f"job function {function.__name__!r} lives in a script, not an importable module")
    return getattr(importlib.import_module(spec.name), function.__name__)


def _prepare_worker(cpus: float, preload: tuple[str, ...]) -> None:
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


def _worker_loop(connection: Any, cpus: float, preload: tuple[str, ...]) -> None:
    """A worker process: run the jobs the driver sends until it sends ``None``."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the driver alone answers Ctrl-C
    _prepare_worker(cpus, preload)
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


Outcome = Any  # a job's value, or a Failure
Describe = Callable[[Any], str]
OnDone = Callable[[Job, Any], None]


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
        self.process = context.Process(target=_worker_loop, args=(child, cpus, preload), daemon=True)
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
        import multiprocessing

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
        from multiprocessing.connection import wait

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
                    worker.connection.send((job.key, _importable(job.function), job.args))
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


def _ray_call(function: Callable[..., Any], args: tuple, cpus: float) -> Any:
    _prepare_worker(cpus, ())
    return function(*args)


class RayTasks(JobRunner):
    """Every job a Ray task asking for ``fanout.cpus_per_run`` CPUs, retried ``fanout.max_retries`` times when its
    worker dies; Ray is started here (``ray="local"``, ``workers`` CPUs unless 1) or joined, and shut down at the
    end if started here."""

    def __enter__(self) -> RayTasks:
        import logging

        import ray

        self.started_here = False
        self.dashboard: str | None = None
        if not ray.is_initialized():
            if self.fanout.ray == RAY_LOCAL:
                cpus = None if self.fanout.workers == 1 else self.fanout.workers
                context = ray.init(num_cpus=cpus, logging_level=logging.WARNING)
            else:
                context = ray.init(address=self.fanout.ray, logging_level=logging.WARNING)
            self.started_here = True
            self.dashboard = getattr(context, "dashboard_url", None) or None
        self.capacity = max(1, int(ray.cluster_resources().get("CPU", 1) // self.fanout.cpus_per_run))
        if self.preload:  # one warm-up task per slot: Ray keeps those workers, with the modules imported, for the jobs
            warm = ray.remote(num_cpus=self.fanout.cpus_per_run)(_prepare_worker)
            self._warming = [warm.remote(self.fanout.cpus_per_run, self.preload) for _ in range(self.capacity)]
        return self

    def __exit__(self, *exc: object) -> None:
        import ray

        if self.started_here:
            ray.shutdown()

    def run(self, jobs: Sequence[Job], on_done: OnDone, describe: Describe,
            progress: JobsProgress) -> dict[str, Outcome]:
        import ray

        if self.dashboard:
            progress.note(f"Ray dashboard: http://{self.dashboard}")
            self.dashboard = None
        remote = ray.remote(num_cpus=self.fanout.cpus_per_run, max_retries=self.fanout.max_retries)(_ray_call)
        waiting = {remote.remote(_importable(job.function), job.args, self.fanout.cpus_per_run): job for job in jobs}
        outcomes: dict[str, Outcome] = {}
        try:
            while waiting:
                progress.started(min(self.capacity, len(waiting)))
                ready, _ = ray.wait(list(waiting), num_returns=1, timeout=1.0)
                for reference in ready:
                    job = waiting.pop(reference)
                    running = min(self.capacity, len(waiting))
                    try:
                        value = ray.get(reference)
                    except ray.exceptions.RayTaskError as error:
                        cause = error.cause if error.cause is not None else error
                        outcomes[job.key] = Failure(f"{type(cause).__name__}: {cause}")
                    except ray.exceptions.RayError as error:  # the worker died, more times than max_retries
                        outcomes[job.key] = Failure(f"{type(error).__name__}: {str(error).splitlines()[0]}")
                    else:
                        on_done(job, value)
                        outcomes[job.key] = value
                        progress.finished(job.label, describe(value), True, running)
                        continue
                    progress.finished(job.label, f"failed: {outcomes[job.key].message}", False, running)
        except BaseException:
            for reference in waiting:
                ray.cancel(reference, force=True)
            raise
        return outcomes


def open_runner(fanout: FanOut = IN_PROCESS, preload: tuple[str, ...] = ()) -> JobRunner:
    """The runner for ``fanout`` (use it as a context manager); its workers import ``preload`` as they start."""
    if fanout.ray is not None:
        return RayTasks(fanout, preload)
    if fanout.workers > 1:
        return WorkerProcesses(fanout, preload)
    return JobRunner(fanout, preload)


def run_jobs(jobs: Sequence[Job], where: FanOut | JobRunner = IN_PROCESS, on_done: OnDone | None = None,
             describe: Describe = lambda value: "done", title: str = "runs",
             progress: JobsProgress | None = None) -> dict[str, Outcome]:
    """Run every job where ``where`` says (a :class:`FanOut`, whose runner is opened for this call, or an open
    :class:`JobRunner`); ``{job key: its value, or a Failure}``.

    ``on_done(job, value)`` runs in this process for every job that finishes (write the result there: that keeps
    one writer per cache); ``describe(value)`` is the text of its progress line. Raises ``KeyboardInterrupt``
    after stopping the workers when interrupted."""
    keys = [job.key for job in jobs]
    if len(set(keys)) != len(keys):
        raise ValueError("run_jobs: two jobs share a key")
    if not jobs:
        return {}
    on_done = on_done or (lambda job, value: None)
    progress = progress or JobsProgress(len(jobs), title)
    try:
        if isinstance(where, FanOut):
            with open_runner(where) as runner:
                return runner.run(jobs, on_done, describe, progress)
        return where.run(jobs, on_done, describe, progress)
    finally:
        progress.close()


def failures(outcomes: dict[str, Outcome]) -> dict[str, str]:
    """``{job key: why}`` of the jobs that failed."""
    return {key: value.message for key, value in outcomes.items() if isinstance(value, Failure)}
