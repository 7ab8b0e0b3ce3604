"""Memory as the placers see it: budgets that match the simulator, and lower bounds that prove infeasibility.

A placer cannot run the simulator for every decision, so it budgets each
placement unit (bytes):

* its **static** memory, ``param_bytes * param_factor`` summed over its ops,
  which the simulator holds on the unit's device for the whole step; plus
* its **activations at the peak**: the bytes of its ops' outputs that are live
  when a step with every op on one device reaches its peak memory (an output
  lives from its op's start until its last consumer ends, as in the simulator).

Summed over all units this is exactly the simulated peak of the single-device
step, so the budget neither doubles activations (as holding every output for
the whole step would) nor ignores them. For a placement across devices it is an
estimate (each device peaks at its own time, and received copies add to it):
the simulator has the last word, and :mod:`baselines.memory_repair` moves
units until it agrees. A placer therefore never refuses because of its
budget: when no device has budgeted room for a unit, the unit goes where the
overflow is least and the repair takes over.

:class:`PlacementInfeasibleError` is raised up front only when no placement
can fit, by lower bounds that hold for every placement (:func:`memory_lower_bounds`):
the static memory of all units exceeds the cluster's total memory; or what an op
holds while it runs (its unit's static memory, its output and its inputs) exceeds
the largest device.
"""

from __future__ import annotations

import numpy as np

from placement_env.checks import checked_instance
from placement_env.cluster import Cluster, Device
from placement_env.graph.model import ComputationGraph
from placement_env.graph.units import unit_graph
from placement_env.sim.memory_timeline import buffer_lifetimes
from placement_env.sim.simulator import DEFAULT_PARAM_FACTOR, simulate


def format_bytes(nbytes: float) -> str:
    """A size for a message: exact below 1 MB (``4,100 bytes``), else in GB with the exact count beside it
    (``17.18 GB = 17,179,869,184 bytes``), so that two sizes that round alike still read differently."""
    exact = f"{nbytes:,.0f} bytes"
    return exact if nbytes < 1e6 else f"{nbytes / 1e9:.2f} GB = {exact}"


class PlacementInfeasibleError(ValueError):
    """The graph cannot be placed on the cluster within device memory."""


def unit_static(graph: ComputationGraph, param_factor: float = DEFAULT_PARAM_FACTOR) -> np.ndarray:
    """Static bytes of each placement unit: ``param_bytes * param_factor`` over its ops."""
    return np.bincount(graph.unit_of, weights=graph.param_bytes * param_factor, minlength=graph.num_units)


def unit_peak_activations(graph: ComputationGraph) -> np.ndarray:
    """Bytes of each unit's outputs live at the peak of the single-device step (see the module docstring).

    Computed once per graph from the simulator's own schedule of every op on one device."""
    cached = graph.derived.get("unit_peak_activations")
    if cached is not None:
        return cached
    one = Cluster([Device("reference", 1.0, 10**300)], [[0.0]], [[0.0]], name="reference")  # memory: no limit
    placement = np.zeros(graph.num_nodes, dtype=np.int64)
    schedule = simulate(graph, placement, one).schedule
    outputs = buffer_lifetimes(graph, placement.tolist(), schedule.op_start.tolist(), schedule.op_end.tolist(),
                               [], 1)[0]  # one per op, in node order
    alloc = np.array([a for a, _, _ in outputs])
    free = np.array([f for _, f, _ in outputs])
    nbytes = graph.output_bytes.astype(np.float64)
    lasting = free > alloc  # a buffer lives on [alloc, free): one of zero length never counts
    times = np.concatenate([free[lasting], alloc[lasting]])
    deltas = np.concatenate([-nbytes[lasting], nbytes[lasting]])
    frees_first = np.concatenate([np.zeros(lasting.sum()), np.ones(lasting.sum())])
    order = np.lexsort((frees_first, times))
    level = np.cumsum(deltas[order])
    peak_time = float(times[order][int(np.argmax(level))]) if level.size else 0.0
    live = (alloc <= peak_time) & (free > peak_time)
    result = np.bincount(graph.unit_of, weights=np.where(live, nbytes, 0.0), minlength=graph.num_units)
    graph.derived["unit_peak_activations"] = result
    return result


def unit_demand(graph: ComputationGraph, param_factor: float = DEFAULT_PARAM_FACTOR) -> np.ndarray:
    """Budgeted bytes of each placement unit: static plus activations at the peak (see the module docstring)."""
    return unit_static(graph, param_factor) + unit_peak_activations(graph)


def memory_lower_bounds(graph: ComputationGraph, cluster: Cluster,
                        param_factor: float = DEFAULT_PARAM_FACTOR) -> None:
    """Raise :class:`PlacementInfeasibleError`, with the numbers, when no placement of ``graph`` on ``cluster`` can
    fit: the units' static memory exceeds the cluster's total, or an op's :func:`op_lower_bounds` exceeds the
    largest device. (Passing is no promise that a placement fits: the simulator decides that.)"""
    checked_instance("graph", graph, ComputationGraph)
    checked_instance("cluster", cluster, Cluster)
    static = unit_static(graph, param_factor)
    total, capacity = float(static.sum()), float(cluster.memory.sum())
    if total > capacity:
        raise PlacementInfeasibleError(
            f"graph {graph.name!r} cannot fit: its parameters alone need {format_bytes(total)} (params x "
            f"{param_factor:g}), more than the cluster's {format_bytes(capacity)} in all")
    need = op_lower_bounds(graph, param_factor)
    worst = int(np.argmax(need))
    if need[worst] > cluster.memory.max():
        raise PlacementInfeasibleError(
            f"graph {graph.name!r} cannot fit: op {graph.nodes[worst].id!r} needs at least "
            f"{format_bytes(need[worst])} on its device while it runs (params x {param_factor:g} of its unit, its "
            f"output and its inputs), more than the largest device has ({format_bytes(cluster.memory.max())})")


def op_lower_bounds(graph: ComputationGraph, param_factor: float = DEFAULT_PARAM_FACTOR) -> np.ndarray:
    """Bytes each op's device holds, in any placement, while the op runs: its unit's static memory, its output,
    and each input (the producer's output on the same device, or the received copy: at least the smaller)."""
    inputs = np.zeros(graph.num_nodes)
    np.add.at(inputs, graph.edge_dst, np.minimum(graph.output_bytes[graph.edge_src], graph.edge_bytes))
    return unit_static(graph, param_factor)[graph.unit_of] + graph.output_bytes + inputs


def overflow_bytes(peak: np.ndarray, cluster: Cluster) -> np.ndarray:
    """Bytes over memory, summed over devices, for each row of ``peak`` (B x M simulated peaks, bytes)."""
    return np.maximum(0.0, peak - cluster.memory[None, :]).sum(axis=1)


class MemoryBudget:
    """Free budgeted bytes per device while a placer assigns units (see the module docstring).

    Raises :class:`PlacementInfeasibleError` up front only when no placement can fit
    (:func:`memory_lower_bounds`). Charging a unit to a device without room is allowed (its free budget goes
    negative, ``overflowed`` becomes True): the simulator and the repair decide.
    """

    def __init__(self, graph: ComputationGraph, cluster: Cluster, param_factor: float = DEFAULT_PARAM_FACTOR):
        memory_lower_bounds(graph, cluster, param_factor)
        self.demand = unit_demand(graph, param_factor)
        self.free = cluster.memory.astype(np.float64).copy()
        self.overflowed = False

    def fits(self, unit: int) -> np.ndarray:
        """Boolean mask of the devices with budgeted room for ``unit``."""
        return self.free >= self.demand[unit]

    def room_or_freest(self, unit: int) -> np.ndarray:
        """The devices with room for ``unit``; if none has, the one with the most free budget."""
        mask = self.fits(unit)
        if not mask.any():
            mask[int(np.argmax(self.free))] = True
        return mask

    def take(self, unit: int, device: int) -> None:
        """Charge ``unit`` to ``device`` (past its budget if need be)."""
        self.free[device] -= self.demand[unit]
        self.overflowed |= bool(self.free[device] < 0)

    def first_fit(self, unit: int, preferred: list[int] | np.ndarray) -> int:
        """The first device of ``preferred`` with room for ``unit`` (else the freest of them), charged."""
        room = self.fits(unit)
        chosen = next((int(d) for d in preferred if room[d]), None)
        if chosen is None:
            chosen = int(max(preferred, key=lambda d: self.free[d]))
        self.take(unit, chosen)
        return chosen


def units_in_topological_order(graph: ComputationGraph) -> np.ndarray:
    """Units sorted by the smallest topological index among their ops."""
    return unit_graph(graph).topological_order
