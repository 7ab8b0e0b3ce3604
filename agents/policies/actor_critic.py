"""Actor-critic policies for stable-baselines3 built on any registered graph encoder.

``PPO(PlacementPolicy, env, policy_kwargs=dict(encoder="gat"))`` trains on
``DevicePlacement-v0`` (per-node device choices, :class:`NodeCategoricalDistribution`)
or on ``DevicePlacementSequential-v0`` (the current unit's device);
:class:`MaskablePlacementPolicy` is the same for ``sb3_contrib.MaskablePPO``.

The pieces: :class:`~agents.policies.features_extractor.GraphFeaturesExtractor` (the
encoder), :class:`PlacementLatent` (routes the packed features: all of them to
the actor, the graph vector and device one-hot to the critic),
:class:`~agents.policies.heads.NodeDeviceHead` as ``action_net`` and
:class:`~agents.policies.heads.ValueHead` as ``value_net``.
"""

from __future__ import annotations

from functools import partial

import numpy as np
import torch
from gymnasium import spaces
from sb3_contrib.common.maskable.policies import MaskableActorCriticPolicy
from stable_baselines3.common.policies import ActorCriticPolicy
from torch import Tensor, nn

from .distributions import NodeCategoricalDistribution
from .features_extractor import FeatureLayout, GraphFeaturesExtractor
from .heads import NodeDeviceHead, ValueHead


class PlacementLatent(nn.Module):
    """SB3's ``mlp_extractor`` slot: actor latent = the packed features, critic latent = graph vector + one-hot."""

    def __init__(self, layout: FeatureLayout) -> None:
        super().__init__()
        self.layout = layout
        self.latent_dim_pi = layout.size
        self.latent_dim_vf = layout.embed_dim + layout.max_devices

    def forward_actor(self, features: Tensor) -> Tensor:
        return features

    def forward_critic(self, features: Tensor) -> Tensor:
        _, graph, gpu, _, _, _ = self.layout.unpack(features)
        return torch.cat([graph, gpu], dim=1)

    def forward(self, features: Tensor) -> tuple[Tensor, Tensor]:
        return self.forward_actor(features), self.forward_critic(features)


class PlacementActionNet(nn.Module):
    """SB3's ``action_net`` slot: per-node logits, flattened (MultiDiscrete) or the current unit's (Discrete)."""

    def __init__(self, layout: FeatureLayout, hidden_dim: int, per_node: bool,
                 expected_moves: float | None = None) -> None:
        super().__init__()
        self.layout = layout
        self.per_node = per_node
        self.head = NodeDeviceHead(layout.embed_dim, layout.max_devices, hidden_dim, expected_moves)

    def forward(self, latent: Tensor) -> Tensor:
        nodes, graph, gpu, mask, current, device = self.layout.unpack(latent)
        logits = self.head(nodes, graph, gpu, mask, device)  # (B, N, D)
        if self.per_node:
            return logits.reshape(logits.shape[0], -1)
        return logits[torch.arange(logits.shape[0]), current.argmax(dim=1)]


class _PlacementPolicyMixin:
    """What both policy classes do differently from SB3's defaults."""

    def _placement_init(self, kwargs: dict, encoder: str, encoder_kwargs: dict | None, head_hidden: int,
                        expected_moves: float | None) -> dict:
        self.head_hidden = head_hidden
        self.expected_moves = expected_moves
        kwargs.setdefault("features_extractor_class", GraphFeaturesExtractor)
        kwargs.setdefault("features_extractor_kwargs", {})
        kwargs["features_extractor_kwargs"] = {"encoder": encoder, "encoder_kwargs": encoder_kwargs,
                                               **kwargs["features_extractor_kwargs"]}
        kwargs.setdefault("share_features_extractor", True)
        return kwargs

    def _build_mlp_extractor(self) -> None:
        self.mlp_extractor = PlacementLatent(self.features_extractor.layout)

    def _build(self, lr_schedule) -> None:
        layout = self.features_extractor.layout
        self._build_mlp_extractor()
        per_node = isinstance(self.action_space, spaces.MultiDiscrete)
        if per_node and not hasattr(self, "_masked"):
            self.action_dist = NodeCategoricalDistribution(layout.max_nodes, layout.max_devices)
        self.action_net = PlacementActionNet(layout, self.head_hidden, per_node, self.expected_moves)
        self.value_net = ValueHead(layout.embed_dim, layout.max_devices, self.head_hidden)
        if self.ortho_init:
            self.action_net.apply(partial(self.init_weights, gain=np.sqrt(2)))
            self.action_net.head.mlp[-1].apply(partial(self.init_weights, gain=0.01))
            self.value_net.apply(partial(self.init_weights, gain=1.0))
        self.optimizer = self.optimizer_class(self.parameters(), lr=lr_schedule(1), **self.optimizer_kwargs)


class PlacementPolicy(_PlacementPolicyMixin, ActorCriticPolicy):
    """Args (besides SB3's): ``encoder`` (default ``"fadp-gt"``), ``encoder_kwargs``, ``head_hidden`` (64),
    ``expected_moves`` (the head's optional stay prior, see :mod:`agents.policies.heads`; default ``None``: the
    spec's head exactly)."""

    def __init__(self, observation_space, action_space, lr_schedule, encoder: str = "fadp-gt",
                 encoder_kwargs: dict | None = None, head_hidden: int = 64,
                 expected_moves: float | None = None, **kwargs) -> None:
        kwargs = self._placement_init(kwargs, encoder, encoder_kwargs, head_hidden, expected_moves)
        super().__init__(observation_space, action_space, lr_schedule, **kwargs)


class MaskablePlacementPolicy(_PlacementPolicyMixin, MaskableActorCriticPolicy):
    """:class:`PlacementPolicy` for ``sb3_contrib.MaskablePPO`` (action masks applied on top of the head's)."""

    _masked = True

    def __init__(self, observation_space, action_space, lr_schedule, encoder: str = "fadp-gt",
                 encoder_kwargs: dict | None = None, head_hidden: int = 64,
                 expected_moves: float | None = None, **kwargs) -> None:
        kwargs = self._placement_init(kwargs, encoder, encoder_kwargs, head_hidden, expected_moves)
        super().__init__(observation_space, action_space, lr_schedule, **kwargs)
