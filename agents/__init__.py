"""Learning agents: the SB3 placement policies, the paper's REINFORCE agent, checkpoints.

* ``PPO(PlacementPolicy, env, policy_kwargs=dict(encoder="gat"))`` - any SB3
  on-policy algorithm (PPO, A2C) on ``DevicePlacement-v0`` or the sequential
  environment; :class:`MaskablePlacementPolicy` for ``sb3_contrib.MaskablePPO``;
  :func:`make_sb3` builds them.
* :func:`train_reinforce` - the paper's agent.
* :func:`place_graph` - a trained policy places an unseen graph in one call.
"""

from __future__ import annotations

from .checkpoints import load_network, place_graph, save_network
from .features_extractor import GraphFeaturesExtractor
from .policy import MaskablePlacementPolicy, PlacementPolicy
from .reinforce import PlacementNetwork, ReinforceConfig, greedy_placement, train_reinforce

SB3_ALGORITHMS = ("ppo", "a2c", "maskable-ppo")


def make_sb3(algo: str, env, encoder: str = "fadp-gt", encoder_kwargs: dict | None = None, **kwargs):
    """An SB3 algorithm (``ppo``, ``a2c``, ``maskable-ppo``) with the placement policy on ``encoder``."""
    policy_kwargs = {"encoder": encoder, "encoder_kwargs": encoder_kwargs, **kwargs.pop("policy_kwargs", {})}
    if algo == "ppo":
        from stable_baselines3 import PPO

        return PPO(PlacementPolicy, env, policy_kwargs=policy_kwargs, **kwargs)
    if algo == "a2c":
        from stable_baselines3 import A2C

        return A2C(PlacementPolicy, env, policy_kwargs=policy_kwargs, **kwargs)
    if algo == "maskable-ppo":
        from sb3_contrib import MaskablePPO

        return MaskablePPO(MaskablePlacementPolicy, env, policy_kwargs=policy_kwargs, **kwargs)
    raise ValueError(f"unknown algorithm {algo!r}; use one of {', '.join(SB3_ALGORITHMS)}")


def make_agent(name: str, *args, **kwargs):
    """``make_agent("reinforce", env, config)`` trains the paper's agent; an SB3 name builds that algorithm."""
    if name == "reinforce":
        return train_reinforce(*args, **kwargs)
    return make_sb3(name, *args, **kwargs)


__all__ = ["GraphFeaturesExtractor", "MaskablePlacementPolicy", "PlacementNetwork", "PlacementPolicy",
           "ReinforceConfig", "SB3_ALGORITHMS", "greedy_placement", "load_network", "make_agent", "make_sb3",
           "place_graph", "save_network", "train_reinforce"]
