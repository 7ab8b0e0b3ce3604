"""Fan independent jobs out: in this process, to local worker processes, or to a Ray cluster.

The experiments, the benchmark and pretraining each split their work into :class:`Job` s (one training run, one
method on one cell, one expert placement), hand them to :func:`run_jobs` with a :class:`FanOut` saying where
they run, and receive each result in the driver as it arrives (``on_done``), which writes it to the run cache:

* ``FanOut()`` (``--workers 1``, the default): one job after another in this process;
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
import os
import sys
from collections.abc import Sequence
from typing import Any

from .job import IN_PROCESS, RAY_LOCAL, Describe, Failure, FanOut, Job, OnDone, Outcome
from .progress import JobsProgress
from .ray_tasks import RayTasks
from .workers import JobRunner, WorkerProcesses

__all__ = ["IN_PROCESS", "RAY_LOCAL", "Failure", "FanOut", "Job", "JobRunner", "JobsProgress", "RayTasks",
           "WorkerProcesses", "add_fanout_args", "failures", "fanout_from_args", "open_runner", "run_jobs"]


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
    cores = os.cpu_count() or 1
    if fanout.ray is None and fanout.workers > cores:  # more workers than cores only share the cores (and memory)
        print(f"notice: --workers {fanout.workers} is more than this machine's {cores} cores; running {cores}",
              file=sys.stderr)
        fanout = FanOut(workers=cores, cpus_per_run=fanout.cpus_per_run, max_retries=fanout.max_retries)
    if fanout.ray is not None:
        if args.workers is not None and fanout.ray != RAY_LOCAL:
            raise ValueError("--workers with --ray ADDRESS: the cluster decides how many jobs run; give one of them")
        try:
            importlib.import_module("ray")
        except ImportError:
            raise ValueError("--ray needs Ray: pip install 'device-placement[ray]'") from None
    return fanout


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
