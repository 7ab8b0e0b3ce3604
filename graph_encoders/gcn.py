r"""GCN (Kipf & Welling, 2017): :math:`X' = \hat D^{-1/2} \hat A \hat D^{-1/2} X W`.

Via ``torch_geometric.nn.GCNConv``.
"""

from torch import nn
from torch_geometric.nn import GCNConv

from .message_passing import MessagePassingEncoder


class GCN(MessagePassingEncoder):
    name = "gcn"

    def make_conv(self, dim: int) -> nn.Module:
        return GCNConv(dim, dim)
