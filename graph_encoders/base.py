"""The interface of every graph encoder."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, cast

from torch import Tensor, nn

from .batch import GraphBatch


def check_heads(hidden_dim: int, heads: int) -> None:
    """Multi-head attention splits ``hidden_dim`` into ``heads`` equal parts: refuse a split that is not exact."""
    if hidden_dim % heads:
        raise ValueError(f"hidden size {hidden_dim} is not divisible by {heads} heads")


def reset_each(modules: Iterable[nn.Module]) -> None:
    """Call ``reset_parameters()`` of every module (each layer of this package has one, as in PyG)."""
    for module in modules:
        cast(Any, module).reset_parameters()


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
