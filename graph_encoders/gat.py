r"""GAT (Velickovic et al., 2018): attention-weighted neighbour sums, ``torch_geometric.nn.GATConv``
with ``heads`` heads of width ``hidden_dim / heads``, concatenated."""

from torch import nn
from torch_geometric.nn import GATConv

from .base import check_heads
from .message_passing import MessagePassingEncoder


class GAT(MessagePassingEncoder):
    name = "gat"

    def __init__(self, in_dim: int, hidden_dim: int = 64, num_layers: int = 2, heads: int = 4) -> None:
        check_heads(hidden_dim, heads)
        self.heads = heads
        super().__init__(in_dim, hidden_dim, num_layers)

    def make_conv(self, dim: int) -> nn.Module:
        return GATConv(dim, dim // self.heads, heads=self.heads)
