"""The order of a placement's pipeline stages: one definition for the simulator, the plans and the placers.

A placement's devices form pipeline stages in *program order*: the order of the graph's ops by their topological
index (``graph.topo_index``, Kahn's order taking the smallest node index first, so node order on a traced graph,
whose nodes are in program order). Three readers share it:

* the simulator's 1F1B cap (``docs/spec/simulator.md`` section 3a): stage ``s[d]`` orders the devices holding a
  forward op by their first forward op (:func:`stage_order`);
* the split points a pipeline runtime runs (:func:`placement_env.plan.split_points.to_split_points`): the same,
  counting the forward ops of a submodule only (the model's glue runs where its inputs are);
* the placers' contiguous mode (:mod:`placement_env.plan.stages`): placement units in program order, by their
  first op (:func:`program_order`), and the runs of devices along them (:func:`stage_runs`).
"""

from __future__ import annotations

import numpy as np

from placement_env.graph.model import ComputationGraph
from placement_env.graph.units import unit_graph


def forward_ops(graph: ComputationGraph) -> np.ndarray:
    """Whether each op is a forward op: a phase other than ``backward`` and ``update`` (``forward`` or none)."""
    cached = graph.derived.get("forward_ops")
    if cached is None:
        cached = np.array([node.phase not in ("backward", "update") for node in graph.nodes], dtype=bool)
        cached.setflags(write=False)
        graph.derived["forward_ops"] = cached
    return cached


def stage_order(graph: ComputationGraph, placement: np.ndarray,
                counted: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``(devices, first)``: the devices holding a counted op, in stage order (by the smallest topological index of
    a counted op on them), and ``first[k]`` the index of stage ``k``'s first counted op.

    Args:
        graph: the graph.
        placement: a device per op (int).
        counted: which ops count (bool per op); default: the forward ops (:func:`forward_ops`).
    """
    mask = forward_ops(graph) if counted is None else np.asarray(counted, dtype=bool)
    ops = np.flatnonzero(mask)
    ops = ops[np.argsort(graph.topo_index[ops], kind="stable")]
    devices, at = np.unique(np.asarray(placement, dtype=np.int64)[ops], return_index=True)
    by_first = np.argsort(at, kind="stable")
    return devices[by_first], ops[at[by_first]]


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


__all__ = ["forward_ops", "program_order", "stage_order", "stage_runs"]
