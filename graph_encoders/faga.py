r"""FAGA: Frequency-Adaptive Graph Attention, one layer (paper eq. 1-8, ``docs/spec/fadp_gt.md``).

Per head :math:`h` (width :math:`d_h = d'/H`), with node mask applied to every softmax:

.. math::
    Q, K, V = X W^Q, X W^K, X W^V                                       \quad (1)

    M = \hat A \, \mathrm{softmax}(QK^\top / \sqrt{d_h}) \, V           \quad (2)

    I_h = \alpha (w^{low}_h \bar A_{low} + b^{low}_h) + \beta (w^{high}_h \bar A_{high} + b^{high}_h)
                                                                         \quad (6, 7)

    \bar X = \mathrm{softmax}((QK^\top \odot I_h) / \sqrt{d_h}) \, M     \quad (8)

with :math:`\hat A = D^{-1/2}(A + A^\top + I)D^{-1/2}`, :math:`\bar A_{low}`,
:math:`\bar A_{high}` the row-normalized frequency maps of ``spectral.py``,
the 1x1 convolution from 1 to H channels written as the per-head scale and
shift :math:`w_h, b_h`, and :math:`(\alpha, \beta)` = softmax of two learnable
scalars. Heads are concatenated and projected; a residual connection and a
LayerNorm close the block.

Switches (the paper's table 4): ``use_adjacency=False`` drops :math:`\hat A`
from eq. 2; ``use_low`` / ``use_high`` keep one or both frequency terms (one
alone gets weight 1); with both off eq. 8 is skipped (:math:`\bar X = M`), so
with all three off the layer is plain multi-head self-attention.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .base import check_heads
from .modulated_attention import modulated_attention
from .pooling import zero_padding


def sparse_block_diagonal(adj: Tensor) -> Tensor:
    """(G, N, N) dense matrices -> one sparse (G*N, G*N) block-diagonal matrix (G = 1: shared by a batch)."""
    g, n, _ = adj.shape
    gi, i, j = adj.nonzero(as_tuple=True)
    index = torch.stack([gi * n + i, gi * n + j])
    return torch.sparse_coo_tensor(index, adj[gi, i, j], (g * n, g * n), check_invariants=False).coalesce()


def propagate(adj: Tensor, m: Tensor) -> Tensor:
    """``adj @ m`` per graph and head: ``adj`` from :func:`sparse_block_diagonal`, ``m`` (B, H, N, d)."""
    b, h, n, d = m.shape
    if adj.shape[0] == n:  # one graph for the batch: nodes as rows, (graph, head, feature) as columns
        out = torch.sparse.mm(adj, m.permute(2, 0, 1, 3).reshape(n, b * h * d))
        return out.view(n, b, h, d).permute(1, 2, 0, 3)
    out = torch.sparse.mm(adj, m.permute(0, 2, 1, 3).reshape(b * n, h * d))
    return out.view(b, n, h, d).permute(0, 2, 1, 3)


class FAGALayer(nn.Module):
    def __init__(self, dim: int, heads: int = 4, use_adjacency: bool = True, use_low: bool = True,
                 use_high: bool = True) -> None:
        super().__init__()
        check_heads(dim, heads)
        self.dim, self.heads = dim, heads
        self.use_adjacency, self.use_low, self.use_high = use_adjacency, use_low, use_high
        self.q = nn.Linear(dim, dim)
        self.k = nn.Linear(dim, dim)
        self.v = nn.Linear(dim, dim)
        self.out = nn.Linear(dim, dim)
        self.norm = nn.LayerNorm(dim)
        self.low_scale = nn.Parameter(torch.ones(heads))
        self.low_shift = nn.Parameter(torch.zeros(heads))
        self.high_scale = nn.Parameter(torch.ones(heads))
        self.high_shift = nn.Parameter(torch.zeros(heads))
        self.mix = nn.Parameter(torch.zeros(2))  # alpha, beta = softmax(mix)

    @property
    def uses_spectrum(self) -> bool:
        return self.use_low or self.use_high

    def reset_parameters(self) -> None:
        for lin in (self.q, self.k, self.v, self.out):
            lin.reset_parameters()
        self.norm.reset_parameters()
        for p, value in ((self.low_scale, 1.0), (self.low_shift, 0.0), (self.high_scale, 1.0),
                         (self.high_shift, 0.0), (self.mix, 0.0)):
            nn.init.constant_(p, value)

    def alpha_beta(self) -> Tensor:
        if self.use_low and self.use_high:
            return torch.softmax(self.mix, dim=0)
        return torch.tensor([float(self.use_low), float(self.use_high)], device=self.mix.device)

    def modulation_coefficients(self) -> Tensor:
        """(H, 3): per head, the weights of A_low, A_high and the constant in I_h (eq. 6-7)."""
        ab = self.alpha_beta()
        return torch.stack([ab[0] * self.low_scale, ab[1] * self.high_scale,
                            ab[0] * self.low_shift + ab[1] * self.high_shift], dim=1)

    def _split(self, t: Tensor) -> Tensor:
        b, n, _ = t.shape
        return t.view(b, n, self.heads, self.dim // self.heads).transpose(1, 2)  # (B, H, N, d_h)

    def forward(self, x: Tensor, mask: Tensor, adj_hat: Tensor | None = None, maps: Tensor | None = None) -> Tensor:
        """``x`` (B, N, d), ``mask`` (B, N); ``adj_hat`` (sparse, from :func:`sparse_block_diagonal`) and
        ``maps`` (B or 1, 3, N, N: A_low, A_high, ones) when the switches use them (a leading 1 broadcasts
        over the batch)."""
        b, n, _ = x.shape
        q, k, v = self._split(self.q(x)), self._split(self.k(x)), self._split(self.v(x))
        key_mask = mask[:, None, None, :]
        m = F.scaled_dot_product_attention(q, k, v, attn_mask=key_mask)  # softmax(QK^T / sqrt(d_h)) V
        if self.use_adjacency:  # \hat A (softmax V) as a sparse product: never an N^3 or even N^2 d term
            assert adj_hat is not None, "use_adjacency needs adj_hat"
            m = propagate(adj_hat, m)
        if self.uses_spectrum:
            coef = self.modulation_coefficients() / math.sqrt(self.dim // self.heads)  # I_h / sqrt(d_h)
            assert maps is not None, "the frequency terms need maps"
            m = modulated_attention(q, k, m, coef, maps, mask)
        merged = m.transpose(1, 2).reshape(b, n, self.dim)
        return zero_padding(self.norm(x + self.out(merged)), mask)
