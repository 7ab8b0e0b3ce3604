"""The interface of every graph encoder."""

from __future__ import annotations

from torch import Tensor, nn

from .batch import GraphBatch


class GraphEncoder(nn.Module):
    """Maps a :class:`GraphBatch` to per-node embeddings and a pooled graph vector.

    ``forward(batch) -> (nodes (B, N, out_dim), graph (B, out_dim))``; rows of
    padding nodes are zero and never influence real nodes or the pooled vector.
    Subclasses set ``name`` (their registry key) and ``out_dim``.
    """

    name: str = ""

    def __init__(self, in_dim: int, hidden_dim: int) -> None:
        super().__init__()
        self.in_dim = int(in_dim)
        self.out_dim = int(hidden_dim)

    def forward(self, batch: GraphBatch) -> tuple[Tensor, Tensor]:  # pragma: no cover - abstract
        raise NotImplementedError
