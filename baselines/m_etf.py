"""m-ETF (Baechi): earliest-task-first list scheduling, memory-aware.

At every step, over all ready ops (inputs placed) and the devices each may use
(its unit's device once pinned, otherwise any device with room for the unit),
schedule the (op, device) pair that can *start* earliest; ties go to the
smaller topological index, then the lower device index.

ETF was defined for identical processors: it compares start times only, so on
a heterogeneous cluster device speed counts only through when devices become
free (a chain whose starts all tie goes to device 0, however slow). HEFT,
which compares finish times, is the list scheduler made for such clusters.
"""

from __future__ import annotations

import numpy as np

from placement_env.cluster import Cluster
from placement_env.graph.model import ComputationGraph

from .list_scheduling import ListSchedule


def m_etf(graph: ComputationGraph, cluster: Cluster, seed: int = 0) -> np.ndarray:
    state = ListSchedule(graph, cluster)
    n = graph.num_nodes
    missing = graph.in_degree.copy()
    ptr, dst, _ = graph.successors
    ready: list[int] = [v for v in range(n) if missing[v] == 0]
    arrival = {v: state.data_ready(v) for v in ready}
    for _ in range(n):
        order = sorted(ready, key=lambda v: graph.topo_index[v])
        dr = np.stack([arrival[v] for v in order])
        allowed = np.stack([state.allowed(v) for v in order])
        start = np.where(allowed, np.maximum(dr, state.available[None, :]), np.inf)
        i, d = np.unravel_index(int(np.argmin(start)), start.shape)  # row-major: topo first, then device
        v = order[i]
        state.assign(v, int(d), float(start[i, d]))
        ready.remove(v)
        del arrival[v]
        for w in dst[ptr[v]:ptr[v + 1]].tolist():
            missing[w] -= 1
            if missing[w] == 0:
                ready.append(w)
                arrival[w] = state.data_ready(w)
    return state.placement()
