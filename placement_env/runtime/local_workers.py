"""Local devices as worker processes: :func:`run_on_local_workers`.

Each of ``num_workers`` processes (``multiprocessing`` *forkserver* where the platform has it, *spawn*
elsewhere: nothing of the driver's threads or torch state is inherited) runs with one CPU thread
(``OMP_NUM_THREADS=1``, ``torch.set_num_threads(1)``) and the driver's environment as it is at the call, and joins a
``torch.distributed`` process group over the *gloo* backend on the loopback interface; a tensor that crosses
devices is really sent between processes (``isend`` / ``recv``, through gloo's TCP transport). Gloo is chosen
over shared memory because it is what a CPU ``torch.distributed`` program uses, and it needs no code of ours to
be correct. The fork server is started once per driver process, with torch and the first job's module imported
(:func:`worker_context`), so a worker starts without importing torch again (seconds a worker; a model library
such as transformers as many again: docs/runtime.md measures it). The workers are what
:func:`~placement_env.runtime.measured_step.measure_step` runs a placement on and what
:func:`~placement_env.runtime.local_cluster.local_cluster` measures.
"""

from __future__ import annotations

import ast
import multiprocessing as mp
import os
import queue
import signal
import socket
import sys
import time
import traceback
import warnings
from collections.abc import Callable
from pathlib import Path
from types import CodeType
from typing import Any

from placement_env.checks import first_line
from placement_env.child_processes import exit_with_parent
from placement_env.stops import ignore_interrupts

WORKER_SILENCE_S = 600.0
"""A worker silent this long (no :func:`heartbeat`, no result) is taken as stalled: every worker is killed and the
run fails naming it and what it last said. A run may last any time as long as its workers speak; the environment
variable ``PLACEMENT_WORKER_SILENCE_S`` sets another bound (seconds)."""

_beats: Any = None  # in a worker: the queue its heartbeats go to
JOINED = "joined the process group"
STARTUP_S = 600.0
"""How long a worker may take to start (import torch, join the process group) before it is taken as stalled: a
busy machine's start-up is no stall, so the silence bound applies only from a worker's first word."""


def heartbeat(what: str) -> None:
    """Say, from inside a worker's job, that it is alive and doing ``what`` (``"step 3"``): the driver resets the
    worker's silence clock (:data:`WORKER_SILENCE_S`) and names ``what`` if it then stalls. Does nothing outside a
    worker."""
    if _beats is not None:
        _beats.put((_rank, None, what))


_rank = -1


def silence_bound() -> float:
    """:data:`WORKER_SILENCE_S`, or the environment's ``PLACEMENT_WORKER_SILENCE_S``; ``ValueError`` naming a bad
    value."""
    text = os.environ.get("PLACEMENT_WORKER_SILENCE_S")
    if text is None:
        return WORKER_SILENCE_S
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise ValueError(f"PLACEMENT_WORKER_SILENCE_S must be a number of seconds > 0, got {text!r}")
    return value


def free_port() -> int:
    """A TCP port free on the loopback interface now (for a process group's rendezvous)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _entry(rank: int, world: int, port: int, job: Callable[..., Any], payload: Any, results: Any,
           backend: str, environ: dict[str, str]) -> None:
    global _beats, _rank
    exit_with_parent()  # no worker outlives its driver, even one killed by SIGKILL
    os.environ.clear()  # the driver's environment now (a fork server's children would have the server's)
    os.environ.update(environ)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the driver's to answer: it ends the workers
    _unblock_stops()  # blocked since the driver started this worker: a Ctrl-C meanwhile is dropped, SIGTERM ends it
    _beats, _rank = results, rank
    try:
        import torch
        import torch.distributed as dist

        torch.set_num_threads(1)
        dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
        heartbeat(JOINED)  # from here on the silence bound applies; before, the start-up bound
        try:
            results.put((rank, True, job(rank, world, payload)))
        finally:
            dist.destroy_process_group()
    except BaseException as error:  # noqa: BLE001 - reported to the parent, which raises it
        # the first line says what went wrong (torch's messages may begin with a blank line); the frames follow
        results.put((rank, False, f"{type(error).__name__}: {first_line(error)}\n{traceback.format_exc(limit=6)}"))


def check_main_guard() -> None:
    """``ValueError`` when this call comes from the top level of the ``__main__`` script (or ``-m`` module): the
    workers (or their fork server) import it again, so they would start workers of their own and die; the message
    says what to add."""
    main = sys.modules.get("__main__")
    if main is None or not (getattr(main, "__file__", None) or getattr(main, "__spec__", None)):
        return  # python -c, an interactive session, a notebook: nothing the workers would import again
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_globals is vars(main) and frame.f_code.co_name == "<module>" \
                and not _under_main_guard(getattr(main, "__file__", None), frame.f_lineno, frame.f_code):
            where = getattr(main, "__file__", None) or main.__spec__.name  # type: ignore[union-attr]
            raise ValueError(f"local workers are started from the top level of {where} (line {frame.f_lineno}): "
                             "each worker imports that script again and would start workers of its own. Put the "
                             "call under 'if __name__ == \"__main__\":' (docs/runtime.md, local workers)")
        frame = frame.f_back  # type: ignore[assignment]


def _under_main_guard(path: str | None, line: int, running: CodeType | None = None) -> bool:
    """Whether ``line`` of the script ``path`` lies in an ``if __name__ == "__main__":`` block (True when the
    script cannot be read, or when ``running``, the code of the script as it runs, is not what the file on disk
    compiles to now: an edit since it started moved its lines, so nothing is claimed)."""
    try:
        source = Path(path).read_text() if path else None
        tree = ast.parse(source) if source is not None else None
        if tree is not None and running is not None:
            now = compile(tree, path or "<main>", "exec", dont_inherit=True)
            if now.co_code != running.co_code or list(now.co_lines()) != list(running.co_lines()):
                return True
    except (OSError, SyntaxError, ValueError):
        return True
    if tree is None:
        return True
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Compare) and node.lineno <= line <= (
                node.end_lineno or node.lineno):
            names = [node.test.left, *node.test.comparators]
            if any(isinstance(n, ast.Name) and n.id == "__name__" for n in names) and any(
                    isinstance(n, ast.Constant) and n.value == "__main__" for n in names):
                return True
    return False


WORKERS_A_CORE = 4
WORKER_BYTES = 512 * 2**20
"""What one local worker holds at least (an interpreter with torch and its process group: about 480 MB)."""


def max_local_workers() -> int:
    """The most local workers this machine runs: :data:`WORKERS_A_CORE` a core, at least 8, and no more than its
    memory holds at :data:`WORKER_BYTES` each."""
    try:
        memory = int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        memory = 16 << 30
    return max(1, min(max(8, WORKERS_A_CORE * (os.cpu_count() or 1)), memory // WORKER_BYTES))


def check_local_workers(num_workers: int) -> None:
    """``ValueError`` when ``num_workers`` is more than this machine runs (:func:`max_local_workers`); a warning
    when they outnumber its cores (their timings share cores)."""
    cores = os.cpu_count() or 1
    most = max_local_workers()
    if num_workers > most:
        raise ValueError(f"{num_workers} local workers: this machine runs at most {most} ({WORKERS_A_CORE} a core, "
                         f"{WORKER_BYTES >> 20} MiB each, of its {cores} cores and its memory); run the plan on "
                         "CUDA devices or under torchrun")
    if num_workers > cores:
        warnings.warn(f"{num_workers} local devices on {cores} core(s): the workers share cores, so their times "
                      "include each other's work", RuntimeWarning, stacklevel=3)


PRELOAD = ("__main__", "torch", "torch.distributed")
"""What the fork server imports once, before the first job's own module (:func:`worker_context`)."""


def worker_context(job: Callable[..., Any]) -> Any:
    """The ``multiprocessing`` context the workers start in: *forkserver* where the platform has it (its server,
    started by the first run of this process, imports :data:`PRELOAD` and ``job``'s module once, with the
    environment and signal mask of that moment), else *spawn*."""
    if "forkserver" not in mp.get_all_start_methods():
        return mp.get_context("spawn")
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload([*PRELOAD, job.__module__])  # read only when the server starts
    return ctx


def run_on_local_workers(num_workers: int, job: Callable[[int, int, Any], Any], payload: Any,
                         backend: str = "gloo") -> list[Any]:
    """``[job(rank, num_workers, payload) for rank in range(num_workers)]``, each call in its own worker process
    (see the module docstring), the process group (``backend``: ``"gloo"``, or ``"nccl"`` for one process per
    CUDA device) initialised around it. Every worker ends within a second of the driver's death
    (:func:`~placement_env.child_processes.exit_with_parent`), ignores Ctrl-C (the driver answers it and ends
    them) and is killed when the call ends with an error. Ctrl-C and SIGTERM wait while the workers start (each
    worker starts with them blocked, and drops a Ctrl-C that came before its job began): a stop then ends every
    worker, and none prints a traceback of its start-up.

    ``job`` must be a module-level function and ``payload`` picklable (the workers import the one and unpickle
    the other).

    A job says it is alive with :func:`heartbeat`; the run has no bound on its length, only on a worker's silence
    (:func:`silence_bound`).

    Raises:
        RuntimeError: a worker failed (its error and the last frames of its traceback), or was silent longer than
            :func:`silence_bound` (named, with what it last said).
    """
    silence = silence_bound()
    check_main_guard()
    ctx = worker_context(job)
    results = ctx.Queue()
    port = free_port()
    saved = os.environ.get("OMP_NUM_THREADS")
    os.environ["OMP_NUM_THREADS"] = "1"  # the fork server's (or a spawned) interpreter reads it when torch loads
    environ = dict(os.environ)
    procs: list[Any] = []
    out: dict[int, Any] = {}
    finished = False
    try:
        # a stop while the workers start waits until every one is known (and raised then): blocked in this thread,
        # which the workers (and a fork server started now) inherit, so that a Ctrl-C to the terminal's group
        # cannot hit their start-up; and held by Python's handlers when the kernel hands it to another thread of
        # the driver (numpy's, torch's), whose handler would otherwise raise it here mid-start
        with ignore_interrupts():
            mask = _block_stops()
            try:
                for rank in range(num_workers):
                    procs.append(ctx.Process(target=_entry, daemon=True, args=(
                        rank, num_workers, port, job, payload, results, backend, environ)))
                    procs[-1].start()
            finally:
                if saved is None:
                    os.environ.pop("OMP_NUM_THREADS", None)
                else:
                    os.environ["OMP_NUM_THREADS"] = saved
                _unblock_stops(mask)  # a stop that came meanwhile is delivered here, and held to the block's end
        heard = {rank: (time.monotonic(), "starting") for rank in range(num_workers)}
        startup = max(silence, STARTUP_S)
        while len(out) < num_workers:
            try:
                rank, ok, value = results.get(timeout=min(1.0, silence / 4))
            except queue.Empty:
                dead = _dead(procs, out)
                if dead is not None:
                    raise RuntimeError(dead) from None
                now = time.monotonic()
                # how far past its bound each worker is silent: the start-up bound until its first word
                over, quiet, r, what = max((now - at - (startup if what == "starting" else silence), now - at, r, what)
                                           for r, (at, what) in heard.items() if r not in out)
                if over >= 0:
                    raise RuntimeError(f"local worker {r} stalled: silent for {quiet:.0f} s since it said "
                                       f"{what!r} (the bound: PLACEMENT_WORKER_SILENCE_S, {silence:g} s; "
                                       f"{startup:g} s to start)") from None
                continue
            if ok is None:  # a heartbeat
                heard[rank] = (time.monotonic(), value)
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


STOPS = (signal.SIGINT, signal.SIGTERM)
"""The signals that stop a command (Ctrl-C, SIGTERM): blocked while the driver starts its workers."""


def _block_stops() -> set[int | signal.Signals] | None:
    """Block :data:`STOPS` in this thread; returns the mask before (None where there are no signal masks)."""
    return signal.pthread_sigmask(signal.SIG_BLOCK, STOPS) if hasattr(signal, "pthread_sigmask") else None


def _unblock_stops(previous: set[int | signal.Signals] | None = None) -> None:
    """Put back the mask ``previous`` (:func:`_block_stops`'s), or unblock :data:`STOPS`."""
    if hasattr(signal, "pthread_sigmask"):
        if previous is None:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, STOPS)
        else:
            signal.pthread_sigmask(signal.SIG_SETMASK, previous)


DEATH_GRACE_S = 1.0
"""After a worker reports a failure, how long the driver waits to see whether another worker died first."""


def _dead(procs: list[Any], reported: dict[int, Any]) -> str | None:
    """The first worker that ended without reporting, said as an error; None while none has."""
    for rank, p in enumerate(procs):
        if rank not in reported and p.exitcode not in (None, 0):
            how = f"killed by signal {-p.exitcode}" if p.exitcode < 0 else f"exit code {p.exitcode}"
            return f"local worker {rank} died ({how})"
    return None
