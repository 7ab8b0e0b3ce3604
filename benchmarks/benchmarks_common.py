"""Helpers the benchmark scripts share."""

from __future__ import annotations

import numpy as np

from baselines import PLACERS, PlacementInfeasibleError
from baselines.placers import SEARCH_STARTS
from placement_env import ComputationGraph, simulate
from placement_env.cluster import Cluster


def feasible_starts(graph: ComputationGraph, cluster: Cluster) -> list[tuple[float, str, np.ndarray]]:
    """(makespan s, placer, placement) of every start placer whose placement fits, fastest first."""
    found = []
    for name in SEARCH_STARTS:
        try:
            placement = PLACERS[name](graph, cluster, 0)
        except PlacementInfeasibleError:
            continue
        result = simulate(graph, placement, cluster)
        if not result.oom:
            found.append((result.makespan, name, placement))
    return sorted(found, key=lambda item: item[0])
