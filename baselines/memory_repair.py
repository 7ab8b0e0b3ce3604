"""The simulator's word on memory: every placer's result is checked, and repaired if it runs out.

The placers decide with the budgets of :mod:`baselines.memory`, which hold
every output for the whole step but leave received copies out. On a cluster
whose memory the graph nearly fills, a placement within those budgets can
still exceed a device's memory in the simulator. :func:`within_memory` wraps a
placer so that this never reaches the user:

* a placement the simulator finds within memory on every device is returned
  unchanged (the common case: no shipped graph on P100 clusters needs more);
* otherwise :func:`repair_memory` moves units off the device that overflows
  most, one unit per round. Each round tries the ``candidates`` units on that
  device with the largest budgets, each on every other device, in one
  :func:`placement_env.simulate_batch` call, and keeps the move with the
  least total overflow (bytes over memory, summed over devices), then the
  shortest makespan; ties go to the first candidate (deterministic);
* when no move lowers the overflow, it raises
  :class:`~baselines.memory.PlacementInfeasibleError` naming the device and
  its simulated peak.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np

from placement_env.cluster import Cluster
from placement_env.graph.model import ComputationGraph
from placement_env.sim.simulator import DEFAULT_PARAM_FACTOR, Simulator, check_placement

from .memory import PlacementInfeasibleError, format_bytes, overflow_bytes, unit_demand

Placer = Callable[[ComputationGraph, Cluster, int], np.ndarray]  # (graph, cluster, seed) -> device per node
CANDIDATES = 64  # units tried per round: the largest budgets on the device that overflows most


def repair_memory(graph: ComputationGraph, cluster: Cluster, placement, candidates: int = CANDIDATES,
                  param_factor: float = DEFAULT_PARAM_FACTOR) -> np.ndarray:
    """``placement`` if it fits in every device's memory in the simulator, else a repaired copy.

    See the module docstring. Raises :class:`PlacementInfeasibleError` when no
    move of a unit lowers the overflow.
    """
    p = check_placement(graph, placement, cluster)
    simulator = Simulator(graph, cluster, param_factor)
    memory = cluster.memory.astype(np.float64)
    _, peak, _ = simulator.run(p)
    over = float(overflow_bytes(peak[None, :], cluster)[0])
    if over == 0.0:
        return p
    units = graph.unit_placement(p)
    demand = unit_demand(graph, param_factor)
    m = cluster.num_devices
    while over > 0.0:
        worst = int(np.argmax(peak - memory))
        on_worst = np.nonzero(units == worst)[0]
        picked = on_worst[np.argsort(-demand[on_worst], kind="stable")[:candidates]]
        targets = np.array([e for e in range(m) if e != worst], dtype=np.int64)
        rows = np.repeat(units[None, :], picked.size * targets.size, axis=0)
        rows[np.arange(rows.shape[0]), np.repeat(picked, targets.size)] = np.tile(targets, picked.size)
        batch = simulator.simulate_batch(rows[:, graph.unit_of], check=False)
        row_over = overflow_bytes(batch.peak_memory, cluster)
        best = int(np.lexsort((batch.makespan, row_over))[0]) if rows.shape[0] else -1
        if best < 0 or not row_over[best] < over:  # one device, or no move helps
            raise PlacementInfeasibleError(
                f"the placement exceeds device {worst}'s memory in the simulator (peak {format_bytes(peak[worst])}, "
                f"memory {format_bytes(memory[worst])}) and no move of one of its units lowers the overflow")
        units, peak, over = rows[best], batch.peak_memory[best], float(row_over[best])
    return graph.expand_unit_placement(units)


def within_memory(placer: Placer) -> Placer:
    """``placer`` whose placements are checked, and if need be repaired, by :func:`repair_memory`."""

    @functools.wraps(placer)
    def checked(graph: ComputationGraph, cluster: Cluster, seed: int = 0) -> np.ndarray:
        return repair_memory(graph, cluster, placer(graph, cluster, seed))

    return checked
