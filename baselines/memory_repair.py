"""The simulator's word on memory: every placer's result is checked, and repaired if it runs out.

The placers decide with the budgets of :mod:`baselines.memory` (static memory plus activations at the peak),
an estimate: a placement within them can exceed a device's memory in the simulator (devices peak at different
times, received copies add to them), and a placer that found no device with budgeted room for a unit put it
where the overflow was least. :func:`within_memory` wraps a placer so that this never reaches the user:

* a placement the simulator finds within memory on every device is returned unchanged;
* otherwise :func:`repair_memory` moves units off the device that overflows most, one move per round. A move
  is one unit (the ``candidates`` largest budgets on that device) or a block of its units contiguous in
  topological order (the first or last 2, 4, 8, ... of them, as a pipeline boundary shifts), to any other
  device, or a swap of one of its biggest units with a smaller one of another device. Each round simulates
  every move in one :func:`placement_env.simulate_batch` call and keeps the one with the least total overflow
  (bytes over memory, summed over devices), then the shortest step; ties go to the first (deterministic);
* when no move lowers the overflow, the same repair starts again from :func:`~baselines.split.split`'s
  placement (contiguous pieces, memory first), and when that is stuck too, :func:`search_for_fit` tries every
  placement of a small graph (so a small problem is called infeasible only when none fits) or searches a big
  one by random moves and swaps; only when all fail does the placer raise
  :class:`~baselines.memory.PlacementInfeasibleError`, naming the device, its simulated peak and its memory.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np

from placement_env.cluster import Cluster
from placement_env.graph.model import ComputationGraph
from placement_env.sim.pipeline import PLAIN_STEP, Step
from placement_env.sim.simulator import DEFAULT_PARAM_FACTOR, Simulator, check_placement

from .local_search import refine
from .memory import PlacementInfeasibleError, format_bytes, overflow_bytes, unit_demand, units_in_topological_order
from .split import split
from .starts import run_placer

Placer = Callable[..., np.ndarray]  # (graph, cluster, seed, *, step=...) -> device per node
CANDIDATES = 32  # single units tried per round: the largest budgets on the device that overflows most
SWAPS = 8  # swaps tried per round and other device: its smallest units with the biggest of the worst device


def _candidates(units: np.ndarray, worst: int, demand: np.ndarray, position: np.ndarray, m: int,
                candidates: int) -> np.ndarray:
    """The unit placements one round tries (rows, a device per unit): moves off ``worst`` of its biggest single
    units and of blocks from either end of its units in topological order, to every other device; and swaps of
    its biggest units with the smallest of every other device."""
    on_worst = np.nonzero(units == worst)[0]
    biggest = on_worst[np.argsort(-demand[on_worst], kind="stable")]
    sets = [biggest[i:i + 1] for i in range(min(candidates, biggest.size))]
    in_order = on_worst[np.argsort(position[on_worst], kind="stable")]
    size = 2
    while size < in_order.size:
        sets += [in_order[:size], in_order[-size:]]
        size *= 2
    rows = []
    for moved in sets:
        for target in range(m):
            if target != worst:
                row = units.copy()
                row[moved] = target
                rows.append(row)
    for target in range(m):
        if target == worst:
            continue
        there = np.nonzero(units == target)[0]
        smallest = there[np.argsort(demand[there], kind="stable")[:SWAPS]]
        for a in biggest[:SWAPS]:
            for b in smallest:
                if demand[b] < demand[a]:
                    row = units.copy()
                    row[a], row[b] = target, worst
                    rows.append(row)
    return np.array(rows, dtype=np.int64).reshape(-1, units.size)


def repair_memory(graph: ComputationGraph, cluster: Cluster, placement, candidates: int = CANDIDATES,
                  param_factor: float = DEFAULT_PARAM_FACTOR, step: Step = PLAIN_STEP) -> np.ndarray:
    """``placement`` if it fits in every device's memory in the simulator (of ``step``), else a repaired copy.

    See the module docstring. Raises :class:`PlacementInfeasibleError` when no move lowers the overflow.
    """
    p = check_placement(graph, placement, cluster)
    simulator = Simulator(graph, cluster, param_factor, *step)
    memory = cluster.memory.astype(np.float64)
    _, peak, _ = simulator.run(p)
    over = float(overflow_bytes(peak[None, :], cluster)[0])
    if over == 0.0:
        return p
    units = graph.unit_placement(p)
    demand = unit_demand(graph, param_factor)
    position = np.empty(graph.num_units, dtype=np.int64)
    position[units_in_topological_order(graph)] = np.arange(graph.num_units)
    m = cluster.num_devices
    while over > 0.0:
        worst = int(np.argmax(peak - memory))
        rows = _candidates(units, worst, demand, position, m, candidates)
        batch = simulator.simulate_batch(rows[:, graph.unit_of], check=False) if len(rows) else None
        row_over = overflow_bytes(batch.peak_memory, cluster) if batch is not None else np.zeros(0)
        best = int(np.lexsort((batch.makespan, row_over))[0]) if batch is not None else -1
        if best < 0 or not row_over[best] < over:  # one device, or no move helps
            raise PlacementInfeasibleError(
                f"no placement within memory found: device {worst} peaks at {format_bytes(peak[worst])} in the "
                f"simulator, over its {format_bytes(memory[worst])}, and no move of its units off it lowers the "
                f"overflow ({format_bytes(over)} in all)")
        assert batch is not None
        units, peak, over = rows[best], batch.peak_memory[best], float(row_over[best])
    return graph.expand_unit_placement(units)


EXHAUSTIVE = 20_000  # at most this many unit placements: the last resort tries them all
SEARCH_FOR_FIT_SECONDS = 5.0  # the last resort's random search stops after this long (a 40,000-op chain that fits
#                               nowhere took 19 s per placer without it, a 100,000-op one minutes)


def search_for_fit(graph: ComputationGraph, cluster: Cluster, seed: int = 0,
                   param_factor: float = DEFAULT_PARAM_FACTOR, step: Step = PLAIN_STEP) -> np.ndarray | None:
    """The last resort when the repair is stuck: a placement within memory, or None when none was found.

    With at most :data:`EXHAUSTIVE` unit placements it simulates every one (so None means none exists) and returns
    the fastest that fits. Otherwise it runs :func:`~baselines.local_search.refine` (random moves and swaps, least
    overflow first) from :func:`~baselines.split.split`'s placement for up to 300 rounds or
    :data:`SEARCH_FOR_FIT_SECONDS`, whichever ends first.
    """
    m, nu = cluster.num_devices, graph.num_units
    simulator = Simulator(graph, cluster, param_factor, *step)
    if m ** nu <= EXHAUSTIVE:
        rows = np.array(np.meshgrid(*[np.arange(m)] * nu, indexing="ij")).reshape(nu, -1).T
        batch = simulator.simulate_batch(rows[:, graph.unit_of], check=False)
        fits = np.nonzero(~batch.oom)[0]
        if fits.size == 0:
            return None
        return graph.expand_unit_placement(rows[fits[np.argmin(batch.makespan[fits])]])
    result = refine(graph, cluster, split(graph, cluster, seed, step=step), seed=seed, max_rounds=300,
                    patience=300, time_budget=SEARCH_FOR_FIT_SECONDS, step=step)
    return result.placement if result.overflow == 0.0 else None


def within_memory(placer: Placer) -> Placer:
    """``placer`` whose placements are checked, and if need be repaired, by :func:`repair_memory`; the result
    takes ``step=`` (the step placements are judged by: the repair's, and the placer's own where it judges by
    the simulator and so takes ``step`` itself; the heuristics place by their own model and ignore it)."""
    @functools.wraps(placer)
    def checked(graph: ComputationGraph, cluster: Cluster, seed: int = 0, *, step: Step = PLAIN_STEP) -> np.ndarray:
        placement = run_placer(placer, graph, cluster, seed, step)
        try:
            return repair_memory(graph, cluster, placement, step=step)
        except PlacementInfeasibleError as first:
            reason = first
        try:
            return repair_memory(graph, cluster, split(graph, cluster, seed, step=step), step=step)
        except PlacementInfeasibleError:
            pass
        found = search_for_fit(graph, cluster, seed, step=step)
        if found is None:
            raise reason
        return found

    return checked
