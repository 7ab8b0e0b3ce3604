"""Every classical placer by name: :data:`PLACERS`, :func:`place`, :func:`list_placers`."""

from __future__ import annotations

import numpy as np

from baselines.critical_path import critical_path_first
from baselines.heft import heft
from baselines.local_search import local_search_from
from baselines.m_etf import m_etf
from baselines.m_topo import m_topo
from baselines.memory_repair import Placer, within_memory
from baselines.metis import metis
from baselines.simple import random_placement, round_robin, single_device
from placement_env.cluster import Cluster
from placement_env.graph.model import ComputationGraph

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
    """Names accepted by :func:`place`, in the order the comparison prints them."""
    return list(PLACERS)


def place(name: str, graph: ComputationGraph, cluster: Cluster, seed: int = 0) -> np.ndarray:
    """Run the placer called ``name`` (see :data:`PLACERS`)."""
    if name not in PLACERS:
        raise ValueError(f"unknown placer {name!r}; known: {', '.join(PLACERS)}")
    return PLACERS[name](graph, cluster, seed)
