"""Moves of the placers' contiguous mode: the nearest contiguous placement, and neighbours that keep it so.

Contiguity and stages with parameters are defined in :mod:`placement_env.plan.stages`; here are the searches'
parts built on them:

* :func:`nearest_contiguous`: a placement made contiguous with the least op cost moved (the devices in the
  order of the weighted median position of their units, then the cuts by dynamic programming);
* :func:`stage_neighbours`: the moves of the searches in contiguous mode (``local-search``, ``anneal``): a
  stage boundary shifted by some units, two stages' devices exchanged (or a stage moved to an unused device),
  a stage cut in two with one part on an unused device. Each keeps a contiguous placement contiguous.

On a graph with parameters, both leave no stage whose ops hold no parameter, and begin no stage where a runtime
cannot (:func:`~placement_env.plan.stages.merge_weightless_runs`).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from placement_env.graph.model import ComputationGraph
from placement_env.graph.stage_order import program_order, stage_runs
from placement_env.plan.stages import merge_weightless_runs, stages_with_parameters, unit_can_begin, unit_parameters

SHIFT_SHARE = 0.6  # of the neighbours: boundary shifts; then RELABEL_SHARE exchanges, the rest stage cuts
RELABEL_SHARE = 0.2


def nearest_contiguous(graph: ComputationGraph, placement) -> np.ndarray:
    """A contiguous placement (a device per node) close to ``placement``, every stage with parameters
    (:func:`stages_with_parameters`); ``placement`` itself when it is both.

    The devices keep the order of the cost-weighted median program position of their units; the cuts between
    them are those that keep the most op cost (each unit weighted by the cost of its ops, plus a share of the
    mean so that free units count too) on the device ``placement`` gave it, by dynamic programming in time
    linear in the units and the devices. A device may end with no units (its stage empty)."""
    units = graph.unit_placement(np.asarray(placement, dtype=np.int64))
    order = program_order(graph)
    seq = units[order]
    _, run_devices = stage_runs(seq)
    if np.unique(run_devices).size == run_devices.size:
        return stages_with_parameters(graph, graph.expand_unit_placement(units))
    cost = np.bincount(graph.unit_of, weights=graph.cost, minlength=graph.num_units)[order]
    weight = cost + 1e-3 * max(float(cost.mean()), 1e-12)
    devices = np.unique(seq)
    median = []
    for d in devices.tolist():
        at = np.flatnonzero(seq == d)
        cumulative = np.cumsum(weight[at])
        median.append(at[int(np.searchsorted(cumulative, cumulative[-1] / 2))])
    devices = devices[np.argsort(median, kind="stable")]
    n = seq.size
    value = np.full(n + 1, -np.inf)
    value[0] = 0.0  # value[i]: the most weight kept with the stages so far covering positions [0, i)
    choice = np.zeros((devices.size, n + 1), dtype=np.int64)
    positions = np.arange(n + 1)
    for k, d in enumerate(devices.tolist()):
        kept = np.r_[0.0, np.cumsum(np.where(seq == d, weight, 0.0))]
        before = value - kept  # the stage runs from j to i: value[j] + kept[i] - kept[j]
        running = np.maximum.accumulate(before)
        choice[k] = np.maximum.accumulate(np.where(before == running, positions, 0))
        value = kept + running
    cuts = [n]
    for k in range(devices.size - 1, -1, -1):
        cuts.append(int(choice[k, cuts[-1]]))
    cuts.reverse()  # cuts[k] .. cuts[k + 1]: stage k, on devices[k]
    made = np.empty(n, dtype=np.int64)
    for k, d in enumerate(devices.tolist()):
        made[cuts[k]:cuts[k + 1]] = d
    result = np.empty(graph.num_units, dtype=np.int64)
    result[order] = merge_weightless_runs(made, unit_parameters(graph), unit_can_begin(graph))
    return graph.expand_unit_placement(result)


def uniform_boundary(starts: np.ndarray, devices: np.ndarray, rng: np.random.Generator) -> tuple[int, bool]:
    """A shift's boundary and side as the plain search draws them: boundary ``b`` (between stages ``b - 1`` and
    ``b``) uniformly among the stages' boundaries, and whether the left stage grows (else the right one) with
    probability one half."""
    b = int(rng.integers(1, starts.size))
    return b, bool(rng.random() < 0.5)


def stage_neighbours(units: np.ndarray, order: np.ndarray, num_devices: int, count: int,
                     rng: np.random.Generator, weight: np.ndarray | None = None,
                     boundary: Callable[[np.ndarray, np.ndarray, np.random.Generator], tuple[int, bool]]
                     = uniform_boundary, can_begin: np.ndarray | None = None) -> np.ndarray:
    """``count`` contiguous unit placements (rows) next to the contiguous ``units`` (a device per unit; ``order``:
    :func:`program_order`), drawn as the module docstring says: a shift moves 1 to all of the units of one side
    of a boundary, log-uniformly many, to the stage across it (a stage emptied drops out); an exchange gives a
    stage another device (the two stages' devices swap when that device holds one); a cut puts the tail or the
    head of a stage of two units or more, cut at a uniformly drawn point, on an unused device. A move that does
    not apply (no boundary, no unused device) is replaced by one that does; a row stays ``units`` when none
    applies. With ``weight`` (:func:`unit_parameters`), a stage a move leaves without parameters joins its
    neighbour (:func:`merge_weightless_runs`; with ``can_begin``, :func:`unit_can_begin`, a stage begins only
    where one may). ``boundary(starts, devices, rng)`` draws a shift's boundary and
    side (the stages' first positions in ``order`` and their devices; :func:`uniform_boundary`, or a steered
    search's draw)."""
    seq = units[order]
    n = seq.size
    starts, devices = stage_runs(seq)
    ends = np.r_[starts[1:], n]
    unused = np.setdiff1d(np.arange(num_devices), devices)
    rows = np.repeat(units[None, :], count, axis=0)
    cuttable = np.flatnonzero(ends - starts >= 2) if unused.size else np.zeros(0, dtype=np.int64)
    applies = {"shift": starts.size >= 2, "exchange": num_devices >= 2 and starts.size > 0,
               "cut": cuttable.size > 0}
    for r in range(count):
        draw = rng.random()
        kind = "shift" if draw < SHIFT_SHARE else "exchange" if draw < SHIFT_SHARE + RELABEL_SHARE else "cut"
        if not applies[kind]:
            kind = next((k for k in ("cut", "shift", "exchange") if applies[k]), "")
        if kind == "shift":
            b, left_grows = boundary(starts, devices, rng)  # the boundary between stages b - 1 and b
            at = int(starts[b])
            if left_grows:  # the left stage grows into the right one
                rows[r, order[at:at + _log_uniform(int(ends[b] - at), rng)]] = devices[b - 1]
            else:
                rows[r, order[at - _log_uniform(int(at - starts[b - 1]), rng):at]] = devices[b]
        elif kind == "exchange":
            k = int(rng.integers(starts.size))
            target = int((devices[k] + rng.integers(1, num_devices)) % num_devices)
            rows[r, order[starts[k]:ends[k]]] = target
            other = np.flatnonzero(devices == target)
            if other.size:
                rows[r, order[starts[other[0]]:ends[other[0]]]] = devices[k]
        elif kind == "cut":
            k = int(cuttable[rng.integers(cuttable.size)])
            cut = int(rng.integers(starts[k] + 1, ends[k]))
            piece = order[cut:ends[k]] if rng.random() < 0.5 else order[starts[k]:cut]
            rows[r, piece] = unused[rng.integers(unused.size)]
        if weight is not None:
            rows[r, order] = merge_weightless_runs(rows[r, order], weight, can_begin)
    return rows


def _log_uniform(most: int, rng: np.random.Generator) -> int:
    """An integer in 1..most, log-uniformly distributed."""
    return min(most, max(1, int(np.exp(rng.uniform(0.0, np.log(most + 1))))))
