"""Every training algorithm by name, built, saved and loaded the same way: stable-baselines3's PPO, A2C and
MaskablePPO with the placement policies, the paper's REINFORCE (:class:`~agents.algorithms.reinforce.Reinforce`)
and the guided search (:class:`~agents.algorithms.guided_search.GuidedSearch`).

All share SB3's interface (``learn`` / ``predict`` / ``num_timesteps`` / ``policy.optimizer``), so training,
checkpoints and placing graphs have one code path. The project's own algorithms
(:data:`PROJECT_ALGORITHMS`) save and rebuild themselves from plain data
(:class:`~agents.algorithms.base.PlacementAlgorithm`); for SB3's, :func:`save_checkpoint` takes the settings to
store and :func:`load_model` rebuilds them with :func:`make_sb3`.
"""

from __future__ import annotations

import os
from typing import Any

from agents.names import ALGORITHMS, SB3_ALGORITHMS
from agents.policies.actor_critic import MaskablePlacementPolicy, PlacementPolicy

from . import random_state
from .base import PlacementAlgorithm, check_observation_space, load_state, restore_training_state
from .checkpoint import Checkpoint, read_checkpoint, write_checkpoint
from .guided_search import GuidedSearch
from .reinforce import Reinforce, train_reinforce

__all__ = ["ALGORITHMS", "PROJECT_ALGORITHMS", "SB3_ALGORITHMS", "load_model", "make_agent", "make_model",
           "make_sb3", "save_checkpoint"]

PROJECT_ALGORITHMS: dict[str, type[PlacementAlgorithm]] = {cls.name: cls for cls in (Reinforce, GuidedSearch)}
_SB3_CLASS_NAMES = {"PPO": "ppo", "A2C": "a2c", "MaskablePPO": "maskable-ppo"}


def make_sb3(algo: str, env: Any, encoder: str = "fadp-gt", encoder_kwargs: dict | None = None, **kwargs: Any) -> Any:
    """An SB3 algorithm (``ppo``, ``a2c``, ``maskable-ppo``) with the placement policy on ``encoder``; ``kwargs``
    are SB3's constructor arguments (``policy_kwargs`` merged with the encoder's). Raises ``ValueError`` for
    another name."""
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
    """The untrained model of ``algo`` (one of :data:`~agents.names.ALGORITHMS`) on ``env``, its policy on
    ``encoder``.

    ``expected_moves`` is the head's stay prior (:mod:`agents.policies.heads`; None: off). ``algo_kwargs`` are the
    algorithm's own settings: SB3's constructor arguments (``learning_rate``, ``n_steps``, ``seed``, ...), or
    the constructor's settings of a project algorithm (the fields of
    :class:`~agents.algorithms.reinforce.ReinforceConfig` for ``reinforce``). Raises ``ValueError`` for an unknown
    name or setting."""
    if algo in PROJECT_ALGORITHMS:
        policy = {"encoder": encoder, "encoder_kwargs": dict(encoder_kwargs or {}), "expected_moves": expected_moves}
        return PROJECT_ALGORITHMS[algo].from_settings(env, policy, algo_kwargs, tensorboard_log=tensorboard_log)
    return make_sb3(algo, env, encoder=encoder, encoder_kwargs=encoder_kwargs,
                    policy_kwargs={"expected_moves": expected_moves}, tensorboard_log=tensorboard_log, **algo_kwargs)


def make_agent(name: str, *args: Any, **kwargs: Any) -> Any:
    """``make_agent("reinforce", env, config)`` trains the paper's agent
    (:func:`~agents.algorithms.reinforce.train_reinforce`); an SB3 name builds that algorithm (:func:`make_sb3`)."""
    if name == "reinforce":
        return train_reinforce(*args, **kwargs)
    return make_sb3(name, *args, **kwargs)


def algorithm_name(model: Any) -> str:
    """The registry name of a model (``ppo``, ``a2c``, ``maskable-ppo``, ``reinforce``, ``guided``); ``ValueError``
    for a model of no registered algorithm."""
    if isinstance(model, PlacementAlgorithm):
        return model.name
    for cls in type(model).__mro__:
        if cls.__name__ in _SB3_CLASS_NAMES:
            return _SB3_CLASS_NAMES[cls.__name__]
    raise ValueError(f"cannot save a {type(model).__name__}: checkpoints hold {', '.join(ALGORITHMS)} models")


def save_checkpoint(model: Any, path: str | os.PathLike, algo_kwargs: dict | None = None) -> None:
    """Write ``model`` to ``path`` atomically in the checkpoint format (:mod:`agents.algorithms.checkpoint`).

    A project algorithm saves its own settings; an SB3 model saves ``algo_kwargs`` (the constructor arguments to
    rebuild it with; SB3's defaults when None, which matter only to train on) and its policy's encoder settings.
    The random generators' states are saved too (:mod:`agents.algorithms.random_state`), and :func:`load_model`
    restores them: a resumed SB3 run draws on from where this one stopped, though its environments start new
    episodes and its rollout buffer starts empty (SB3 saves neither), so it is not step-for-step the uninterrupted
    run; REINFORCE's resume is (it saves its episodes and baseline), and the guided search continues its rounds'
    seeds and archives. Raises ``ValueError`` for a
    model of no registered algorithm."""
    algo = algorithm_name(model)
    if isinstance(model, PlacementAlgorithm):
        write_checkpoint(model.checkpoint(), path)
        return
    kw = model.policy_kwargs
    policy = {"encoder": kw.get("encoder", "fadp-gt"), "encoder_kwargs": kw.get("encoder_kwargs") or {},
              "expected_moves": kw.get("expected_moves")}
    optimizer = getattr(model.policy, "optimizer", None)
    write_checkpoint(Checkpoint(algo, policy, dict(algo_kwargs or {}), model.observation_space,
                                int(model.num_timesteps), model.policy.state_dict(),
                                None if optimizer is None else optimizer.state_dict(),
                                {"generators": random_state.capture()}), path)


def load_model(path: str | os.PathLike, env: Any, **kwargs: Any) -> Any:
    """The model saved at ``path``, rebuilt on ``env`` (its observation space must be the saved one) with its
    weights and optimizer state; ``kwargs`` go to the algorithm (e.g. ``tensorboard_log``). Raises
    ``FileNotFoundError`` or ``ValueError`` (:func:`~agents.algorithms.checkpoint.read_checkpoint`; another
    observation space; weights that do not fit)."""
    saved = read_checkpoint(path)
    if saved.algo in PROJECT_ALGORITHMS:
        return PROJECT_ALGORITHMS[saved.algo].from_checkpoint(saved, env, path, **kwargs)
    if saved.algo not in SB3_ALGORITHMS:
        raise ValueError(f"{str(path)!r} holds an unknown algorithm {saved.algo!r}")
    check_observation_space(saved, env, path)
    model = make_model(saved.algo, env, **saved.policy, **saved.algo_kwargs, **kwargs)
    load_state(model, saved, path)
    restore_training_state(model, saved, path)  # the generators continue (building the model re-seeded them)
    return model


