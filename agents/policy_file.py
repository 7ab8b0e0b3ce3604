"""The placement policy of the guided search as a file: a network that places graphs of any size up to a limit.

:class:`~agents.reinforce.PlacementNetwork`'s weights do not depend on the number of units (the encoder and the
per-unit head run on each graph at its own size), only on the node-feature width and the device padding. So a
pretrained policy places any graph of at most :data:`POLICY_MAX_UNITS` units (larger ones are coarsened first) on
any cluster of at most ``max_devices`` devices. It is saved in the project's checkpoint format
(:mod:`agents.checkpoints`, algorithm ``guided``; tensors loaded with ``weights_only=True``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from placement_env.envs.task import DEFAULT_MAX_UNITS
from placement_env.graph.units import STATIC_FEATURES

from .checkpoints import read_checkpoint, save_checkpoint
from .reinforce import PlacementNetwork

POLICY_FILE = "policy.zip"
POLICY_MAX_UNITS = DEFAULT_MAX_UNITS  # the largest graph (placement units) a saved policy places uncoarsened
ALGO = "guided"


def policy_space(max_devices: int, max_units: int = POLICY_MAX_UNITS) -> gym.spaces.Dict:
    """The observation space the policy is described by (padding: ``max_units`` units, ``max_devices`` devices)."""
    features = len(STATIC_FEATURES) + max_devices + 1
    return gym.spaces.Dict({
        "embedding": gym.spaces.Box(0.0, 1.0, (max_units, features), np.float32),
        "node_mask": gym.spaces.MultiBinary(max_units),
        "edge_mask": gym.spaces.MultiBinary(1),
        "gpu_onehot": gym.spaces.MultiBinary(max_devices),
    })


def new_network(encoder: str = "fadp-gt", encoder_kwargs: dict | None = None, max_devices: int = 8,
                head_hidden: int = 64) -> PlacementNetwork:
    """An untrained policy for clusters of up to ``max_devices`` devices."""
    return PlacementNetwork(policy_space(max_devices), encoder, dict(encoder_kwargs or {}), head_hidden)


def save_policy(network: PlacementNetwork, path: str | os.PathLike, optimizer: torch.optim.Optimizer | None = None,
                info: dict | None = None) -> None:
    """Write ``network`` (and ``optimizer``'s state) to ``path`` atomically; ``info`` is kept as plain data."""

    class Holder:
        policy = network
        num_timesteps = 0
        observation_space = network.observation_space

    network.optimizer = optimizer  # type: ignore[assignment]
    policy = {"encoder": network.encoder_name, "encoder_kwargs": network.encoder_kwargs, "expected_moves": None}
    save_checkpoint(Holder, path, ALGO, {"head_hidden": network.head_hidden, "info": info or {}}, policy)


def load_policy(path: str | os.PathLike, with_optimizer: bool = False) -> Any:
    """The network saved at ``path`` (and, ``with_optimizer``, the optimizer's saved state or None)."""
    saved = read_checkpoint(path)
    if saved.algo != ALGO:
        raise ValueError(f"{str(path)!r} holds a {saved.algo} model, not a guided-search placement policy")
    network = PlacementNetwork(saved.observation_space, saved.policy["encoder"], saved.policy["encoder_kwargs"],
                               int(saved.algo_kwargs.get("head_hidden", 64)))
    try:
        network.load_state_dict(saved.policy_state)
    except RuntimeError as error:
        raise ValueError(f"{str(path)!r}: the saved weights do not fit its settings "
                         f"({str(error).splitlines()[0]})") from None
    network.info = dict(saved.algo_kwargs.get("info", {}))  # type: ignore[assignment]
    return (network, saved.optimizer_state) if with_optimizer else network


def policy_limits(network: PlacementNetwork) -> tuple[int, int]:
    """``(max units, max devices)`` a policy places."""
    return network.max_nodes, network.max_devices


def shipped_policy_path() -> Path:
    """The pretrained policy that ships in the package (made by ``python -m agents.pretrain``)."""
    return Path(__file__).parent / "pretrained" / POLICY_FILE
