"""The cluster local worker processes form, measured: :func:`local_cluster`.

* speed 1.0: op costs are this machine's seconds on one CPU thread, as ``from_torch(..., profile=True)``
  measures them in a process with ``torch.set_num_threads(1)`` (what each worker runs with);
* memory: this machine's physical memory shared equally among the workers;
* links: a ping-pong between workers 0 and 1 over the gloo transport for each of :data:`PING_SIZES` bytes,
  the one-way time of each the median of :data:`PING_ROUNDS` round trips halved; a line
  ``time = latency + bytes / bandwidth`` through them (least squares of the relative error) gives every
  link's latency and bandwidth (the workers are alike, so one pair stands for all). By default
  (``loaded=True``) each worker keeps computing while it sends and receives (a thread multiplying
  256 x 256 matrices), as the workers of a measured step do: on a host with a core per worker the
  transport's threads then compete with compute for the cores, which a ping-pong between idle workers does
  not see (both figures, and what they do to the simulated steps, in ``docs/simulator.md#fidelity``).
"""

from __future__ import annotations

import os
import statistics
import threading
import time
from typing import Any

import numpy as np

from placement_env.cluster import Cluster, Device

from .local_workers import run_on_local_workers

PING_SIZES = (4, 4 << 10, 64 << 10, 512 << 10, 4 << 20)
PING_ROUNDS = 15


def _ping_pong(rank: int, world: int, payload: Any) -> list[float] | None:

    import torch

    sizes, rounds, loaded = payload
    if not loaded:
        return _exchange(rank, sizes, rounds)
    stop = threading.Event()

    def compute() -> None:
        a = torch.randn(256, 256)
        while not stop.is_set():
            a @ a

    worker = threading.Thread(target=compute, daemon=True)
    worker.start()
    try:
        return _exchange(rank, sizes, rounds)
    finally:
        stop.set()
        worker.join()


def _exchange(rank: int, sizes: tuple[int, ...], rounds: int) -> list[float] | None:
    import torch
    import torch.distributed as dist

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
    """``(latency s, bandwidth bytes/s)`` of the line ``seconds = latency + sizes / bandwidth`` fitted by least
    squares of the *relative* error (each point weighted by 1 / its time), so that the small messages, whose
    time is all latency, fix the latency and the large ones the bandwidth (latency clipped at 0; the slope at
    a tiny positive value, for a link too fast to measure)."""
    x = np.asarray(sizes, dtype=np.float64)
    y = np.asarray(seconds, dtype=np.float64)
    w = 1.0 / np.maximum(y, 1e-12)
    slope, intercept = np.polyfit(x, y, 1, w=w)
    return max(0.0, float(intercept)), 1.0 / max(float(slope), 1e-15)


def local_cluster(num_devices: int, *, loaded: bool = True) -> Cluster:
    """The cluster of ``num_devices`` local worker processes (see the module docstring); takes a few seconds
    (two worker processes start and exchange :data:`PING_ROUNDS` round trips per size). ``loaded``: measure
    the link while both workers compute (default), or between idle workers.

    Raises:
        ValueError: ``num_devices`` not an integer >= 1.
    """
    if isinstance(num_devices, bool) or not isinstance(num_devices, int) or num_devices < 1:
        raise ValueError(f"num_devices must be an integer >= 1, got {num_devices!r}")
    if num_devices > 1:
        one_way = run_on_local_workers(2, _ping_pong, (PING_SIZES, PING_ROUNDS, bool(loaded)))[0]
        latency, bandwidth = fit_link(np.array(PING_SIZES), np.array(one_way))
    else:
        latency, bandwidth = 0.0, 1e12
    memory = _physical_memory() // num_devices
    devices = [Device(f"local:{d}", 1.0, memory) for d in range(num_devices)]
    m = num_devices
    return Cluster(devices, np.full((m, m), bandwidth), np.full((m, m), latency), name=f"local-{m}")


__all__ = ["PING_ROUNDS", "PING_SIZES", "fit_link", "local_cluster"]
