"""The steered annealing as a placer: :func:`steered_placer`, what ``agents.place`` and the benchmark's
``steered`` method run.

It is :func:`baselines.placers.search_placers`'s annealing, with the same starts, settings and budget, whose
neighbours are drawn by a :class:`~agents.steering.policy.SteeringPolicy` (:class:`SteeredProposals`); the policy
is the shipped one (:data:`SHIPPED_POLICY`) unless another file is given.
"""

from __future__ import annotations

import os
from pathlib import Path

from baselines.memory_repair import Placer
from baselines.placers import search_placers

from .policy import SteeredProposals, SteeringPolicy

SHIPPED_POLICY = Path(__file__).parent / "pretrained" / "policy.json"
"""The steering policy shipped with the package (its ``pretrain.json`` beside it)."""


def steering_policy(path: str | os.PathLike | None = None) -> SteeringPolicy:
    """The policy in ``path`` (None: the shipped one). Raises ValueError naming a file that is not one."""
    return SteeringPolicy.load(SHIPPED_POLICY if path is None else path)


def steered_placer(budget_seconds: float | None = None, policy: SteeringPolicy | None = None,
                   contiguous: bool = False) -> Placer:
    """The steered annealing with ``budget_seconds`` for a whole call (None: the annealing's default), steered
    by ``policy`` (None: the shipped one)."""
    chosen = policy or steering_policy()

    def proposals(graph, cluster):
        return SteeredProposals(chosen, graph, cluster, contiguous=contiguous)

    return search_placers(budget_seconds, contiguous, proposals)["steered"]
