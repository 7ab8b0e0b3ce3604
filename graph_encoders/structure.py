"""Per-graph structural computations (spectra, distances, reachability), cached.

These depend only on a graph's edges, not on the placement or the weights,
so an encoder computes them once per graph. The cache key is
``GraphBatch.fingerprint`` (the observation's graph id plus sizes and an edge
checksum, so two environments numbering their graphs differently cannot mix
them up).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import shortest_path

from .batch import GraphBatch


class PerGraphCache:
    """``compute(edges (2, E) int array, n) -> numpy array(s)`` memoized per graph.

    ``hits`` / ``misses`` count look-ups (a miss computes); :meth:`batched`
    turns per-graph results into one batched tensor.
    """

    def __init__(self, compute: Callable[[np.ndarray, int], Any], max_entries: int = 4096) -> None:
        self.compute = compute
        self.max_entries = max_entries
        self.store: dict[tuple, Any] = {}
        self.padded: dict[tuple, torch.Tensor] = {}
        self.hits = 0
        self.misses = 0

    def get(self, batch: GraphBatch, b: int) -> Any:
        key = batch.fingerprint(b)
        value = self.store.get(key)
        if value is None:
            self.misses += 1
            n = key[1]
            mask = batch.edge_mask[b]
            edges = batch.edge_index[b][:, mask].cpu().numpy()
            value = self.compute(edges, n)
            if len(self.store) >= self.max_entries:
                self.store.pop(next(iter(self.store)))
            self.store[key] = value
        else:
            self.hits += 1
        return value

    def batched(self, batch: GraphBatch, to_tensor: Callable[[Any, int], torch.Tensor]) -> torch.Tensor:
        """Stack ``to_tensor(value, N)`` (a tensor padded to the batch's N) over the batch.

        Padded tensors are kept with the values. A batch of one graph repeated
        (the usual case while training on one graph) gives a leading dimension
        of 1, which broadcasts, instead of B copies.
        """
        n_max = batch.max_nodes
        tensors, keys = [], []
        for b in range(batch.batch_size):
            key = batch.fingerprint(b) + (n_max,)
            padded = self.padded.get(key)
            if padded is None:
                padded = self.padded[key] = to_tensor(self.get(batch, b), n_max)
            else:
                self.hits += 1
            tensors.append(padded)
            keys.append(key)
        if all(k == keys[0] for k in keys):
            return tensors[0].unsqueeze(0).to(batch.x.device)
        return torch.stack(tensors).to(batch.x.device)


def symmetric_adjacency(edges: np.ndarray, n: int) -> np.ndarray:
    """Binary A + A^T (n x n float64), no self-loops."""
    a = np.zeros((n, n))
    a[edges[0], edges[1]] = 1.0
    a = np.maximum(a, a.T)
    np.fill_diagonal(a, 0.0)
    return a


def hop_distances(edges: np.ndarray, n: int, cap: int) -> np.ndarray:
    """Undirected shortest-path lengths in hops (n x n int64), unreachable / longer capped at ``cap``."""
    if edges.shape[1] == 0:
        d = np.full((n, n), cap, dtype=np.int64)
        np.fill_diagonal(d, 0)
        return d
    g = coo_matrix((np.ones(edges.shape[1]), (edges[0], edges[1])), shape=(n, n))
    d = shortest_path(g, directed=False, unweighted=True)
    return np.minimum(np.nan_to_num(d, posinf=cap), cap).astype(np.int64)


def reachability(edges: np.ndarray, n: int) -> np.ndarray:
    """``R[i, j]`` = j is reachable from i along directed edges (i != j), n x n bool."""
    if edges.shape[1] == 0:
        return np.zeros((n, n), dtype=bool)
    g = coo_matrix((np.ones(edges.shape[1]), (edges[0], edges[1])), shape=(n, n))
    d = shortest_path(g, directed=True, unweighted=True)
    r = np.isfinite(d)
    np.fill_diagonal(r, False)
    return r
