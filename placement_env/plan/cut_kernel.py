"""The compiled (numba) bottleneck cut of the planner: :func:`bottleneck_cut_kernel`.

The same search as :func:`placement_env.plan.cuts.bottleneck_cut` (held to it by ``tests/test_planner.py``),
on tables instead of functions: ``costs[i, a, b]`` the cost of a chunk of cost table ``i`` from layer ``a`` to
before layer ``b``, ``fits[j, a, b]`` whether such a chunk fits memory table ``j``; chunk ``c`` reads tables
``cost_of[c]`` and ``fit_of[c]``.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def _pack(costs, cost_of, fits, fit_of, allowed, ends_at, k, limit, parts):
    """Greedy: each chunk the longest run that stays within ``limit`` and fits, ending where allowed."""
    layers = costs.shape[2] - 1
    a = 0
    parts[0] = 0
    n = ends_at.shape[0]
    for c in range(k):
        left = k - c - 1
        if n - 1 - left < 0:
            return False
        most = ends_at[n - 1 - left]
        if most - a < 1:
            return False
        i, j = cost_of[c], fit_of[c]
        if c == k - 1:
            if most != layers or not (costs[i, a, layers] <= limit and fits[j, a, layers]):
                return False
            end = layers
        else:
            end = -1
            b = a + 1
            while b <= most and costs[i, a, b] <= limit and fits[j, a, b]:
                if allowed[b]:
                    end = b
                b += 1
            if end < 0:
                return False
        a = end
        parts[c + 1] = a
    return a == layers


@njit(cache=True)
def bottleneck_cut_kernel(costs, cost_of, fits, fit_of, allowed, k):
    """``(found, parts)``: the boundaries ``parts`` (k + 1 entries) of the cut whose largest chunk cost is least
    (binary search to a relative 1e-4, each probe :func:`_pack`); ``found`` False when no cut fits."""
    layers = costs.shape[2] - 1
    ends_at = np.flatnonzero(allowed[1:]) + 1
    hi = 0.0
    for c in range(k):
        hi = max(hi, costs[cost_of[c], 0, layers])
    hi = hi * 4 + 1e-30
    parts = np.zeros(k + 1, dtype=np.int64)
    best = np.zeros(k + 1, dtype=np.int64)
    if not _pack(costs, cost_of, fits, fit_of, allowed, ends_at, k, hi, parts):
        return False, best
    best[:] = parts
    lo = 0.0
    for _ in range(40):
        mid = (lo + hi) / 2
        if _pack(costs, cost_of, fits, fit_of, allowed, ends_at, k, mid, parts):
            best[:] = parts
            hi = mid
        else:
            lo = mid
        if hi - lo <= 1e-4 * hi:
            break
    return True, best
