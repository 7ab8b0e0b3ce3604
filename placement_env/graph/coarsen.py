"""Coarsening: merge placement units until a graph has at most ``max_units`` of them.

:func:`coarsen` returns the same ops and edges with merged colocation groups,
so the simulator still runs every op and a placement of the coarse units
expands to the ops with ``graph.expand_unit_placement`` (the mapping is the
colocation itself). Existing groups are never split. Merges only ever
contract units that cannot create a cycle in the unit graph of the forward
edges (edges between two non-backward ops; all edges of a forward graph):

1. HSDAG's rule: a unit is merged into its only successor when it is that
   successor's only predecessor;
2. cheapest first: along an edge ``a -> b`` whose endpoints have the smallest
   total cost, when ``a`` is ``b``'s only predecessor or ``b`` is ``a``'s only
   successor (no other path from a to b can exist then);

   neither makes a unit cost more than twice the average cost per unit of the
   result (on a long chain, rule 1 alone would otherwise fold most of the chain
   into one unit, too big for any device's memory);
3. if units remain above ``max_units``: a topological order of the units cut
   into ``max_units`` contiguous runs of about equal cost (a contiguous run of
   a topological order is convex, so this cannot create a cycle either).

:func:`coarsen_to_fit` coarsens a graph until it fits a padding of units and
unit edges, such as a trained policy's.
"""

from __future__ import annotations

import heapq

import numpy as np

from placement_env.checks import checked_count, checked_instance
from placement_env.graph.model import ComputationGraph, Node
from placement_env.graph.units import unit_graph


class _Units:
    """Union-find over units with quotient adjacency kept for the representatives."""

    def __init__(self, graph: ComputationGraph) -> None:
        nu = graph.num_units
        self.parent = list(range(nu))
        self.cost = np.bincount(graph.unit_of, weights=graph.cost, minlength=nu).tolist()
        self.succ: list[set[int]] = [set() for _ in range(nu)]
        self.pred: list[set[int]] = [set() for _ in range(nu)]
        backward = [n.phase == "backward" for n in graph.nodes]
        for s, d in zip(graph.edge_src.tolist(), graph.edge_dst.tolist()):
            if backward[s] or backward[d]:
                continue
            a, b = int(graph.unit_of[s]), int(graph.unit_of[d])
            if a != b:
                self.succ[a].add(b)
                self.pred[b].add(a)
        self.count = nu

    def find(self, x: int) -> int:
        while self.parent[x] != x:
            self.parent[x] = self.parent[self.parent[x]]
            x = self.parent[x]
        return x

    def merge(self, a: int, b: int) -> int:
        """Merge unit ``a`` into ``b`` (both representatives); returns the representative."""
        self.parent[a] = b
        self.cost[b] += self.cost[a]
        for s in self.succ[a]:
            self.pred[s].discard(a)
            if s != b:
                self.pred[s].add(b)
                self.succ[b].add(s)
        for p in self.pred[a]:
            self.succ[p].discard(a)
            if p != b:
                self.succ[p].add(b)
                self.pred[b].add(p)
        self.succ[b].discard(b)
        self.pred[b].discard(b)
        self.succ[a], self.pred[a] = set(), set()
        self.count -= 1
        return b

    def roots(self) -> list[int]:
        return [u for u in range(len(self.parent)) if self.parent[u] == u]


def coarsen(graph: ComputationGraph, max_units: int, name: str | None = None) -> ComputationGraph:
    """``graph`` with its placement units merged down to at most ``max_units`` (see the module docstring)."""
    checked_instance("graph", graph, ComputationGraph)
    checked_count("max_units", max_units)
    units = _Units(graph)
    cap = 2.0 * sum(units.cost) / max_units  # no merge makes a unit costlier than twice the average of the result
    if units.count > max_units:
        # 1. single successor with a single predecessor (HSDAG)
        changed = True
        while changed and units.count > max_units:
            changed = False
            for u in units.roots():
                if units.parent[u] != u or len(units.succ[u]) != 1:
                    continue
                (w,) = units.succ[u]
                if units.pred[w] == {u} and units.cost[u] + units.cost[w] <= cap:
                    units.merge(u, w)
                    changed = True
                    if units.count <= max_units:
                        break
        # 2. cheapest safe merges along edges
        heap = [(units.cost[a] + units.cost[b], a, b) for a in units.roots() for b in units.succ[a]]
        heapq.heapify(heap)
        while heap and units.count > max_units:
            total, a, b = heapq.heappop(heap)
            if units.parent[a] != a or units.parent[b] != b or b not in units.succ[a]:
                continue
            if total != units.cost[a] + units.cost[b]:
                heapq.heappush(heap, (units.cost[a] + units.cost[b], a, b))
                continue
            if total > cap:  # the heap is ordered by cost: every later pair is over the cap too
                break
            if units.pred[b] == {a} or units.succ[a] == {b}:
                keep = units.merge(a, b)
                for s in units.succ[keep]:
                    heapq.heappush(heap, (units.cost[keep] + units.cost[s], keep, s))
                for p in units.pred[keep]:
                    heapq.heappush(heap, (units.cost[p] + units.cost[keep], p, keep))
        # 3. contiguous runs of a topological order
        if units.count > max_units:
            _merge_topological_runs(units, max_units)
    groups = {root: f"coarse{i}" for i, root in enumerate(units.roots())}
    nodes = [Node(n.id, n.op, n.cost, n.output_bytes, n.param_bytes, groups[units.find(int(graph.unit_of[i]))],
                  n.flops, n.phase, n.module, n.fixed_cost) for i, n in enumerate(graph.nodes)]
    return ComputationGraph(nodes, graph.edges(), name=name or f"{graph.name}-coarse{max_units}", batch=graph.batch)


def coarsen_to_fit(graph: ComputationGraph, max_units: int, max_unit_edges: int) -> ComputationGraph:
    """``graph`` if it has at most ``max_units`` units and ``max_unit_edges`` unit edges, else coarsened until it has.

    The padding of a trained policy (its observation space) fixes both
    limits. Coarsening to ``max_units`` can leave more unit edges than the
    padding holds, so the unit count is lowered, in proportion to the edges
    still over, until both fit; a single unit has no unit edges, so this ends.
    """
    checked_instance("graph", graph, ComputationGraph)
    checked_count("max_units", max_units)
    checked_count("max_unit_edges", max_unit_edges)
    coarse, target = graph, max_units + 1
    while True:
        units = unit_graph(coarse)
        if units.num_units <= max_units and units.num_edges <= max_unit_edges:
            return coarse
        scaled = int(units.num_units * min(1.0, max_unit_edges / max(1, units.num_edges)))
        target = max(1, min(target - 1, max_units, scaled))
        coarse = coarsen(graph, target)


def _merge_topological_runs(units: _Units, max_units: int) -> None:
    roots = units.roots()
    indeg = {u: len(units.pred[u]) for u in roots}
    ready = [u for u in roots if indeg[u] == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        u = heapq.heappop(ready)
        order.append(u)
        for s in units.succ[u]:
            indeg[s] -= 1
            if indeg[s] == 0:
                heapq.heappush(ready, s)
    total = sum(units.cost[u] for u in order)
    runs: list[list[int]] = []
    current: list[int] = []
    acc = 0.0
    target = total / max_units
    for i, u in enumerate(order):
        current.append(u)
        acc += units.cost[u]
        remaining_units = len(order) - i - 1
        remaining_runs = max_units - len(runs) - 1
        if (acc >= target and remaining_runs > 0) or remaining_units == remaining_runs:
            if remaining_runs > 0:
                runs.append(current)
                current, acc = [], 0.0
    if current:
        runs.append(current)
    for run in runs:
        keep = run[-1]
        for u in run[:-1]:
            keep = units.merge(units.find(u), units.find(keep))
