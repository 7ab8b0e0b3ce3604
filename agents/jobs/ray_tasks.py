"""Jobs as Ray tasks: :class:`RayTasks`, on a Ray instance started here or on a running cluster."""

from __future__ import annotations

import logging
import subprocess
from collections.abc import Callable, Sequence
from typing import Any

from .job import RAY_LOCAL, Describe, Failure, Job, OnDone, Outcome
from .progress import JobsProgress
from .reaper import start_reaper
from .workers import JobRunner, importable, prepare_worker


def _ray_call(function: Callable[..., Any], args: tuple, cpus: float) -> Any:
    prepare_worker(cpus, ())
    return function(*args)


class RayTasks(JobRunner):
    """Every job a Ray task asking for ``fanout.cpus_per_run`` CPUs, retried ``fanout.max_retries`` times when its
    worker dies; Ray is started here (``ray="local"``, ``workers`` CPUs unless 1) or joined, and shut down at the
    end if started here (a local instance's processes also when this process is killed: :mod:`agents.jobs.reaper`)."""

    def __enter__(self) -> RayTasks:

        import ray

        self.started_here = False
        self.dashboard: str | None = None
        self.reaper: subprocess.Popen | None = None
        if not ray.is_initialized():
            if self.fanout.ray == RAY_LOCAL:
                cpus = None if self.fanout.workers == 1 else self.fanout.workers
                self.reaper = start_reaper()  # Ray's processes end with this one, even when it is killed
                context = ray.init(num_cpus=cpus, logging_level=logging.WARNING)
            else:
                context = ray.init(address=self.fanout.ray, logging_level=logging.WARNING)
            self.started_here = True
            self.dashboard = getattr(context, "dashboard_url", None) or None
        self.capacity = max(1, int(ray.cluster_resources().get("CPU", 1) // self.fanout.cpus_per_run))
        if self.preload:  # one warm-up task per slot: Ray keeps those workers, with the modules imported, for the jobs
            warm = ray.remote(num_cpus=self.fanout.cpus_per_run)(prepare_worker)
            self._warming = [warm.remote(self.fanout.cpus_per_run, self.preload) for _ in range(self.capacity)]
        return self

    def __exit__(self, *exc: object) -> None:
        import ray

        if self.started_here:
            ray.shutdown()
        if self.reaper is not None:
            self.reaper.terminate()
            self.reaper.wait()

    def run(self, jobs: Sequence[Job], on_done: OnDone, describe: Describe,
            progress: JobsProgress) -> dict[str, Outcome]:
        """Every job a Ray task; ``{job key: its value, or a Failure}`` (the tasks are cancelled when interrupted)."""
        import ray

        if self.dashboard:
            progress.note(f"Ray dashboard: http://{self.dashboard}")
            self.dashboard = None
        remote = ray.remote(num_cpus=self.fanout.cpus_per_run, max_retries=self.fanout.max_retries)(_ray_call)
        waiting = {remote.remote(importable(job.function), job.args, self.fanout.cpus_per_run): job for job in jobs}
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
            # a Ray started here ends with its workers in __exit__ (ray.shutdown); cancelling its tasks first races
            # their completion, which Ray answers by aborting the driver (task_manager.cc "Tried to complete task
            # that was not pending", ray-project/ray#54738); a cluster's workers outlive us, so those are cancelled
            if not self.started_here:
                for reference in waiting:
                    ray.cancel(reference, force=True)
            raise
        return outcomes

