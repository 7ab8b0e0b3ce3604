r"""A plain message-passing GNN (Morris et al., 2019): :math:`x'_i = W_1 x_i + W_2 \sum_{j \in N(i)} x_j`,
``torch_geometric.nn.GraphConv``, messages along the edges' direction (producer to consumer)."""

from torch import nn
from torch_geometric.nn import GraphConv

from .message_passing import MessagePassingEncoder


class GNN(MessagePassingEncoder):
    name = "gnn"
    symmetric = False

    def make_conv(self, dim: int) -> nn.Module:
        return GraphConv(dim, dim, aggr="add")
