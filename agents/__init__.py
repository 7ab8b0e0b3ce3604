"""Learning agents, by job: the policies, the training algorithms, the training library, the pretrained learned
placer, the paper's experiments and the job fan-out.

* :mod:`agents.policies` - ``PPO(PlacementPolicy, env, policy_kwargs=dict(encoder="gat"))`` trains any SB3
  on-policy algorithm (PPO, A2C) on ``DevicePlacement-v0`` or the sequential environment;
  :class:`MaskablePlacementPolicy` is for ``sb3_contrib.MaskablePPO``; :class:`PlacementNetwork` is the encoder
  and head the project's own algorithms train.
* :mod:`agents.algorithms` - :class:`Reinforce` (the paper's agent) and :class:`GuidedSearch` (the learned
  placer's search as an algorithm), with SB3's ``learn`` / ``save`` / ``load`` / ``predict``;
  :func:`make_model` builds any algorithm of :data:`ALGORITHMS` by name, :func:`load_model` rebuilds a saved one.
* :mod:`agents.training` - ``train(TrainConfig(...)) -> RunResult``, what ``train.py`` runs.
* :mod:`agents.learned` - ``agents.place(graph, cluster)``: the pretrained learned placer (zero-shot or
  fine-tuned), and pretraining.
* :mod:`agents.paper` - the paper's experiments and the benchmark; :mod:`agents.jobs` - their fan-out.
* The commands: ``python -m agents.place``, ``agents.pretrain``, ``agents.benchmark``, ``agents.experiments``.

The names below load on first use (torch and stable-baselines3 take seconds).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from placement_env.lazy_names import lazy_attributes

from .names import ALGORITHMS, SB3_ALGORITHMS

_ON_FIRST_USE = {  # loaded when first used: they import torch and stable-baselines3 (seconds)
    **dict.fromkeys(("GraphFeaturesExtractor", "MaskablePlacementPolicy", "PlacementNetwork", "PlacementPolicy"),
                    "agents.policies"),
    **dict.fromkeys(("GuidedSearch", "Reinforce", "ReinforceConfig", "greedy_placement", "load_model",
                     "load_network", "make_agent", "make_model", "make_sb3", "place_graph", "read_checkpoint",
                     "save_checkpoint", "save_network", "train_reinforce"), "agents.algorithms"),
}
_lazy = lazy_attributes("agents", _ON_FIRST_USE, globals())


def __getattr__(name: str) -> Any:
    """PEP 562: the names above on first use; ``place`` is the command's module, which is callable
    (``agents.place(graph, cluster, ...)`` calls :func:`agents.learned.placer.place`)."""
    if name == "place":
        return importlib.import_module("agents.place")
    return _lazy(name)


if TYPE_CHECKING:
    from agents.algorithms import (
        GuidedSearch,
        Reinforce,
        ReinforceConfig,
        greedy_placement,
        load_model,
        load_network,
        make_agent,
        make_model,
        make_sb3,
        place_graph,
        read_checkpoint,
        save_checkpoint,
        save_network,
        train_reinforce,
    )
    from agents.learned.placer import place  # what calling the module agents.place does (agents/place.py)
    from agents.policies import GraphFeaturesExtractor, MaskablePlacementPolicy, PlacementNetwork, PlacementPolicy

__all__ = ["ALGORITHMS", "GraphFeaturesExtractor", "GuidedSearch", "MaskablePlacementPolicy", "PlacementNetwork",
           "PlacementPolicy", "Reinforce", "ReinforceConfig", "SB3_ALGORITHMS", "greedy_placement", "load_model",
           "load_network", "make_agent", "make_model", "make_sb3", "place", "place_graph", "read_checkpoint",
           "save_checkpoint", "save_network", "train_reinforce"]
