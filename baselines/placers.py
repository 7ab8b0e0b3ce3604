"""Every classical placer by name: :data:`PLACERS`, :func:`place`, :func:`list_placers`."""

from __future__ import annotations

import numpy as np

from baselines.critical_path import critical_path_first
from baselines.heft import heft
from baselines.local_search import local_search_from_best
from baselines.m_etf import m_etf
from baselines.m_topo import m_topo
from baselines.memory import PlacementInfeasibleError
from baselines.memory_repair import Placer, within_memory
from baselines.metis import metis
from baselines.simple import random_placement, round_robin, single_device
from baselines.split import split
from placement_env.cluster import Cluster
from placement_env.graph.model import ComputationGraph
from placement_env.sim.simulator import Simulator

CONSTRUCTIVE: dict[str, Placer] = {  # each placement checked, and if need be repaired, by the simulator
    name: within_memory(placer) for name, placer in {
        "single": single_device,
        "round-robin": round_robin,
        "random": random_placement,
        "m-topo": m_topo,
        "m-etf": m_etf,
        "heft": heft,
        "metis": metis,
        "critical-path": critical_path_first,
        "split": split,
    }.items()
}
# where the local search starts: the fast placers that build with the graph's structure in mind
SEARCH_STARTS = ("single", "m-topo", "m-etf", "heft", "metis", "critical-path", "split")
PLACERS: dict[str, Placer] = {
    **CONSTRUCTIVE,
    "local-search": within_memory(local_search_from_best({name: CONSTRUCTIVE[name] for name in SEARCH_STARTS})),
}


def feasible_start(graph: ComputationGraph, cluster: Cluster, seed: int = 0) -> tuple[str, np.ndarray]:
    """Where a search or an episode starts: ``("single", everything on one device)`` when the simulator finds that
    within memory, else the fastest placement (by the simulator) of the :data:`SEARCH_STARTS` placers that fits.
    Raises :class:`~baselines.memory.PlacementInfeasibleError` when none fits."""
    try:
        return "single", PLACERS["single"](graph, cluster, seed)
    except PlacementInfeasibleError as error:
        reason = error
    simulator = Simulator(graph, cluster)
    best: tuple[float, str, np.ndarray] | None = None
    for name in SEARCH_STARTS[1:]:
        try:
            placement = PLACERS[name](graph, cluster, seed)
        except PlacementInfeasibleError as error:
            reason = error
            continue
        makespan, _, _ = simulator.run(placement)
        if best is None or makespan < best[0]:
            best = (makespan, name, placement)
    if best is None:
        raise reason
    return best[1], best[2]


def list_placers() -> list[str]:
    """Names accepted by :func:`place`, in the order the comparison prints them."""
    return list(PLACERS)


def place(name: str, graph: ComputationGraph, cluster: Cluster, seed: int = 0) -> np.ndarray:
    """Run the placer called ``name`` (see :data:`PLACERS`)."""
    if name not in PLACERS:
        raise ValueError(f"unknown placer {name!r}; known: {', '.join(PLACERS)}")
    return PLACERS[name](graph, cluster, seed)
