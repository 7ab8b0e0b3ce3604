"""The steered annealing as a placer: :func:`steered_placer`, what ``agents.place`` and the benchmark's
``steered`` method run.

It is :func:`baselines.placers.search_placers`'s annealing, with the same starts, settings and budget, whose
neighbours are drawn by a :class:`~agents.steering.policy.SteeringPolicy` (:class:`SteeredProposals`); the policy
is the shipped one (:data:`SHIPPED_POLICY`) unless another file is given.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

from agents.learned.report import judged
from agents.learned.result import LearnedPlacement
from baselines.interrupts import best_of
from baselines.memory_repair import Placer
from baselines.placers import search_placers
from placement_env.cli import Terminated
from placement_env.cluster import Cluster
from placement_env.graph.model import ComputationGraph
from placement_env.sim.pipeline import PLAIN_STEP, Step

from .policy import SteeredProposals, SteeringPolicy

SHIPPED_POLICY = Path(__file__).parent / "pretrained" / "policy.json"
"""The steering policy shipped with the package (its ``pretrain.json`` beside it)."""


def steering_policy(path: str | os.PathLike | None = None) -> SteeringPolicy:
    """The policy in ``path`` (None: the shipped one). Raises ValueError naming a file that is not one."""
    return SteeringPolicy.load(SHIPPED_POLICY if path is None else path)


def steered_placer(budget_seconds: float | None = None, policy: SteeringPolicy | None = None,
                   contiguous: bool = False, on_search: Callable[[], None] | None = None) -> Placer:
    """The steered annealing with ``budget_seconds`` for a whole call (None: the annealing's default), steered
    by ``policy`` (None: the shipped one); ``on_search`` is called when its first search begins (the start
    placers have run)."""
    chosen = policy or steering_policy()
    began: list[bool] = []

    def proposals(graph: ComputationGraph, cluster: Cluster, step: Step) -> SteeredProposals:
        if on_search is not None and not began:
            began.append(True)
            on_search()
        return SteeredProposals(chosen, graph, cluster, contiguous=contiguous, step=step)

    return search_placers(budget_seconds, contiguous, proposals)["steered"]


def steered_search(graph: ComputationGraph, cluster: Cluster, budget_seconds: float,
                   policy: str | os.PathLike | SteeringPolicy | None = None, contiguous: bool = False, seed: int = 0,
                   step: Step = PLAIN_STEP, on_search: Callable[[], None] | None = None) -> LearnedPlacement:
    """:func:`steered_placer` run on ``graph`` (``policy``: a file, a policy or None for the shipped one); the
    placement with its makespan, overflow and seconds, as the learned placer's results are. Ctrl-C (or SIGTERM)
    during a search (from ``on_search``'s call) ends it early: the result is then the best placement found until
    then, ``interrupted`` set; before, the interrupt is raised."""
    chosen = policy if isinstance(policy, SteeringPolicy) else steering_policy(policy)
    began = time.perf_counter()
    try:
        placement = steered_placer(budget_seconds, chosen, contiguous, on_search)(graph, cluster, seed, step=step)
    except KeyboardInterrupt as stop:  # Ctrl-C or SIGTERM during a search: the best placement it had found
        found = best_of(stop)
        if found is None:
            raise
        return LearnedPlacement(*found, time.perf_counter() - began, "steered", 0, True, isinstance(stop, Terminated))
    seconds = time.perf_counter() - began
    return LearnedPlacement(placement, *judged(graph, cluster, placement, step), seconds, "steered", 0)
