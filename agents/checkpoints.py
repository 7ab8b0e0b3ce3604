"""Saving trained policies and placing unseen graphs with them.

* REINFORCE networks: :func:`save_network` / :func:`load_network` (weights, the
  config and the padding sizes in one ``.pt`` file).
* stable-baselines3 models: their own ``model.save(path)`` / ``PPO.load(path)``
  (the policy classes are importable, so nothing else is needed).
* :func:`place_graph`: one call that loads either kind and returns a placement
  of a graph the policy has never seen (generalization, as in Placeto).
"""

from __future__ import annotations

import os
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch

from .reinforce import PlacementNetwork, ReinforceConfig, config_dict

FORMAT = "device-placement-reinforce"


def save_network(network: PlacementNetwork, config: ReinforceConfig, path: str | os.PathLike,
                 observation_space: gym.spaces.Dict) -> None:
    torch.save({"format": FORMAT, "version": 1, "config": config_dict(config), "state_dict": network.state_dict(),
                "observation_space": observation_space}, path)


def load_network(path: str | os.PathLike) -> tuple[PlacementNetwork, ReinforceConfig, gym.spaces.Dict]:
    try:
        data = torch.load(path, weights_only=False)
    except Exception as error:  # noqa: BLE001 - pickle and zip raise anything on a file that is not a checkpoint
        raise ValueError(f"{str(path)!r} is not a REINFORCE checkpoint of this project (torch.load: "
                         f"{type(error).__name__}: {error})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ValueError(f"{str(path)!r} is not a REINFORCE checkpoint of this project")
    config = ReinforceConfig(**data["config"])
    network = PlacementNetwork(data["observation_space"], config.encoder, config.encoder_kwargs, config.head_hidden,
                               config.expected_moves)
    network.load_state_dict(data["state_dict"])
    return network, config, data["observation_space"]


def place_graph(policy, graph, num_devices: int | None = None, cluster=None, steps: int = 10,
                initial_placement: str = "single", seed: int = 0, coarsen: bool = False) -> tuple[np.ndarray, float]:
    """Place ``graph`` (name, path or object) with a trained policy; returns ``(device per node, makespan s)``.

    ``policy``: a checkpoint path (REINFORCE ``.pt`` or a ``.zip`` saved by SB3 PPO), a
    :class:`PlacementNetwork`, or an SB3 model. The environment is padded to
    the policy's sizes, so the graph may have at most that many units and
    unit edges; with ``coarsen=True`` a larger graph is first coarsened until
    it fits (:func:`placement_env.coarsen_to_fit`). Coarsening only groups ops,
    so the placement is still a device per node of ``graph``, and the makespan
    is ``graph``'s.
    """
    import placement_env  # noqa: F401 - registers the environment

    if isinstance(policy, (str, os.PathLike)):
        path = Path(policy)
        if not path.is_file():
            raise FileNotFoundError(f"no such checkpoint file: {str(path)!r}")
        if path.suffix == ".zip":
            from stable_baselines3 import PPO

            try:
                policy = PPO.load(path)
            except Exception as error:  # noqa: BLE001 - zipfile / pickle errors on a file that is not a model
                raise ValueError(f"{str(path)!r} is not a stable-baselines3 PPO model: {error}") from None
        else:
            policy, _, _ = load_network(path)
    if isinstance(policy, PlacementNetwork):
        space = policy.observation_space
        act = lambda obs: policy(obs)[0].argmax(dim=-1).numpy()  # noqa: E731
    else:
        space = policy.observation_space
        act = lambda obs: policy.predict(obs, deterministic=True)[0]  # noqa: E731
    n, e, d = int(space["node_mask"].n), int(space["edge_mask"].n), int(space["gpu_onehot"].n)
    if coarsen:
        from placement_env import coarsen_to_fit
        from placement_env.placement_task import resolve_graphs

        graphs = resolve_graphs(graph)
        if len(graphs) != 1:
            raise ValueError(f"coarsen=True places one graph, got {len(graphs)} ({graph!r})")
        graph = coarsen_to_fit(graphs[0], n, e)
    env = gym.make("DevicePlacement-v0", graph=graph, num_devices=num_devices, cluster=cluster, max_nodes=n,
                   max_edges=e, max_devices=d, episode_length=steps, initial_placement=initial_placement)
    obs, info = env.reset(seed=seed)
    with torch.no_grad():
        for _ in range(steps):
            obs, _, _, truncated, info = env.step(act(obs))
            if truncated:
                break
    return info["best_placement"], info["best_makespan"]
