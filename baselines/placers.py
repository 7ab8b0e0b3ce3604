"""Every classical placer by name: :data:`PLACERS`, :func:`place`, :func:`list_placers`."""

from __future__ import annotations

import warnings
from collections.abc import Callable

import numpy as np

from baselines.anneal import ANNEAL_SECONDS, Proposals, anneal_from_best
from baselines.contiguous import contiguous_placer
from baselines.critical_path import critical_path_first
from baselines.heft import heft
from baselines.local_search import local_search_from_best
from baselines.m_etf import m_etf
from baselines.m_topo import m_topo
from baselines.memory import PlacementInfeasibleError
from baselines.memory_repair import Placer, within_memory
from baselines.metis import metis
from baselines.runtime_defaults import accelerate_balanced, deepspeed_parameters, deepspeed_uniform
from baselines.simple import random_placement, round_robin, single_device
from baselines.split import split
from baselines.starts import ranked_starts
from placement_env.checks import checked_instance
from placement_env.cluster import Cluster
from placement_env.envs.starts import StartPlacers
from placement_env.graph.model import ComputationGraph
from placement_env.parallelism import Parallelism
from placement_env.sim.pipeline import PLAIN_STEP, Step

HEURISTICS: dict[str, Placer] = {  # the constructive placers as they are, before the simulator's word on memory
    "single": single_device,
    "round-robin": round_robin,
    "random": random_placement,
    "m-topo": m_topo,
    "m-etf": m_etf,
    "heft": heft,
    "metis": metis,
    "critical-path": critical_path_first,
    "split": split,
}
# each placement checked, and if need be repaired, by the simulator
CONSTRUCTIVE: dict[str, Placer] = {name: within_memory(placer) for name, placer in HEURISTICS.items()}
# in contiguous mode (pipeline stages in program order): made contiguous, then checked and repaired keeping it so
CONTIGUOUS_CONSTRUCTIVE: dict[str, Placer] = {name: contiguous_placer(placer) for name, placer in HEURISTICS.items()}
# where the local search starts: the fast placers that build with the graph's structure in mind
SEARCH_STARTS = ("single", "m-topo", "m-etf", "heft", "metis", "critical-path", "split")
# the starts of about linear time, the only ones a search runs on a graph of more than LARGE_GRAPH_OPS ops
QUICK_STARTS = ("single", "m-topo")


def search_placers(budget_seconds: float | None = None, contiguous: bool = False,
                   proposals: Callable[[ComputationGraph, Cluster, Step], Proposals] | None = None
                   ) -> dict[str, Placer]:
    """The search placers, ``local-search`` and ``anneal``, each taking ``budget_seconds`` for a whole call (None:
    their defaults, 200 rounds or 0.8 s per start for the local search and 4 s for the annealing);
    ``contiguous``: in contiguous mode, from the contiguous start placers (:mod:`baselines.contiguous`).
    With ``proposals`` (a steered search's, :mod:`agents.steering`), also ``steered``: the annealing with
    everything but its neighbours' draws the same (its starts, settings and budget)."""
    if budget_seconds is not None and not 0 < budget_seconds < float("inf"):
        raise ValueError(f"a search budget must be positive and finite seconds, got {budget_seconds!r}")
    constructive = CONTIGUOUS_CONSTRUCTIVE if contiguous else CONSTRUCTIVE
    checked = contiguous_placer if contiguous else within_memory
    starts = {name: constructive[name] for name in SEARCH_STARTS}
    placers = {"local-search": checked(local_search_from_best(starts, budget_seconds=budget_seconds,
                                                              quick_starts=QUICK_STARTS, contiguous=contiguous)),
               "anneal": checked(anneal_from_best(starts, budget_seconds or ANNEAL_SECONDS,
                                                  quick_starts=QUICK_STARTS, contiguous=contiguous))}
    if proposals is not None:
        placers["steered"] = checked(anneal_from_best(starts, budget_seconds or ANNEAL_SECONDS,
                                                      quick_starts=QUICK_STARTS, contiguous=contiguous,
                                                      proposals=proposals))
    return placers


def placers_with_budget(budget_seconds: float | None, contiguous: bool = False) -> dict[str, Placer]:
    """:data:`PLACERS` (or, with ``contiguous``, :data:`CONTIGUOUS_PLACERS`) with the search placers given
    ``budget_seconds`` each."""
    constructive = CONTIGUOUS_CONSTRUCTIVE if contiguous else CONSTRUCTIVE
    return {**constructive, **search_placers(budget_seconds, contiguous)}


PLACERS: dict[str, Placer] = placers_with_budget(None)
CONTIGUOUS_PLACERS: dict[str, Placer] = placers_with_budget(None, contiguous=True)

# what the runtimes do by default, for graphs with module names (from_torch): not repaired for memory, so
# that their placements are what the runtime would run (baselines.runtime_defaults)
RUNTIME_DEFAULTS: dict[str, Placer] = {"deepspeed-uniform": deepspeed_uniform,
                                       "deepspeed-parameters": deepspeed_parameters,
                                       "accelerate-balanced": accelerate_balanced}
CONTIGUOUS_RUNTIME_DEFAULTS: dict[str, Placer] = {name: contiguous_placer(placer, repair=False)
                                                  for name, placer in RUNTIME_DEFAULTS.items()}


def feasible_start(graph: ComputationGraph, cluster: Cluster, seed: int = 0,
                   step: Step = PLAIN_STEP) -> tuple[str, np.ndarray]:
    """Where a search or an episode starts: ``("single", everything on one device)`` when the simulator finds that
    within memory, else the fastest placement (by the simulator) of the :data:`SEARCH_STARTS` placers that fits.
    Raises :class:`~baselines.memory.PlacementInfeasibleError` when none fits."""
    try:
        return "single", PLACERS["single"](graph, cluster, seed, step=step)
    except PlacementInfeasibleError:
        pass
    found, _ = ranked_starts(graph, cluster, {name: CONSTRUCTIVE[name] for name in SEARCH_STARTS[1:]}, seed,
                             step=step)
    return found[0][1], found[0][2]


def _start_within_memory(graph: ComputationGraph, cluster: Cluster) -> np.ndarray | None:
    try:
        return feasible_start(graph, cluster)[1]
    except PlacementInfeasibleError:
        return None


def environment_starts() -> StartPlacers:
    """The placers the environments may start episodes from: :data:`PLACERS` by name, and :func:`feasible_start`
    when everything on one device runs out of memory. Found by the environments through the entry point
    ``baselines`` of the group :data:`~placement_env.envs.starts.START_PLACERS_GROUP` (``pyproject.toml``;
    :mod:`placement_env.envs.starts`)."""
    return StartPlacers(placers=PLACERS, within_memory=_start_within_memory)


def list_placers() -> list[str]:
    """Names accepted by :func:`place`, in the order the comparison prints them."""
    return list(PLACERS)


def place(graph: ComputationGraph, cluster: Cluster, placer: str = "heft", seed: int = 0, *,
          step: Step | Parallelism = PLAIN_STEP, contiguous: bool = False) -> np.ndarray:
    """Place ``graph`` on ``cluster`` with the placer called ``placer`` (:data:`PLACERS`, and the runtimes' defaults of
    :data:`RUNTIME_DEFAULTS` for graphs with module names); a device per node.
    ``step``: the step placements are judged by (``Step(8, "1f1b")``: 8 micro-batches pipelined under 1F1B, or the
    micro-batches and schedule of a :class:`~placement_env.parallelism.Parallelism`), by the searches, ``split``,
    ``single`` and the memory repair; the heuristics place by their own model. ``contiguous``: pipeline stages in
    program order, as pipeline runtimes need (:mod:`placement_env.plan.stages`; :data:`CONTIGUOUS_PLACERS`); on a
    module-granular graph no module is split (as by every placer).

    Raises ``ValueError`` for an unknown placer, ``TypeError`` for a ``step`` that is neither a :class:`Step` nor a
    ``Parallelism``, and :class:`~baselines.memory.PlacementInfeasibleError` when the placer finds nothing within
    memory. The order
    before 0.2.0, ``place(name, graph, cluster)``, still works, with a ``DeprecationWarning``."""
    if isinstance(graph, str) and not isinstance(placer, str):  # place(graph, cluster, "heft"): the former order
        warnings.warn("baselines.place(name, graph, cluster) is deprecated; use place(graph, cluster, name)",
                      DeprecationWarning, stacklevel=2)
        graph, cluster, placer = cluster, placer, graph
    placers = {**CONTIGUOUS_PLACERS, **CONTIGUOUS_RUNTIME_DEFAULTS} if contiguous else {**PLACERS,
                                                                                       **RUNTIME_DEFAULTS}
    if placer not in placers:
        raise ValueError(f"unknown placer {placer!r}; known: {', '.join(placers)}")
    checked_instance("graph", graph, ComputationGraph)
    step = Step.of(step).checked(graph)
    if placer in RUNTIME_DEFAULTS and not contiguous:  # the runtimes place by their own rule, whatever the step
        return RUNTIME_DEFAULTS[placer](graph, cluster, seed)
    return placers[placer](graph, cluster, seed, step=step)
