"""FADP-GT: the Frequency-Adaptive Dual-Pooling Graph Transformer (paper section 2; ``docs/spec/fadp_gt.md``).

``X -> Linear -> [FAGA -> DPFR] x num_layers -> Z``; the graph vector is the
mean of Z over real nodes. The frequency maps of each graph are computed once
(``spectral.py``) and cached by the observation's graph fingerprint
(``self.spectral_cache.hits`` / ``misses`` count the look-ups), as is the
normalized adjacency.
"""

from __future__ import annotations

from functools import partial

import numpy as np
import torch
from torch import Tensor, nn

from .base import GraphEncoder, reset_each
from .batch import GraphBatch
from .dpfr import DPFR
from .faga import FAGALayer, sparse_block_diagonal
from .pooling import masked_mean, zero_padding
from .spectral import DEFAULT_TAU, DENSE_LIMIT, normalized_frequency_maps, padded_maps
from .structure import PerGraphCache, symmetric_adjacency


def normalized_adjacency(edges: np.ndarray, n: int) -> np.ndarray:
    """``D^-1/2 (A + A^T + I) D^-1/2`` of one graph (n x n float32), the \\hat A of eq. 2."""
    a = symmetric_adjacency(edges, n) + np.eye(n)
    dinv = 1.0 / np.sqrt(a.sum(axis=1))
    return (dinv[:, None] * a * dinv[None, :]).astype(np.float32)


def _padded(matrix: np.ndarray, n_max: int) -> torch.Tensor:
    out = torch.zeros(n_max, n_max)
    n = matrix.shape[0]
    out[:n, :n] = torch.from_numpy(matrix)
    return out


class FADPGT(GraphEncoder):
    """Args: ``in_dim`` node features, ``hidden_dim`` d', ``num_layers``, ``heads``, ``tau`` (spectral
    threshold), the five ablation switches, ``dense_limit`` (largest graph with an exact eigen-decomposition)."""

    name = "fadp-gt"

    def __init__(self, in_dim: int, hidden_dim: int = 64, num_layers: int = 2, heads: int = 4,
                 tau: float = DEFAULT_TAU, use_adjacency: bool = True, use_low: bool = True,
                 use_high: bool = True, use_gap: bool = True, use_gmp: bool = True,
                 dense_limit: int = DENSE_LIMIT) -> None:
        super().__init__(in_dim, hidden_dim)
        self.embed = nn.Linear(in_dim, hidden_dim)
        self.faga = nn.ModuleList(FAGALayer(hidden_dim, heads, use_adjacency, use_low, use_high)
                                  for _ in range(num_layers))
        self.dpfr = nn.ModuleList(DPFR(hidden_dim, use_gap, use_gmp) for _ in range(num_layers))
        self.use_adjacency = use_adjacency
        self.uses_spectrum = use_low or use_high
        self.spectral_cache = PerGraphCache(partial(normalized_frequency_maps, tau=tau, dense_limit=dense_limit))
        self.adjacency_cache = PerGraphCache(normalized_adjacency)

    def reset_parameters(self) -> None:
        self.embed.reset_parameters()
        reset_each(list(self.faga) + list(self.dpfr))

    def forward(self, batch: GraphBatch) -> tuple[Tensor, Tensor]:
        # nodes past the largest graph of the batch are padding everywhere: leave them out of the N x N work
        n_pad = batch.max_nodes
        n = int(batch.node_mask.sum(dim=1).max())
        mask = batch.node_mask[:, :n]
        x = zero_padding(self.embed(batch.x[:, :n]), mask)
        adj_hat = (sparse_block_diagonal(self.adjacency_cache.batched(batch, _padded)[:, :n, :n])
                   if self.use_adjacency else None)
        maps = self.spectral_cache.batched(batch, padded_maps)[:, :, :n, :n] if self.uses_spectrum else None
        f_avg = torch.zeros_like(x)
        f_max = torch.zeros_like(x)
        for faga, dpfr in zip(self.faga, self.dpfr):
            xbar = faga(x, mask, adj_hat, maps)
            x, f_avg, f_max = dpfr(xbar, mask, f_avg, f_max)
        graph = masked_mean(x, mask)
        if n < n_pad:
            x = torch.nn.functional.pad(x, (0, 0, 0, n_pad - n))
        return x, graph
