"""Classical device placers, one interface: ``placer(graph, cluster, seed) -> device per node``.

Every placer honours colocation (it decides per placement unit) and the
memory budgets of :mod:`baselines.memory`; one that cannot fit the graph
raises :class:`PlacementInfeasibleError` saying why. The placers of
:data:`PLACERS` also never return a placement that runs out of memory in the
simulator (:mod:`baselines.memory_repair`).
"""

from __future__ import annotations

from baselines.anneal import AnnealConfig, AnnealSettings, anneal
from baselines.critical_path import critical_path_first
from baselines.heft import heft
from baselines.local_search import RefineResult, local_search_from, refine
from baselines.m_etf import m_etf
from baselines.m_topo import m_topo
from baselines.memory import MemoryBudget, PlacementInfeasibleError, unit_demand
from baselines.memory_repair import Placer, repair_memory, within_memory
from baselines.metis import metis
from baselines.placers import PLACERS, feasible_start, list_placers, place, placers_with_budget
from baselines.simple import random_placement, round_robin, single_device
from baselines.split import split

__all__ = ["PLACERS", "AnnealConfig", "AnnealSettings", "MemoryBudget", "PlacementInfeasibleError", "Placer",
           "RefineResult", "anneal", "critical_path_first", "feasible_start", "heft", "list_placers",
           "local_search_from", "m_etf", "m_topo", "metis", "place", "placers_with_budget", "random_placement",
           "refine", "repair_memory", "round_robin", "single_device", "split", "unit_demand", "within_memory"]
