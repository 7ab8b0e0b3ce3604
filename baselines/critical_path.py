"""Critical-path-first placement: CPOP (Topcuoglu, Hariri & Wu, 2002).

Priority = upward rank + downward rank; the ops whose priority equals the
entry's (the critical path) all go to one *critical-path device*, the one that
runs them fastest; every other op goes, in priority order as it becomes
ready, to its earliest-finish device. Colocation pins and memory budgets as
in the other list schedulers.
"""

from __future__ import annotations

import heapq

import numpy as np

from placement_env.cluster import Cluster
from placement_env.graph.model import ComputationGraph

from .list_scheduling import ListSchedule, downward_rank, upward_rank


def critical_path_first(graph: ComputationGraph, cluster: Cluster, seed: int = 0) -> np.ndarray:
    state = ListSchedule(graph, cluster)
    priority = upward_rank(graph, cluster) + downward_rank(graph, cluster)
    cp_length = float(priority.max())
    on_cp = priority >= cp_length * (1 - 1e-9)
    cp_device = int(np.argmax(cluster.speed))  # ties -> lowest index; the fastest runs the CP fastest
    missing = graph.in_degree.copy()
    ptr, dst, _ = graph.successors
    heap = [(-priority[v], int(graph.topo_index[v]), v) for v in range(graph.num_nodes) if missing[v] == 0]
    heapq.heapify(heap)
    while heap:
        _, _, v = heapq.heappop(heap)
        if on_cp[v] and state.allowed(v)[cp_device]:
            start = max(state.available[cp_device], state.data_ready(v)[cp_device])
            state.assign(v, cp_device, float(start))
        else:
            d, start, _ = state.earliest_finish(v)
            state.assign(v, d, start)
        for w in dst[ptr[v]:ptr[v + 1]].tolist():
            missing[w] -= 1
            if missing[w] == 0:
                heapq.heappush(heap, (-priority[w], int(graph.topo_index[w]), w))
    return state.placement()
