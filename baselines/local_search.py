"""Local search over placement units, judged by the simulator.

From a starting placement, each round draws a batch of neighbours, half
*moves* (one unit to another device) and half *swaps* (two units on different
devices exchange devices), evaluates them in one :func:`simulate_batch` call
and keeps the best if it improves on the current placement. Placements are
compared by (memory overflow in bytes, makespan): an out-of-memory placement
is first driven back under capacity, and no accepted step ever increases the
overflow. It stops after ``max_rounds`` rounds, ``patience`` rounds in a row
without improvement, or when not one more neighbour is expected to be judged
within ``time_budget`` seconds from the call (a round judges only as many as
fit: :class:`~baselines.search_clock.SearchClock`), whichever comes first.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection
from dataclasses import dataclass

import numpy as np

from placement_env.cluster import Cluster
from placement_env.graph.model import ComputationGraph
from placement_env.graph.stage_order import program_order
from placement_env.plan.stages import unit_can_begin, unit_parameters
from placement_env.sim.pipeline import PLAIN_STEP, Step
from placement_env.sim.simulator import DEFAULT_PARAM_FACTOR, Simulator, check_placement

from .memory import overflow_bytes
from .search_clock import SearchClock
from .stages import nearest_contiguous, stage_neighbours
from .starts import best_of_starts


@dataclass
class RefineResult:
    placement: np.ndarray
    makespan: float
    overflow: float
    rounds: int
    evaluations: int
    history: list[float]  # makespan after each round, seconds


def refine(graph: ComputationGraph, cluster: Cluster, placement, seed: int = 0, max_rounds: int = 200,
           batch: int = 32, patience: int = 40, time_budget: float | None = None,
           step: Step = PLAIN_STEP, contiguous: bool = False, until_fits: bool = False) -> RefineResult:
    """Improve ``placement`` (a device per node, colocation honoured) by moves and swaps of units; with
    ``time_budget``, within that many seconds of the call (a round judges only the neighbours expected to be
    judged in the time left, none when not one fits). ``contiguous``: the placement is first made contiguous
    (:func:`~baselines.stages.nearest_contiguous`) and the moves are :func:`~baselines.stages.stage_neighbours`,
    so that the result is contiguous. ``until_fits``: stop as soon as the placement fits in memory (a repair)."""
    clock = SearchClock(time_budget)
    rng = np.random.default_rng(seed)
    p = check_placement(graph, placement, cluster)
    if contiguous:
        p = nearest_contiguous(graph, p)
    order = program_order(graph) if contiguous else np.zeros(0, dtype=np.int64)
    weight = unit_parameters(graph) if contiguous else None
    can_begin = unit_can_begin(graph) if contiguous else None
    m = cluster.num_devices
    current = graph.unit_placement(p)
    simulator = Simulator(graph, cluster, DEFAULT_PARAM_FACTOR, *step)
    first_mk, first_over = judge_unit_placements(simulator, current[None, :])
    if time_budget is not None:
        judged = time.perf_counter()  # timed again: the first call may load the compiled kernel
        judge_unit_placements(simulator, current[None, :])
        clock.time_simulation(time.perf_counter() - judged)
    cur_mk, cur_over = float(first_mk[0]), float(first_over[0])
    history, evaluations, stale, rounds = [cur_mk], 1, 0, 0
    while rounds < max_rounds and stale < patience and m > 1 and not (until_fits and cur_over == 0.0):
        size = clock.step(batch)  # the whole batch, or what the time left allows (0: stop)
        if size == 0:
            break
        rounds += 1
        cand = (stage_neighbours(current, order, m, size, rng, weight, can_begin=can_begin) if contiguous
                else neighbours(current, m, size, rng))
        mk, over = judge_unit_placements(simulator, cand)
        evaluations += size
        best = int(np.lexsort((mk, over))[0])
        if (over[best], mk[best]) < (cur_over, cur_mk):
            current, cur_mk, cur_over, stale = cand[best].copy(), float(mk[best]), float(over[best]), 0
        else:
            stale += 1
        history.append(cur_mk)
    return RefineResult(graph.expand_unit_placement(current), cur_mk, cur_over, rounds, evaluations, history)


def neighbours(units: np.ndarray, num_devices: int, count: int, rng: np.random.Generator) -> np.ndarray:
    """``count`` unit placements (rows) next to ``units`` (a device per placement unit), as :func:`refine` draws them.

    The first ``count - count // 2`` rows each move one unit, drawn at random,
    to another device; the others each swap the devices of two units on
    different devices (such a row stays ``units`` when every unit is on one
    device). ``num_devices`` must be at least 2.
    """
    nu = units.shape[0]
    cand = np.repeat(units[None, :], count, axis=0)
    n_moves = count - count // 2
    moved = rng.integers(0, nu, n_moves)
    shift = rng.integers(1, num_devices, n_moves)
    cand[np.arange(n_moves), moved] = (units[moved] + shift) % num_devices
    for row in range(n_moves, count):
        a, b = rng.integers(0, nu, 2)
        if units[a] == units[b]:
            b = _other_device_unit(units, a, rng)
            if b < 0:
                continue
        cand[row, a], cand[row, b] = units[b], units[a]
    return cand


def judge_unit_placements(simulator: Simulator, unit_placements: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(makespans s, overflows bytes)`` of unit placements (B x units, int64) in one batched simulation; the
    rows are expanded to ops only when some unit holds several ops (else they already are a device per op)."""
    graph = simulator.graph
    rows = unit_placements if graph.num_units == graph.num_nodes else np.take(unit_placements, graph.unit_of, axis=1)
    result = simulator.simulate_batch(rows, check=False)
    return result.makespan, overflow_bytes(result.peak_memory, simulator.cluster)


def _other_device_unit(units: np.ndarray, a: int, rng: np.random.Generator) -> int:
    others = np.nonzero(units != units[a])[0]
    return int(rng.choice(others)) if others.size else -1


def local_search_from_best(start_placers: dict[str, Callable[..., np.ndarray]], starts: int = 3,
                           seconds_per_start: float = 0.8, budget_seconds: float | None = None,
                           quick_starts: Collection[str] = (), contiguous: bool = False):
    """A placer: :func:`refine` from each of the ``starts`` best distinct placements of ``start_placers`` that fit
    in memory (:func:`~baselines.starts.ranked_starts`; on a graph of more than
    :data:`~baselines.starts.LARGE_GRAPH_OPS` ops only those named in ``quick_starts`` run), keeping the best result.

    By default each refinement stops after its default rounds or ``seconds_per_start`` seconds (which only graphs
    of a few thousand ops reach), so that a 2,000-op graph is placed in a few seconds. With ``budget_seconds``,
    the whole call takes that long: what the start placers leave of it is shared by the refinements, which then
    run without a round limit. Why 3 starts: ``docs/placers.md``. ``contiguous``: the refinements keep the
    placement contiguous (:func:`refine`), and so should the start placers.
    """

    def placer(graph: ComputationGraph, cluster: Cluster, seed: int = 0, *, step: Step = PLAIN_STEP) -> np.ndarray:
        def search(placement: np.ndarray, seconds: float | None) -> RefineResult:
            if seconds is None:
                return refine(graph, cluster, placement, seed=seed, time_budget=seconds_per_start, step=step,
                              contiguous=contiguous)
            return refine(graph, cluster, placement, seed=seed, max_rounds=2**62, patience=2**62,
                          time_budget=seconds, step=step, contiguous=contiguous)

        return best_of_starts(graph, cluster, seed, start_placers, starts, search, budget_seconds, quick_starts,
                              step)

    placer.__name__ = "local_search"
    placer.__doc__ = (f"the {starts} best of {', '.join(start_placers)} refined by moves and swaps of units "
                      f"(local_search.refine); the best result")
    return placer


def local_search_from(start_placer):
    """A placer: ``start_placer``'s placement refined by :func:`refine` with its default budget."""

    def placer(graph: ComputationGraph, cluster: Cluster, seed: int = 0) -> np.ndarray:
        return refine(graph, cluster, start_placer(graph, cluster, seed), seed=seed).placement

    placer.__name__ = f"local_search_from_{start_placer.__name__}"
    placer.__doc__ = f"{start_placer.__name__} refined by moves and swaps of units (local_search.refine)."
    return placer
