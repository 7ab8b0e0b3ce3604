"""Local devices as worker processes: :func:`run_on_local_workers`.

Each of ``num_workers`` processes (``multiprocessing`` *spawn*, so nothing of the parent's threads or torch state
is inherited) runs with one CPU thread (``OMP_NUM_THREADS=1``, ``torch.set_num_threads(1)``) and joins a
``torch.distributed`` process group over the *gloo* backend on the loopback interface; a tensor that crosses
devices is really sent between processes (``isend`` / ``recv``, through gloo's TCP transport). Gloo is chosen
over shared memory because it is what a CPU ``torch.distributed`` program uses, and it needs no code of ours to
be correct. The workers are what :func:`~placement_env.runtime.measured_step.measure_step` runs a placement on
and what :func:`~placement_env.runtime.local_cluster.local_cluster` measures.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
import signal
import socket
import time
import traceback
import warnings
from collections.abc import Callable
from typing import Any

from placement_env.child_processes import exit_with_parent

WORKER_TIMEOUT_S = 600.0
"""A worker that has not reported after this long is killed and the run fails (a hang is an error)."""


def free_port() -> int:
    """A TCP port free on the loopback interface now (for a process group's rendezvous)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _entry(rank: int, world: int, port: int, job: Callable[..., Any], payload: Any, results: Any,
           parent: int, backend: str) -> None:
    exit_with_parent(parent)  # no worker outlives its driver, even one killed by SIGKILL
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the driver's to answer: it ends the workers
    try:
        import torch
        import torch.distributed as dist

        torch.set_num_threads(1)
        dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
        try:
            results.put((rank, True, job(rank, world, payload)))
        finally:
            dist.destroy_process_group()
    except BaseException as error:  # noqa: BLE001 - reported to the parent, which raises it
        results.put((rank, False, f"{type(error).__name__}: {error}\n{traceback.format_exc(limit=6)}"))


def check_local_workers(num_workers: int) -> None:
    """Warn when ``num_workers`` one-thread workers outnumber this machine's cores (their timings share cores)."""
    cores = os.cpu_count() or 1
    if num_workers > cores:
        warnings.warn(f"{num_workers} local devices on {cores} core(s): the workers share cores, so their times "
                      "include each other's work", RuntimeWarning, stacklevel=3)


def run_on_local_workers(num_workers: int, job: Callable[[int, int, Any], Any], payload: Any,
                         backend: str = "gloo") -> list[Any]:
    """``[job(rank, num_workers, payload) for rank in range(num_workers)]``, each call in its own worker process
    (see the module docstring), the process group (``backend``: ``"gloo"``, or ``"nccl"`` for one process per
    CUDA device) initialised around it. Every worker ends within a second of the driver's death
    (:func:`~placement_env.child_processes.exit_with_parent`), ignores Ctrl-C (the driver answers it and ends
    them) and is killed when the call ends with an error.

    ``job`` must be a module-level function and ``payload`` picklable (spawned processes import them).

    Raises:
        RuntimeError: a worker failed (its error and the last frames of its traceback) or did not report within
            :data:`WORKER_TIMEOUT_S`.
    """
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    port = free_port()
    saved = os.environ.get("OMP_NUM_THREADS")
    os.environ["OMP_NUM_THREADS"] = "1"  # the spawned interpreters read it when torch loads
    procs: list[Any] = []
    try:
        for rank in range(num_workers):
            procs.append(ctx.Process(target=_entry, args=(rank, num_workers, port, job, payload, results,
                                                          os.getpid(), backend), daemon=True))
            procs[-1].start()
    finally:
        if saved is None:
            os.environ.pop("OMP_NUM_THREADS", None)
        else:
            os.environ["OMP_NUM_THREADS"] = saved
    out: dict[int, Any] = {}
    finished = False
    try:
        waited = 0.0
        while len(out) < num_workers:
            try:
                rank, ok, value = results.get(timeout=1.0)
            except queue.Empty:
                waited += 1.0
                dead = _dead(procs, out)
                if dead is not None:
                    raise RuntimeError(dead) from None
                if waited >= WORKER_TIMEOUT_S:
                    raise RuntimeError(f"local workers did not report within {WORKER_TIMEOUT_S:g} s") from None
                continue
            if not ok:  # a worker killed from outside makes the others fail on its closed connections: blame it
                deadline = time.monotonic() + DEATH_GRACE_S
                while time.monotonic() < deadline and _dead(procs, out) is None:
                    time.sleep(0.05)
                dead = _dead(procs, out)
                raise RuntimeError(dead if dead is not None else f"local worker {rank} failed: {value}")
            out[rank] = value
        finished = True
    finally:
        for p in procs:
            if finished:
                p.join(timeout=5)
            if p.is_alive():
                p.kill()
                p.join()
    return [out[rank] for rank in range(num_workers)]


DEATH_GRACE_S = 1.0
"""After a worker reports a failure, how long the driver waits to see whether another worker died first."""


def _dead(procs: list[Any], reported: dict[int, Any]) -> str | None:
    """The first worker that ended without reporting, said as an error; None while none has."""
    for rank, p in enumerate(procs):
        if rank not in reported and p.exitcode not in (None, 0):
            how = f"killed by signal {-p.exitcode}" if p.exitcode < 0 else f"exit code {p.exitcode}"
            return f"local worker {rank} died ({how})"
    return None
