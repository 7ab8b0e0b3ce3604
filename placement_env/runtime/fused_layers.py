"""GPT-2's ``Conv1D`` layers as ``nn.Linear``, so that torch's tensor parallelism splits them: :func:`linear_layers`.

transformers' GPT-2 computes its projections with ``Conv1D`` (``y = x W + b``, ``W`` of shape ``(in, out)``: a
``Linear`` with its weight transposed), which ``ColwiseParallel`` and ``RowwiseParallel`` do not take, and holds the
queries, keys and values in one fused matrix ``c_attn`` (``[q | k | v]``, each ``hidden`` wide, head after head):
split by columns as it is, a rank would get all the queries of some heads and none of their keys. Megatron-LM lays
its fused matrix out head-major for this reason; :func:`linear_layers` does the same: each ``Conv1D`` becomes an
``nn.Linear`` holding ``W^T``, and a fused layer's output rows are reordered so that each of the ``t`` equal column
shards holds the queries, keys and values of its own ``heads / t`` heads::

    rows of c_attn = [q_0 k_0 v_0 | q_1 k_1 v_1 | ... | q_{t-1} k_{t-1} v_{t-1}],  q_r = q[r h/t : (r+1) h/t]

and the attention's ``split_size`` (the width it splits the fused output at) becomes ``hidden / t``, what one rank
computes. The model computes the same function; :func:`linear_layers` returns how to read each converted
parameter back in the original layout, so that a step's parameters compare with the unconverted model's.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

FUSED = "c_attn"
"""The fused query-key-value layer's name (transformers' GPT-2, GPT-Neo's ancestors, ImageGPT)."""


def conv1d_modules(model: torch.nn.Module) -> list[str]:
    """The names of ``model``'s ``Conv1D`` modules (transformers' ``pytorch_utils.Conv1D``, by class name)."""
    return [name for name, module in model.named_modules() if type(module).__name__ == "Conv1D"]


def _fused_order(hidden: int, tensor: int) -> np.ndarray:
    """The fused layer's columns in the order of the module docstring: rank after rank, q, k, v of its heads."""
    width = hidden // tensor
    return np.concatenate([np.arange(r * width, (r + 1) * width) + j * hidden
                           for r in range(tensor) for j in range(3)])


def linear_layers(model: torch.nn.Module, tensor: int) -> dict[str, Callable[[np.ndarray], np.ndarray]]:
    """Replace, in place, each ``Conv1D`` of ``model`` by an ``nn.Linear`` computing the same function, a fused
    query-key-value layer laid out for ``tensor`` ranks (module docstring; its ``Linear`` records
    ``fused_ranks = tensor``, which :func:`~placement_env.runtime.tensor_plans.tensor_plan` reads).

    Returns:
        For each converted parameter's name (``....c_attn.weight``, ``....c_attn.bias``, ...), the function that
        turns its full value (a numpy array in the ``Linear`` layout) back into the original ``Conv1D`` layout.

    Raises:
        ValueError: a fused layer whose attention's heads (or width) ``tensor`` does not divide, naming it.
    """
    restore: dict[str, Callable[[np.ndarray], np.ndarray]] = {}
    modules = dict(model.named_modules())
    for name in conv1d_modules(model):
        conv = modules[name]
        parent_name, _, leaf = name.rpartition(".")
        parent = modules[parent_name]
        weight, bias = conv.weight.detach(), conv.bias.detach()
        order = np.arange(weight.shape[1])
        if leaf == FUSED:
            heads, hidden = int(getattr(parent, "num_heads", 0)), int(getattr(parent, "split_size", 0))
            if weight.shape[1] != 3 * hidden or heads < 1 or heads % tensor or hidden % tensor:
                raise ValueError(f"module {name!r} holds {heads} attention heads of width {hidden} in "
                                 f"{weight.shape[1]} columns: {tensor} tensor ranks must divide the heads of a "
                                 "query-key-value layer")
            order = _fused_order(hidden, tensor)
            parent.split_size = hidden // tensor  # the width one rank's fused output splits at
        linear = torch.nn.Linear(weight.shape[0], weight.shape[1], dtype=weight.dtype, device=weight.device)
        linear.fused_ranks = tensor if leaf == FUSED else None  # type: ignore[assignment]
        with torch.no_grad():
            linear.weight.copy_(weight[:, torch.as_tensor(order)].T)
            linear.bias.copy_(bias[torch.as_tensor(order)])
        setattr(parent, leaf, linear)

        def weight_back(value: np.ndarray, order: np.ndarray = order) -> np.ndarray:
            out = np.empty_like(value.T)
            out[:, order] = value.T
            return out

        def bias_back(value: np.ndarray, order: np.ndarray = order) -> np.ndarray:
            out = np.empty_like(value)
            out[order] = value
            return out

        restore[f"{name}.weight"], restore[f"{name}.bias"] = weight_back, bias_back
    return restore


__all__ = ["FUSED", "conv1d_modules", "linear_layers"]
