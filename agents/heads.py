"""The placement heads shared by every policy (SB3 or REINFORCE), per ``shared/spec/fadp_gt.md``.

* :class:`NodeDeviceHead`: per-node logits over devices from
  ``[z_i, graph vector, device-count one-hot]``, one MLP for all nodes, so a
  trained head runs on graphs of any size up to the padding. Devices beyond
  the observation's cluster get a logit of -1e9; padding nodes are pinned to
  device 0 (log-probability 0, entropy 0), so they never add noise to gradients.
* :class:`ValueHead`: state value from the graph vector and the one-hot.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from graph_encoders.pooling import NEG


class NodeDeviceHead(nn.Module):
    def __init__(self, embed_dim: int, max_devices: int, hidden_dim: int = 64) -> None:
        super().__init__()
        self.max_devices = max_devices
        self.mlp = nn.Sequential(nn.Linear(2 * embed_dim + max_devices, hidden_dim), nn.ReLU(),
                                 nn.Linear(hidden_dim, max_devices))

    def forward(self, nodes: Tensor, graph: Tensor, gpu_onehot: Tensor, node_mask: Tensor) -> Tensor:
        """``nodes`` (B, N, d), ``graph`` (B, d), ``gpu_onehot`` (B, D), ``node_mask`` (B, N) -> logits (B, N, D)."""
        b, n, _ = nodes.shape
        context = torch.cat([graph, gpu_onehot], dim=-1).unsqueeze(1).expand(b, n, -1)
        logits = self.mlp(torch.cat([nodes, context], dim=-1))
        devices = gpu_onehot.argmax(dim=-1, keepdim=True) + 1  # (B, 1) devices in the cluster
        allowed = torch.arange(self.max_devices, device=logits.device).view(1, 1, -1) < devices.unsqueeze(-1)
        logits = logits.masked_fill(~allowed, NEG)
        pinned = torch.full_like(logits, NEG)
        pinned[..., 0] = 0.0
        return torch.where(node_mask.unsqueeze(-1), logits, pinned)


class ValueHead(nn.Module):
    def __init__(self, embed_dim: int, max_devices: int, hidden_dim: int = 64) -> None:
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(embed_dim + max_devices, hidden_dim), nn.Tanh(), nn.Linear(hidden_dim, 1))

    def forward(self, graph_and_devices: Tensor) -> Tensor:
        return self.mlp(graph_and_devices)
