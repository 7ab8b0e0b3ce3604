"""The cluster local worker processes form, measured: :func:`local_cluster`.

* speed 1.0: op costs are this machine's seconds on one CPU thread, as ``from_torch(..., profile=True)``
  measures them in a process with ``torch.set_num_threads(1)`` (what each worker runs with);
* memory: this machine's physical memory shared equally among the workers;
* links: a ping-pong between workers 0 and 1 over the gloo transport for each of :data:`PING_SIZES` bytes,
  the one-way time of each the median of :data:`PING_ROUNDS` round trips halved; a least-squares line
  ``time = latency + bytes / bandwidth`` through them gives every link's latency and bandwidth (the workers
  are alike, so one pair stands for all).
"""

from __future__ import annotations

import os
import statistics
import time
from typing import Any

import numpy as np

from placement_env.cluster import Cluster, Device

from .local_workers import run_on_local_workers

PING_SIZES = (4, 4 << 10, 64 << 10, 512 << 10, 4 << 20)
PING_ROUNDS = 15


def _ping_pong(rank: int, world: int, payload: Any) -> list[float] | None:
    import torch
    import torch.distributed as dist

    sizes, rounds = payload
    times = []
    for size in sizes:
        buf = torch.zeros(max(1, size // 4), dtype=torch.float32)
        trips = []
        for k in range(rounds + 2):  # two warm-up round trips
            if rank == 0:
                t0 = time.perf_counter()
                dist.send(buf, 1)
                dist.recv(buf, 1)
                if k >= 2:
                    trips.append(time.perf_counter() - t0)
            elif rank == 1:
                dist.recv(buf, 0)
                dist.send(buf, 0)
        if rank == 0:
            times.append(statistics.median(trips) / 2)
    return times if rank == 0 else None


def _physical_memory() -> int:
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return 16 << 30


def fit_link(sizes: np.ndarray, seconds: np.ndarray) -> tuple[float, float]:
    """``(latency s, bandwidth bytes/s)`` of the least-squares line ``seconds = latency + sizes / bandwidth``
    (latency clipped at 0; the slope at a tiny positive value, for a link too fast to measure)."""
    slope, intercept = np.polyfit(np.asarray(sizes, dtype=np.float64), np.asarray(seconds, dtype=np.float64), 1)
    return max(0.0, float(intercept)), 1.0 / max(float(slope), 1e-15)


def local_cluster(num_devices: int) -> Cluster:
    """The cluster of ``num_devices`` local worker processes (see the module docstring); takes a few seconds
    (two worker processes start and exchange :data:`PING_ROUNDS` round trips per size).

    Raises:
        ValueError: ``num_devices`` not an integer >= 1.
    """
    if isinstance(num_devices, bool) or not isinstance(num_devices, int) or num_devices < 1:
        raise ValueError(f"num_devices must be an integer >= 1, got {num_devices!r}")
    if num_devices > 1:
        one_way = run_on_local_workers(2, _ping_pong, (PING_SIZES, PING_ROUNDS))[0]
        latency, bandwidth = fit_link(np.array(PING_SIZES), np.array(one_way))
    else:
        latency, bandwidth = 0.0, 1e12
    memory = _physical_memory() // num_devices
    devices = [Device(f"local:{d}", 1.0, memory) for d in range(num_devices)]
    m = num_devices
    return Cluster(devices, np.full((m, m), bandwidth), np.full((m, m), latency), name=f"local-{m}")


__all__ = ["PING_ROUNDS", "PING_SIZES", "fit_link", "local_cluster"]
