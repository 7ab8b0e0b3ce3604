"""The placement policy of the guided search as a file: a network that places graphs of any size up to a limit.

:class:`~agents.policies.network.PlacementNetwork`'s weights do not depend on the number of units (the encoder and the
per-unit head run on each graph at its own size), only on the node-feature width and the device padding. So a
pretrained policy places any graph of at most :data:`POLICY_MAX_UNITS` units (larger ones are coarsened first) on
any cluster of at most ``max_devices`` devices. It is saved in the project's checkpoint format
(:mod:`agents.algorithms.checkpoint`, algorithm ``guided``; tensors loaded with ``weights_only=True``), so
``train.py --resume`` and :func:`agents.algorithms.registry.load_model` read it too.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from agents.algorithms.checkpoint import Checkpoint, read_checkpoint, write_checkpoint
from agents.algorithms.guided_search import GuidedSearch
from agents.policies.network import PlacementNetwork
from placement_env.envs.task import DEFAULT_MAX_UNITS
from placement_env.graph.units import STATIC_FEATURES

POLICY_FILE = "policy.zip"
POLICY_MAX_UNITS = DEFAULT_MAX_UNITS  # the largest graph (placement units) a saved policy places uncoarsened
ALGO = GuidedSearch.name  # a policy file is a guided search's checkpoint


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
                head_hidden: int = 64, head: str = "per-unit") -> PlacementNetwork:
    """An untrained policy for clusters of up to ``max_devices`` devices (any number with
    ``head="device-embedding"``: ``max_devices`` is then only the padding it is described by)."""
    return PlacementNetwork(policy_space(max_devices), encoder, dict(encoder_kwargs or {}), head_hidden, head=head)


def save_policy(network: PlacementNetwork, path: str | os.PathLike, optimizer: torch.optim.Optimizer | None = None,
                info: dict | None = None) -> None:
    """Write ``network`` (and ``optimizer``'s state) to ``path`` atomically; ``info`` (how the policy was made) is
    kept as plain data."""
    settings = {"head_hidden": network.head_hidden, "info": info or {}}
    write_checkpoint(Checkpoint(ALGO, network.settings(), settings, network.observation_space, 0,
                                network.state_dict(), None if optimizer is None else optimizer.state_dict()), path)


def load_policy(path: str | os.PathLike, with_optimizer: bool = False) -> Any:
    """The network saved at ``path`` (and, ``with_optimizer``, the optimizer's saved state or None), with the
    file's ``info`` as ``network.info``. Raises ``ValueError`` for a checkpoint of another algorithm or weights that
    do not fit (and what :func:`~agents.algorithms.checkpoint.read_checkpoint` raises)."""
    saved = read_checkpoint(path)
    if saved.algo != ALGO:
        raise ValueError(f"{str(path)!r} holds a {saved.algo} model, not a guided-search placement policy")
    info = saved.algo_kwargs.get("info", {})
    if not isinstance(info, dict):
        raise ValueError(f"{str(path)!r}: its info (how the policy was made) is a {type(info).__name__}, not a "
                         "mapping")
    try:
        network = PlacementNetwork(saved.observation_space, saved.policy["encoder"], saved.policy["encoder_kwargs"],
                                   int(saved.algo_kwargs.get("head_hidden", 64)),
                                   head=str(saved.policy.get("head", "per-unit")))
    except ValueError as error:
        raise ValueError(f"{str(path)!r}: {error}") from None
    try:
        network.load_state_dict(saved.policy_state)
    except RuntimeError as error:
        raise ValueError(f"{str(path)!r}: the saved weights do not fit its settings "
                         f"({str(error).splitlines()[0]})") from None
    network.info = dict(info)  # type: ignore[assignment]
    return (network, saved.optimizer_state) if with_optimizer else network


def shipped_policy_path() -> Path:
    """The pretrained policy that ships in the package (made by ``python -m agents.pretrain``)."""
    return Path(__file__).parent / "pretrained" / POLICY_FILE
