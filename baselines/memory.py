"""Memory budgets the placers respect.

A placer cannot run the simulator for every decision, so it budgets each
placement unit conservatively: ``param_bytes * param_factor + output_bytes``
summed over the unit's ops, i.e. as if every output it produces stayed alive
for the whole step (received copies excluded). A placement that fits these
budgets rarely runs out of memory in the simulator, whose peak is the exact
figure and is what every report shows.
"""

from __future__ import annotations

import numpy as np

from placement_env import Cluster, ComputationGraph
from placement_env.features import unit_graph
from placement_env.graph import checked_instance
from placement_env.simulator import DEFAULT_PARAM_FACTOR

GB = 1e9


class PlacementInfeasibleError(ValueError):
    """The graph cannot be placed on the cluster within device memory."""


def unit_demand(graph: ComputationGraph, param_factor: float = DEFAULT_PARAM_FACTOR) -> np.ndarray:
    """Budgeted bytes of each placement unit (see the module docstring)."""
    per_node = graph.param_bytes * param_factor + graph.output_bytes
    return np.bincount(graph.unit_of, weights=per_node, minlength=graph.num_units)


def overflow_bytes(peak: np.ndarray, cluster: Cluster) -> np.ndarray:
    """Bytes over memory, summed over devices, for each row of ``peak`` (B x M simulated peaks, bytes)."""
    return np.maximum(0.0, peak - cluster.memory[None, :]).sum(axis=1)


class MemoryBudget:
    """Free budgeted bytes per device while a placer assigns units.

    Raises :class:`PlacementInfeasibleError` up front when the graph cannot fit
    at all (its total, or one unit, exceeds the cluster's memory).
    """

    def __init__(self, graph: ComputationGraph, cluster: Cluster, param_factor: float = DEFAULT_PARAM_FACTOR):
        checked_instance("graph", graph, ComputationGraph)
        checked_instance("cluster", cluster, Cluster)
        self.demand = unit_demand(graph, param_factor)
        self.free = cluster.memory.astype(np.float64).copy()
        self.names = graph.unit_names()
        total, capacity = float(self.demand.sum()), float(cluster.memory.sum())
        if total > capacity:
            raise PlacementInfeasibleError(
                f"graph {graph.name!r} needs {total / GB:.2f} GB (params x {param_factor:g} + outputs) but the "
                f"cluster has {capacity / GB:.2f} GB in all")
        biggest = int(np.argmax(self.demand))
        if self.demand[biggest] > cluster.memory.max():
            raise PlacementInfeasibleError(
                f"unit {self.names[biggest]!r} needs {self.demand[biggest] / GB:.2f} GB, more than the largest "
                f"device ({cluster.memory.max() / GB:.2f} GB)")

    def fits(self, unit: int) -> np.ndarray:
        """Boolean mask of the devices with room for ``unit``."""
        return self.free >= self.demand[unit]

    def take(self, unit: int, device: int) -> None:
        """Charge ``unit`` to ``device`` (which must have room)."""
        if self.free[device] < self.demand[unit]:
            raise PlacementInfeasibleError(
                f"unit {self.names[unit]!r} ({self.demand[unit] / GB:.2f} GB) does not fit on device {device} "
                f"({self.free[device] / GB:.2f} GB left)")
        self.free[device] -= self.demand[unit]

    def first_fit(self, unit: int, preferred: list[int] | np.ndarray) -> int:
        """The first device of ``preferred`` with room for ``unit``, charged; raises if none has room."""
        room = self.fits(unit)
        for d in preferred:
            if room[d]:
                self.take(unit, int(d))
                return int(d)
        raise PlacementInfeasibleError(
            f"no device has room for unit {self.names[unit]!r} ({self.demand[unit] / GB:.2f} GB); "
            f"free: {', '.join(f'{x / GB:.2f}' for x in self.free)} GB")


def units_in_topological_order(graph: ComputationGraph) -> np.ndarray:
    """Units sorted by the smallest topological index among their ops."""
    return unit_graph(graph).topological_order
