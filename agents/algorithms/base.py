"""What REINFORCE and the guided search share: :class:`PlacementAlgorithm`, stable-baselines3's interface on a
:class:`~agents.policies.network.PlacementNetwork`.

A subclass sets :attr:`~PlacementAlgorithm.name` (its registry name), builds ``self.policy`` (the network, with
its optimizer as ``policy.optimizer``), and implements ``learn`` (using :meth:`~PlacementAlgorithm.start_learning`
for SB3's callbacks) and :meth:`~PlacementAlgorithm.settings`. It then has ``predict``, ``save``, ``load``,
``get_env`` and ``logger`` as SB3's algorithms do, and loading rebuilds it from plain data:
``cls(env, **policy_settings, **settings)`` (:meth:`~PlacementAlgorithm.from_settings`), as SB3's
``BaseAlgorithm.load`` rebuilds ``cls(**data)``.
"""

from __future__ import annotations

import os
from typing import Any, ClassVar, TypeVar, cast

import gymnasium as gym
import numpy as np
import torch
from torch.distributions import Categorical

from agents.policies.network import PlacementNetwork

from . import random_state
from .checkpoint import Checkpoint, read_checkpoint, write_checkpoint

Algorithm = TypeVar("Algorithm", bound="PlacementAlgorithm")
ALGORITHM_TITLES = {"ppo": "PPO", "a2c": "A2C", "maskable-ppo": "MaskablePPO", "reinforce": "REINFORCE",
                    "guided": "guided search"}  # registry names as the errors write them


def load_state(model: Any, saved: Checkpoint, path: str | os.PathLike) -> None:
    """Load ``saved``'s weights (and optimizer state, when saved) into ``model`` (anything with SB3's ``policy``
    and ``num_timesteps``). Raises ``ValueError`` when the weights do not fit the model the settings describe."""
    try:
        model.policy.load_state_dict(saved.policy_state)
        if saved.optimizer_state is not None:
            model.policy.optimizer.load_state_dict(saved.optimizer_state)
    except (RuntimeError, ValueError, KeyError) as error:
        raise ValueError(f"{str(path)!r}: the saved weights do not fit the model its settings describe "
                         f"({str(error).splitlines()[0]})") from None
    model.num_timesteps = saved.num_timesteps


def restore_training_state(model: Any, saved: Checkpoint, path: str | os.PathLike) -> None:
    """Continue ``saved``'s random streams and counters in ``model`` (its ``restore_training_state``, or the global
    generators' states for an SB3 model); nothing for a file without them. ``ValueError`` naming ``path`` and the
    entry when they are malformed."""
    if saved.training_state is None:
        return
    try:
        if isinstance(model, PlacementAlgorithm):
            model.restore_training_state(saved.training_state)
        else:
            random_state.restore(saved.training_state.get("generators"))
    except (ValueError, TypeError, KeyError, IndexError) as error:
        raise ValueError(f"{str(path)!r}: its training state cannot be resumed ({error})") from None


def check_observation_space(saved: Checkpoint, env: Any, path: str | os.PathLike) -> None:
    """Refuse an environment whose observation space is not the one ``saved`` was trained on (``ValueError``)."""
    if env.observation_space != saved.observation_space:
        raise ValueError(f"{str(path)!r} was trained on observations padded to (units, edges, devices) = "
                         f"{saved.padding}; this environment's differ: {env.observation_space}")


class PlacementAlgorithm:
    """The shared half of REINFORCE and the guided search (module docstring).

    Attributes: ``env``, ``observation_space``, ``policy`` (set by the subclass), ``num_timesteps`` (environment
    steps, or proposals for the guided search), ``tensorboard_log`` (a folder, or None: no logging)."""

    name: ClassVar[str]  # the registry name
    description: ClassVar[str]  # what a model of it is, in the errors ("a REINFORCE agent")
    policy: PlacementNetwork

    def __init__(self, env: gym.Env, tensorboard_log: str | None = None) -> None:
        self.env = env
        self.observation_space = cast(gym.spaces.Dict, env.observation_space)
        self.tensorboard_log = tensorboard_log
        self.num_timesteps = 0
        self._logger: Any = None

    def get_env(self) -> gym.Env:
        """The environment trained on (SB3's ``get_env``)."""
        return self.env

    @property
    def logger(self) -> Any:
        """SB3's logger (TensorBoard under ``tensorboard_log`` when given, else silent)."""
        if self._logger is None:
            from stable_baselines3.common.utils import configure_logger

            self._logger = configure_logger(0, self.tensorboard_log, self.name, True)
        return self._logger

    def start_learning(self, total_timesteps: int, callback: Any, progress_bar: bool,
                       reset_num_timesteps: bool) -> tuple[Any, int]:
        """SB3's set-up of ``learn``: ``(callbacks, step limit)``. ``callback`` is an SB3 ``BaseCallback``, a list
        of them or None; the callbacks are initialised and told training starts. The limit counts from 0 when
        ``reset_num_timesteps``, else from the steps already trained."""
        from stable_baselines3.common.callbacks import CallbackList, ProgressBarCallback

        if reset_num_timesteps:
            self.num_timesteps = 0
        callbacks = list(callback) if isinstance(callback, (list, tuple)) else [callback] if callback else []
        if progress_bar:
            callbacks.append(ProgressBarCallback())
        hooks = CallbackList(callbacks)
        hooks.init_callback(cast(Any, self))  # SB3's callbacks need get_env, logger and num_timesteps only
        total = total_timesteps if reset_num_timesteps else self.num_timesteps + total_timesteps
        hooks.on_training_start({"total_timesteps": total}, {})
        return hooks, total

    @torch.no_grad()
    def predict(self, observation: dict, state: Any = None, episode_start: Any = None,
                deterministic: bool = False) -> tuple[np.ndarray, None]:
        """A device per unit for ``observation`` (argmax when ``deterministic``, else sampled), as SB3's
        ``predict``; ``state`` and ``episode_start`` are SB3's and unused."""
        logits = self.policy(observation)[0]
        if deterministic:
            return logits.argmax(dim=-1).numpy(), None
        return Categorical(logits=logits).sample().numpy(), None

    def settings(self) -> dict:
        """The algorithm's own settings as plain data (not the policy's: :meth:`PlacementNetwork.settings`), such
        that ``from_settings(env, policy_settings, settings)`` rebuilds it."""
        raise NotImplementedError

    @classmethod
    def from_settings(cls: type[Algorithm], env: gym.Env, policy: dict, settings: dict,
                      **kwargs: Any) -> Algorithm:
        """A new, untrained instance on ``env`` with the saved ``policy`` settings and algorithm ``settings``."""
        return cls(env, **policy, **settings, **kwargs)

    def training_state(self) -> tuple[int, dict]:
        """Where a resumed run continues: ``(steps, state)``, the steps trained and, as plain data, what besides the
        weights it needs to go on exactly as this run would (here the random generators' states; a subclass adds
        its counters, or reports the last point it can resume from exactly, whose weights must be the current
        ones)."""
        return self.num_timesteps, {"generators": random_state.capture()}

    def restore_training_state(self, state: dict) -> None:
        """Set what :meth:`training_state` saved (called after the weights are loaded). Raises ``ValueError``
        (or ``TypeError`` / ``KeyError``) when ``state`` is malformed."""
        random_state.restore(state["generators"])

    def checkpoint(self) -> Checkpoint:
        """This model as a :class:`~agents.algorithms.checkpoint.Checkpoint` (weights, optimizer state and the
        :meth:`training_state`)."""
        optimizer = getattr(self.policy, "optimizer", None)
        policy = self.policy.settings()
        settings = {k: v for k, v in self.settings().items() if k not in policy}
        steps, state = self.training_state()
        return Checkpoint(self.name, policy, settings, self.observation_space, steps, self.policy.state_dict(),
                          None if optimizer is None else optimizer.state_dict(), state)

    def save(self, path: str | os.PathLike) -> None:
        """Write the project's checkpoint to ``path`` atomically (:mod:`agents.algorithms.checkpoint`)."""
        write_checkpoint(self.checkpoint(), path)

    @classmethod
    def load(cls: type[Algorithm], path: str | os.PathLike, env: gym.Env, **kwargs: Any) -> Algorithm:
        """The model saved at ``path``, on ``env`` (which must have the saved observation space); ``kwargs`` go to
        the constructor (``tensorboard_log``). Raises ``ValueError`` for a checkpoint of another algorithm, another
        observation space, or weights that do not fit."""
        return cls.from_checkpoint(read_checkpoint(path), env, path, **kwargs)

    @classmethod
    def from_checkpoint(cls: type[Algorithm], saved: Checkpoint, env: gym.Env, path: str | os.PathLike,
                        **kwargs: Any) -> Algorithm:
        """:meth:`load` of a checkpoint already read from ``path`` (named in errors)."""
        if saved.algo != cls.name:
            raise ValueError(f"{str(path)!r} holds a {ALGORITHM_TITLES.get(saved.algo, saved.algo)} model, not "
                             f"{cls.description}")
        check_observation_space(saved, env, path)
        model = cls.from_settings(env, saved.policy, saved.algo_kwargs, **kwargs)
        load_state(model, saved, path)
        restore_training_state(model, saved, path)
        return model
