"""Multi-layer recurrent modules as one module per layer, so that a trace gives one op per layer:
:class:`LayerwiseRNN` and :func:`layerwise_recurrent` (used by :func:`~placement_env.importers.pytorch.from_torch`)."""

from __future__ import annotations

from copy import deepcopy as copy_module
from typing import Any, TypeGuard

import torch
from torch import nn


class LayerwiseRNN(nn.Module):
    """A multi-layer ``nn.LSTM`` / ``nn.GRU`` as one single-layer module per layer: the same weights and outputs,
    but each layer its own op once traced, so that layers can go to different devices (one LSTM layer per GPU, as
    in GNMT). Dropout between layers is kept; packed sequences are not supported."""

    def __init__(self, rnn: nn.LSTM | nn.GRU) -> None:
        super().__init__()
        self.is_lstm = isinstance(rnn, nn.LSTM)
        self.directions = 2 if rnn.bidirectional else 1
        self.num_layers = rnn.num_layers
        self.dropout = nn.Dropout(rnn.dropout)
        proj = getattr(rnn, "proj_size", 0)
        out_size = (proj or rnn.hidden_size) * self.directions
        self.layers = nn.ModuleList()
        for k in range(rnn.num_layers):
            options: dict[str, Any] = {"num_layers": 1, "bias": rnn.bias, "batch_first": rnn.batch_first,
                                       "bidirectional": rnn.bidirectional}
            if self.is_lstm and proj:
                options["proj_size"] = proj
            layer = type(rnn)(rnn.input_size if k == 0 else out_size, rnn.hidden_size, **options)
            with torch.no_grad():
                for pname, param in layer.named_parameters():
                    param.copy_(getattr(rnn, pname.replace("_l0", f"_l{k}")))
            self.layers.append(layer)

    def forward(self, x: torch.Tensor, hx: Any = None) -> tuple[torch.Tensor, Any]:
        d = self.directions
        hs, cs = [], []
        for k, layer in enumerate(self.layers):
            if hx is None:
                x, state = layer(x)
            elif self.is_lstm:
                x, state = layer(x, (hx[0][k * d:(k + 1) * d], hx[1][k * d:(k + 1) * d]))
            else:
                x, state = layer(x, hx[k * d:(k + 1) * d])
            if self.is_lstm:
                hs.append(state[0])
                cs.append(state[1])
            else:
                hs.append(state)
            if k < self.num_layers - 1 and self.dropout.p > 0:
                x = self.dropout(x)
        h = torch.cat(hs, 0)
        return (x, (h, torch.cat(cs, 0))) if self.is_lstm else (x, h)


def layerwise_recurrent(module: nn.Module) -> nn.Module:
    """``module``, or a copy of it in which every multi-layer ``nn.LSTM`` / ``nn.GRU`` is a :class:`LayerwiseRNN`
    (the module itself is not changed)."""
    def multi_layer(m: nn.Module) -> TypeGuard[nn.LSTM | nn.GRU]:
        return isinstance(m, (nn.LSTM, nn.GRU)) and m.num_layers > 1

    if not any(multi_layer(m) for m in module.modules()):
        return module
    if multi_layer(module):
        return LayerwiseRNN(module).train(module.training)
    copy = copy_module(module)
    for child in list(copy.modules()):
        for attr, sub in list(child.named_children()):
            if multi_layer(sub):
                setattr(child, attr, LayerwiseRNN(sub).train(sub.training))
    return copy
