"""A decoder cut into pipeline stages by hand, as torchtitan cuts Llama: :class:`DecoderStage`, what each stage's
parameters are called in the whole model, and which parameters two stages share (tied embeddings).

Tracing (``torch.distributed.pipelining.pipeline``) does not take a model whose layers tensor parallelism has
made DTensors; a stage built from the model's own modules does. Seven layouts of transformers' causal LMs are
known (:data:`LAYOUTS`): the Llama family (``model.embed_tokens``, ``model.layers``, rotary position embeddings
``model.rotary_emb``, ``model.norm``; Mistral, Qwen2, ... have it too), GPT-2 (``transformer.wte``, learned positions
``transformer.wpe``, ``transformer.drop``, ``transformer.h``, ``transformer.ln_f``), OPT
(``model.decoder.embed_tokens``, learned positions ``embed_positions`` called with the position ids, the optional
``project_in`` and ``project_out``, ``layers``, ``final_layer_norm``, which OPT-350m has not), GPT-NeoX, GPT-J, Phi
and Falcon (rotary, under their own names), each with ``lm_head``. Attention is causal (transformers' SDPA path
without a mask: ``is_causal``). A stage runs the layers alone: :func:`check_stages` refuses a model whose own
forward does more (scaled or soft-capped logits) by running the stages against it before any worker starts.

A tied output layer (GPT-2's ``lm_head`` is ``wte``) lives on the first stage and on the last: each stage holds its
copy, and the copies' gradients are summed over the stages that hold them before the optimizer steps
(:func:`shared_parameters`), as Megatron-LM does for its embedding group, so the copies stay one parameter.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch.distributed.tensor import DTensor, Shard


@dataclass(frozen=True)
class DecoderLayout:
    """Where a causal LM keeps the parts a stage takes: attribute names under ``model.<base>``."""

    base: str
    embed: str
    layers: str
    norm: str
    rotary: str | None = None  # rotary position embeddings, given to each layer
    positions: str | None = None  # learned position embeddings, added to the token embeddings
    dropout: str | None = None  # after the embeddings
    project_in: str | None = None  # a projection of the token embeddings to the layers' width (None there: none)
    project_out: str | None = None  # and back, after the final norm


LAYOUTS = (DecoderLayout("model", "embed_tokens", "layers", "norm", rotary="rotary_emb"),
           DecoderLayout("transformer", "wte", "h", "ln_f", positions="wpe", dropout="drop"),
           DecoderLayout("model.decoder", "embed_tokens", "layers", "final_layer_norm", positions="embed_positions",
                         project_in="project_in", project_out="project_out"),
           DecoderLayout("gpt_neox", "embed_in", "layers", "final_layer_norm", rotary="rotary_emb",
                         dropout="emb_dropout"),
           DecoderLayout("transformer", "wte", "h", "ln_f", rotary="rotary_emb", dropout="drop"),
           DecoderLayout("model", "embed_tokens", "layers", "final_layernorm", rotary="rotary_emb",
                         dropout="embed_dropout"),
           DecoderLayout("transformer", "word_embeddings", "h", "ln_f", rotary="rotary_emb"))
"""The Llama family (Mistral, Qwen, Gemma, ...), GPT-2, OPT, GPT-NeoX (Pythia), GPT-J, Phi and Falcon, in the order
they are tried (GPT-2's learned positions tell it from GPT-J)."""


def decoder_base(model: Any, layout: DecoderLayout) -> Any:
    """The module under ``model`` at ``layout.base`` (a dotted path), or None."""
    base = model
    for name in layout.base.split("."):
        base = getattr(base, name, None)
    return base


def decoder_layout(model: Any) -> DecoderLayout | None:
    """The :data:`LAYOUTS` entry ``model`` has (and ``lm_head``), or None."""
    for layout in LAYOUTS:
        base = decoder_base(model, layout)
        needed = [layout.embed, layout.layers, layout.norm, *[n for n in (layout.rotary, layout.positions) if n]]
        if base is not None and all(hasattr(base, name) for name in needed) and hasattr(model, "lm_head"):
            return layout
    return None


def is_decoder(model: Any) -> bool:
    """Whether ``model`` has the modules a :class:`DecoderStage` takes (module docstring)."""
    return decoder_layout(model) is not None


def decoder_layers(model: Any) -> int:
    """How many layers (blocks) the decoder ``model`` has."""
    layout = decoder_layout(model)
    if layout is None:
        raise ValueError(f"model {type(model).__name__} is not a decoder of a known layout")
    return len(getattr(decoder_base(model, layout), layout.layers))


def stage_layers(layers: int, stages: int) -> list[tuple[int, int]]:
    """``(first, end)`` of each stage's layers: as even as can be, the first stages one more (as the simulator
    splits them)."""
    bounds = np.cumsum([0, *[len(c) for c in np.array_split(np.arange(layers), stages)]])
    return [(int(bounds[s]), int(bounds[s + 1])) for s in range(stages)]


class DecoderStage(torch.nn.Module):
    """Layers ``first .. end - 1`` of a causal LM of a known layout (:data:`LAYOUTS`); stage 0 also runs the
    embeddings, the last stage the final norm and the output layer. Input: token ids (stage 0) or hidden states;
    output: hidden states or logits. ``whole_names`` maps each of its parameters' names to the whole model's (a
    tied parameter to the name the whole model reports it by).

    With sequence parallelism, set ``sequence_mesh`` (the tensor ranks' mesh): the stage then takes and gives its
    tensor rank's shard of the sequence (Megatron-LM sends a sequence-parallel stage's activations so, ``1 / t``
    of them a rank), wrapped as ``Shard(1)`` of that mesh inside the stage."""

    sequence_mesh: Any = None


    def __init__(self, model: Any, first: int, end: int, is_first: bool, is_last: bool) -> None:
        super().__init__()
        layout = decoder_layout(model)
        if layout is None:
            raise ValueError(f"model {type(model).__name__} is not a decoder of a known layout")
        base = decoder_base(model, layout)
        self.first = first
        self.embed = getattr(base, layout.embed) if is_first else None
        self.project_in = getattr(base, layout.project_in, None) if is_first and layout.project_in else None
        self.positions = getattr(base, layout.positions) if is_first and layout.positions else None
        self.positions_by_id = self.positions is not None and "position_ids" in inspect.signature(
            self.positions.forward).parameters  # OPT's: (attention_mask, cache_length, position_ids)
        self.dropout = getattr(base, layout.dropout) if is_first and layout.dropout else None
        self.layers = torch.nn.ModuleList(list(getattr(base, layout.layers))[first:end])
        self.rotary = getattr(base, layout.rotary) if layout.rotary else None
        self.norm = getattr(base, layout.norm) if is_last else None  # None too where the model has none
        self.project_out = getattr(base, layout.project_out, None) if is_last and layout.project_out else None
        self.lm_head = model.lm_head if is_last else None
        self.config = getattr(model, "config", None)  # its tensor-parallel plan (base_model_tp_plan) names layers.*
        whole = {id(q): name for name, q in model.named_parameters()}
        self.whole_names = {name: whole[id(q)] for name, q in self.named_parameters(remove_duplicate=False)}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = self.embed(x) if self.embed is not None else x
        if self.project_in is not None:
            hidden = self.project_in(hidden)
        if self.sequence_mesh is not None and self.embed is None:  # the previous stage's shard of the sequence
            hidden = DTensor.from_local(hidden, self.sequence_mesh, [Shard(1)], run_check=False)
        positions = torch.arange(hidden.shape[1], device=hidden.device).unsqueeze(0).expand(hidden.shape[0], -1)
        if self.positions is not None:
            hidden = hidden + (self.positions(None, 0, position_ids=positions) if self.positions_by_id else
                               self.positions(positions))
        if self.dropout is not None:
            hidden = self.dropout(hidden)
        extra: dict[str, Any] = {}
        if self.rotary is not None:
            extra = {"position_ids": positions, "position_embeddings": self.rotary(hidden, positions)}
        for layer in self.layers:
            out = layer(hidden, attention_mask=None, **extra)
            hidden = out[0] if isinstance(out, tuple) else out
        if self.lm_head is not None:
            if self.norm is not None:
                hidden = self.norm(hidden)
            if self.project_out is not None:
                hidden = self.project_out(hidden)
            hidden = self.lm_head(hidden)
        return hidden.to_local() if isinstance(hidden, DTensor) else hidden

    def model_name(self, name: str) -> str:
        """The whole model's name of this stage's parameter ``name``."""
        return self.whole_names[name]


def check_stages(model: Any, chunks: int, tokens: Any, length: int = 16) -> None:
    """Refuse, naming the model, a decoder that ``chunks`` :class:`DecoderStage` s would not compute as its own
    forward does: the stages run in turn (in eval mode, without gradients) on the first ``length`` tokens of the
    first sequence of ``tokens`` must give the logits of ``model(input_ids=...)`` within 1e-4 of their largest
    magnitude. A stage runs the layers alone, so a forward that does more than its layers (Gemma 2's soft-capped
    logits, Granite's embedding and logit multipliers, Cohere's logit scale) or layers called otherwise (Gemma 3's
    rotary embeddings by layer type) would train another model silently. ``ValueError`` then; nothing otherwise."""
    if not isinstance(tokens, torch.Tensor) or tokens.dim() != 2 or tokens.is_floating_point():
        raise ValueError("a decoder's pipeline takes token ids of shape (batch, sequence) (input_ids), got "
                         f"{type(tokens).__name__ if not isinstance(tokens, torch.Tensor) else tuple(tokens.shape)}")
    sample = tokens[:1, :length]
    modes = {module: module.training for module in model.modules()}
    model.eval()
    try:
        with torch.no_grad():
            out = model(input_ids=sample)
            expected = out.logits if hasattr(out, "logits") else out[0] if isinstance(out, tuple) else out
            hidden = sample
            try:
                for c, (first, end) in enumerate(stage_layers(decoder_layers(model), chunks)):
                    hidden = DecoderStage(model, first, end, c == 0, c == chunks - 1)(hidden)
            except Exception as error:  # noqa: BLE001 (any failure of the model's own layers, named)
                raise ValueError(f"model {type(model).__name__}: its layers cannot be run as pipeline stages "
                                 f"({type(error).__name__}: {str(error).splitlines()[0][:200]})") from None
    finally:
        for module, training in modes.items():
            module.train(training)
    scale = float(expected.abs().max()) if expected.numel() else 0.0
    if hidden.shape != expected.shape or not torch.allclose(hidden, expected, rtol=0.0, atol=1e-4 * max(1.0, scale)):
        difference = float((hidden - expected).abs().max()) if hidden.shape == expected.shape else float("inf")
        raise ValueError(f"model {type(model).__name__}: its forward does more than its layers (e.g. scaled or "
                         f"soft-capped logits), so pipeline stages cut from them would compute other logits (largest "
                         f"difference {difference:.3g} of {scale:.3g}); run its pipeline with run_pipeline, which "
                         "traces the model's own forward")


def shared_parameters(model: Any, stages: int) -> dict[str, tuple[int, ...]]:
    """The whole model's parameters that more than one of ``stages`` stages hold (a tied output layer: GPT-2's
    ``lm_head`` is ``wte``), each with the stages holding it, in order."""
    bounds = stage_layers(decoder_layers(model), stages)
    holders: dict[str, list[int]] = {}
    for s, (begin, end) in enumerate(bounds):
        stage = DecoderStage(model, begin, end, s == 0, s == stages - 1)
        for whole in set(stage.whole_names.values()):
            holders.setdefault(whole, []).append(s)
    return {name: tuple(held) for name, held in holders.items() if len(held) > 1}


__all__ = ["LAYOUTS", "DecoderLayout", "DecoderStage", "check_stages",
           "decoder_base", "decoder_layers", "decoder_layout", "is_decoder",
           "shared_parameters", "stage_layers"]
