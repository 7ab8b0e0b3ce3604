"""Where a search starts: the fast placers' placements that fit in memory, fastest first."""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable, Collection
from typing import Any

import numpy as np

from placement_env.cluster import Cluster
from placement_env.graph.model import ComputationGraph
from placement_env.sim.pipeline import PLAIN_STEP, Step
from placement_env.sim.simulator import DEFAULT_PARAM_FACTOR, Simulator, check_placement

from .interrupts import with_best
from .memory import PlacementInfeasibleError

LARGE_GRAPH_OPS = 200_000  # beyond this many ops, a search starts only from its quick start placers
START_TIME_RATIO = 10  # a start placer may take this many times as long as another one on the same graph


def run_placer(placer: Callable[..., np.ndarray], graph: ComputationGraph, cluster: Cluster, seed: int,
               step: Step = PLAIN_STEP) -> np.ndarray:
    """``placer``'s placement, given ``step`` when it takes one (the placers that judge by the simulator do; a
    heuristic places by its own model)."""
    if "step" in inspect.signature(placer, follow_wrapped=False).parameters:  # a wrapper's own, not the placer's
        return placer(graph, cluster, seed, step=step)
    return placer(graph, cluster, seed)


def ranked_starts(graph: ComputationGraph, cluster: Cluster, start_placers: dict[str, Callable[..., np.ndarray]],
                  seed: int = 0, budget_seconds: float | None = None,
                  quick: Collection[str] = (),
                  step: Step = PLAIN_STEP) -> tuple[list[tuple[float, str, np.ndarray]], float]:
    """``([(makespan s, placer, placement), ...] fastest first, seconds spent)``: the distinct placements of
    ``start_placers`` that the simulator finds within memory, the placers run in their order.

    With ``budget_seconds`` (the whole search's), placers run until one fits; a further one begins only when it
    is expected to end within half of the budget, expected to take up to :data:`START_TIME_RATIO` times as long as
    the longest placer so far (their times differ by up to that ratio on one graph: HEFT 43 s, m-TOPO 4.6 s on a
    million-op chain, ``docs/placers.md``), timed after one simulation has loaded the compiled kernel (half a
    second, once per process). On a graph of more than :data:`LARGE_GRAPH_OPS` ops, only the
    placers named in ``quick`` (those of about linear time) run, when ``quick`` names any of ``start_placers``.
    Raises the last placer's :class:`~baselines.memory.PlacementInfeasibleError` when none fits."""
    began = time.perf_counter()
    if graph.num_nodes > LARGE_GRAPH_OPS and any(name in start_placers for name in quick):
        start_placers = {name: start for name, start in start_placers.items() if name in quick}
    simulator = Simulator(graph, cluster, DEFAULT_PARAM_FACTOR, *step)  # the start placers are judged by ``step``
    if budget_seconds is not None:  # load the compiled kernel now, so that no start placer is timed with it
        simulator.run(np.zeros(graph.num_nodes, dtype=np.int64))
    found: list[tuple[float, str, np.ndarray]] = []
    reason = PlacementInfeasibleError(f"no start placer found a placement of graph {graph.name!r} within memory")
    longest = 0.0
    for name, start in start_placers.items():
        placer_began = time.perf_counter()
        if (found and budget_seconds is not None
                and placer_began - began + START_TIME_RATIO * longest > budget_seconds / 2):
            break
        try:
            placement = run_placer(start, graph, cluster, seed, step)
        except PlacementInfeasibleError as error:
            reason = error
            longest = max(longest, time.perf_counter() - placer_began)
            continue
        makespan, peak, _ = simulator.run(check_placement(graph, placement, cluster))
        longest = max(longest, time.perf_counter() - placer_began)
        if np.all(peak <= cluster.memory) and not any(np.array_equal(placement, p) for _, _, p in found):
            found.append((makespan, name, placement))
    if not found:
        raise reason
    found.sort(key=lambda item: item[0])
    return found, time.perf_counter() - began


def best_of_starts(graph: ComputationGraph, cluster: Cluster, seed: int,
                   start_placers: dict[str, Callable[..., np.ndarray]], starts: int,
                   search: Callable[[np.ndarray, float | None], Any], budget_seconds: float | None,
                   quick: Collection[str] = (), step: Step = PLAIN_STEP) -> np.ndarray:
    """Run ``search(placement, seconds)`` from each of the ``starts`` fastest placements of ``start_placers`` that
    fit (:func:`ranked_starts`, given ``budget_seconds`` and ``quick``); return the placement of the best result
    (least ``overflow``, then ``makespan``). With ``budget_seconds``, each search gets an equal part of what is left
    of it when the search begins (``seconds``, zero when the start placers used it all); without, ``seconds`` is
    None. Ctrl-C (or SIGTERM) during a search carries on the best placement of the searches so far
    (:mod:`baselines.interrupts`)."""
    began = time.perf_counter()
    found, _ = ranked_starts(graph, cluster, start_placers, seed, budget_seconds, quick, step)
    chosen = found[:starts]
    results = []
    try:
        for i, (_, _, placement) in enumerate(chosen):
            share = None
            if budget_seconds is not None:  # what is left, shared by the searches still to run
                left = budget_seconds - (time.perf_counter() - began)
                share = max(0.0, left) / (len(chosen) - i)
            results.append(search(placement, share))
    except KeyboardInterrupt as stop:  # Ctrl-C or SIGTERM: the best start and finished searches go with it too
        for makespan, _, placement in chosen[:1]:  # the fastest start within memory
            with_best(stop, placement, makespan, 0.0)
        for result in results:
            with_best(stop, result.placement, result.makespan, result.overflow)
        raise
    return min(results, key=lambda r: (r.overflow, r.makespan)).placement
