"""The stable-baselines3 features extractor: a registered graph encoder, and nothing else.

Its output is one flat vector per observation, laid out as
``[node embeddings (N*d) | graph vector (d) | device-count one-hot (D) | node mask (N) | current-unit flags (N)
| current devices (N*D)]``
(:class:`FeatureLayout` packs and unpacks it), because SB3 passes features
between its modules as a single tensor.
"""

from __future__ import annotations

from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import torch
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
from torch import Tensor

from graph_encoders import GraphBatch, build_encoder


@dataclass(frozen=True)
class FeatureLayout:
    """The packed feature vector's layout (module docstring) for ``max_nodes`` nodes, embeddings of ``embed_dim`` and
    ``max_devices`` devices."""

    max_nodes: int
    embed_dim: int
    max_devices: int

    @property
    def size(self) -> int:
        """The packed vector's length."""
        n, d, k = self.max_nodes, self.embed_dim, self.max_devices
        return n * d + d + k + 2 * n + n * k

    def pack(self, nodes: Tensor, graph: Tensor, gpu: Tensor, node_mask: Tensor, current: Tensor,
             current_device: Tensor) -> Tensor:
        """Concatenate the parts (batch first) into one (B, :attr:`size`) tensor."""
        b = nodes.shape[0]
        return torch.cat([nodes.reshape(b, -1), graph, gpu, node_mask.float(), current.float(),
                          current_device.reshape(b, -1)], dim=1)

    def unpack(self, features: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
        """``(nodes (B, N, d), graph (B, d), gpu (B, D), node_mask (B, N) bool, current (B, N),
        current_device (B, N, D))``."""
        n, d, k = self.max_nodes, self.embed_dim, self.max_devices
        b = features.shape[0]
        nodes, graph, gpu, mask, current, device = torch.split(features, [n * d, d, k, n, n, n * k], dim=1)
        return nodes.reshape(b, n, d), graph, gpu, mask > 0.5, current, device.reshape(b, n, k)


def binary_count(space: gym.Space) -> int:
    """The length of a 1-D ``MultiBinary`` space (a mask of the placement observation)."""
    n = getattr(space, "n", None)
    if not isinstance(space, gym.spaces.MultiBinary) or not isinstance(n, (int, np.integer)):
        raise ValueError(f"expected a 1-D MultiBinary mask in the placement observation, got {space}")
    return int(n)


def observation_sizes(space: gym.Space) -> tuple[int, int, int]:
    """``(max_nodes, node feature width F, max_devices)`` of a placement observation space."""
    needed = ("embedding", "gpu_onehot", "node_mask")
    if not isinstance(space, gym.spaces.Dict) or any(key not in space.spaces for key in needed):
        raise ValueError("the placement policies need the observation space of DevicePlacement-v0 (a Dict with "
                         f"{', '.join(needed)}, ...), got {space}")
    n = binary_count(space["node_mask"])
    shape = space["embedding"].shape or (0,)
    f = int(shape[-1] if len(shape) == 2 else shape[0] // n)
    return n, f, binary_count(space["gpu_onehot"])


class GraphFeaturesExtractor(BaseFeaturesExtractor):
    """Runs ``encoder`` (a name from ``graph_encoders.list_encoders()``) on the observation batch.

    Args:
        observation_space: the environment's ``Dict`` space.
        encoder: encoder name (default ``"fadp-gt"``).
        encoder_kwargs: passed to the encoder (``hidden_dim``, ``num_layers``, switches...).
    """

    def __init__(self, observation_space: gym.spaces.Dict, encoder: str = "fadp-gt",
                 encoder_kwargs: dict | None = None) -> None:
        n, f, k = observation_sizes(observation_space)
        net = build_encoder(encoder, f, **(encoder_kwargs or {}))
        layout = FeatureLayout(n, net.out_dim, k)
        super().__init__(observation_space, features_dim=layout.size)
        self.encoder = net
        self.layout = layout

    def forward(self, observations: dict[str, Tensor]) -> Tensor:
        """The encoder on an observation batch, packed by :class:`FeatureLayout`."""
        batch = GraphBatch.from_observation(observations)
        nodes, graph = self.encoder(batch)
        return self.layout.pack(nodes, graph, batch.gpu_onehot, batch.node_mask, batch.x[..., -1],
                                batch.current_device)
