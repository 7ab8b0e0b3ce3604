"""The guided search as a training algorithm with stable-baselines3's interface: ``train.py --algo guided``.

:class:`GuidedSearch` runs :func:`agents.guided_search.guided_search` one round at a time on the graphs of a
``DevicePlacement-v0`` environment (in turn, each keeping its own archive of the best placements found), so
that ``train.py``'s callbacks (the best-placement tracker, checkpoints, the budget, Ctrl-C) see it as they see
PPO: ``learn(total_timesteps, callback)``, ``predict``, ``save``, ``load``, ``num_timesteps`` (here: the
placements the policy proposed) and ``policy.optimizer``. Given ``time_left`` (``train.py`` sets it), a round's
annealing never runs past the budget. The policy is the same
:class:`~agents.reinforce.PlacementNetwork` as REINFORCE's and :mod:`agents.pretrain`'s.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, cast

import gymnasium as gym
import numpy as np
import torch
from torch.distributions import Categorical

from placement_env.checks import checked_count, checked_finite

from .guided_search import EliteArchive, GuidedSearchSettings, PlacementProblem, guided_search
from .reinforce import PlacementNetwork


class GuidedSearch:
    """Propose, improve, learn on every graph of ``env`` (module docstring).

    Args:
        env: a ``DevicePlacement-v0`` environment (its graphs, cluster, start placement and padding are used).
        encoder, encoder_kwargs, head_hidden: the policy's encoder and head.
        learning_rate: Adam's step size for the imitation.
        samples: placements proposed per forward pass.
        search_seconds: annealing per chain per round (s).
        elite: placements kept per graph and imitated.
        seed: seeds the network and the sampling.
    """

    def __init__(self, env: gym.Env, encoder: str = "fadp-gt", encoder_kwargs: dict | None = None,
                 head_hidden: int = 64, learning_rate: float = 1e-3, samples: int = 256,
                 search_seconds: float = 1.0, elite: int = 8, seed: int = 0,
                 tensorboard_log: str | None = None) -> None:
        if not checked_finite("learning_rate", learning_rate) > 0:
            raise ValueError(f"learning_rate must be positive, got {learning_rate!r}")
        if not checked_finite("search_seconds", search_seconds) > 0:
            raise ValueError(f"search_seconds must be positive, got {search_seconds!r}")
        self.env = env
        self.observation_space = cast(gym.spaces.Dict, env.observation_space)
        self.settings = GuidedSearchSettings(samples=checked_count("samples", samples, 1),
                                             search_seconds=float(search_seconds),
                                             elite=checked_count("elite", elite, 1), chains=2)
        self.seed, self.learning_rate = seed, learning_rate
        torch.manual_seed(seed)
        self.policy = PlacementNetwork(self.observation_space, encoder, encoder_kwargs, head_hidden)
        self.policy.optimizer = torch.optim.Adam(self.policy.parameters(), lr=learning_rate)
        self.tensorboard_log = tensorboard_log
        self.num_timesteps = 0
        self.rounds = 0
        self.time_left: Callable[[], float] | None = None  # seconds of budget left (train.py's clock), if any
        self._problems: dict[int, tuple[PlacementProblem, EliteArchive]] = {}

    def get_env(self) -> gym.Env:
        return self.env

    @property
    def logger(self) -> Any:
        from stable_baselines3.common.utils import configure_logger

        return configure_logger(0, None, "guided", True)

    def _problem(self, gi: int) -> tuple[PlacementProblem, EliteArchive]:
        if gi not in self._problems:
            task = self.env.unwrapped.task  # type: ignore[attr-defined]
            start = task.initial_units(gi, self.env.unwrapped.initial_placement,  # type: ignore[attr-defined]
                                       np.random.default_rng(self.seed))
            problem = PlacementProblem(task.graphs[gi], task.cluster, task.max_devices, start)
            archive = EliteArchive(self.settings.elite)
            archive.add(start[None, :], *problem.judge(start[None, :]))
            self._problems[gi] = (problem, archive)
        return self._problems[gi]

    def learn(self, total_timesteps: int, callback: Any = None, progress_bar: bool = False,
              reset_num_timesteps: bool = True, tb_log_name: str = "guided") -> GuidedSearch:
        """Run rounds until ``total_timesteps`` proposals or until a callback returns False; returns self."""
        from stable_baselines3.common.callbacks import CallbackList, ProgressBarCallback

        if reset_num_timesteps:
            self.num_timesteps = 0
        callbacks = list(callback) if isinstance(callback, (list, tuple)) else [callback] if callback else []
        if progress_bar:
            callbacks.append(ProgressBarCallback())
        hooks = CallbackList(callbacks)
        hooks.init_callback(cast(Any, self))
        total = self.num_timesteps + total_timesteps if not reset_num_timesteps else total_timesteps
        hooks.on_training_start({"total_timesteps": total}, {})
        graphs = len(self.env.unwrapped.task.graphs)  # type: ignore[attr-defined]
        while self.num_timesteps < total:
            left = float("inf") if self.time_left is None else self.time_left()
            if left <= 0:
                break
            gi = self.rounds % graphs
            problem, archive = self._problem(gi)
            guided_search(self.policy, problem, left, self.settings, self.seed + self.rounds,
                          self.policy.optimizer, max_rounds=1, archive=archive)
            self.num_timesteps += self.settings.samples
            self.rounds += 1
            units, makespan, overflow = archive.best
            info = {"graph": problem.graph.name, "best_makespan": makespan, "best_oom": overflow > 0,
                    "best_placement": problem.graph.expand_unit_placement(units)}
            hooks.update_locals({"infos": [info], "dones": [True]})
            if not hooks.on_step():
                break
        hooks.on_training_end()
        return self

    @torch.no_grad()
    def predict(self, observation: dict, state: Any = None, episode_start: Any = None,
                deterministic: bool = False) -> tuple[np.ndarray, None]:
        """A device per unit for ``observation`` (argmax when ``deterministic``), as SB3's ``predict``."""
        logits = self.policy(observation)[0]
        if deterministic:
            return logits.argmax(dim=-1).numpy(), None
        return Categorical(logits=logits).sample().numpy(), None

    def settings_dict(self) -> dict:
        """The settings to rebuild this algorithm with (saved in checkpoints)."""
        return {"head_hidden": self.policy.head_hidden, "learning_rate": self.learning_rate,
                "samples": self.settings.samples, "search_seconds": self.settings.search_seconds,
                "elite": self.settings.elite, "seed": self.seed}

    def save(self, path: str | os.PathLike) -> None:
        """Write the project's checkpoint (:mod:`agents.checkpoints`): settings as JSON, weights as tensors."""
        from .checkpoints import save_checkpoint

        save_checkpoint(self, path, "guided", self.settings_dict())

    @classmethod
    def load(cls, path: str | os.PathLike, env: gym.Env) -> GuidedSearch:
        """The algorithm saved at ``path``, on ``env`` (which must have the saved observation space)."""
        from .checkpoints import load_as

        return cast(GuidedSearch, load_as(cls, path, env, "a guided search"))
