"""The FADP-GT paper's agent: REINFORCE with a graph encoder and a per-node device head (paper section 2.4).

Read top to bottom: :class:`PlacementNetwork` is encoder + head;
:func:`train_reinforce` runs episodes on ``DevicePlacement-v0``, sampling each
node's device from the policy (multinomial) or, with probability
``epsilon``, uniformly among the cluster's devices (epsilon-greedy, seeded);
rewards are clipped to ``[-reward_clip, reward_clip]``; after each episode
the returns :math:`G_t = \\sum_{k \\ge t} \\gamma^{k-t} r_k` (eq. 18, gamma
0.95) weight the log-probabilities of the actions taken, and encoder and head
are updated together with Adam (learning rate 1e-3). :func:`greedy_placement`
evaluates with argmax.

One addition to the paper: the gradient uses :math:`G_t - b_t`, with
:math:`b_t` an exponential moving average (``baseline_decay``, 0.9) of past
returns at step t. A baseline leaves the expected gradient unchanged and cuts
its variance; ``baseline_decay=0`` gives the plain estimator.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field

import gymnasium as gym
import numpy as np
import torch
from torch import Tensor, nn
from torch.distributions import Categorical

from graph_encoders import GraphBatch, build_encoder
from placement_env.graph import checked_count, checked_finite

from .features_extractor import observation_sizes
from .heads import NodeDeviceHead


@dataclass(frozen=True)
class ReinforceConfig:
    """The REINFORCE agent's settings. Frozen: they are checked once, when built, and cannot change after."""

    encoder: str = "fadp-gt"
    encoder_kwargs: dict = field(default_factory=dict)
    head_hidden: int = 64
    expected_moves: float | None = None  # the head's optional stay prior (agents.heads)
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


class PlacementNetwork(nn.Module):
    """Encoder + :class:`~agents.heads.NodeDeviceHead`: observation batch -> (B, N, D) device logits."""

    def __init__(self, observation_space: gym.spaces.Dict, encoder: str = "fadp-gt",
                 encoder_kwargs: dict | None = None, head_hidden: int = 64,
                 expected_moves: float | None = None) -> None:
        super().__init__()
        self.observation_space = observation_space
        self.max_nodes, in_dim, self.max_devices = observation_sizes(observation_space)
        self.encoder = build_encoder(encoder, in_dim, **(encoder_kwargs or {}))
        self.head = NodeDeviceHead(self.encoder.out_dim, self.max_devices, head_hidden, expected_moves)
        last = self.head.mlp[-1]  # start near the uniform policy: every device equally likely
        nn.init.orthogonal_(last.weight, gain=0.01)
        nn.init.zeros_(last.bias)

    def forward(self, observation: dict) -> Tensor:
        batch = GraphBatch.from_observation(observation)
        nodes, graph = self.encoder(batch)
        return self.head(nodes, graph, batch.gpu_onehot, batch.node_mask, batch.current_device)


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


def train_reinforce(env: gym.Env, config: ReinforceConfig | None = None,
                    network: PlacementNetwork | None = None, time_budget: float | None = None,
                    callback=None) -> tuple[PlacementNetwork, list[dict]]:
    """Train on ``env`` (a ``DevicePlacement-v0``); returns the network and one record per episode
    (``episode``, ``return``, ``best_makespan`` s, ``best_oom``, ``best_placement``, ``seconds``)."""
    config = config or ReinforceConfig()
    torch.manual_seed(config.seed)
    generator = torch.Generator().manual_seed(config.seed)
    net = network or PlacementNetwork(env.observation_space, config.encoder, config.encoder_kwargs,
                                      config.head_hidden, config.expected_moves)
    optimizer = torch.optim.Adam(net.parameters(), lr=config.learning_rate)
    history: list[dict] = []
    baseline: Tensor | None = None
    start = time.perf_counter()
    obs, info = env.reset(seed=config.seed)
    for episode in range(config.episodes):
        if episode:
            obs, info = env.reset()
        log_probs, rewards = [], []
        done = False
        while not done:
            logits = net(obs)[0]
            action, log_prob = sample_action(logits, config.epsilon, generator)
            obs, reward, terminated, truncated, info = env.step(action.numpy())
            log_probs.append(log_prob)
            rewards.append(float(np.clip(reward, -config.reward_clip, config.reward_clip)))
            done = terminated or truncated
        returns = discounted_returns(rewards, config.gamma)
        advantage = returns
        if config.baseline_decay > 0:
            if baseline is None or baseline.shape != returns.shape:  # first episode (or a new length)
                baseline = returns.clone()
            advantage = returns - baseline
            baseline = config.baseline_decay * baseline + (1 - config.baseline_decay) * returns
        loss = -(torch.stack(log_probs) * advantage).sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        record = {"episode": episode, "return": float(sum(rewards)), "best_makespan": info["best_makespan"],
                  "best_oom": info["best_oom"], "best_placement": info["best_placement"], "graph": info["graph"],
                  "seconds": time.perf_counter() - start}
        history.append(record)
        if callback is not None and callback(record) is False:
            break
        if time_budget is not None and record["seconds"] > time_budget:
            break
    return net, history


@torch.no_grad()
def greedy_placement(network: PlacementNetwork, env: gym.Env, steps: int | None = None,
                     seed: int = 0) -> tuple[np.ndarray, float]:
    """Run argmax actions for ``steps`` steps (default: one episode); best ``(node placement, makespan s)``."""
    obs, info = env.reset(seed=seed)
    steps = steps or getattr(env.unwrapped, "episode_length", 1)
    for _ in range(steps):
        action = network(obs)[0].argmax(dim=-1).numpy()
        obs, _, terminated, truncated, info = env.step(action)
        if terminated or truncated:
            break
    return info["best_placement"], info["best_makespan"]


def config_dict(config: ReinforceConfig) -> dict:
    return asdict(config)
