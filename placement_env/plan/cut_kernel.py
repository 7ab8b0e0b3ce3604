"""The compiled (numba) bottleneck cut of the planner: :func:`bottleneck_cut_kernel`.

The same search as :func:`placement_env.plan.cuts.bottleneck_cut` (held to it by ``tests/test_planner.py``), on
prefix sums instead of functions, so that it holds O(layers + chunks) numbers whatever the layers: a chunk ``c``
from layer ``a`` to before layer ``b`` costs ``(work[b] - work[a]) / speed[c]``, plus, when it sends on
(``sends[c]``), ``2 (latency[c] + q after[b] / bandwidth[c])``; it fits when its bytes (``mode``: 0 kept whole, 1
recomputing, 2 the smaller of the two, 3 always) are at most ``memory[c]``: parameters
``(params[b] - params[a]) param_factor`` plus ``held[c]`` micro-batches of ``ceil(q (saved[b] - saved[a]))`` bytes
(kept whole) or of ``ceil(q inputs[a])`` bytes and one of the former (recomputing).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit


@njit(cache=True)
def _cost(c, a, b, work, after, speed, latency, bandwidth, sends, q):
    value = (work[b] - work[a]) / speed[c]
    if sends[c]:
        value += 2.0 * (latency[c] + q * after[b] / bandwidth[c])
    return value


@njit(cache=True)
def _fits(c, a, b, params, saved, inputs, memory, held, q, param_factor, mode):
    if mode == 3:
        return True
    static = (params[b] - params[a]) * param_factor
    kept = math.ceil(q * max(saved[b] - saved[a], 0.0))
    plain = static + held[c] * kept
    again = static + held[c] * math.ceil(q * inputs[a]) + kept
    if mode == 0:
        need = plain
    elif mode == 1:
        need = again
    else:
        need = min(plain, again)
    return need <= memory[c]


@njit(cache=True)
def _pack(work, after, params, saved, inputs, speed, latency, bandwidth, sends, memory, held, q, param_factor, mode,
          allowed, ends_at, k, limit, parts):
    """Greedy: each chunk the longest run that stays within ``limit`` and fits, ending where allowed."""
    layers = work.shape[0] - 1
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
        if c == k - 1:
            if most != layers or not (_cost(c, a, layers, work, after, speed, latency, bandwidth, sends, q) <= limit
                                      and _fits(c, a, layers, params, saved, inputs, memory, held, q, param_factor,
                                                mode)):
                return False
            end = layers
        else:
            end = -1
            b = a + 1
            while b <= most and _cost(c, a, b, work, after, speed, latency, bandwidth, sends, q) <= limit \
                    and _fits(c, a, b, params, saved, inputs, memory, held, q, param_factor, mode):
                if allowed[b]:
                    end = b
                b += 1
            if end < 0:
                return False
        a = end
        parts[c + 1] = a
    return a == layers


@njit(cache=True)
def bottleneck_cut_kernel(work, after, params, saved, inputs, speed, latency, bandwidth, sends, memory, held, q,
                          param_factor, mode, allowed, k):
    """``(found, parts)``: the boundaries ``parts`` (k + 1 entries) of the cut whose largest chunk cost is least
    (binary search to a relative 1e-4, each probe :func:`_pack`); ``found`` False when no cut fits. Prefix arrays
    (``work``, ``after``, ``params``, ``saved``, ``inputs``) have ``layers + 1`` entries, the per-chunk ones
    (``speed`` .. ``held``) ``k`` (module docstring)."""
    layers = work.shape[0] - 1
    ends_at = np.flatnonzero(allowed[1:]) + 1
    hi = 0.0
    for c in range(k):
        hi = max(hi, _cost(c, 0, layers, work, after, speed, latency, bandwidth, sends, q))
    hi = hi * 4 + 1e-30
    parts = np.zeros(k + 1, dtype=np.int64)
    best = np.zeros(k + 1, dtype=np.int64)
    args = (work, after, params, saved, inputs, speed, latency, bandwidth, sends, memory, held, q, param_factor,
            mode, allowed, ends_at, k)
    if not _pack(*args, hi, parts):
        return False, best
    best[:] = parts
    lo = 0.0
    for _ in range(40):
        mid = (lo + hi) / 2
        if _pack(*args, mid, parts):
            best[:] = parts
            hi = mid
        else:
            lo = mid
        if hi - lo <= 1e-4 * hi:
            break
    return True, best


__all__ = ["bottleneck_cut_kernel"]
