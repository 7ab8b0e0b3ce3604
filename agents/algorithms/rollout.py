"""A trained policy placing a graph by acting in the environment: one rollout loop for every kind of policy.

* :func:`rollout` runs any action function for a number of steps and returns the best placement the episode saw;
* :func:`greedy_placement` is that loop with a :class:`~agents.policies.network.PlacementNetwork`'s argmax, in a
  given environment;
* :func:`policy_placement` places a graph on a cluster with a saved or in-memory policy of any algorithm, in an
  environment padded to the policy's sizes (``agents.place`` calls it for policies that are not the pretrained
  placer's).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from agents.policies.network import PlacementNetwork
from placement_env.cluster import Cluster
from placement_env.envs.task import resolve_graphs
from placement_env.graph.coarsen import coarsen_to_fit

from .checkpoint import padding, read_checkpoint
from .registry import load_model

Act = Callable[[dict], np.ndarray]  # an observation -> a device per unit


@torch.no_grad()
def rollout(act: Act, env: gym.Env, steps: int, seed: int = 0) -> tuple[np.ndarray, float]:
    """Reset ``env`` with ``seed`` and take ``act``'s actions for ``steps`` steps (fewer if the episode ends);
    returns the best ``(device per node, makespan s)`` the episode saw (the environment's ``info``)."""
    obs, info = env.reset(seed=seed)
    for _ in range(steps):
        obs, _, terminated, truncated, info = env.step(act(obs))
        if terminated or truncated:
            break
    return np.asarray(info["best_placement"]), float(info["best_makespan"])


def greedy_placement(network: PlacementNetwork, env: gym.Env, steps: int | None = None,
                     seed: int = 0) -> tuple[np.ndarray, float]:
    """:func:`rollout` of ``network``'s argmax in ``env`` for ``steps`` steps (default: one episode)."""
    steps = int(steps or getattr(env.unwrapped, "episode_length", None) or 1)
    return rollout(lambda obs: network(obs)[0].argmax(dim=-1).numpy(), env, steps, seed)


def policy_placement(graph: Any, cluster: Cluster | str | None, policy: Any, steps: int = 10,
                     initial_placement: str = "single", seed: int = 0,
                     coarsen: bool = False) -> tuple[np.ndarray, float]:
    """Place ``graph`` (a graph, name or path) on ``cluster`` (a :class:`~placement_env.cluster.Cluster`, a cluster
    file, or None: 3 P100s) by rolling out a trained policy for ``steps`` steps from ``initial_placement``;
    returns ``(device per node, makespan s)``.

    ``policy``: a checkpoint path (any algorithm), a :class:`~agents.policies.network.PlacementNetwork`, or a
    model with SB3's ``predict``. The environment is padded to the policy's sizes, so the graph may have at most
    that many units and unit edges; with ``coarsen=True`` a larger graph is first coarsened until it fits
    (:func:`placement_env.coarsen_to_fit`). Coarsening only groups ops, so the placement is still a device per
    node of ``graph``. Raises ``ValueError`` for a graph that does not fit the padding, a file that is not a
    checkpoint, ``FileNotFoundError`` for a missing one."""
    saved = read_checkpoint(policy) if isinstance(policy, (str, os.PathLike)) else None
    n, e, d = padding(saved.observation_space if saved is not None else policy.observation_space)
    if coarsen:
        graphs = resolve_graphs(graph)
        if len(graphs) != 1:
            raise ValueError(f"coarsen=True places one graph, got {len(graphs)} ({graph!r})")
        graph = coarsen_to_fit(graphs[0], n, e)
    where: dict[str, Any] = {"cluster": cluster} if cluster is not None else {}
    env = gym.make("DevicePlacement-v0", graph=graph, max_nodes=n, max_edges=e, max_devices=d,
                   episode_length=steps, initial_placement=initial_placement, **where)
    if saved is not None:
        model = load_model(policy, env)
        act: Act = lambda obs: model.predict(obs, deterministic=True)[0]
    elif isinstance(policy, PlacementNetwork):
        act = lambda obs: policy(obs)[0].argmax(dim=-1).numpy()
    else:
        act = lambda obs: policy.predict(obs, deterministic=True)[0]
    return rollout(act, env, steps, seed)


def place_graph(policy: Any, graph: Any, num_devices: int | None = None, cluster: Any = None, steps: int = 10,
                initial_placement: str = "single", seed: int = 0, coarsen: bool = False) -> tuple[np.ndarray, float]:
    """The name before 0.2.0 of :func:`policy_placement` (policy first); deprecated: use
    ``agents.place(graph, cluster, policy)``, whose argument order every ``place`` of the project shares."""
    warnings.warn("agents.place_graph(policy, graph, ...) is deprecated; use agents.place(graph, cluster, policy)",
                  DeprecationWarning, stacklevel=2)
    if cluster is None and num_devices is not None:
        cluster = Cluster.preset(num_devices=num_devices)
    return policy_placement(graph, cluster, policy, steps, initial_placement, seed, coarsen)
