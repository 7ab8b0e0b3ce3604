"""The placement heads shared by every policy (SB3 or REINFORCE), per ``docs/spec/fadp_gt.md``.

* :class:`NodeDeviceHead`: per-node logits over devices from
  ``[z_i, graph vector, device-count one-hot]``, one MLP for all nodes, so a
  trained head runs on graphs of any size up to the padding. Devices beyond
  the observation's cluster get a logit of -1e9; padding nodes are pinned to
  device 0 (log-probability 0, entropy 0), so they never add noise to gradients.
  With ``expected_moves`` = m set, a *stay prior* is added to each unit's
  logit of its current device: ``log((D - 1)(1 - p) / p) + delta`` with
  ``p = min(m / n, 0.5)``, ``n`` the graph's unit count, ``D`` its device
  count and ``delta`` a learned scalar starting at 0, so an untrained head
  (near-equal MLP logits) moves about m units per step instead of re-drawing
  every unit uniformly. This term is this project's optional addition to the
  spec's head (an extra input, the current device, already part of the node
  embedding X); it is off by default (``expected_moves=None``, the spec's head
  exactly). Why it is there, and when it helps: ``docs/encoders.md``.
* :class:`ValueHead`: state value from the graph vector and the one-hot.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from graph_encoders.pooling import NEG


class NodeDeviceHead(nn.Module):
    """Per-node device logits (module docstring): ``embed_dim`` node and graph width, ``max_devices`` devices padded,
    an MLP of ``hidden_dim``, the optional stay prior ``expected_moves``."""

    def __init__(self, embed_dim: int, max_devices: int, hidden_dim: int = 64,
                 expected_moves: float | None = None) -> None:
        super().__init__()
        if expected_moves is not None and not expected_moves > 0:
            raise ValueError(f"expected_moves must be positive or None, got {expected_moves!r}")
        self.max_devices = max_devices
        self.expected_moves = expected_moves
        self.mlp = nn.Sequential(nn.Linear(2 * embed_dim + max_devices, hidden_dim), nn.ReLU(),
                                 nn.Linear(hidden_dim, max_devices))
        self.stay_delta = nn.Parameter(torch.zeros(())) if expected_moves is not None else None

    def forward(self, nodes: Tensor, graph: Tensor, gpu_onehot: Tensor, node_mask: Tensor,
                current_device: Tensor | None = None) -> Tensor:
        """``nodes`` (B, N, d), ``graph`` (B, d), ``gpu_onehot`` (B, D), ``node_mask`` (B, N) and, for the stay
        prior, ``current_device`` (B, N, D) one-hot -> logits (B, N, D)."""
        b, n, _ = nodes.shape
        context = torch.cat([graph, gpu_onehot], dim=-1).unsqueeze(1).expand(b, n, -1)
        logits = self.mlp(torch.cat([nodes, context], dim=-1))
        devices = gpu_onehot.argmax(dim=-1, keepdim=True) + 1  # (B, 1) devices in the cluster
        if self.stay_delta is not None and self.expected_moves is not None and current_device is not None:
            units = node_mask.sum(dim=1, keepdim=True).clamp(min=1).float()  # (B, 1)
            p = (self.expected_moves / units).clamp(max=0.5)
            base = torch.log((devices.float() - 1).clamp(min=1) * (1 - p) / p)  # (B, 1)
            logits = logits + (base + self.stay_delta).unsqueeze(-1) * current_device
        allowed = torch.arange(self.max_devices, device=logits.device).view(1, 1, -1) < devices.unsqueeze(-1)
        logits = logits.masked_fill(~allowed, NEG)
        pinned = torch.full_like(logits, NEG)
        pinned[..., 0] = 0.0
        return torch.where(node_mask.unsqueeze(-1), logits, pinned)


class ValueHead(nn.Module):
    """A state value from the graph vector and the device-count one-hot."""

    def __init__(self, embed_dim: int, max_devices: int, hidden_dim: int = 64) -> None:
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(embed_dim + max_devices, hidden_dim), nn.Tanh(), nn.Linear(hidden_dim, 1))

    def forward(self, graph_and_devices: Tensor) -> Tensor:
        """``graph_and_devices`` (B, embed_dim + D) -> values (B, 1)."""
        return self.mlp(graph_and_devices)
