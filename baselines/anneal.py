"""``anneal``: batched simulated annealing over placement units, judged by the simulator.

The strongest plain search of the toolkit, the peer a learned placer must beat at the same wall-clock budget.
From a start placement, each step draws ``batch`` neighbours of the current placement and judges them in one
:func:`~placement_env.simulate_batch` call:

* **moves**: one unit to another device;
* **swaps**: two units on different devices exchange devices;
* **block moves**: a unit and up to ``block_max - 1`` of its nearest units in the unit graph (breadth first,
  edges taken both ways) move together to one device, so that a producer and its consumers can change device
  without paying for a transfer in between (a move of one unit at a time would have to cross that hill).

One neighbour of the batch replaces the current placement, drawn with probability proportional to
``exp(-d / T)``, where ``d`` is its makespan increase relative to the current makespan (negative for a gain) and
the temperature ``T`` falls geometrically from ``t_start`` to ``t_end`` over the budget: at a high temperature
the walk takes worse steps and leaves its basin, at a low one it takes the best of the batch. Only neighbours no
worse in memory overflow are drawn (a start out of memory first takes the least overflow), so a start within
memory stays within memory. The best placement seen is returned.

In contiguous mode (``contiguous=True``, for pipeline runtimes) the neighbours are instead the moves of
:func:`~baselines.stages.stage_neighbours` (boundary shifts, stage exchanges, stage cuts), each contiguous.

The search stops after ``max_steps`` steps when given (deterministic, for tests), and within ``time_budget``
seconds counted from the call (its set-up included): a step judges only as many neighbours as are expected to
be judged within the time left (:class:`~baselines.search_clock.SearchClock`; all ``batch`` of them but on a
graph of hundreds of thousands of ops), and none is begun when not one fits. The defaults of
:class:`AnnealConfig` and how they were chosen: ``docs/placers.md``.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from placement_env.cluster import Cluster
from placement_env.graph.model import ComputationGraph
from placement_env.graph.stage_order import program_order
from placement_env.graph.units import unit_edges
from placement_env.plan.stages import unit_can_begin, unit_parameters
from placement_env.sim.pipeline import PLAIN_STEP, Step
from placement_env.sim.simulator import DEFAULT_PARAM_FACTOR, Simulator, check_placement

from .interrupts import with_best
from .local_search import RefineResult, judge_unit_placements
from .search_clock import SearchClock
from .stages import nearest_contiguous, stage_neighbours
from .starts import best_of_starts


@dataclass(frozen=True)
class AnnealConfig:
    """The annealing's knobs (see the module docstring); temperatures are relative makespan increases."""

    batch: int = 64
    block_max: int = 12
    move_share: float = 0.4
    swap_share: float = 0.2
    t_start: float = 0.001
    t_end: float = 0.00001


class Proposals(Protocol):
    """Draws a step's neighbours: ``proposals(current, batch, rng)`` -> ``batch`` unit placements (rows) next to
    ``current`` (a device per unit)."""

    def __call__(self, current: np.ndarray, batch: int, rng: np.random.Generator) -> np.ndarray: ...


class NearestUnits:
    """For each unit, up to ``count`` other units in breadth-first order over the unit graph (edges taken both
    ways, a unit's neighbours in the order of the unit graph's edges), found when first asked for: ``near[u]``
    is an int64 array, ``len(near)`` the number of units. Built in time linear in the unit edges; each unit's
    search visits at most ``count`` units' neighbours, so a million-unit graph costs only the units drawn."""

    def __init__(self, graph: ComputationGraph, count: int) -> None:
        edges, num_units = unit_edges(graph), graph.num_units
        a, b = edges[0], edges[1]
        source = np.concatenate([a, b])
        edge = np.concatenate([np.arange(a.size), np.arange(a.size)])
        order = np.lexsort((edge, source))  # by unit, then by edge: the order neighbours were listed in
        self._target = np.concatenate([b, a])[order]
        self._offsets = np.zeros(num_units + 1, dtype=np.int64)
        np.cumsum(np.bincount(source, minlength=num_units), out=self._offsets[1:])
        self.count, self.num_units = int(count), num_units
        self._found: dict[int, np.ndarray] = {}

    def __len__(self) -> int:
        return self.num_units

    def __iter__(self) -> Iterator[np.ndarray]:
        return (self[unit] for unit in range(self.num_units))

    def __getitem__(self, start: int) -> np.ndarray:
        start = int(start)
        if not 0 <= start < self.num_units:
            raise IndexError(f"unit {start} out of range for {self.num_units} units")
        found = self._found.get(start)
        if found is None:
            found = self._found[start] = self._search(start)
        return found

    def _search(self, start: int) -> np.ndarray:
        offsets, target = self._offsets, self._target
        seen, queue = {start}, deque([start])
        order: list[int] = []
        while queue and len(order) < self.count:
            u = queue.popleft()
            for v in target[offsets[u]:offsets[u + 1]].tolist():
                if v not in seen:
                    seen.add(v)
                    order.append(v)
                    queue.append(v)
                    if len(order) == self.count:
                        break
        return np.array(order, dtype=np.int64)


def nearest_units(graph: ComputationGraph, count: int) -> NearestUnits:
    """For each unit, up to ``count`` other units in breadth-first order over the unit graph (both directions):
    a :class:`NearestUnits`, indexed by unit."""
    return NearestUnits(graph, count)


def anneal_units(graph: ComputationGraph, cluster: Cluster, start_units: np.ndarray, seed: int = 0,
                 time_budget: float | None = 5.0, max_steps: int | None = None,
                 config: AnnealConfig = AnnealConfig(), step: Step = PLAIN_STEP,
                 contiguous: bool = False, proposals: Proposals | None = None) -> RefineResult:
    """Anneal from ``start_units`` (a device per unit); returns the best placement seen (a device per node) with its
    makespan (s), overflow (bytes), steps taken, evaluations and the best makespan after each step.
    ``contiguous``: the start is made contiguous (:func:`~baselines.stages.nearest_contiguous`) and the neighbours
    are :func:`~baselines.stages.stage_neighbours`, so that every placement judged is contiguous.
    ``proposals``: draws the neighbours instead (a steered search: :mod:`agents.steering`); everything else,
    the temperatures, the acceptance and the clock, is this annealing's."""
    if time_budget is None and max_steps is None:
        raise ValueError("anneal needs a time budget or a number of steps")
    clock = SearchClock(time_budget)  # the set-up counts: on a graph of a million ops it takes seconds
    rng = np.random.default_rng(seed)
    simulator = Simulator(graph, cluster, DEFAULT_PARAM_FACTOR, *step)  # placements judged by ``step``
    m, nu = cluster.num_devices, graph.num_units
    current = np.asarray(start_units, dtype=np.int64).copy()
    if contiguous:
        current = graph.unit_placement(nearest_contiguous(graph, graph.expand_unit_placement(current)))

    def judge(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return judge_unit_placements(simulator, rows)

    mk, over = judge(current[None, :])
    if time_budget is not None:
        judged = time.perf_counter()  # timed again: the first call may load the compiled kernel
        judge(current[None, :])
        clock.time_simulation(time.perf_counter() - judged)
    cur_mk, cur_over = float(mk[0]), float(over[0])
    best, best_key = current.copy(), (cur_over, cur_mk)
    history, evaluations, steps = [cur_mk], 1, 0
    if m < 2 or nu == 0:
        return RefineResult(graph.expand_unit_placement(best), cur_mk, cur_over, 0, evaluations, history)
    near = nearest_units(graph, config.block_max - 1)
    order = program_order(graph) if contiguous else np.zeros(0, dtype=np.int64)
    weight = unit_parameters(graph) if contiguous else None
    can_begin = unit_can_begin(graph) if contiguous else None
    try:
        while max_steps is None or steps < max_steps:
            batch = clock.step(config.batch)  # the whole batch, or what the time left allows (0: stop)
            if batch == 0:
                break
            progress = steps / max_steps if max_steps is not None else clock.progress()
            temperature = config.t_start * (config.t_end / config.t_start) ** min(progress, 1.0)
            if proposals is not None:
                rows = proposals(current, batch, rng)
            elif contiguous:
                rows = stage_neighbours(current, order, m, batch, rng, weight, can_begin=can_begin)
            else:
                rows = unit_neighbours(current, near, m, batch, rng, config)
            mk, over = judge(rows)
            evaluations += batch
            steps += 1
            allowed = over <= cur_over
            if over.min() < cur_over:  # out of memory: the least overflow first
                j = int(np.lexsort((mk, over))[0])
            elif not allowed.any():  # every neighbour needs more memory: stay
                history.append(best_key[1])
                continue
            else:  # Boltzmann choice among the neighbours no worse in memory: exp(-relative increase / T)
                scale = max(cur_mk, 1e-300) * temperature
                logits = np.where(allowed, -(mk - cur_mk) / scale, -np.inf)
                weights = np.exp(logits - logits.max())
                j = int(rng.choice(batch, p=weights / weights.sum()))
            current, cur_mk, cur_over = rows[j], float(mk[j]), float(over[j])
            if (cur_over, cur_mk) < best_key:
                best, best_key = current.copy(), (cur_over, cur_mk)
            history.append(best_key[1])
    except KeyboardInterrupt as stop:  # Ctrl-C or SIGTERM: the best placement seen goes with it (interrupts.py)
        with_best(stop, graph.expand_unit_placement(best), best_key[1], best_key[0])
        raise
    return RefineResult(graph.expand_unit_placement(best), best_key[1], best_key[0], steps, evaluations, history)


def unit_neighbours(current: np.ndarray, near: NearestUnits, num_devices: int, batch: int,
                    rng: np.random.Generator, config: AnnealConfig = AnnealConfig(),
                    moved: np.ndarray | None = None, target: np.ndarray | None = None) -> np.ndarray:
    """``batch`` unit placements (rows) next to ``current``, as the annealing draws them (module docstring): the
    first ``move_share`` of them moves of one unit, then ``swap_share`` swaps, the rest block moves. Row ``r``
    moves unit ``moved[r]`` (to ``target[r]``, a move or a block move); both are drawn uniformly when not given
    (a unit; a device other than its own), as a steered search draws them otherwise."""
    m, nu = num_devices, current.size
    n_moves, n_swaps = int(batch * config.move_share), int(batch * config.swap_share)
    rows = np.repeat(current[None, :], batch, axis=0)
    if moved is None or target is None:
        moved = rng.integers(0, nu, batch)
        target = (current[moved] + rng.integers(1, m, batch)) % m
    rows[np.arange(n_moves), moved[:n_moves]] = target[:n_moves]
    for r in range(n_moves, n_moves + n_swaps):
        a = moved[r]
        others = np.nonzero(current != current[a])[0]
        if others.size:
            b = others[rng.integers(others.size)]
            rows[r, a], rows[r, b] = current[b], current[a]
    for r in range(n_moves + n_swaps, batch):
        a = moved[r]
        block = near[a][: rng.integers(1, config.block_max)]
        rows[r, a] = target[r]
        rows[r, block] = target[r]
    return rows


def anneal(graph: ComputationGraph, cluster: Cluster, placement, seed: int = 0, time_budget: float | None = 5.0,
           max_steps: int | None = None, config: AnnealConfig = AnnealConfig()) -> RefineResult:
    """:func:`anneal_units` from ``placement`` (a device per node, colocation honoured)."""
    p = check_placement(graph, placement, cluster)
    return anneal_units(graph, cluster, graph.unit_placement(p), seed, time_budget, max_steps, config)


ANNEAL_SECONDS = 4.0  # the default budget of the ``anneal`` placer


def anneal_from_best(start_placers: dict, budget_seconds: float = ANNEAL_SECONDS, starts: int = 3,
                     config: AnnealConfig = AnnealConfig(), quick_starts: Collection[str] = (),
                     contiguous: bool = False,
                     proposals: Callable[[ComputationGraph, Cluster, Step], Proposals] | None = None):
    """A placer: :func:`anneal_units` from each of the ``starts`` fastest placements of ``start_placers`` that fit
    in memory (:func:`~baselines.starts.ranked_starts`; on a graph of more than
    :data:`~baselines.starts.LARGE_GRAPH_OPS` ops only those named in ``quick_starts`` run), each for an equal
    share of what the start placers leave of ``budget_seconds``; the best result, the whole call within
    ``budget_seconds``. Why 3 starts: ``docs/placers.md``. ``contiguous``: every placement judged is contiguous
    (:func:`anneal_units`), and so should the start placers' be. ``proposals``: makes each search's
    :class:`Proposals` from the graph, cluster and step (a steered search); its set-up counts in the budget.
    """

    def placer(graph: ComputationGraph, cluster: Cluster, seed: int = 0, *, step: Step = PLAIN_STEP) -> np.ndarray:
        def search(placement: np.ndarray, seconds: float | None) -> RefineResult:
            began = time.perf_counter()
            steering = None if proposals is None else proposals(graph, cluster, step)
            if seconds is not None:  # the steering's set-up is part of this search's share
                seconds = max(seconds - (time.perf_counter() - began), 1e-3)
            return anneal_units(graph, cluster, graph.unit_placement(placement), seed, seconds, config=config,
                                step=step, contiguous=contiguous, proposals=steering)

        return best_of_starts(graph, cluster, seed, start_placers, starts, search, budget_seconds, quick_starts,
                              step)

    placer.__name__ = "anneal"
    placer.__doc__ = (f"simulated annealing for {budget_seconds:g} s in all from the {starts} best of "
                      f"{', '.join(start_placers)}")
    return placer


AnnealSettings = AnnealConfig  # the name before 0.2.0, still importable (CHANGELOG)
