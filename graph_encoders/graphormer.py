r"""Graphormer (Ying et al., 2021): a Transformer with three structural encodings.

* centrality: :math:`h_i = x_i W + z^{-}_{\deg^-(i)} + z^{+}_{\deg^+(i)}` (learned in/out-degree embeddings);
* spatial: attention score bias :math:`b_{\phi(i,j)}` per head, :math:`\phi` the hop distance in the
  undirected graph (capped at ``max_distance``; unreachable pairs share one bias);
* edge: a learned bias per head for pairs joined by an edge, one for each direction. The
  observation carries no edge features, so this is the one-hop case of Graphormer's
  path-averaged edge encoding.

Pre-LayerNorm blocks (attention, then a feed-forward network), the scores
``QK^T / sqrt(d_h) + bias`` evaluated by ``scaled_dot_product_attention``.
Hop distances are computed once per graph and cached.
"""

from __future__ import annotations

from functools import partial

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .base import GraphEncoder
from .batch import GraphBatch
from .pooling import NEG, masked_mean, zero_padding
from .structure import PerGraphCache, hop_distances


def _padded_distances(d: np.ndarray, n_max: int, unreachable: int) -> Tensor:
    out = torch.full((n_max, n_max), unreachable, dtype=torch.long)
    n = d.shape[0]
    out[:n, :n] = torch.from_numpy(d)
    return out


class GraphormerLayer(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)
        self.norm2 = nn.LayerNorm(dim)
        self.ffn = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))

    def forward(self, x: Tensor, mask: Tensor, bias: Tensor) -> Tensor:
        b, n, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        att = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
        x = x + self.out(att.transpose(1, 2).reshape(b, n, d))
        x = x + self.ffn(self.norm2(x))
        return zero_padding(x, mask)


class Graphormer(GraphEncoder):
    name = "graphormer"

    def __init__(self, in_dim: int, hidden_dim: int = 64, num_layers: int = 2, heads: int = 4,
                 max_degree: int = 32, max_distance: int = 16) -> None:
        super().__init__(in_dim, hidden_dim)
        self.heads, self.max_degree, self.max_distance = heads, max_degree, max_distance
        self.embed = nn.Linear(in_dim, hidden_dim)
        self.in_degree = nn.Embedding(max_degree + 1, hidden_dim)
        self.out_degree = nn.Embedding(max_degree + 1, hidden_dim)
        self.spatial = nn.Embedding(max_distance + 2, heads)  # 0..max_distance, then "unreachable"
        self.edge_bias = nn.Embedding(2, heads)  # along the edge, against it
        self.layers = nn.ModuleList(GraphormerLayer(hidden_dim, heads) for _ in range(num_layers))
        self.final_norm = nn.LayerNorm(hidden_dim)
        self.distance_cache = PerGraphCache(partial(hop_distances, cap=max_distance + 1))

    def attention_bias(self, batch: GraphBatch) -> Tensor:
        """(B or 1, H, N, N) additive scores: spatial + edge biases, -1e9 on padded keys."""
        unreachable = self.max_distance + 1
        dist = self.distance_cache.batched(batch, partial(_padded_distances, unreachable=unreachable))
        bias = self.spatial(dist).permute(0, 3, 1, 2)  # (B|1, H, N, N)
        adj = batch.dense_adjacency()
        if dist.shape[0] == 1:
            adj = adj[:1]
        bias = bias + adj.unsqueeze(1) * self.edge_bias.weight[0].view(1, -1, 1, 1) \
            + adj.transpose(1, 2).unsqueeze(1) * self.edge_bias.weight[1].view(1, -1, 1, 1)
        key_pad = (~batch.node_mask).float()[:, None, None, :] * NEG
        return bias + key_pad

    def forward(self, batch: GraphBatch) -> tuple[Tensor, Tensor]:
        mask = batch.node_mask
        b, n = mask.shape
        flat = batch.flat_edges()
        deg_in = torch.bincount(flat[1], minlength=b * n).view(b, n).clamp(max=self.max_degree)
        deg_out = torch.bincount(flat[0], minlength=b * n).view(b, n).clamp(max=self.max_degree)
        x = self.embed(batch.x) + self.in_degree(deg_in) + self.out_degree(deg_out)
        x = zero_padding(x, mask)
        bias = self.attention_bias(batch)
        for layer in self.layers:
            x = layer(x, mask, bias)
        x = zero_padding(self.final_norm(x), mask)
        return x, masked_mean(x, mask)
