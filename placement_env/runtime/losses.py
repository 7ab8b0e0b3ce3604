"""Losses a pipeline's last stage computes per micro-batch (module level: the workers import them by name).

* :func:`causal_lm_loss`: next-token cross-entropy of a causal language model, the targets its own input ids
  shifted by one (what ``transformers``' ``*ForCausalLM`` models compute when given ``labels``);
* :func:`sum_of_outputs`: the sum of the output tensors, a stand-in that makes gradients flow (no training
  objective: with an optimizer it drives the outputs down without bound).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch.utils import _pytree as pytree


def causal_lm_loss(output: Any, target: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of ``output``'s logits at positions ``0 .. s-2`` against ``target`` (the input ids) at
    ``1 .. s-1``. ``output``: the logits, or an object or tuple holding them first (``.logits``)."""
    logits = getattr(output, "logits", None)
    if logits is None:
        logits = output[0] if isinstance(output, (tuple, list)) else output
    if not isinstance(logits, torch.Tensor) or logits.dim() != 3:
        raise ValueError(f"causal_lm_loss needs logits of shape (batch, sequence, vocabulary), got "
                         f"{getattr(logits, 'shape', type(logits).__name__)}")
    shifted = logits[:, :-1].reshape(-1, logits.shape[-1]).float()
    return F.cross_entropy(shifted, target[:, 1:].reshape(-1))


def sum_of_outputs(output: Any, target: Any) -> torch.Tensor:
    """The sum of ``output``'s tensors (``target`` unused)."""
    return torch.stack([t.float().sum() for t in pytree.tree_leaves(output) if isinstance(t, torch.Tensor)]).sum()


def is_causal_lm(model: Any) -> bool:
    """Whether ``model`` is a ``transformers`` causal language model (``*ForCausalLM``, ``*LMHeadModel``)."""
    name = type(model).__name__
    return hasattr(model, "config") and (name.endswith("ForCausalLM") or name.endswith("LMHeadModel"))


__all__ = ["causal_lm_loss", "is_causal_lm", "sum_of_outputs"]
