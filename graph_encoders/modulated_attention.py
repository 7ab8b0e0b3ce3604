r"""Frequency-modulated attention (FAGA's eq. 8), computed in cache-sized chunks of the batch.

.. math::
    \mathrm{out} = \mathrm{softmax}\big((Q K^\top) \odot I_h + \mathrm{mask}\big)\, M,
    \qquad I_h = \sum_c \mathrm{coef}_{h,c}\, \mathrm{map}_c

per graph and head, with padded keys masked (``pooling.NEG``). ``coef`` (H, C)
carries the per-head weights of the C frequency maps (the caller folds in
:math:`1/\sqrt{d_h}`); ``maps`` (1 or B, C, N, N) are constants of the graph.

Written with autograd, eq. 8 keeps several (B, H, N, N) tensors alive (the
scores, the modulated scores, the probabilities) and each fresh allocation of
that size costs more than the arithmetic on it. Here the forward pass walks
the batch a few graphs at a time, so every (c, H, N, N) temporary stays in
cache and is reused, and keeps only Q, K, M and the output; the backward pass
recomputes each chunk's probabilities (as FlashAttention does) and uses
:math:`\sum_j P_{ij} dP_{ij} = dO_i \cdot O_i` for the softmax gradient. The
result equals the autograd formula (``tests/test_encoders.py`` holds them to
it, values and gradients); ``benchmarks/encoders.py`` prints the cost.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .pooling import NEG

CHUNK_ELEMENTS = 1 << 20  # scores per chunk (4 MB in float32): a few chunk-sized temporaries stay in cache


def _chunk_size(heads: int, n: int) -> int:
    return max(1, CHUNK_ELEMENTS // max(1, heads * n * n))


def _modulation(coef: Tensor, maps: Tensor) -> Tensor:
    """(H, C) x (b, C, N, N) -> (b, H, N, N)."""
    b, c, n, _ = maps.shape
    return (coef @ maps.reshape(b, c, n * n)).view(b, coef.shape[0], n, n)


def _probabilities(q: Tensor, k: Tensor, mod: Tensor, key_mask: Tensor | None) -> tuple[Tensor, Tensor]:
    """The chunk's raw scores QK^T (c, H, N, N) and its attention probabilities."""
    scores = q @ k.transpose(-1, -2)
    logits = scores * mod
    if key_mask is not None:
        logits.masked_fill_(~key_mask[:, None, None, :], NEG)
    return scores, logits.softmax(dim=-1)


class _ModulatedAttention(torch.autograd.Function):
    """Forward and backward of :func:`modulated_attention`, chunk by chunk (see the module docstring)."""

    @staticmethod
    def forward(ctx, q: Tensor, k: Tensor, m: Tensor, coef: Tensor, maps: Tensor,
                key_mask: Tensor | None) -> Tensor:
        b, h, n, _ = q.shape
        step = _chunk_size(h, n)
        shared = maps.shape[0] == 1
        mod_all = _modulation(coef, maps) if shared else None
        out = torch.empty(q.shape[:-1] + m.shape[-1:], dtype=m.dtype, device=m.device)
        for i in range(0, b, step):
            sl = slice(i, i + step)
            mod = _modulation(coef, maps[sl]) if mod_all is None else mod_all
            _, p = _probabilities(q[sl], k[sl], mod, None if key_mask is None else key_mask[sl])
            torch.matmul(p, m[sl], out=out[sl])
        ctx.save_for_backward(q, k, m, coef, maps, out)
        ctx.key_mask = key_mask
        return out

    @staticmethod
    def backward(ctx, grad_out: Tensor):
        q, k, m, coef, maps, out = ctx.saved_tensors
        key_mask = ctx.key_mask
        b, h, n, _ = q.shape
        step = _chunk_size(h, n)
        shared = maps.shape[0] == 1
        mod_all = _modulation(coef, maps) if shared else None
        grad_out = grad_out.contiguous()
        dq, dk, dm = torch.empty_like(q), torch.empty_like(k), torch.empty_like(m)
        dcoef_maps = torch.zeros(h, maps.shape[1], dtype=coef.dtype, device=coef.device)
        row_dot = (grad_out * out).sum(dim=-1, keepdim=True)  # sum_j P_ij dP_ij
        area = n * n
        d_mod = torch.zeros(h, area, dtype=q.dtype, device=q.device) if shared else None
        for i in range(0, b, step):
            sl = slice(i, i + step)
            mod = _modulation(coef, maps[sl]) if mod_all is None else mod_all
            scores, p = _probabilities(q[sl], k[sl], mod, None if key_mask is None else key_mask[sl])
            go = grad_out[sl]
            torch.matmul(p.transpose(-1, -2), go, out=dm[sl])
            d_logits = (go @ m[sl].transpose(-1, -2)).sub_(row_dot[sl]).mul_(p)  # softmax backward
            scores.mul_(d_logits)  # d loss / d I_h, per graph
            if d_mod is not None:  # shared maps: summed over graphs here, multiplied by the maps once at the end
                d_mod += scores.sum(dim=0).view(h, area)
            else:
                dcoef_maps += (scores.view(-1, h, area) @ maps[sl].view(-1, maps.shape[1], area).transpose(1, 2)).sum(0)
            d_scores = d_logits.mul_(mod)
            torch.matmul(d_scores, k[sl], out=dq[sl])
            torch.matmul(d_scores.transpose(-1, -2), q[sl], out=dk[sl])
        if d_mod is not None:
            dcoef_maps = d_mod @ maps.view(-1, area).t()
        return dq, dk, dm, dcoef_maps, None, None


def modulated_attention(q: Tensor, k: Tensor, m: Tensor, coef: Tensor, maps: Tensor,
                        key_mask: Tensor | None = None) -> Tensor:
    """``softmax((Q K^T) * I_h, masked) @ M`` for ``q``, ``k`` (B, H, N, d_h), ``m`` (B, H, N, d_v),
    ``coef`` (H, C), ``maps`` (1 or B, C, N, N) and ``key_mask`` (B, N) bool (``None``: every key is real).

    Returns (B, H, N, d_v). Differentiable in ``q``, ``k``, ``m`` and ``coef``; ``maps`` is a constant.
    """
    if key_mask is not None and bool(key_mask.all()):
        key_mask = None
    return _ModulatedAttention.apply(q.contiguous(), k.contiguous(), m.contiguous(), coef,
                                     maps.contiguous(), key_mask)
