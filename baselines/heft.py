"""HEFT (Topcuoglu, Hariri & Wu, 2002): ops by decreasing upward rank, each on its earliest-finish device.

The upward rank is the op's mean run time plus the longest mean-cost path
(run times and link times averaged over devices / device pairs) to an exit
op. This implementation appends to each device's queue (no insertion into
idle gaps) and pins colocation groups; the simulator then judges the result.
"""

from __future__ import annotations

import numpy as np

from placement_env.cluster import Cluster
from placement_env.graph.model import ComputationGraph

from .list_scheduling import ListSchedule, upward_rank


def heft(graph: ComputationGraph, cluster: Cluster, seed: int = 0) -> np.ndarray:
    state = ListSchedule(graph, cluster)
    rank = upward_rank(graph, cluster)
    # decreasing rank; the topological index breaks ties, which keeps zero-cost chains in order
    for v in np.lexsort((graph.topo_index, -rank)).tolist():
        d, start, _ = state.earliest_finish(v)
        state.assign(v, d, start)
    return state.placement()
