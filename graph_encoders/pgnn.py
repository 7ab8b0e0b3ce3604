r"""P-GNN, position-aware graph neural network (You, Ying & Leskovec, 2019).

``num_anchor_sets`` anchor sets of exponentially decreasing size (n/2, n/4,
..., each size used for several sets) are drawn once per graph, with a seed
derived from the graph, so a graph's embedding is deterministic. With the
hop distance :math:`d` in the undirected graph, :math:`s(v, u) = 1/(d(v,u)+1)`
(0 beyond ``max_distance``). As in the authors' implementation, node v
exchanges a message with the closest anchor :math:`u^*_i` of each set:

.. math::
    m_{v,i} = s(v, u^*_i) \, \mathrm{MLP}([h_v, h_{u^*_i}]), \qquad
    h'_v = \mathrm{mean}_i \, m_{v,i}, \qquad z_{v,i} = w^\top m_{v,i}

Hidden layers pass :math:`h'`; the last layer's output is
:math:`W[h'_v, z_v]`, the position-aware coordinates :math:`z_v` included.
"""

from __future__ import annotations

import zlib
from functools import partial

import numpy as np
import torch
from torch import Tensor, nn

from .base import GraphEncoder
from .batch import GraphBatch
from .pooling import masked_mean, zero_padding
from .structure import PerGraphCache, hop_distances


def anchor_messages(edges: np.ndarray, n: int, num_sets: int, max_distance: int) -> tuple[np.ndarray, np.ndarray]:
    """Per node and anchor set: the closest anchor (n, K) int64 and its weight s (n, K) float32."""
    rng = np.random.default_rng(zlib.crc32(edges.tobytes()) ^ n)
    dist = hop_distances(edges, n, cap=max_distance + 1)
    weight = np.where(dist <= max_distance, 1.0 / (dist + 1.0), 0.0)
    levels = max(1, int(np.ceil(np.log2(max(n, 2)))))
    best = np.zeros((n, num_sets), dtype=np.int64)
    best_w = np.zeros((n, num_sets), dtype=np.float32)
    for i in range(num_sets):
        size = max(1, n >> (1 + i % levels))
        anchors = rng.choice(n, size=size, replace=False)
        arg = np.argmax(weight[:, anchors], axis=1)
        best[:, i] = anchors[arg]
        best_w[:, i] = weight[np.arange(n), anchors[arg]]
    return best, best_w


def _padded_anchors(value: tuple[np.ndarray, np.ndarray], n_max: int) -> Tensor:
    """(N, K, 2): anchor index and weight (as float); padding nodes point at themselves with weight 0."""
    best, w = value
    n, k = best.shape
    out = torch.zeros(n_max, k, 2)
    out[:, :, 0] = torch.arange(n_max, dtype=torch.float32).unsqueeze(1)
    out[:n, :, 0] = torch.from_numpy(best).float()
    out[:n, :, 1] = torch.from_numpy(w)
    return out


class PGNNLayer(nn.Module):
    """One P-GNN layer; only the last one (``position=True``) emits the position-aware coordinates z."""

    def __init__(self, dim: int, position: bool) -> None:
        super().__init__()
        self.message = nn.Sequential(nn.Linear(2 * dim, dim), nn.ReLU())
        self.position = nn.Linear(dim, 1) if position else None

    def forward(self, h: Tensor, anchor: Tensor, weight: Tensor) -> tuple[Tensor, Tensor | None]:
        """``h`` (B, N, d); ``anchor`` / ``weight`` (B, N, K) -> (h' (B, N, d), z (B, N, K) or None)."""
        b, n, d = h.shape
        k = anchor.shape[-1]
        h_anchor = torch.gather(h, 1, anchor.reshape(b, n * k, 1).expand(b, n * k, d)).view(b, n, k, d)
        pairs = torch.cat([h.unsqueeze(2).expand(b, n, k, d), h_anchor], dim=-1)
        m = weight.unsqueeze(-1) * self.message(pairs)  # (B, N, K, d)
        z = self.position(m).squeeze(-1) if self.position is not None else None
        return m.mean(dim=2), z


class PGNN(GraphEncoder):
    name = "pgnn"

    def __init__(self, in_dim: int, hidden_dim: int = 64, num_layers: int = 2, num_anchor_sets: int = 16,
                 max_distance: int = 8) -> None:
        super().__init__(in_dim, hidden_dim)
        self.embed = nn.Linear(in_dim, hidden_dim)
        self.layers = nn.ModuleList(PGNNLayer(hidden_dim, position=i == num_layers - 1) for i in range(num_layers))
        self.output = nn.Linear(hidden_dim + num_anchor_sets, hidden_dim)
        self.anchor_cache = PerGraphCache(partial(anchor_messages, num_sets=num_anchor_sets,
                                                  max_distance=max_distance))

    def forward(self, batch: GraphBatch) -> tuple[Tensor, Tensor]:
        mask = batch.node_mask
        b = batch.batch_size
        table = self.anchor_cache.batched(batch, _padded_anchors)  # (B|1, N, K, 2)
        table = table.expand(b, *table.shape[1:])
        anchor, weight = table[..., 0].long(), table[..., 1]
        h = zero_padding(torch.relu(self.embed(batch.x)), mask)
        z = None
        for layer in self.layers:
            h, z = layer(h, anchor, weight)
            h = zero_padding(h, mask)
        assert z is not None  # num_layers >= 1
        out = zero_padding(self.output(torch.cat([h, z], dim=-1)), mask)
        return out, masked_mean(out, mask)
