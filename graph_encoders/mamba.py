r"""A selective state-space model (Mamba, Gu & Dao, 2023) over the nodes in topological order.

Nodes are put in sequence by depth (the ``depth`` feature of the observation),
ties by index, padding last, so the scan is causal along the graph: a node's
state sees only nodes at most as deep. Each block (pre-LayerNorm, residual):

.. math::
    u = \mathrm{SiLU}(\mathrm{conv1d}(x W_{in})), \quad \Delta = \mathrm{softplus}(u W_\Delta), \quad
    B_t = u_t W_B, \; C_t = u_t W_C

    h_t = \exp(\Delta_t A) \odot h_{t-1} + \Delta_t B_t u_t, \qquad
    y_t = C_t h_t + D u_t, \qquad \mathrm{out} = (y \odot \mathrm{SiLU}(x W_z)) W_{out}

with a learned diagonal :math:`A = -\exp(A_{log})` (the selective scan written
as a plain loop over the sequence in torch).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from placement_env.graph.units import STATIC_FEATURES

from .base import GraphEncoder
from .batch import GraphBatch
from .pooling import masked_mean, zero_padding

DEPTH_COLUMN = STATIC_FEATURES.index("depth")


class MambaBlock(nn.Module):
    def __init__(self, dim: int, state: int = 16, expand: int = 2, conv: int = 4) -> None:
        super().__init__()
        inner = expand * dim
        self.norm = nn.LayerNorm(dim)
        self.in_proj = nn.Linear(dim, 2 * inner)
        self.conv = nn.Conv1d(inner, inner, conv, groups=inner, padding=conv - 1)
        self.dt_proj = nn.Linear(inner, inner)
        self.b_proj = nn.Linear(inner, state, bias=False)
        self.c_proj = nn.Linear(inner, state, bias=False)
        self.a_log = nn.Parameter(torch.log(torch.arange(1, state + 1, dtype=torch.float32)).repeat(inner, 1))
        self.d = nn.Parameter(torch.ones(inner))
        self.out_proj = nn.Linear(inner, dim)

    def forward(self, x: Tensor) -> Tensor:
        """``x`` (B, L, d) in sequence order -> (B, L, d)."""
        b, length, _ = x.shape
        u, z = self.in_proj(self.norm(x)).chunk(2, dim=-1)
        u = F.silu(self.conv(u.transpose(1, 2))[..., :length].transpose(1, 2))
        dt = F.softplus(self.dt_proj(u))  # (B, L, inner)
        bmat, cmat = self.b_proj(u), self.c_proj(u)  # (B, L, state)
        a = -torch.exp(self.a_log)  # (inner, state)
        # step through the sequence on unbound per-step slices: slicing one (B, L, inner, state)
        # tensor per step would make every backward step allocate a gradient of the whole tensor
        h = torch.zeros(b, u.shape[-1], a.shape[-1], device=x.device)
        ys = []
        for dt_t, u_t, b_t, c_t in zip(dt.unbind(1), u.unbind(1), bmat.unbind(1), cmat.unbind(1)):
            h = torch.exp(dt_t.unsqueeze(-1) * a) * h + (dt_t * u_t).unsqueeze(-1) * b_t.unsqueeze(1)
            ys.append((h * c_t.unsqueeze(1)).sum(-1))
        y = torch.stack(ys, dim=1) + self.d * u
        return x + self.out_proj(y * F.silu(z))


class Mamba(GraphEncoder):
    name = "mamba"

    def __init__(self, in_dim: int, hidden_dim: int = 64, num_layers: int = 2, state: int = 16) -> None:
        super().__init__(in_dim, hidden_dim)
        self.embed = nn.Linear(in_dim, hidden_dim)
        self.blocks = nn.ModuleList(MambaBlock(hidden_dim, state) for _ in range(num_layers))
        self.norm = nn.LayerNorm(hidden_dim)

    @staticmethod
    def sequence_order(batch: GraphBatch) -> Tensor:
        """(B, N) node indices sorted by (padding last, depth, index)."""
        n = batch.max_nodes
        depth = batch.x[..., DEPTH_COLUMN]
        key = (~batch.node_mask).float() * 4.0 + depth + torch.arange(n, device=depth.device) / (2.0 * n)
        return key.argsort(dim=1)

    def forward(self, batch: GraphBatch) -> tuple[Tensor, Tensor]:
        mask = batch.node_mask
        order = self.sequence_order(batch)
        x = zero_padding(self.embed(batch.x), mask)
        d = x.shape[-1]
        seq = torch.gather(x, 1, order.unsqueeze(-1).expand(-1, -1, d))
        for block in self.blocks:
            seq = block(seq)
        out = torch.empty_like(seq).scatter_(1, order.unsqueeze(-1).expand(-1, -1, d), seq)
        out = zero_padding(self.norm(out), mask)
        return out, masked_mean(out, mask)
