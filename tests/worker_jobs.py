"""Jobs for tests/test_local_workers.py: module-level functions the spawned local workers import by name."""

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
