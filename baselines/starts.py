"""Where a search starts: the fast placers' placements that fit in memory, fastest first."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from placement_env.cluster import Cluster
from placement_env.graph.model import ComputationGraph
from placement_env.sim.simulator import Simulator, check_placement

from .memory import PlacementInfeasibleError


def ranked_starts(graph: ComputationGraph, cluster: Cluster, start_placers: dict[str, Callable[..., np.ndarray]],
                  seed: int = 0) -> tuple[list[tuple[float, str, np.ndarray]], float]:
    """``([(makespan s, placer, placement), ...] fastest first, seconds spent)``: the distinct placements of
    ``start_placers`` that the simulator finds within memory. Raises the last placer's
    :class:`~baselines.memory.PlacementInfeasibleError` when none fits."""
    began = time.perf_counter()
    simulator = Simulator(graph, cluster)
    found: list[tuple[float, str, np.ndarray]] = []
    reason = PlacementInfeasibleError(f"no start placer found a placement of graph {graph.name!r} within memory")
    for name, start in start_placers.items():
        try:
            placement = start(graph, cluster, seed)
        except PlacementInfeasibleError as error:
            reason = error
            continue
        makespan, peak, _ = simulator.run(check_placement(graph, placement, cluster))
        if np.all(peak <= cluster.memory) and not any(np.array_equal(placement, p) for _, _, p in found):
            found.append((makespan, name, placement))
    if not found:
        raise reason
    found.sort(key=lambda item: item[0])
    return found, time.perf_counter() - began


def best_of_starts(graph: ComputationGraph, cluster: Cluster, seed: int,
                   start_placers: dict[str, Callable[..., np.ndarray]], starts: int,
                   search: Callable[[np.ndarray, float | None], Any], budget_seconds: float | None) -> np.ndarray:
    """Run ``search(placement, seconds)`` from each of the ``starts`` fastest placements of ``start_placers`` that
    fit; return the placement of the best result (least ``overflow``, then ``makespan``). With ``budget_seconds``,
    what the start placers leave of it is shared equally (``seconds``); without, ``seconds`` is None."""
    found, spent = ranked_starts(graph, cluster, start_placers, seed)
    chosen = found[:starts]
    share = None if budget_seconds is None else max(0.0, budget_seconds - spent) / len(chosen)
    results = [search(placement, share) for _, _, placement in chosen]
    return min(results, key=lambda r: (r.overflow, r.makespan)).placement
