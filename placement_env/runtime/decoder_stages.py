"""A decoder cut into pipeline stages by hand, as torchtitan cuts Llama: :class:`DecoderStage`, and what each
stage's parameters are called in the whole model (:meth:`DecoderStage.model_name`).

Tracing (``torch.distributed.pipelining.pipeline``) does not take a model whose layers tensor parallelism has
made DTensors; a stage built from the model's own modules does. The model must be of transformers' Llama family:
``model.model.embed_tokens``, ``model.model.layers``, ``model.model.rotary_emb``, ``model.model.norm`` and
``model.lm_head``; attention is causal (transformers' SDPA path without a mask: ``is_causal``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch


def is_decoder(model: Any) -> bool:
    """Whether ``model`` has the modules a :class:`DecoderStage` takes (module docstring)."""
    base = getattr(model, "model", None)
    return all(hasattr(base, name) for name in ("embed_tokens", "layers", "rotary_emb", "norm")) and hasattr(
        model, "lm_head")


def stage_layers(layers: int, stages: int) -> list[tuple[int, int]]:
    """``(first, end)`` of each stage's layers: as even as can be, the first stages one more (as the simulator
    splits them)."""
    bounds = np.cumsum([0, *[len(c) for c in np.array_split(np.arange(layers), stages)]])
    return [(int(bounds[s]), int(bounds[s + 1])) for s in range(stages)]


class DecoderStage(torch.nn.Module):
    """Layers ``first .. end - 1`` of a Llama-family causal LM; stage 0 also runs the embedding, the last stage
    the final norm and the output layer. Input: token ids (stage 0) or hidden states; output: hidden states or
    logits."""

    def __init__(self, model: Any, first: int, end: int, is_first: bool, is_last: bool) -> None:
        super().__init__()
        base = model.model
        self.first = first
        self.embed_tokens = base.embed_tokens if is_first else None
        self.layers = torch.nn.ModuleList(list(base.layers)[first:end])
        self.rotary_emb = base.rotary_emb
        self.norm = base.norm if is_last else None
        self.lm_head = model.lm_head if is_last else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = self.embed_tokens(x) if self.embed_tokens is not None else x
        positions = torch.arange(hidden.shape[1], device=hidden.device).unsqueeze(0).expand(hidden.shape[0], -1)
        embeddings = self.rotary_emb(hidden, positions)
        for layer in self.layers:
            out = layer(hidden, attention_mask=None, position_ids=positions, position_embeddings=embeddings)
            hidden = out[0] if isinstance(out, tuple) else out
        if self.norm is not None and self.lm_head is not None:
            hidden = self.lm_head(self.norm(hidden))
        return hidden

    def model_name(self, name: str) -> str:
        """The whole model's name of this stage's parameter ``name``."""
        head, _, rest = name.partition(".")
        if head == "layers":
            index, _, tail = rest.partition(".")
            return f"model.layers.{self.first + int(index)}.{tail}"
        return name if head == "lm_head" else f"model.{name}"


__all__ = ["DecoderStage", "is_decoder", "stage_layers"]
