"""Shared skeleton of the PyTorch Geometric encoders (GCN, GAT, GraphSAGE, GNN).

``Linear`` embedding, then ``num_layers`` convolutions with ReLU and a
residual connection, run on the batch as one disjoint graph
(``GraphBatch.flat_edges``: padding nodes have no edges, so they never send
messages); the graph vector is the mean over real nodes. Edges are used in
both directions unless a subclass sets ``symmetric = False``.
"""

from __future__ import annotations

from torch import Tensor, nn

from .base import GraphEncoder, reset_each
from .batch import GraphBatch
from .pooling import masked_mean, zero_padding


class MessagePassingEncoder(GraphEncoder):
    symmetric = True

    def __init__(self, in_dim: int, hidden_dim: int = 64, num_layers: int = 2) -> None:
        super().__init__(in_dim, hidden_dim)
        self.embed = nn.Linear(in_dim, hidden_dim)
        self.convs = nn.ModuleList(self.make_conv(hidden_dim) for _ in range(num_layers))

    def make_conv(self, dim: int) -> nn.Module:  # pragma: no cover - abstract
        raise NotImplementedError

    def reset_parameters(self) -> None:
        self.embed.reset_parameters()
        reset_each(self.convs)

    def forward(self, batch: GraphBatch) -> tuple[Tensor, Tensor]:
        b, n, _ = batch.x.shape
        mask = batch.node_mask
        x = zero_padding(self.embed(batch.x), mask).reshape(b * n, -1)
        edges = batch.flat_edges(symmetric=self.symmetric)
        for conv in self.convs:
            x = x + conv(x, edges).relu()
        x = zero_padding(x.reshape(b, n, -1), mask)
        return x, masked_mean(x, mask)
