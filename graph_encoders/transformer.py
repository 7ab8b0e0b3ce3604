"""The plain Transformer baseline: graph-agnostic multi-head self-attention over the nodes.

Each layer: ``LayerNorm(x + MultiheadAttention(x, x, x))`` with padding keys
masked (``torch.nn.MultiheadAttention``). The graph vector is the mean over
real nodes. This is FADP-GT with all five switches off (the paper's table 4,
index 1), written independently so that the tests can hold the two equal.
"""

from __future__ import annotations

from torch import Tensor, nn

from .base import GraphEncoder, check_heads, reset_each
from .batch import GraphBatch
from .pooling import masked_mean, zero_padding


class TransformerLayer(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        check_heads(dim, heads)  # nn.MultiheadAttention would only assert it
        self.attention = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.norm = nn.LayerNorm(dim)

    def reset_parameters(self) -> None:
        self.attention._reset_parameters()
        self.norm.reset_parameters()

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        out, _ = self.attention(x, x, x, key_padding_mask=~mask, need_weights=False)
        return zero_padding(self.norm(x + out), mask)


class Transformer(GraphEncoder):
    name = "transformer"

    def __init__(self, in_dim: int, hidden_dim: int = 64, num_layers: int = 2, heads: int = 4) -> None:
        super().__init__(in_dim, hidden_dim)
        self.embed = nn.Linear(in_dim, hidden_dim)
        self.layers = nn.ModuleList(TransformerLayer(hidden_dim, heads) for _ in range(num_layers))

    def reset_parameters(self) -> None:
        self.embed.reset_parameters()
        reset_each(self.layers)

    def forward(self, batch: GraphBatch) -> tuple[Tensor, Tensor]:
        mask = batch.node_mask
        x = zero_padding(self.embed(batch.x), mask)
        for layer in self.layers:
            x = layer(x, mask)
        return x, masked_mean(x, mask)
