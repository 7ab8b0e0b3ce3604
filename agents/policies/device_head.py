"""The device-count-agnostic placement head: units scored against device embeddings, so one policy places on any
number of devices.

.. math::

    e_k = \\mathrm{MLP}_{dev}\\big([\\,\\overline{z}_k \\,\\|\\, s_k \\,\\|\\, \\tfrac{k}{D - 1} \\,\\|\\,
    \\tfrac{1}{D}\\,]\\big), \\qquad
    \\ell_{i,k} = w^\\top \\mathrm{ReLU}\\big(U [z_i \\,\\|\\, g] + V e_k + c \\, C_{i,k}\\big)

:math:`\\overline{z}_k` is the mean embedding of the units the observed placement puts on device ``k`` (zero for an
empty device), :math:`s_k` its shares of the graph's compute cost, parameter bytes, output bytes and units, and an
empty-device flag; :math:`k / (D - 1)` places the device in the first-use order the observation's labels follow
(:func:`agents.algorithms.problem.canonical_labels`) and :math:`1 / D` says how many there are. :math:`C_{i,k}` is 1
when unit ``i`` is on device ``k`` now. No weight depends on ``D``: the encoder reads the node features without
their device one-hot (:func:`device_free_features`), and every device is scored by the same two MLPs. Devices
beyond the observation's cluster get -1e9 and padding nodes are pinned to device 0, as in
:class:`~agents.policies.heads.NodeDeviceHead`.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from graph_encoders import GraphBatch
from graph_encoders.pooling import NEG
from placement_env.graph.units import STATIC_FEATURES

SHARE_COLUMNS = tuple(STATIC_FEATURES.index(name) for name in ("cost", "param_bytes", "output_bytes"))
DEVICE_FEATURES = 5 + 2  # the shares (cost, parameters, outputs, units), the empty flag, the position, 1 / D


def device_free_features(batch: GraphBatch) -> Tensor:
    """The node features without the current-device one-hot: ``[static features | current-unit flag]``,
    (B, N, len(STATIC_FEATURES) + 1), the same width for any device padding."""
    return torch.cat([batch.x[..., :len(STATIC_FEATURES)], batch.x[..., -1:]], dim=-1)


class DeviceEmbeddingHead(nn.Module):
    """Unit-device logits from node embeddings and device embeddings (module docstring): ``embed_dim`` node and
    graph width, ``hidden_dim`` the width of both MLPs."""

    def __init__(self, embed_dim: int, hidden_dim: int = 64) -> None:
        super().__init__()
        self.device_mlp = nn.Sequential(nn.Linear(embed_dim + DEVICE_FEATURES, hidden_dim), nn.ReLU(),
                                        nn.Linear(hidden_dim, hidden_dim))
        self.unit_in = nn.Linear(2 * embed_dim, hidden_dim)
        self.device_in = nn.Linear(hidden_dim, hidden_dim, bias=False)
        self.current_in = nn.Parameter(torch.zeros(hidden_dim))
        self.out = nn.Linear(hidden_dim, 1)

    def device_embeddings(self, nodes: Tensor, static: Tensor, current_device: Tensor, node_mask: Tensor,
                          count: Tensor) -> Tensor:
        """(B, D, hidden) device embeddings from ``nodes`` (B, N, d), the ``static`` node features (B, N, F),
        ``current_device`` (B, N, D) one-hot, ``node_mask`` (B, N) and ``count`` (B, 1), the cluster's devices (the
        padding beyond them changes nothing)."""
        on = current_device * node_mask.unsqueeze(-1).float()  # (B, N, D): real units only
        units = on.sum(dim=1)  # (B, D)
        mean_z = torch.einsum("bnd,bnk->bkd", nodes, on) / units.clamp(min=1).unsqueeze(-1)
        weights = torch.cat([static[..., list(SHARE_COLUMNS)], torch.ones_like(static[..., :1])], dim=-1)
        weights = weights * node_mask.unsqueeze(-1).float()  # (B, N, 4)
        shares = torch.einsum("bnc,bnk->bkc", weights, on) / weights.sum(dim=1).clamp(min=1e-9).unsqueeze(1)
        b, d = nodes.shape[0], current_device.shape[-1]
        devices = count.to(nodes.dtype)  # (B, 1)
        position = torch.arange(d, dtype=nodes.dtype, device=nodes.device).view(1, d) / (devices - 1).clamp(min=1)
        described = torch.cat([mean_z, shares, (units == 0).float().unsqueeze(-1), position.unsqueeze(-1),
                               (1.0 / devices).view(b, 1, 1).expand(b, d, 1)], dim=-1)
        return self.device_mlp(described)

    def forward(self, nodes: Tensor, graph: Tensor, static: Tensor, gpu_onehot: Tensor, node_mask: Tensor,
                current_device: Tensor) -> Tensor:
        """``nodes`` (B, N, d), ``graph`` (B, d), ``static`` (B, N, F), ``gpu_onehot`` (B, D), ``node_mask``
        (B, N), ``current_device`` (B, N, D) -> logits (B, N, D)."""
        b, n, _ = nodes.shape
        count = gpu_onehot.argmax(dim=-1, keepdim=True) + 1  # (B, 1) devices in the cluster
        devices = self.device_embeddings(nodes, static, current_device, node_mask, count)  # (B, D, H)
        units = self.unit_in(torch.cat([nodes, graph.unsqueeze(1).expand(b, n, -1)], dim=-1))  # (B, N, H)
        hidden = units.unsqueeze(2) + self.device_in(devices).unsqueeze(1) \
            + current_device.unsqueeze(-1) * self.current_in  # (B, N, D, H)
        logits = self.out(torch.relu(hidden)).squeeze(-1)
        allowed = torch.arange(logits.shape[-1], device=logits.device).view(1, 1, -1) < count.unsqueeze(-1)
        logits = logits.masked_fill(~allowed, NEG)
        pinned = torch.full_like(logits, NEG)
        pinned[..., 0] = 0.0
        return torch.where(node_mask.unsqueeze(-1), logits, pinned)
