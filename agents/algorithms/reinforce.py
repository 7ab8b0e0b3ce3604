"""The FADP-GT paper's agent: REINFORCE with a graph encoder and a per-node device head (paper section 2.4).

Read top to bottom: :class:`ReinforceConfig` holds the settings; :class:`Reinforce` (SB3's ``learn`` / ``save`` /
``load`` / ``predict``, from :class:`~agents.algorithms.base.PlacementAlgorithm`; :func:`train_reinforce` is a
shortcut) trains a :class:`~agents.policies.network.PlacementNetwork` on ``DevicePlacement-v0``, sampling each
node's device from the policy (multinomial) or, with probability
``epsilon``, uniformly among the cluster's devices (epsilon-greedy, seeded);
rewards are clipped to ``[-reward_clip, reward_clip]``; after each episode
the returns :math:`G_t = \\sum_{k \\ge t} \\gamma^{k-t} r_k` (eq. 18, gamma
0.95) weight the log-probabilities of the actions taken, and encoder and head
are updated together with Adam (learning rate 1e-3). :func:`save_network` / :func:`load_network` keep a bare
network in the checkpoint format.

One addition to the paper: the gradient uses :math:`G_t - b_t`, with
:math:`b_t` an exponential moving average (``baseline_decay``, 0.9) of past
returns at step t. A baseline leaves the expected gradient unchanged and cuts
its variance; ``baseline_decay=0`` gives the plain estimator.
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import Tensor
from torch.distributions import Categorical

from agents.policies.network import PlacementNetwork
from placement_env.checks import checked_count, checked_finite

from . import random_state
from .base import PlacementAlgorithm
from .checkpoint import Checkpoint, read_checkpoint, write_checkpoint


@dataclass(frozen=True)
class ReinforceConfig:
    """The REINFORCE agent's settings. Frozen: they are checked once, when built, and cannot change after."""

    encoder: str = "fadp-gt"
    encoder_kwargs: dict = field(default_factory=dict)
    head_hidden: int = 64
    expected_moves: float | None = None  # the head's optional stay prior (agents.policies.heads)
    gamma: float = 0.95
    learning_rate: float = 1e-3
    epsilon: float = 0.1
    reward_clip: float = 1.0
    baseline_decay: float = 0.9
    episodes: int = 200
    seed: int = 0

    def __post_init__(self) -> None:
        """Refuse a setting that would train on NaN or silently do something else, naming it."""
        def number(name: str) -> float:
            return checked_finite(f"ReinforceConfig.{name}", getattr(self, name))

        for name in ("gamma", "epsilon", "baseline_decay"):
            if not 0.0 <= number(name) <= 1.0:
                raise ValueError(f"ReinforceConfig.{name} must be in [0, 1], got {getattr(self, name)!r}")
        for name in ("learning_rate", "reward_clip"):
            if not number(name) > 0.0:
                raise ValueError(f"ReinforceConfig.{name} must be positive, got {getattr(self, name)!r}")
        for name, smallest in (("head_hidden", 1), ("episodes", 1), ("seed", 0)):
            checked_count(f"ReinforceConfig.{name}", getattr(self, name), smallest)


def sample_action(logits: Tensor, epsilon: float, generator: torch.Generator) -> tuple[Tensor, Tensor]:
    """Per node: a device from the policy, or with probability ``epsilon`` a uniformly random allowed one.

    Returns the action (N,) and the policy's log-probability of it (summed over nodes).
    """
    dist = Categorical(logits=logits)
    probs = dist.probs
    allowed = (logits > -1e8).float()
    uniform = allowed / allowed.sum(dim=-1, keepdim=True)
    explore = torch.rand(probs.shape[:-1], generator=generator) < epsilon
    behaviour = torch.where(explore.unsqueeze(-1), uniform, probs.detach())
    action = torch.multinomial(behaviour.reshape(-1, behaviour.shape[-1]), 1, generator=generator)
    action = action.view(probs.shape[:-1])
    return action, dist.log_prob(action).sum()


def discounted_returns(rewards: list[float], gamma: float) -> Tensor:
    """:math:`G_t = r_t + \\gamma G_{t+1}` (eq. 18)."""
    out, g = [], 0.0
    for r in reversed(rewards):
        g = r + gamma * g
        out.append(g)
    return torch.tensor(out[::-1], dtype=torch.float32)


class Reinforce(PlacementAlgorithm):
    """The paper's REINFORCE agent with stable-baselines3's interface: ``learn`` / ``save`` / ``load`` / ``predict``.

    ``Reinforce(env, config).learn(total_timesteps, callback)`` runs whole
    episodes on ``env`` (a ``DevicePlacement-v0``) until ``total_timesteps``
    environment steps or ``config.episodes`` episodes, whichever comes first,
    updating the network after each episode. ``callback`` is an SB3
    ``BaseCallback`` (or a list of them), called after every environment step
    with ``infos`` and ``dones`` in its locals (and ``episode_record``, the
    episode's record, on its last step); returning False stops training.

    Attributes: ``policy`` (the :class:`~agents.policies.network.PlacementNetwork`, with its Adam
    optimizer as ``policy.optimizer``, as in SB3), ``num_timesteps``,
    ``history`` (one record per episode: ``episode``, ``return``,
    ``best_makespan`` s, ``best_oom``, ``best_placement``, ``graph``,
    ``seconds``).
    """

    name = "reinforce"
    description = "a REINFORCE agent"

    def __init__(self, env: gym.Env, config: ReinforceConfig | None = None,
                 network: PlacementNetwork | None = None, tensorboard_log: str | None = None) -> None:
        super().__init__(env, tensorboard_log)
        self.config = config or ReinforceConfig()
        torch.manual_seed(self.config.seed)
        self.generator = torch.Generator().manual_seed(self.config.seed)
        self.policy = network or PlacementNetwork(self.observation_space, self.config.encoder,
                                                  self.config.encoder_kwargs, self.config.head_hidden,
                                                  self.config.expected_moves)
        self.policy.optimizer = torch.optim.Adam(self.policy.parameters(), lr=self.config.learning_rate)
        self.episodes = 0
        self.history: list[dict] = []
        self._baseline: Tensor | None = None
        self._resume_point = self._boundary()  # where a checkpoint taken now resumes: the last finished episode

    def learn(self, total_timesteps: int, callback=None, progress_bar: bool = False,
              reset_num_timesteps: bool = True, tb_log_name: str = "reinforce") -> Reinforce:
        """Train for ``total_timesteps`` environment steps (or ``config.episodes`` episodes); returns self."""
        if reset_num_timesteps:
            self.episodes = 0
        hooks, total_timesteps = self.start_learning(total_timesteps, callback, progress_bar, reset_num_timesteps)
        config, start = self.config, time.perf_counter()
        self._resume_point = self._boundary()
        running = True
        while running and self.num_timesteps < total_timesteps and self.episodes < config.episodes:
            obs, info = self.env.reset(seed=config.seed + self.episodes)  # each episode seeded: resumes exactly
            log_probs, rewards, done = [], [], False
            while not done:
                logits = self.policy(obs)[0]
                action, log_prob = sample_action(logits, config.epsilon, self.generator)
                obs, reward, terminated, truncated, info = self.env.step(action.numpy())
                self.num_timesteps += 1
                log_probs.append(log_prob)
                rewards.append(float(np.clip(float(reward), -config.reward_clip, config.reward_clip)))
                done = terminated or truncated
                record = self._update(log_probs, rewards, info, start) if done else None
                hooks.update_locals({"infos": [info], "dones": [done], "episode_record": record})
                if not hooks.on_step():
                    running = False
                    break
        hooks.on_training_end()
        return self

    def _update(self, log_probs: list[Tensor], rewards: list[float], info: dict, start: float) -> dict:
        """One policy-gradient step on the finished episode; returns its record."""
        config = self.config
        returns = discounted_returns(rewards, config.gamma)
        advantage = returns
        if config.baseline_decay > 0:
            if self._baseline is None or self._baseline.shape != returns.shape:  # first episode (or a new length)
                self._baseline = returns.clone()
            advantage = returns - self._baseline
            self._baseline = config.baseline_decay * self._baseline + (1 - config.baseline_decay) * returns
        loss = -(torch.stack(log_probs) * advantage).sum()
        self.policy.optimizer.zero_grad()
        loss.backward()
        self.policy.optimizer.step()
        record = {"episode": self.episodes, "return": float(sum(rewards)), "best_makespan": info["best_makespan"],
                  "best_oom": info["best_oom"], "best_placement": info["best_placement"], "graph": info["graph"],
                  "seconds": time.perf_counter() - start}
        self.episodes += 1
        self.history.append(record)
        self._resume_point = self._boundary()
        return record

    def _boundary(self) -> tuple[int, dict]:
        """``(steps, state)`` now, between episodes: what :meth:`training_state` reports until the next update."""
        baseline = None if self._baseline is None else [float(b) for b in self._baseline]
        return self.num_timesteps, {"generators": random_state.capture(reinforce=self.generator),
                                    "episodes": self.episodes, "baseline": baseline}

    def training_state(self) -> tuple[int, dict]:
        """The last finished episode (``(steps, state)``): a checkpoint taken during an episode resumes at its
        start, the weights being those of that point (they change only when an episode ends)."""
        return self._resume_point

    def restore_training_state(self, state: dict) -> None:
        """Set the generators, the episode count and the baseline of a checkpoint's training state."""
        random_state.restore(state["generators"], reinforce=self.generator)
        self.episodes = int(state["episodes"])
        baseline = state["baseline"]
        self._baseline = None if baseline is None else torch.tensor([float(b) for b in baseline],
                                                                     dtype=torch.float32)
        self._resume_point = self._boundary()

    def settings(self) -> dict:
        """The fields of :class:`ReinforceConfig` (saved in checkpoints; the policy's are saved apart)."""
        return asdict(self.config)

    @classmethod
    def from_settings(cls, env: gym.Env, policy: dict, settings: dict, **kwargs: Any) -> Reinforce:
        """A new agent on ``env`` whose :class:`ReinforceConfig` holds ``policy`` and ``settings``."""
        return cls(env, ReinforceConfig(**policy, **settings), **kwargs)


def train_reinforce(env: gym.Env, config: ReinforceConfig | None = None,
                    network: PlacementNetwork | None = None, time_budget: float | None = None,
                    callback=None) -> tuple[PlacementNetwork, list[dict]]:
    """Train on ``env`` for ``config.episodes`` episodes (or ``time_budget`` seconds); returns the network and
    one record per episode (see :class:`Reinforce`). ``callback(record)`` is called after each episode;
    returning False stops training."""
    from stable_baselines3.common.callbacks import BaseCallback

    class EveryEpisode(BaseCallback):
        def _on_step(self) -> bool:
            record = self.locals.get("episode_record")
            if record is None:
                return True
            if callback is not None and callback(record) is False:
                return False
            return time_budget is None or record["seconds"] <= time_budget

    model = Reinforce(env, config, network)
    model.learn(total_timesteps=2**62, callback=EveryEpisode())
    return model.policy, model.history


def save_network(network: PlacementNetwork, config: ReinforceConfig, path: str | os.PathLike,
                 observation_space: gym.spaces.Dict) -> None:
    """Save a bare REINFORCE ``network`` (no optimizer state) with its ``config`` in the checkpoint format."""
    settings = {k: v for k, v in asdict(config).items() if k not in network.settings()}
    write_checkpoint(Checkpoint(Reinforce.name, network.settings(), settings, observation_space, 0,
                                network.state_dict(), None), path)


def load_network(path: str | os.PathLike) -> tuple[PlacementNetwork, ReinforceConfig, gym.spaces.Dict]:
    """``(network, config, observation space)`` of a REINFORCE checkpoint; ``ValueError`` for another algorithm's
    or weights that do not fit."""
    saved = read_checkpoint(path)
    if saved.algo != Reinforce.name:
        raise ValueError(f"{str(path)!r} holds a {saved.algo} model, not a REINFORCE network")
    config = ReinforceConfig(**saved.policy, **saved.algo_kwargs)
    network = PlacementNetwork(saved.observation_space, config.encoder, config.encoder_kwargs, config.head_hidden,
                               config.expected_moves)
    try:
        network.load_state_dict(saved.policy_state)
    except RuntimeError as error:
        raise ValueError(f"{str(path)!r}: the saved weights do not fit its settings "
                         f"({str(error).splitlines()[0]})") from None
    return network, config, saved.observation_space
