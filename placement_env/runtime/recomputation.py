"""Recomputation as a plan names it (:data:`~placement_env.parallelism.RECOMPUTATION`), by ``torch.utils.checkpoint``:
:func:`recompute_layers`.

* ``full``: each layer keeps only its input; its whole forward reruns in the backward (Megatron-LM's
  ``--recompute-granularity full --recompute-method uniform --recompute-num-layers 1``);
* ``selective``: each layer keeps the outputs of its matrix products (``aten.mm``, ``aten.addmm``: the linear
  layers) and reruns the rest, the attention core among it (``Q K^T``, the softmax, its product with ``V``) and
  the element-wise ops: Korthikanti et al.'s selective recomputation, written as torch's selective activation
  checkpointing policy (``create_selective_checkpoint_contexts``), as torchtitan writes its ``op`` mode.

The layers are the modules named ``<...>.<index>`` (an ``nn.ModuleList``'s children: a decoder's blocks). Apply it
after tensor parallelism and before FSDP (torchtitan's order), so that FSDP gathers a layer's parameters again for
its rerun.
"""

from __future__ import annotations

import functools
from typing import Any

import torch
from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts

SAVED_OPS = (torch.ops.aten.mm.default, torch.ops.aten.addmm.default)
"""The ops whose outputs a selectively recomputing layer keeps (the linear layers' products)."""


def _keep_products(ctx: Any, op: Any, *args: Any, **kwargs: Any) -> CheckpointPolicy:
    return CheckpointPolicy.MUST_SAVE if op in SAVED_OPS else CheckpointPolicy.PREFER_RECOMPUTE


def layers_of(module: torch.nn.Module) -> list[torch.nn.Module]:
    """The modules of ``module`` named ``<...>.<index>`` (a decoder's blocks), in order."""
    return [m for name, m in module.named_modules() if "." in name and name.rsplit(".", 1)[-1].isdigit()]


def recompute_layers(module: torch.nn.Module, recompute: str) -> int:
    """Make each layer of ``module`` (:func:`layers_of`) recompute as ``recompute`` says (module docstring): its
    ``forward`` is wrapped in ``checkpoint`` (names and parameters unchanged). Returns how many layers were
    wrapped; ``none`` wraps nothing. Raises ``ValueError`` for another value."""
    if recompute == "none":
        return 0
    if recompute not in ("selective", "full"):
        raise ValueError(f"unknown recompute {recompute!r}; known: none, selective, full")
    layers = layers_of(module)
    for layer in layers:
        extra: dict[str, Any] = {}
        if recompute == "selective":
            extra["context_fn"] = functools.partial(create_selective_checkpoint_contexts, _keep_products)
        layer.forward = functools.partial(checkpoint, layer.forward, use_reentrant=False, **extra)
    return len(layers)


__all__ = ["SAVED_OPS", "layers_of", "recompute_layers"]
