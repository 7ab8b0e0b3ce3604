"""Pipeline stages of a placement: contiguity, the nearest contiguous placement, and moves that keep it.

A pipeline runtime (``torch.distributed.pipelining``, DeepSpeed's ``PipelineModule``) runs a placement only when
its devices are *stages in program order*: along the placement units in program order (by the smallest
topological index of their ops, a forward op in a training graph, whose backward ops share its unit), each
device's units form one run, and a device's run never resumes after another device's began. Such a placement
is *contiguous*. On a module-granular graph (``from_torch(..., colocate_modules=...)``: every module one
colocation group) no placer splits a module, since every placer decides per unit, so a contiguous placement
of it is what :func:`placement_env.plan.split_points.to_split_points` turns into split points.

* :func:`program_order` and :func:`is_contiguous`;
* :func:`nearest_contiguous`: a placement made contiguous with the least op cost moved (the devices in the
  order of the weighted median position of their units, then the cuts by dynamic programming);
* :func:`stage_neighbours`: the moves of the searches in contiguous mode (``local-search``, ``anneal``): a
  stage boundary shifted by some units, two stages' devices exchanged (or a stage moved to an unused device),
  a stage cut in two with one part on an unused device. Each keeps a contiguous placement contiguous.

Every stage is worth a device: on a graph with parameters, :func:`nearest_contiguous` and
:func:`stage_neighbours` never leave a stage whose ops hold no parameter (an input, a view, a dropout, the model's
glue): such a stage joins the next stage with parameters (the last one joins the one before it), through
:func:`stages_with_parameters`. A pipeline runtime cannot train a stage without parameters (its optimizer gets an
empty parameter list) and such a stage only adds a send to the step. A placement may so use fewer devices than
the cluster has. Nor does a stage begin at a module the program enters more than once (:func:`unit_can_begin`):
its units join the stage before, up to the first unit where a stage may begin.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from placement_env.graph.model import ComputationGraph
from placement_env.graph.units import unit_graph
from placement_env.plan.module_tree import PlacedModules, parents

SHIFT_SHARE = 0.6  # of the neighbours: boundary shifts; then RELABEL_SHARE exchanges, the rest stage cuts
RELABEL_SHARE = 0.2


def program_order(graph: ComputationGraph) -> np.ndarray:
    """The placement units in program order: by the smallest topological index of their ops (int64)."""
    return unit_graph(graph).topological_order


def stage_runs(units_in_order: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(starts, devices)`` of the runs of equal devices along ``units_in_order`` (a device per unit in program
    order): run ``k`` begins at position ``starts[k]`` and is on ``devices[k]``."""
    if units_in_order.size == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    starts = np.flatnonzero(np.r_[True, units_in_order[1:] != units_in_order[:-1]])
    return starts, units_in_order[starts]


def is_contiguous(graph: ComputationGraph, placement) -> bool:
    """Whether ``placement`` (a device per node, colocation honoured) is contiguous (module docstring)."""
    units = graph.unit_placement(np.asarray(placement, dtype=np.int64))
    _, devices = stage_runs(units[program_order(graph)])
    return np.unique(devices).size == devices.size


def unit_parameters(graph: ComputationGraph) -> np.ndarray:
    """Parameter bytes of each placement unit's ops, in program order (:func:`program_order`)."""
    cached = graph.derived.get("unit_parameters_in_order")
    if cached is None:
        by_unit = np.bincount(graph.unit_of, weights=graph.param_bytes, minlength=graph.num_units)
        cached = graph.derived["unit_parameters_in_order"] = by_unit[program_order(graph)]
    return cached


def unit_can_begin(graph: ComputationGraph) -> np.ndarray | None:
    """Per placement unit in program order, whether a pipeline stage may begin at it: its first op's module, or an
    ancestor that begins at that op, is a module the program enters once (a runtime begins a stage at each call:
    a dropout a block calls twice would begin two), and no unit of a module the program enters more than once
    has a forward op before it and one after its first op (that module's calls enclose the ops between them: a cut
    there would split it). None for a graph without module names (nothing is exported from it, so every cut is
    allowed)."""
    if "unit_can_begin" not in graph.derived:
        allowed = None
        if any(node.module for node in graph.nodes):
            modules = PlacedModules(graph, np.zeros(graph.num_nodes, dtype=np.int64))
            forward = np.array([node.phase not in ("backward", "update") for node in graph.nodes])
            index = np.arange(graph.num_nodes)
            first_op = np.full(graph.num_units, graph.num_nodes)
            np.minimum.at(first_op, graph.unit_of, index)
            last_op = np.full(graph.num_units, -1)
            np.maximum.at(last_op, graph.unit_of[forward], index[forward])
            # only a module entered more than once encloses other units' ops in its calls; a unit that spans the
            # program for another reason (a tensor colocated with its views in every layer: llama's rotary cos
            # and sin) does not, and a stage that begins inside its span receives the tensor as runtimes do
            repeated = np.array([graph.nodes[i].module in modules.called_again for i in first_op.tolist()])
            last_op[~repeated] = -1
            allowed = np.zeros(graph.num_units, dtype=bool)
            for u, i in enumerate(first_op.tolist()):
                module = graph.nodes[i].module
                allowed[u] = bool(module) and any(modules.first.get(a) == i and a not in modules.called_again
                                                  for a in parents(module))
            order = program_order(graph)
            reach = np.maximum.accumulate(np.r_[-1, last_op[order][:-1]])  # the latest forward op before each
            allowed = allowed[order] & (reach < first_op[order])
        graph.derived["unit_can_begin"] = allowed
    return graph.derived["unit_can_begin"]


def glue_unsplittable_starts(seq: np.ndarray, can_begin: np.ndarray) -> np.ndarray:
    """``seq`` (a device per unit in program order, contiguous) with every stage that would begin at a unit where
    none may begin (``can_begin`` false) begun at its first unit where one may, the units before it joining the
    stage before (a stage with no such unit joins it whole). Contiguity is kept."""
    starts, devices = stage_runs(seq)
    if starts.size < 2 or can_begin[starts[1:]].all():
        return seq
    out = seq.copy()
    ends = np.r_[starts[1:], seq.size]
    for k in range(1, starts.size):
        begin = int(starts[k])
        if can_begin[begin]:
            continue
        allowed = np.flatnonzero(can_begin[begin:ends[k]])
        stop = begin + int(allowed[0]) if allowed.size else int(ends[k])
        out[begin:stop] = out[begin - 1]
    return out


def merge_weightless_runs(seq: np.ndarray, weight: np.ndarray, can_begin: np.ndarray | None = None) -> np.ndarray:
    """``seq`` (a device per unit in program order, contiguous) with every run of units of zero total ``weight``
    given to the next run of positive weight (the last runs to the one before them); ``seq`` itself when no run
    is weightless or none has weight. Contiguity is kept: a weightless run takes the device of a run next to it
    once the runs between have done the same. With ``can_begin`` (:func:`unit_can_begin`), stages are first
    begun only where one may (:func:`glue_unsplittable_starts`)."""
    if can_begin is not None:
        seq = glue_unsplittable_starts(seq, can_begin)
    starts, devices = stage_runs(seq)
    if starts.size < 2:
        return seq
    run_weight = np.add.reduceat(weight, starts)
    heavy = np.flatnonzero(run_weight > 0)
    if heavy.size == 0 or heavy.size == starts.size:
        return seq
    at = np.minimum(np.searchsorted(heavy, np.arange(starts.size)), heavy.size - 1)
    return np.repeat(devices[heavy[at]], np.diff(np.r_[starts, seq.size]))


def stages_with_parameters(graph: ComputationGraph, placement) -> np.ndarray:
    """A contiguous ``placement`` (a device per node) with every stage without parameters joined to a neighbouring
    stage (module docstring); unchanged on a graph without parameters."""
    units = graph.unit_placement(np.asarray(placement, dtype=np.int64))
    order = program_order(graph)
    merged = merge_weightless_runs(units[order], unit_parameters(graph), unit_can_begin(graph))
    result = np.empty(graph.num_units, dtype=np.int64)
    result[order] = merged
    return graph.expand_unit_placement(result)


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
