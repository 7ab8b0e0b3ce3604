"""Every training algorithm by name, built the same way: stable-baselines3's PPO, A2C and MaskablePPO with the
placement policies, the paper's REINFORCE (:class:`~agents.reinforce.Reinforce`) and the guided search
(:class:`~agents.guided.GuidedSearch`).

All share SB3's interface (``learn`` / ``predict`` / ``num_timesteps`` / ``policy.optimizer``), so training,
checkpoints (:mod:`agents.checkpoints`) and placing graphs have one code path.
"""

from __future__ import annotations

from typing import Any

from .names import ALGORITHMS, SB3_ALGORITHMS
from .policy import MaskablePlacementPolicy, PlacementPolicy
from .reinforce import Reinforce, ReinforceConfig

__all__ = ["ALGORITHMS", "SB3_ALGORITHMS", "make_agent", "make_model", "make_sb3"]


def make_sb3(algo: str, env: Any, encoder: str = "fadp-gt", encoder_kwargs: dict | None = None, **kwargs: Any) -> Any:
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
    raise ValueError(f"unknown algorithm {algo!r}; use one of {', '.join(ALGORITHMS)}")


def make_model(algo: str, env: Any, encoder: str = "fadp-gt", encoder_kwargs: dict | None = None,
               expected_moves: float | None = None, tensorboard_log: str | None = None, **algo_kwargs: Any) -> Any:
    """The model of ``algo`` (one of :data:`ALGORITHMS`) on ``env``, its policy on ``encoder``.

    ``expected_moves`` is the head's stay prior (:mod:`agents.heads`; None: off). ``algo_kwargs`` are the
    algorithm's own settings: SB3's constructor arguments (``learning_rate``, ``n_steps``, ``seed``, ...), or
    the fields of :class:`~agents.reinforce.ReinforceConfig` for ``reinforce``.
    """
    if algo == "guided":
        from .guided import GuidedSearch

        if expected_moves is not None:
            raise ValueError("the guided search's policy has no stay prior; leave expected_moves unset")
        settings = {k: v for k, v in algo_kwargs.items() if k != "info"}  # info: notes of a pretrained policy
        return GuidedSearch(env, encoder, dict(encoder_kwargs or {}), tensorboard_log=tensorboard_log, **settings)
    if algo == "reinforce":
        config = ReinforceConfig(encoder=encoder, encoder_kwargs=dict(encoder_kwargs or {}),
                                 expected_moves=expected_moves, **algo_kwargs)
        return Reinforce(env, config, tensorboard_log=tensorboard_log)
    return make_sb3(algo, env, encoder=encoder, encoder_kwargs=encoder_kwargs,
                    policy_kwargs={"expected_moves": expected_moves}, tensorboard_log=tensorboard_log, **algo_kwargs)


def make_agent(name: str, *args: Any, **kwargs: Any) -> Any:
    """``make_agent("reinforce", env, config)`` trains the paper's agent (:func:`~agents.reinforce.train_reinforce`);
    an SB3 name builds that algorithm (:func:`make_sb3`)."""
    if name == "reinforce":
        from .reinforce import train_reinforce

        return train_reinforce(*args, **kwargs)
    return make_sb3(name, *args, **kwargs)
