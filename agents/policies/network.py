"""The placement network: a graph encoder and the per-unit device head, observation -> device logits.

.. math::

    z, g = \\mathrm{encoder}(X, A), \\qquad
    \\ell_{i,:} = \\mathrm{head}([z_i \\,\\|\\, g \\,\\|\\, \\mathrm{onehot}(D)])

REINFORCE, the guided search and the pretrained learned placer all train this one network; the SB3 policies of
:mod:`agents.policies.actor_critic` use the same encoder and head inside SB3's module slots.
"""

from __future__ import annotations

from typing import cast

import gymnasium as gym
import torch
from torch import Tensor, nn

from graph_encoders import GraphBatch, build_encoder

from .features_extractor import observation_sizes
from .heads import NodeDeviceHead


class PlacementNetwork(nn.Module):
    """Encoder + :class:`~agents.policies.heads.NodeDeviceHead`: observation batch -> (B, N, D) device logits.

    Args:
        observation_space: a placement observation space (``DevicePlacement-v0``'s ``Dict``); its padding fixes
            ``max_nodes`` and ``max_devices``.
        encoder: a name of ``graph_encoders.list_encoders()``.
        encoder_kwargs: the encoder's options (``hidden_dim``, ``num_layers``, switches).
        head_hidden: the head's hidden width.
        expected_moves: the head's optional stay prior (:mod:`agents.policies.heads`; None: off).

    Raises:
        ValueError: an observation space that is not a placement observation, an unknown encoder or option.

    ``optimizer`` is set by the algorithm that trains it (as SB3 policies carry theirs)."""

    optimizer: torch.optim.Optimizer

    def __init__(self, observation_space: gym.spaces.Dict, encoder: str = "fadp-gt",
                 encoder_kwargs: dict | None = None, head_hidden: int = 64,
                 expected_moves: float | None = None) -> None:
        super().__init__()
        self.observation_space = observation_space
        self.max_nodes, in_dim, self.max_devices = observation_sizes(observation_space)
        self.encoder_name, self.encoder_kwargs, self.head_hidden = encoder, dict(encoder_kwargs or {}), head_hidden
        self.expected_moves = expected_moves
        self.encoder = build_encoder(encoder, in_dim, **(encoder_kwargs or {}))
        self.head = NodeDeviceHead(self.encoder.out_dim, self.max_devices, head_hidden, expected_moves)
        last = cast(nn.Linear, self.head.mlp[-1])  # start near the uniform policy: every device equally likely
        nn.init.orthogonal_(last.weight, gain=0.01)
        nn.init.zeros_(last.bias)

    def forward(self, observation: dict) -> Tensor:
        """``observation`` (a batch of placement observations, tensors) -> logits (B, N, D); padding nodes and
        devices beyond each observation's cluster are masked as the head says."""
        batch = GraphBatch.from_observation(observation)
        nodes, graph = self.encoder(batch)
        return self.head(nodes, graph, batch.gpu_onehot, batch.node_mask, batch.current_device)

    def settings(self) -> dict:
        """The policy's settings as plain data (what a checkpoint stores to rebuild it): ``encoder``,
        ``encoder_kwargs``, ``expected_moves``."""
        return {"encoder": self.encoder_name, "encoder_kwargs": dict(self.encoder_kwargs),
                "expected_moves": self.expected_moves}
