"""Jobs for tests/test_local_workers.py: module-level functions the local workers import by name."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path


def wait_forever(rank: int, world: int, folder: str) -> None:
    """Write this worker's PID to ``folder/<rank>.pid``, then wait: rank 0 for a message nobody sends (inside
    gloo), the others in Python."""
    import torch
    import torch.distributed as dist

    Path(folder, f"{rank}.pid").write_text(str(os.getpid()))
    if rank == 0:
        dist.recv(torch.empty(1), 1)
    while True:
        time.sleep(1)


def last_worker_dies(rank: int, world: int, payload: None) -> int:
    """The last worker is killed (as ``kill -9`` from outside would) while the others wait for its message."""
    import torch
    import torch.distributed as dist

    dist.barrier()
    if rank == world - 1:
        os.kill(os.getpid(), signal.SIGKILL)
    dist.recv(torch.empty(1), world - 1)
    return rank


def refuse(rank: int, world: int, payload: None) -> int:
    if rank == 1:
        raise ValueError("worker 1 refuses")
    return rank


def _stop_the_driver(folder: str, signum: int) -> str:
    """Run in a starting worker as its payload is unpickled: record this worker's PID, and the first to arrive
    sends ``signum`` to its process group (the driver and every worker, as Ctrl-C in a terminal or ``timeout``
    does). Returns ``folder``."""
    Path(folder, f"started-{os.getpid()}").write_text("")
    try:
        os.close(os.open(Path(folder, "stopped"), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return folder
    os.killpg(os.getpgid(0), signum)
    return folder


class StopsTheDriver:
    """A payload that, unpickled in a starting worker, stops the driver and its workers (:func:`_stop_the_driver`):
    Ctrl-C or SIGTERM while the workers start."""

    def __init__(self, folder: str, signum: int) -> None:
        self.folder, self.signum = folder, signum

    def __reduce__(self) -> tuple:
        return _stop_the_driver, (self.folder, self.signum)


def environment_and_threads(rank: int, world: int, name: str) -> tuple[str | None, str | None, int]:
    """The worker's ``os.environ[name]``, its ``OMP_NUM_THREADS`` and torch's thread count."""
    import torch

    return os.environ.get(name), os.environ.get("OMP_NUM_THREADS"), torch.get_num_threads()


def _record_start(folder: str) -> str:
    """Run in a starting worker as its payload is unpickled: record this worker's PID. Returns ``folder``."""
    Path(folder, f"started-{os.getpid()}").write_text("")
    return folder


class InterruptsAnotherThread:
    """A payload whose pickling, in the driver as it starts the first worker, hands Ctrl-C to another thread of the
    driver (``thread``), as the kernel does with a signal to the process when that thread (numpy's) does not
    block it."""

    def __init__(self, folder: str, thread: int) -> None:
        self.folder, self.thread, self.sent = folder, thread, 0

    def __reduce__(self) -> tuple:
        self.sent += 1
        Path(self.folder, f"pickled-{self.sent}").write_text("")  # a worker the driver went on to start
        if self.sent == 1:
            signal.pthread_kill(self.thread, signal.SIGINT)
        return _record_start, (self.folder,)
