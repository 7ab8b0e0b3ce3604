"""Orders in which the sequential environment visits placement units.

The unit graph may have cycles (an op and its gradient share a unit), so
"topological" means: units by the smallest topological index of their ops.
``bfs`` and ``dfs`` walk the directed unit graph from the first unvisited unit
in that order, restarting from the next one whenever the walk runs dry.
"""

from __future__ import annotations

from collections import deque

import numpy as np

from placement_env.graph.units import UnitGraph

TRAVERSAL_ORDERS = ("topological", "reverse_topological", "bfs", "dfs", "random")


def traversal_order(units: UnitGraph, kind: str, rng: np.random.Generator | None = None) -> np.ndarray:
    """Every unit exactly once, in the order ``kind`` (one of :data:`TRAVERSAL_ORDERS`)."""
    if kind == "topological":
        return units.topological_order.copy()
    if kind == "reverse_topological":
        return units.topological_order[::-1].copy()
    if kind == "random":
        if rng is None:
            raise ValueError("the random traversal order needs a random generator")
        return rng.permutation(units.num_units)
    if kind not in ("bfs", "dfs"):
        raise ValueError(f"unknown traversal_order {kind!r}; use one of {', '.join(TRAVERSAL_ORDERS)}")
    succ: list[list[int]] = [[] for _ in range(units.num_units)]
    for a, b in units.edges.T.tolist():
        succ[a].append(b)
    seen = np.zeros(units.num_units, dtype=bool)
    order: list[int] = []
    for root in units.topological_order.tolist():
        if seen[root]:
            continue
        seen[root] = True
        if kind == "bfs":
            queue = deque([root])
            while queue:
                u = queue.popleft()
                order.append(u)
                for v in succ[u]:
                    if not seen[v]:
                        seen[v] = True
                        queue.append(v)
        else:  # iterative pre-order DFS, children in index order
            stack = [root]
            seen[root] = False
            while stack:
                u = stack.pop()
                if seen[u]:
                    continue
                seen[u] = True
                order.append(u)
                stack.extend(v for v in reversed(succ[u]) if not seen[v])
    return np.asarray(order, dtype=np.int64)
