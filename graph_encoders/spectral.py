r"""The frequency split of FAGA (paper eq. 3-5; ``docs/spec/fadp_gt.md`` step 3).

With :math:`A_s = A + A^\top` (binary) and :math:`D` its degrees,

.. math::
    L_{sym} = I - D^{-1/2} A_s D^{-1/2}, \qquad
    P_{low} = \sum_{\lambda_i \le \tau} u_i u_i^\top, \quad P_{high} = I - P_{low},

    A_{low} = P_{low} A_s P_{low}, \qquad A_{high} = P_{high} A_s P_{high},

isolated nodes getting :math:`D^{-1/2} = 0`. ``tau`` defaults to 1.0, the
middle of the normalized spectrum [0, 2].

Up to ``dense_limit`` nodes the projector comes from a dense eigen-decomposition
(``numpy.linalg.eigh``). Beyond it, :math:`P_{low}` is applied as a Chebyshev
polynomial (Jackson-damped, ``chebyshev_order`` terms) of the sparse
:math:`L_{sym}`: the step filter :math:`1[\lambda \le \tau]` evaluated without
eigenvectors, at ``O(order * edges * n)`` cost instead of ``O(n^3)``.

Both maps are returned normalized per row over the graph's nodes (the
LayerNorm of eq. 6, without its size-dependent affine part, which the 1x1
convolution of FAGA supplies).
"""

from __future__ import annotations

import numpy as np
import torch
from scipy.sparse import csr_matrix, diags, identity

from .structure import symmetric_adjacency

DEFAULT_TAU = 1.0
DENSE_LIMIT = 2000
CHEBYSHEV_ORDER = 60


def normalized_laplacian(a_s: np.ndarray) -> np.ndarray:
    deg = a_s.sum(axis=1)
    dinv = np.where(deg > 0, 1.0 / np.sqrt(np.where(deg > 0, deg, 1.0)), 0.0)
    return np.eye(a_s.shape[0]) - dinv[:, None] * a_s * dinv[None, :]


def frequency_maps_dense(a_s: np.ndarray, tau: float = DEFAULT_TAU) -> tuple[np.ndarray, np.ndarray]:
    """``(A_low, A_high)`` from the exact eigen-decomposition."""
    lam, u = np.linalg.eigh(normalized_laplacian(a_s))
    low = u[:, lam <= tau + 1e-9]  # a tolerance keeps eigenvalues equal to tau (common at 1.0) on one side
    p_low = low @ low.T
    p_high = np.eye(a_s.shape[0]) - p_low
    return p_low @ a_s @ p_low, p_high @ a_s @ p_high


def step_filter_coefficients(tau: float, order: int) -> np.ndarray:
    """Jackson-damped Chebyshev coefficients of ``1[lambda <= tau]`` on lambda in [0, 2] (variable y = lambda - 1)."""
    y0 = np.clip(tau - 1.0, -1.0, 1.0)
    theta0 = np.arccos(y0)
    k = np.arange(order + 1)
    coeff = np.empty(order + 1)
    coeff[0] = (np.pi - theta0) / np.pi
    coeff[1:] = -2.0 * np.sin(k[1:] * theta0) / (k[1:] * np.pi)
    # Jackson damping kernel (suppresses Gibbs oscillations)
    a = np.pi / (order + 2)
    jackson = ((order + 2 - k) * np.cos(k * a) + np.sin(k * a) / np.tan(a)) / (order + 2)
    return coeff * jackson


def frequency_maps_chebyshev(a_s: np.ndarray, tau: float = DEFAULT_TAU,
                             order: int = CHEBYSHEV_ORDER) -> tuple[np.ndarray, np.ndarray]:
    """``(A_low, A_high)`` with ``P_low`` as a Chebyshev polynomial of the sparse Laplacian."""
    n = a_s.shape[0]
    sparse_a = csr_matrix(a_s)
    deg = np.asarray(sparse_a.sum(axis=1)).ravel()
    dinv = np.where(deg > 0, 1.0 / np.sqrt(np.where(deg > 0, deg, 1.0)), 0.0)
    lap = identity(n, format="csr") - diags(dinv) @ sparse_a @ diags(dinv)
    shifted = lap - identity(n, format="csr")  # spectrum in [-1, 1]
    coeff = step_filter_coefficients(tau, order)

    def apply_p_low(x: np.ndarray) -> np.ndarray:
        t_prev, t_cur = x, shifted @ x
        out = coeff[0] * t_prev + coeff[1] * t_cur
        for c in coeff[2:]:
            t_prev, t_cur = t_cur, 2.0 * (shifted @ t_cur) - t_prev
            out += c * t_cur
        return out

    y = apply_p_low(a_s)          # P A_s
    a_low = apply_p_low(y.T)      # P (P A_s)^T = P A_s P (both symmetric)
    a_high = a_s - y - y.T + a_low  # (I - P) A_s (I - P)
    return a_low, a_high


def row_normalize(m: np.ndarray, eps: float = 1e-5) -> np.ndarray:
    """LayerNorm over the last axis without affine parameters."""
    mu = m.mean(axis=1, keepdims=True)
    var = m.var(axis=1, keepdims=True)
    return (m - mu) / np.sqrt(var + eps)


def normalized_frequency_maps(edges: np.ndarray, n: int, tau: float = DEFAULT_TAU,
                              dense_limit: int = DENSE_LIMIT) -> tuple[np.ndarray, np.ndarray]:
    """Row-normalized ``(A_low, A_high)`` of one graph (float32, n x n)."""
    a_s = symmetric_adjacency(edges, n)
    if n <= dense_limit:
        a_low, a_high = frequency_maps_dense(a_s, tau)
    else:
        a_low, a_high = frequency_maps_chebyshev(a_s, tau)
    return row_normalize(a_low).astype(np.float32), row_normalize(a_high).astype(np.float32)


def padded_maps(maps: tuple[np.ndarray, np.ndarray], n_max: int) -> torch.Tensor:
    """(3, N, N) float32: the two normalized maps and a plane of ones (for the 1x1 convolution's bias)."""
    n = maps[0].shape[0]
    out = torch.zeros(3, n_max, n_max)
    out[0, :n, :n] = torch.from_numpy(maps[0])
    out[1, :n, :n] = torch.from_numpy(maps[1])
    out[2] = 1.0
    return out
