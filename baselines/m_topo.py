"""m-TOPO (Baechi, Jeon et al. 2020): topological order, each device filled up to its memory share.

The per-device limit is the graph's total budgeted memory split in proportion
to device memory; units go, in topological order, to the current device until
the next one would pass its limit, then to the next device. Contiguous chunks
of the topological order keep most edges inside a device.
"""

from __future__ import annotations

import numpy as np

from placement_env.cluster import Cluster
from placement_env.graph.model import ComputationGraph

from .memory import MemoryBudget, units_in_topological_order


def m_topo(graph: ComputationGraph, cluster: Cluster, seed: int = 0) -> np.ndarray:
    budget = MemoryBudget(graph, cluster)
    m = cluster.num_devices
    limit = budget.demand.sum() * cluster.memory / cluster.memory.sum()
    used = np.zeros(m)
    units = np.empty(graph.num_units, dtype=np.int64)
    d = 0
    for u in units_in_topological_order(graph):
        u = int(u)
        while d < m - 1 and used[d] > 0 and used[d] + budget.demand[u] > limit[d] + 1e-9 * limit[d]:
            d += 1
        if not budget.fits(u)[d]:
            later = [k for k in range(d + 1, m) if budget.fits(u)[k]]
            if later:
                d = later[0]  # else the unit overflows the last device's budget: the repair moves it
        budget.take(u, d)
        used[d] += budget.demand[u]
        units[u] = d
    return graph.expand_unit_placement(units)
