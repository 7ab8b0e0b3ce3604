r"""GraphSAGE (Hamilton et al., 2017): :math:`x'_i = W_1 x_i + W_2 \mathrm{mean}_{j \in N(i)} x_j`,
``torch_geometric.nn.SAGEConv``."""

from torch import nn
from torch_geometric.nn import SAGEConv

from .message_passing import MessagePassingEncoder


class GraphSAGE(MessagePassingEncoder):
    name = "sage"

    def make_conv(self, dim: int) -> nn.Module:
        return SAGEConv(dim, dim, aggr="mean")
