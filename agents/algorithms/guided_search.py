"""The guided search as a training algorithm with stable-baselines3's interface: ``train.py --algo guided``.

:class:`GuidedSearch` runs :func:`agents.algorithms.search_rounds.search_rounds` one round at a time on the graphs
of a ``DevicePlacement-v0`` environment (in turn, each keeping its own archive of the best placements found), so
that ``train.py``'s callbacks (the best-placement tracker, checkpoints, the budget, Ctrl-C) see it as they see
PPO: ``learn(total_timesteps, callback)``, ``predict``, ``save``, ``load``, ``num_timesteps`` (here: the
placements the policy proposed) and ``policy.optimizer``. Given ``time_left`` (``train.py`` sets it), a round's
annealing never runs past the budget. The policy is the same
:class:`~agents.policies.network.PlacementNetwork` as REINFORCE's and the pretrained placer's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from agents.policies.network import PlacementNetwork
from placement_env.checks import checked_count, checked_finite
from placement_env.sim.pipeline import Step

from . import random_state
from .base import PlacementAlgorithm
from .problem import PlacementProblem
from .search_rounds import EliteArchive, SearchRoundsConfig, search_rounds


class GuidedSearch(PlacementAlgorithm):
    """Propose, improve, learn on every graph of ``env`` (module docstring).

    Args:
        env: a ``DevicePlacement-v0`` environment (its graphs, cluster, start placement and padding are used).
        encoder, encoder_kwargs, head_hidden: the policy's encoder and head.
        learning_rate: Adam's step size for the imitation.
        samples: placements proposed per forward pass.
        search_seconds: annealing per chain per round (s).
        elite: placements kept per graph and imitated.
        seed: seeds the network and the sampling.
        tensorboard_log: a folder for SB3's logger, or None.
        head: the policy's device head (:data:`agents.policies.network.HEADS`).

    Raises:
        ValueError: a setting out of range, named.
    """

    name = "guided"
    description = "a guided search"

    def __init__(self, env: gym.Env, encoder: str = "fadp-gt", encoder_kwargs: dict | None = None,
                 head_hidden: int = 64, learning_rate: float = 1e-3, samples: int = 256,
                 search_seconds: float = 1.0, elite: int = 8, seed: int = 0,
                 tensorboard_log: str | None = None, head: str = "per-unit") -> None:
        if not checked_finite("learning_rate", learning_rate) > 0:
            raise ValueError(f"learning_rate must be positive, got {learning_rate!r}")
        if not checked_finite("search_seconds", search_seconds) > 0:
            raise ValueError(f"search_seconds must be positive, got {search_seconds!r}")
        super().__init__(env, tensorboard_log)
        self.config = SearchRoundsConfig(samples=checked_count("samples", samples, 1),
                                         search_seconds=float(search_seconds),
                                         elite=checked_count("elite", elite, 1), chains=2)
        self.seed, self.learning_rate = seed, learning_rate
        torch.manual_seed(seed)
        self.policy = PlacementNetwork(self.observation_space, encoder, encoder_kwargs, head_hidden, head=head)
        self.policy.optimizer = torch.optim.Adam(self.policy.parameters(), lr=learning_rate)
        self.rounds = 0
        self.time_left: Callable[[], float] | None = None  # seconds of budget left (train.py's clock), if any
        self._problems: dict[int, tuple[PlacementProblem, EliteArchive]] = {}

    def _problem(self, gi: int) -> tuple[PlacementProblem, EliteArchive]:
        if gi not in self._problems:
            task = self.env.unwrapped.task  # type: ignore[attr-defined]
            start = task.initial_units(gi, self.env.unwrapped.initial_placement,  # type: ignore[attr-defined]
                                       np.random.default_rng(self.seed))
            problem = PlacementProblem(task.graphs[gi], task.cluster, task.max_devices, start,
                                       Step(task.microbatches, task.schedule))  # the environment's step
            archive = EliteArchive(self.config.elite)
            archive.add(start[None, :], *problem.judge(start[None, :]))
            self._problems[gi] = (problem, archive)
        return self._problems[gi]

    def learn(self, total_timesteps: int, callback: Any = None, progress_bar: bool = False,
              reset_num_timesteps: bool = True, tb_log_name: str = "guided") -> GuidedSearch:
        """Run rounds until ``total_timesteps`` proposals or until a callback returns False; returns self."""
        hooks, total = self.start_learning(total_timesteps, callback, progress_bar, reset_num_timesteps)
        graphs = len(self.env.unwrapped.task.graphs)  # type: ignore[attr-defined]
        while self.num_timesteps < total:
            left = float("inf") if self.time_left is None else self.time_left()
            if left <= 0:
                break
            gi = self.rounds % graphs
            problem, archive = self._problem(gi)
            search_rounds(self.policy, problem, left, self.config, self.seed + self.rounds,
                          self.policy.optimizer, max_rounds=1, archive=archive)
            self.num_timesteps += self.config.samples
            self.rounds += 1
            units, makespan, overflow = archive.best
            info = {"graph": problem.graph.name, "best_makespan": makespan, "best_oom": overflow > 0,
                    "best_placement": problem.graph.expand_unit_placement(units)}
            hooks.update_locals({"infos": [info], "dones": [True]})
            if not hooks.on_step():
                break
        hooks.on_training_end()
        return self

    def training_state(self) -> tuple[int, dict]:
        """``(proposals, state)``: the generators, the rounds run (each round's seed is ``seed + rounds``) and each
        graph's archive of its best placements (unit placements with their overflow and makespan), so that a
        resumed search goes on from what it had found with the seeds it had not used. (Its annealing runs for
        seconds, so two runs are alike only as far as the machine's speed is.)"""
        archives = {str(gi): {"rows": [row.tolist() for row in archive.rows], "keys": [list(k) for k in archive.keys]}
                    for gi, (_, archive) in self._problems.items()}
        return self.num_timesteps, {"generators": random_state.capture(), "rounds": self.rounds,
                                    "archives": archives}

    def restore_training_state(self, state: dict) -> None:
        """Set the generators, the rounds and the archives of a checkpoint's training state (``ValueError`` for
        an archive of a graph the environment lacks or of placements of another size)."""
        random_state.restore(state["generators"])
        graphs = self.env.unwrapped.task.graphs  # type: ignore[attr-defined]
        archives = state["archives"]
        if not isinstance(archives, dict):
            raise ValueError("the guided search's archives are not a mapping")
        for key, saved in archives.items():
            gi = int(key)
            if not saved["rows"]:
                continue
            if not 0 <= gi < len(graphs):
                raise ValueError(f"an archive of graph {key}, but the environment has {len(graphs)} graphs")
            problem, archive = self._problem(gi)
            rows = np.asarray(saved["rows"], dtype=np.int64)
            keys = [(float(o), float(mk)) for o, mk in saved["keys"]]
            if rows.ndim != 2 or rows.shape[1] != problem.graph.num_units or len(keys) != len(rows):
                raise ValueError(f"the archive of graph {key} holds placements of another shape {rows.shape}")
            if rows.size and not 0 <= rows.min() <= rows.max() < problem.cluster.num_devices:
                raise ValueError(f"the archive of graph {key} names devices the cluster lacks")
            archive.rows, archive.keys = list(rows), keys
        self.rounds = int(state["rounds"])

    def settings(self) -> dict:
        """The settings to rebuild this algorithm with (saved in checkpoints)."""
        return {"head_hidden": self.policy.head_hidden, "learning_rate": self.learning_rate,
                "samples": self.config.samples, "search_seconds": self.config.search_seconds,
                "elite": self.config.elite, "seed": self.seed}

    @classmethod
    def from_settings(cls, env: gym.Env, policy: dict, settings: dict, **kwargs: Any) -> GuidedSearch:
        """A new guided search on ``env`` from saved settings; a pretrained policy's ``info`` (notes on how it was
        made) is not a setting and is left out. Raises ``ValueError`` for a policy with a stay prior."""
        if policy.get("expected_moves") is not None:
            raise ValueError("the guided search's policy has no stay prior; leave expected_moves unset")
        policy = {k: v for k, v in policy.items() if k != "expected_moves"}
        return cls(env, **policy, **{k: v for k, v in settings.items() if k != "info"}, **kwargs)
