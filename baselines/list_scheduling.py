"""The list-scheduling state shared by m-ETF, HEFT and CPOP.

A simple model of a step that a placer can update op by op: each device runs
its assigned ops back to back (``available`` = when it is next free), and an
input produced on another device arrives ``latency + bytes / bandwidth`` after
its producer finishes (no channel contention: the simulator judges the
result). Colocation is honoured by pinning: the first op of a unit fixes the
unit's device, and the unit's whole memory budget is charged then.
"""

from __future__ import annotations

import numpy as np

from placement_env.cluster import Cluster
from placement_env.graph.model import ComputationGraph

from .memory import MemoryBudget


class ListSchedule:
    """Partial schedule: device and finish time (s) of the ops placed so far."""

    def __init__(self, graph: ComputationGraph, cluster: Cluster) -> None:
        self.graph = graph
        self.cluster = cluster
        self.budget = MemoryBudget(graph, cluster)
        self.device = np.full(graph.num_nodes, -1, dtype=np.int64)
        self.finish = np.zeros(graph.num_nodes)
        self.available = np.zeros(cluster.num_devices)
        self.unit_device = np.full(graph.num_units, -1, dtype=np.int64)
        self._inv_bw = 1.0 / cluster.bandwidth  # diagonal: 1/inf = 0
        self._pred_ptr, self._pred_src, self._pred_bytes = graph.predecessors

    def data_ready(self, v: int) -> np.ndarray:
        """Per device, the time (s) all inputs of ``v`` would be there (its predecessors must be placed)."""
        lo, hi = self._pred_ptr[v], self._pred_ptr[v + 1]
        if lo == hi:
            return np.zeros(self.cluster.num_devices)
        src = self._pred_src[lo:hi]
        dev = self.device[src]
        if np.any(dev < 0):
            raise ValueError(f"op {self.graph.nodes[v].id!r} has an unplaced input")
        arrival = (self.finish[src, None] + self.cluster.latency[dev] +
                   self._pred_bytes[lo:hi, None] * self._inv_bw[dev])
        return arrival.max(axis=0)

    def allowed(self, v: int) -> np.ndarray:
        """Devices ``v`` may go to: its unit's device if pinned, else those with budgeted room for the unit
        (the freest device when none has: the simulator and the repair decide)."""
        unit = self.graph.unit_of[v]
        if self.unit_device[unit] >= 0:
            mask = np.zeros(self.cluster.num_devices, dtype=bool)
            mask[self.unit_device[unit]] = True
            return mask
        return self.budget.room_or_freest(unit)

    def duration(self, v: int) -> np.ndarray:
        """Run time (s) of ``v`` on each device."""
        return self.graph.cost[v] / self.cluster.speed

    def assign(self, v: int, d: int, start: float) -> float:
        """Place ``v`` on ``d`` starting at ``start``; returns its finish time."""
        unit = self.graph.unit_of[v]
        if self.unit_device[unit] < 0:
            self.budget.take(unit, d)
            self.unit_device[unit] = d
        elif self.unit_device[unit] != d:
            raise ValueError(f"op {self.graph.nodes[v].id!r} must go to device {self.unit_device[unit]}")
        end = start + self.graph.cost[v] / self.cluster.speed[d]
        self.device[v] = d
        self.finish[v] = end
        self.available[d] = max(self.available[d], end)
        return end

    def earliest_finish(self, v: int) -> tuple[int, float, float]:
        """The allowed device with the earliest finish for ``v``: ``(device, start, finish)``."""
        start = np.maximum(self.available, self.data_ready(v))
        finish = np.where(self.allowed(v), start + self.duration(v), np.inf)
        d = int(np.argmin(finish))
        return d, float(start[d]), float(finish[d])

    def placement(self) -> np.ndarray:
        if np.any(self.device < 0):
            raise ValueError("not every op is placed")
        return self.device.copy()


def _mean_costs(graph: ComputationGraph, cluster: Cluster) -> tuple[np.ndarray, float, float]:
    """Run time of each op averaged over devices (s), and the mean link latency (s) and 1/bandwidth (s/byte)."""
    w = graph.cost * float(np.mean(1.0 / cluster.speed))
    m = cluster.num_devices
    if m == 1:
        return w, 0.0, 0.0
    off = ~np.eye(m, dtype=bool)
    return w, float(cluster.latency[off].mean()), float((1.0 / cluster.bandwidth[off]).mean())


def upward_rank(graph: ComputationGraph, cluster: Cluster) -> np.ndarray:
    """HEFT's upward rank (s): mean run time plus the longest mean-cost path to an exit."""
    w, mean_lat, mean_inv_bw = _mean_costs(graph, cluster)
    ptr, dst, nbytes = graph.successors
    rank = np.zeros(graph.num_nodes)
    for v in graph.topo_order[::-1].tolist():
        lo, hi = ptr[v], ptr[v + 1]
        tail = 0.0
        if hi > lo:
            tail = float(np.max(mean_lat + nbytes[lo:hi] * mean_inv_bw + rank[dst[lo:hi]]))
        rank[v] = w[v] + tail
    return rank


def downward_rank(graph: ComputationGraph, cluster: Cluster) -> np.ndarray:
    """CPOP's downward rank (s): the longest mean-cost path from an entry up to (not including) the op."""
    w, mean_lat, mean_inv_bw = _mean_costs(graph, cluster)
    ptr, src, nbytes = graph.predecessors
    rank = np.zeros(graph.num_nodes)
    for v in graph.topo_order.tolist():
        lo, hi = ptr[v], ptr[v + 1]
        if hi > lo:
            u = src[lo:hi]
            rank[v] = float(np.max(rank[u] + w[u] + mean_lat + nbytes[lo:hi] * mean_inv_bw))
    return rank
