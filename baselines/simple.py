"""The placers a practitioner tries first: one device, round-robin, random."""

from __future__ import annotations

import numpy as np

from placement_env.cluster import Cluster
from placement_env.graph.model import ComputationGraph
from placement_env.sim.pipeline import PLAIN_STEP, Step
from placement_env.sim.simulator import DEFAULT_PARAM_FACTOR, Simulator

from .memory import (
    MemoryBudget,
    PlacementInfeasibleError,
    format_bytes,
    memory_lower_bounds,
    units_in_topological_order,
)


def single_device(graph: ComputationGraph, cluster: Cluster, seed: int = 0, *, step: Step = PLAIN_STEP) -> np.ndarray:
    """Everything on the fastest device on which the simulator finds the whole ``step`` within memory (lowest index
    on ties); :class:`PlacementInfeasibleError` with the simulated peak when no device holds it."""
    memory_lower_bounds(graph, cluster)
    simulator = Simulator(graph, cluster, DEFAULT_PARAM_FACTOR, *step)
    peak = 0.0
    for d in sorted(range(cluster.num_devices), key=lambda d: (-cluster.speed[d], d)):
        placement = np.full(graph.num_nodes, d, dtype=np.int64)
        _, peaks, _ = simulator.run(placement)
        if peaks[d] <= cluster.memory[d]:
            return placement
        peak = float(peaks[d])
    raise PlacementInfeasibleError(f"graph {graph.name!r} on one device peaks at {format_bytes(peak)} in the "
                                   f"simulator; no single device holds it (largest: "
                                   f"{format_bytes(cluster.memory.max())})")


def round_robin(graph: ComputationGraph, cluster: Cluster, seed: int = 0) -> np.ndarray:
    """Units in topological order dealt to devices 0, 1, ..., M-1, 0, ... (skipping full devices)."""
    budget = MemoryBudget(graph, cluster)
    m = cluster.num_devices
    units = np.empty(graph.num_units, dtype=np.int64)
    for i, u in enumerate(units_in_topological_order(graph)):
        units[u] = budget.first_fit(int(u), [(i + k) % m for k in range(m)])
    return graph.expand_unit_placement(units)


def random_placement(graph: ComputationGraph, cluster: Cluster, seed: int = 0) -> np.ndarray:
    """Each unit on a uniformly random device among those with room (seeded)."""
    rng = np.random.default_rng(seed)
    budget = MemoryBudget(graph, cluster)
    units = np.empty(graph.num_units, dtype=np.int64)
    for u in rng.permutation(graph.num_units):
        units[u] = budget.first_fit(int(u), rng.permutation(cluster.num_devices))
    return graph.expand_unit_placement(units)
