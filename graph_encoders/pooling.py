"""Masked reductions over nodes: every encoder pools and normalizes through these."""

from __future__ import annotations

import torch
from torch import Tensor

NEG = -1e9  # stands for -inf in masked softmaxes (keeps gradients finite)


def masked_mean(x: Tensor, mask: Tensor) -> Tensor:
    """Mean over real nodes: ``x`` (B, N, d), ``mask`` (B, N) -> (B, d)."""
    m = mask.unsqueeze(-1).to(x.dtype)
    return (x * m).sum(dim=1) / m.sum(dim=1).clamp_min(1.0)


def masked_max(x: Tensor, mask: Tensor) -> Tensor:
    """Max over real nodes: (B, N, d) -> (B, d); an empty graph gives zeros."""
    filled = x.masked_fill(~mask.unsqueeze(-1), NEG)
    out = filled.max(dim=1).values
    return torch.where(mask.any(dim=1, keepdim=True), out, torch.zeros_like(out))


def zero_padding(x: Tensor, mask: Tensor) -> Tensor:
    """Zero the rows of padding nodes: (B, N, d)."""
    return x * mask.unsqueeze(-1).to(x.dtype)
