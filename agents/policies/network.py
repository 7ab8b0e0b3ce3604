"""The placement network: a graph encoder and a device head, observation -> device logits.

.. math::

    z, g = \\mathrm{encoder}(X, A), \\qquad
    \\ell_{i,:} = \\mathrm{head}([z_i \\,\\|\\, g \\,\\|\\, \\mathrm{onehot}(D)])

Two heads (``head=``): ``per-unit`` (:class:`~agents.policies.heads.NodeDeviceHead`, the spec's: one MLP with an
output per device, so a policy places on at most the ``max_devices`` it was built for) and ``device-embedding``
(:class:`~agents.policies.device_head.DeviceEmbeddingHead`: the encoder reads the node features without their
device one-hot and every unit is scored against an embedding of each device, so one policy places on any number of
devices).

REINFORCE, the guided search and the pretrained learned placer all train this one network; the SB3 policies of
:mod:`agents.policies.actor_critic` use the same encoder and head inside SB3's module slots.
"""

from __future__ import annotations

import dataclasses
from typing import cast

import gymnasium as gym
import torch
from torch import Tensor, nn

from graph_encoders import GraphBatch, build_encoder

from .device_head import DeviceEmbeddingHead, device_free_features
from .features_extractor import observation_sizes
from .heads import NodeDeviceHead

HEADS = ("per-unit", "device-embedding")


class PlacementNetwork(nn.Module):
    """Encoder + :class:`~agents.policies.heads.NodeDeviceHead`: observation batch -> (B, N, D) device logits.

    Args:
        observation_space: a placement observation space (``DevicePlacement-v0``'s ``Dict``); its padding fixes
            ``max_nodes`` and ``max_devices``.
        encoder: a name of ``graph_encoders.list_encoders()``.
        encoder_kwargs: the encoder's options (``hidden_dim``, ``num_layers``, switches).
        head_hidden: the head's hidden width.
        expected_moves: the per-unit head's optional stay prior (:mod:`agents.policies.heads`; None: off).
        head: one of :data:`HEADS` (module docstring).

    Raises:
        ValueError: an observation space that is not a placement observation, an unknown encoder, option or head,
            a stay prior with the device-embedding head.

    ``optimizer`` is set by the algorithm that trains it (as SB3 policies carry theirs)."""

    optimizer: torch.optim.Optimizer

    def __init__(self, observation_space: gym.spaces.Dict, encoder: str = "fadp-gt",
                 encoder_kwargs: dict | None = None, head_hidden: int = 64,
                 expected_moves: float | None = None, head: str = "per-unit") -> None:
        super().__init__()
        if head not in HEADS:
            raise ValueError(f"unknown head {head!r}; use one of {', '.join(HEADS)}")
        if head == "device-embedding" and expected_moves is not None:
            raise ValueError("expected_moves (the stay prior) belongs to the per-unit head")
        self.observation_space = observation_space
        self.max_nodes, in_dim, self.max_devices = observation_sizes(observation_space)
        self.encoder_name, self.encoder_kwargs, self.head_hidden = encoder, dict(encoder_kwargs or {}), head_hidden
        self.expected_moves, self.head_name = expected_moves, head
        self.device_agnostic = head == "device-embedding"
        if self.device_agnostic:
            in_dim -= self.max_devices  # the encoder reads the features without the device one-hot
        self.encoder = build_encoder(encoder, in_dim, **(encoder_kwargs or {}))
        self.head: nn.Module
        if self.device_agnostic:
            self.head = DeviceEmbeddingHead(self.encoder.out_dim, head_hidden)
            last = self.head.out
        else:
            self.head = NodeDeviceHead(self.encoder.out_dim, self.max_devices, head_hidden, expected_moves)
            last = cast(nn.Linear, self.head.mlp[-1])
        nn.init.orthogonal_(last.weight, gain=0.01)  # start near the uniform policy: every device equally likely
        nn.init.zeros_(last.bias)

    def forward(self, observation: dict) -> Tensor:
        """``observation`` (a batch of placement observations, tensors) -> logits (B, N, D); padding nodes and
        devices beyond each observation's cluster are masked as the head says."""
        batch = GraphBatch.from_observation(observation)
        if self.device_agnostic:  # any device padding: the encoder never sees the one-hot's width
            current = batch.current_device
            nodes, graph = self.encoder(dataclasses.replace(batch, x=device_free_features(batch)))
            return self.head(nodes, graph, batch.x, batch.gpu_onehot, batch.node_mask, current)
        nodes, graph = self.encoder(batch)
        return self.head(nodes, graph, batch.gpu_onehot, batch.node_mask, batch.current_device)

    def settings(self) -> dict:
        """The policy's settings as plain data (what a checkpoint stores to rebuild it): ``encoder``,
        ``encoder_kwargs``, ``expected_moves``, and ``head`` when it is not the per-unit head (so the checkpoints of
        per-unit policies read as they always did)."""
        settings = {"encoder": self.encoder_name, "encoder_kwargs": dict(self.encoder_kwargs),
                    "expected_moves": self.expected_moves}
        return settings if self.head_name == "per-unit" else {**settings, "head": self.head_name}
