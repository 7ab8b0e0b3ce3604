"""METIS partitioning (Karypis & Kumar, via pymetis): balance compute, cut as few bytes as possible.

Placement units become vertices weighted by their run time (microseconds on
the reference device); unit-to-unit edges are weighted by the bytes they carry
(kilobytes, summed over the ops' edges). Part ``d`` targets a share of the
total compute proportional to device ``d``'s speed. Memory budgets are then
enforced by moving the cheapest units off over-full devices to the device
with the most free budget.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator

import numpy as np

from placement_env.cluster import Cluster
from placement_env.graph.model import ComputationGraph

from .memory import MemoryBudget


def metis(graph: ComputationGraph, cluster: Cluster, seed: int = 0) -> np.ndarray:
    import pymetis

    budget = MemoryBudget(graph, cluster)
    m, nu = cluster.num_devices, graph.num_units
    if m == 1 or nu == 1:
        units = np.zeros(nu, dtype=np.int64)
    else:
        unit_cost = np.bincount(graph.unit_of, weights=graph.cost, minlength=nu)
        us, ud = graph.unit_of[graph.edge_src], graph.unit_of[graph.edge_dst]
        keep = us != ud
        a, b = np.minimum(us[keep], ud[keep]), np.maximum(us[keep], ud[keep])
        pair = a * nu + b
        uniq, inv = np.unique(pair, return_inverse=True)
        weight = np.bincount(inv, weights=graph.edge_bytes[keep], minlength=uniq.size)
        ea, eb = uniq // nu, uniq % nu
        src = np.concatenate([ea, eb])
        dst = np.concatenate([eb, ea])
        w = np.concatenate([weight, weight])
        order = np.lexsort((dst, src))
        src, dst, w = src[order], dst[order], w[order]
        xadj = np.zeros(nu + 1, dtype=np.int64)
        np.cumsum(np.bincount(src, minlength=nu), out=xadj[1:])
        vweights = np.maximum(1, np.round(unit_cost * 1e6)).astype(np.int64)
        eweights = np.maximum(1, np.round(w / 1e3)).astype(np.int64)
        opts = pymetis.Options(seed=int(seed))
        adjacency = pymetis.CSRAdjacency(xadj.tolist(), dst.tolist())
        with _c_output_silenced():  # METIS prints "***Cannot bisect a graph with 0 vertices!" and the like
            _, parts = pymetis.part_graph(m, adjacency, vweights=vweights.tolist(), eweights=eweights.tolist(),
                                          tpwgts=(cluster.speed / cluster.speed.sum()).tolist(), options=opts)
        units = np.asarray(parts, dtype=np.int64)
    return graph.expand_unit_placement(_repair_memory(units, budget, graph))


@contextlib.contextmanager
def _c_output_silenced() -> Iterator[None]:
    """File descriptors 1 and 2 go to the null device for the block: METIS writes its notes there from C (on more
    parts than a graph's units can fill), above a command's table, where Python cannot catch them."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, 1)
        os.dup2(null, 2)
        yield
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in (*saved, null):
            os.close(fd)


def _repair_memory(units: np.ndarray, budget: MemoryBudget, graph: ComputationGraph) -> np.ndarray:
    """Charge every unit; move the cheapest units of an over-full device to the freest device."""
    units = units.copy()
    unit_cost = np.bincount(graph.unit_of, weights=graph.cost, minlength=graph.num_units)
    overflow = []
    for u in np.argsort(-budget.demand, kind="stable").tolist():  # big units first, small ones move
        if budget.fits(u)[units[u]]:
            budget.take(u, int(units[u]))
        else:
            overflow.append(u)
    for u in sorted(overflow, key=lambda u: unit_cost[u]):
        room = np.nonzero(budget.room_or_freest(u))[0]
        d = int(room[np.argmax(budget.free[room])])
        budget.take(u, d)
        units[u] = d
    return units
