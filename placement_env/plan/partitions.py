"""DeepSpeed's two partition rules (``PipelineModule(partition_method=...)``), written once: the planner's
``deepspeed-uniform`` and ``parameters`` splits and the placers of :mod:`baselines.runtime_defaults` use them.
``scripts/check_plan_exports.py`` holds them to DeepSpeed's own ``partition_uniform`` and ``partition_balanced``.
"""

from __future__ import annotations

import numpy as np


def partition_uniform(num_items: int, num_parts: int) -> list[int]:
    """Boundaries ``[0, ..., num_items]`` of ``num_parts`` contiguous parts of nearly equal counts, the first
    ``num_items % num_parts`` parts one larger (DeepSpeed's rule; with fewer items than parts, one item each)."""
    if num_items <= num_parts:
        return [min(p, num_items) for p in range(num_parts + 1)]
    size, extra = divmod(num_items, num_parts)
    return [p * size + min(p, extra) for p in range(num_parts + 1)]


def partition_balanced(weights: list[float], num_parts: int) -> list[int]:
    """Boundaries of the contiguous cut of ``weights`` into ``num_parts`` parts whose heaviest part is lightest
    (exact: a dynamic programme; ties go to the earliest boundaries)."""
    n = len(weights)
    if n <= num_parts:
        return partition_uniform(n, num_parts)
    prefix = np.concatenate([[0.0], np.cumsum(weights)])
    best = np.full((num_parts + 1, n + 1), np.inf)
    cut = np.zeros((num_parts + 1, n + 1), dtype=np.int64)
    best[0, 0] = 0.0
    for p in range(1, num_parts + 1):
        for i in range(p, n + 1):
            k = np.arange(p - 1, i)
            costs = np.maximum(best[p - 1, k], prefix[i] - prefix[k])
            j = int(np.argmin(costs))
            best[p, i], cut[p, i] = costs[j], k[j]
    parts = [n]
    for p in range(num_parts, 0, -1):
        parts.append(int(cut[p, parts[-1]]))
    return parts[::-1]


__all__ = ["partition_balanced", "partition_uniform"]
