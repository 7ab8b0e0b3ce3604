"""Learning agents: placement policies, the training algorithms, the training library, checkpoints.

* ``PPO(PlacementPolicy, env, policy_kwargs=dict(encoder="gat"))`` - any SB3
  on-policy algorithm (PPO, A2C) on ``DevicePlacement-v0`` or the sequential
  environment; :class:`MaskablePlacementPolicy` for ``sb3_contrib.MaskablePPO``;
  :func:`make_model` builds any algorithm of :data:`ALGORITHMS` by name.
* :class:`Reinforce` - the paper's agent, with SB3's ``learn`` / ``save`` / ``load`` / ``predict``.
* :mod:`agents.training` - ``train(TrainConfig(...)) -> RunResult``, what ``train.py`` runs.
* :func:`place_graph` - a trained policy places an unseen graph in one call.
* :func:`place` - the pretrained learned placer (zero-shot or fine-tuned); :class:`GuidedSearch` - its search as
  an algorithm (``train.py --algo guided``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from placement_env.lazy_names import lazy_attributes

from .names import ALGORITHMS, SB3_ALGORITHMS

_ON_FIRST_USE = {  # loaded when first used: they import torch and stable-baselines3 (seconds)
    **dict.fromkeys(("make_agent", "make_model", "make_sb3"), "agents.algorithms"),
    **dict.fromkeys(("load_model", "load_network", "place_graph", "read_checkpoint", "save_checkpoint",
                     "save_network"), "agents.checkpoints"),
    "GraphFeaturesExtractor": "agents.features_extractor",
    "GuidedSearch": "agents.guided",
    "place": "agents.place",
    **dict.fromkeys(("MaskablePlacementPolicy", "PlacementPolicy"), "agents.policy"),
    **dict.fromkeys(("PlacementNetwork", "Reinforce", "ReinforceConfig", "greedy_placement", "train_reinforce"),
                    "agents.reinforce"),
}

if TYPE_CHECKING:
    from .algorithms import make_agent, make_model, make_sb3
    from .checkpoints import load_model, load_network, place_graph, read_checkpoint, save_checkpoint, save_network
    from .features_extractor import GraphFeaturesExtractor
    from .guided import GuidedSearch
    from .place import place
    from .policy import MaskablePlacementPolicy, PlacementPolicy
    from .reinforce import PlacementNetwork, Reinforce, ReinforceConfig, greedy_placement, train_reinforce
else:
    __getattr__ = lazy_attributes("agents", _ON_FIRST_USE, globals())

__all__ = ["ALGORITHMS", "GraphFeaturesExtractor", "GuidedSearch", "MaskablePlacementPolicy", "PlacementNetwork",
           "PlacementPolicy", "Reinforce", "ReinforceConfig", "SB3_ALGORITHMS", "greedy_placement", "load_model",
           "load_network", "make_agent", "make_model", "make_sb3", "place", "place_graph", "read_checkpoint",
           "save_checkpoint", "save_network", "train_reinforce"]
