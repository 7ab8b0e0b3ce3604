"""The observation batch every encoder reads, and conversions of it.

An encoder receives the environment's observation as stable-baselines3 hands
it over (a dict of float tensors with a batch dimension, ``embedding`` and
``edge_index`` possibly flattened) and turns it into a :class:`GraphBatch`.
Padding is described here once: ``node_mask`` and ``edge_mask`` say which
rows are real.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass
class GraphBatch:
    """B padded graphs: ``x`` (B, N, F) node features, ``node_mask`` (B, N) bool,
    ``edge_index`` (B, 2, E) long (source row 0, destination row 1), ``edge_mask`` (B, E) bool,
    ``graph_id`` (B,) long, ``gpu_onehot`` (B, D) float."""

    x: Tensor
    node_mask: Tensor
    edge_index: Tensor
    edge_mask: Tensor
    graph_id: Tensor
    gpu_onehot: Tensor

    @classmethod
    def from_observation(cls, obs: dict) -> GraphBatch:
        """Accepts one observation or a batch, numpy or torch, flat or matrix-shaped."""
        t = {k: torch.as_tensor(v) for k, v in obs.items()}
        if t["node_mask"].dim() == 1:  # a single observation
            t = {k: v.unsqueeze(0) for k, v in t.items()}
        b, n = t["node_mask"].shape
        e = t["edge_mask"].shape[1]
        x = t["embedding"].reshape(b, n, -1).float()
        edge_index = t["edge_index"].reshape(b, 2, e).round().long()
        return cls(x, t["node_mask"].bool(), edge_index, t["edge_mask"].bool(),
                   t["graph_id"].reshape(b).round().long(), t["gpu_onehot"].reshape(b, -1).float())

    @property
    def batch_size(self) -> int:
        return int(self.x.shape[0])

    @property
    def max_nodes(self) -> int:
        return int(self.x.shape[1])

    @property
    def current_device(self) -> Tensor:
        """(B, N, D) float: each unit's current device as a one-hot (the embedding's device columns, which
        sit just before its last column, the current-unit flag)."""
        d = self.gpu_onehot.shape[-1]
        return self.x[..., -d - 1:-1]

    def num_devices(self) -> Tensor:
        """(B,) the device count of each observation's cluster (from ``gpu_onehot``)."""
        return self.gpu_onehot.argmax(dim=-1) + 1

    def dense_adjacency(self) -> Tensor:
        """(B, N, N) float: ``A[b, i, j] = 1`` for a real edge i -> j."""
        b, n = self.node_mask.shape
        adj = torch.zeros(b, n, n, device=self.x.device)
        bi, ei = self.edge_mask.nonzero(as_tuple=True)
        adj[bi, self.edge_index[bi, 0, ei], self.edge_index[bi, 1, ei]] = 1.0
        return adj

    def flat_edges(self, symmetric: bool = False) -> Tensor:
        """(2, E_real) edges of the B graphs as one disjoint graph, node ``i`` of graph ``b``
        numbered ``b * N + i`` (the layout of ``x.reshape(B * N, F)``) for PyG layers."""
        bi, ei = self.edge_mask.nonzero(as_tuple=True)
        offset = bi * self.max_nodes
        src = self.edge_index[bi, 0, ei] + offset
        dst = self.edge_index[bi, 1, ei] + offset
        if symmetric:
            src, dst = torch.cat([src, dst]), torch.cat([dst, src])
        return torch.stack([src, dst])

    def fingerprint(self, b: int) -> tuple[int, int, int, int]:
        """A key for caching per-graph work: graph id, real nodes, real edges, an edge checksum."""
        mask = self.edge_mask[b]
        src, dst = self.edge_index[b, 0][mask], self.edge_index[b, 1][mask]
        checksum = int(((src * 7919 + dst * 104729) % 1000003).sum())
        return int(self.graph_id[b]), int(self.node_mask[b].sum()), int(mask.sum()), checksum
