"""Helpers the benchmark scripts share."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
from machine import machine_line

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


def write_rows(path: str | None, rows: list[dict]) -> None:
    """The rows as JSON at ``path`` (none: nothing), with the machine and the command that made them."""
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps({"machine": machine_line(), "command": " ".join(sys.argv), "rows": rows},
                                         indent=1))
