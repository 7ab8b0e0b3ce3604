r"""DPFR: Dual-Pooling Feature Refinement after a FAGA layer (paper eq. 9-15, ``docs/spec/fadp_gt.md``).

.. math::
    c_{avg} = \mathrm{mean}_{nodes}(\bar X + F^{i-1}_{avg}), \quad
    F^i_{avg} = \sigma(\mathrm{Linear}(c_{avg})) \odot \bar X             \quad (10\text{-}12)

    c_{max} = \max_{nodes}(\bar X + F^{i-1}_{max}), \quad
    F^i_{max} = \sigma(\mathrm{Linear}(c_{max})) \odot \bar X             \quad (13\text{-}15)

    Z = \mathrm{Linear}_{3d' \to d'}([\bar X, F^i_{avg}, F^i_{max}])      \quad (9)

with :math:`F^0 = 0`, means and maxima over real nodes only. ``use_gap`` /
``use_gmp`` drop a branch (the fusion then reads 2d' or d' inputs); with both
off the module is the identity (the paper's table 5, index 1).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from .pooling import masked_max, masked_mean, zero_padding


class DPFR(nn.Module):
    def __init__(self, dim: int, use_gap: bool = True, use_gmp: bool = True) -> None:
        super().__init__()
        self.use_gap, self.use_gmp = use_gap, use_gmp
        self.gap = nn.Linear(dim, dim) if use_gap else None
        self.gmp = nn.Linear(dim, dim) if use_gmp else None
        parts = 1 + int(use_gap) + int(use_gmp)
        self.fuse = nn.Linear(parts * dim, dim) if parts > 1 else None

    def reset_parameters(self) -> None:
        for lin in (self.gap, self.gmp, self.fuse):
            if lin is not None:
                lin.reset_parameters()

    def forward(self, xbar: Tensor, mask: Tensor, f_avg: Tensor, f_max: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Returns ``(Z, F_avg^i, F_max^i)``; ``f_avg`` / ``f_max`` are the previous layer's maps."""
        parts = [xbar]
        if self.gap is not None:
            w = torch.sigmoid(self.gap(masked_mean(xbar + f_avg, mask)))
            f_avg = w.unsqueeze(1) * xbar
            parts.append(f_avg)
        if self.gmp is not None:
            w = torch.sigmoid(self.gmp(masked_max(xbar + f_max, mask)))
            f_max = w.unsqueeze(1) * xbar
            parts.append(f_max)
        z = self.fuse(torch.cat(parts, dim=-1)) if self.fuse is not None else xbar
        return zero_padding(z, mask), f_avg, f_max
