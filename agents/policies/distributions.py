"""A fast distribution for ``MultiDiscrete([D] * N)`` actions with per-node logits.

SB3's ``MultiCategoricalDistribution`` builds one ``Categorical`` per action
dimension (hundreds here); this one keeps a single ``Categorical`` over a
(B, N, D) logit tensor and sums log-probabilities and entropies over nodes:
the same distribution, computed in one call.
"""

from __future__ import annotations

import torch
from stable_baselines3.common.distributions import MultiCategoricalDistribution
from torch import Tensor
from torch.distributions import Categorical


class NodeCategoricalDistribution(MultiCategoricalDistribution):
    """One categorical per node over devices, for ``MultiDiscrete([num_devices] * num_nodes)`` actions: log-
    probabilities and entropies summed over nodes."""

    def __init__(self, num_nodes: int, num_devices: int) -> None:
        super().__init__([num_devices] * num_nodes)
        self.num_nodes, self.num_devices = num_nodes, num_devices

    def proba_distribution(self, action_logits: Tensor) -> NodeCategoricalDistribution:
        self.categorical = Categorical(logits=action_logits.view(-1, self.num_nodes, self.num_devices))
        return self

    def log_prob(self, actions: Tensor) -> Tensor:
        return self.categorical.log_prob(actions.long().view(-1, self.num_nodes)).sum(dim=1)

    def entropy(self) -> Tensor:
        return self.categorical.entropy().sum(dim=1)

    def sample(self) -> Tensor:
        return self.categorical.sample()

    def mode(self) -> Tensor:
        return torch.argmax(self.categorical.probs, dim=-1)
