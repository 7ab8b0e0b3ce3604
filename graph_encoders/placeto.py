r"""Placeto's graph embedding (Addanki et al., 2019).

1. Message passing in both directions, ``rounds`` times:
   :math:`h_v \leftarrow \mathrm{MLP}([h_v, \mathrm{mean}_{u \to v} f(h_u), \mathrm{mean}_{v \to w} g(h_w)])`
   (inputs from producers and from consumers, with separate message MLPs f, g).
2. Group aggregation: for every node, the mean embedding of its *parent group*
   (ancestors), *child group* (descendants) and *parallel group* (nodes neither
   before nor after it), concatenated with its own and projected:
   :math:`z_v = W [h_v, \bar h_{anc(v)}, \bar h_{desc(v)}, \bar h_{par(v)}]`.

Placeto defines the groups relative to the node being placed; computing them
for every node gives the whole-graph MDP one embedding per node. Reachability
is computed once per graph and cached.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor, nn

from .base import GraphEncoder
from .batch import GraphBatch
from .pooling import masked_mean, zero_padding
from .structure import PerGraphCache, reachability


def _group_operators(reach: np.ndarray, n_max: int) -> Tensor:
    """(3, N, N) row-normalized averaging operators over ancestors, descendants, parallel nodes."""
    n = reach.shape[0]
    desc = reach.astype(np.float32)
    anc = desc.T.copy()
    par = 1.0 - np.minimum(1.0, desc + anc + np.eye(n, dtype=np.float32))
    ops = torch.zeros(3, n_max, n_max)
    for i, g in enumerate((anc, desc, par)):
        rows = g.sum(axis=1, keepdims=True)
        ops[i, :n, :n] = torch.from_numpy(g / np.where(rows > 0, rows, 1.0))
    return ops


class Placeto(GraphEncoder):
    name = "placeto"

    def __init__(self, in_dim: int, hidden_dim: int = 64, num_layers: int = 2) -> None:
        super().__init__(in_dim, hidden_dim)
        self.embed = nn.Linear(in_dim, hidden_dim)
        self.from_producers = nn.ModuleList(nn.Linear(hidden_dim, hidden_dim) for _ in range(num_layers))
        self.from_consumers = nn.ModuleList(nn.Linear(hidden_dim, hidden_dim) for _ in range(num_layers))
        self.update = nn.ModuleList(nn.Sequential(nn.Linear(3 * hidden_dim, hidden_dim), nn.ReLU())
                                    for _ in range(num_layers))
        self.groups = nn.Linear(4 * hidden_dim, hidden_dim)
        self.reach_cache = PerGraphCache(reachability)

    def forward(self, batch: GraphBatch) -> tuple[Tensor, Tensor]:
        mask = batch.node_mask
        adj = batch.dense_adjacency()  # adj[b, u, v] = 1 for u -> v
        indeg = adj.sum(dim=1).clamp_min(1.0).unsqueeze(-1)
        outdeg = adj.sum(dim=2).clamp_min(1.0).unsqueeze(-1)
        h = zero_padding(torch.relu(self.embed(batch.x)), mask)
        for f, g, upd in zip(self.from_producers, self.from_consumers, self.update):
            down = adj.transpose(1, 2) @ torch.relu(f(h)) / indeg  # mean over producers
            up = adj @ torch.relu(g(h)) / outdeg  # mean over consumers
            h = zero_padding(upd(torch.cat([h, down, up], dim=-1)), mask)
        ops = self.reach_cache.batched(batch, _group_operators)  # (B|1, 3, N, N)
        grouped = [ops[:, i] @ h for i in range(3)]
        z = zero_padding(self.groups(torch.cat([h] + grouped, dim=-1)), mask)
        return z, masked_mean(z, mask)
