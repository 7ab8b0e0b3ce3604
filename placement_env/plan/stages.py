"""Pipeline stages of a placement: contiguity, and stages that each hold parameters and begin where a runtime can.

A pipeline runtime (``torch.distributed.pipelining``, DeepSpeed's ``PipelineModule``) runs a placement only when
its devices are *stages in program order*: along the placement units in program order
(:func:`placement_env.graph.stage_order.program_order`: by the smallest topological index of their ops, a forward
op in a training graph, whose backward ops share its unit), each device's units form one run, and a device's run
never resumes after another device's began. Such a placement is *contiguous* (:func:`is_contiguous`). On a
module-granular graph (``from_torch(..., colocate_modules=...)``: every module one colocation group) no placer
splits a module, since every placer decides per unit, so a contiguous placement of it is what
:func:`placement_env.plan.split_points.to_split_points` turns into split points.

Every stage is worth a device: on a graph with parameters a stage whose ops hold no parameter (an input, a view,
a dropout, the model's glue) joins the next stage with parameters (the last one joins the one before it), through
:func:`stages_with_parameters`. A pipeline runtime cannot train a stage without parameters (its optimizer gets an
empty parameter list) and such a stage only adds a send to the step. A placement may so use fewer devices than
the cluster has. Nor does a stage begin at a module the program enters more than once (:func:`unit_can_begin`):
its units join the stage before, up to the first unit where a stage may begin.

The searches that move stages (the placers' contiguous mode, :mod:`baselines.stages`) build on these.
"""

from __future__ import annotations

import numpy as np

from placement_env.graph.model import ComputationGraph
from placement_env.graph.stage_order import program_order, stage_runs
from placement_env.plan.module_tree import PlacedModules, parents


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


__all__ = ["glue_unsplittable_starts", "is_contiguous", "merge_weightless_runs", "stages_with_parameters",
           "unit_can_begin", "unit_parameters"]
