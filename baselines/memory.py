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

from placement_env.checks import checked_instance
from placement_env.cluster import Cluster
from placement_env.graph.model import ComputationGraph
from placement_env.graph.units import unit_graph
from placement_env.sim.simulator import DEFAULT_PARAM_FACTOR


def format_bytes(nbytes: float) -> str:
    """A size for a message: exact below 1 MB (``4,100 bytes``), else in GB with the exact count beside it
    (``17.18 GB = 17,179,869,184 bytes``), so that two sizes that round alike still read differently."""
    exact = f"{nbytes:,.0f} bytes"
    return exact if nbytes < 1e6 else f"{nbytes / 1e9:.2f} GB = {exact}"


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
                f"graph {graph.name!r} needs {format_bytes(total)} (params x {param_factor:g} + outputs) but the "
                f"cluster has {format_bytes(capacity)} in all")
        biggest = int(np.argmax(self.demand))
        if self.demand[biggest] > cluster.memory.max():
            raise PlacementInfeasibleError(
                f"unit {self.names[biggest]!r} needs {format_bytes(self.demand[biggest])}, more than the largest "
                f"device has ({format_bytes(cluster.memory.max())})")

    def fits(self, unit: int) -> np.ndarray:
        """Boolean mask of the devices with room for ``unit``."""
        return self.free >= self.demand[unit]

    def take(self, unit: int, device: int) -> None:
        """Charge ``unit`` to ``device`` (which must have room)."""
        if self.free[device] < self.demand[unit]:
            raise PlacementInfeasibleError(
                f"unit {self.names[unit]!r} ({format_bytes(self.demand[unit])}) does not fit on device {device} "
                f"({format_bytes(self.free[device])} left)")
        self.free[device] -= self.demand[unit]

    def first_fit(self, unit: int, preferred: list[int] | np.ndarray) -> int:
        """The first device of ``preferred`` with room for ``unit``, charged; raises if none has room."""
        room = self.fits(unit)
        for d in preferred:
            if room[d]:
                self.take(unit, int(d))
                return int(d)
        raise self.no_room(unit)

    def no_room(self, unit: int, where: str = "no device") -> PlacementInfeasibleError:
        """The error for ``unit`` fitting on ``where``: its size and every device's free budget."""
        free = "; ".join(f"device {d}: {format_bytes(x)}" for d, x in enumerate(self.free))
        return PlacementInfeasibleError(
            f"{where} has room for unit {self.names[unit]!r} ({format_bytes(self.demand[unit])}); free: {free}")


def units_in_topological_order(graph: ComputationGraph) -> np.ndarray:
    """Units sorted by the smallest topological index among their ops."""
    return unit_graph(graph).topological_order
