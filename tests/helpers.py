"""Small builders shared by the tests."""

from __future__ import annotations

import numpy as np

from placement_env import Cluster, ComputationGraph, Device, Edge, Node


def graph(nodes: list[tuple], edges: list[tuple] | tuple[()] = (), name: str = "t") -> ComputationGraph:
    """``nodes``: (id, cost, output_bytes[, param_bytes[, colocation]]); ``edges``: (src, dst[, bytes])."""
    built = []
    for spec in nodes:
        nid, cost, out = spec[:3]
        params = spec[3] if len(spec) > 3 else 0
        coloc = spec[4] if len(spec) > 4 else None
        built.append(Node(nid, "op", cost, out, params, coloc))
    return ComputationGraph(built, [Edge(*e) for e in edges], name=name)


def uniform_cluster(m: int, bandwidth: float = 100.0, latency: float = 0.5, speed: float = 1.0,
                    memory: int = 10**12) -> Cluster:
    """``m`` devices with every link at ``bandwidth`` bytes/s and ``latency`` s."""
    return Cluster([Device(f"d{i}", speed, memory) for i in range(m)],
                   np.full((m, m), bandwidth), np.full((m, m), latency))


def running(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie does not), read from ``/proc``."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


class TickingClock:
    """A ``time.perf_counter`` / ``time.monotonic`` that moves ``tick`` seconds at every call: a search's budget
    in seconds becomes a number of clock reads, the same on a fast machine and on a busy one, so a seeded search
    under a budget is deterministic. ``install(monkeypatch)`` puts it in place of both."""

    def __init__(self, tick: float = 1e-4) -> None:
        self.now, self.tick = 1000.0, tick

    def __call__(self) -> float:
        self.now += self.tick
        return self.now

    def install(self, monkeypatch) -> TickingClock:
        import time

        monkeypatch.setattr(time, "perf_counter", self)
        monkeypatch.setattr(time, "monotonic", self)
        return self
