"""One graph on one cluster as a placement policy sees it and as the simulator judges it: :class:`PlacementProblem`,
and the relabellings of placements on identical devices (:func:`aligned_labels`, :func:`canonical_labels`)."""

from __future__ import annotations

import copy

import numpy as np
import torch
from scipy.optimize import linear_sum_assignment
from torch import Tensor

from agents.policies.network import PlacementNetwork
from baselines.memory import overflow_bytes
from placement_env.cluster import Cluster
from placement_env.envs.task import PlacementTask
from placement_env.graph.model import ComputationGraph
from placement_env.sim.pipeline import PLAIN_STEP, Step
from placement_env.sim.simulator import DEFAULT_PARAM_FACTOR, Simulator


def homogeneous(cluster: Cluster) -> bool:
    """Whether every device of ``cluster`` has the same speed and memory and every link the same bandwidth and
    latency: then device labels are interchangeable and placements are compared in :func:`canonical_labels`."""
    m = cluster.num_devices
    off = ~np.eye(m, dtype=bool)
    return bool(np.ptp(cluster.speed) == 0 and np.ptp(cluster.memory) == 0
                and (m < 2 or (np.ptp(cluster.bandwidth[off]) == 0 and np.ptp(cluster.latency[off]) == 0)))


def aligned_labels(rows: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """Relabel the devices of each row of ``rows`` (B x units) by the permutation that makes it agree with
    ``reference`` (a device per unit) on the most units (an assignment problem on the devices' overlap counts).
    On a homogeneous cluster a placement's labels are arbitrary; aligned with the placement the policy sees, a
    placement that keeps most units where they are asks the policy mostly to "stay"."""
    rows = np.atleast_2d(rows)
    m = int(max(rows.max(), reference.max())) + 1
    out = np.empty_like(rows)
    for b, row in enumerate(rows):
        overlap = np.zeros((m, m), np.int64)
        np.add.at(overlap, (row, reference), 1)
        source, target = linear_sum_assignment(-overlap)
        mapping = np.empty(m, np.int64)
        mapping[source] = target
        out[b] = mapping[row]
    return out


def canonical_labels(rows: np.ndarray, order: np.ndarray) -> np.ndarray:
    """Relabel the devices of each row of ``rows`` (B x units) in order of first use along ``order`` (units in
    topological order): the first unit's device becomes 0, the next new device 1, and so on. Two placements that
    differ only by a permutation of identical devices get the same labels."""
    rows = np.atleast_2d(rows)
    out = np.empty_like(rows)
    for b, row in enumerate(rows):
        _, first = np.unique(row[order], return_index=True)
        used = row[order][np.sort(first)]
        mapping = np.empty(int(row.max()) + 1, np.int64)
        mapping[used] = np.arange(used.size)
        out[b] = mapping[row]
    return out


class PlacementProblem:
    """One graph on one cluster: the policy's observation and the simulator's judgement, in placement units.

    Args:
        graph: the graph (already coarsened to the policy's size, if need be).
        cluster: its devices.
        max_devices: the policy's device padding (at least the cluster's device count).
        start_units: the placement the observation shows (a device per unit; default everything on device 0).
        step: the step placements are judged by (default the plain step; ``Step(8, "1f1b")``: pipelined).
    """

    def __init__(self, graph: ComputationGraph, cluster: Cluster, max_devices: int,
                 start_units: np.ndarray | None = None, step: Step = PLAIN_STEP) -> None:
        self.graph, self.cluster, self.step = graph, cluster, step
        self.task = PlacementTask(graph, cluster=cluster, max_devices=max_devices, flatten=False, max_units=None)
        self.units = self.task.units[0]
        self.num_units, self.num_devices = self.units.num_units, cluster.num_devices
        self.simulator = Simulator(graph, cluster, DEFAULT_PARAM_FACTOR, *step)
        self.canonical = homogeneous(cluster)
        self._show(np.zeros(self.num_units, np.int64) if start_units is None else start_units)

    def _show(self, start_units: np.ndarray) -> None:
        """Make ``start_units`` the placement the observation shows."""
        start = np.asarray(start_units, np.int64)
        self.start_units = start
        self.shown = canonical_labels(start, self.units.topological_order)[0] if self.canonical else start
        obs = self.task.observation(0, self.shown, np.zeros(self.num_units, np.int8))
        self.observation = {k: torch.as_tensor(v).unsqueeze(0) for k, v in obs.items()}

    def restarted(self, start_units: np.ndarray) -> PlacementProblem:
        """The same problem with ``start_units`` (a device per unit) in its observation; the task and the
        simulator are shared with this one, not rebuilt."""
        other = copy.copy(self)
        other._show(start_units)
        return other

    def judge(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(makespan s, overflow bytes)`` of each row of ``rows`` (B x units), in one simulator call."""
        batch = self.simulator.simulate_batch(np.asarray(rows)[:, self.graph.unit_of], check=False)
        return batch.makespan, overflow_bytes(batch.peak_memory, self.cluster)

    def labels(self, rows: np.ndarray) -> np.ndarray:
        """``rows`` as the policy imitates them: on a homogeneous cluster relabelled to agree most with the start
        placement the observation shows (:func:`aligned_labels`; the start itself in :func:`canonical_labels`),
        as they are otherwise. (The simulator breaks ties by device index, so a relabelled placement's makespan
        can differ slightly: judge placements as found and relabel only what the policy imitates.)"""
        return aligned_labels(rows, self.shown) if self.canonical else np.atleast_2d(rows)

    def logits(self, network: PlacementNetwork) -> Tensor:
        """The policy's (units, devices) logits for this problem (devices beyond the cluster cut off)."""
        return network(self.observation)[0, :self.num_units, :self.num_devices]
