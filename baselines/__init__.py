"""Classical device placers, one interface: ``placer(graph, cluster, seed) -> device per node``.

Every placer honours colocation (it decides per placement unit) and the
memory budgets of :mod:`baselines.memory`; one that cannot fit the graph
raises :class:`PlacementInfeasibleError` saying why. The placers of
:data:`PLACERS` also never return a placement that runs out of memory in the
simulator (:mod:`baselines.memory_repair`).
"""

from __future__ import annotations

import numpy as np

from placement_env import Cluster, ComputationGraph

from .critical_path import critical_path_first
from .heft import heft
from .local_search import RefineResult, local_search_from, refine
from .m_etf import m_etf
from .m_topo import m_topo
from .memory import MemoryBudget, PlacementInfeasibleError, unit_demand
from .memory_repair import Placer, repair_memory, within_memory
from .metis import metis
from .simple import random_placement, round_robin, single_device

PLACERS: dict[str, Placer] = {  # each placement checked, and if need be repaired, by the simulator
    name: within_memory(placer) for name, placer in {
        "single": single_device,
        "round-robin": round_robin,
        "random": random_placement,
        "m-topo": m_topo,
        "m-etf": m_etf,
        "heft": heft,
        "metis": metis,
        "critical-path": critical_path_first,
        "local-search": local_search_from(heft),
    }.items()
}


def list_placers() -> list[str]:
    return list(PLACERS)


def place(name: str, graph: ComputationGraph, cluster: Cluster, seed: int = 0) -> np.ndarray:
    """Run the placer called ``name`` (see :data:`PLACERS`)."""
    if name not in PLACERS:
        raise ValueError(f"unknown placer {name!r}; known: {', '.join(PLACERS)}")
    return PLACERS[name](graph, cluster, seed)


__all__ = ["PLACERS", "MemoryBudget", "PlacementInfeasibleError", "Placer", "RefineResult", "critical_path_first",
           "heft", "list_placers", "local_search_from", "m_etf", "m_topo", "metis", "place", "random_placement",
           "refine", "repair_memory", "round_robin", "single_device", "unit_demand", "within_memory"]
