"""Tensor-parallel plans of a model, as ``torch.distributed.tensor.parallel.parallelize_module`` takes them:
:func:`tensor_plan` (the model's own ``base_model_tp_plan``, or one derived from module names), :func:`sequence_plan`
(with Megatron-LM's sequence parallelism, for transformers' Llama family and a pipeline stage of one), and
:func:`check_splits` (what ``t`` ranks cannot divide, refused by name before any worker starts)."""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping
from typing import Any

import torch
from torch.distributed.tensor import Replicate, Shard
from torch.distributed.tensor.parallel import ColwiseParallel, PrepareModuleInput, RowwiseParallel, SequenceParallel

from .fused_layers import FUSED

COLUMN_NAMES = ("q_proj", "k_proj", "v_proj", "gate_proj", "up_proj", "query", "key", "value", "fc1", "w1", "w3",
                "c_fc")
ROW_NAMES = ("o_proj", "down_proj", "fc2", "w2", "c_proj")
UNSPLITTABLE = {FUSED: "holds the queries, keys and values in one matrix: a column split would mix them (GPT-2's: "
                       "linear_layers(model, t) lays it out for t ranks; run_parallel does so)"}


SEQUENCE_NAMES = ("embed_tokens", "input_layernorm", "post_attention_layernorm", "self_attn", "mlp", "norm", "lm_head")
"""The module names of a decoder (transformers' Llama family) whose sequence-parallel plan the runner builds."""


def sequence_plan(model: torch.nn.Module) -> dict[str, Any]:
    """The tensor plan of :func:`tensor_plan` with the norms split along the sequence (Megatron-LM's sequence
    parallelism, as torchtitan writes it for Llama): the embedding's output and each block's output projections
    leave the sequence sharded (``Shard(1)``), the norms run on their shard (``SequenceParallel``), the attention
    and the FFN gather it back (``PrepareModuleInput``), the output layer gathers the logits.

    ``model`` is a whole decoder of transformers' Llama family (:data:`SEQUENCE_NAMES`) or a pipeline stage of one
    (:class:`~placement_env.runtime.decoder_stages.DecoderStage`: its embedding ``embed``, on the first stage only;
    ``lm_head`` on the last only); a whole model needs both. ``ValueError`` naming what is missing otherwise."""
    modules = dict(model.named_modules())
    plan = tensor_plan(model)
    norms = [name for name in modules if name.endswith(".input_layernorm")]
    stage = type(model).__name__ == "DecoderStage"
    missing = [] if stage else [n for n in ("embed_tokens", "lm_head") if not any(m.endswith(n) for m in modules)]
    if not norms or missing:
        raise ValueError(f"sequence parallelism needs a decoder named as transformers' Llama family "
                         f"({', '.join(SEQUENCE_NAMES)}); model {type(model).__name__} lacks "
                         f"{missing[0] if missing else 'input_layernorm'}")
    prefix = norms[0][:norms[0].rindex("layers.")]  # "model." in a whole Llama, "" in a stage
    embedding = next((m for m in modules if m.endswith("embed_tokens") or (stage and m == "embed")), None)
    if embedding is not None:
        plan[embedding] = RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1), use_local_output=False)
    if prefix + "norm" in modules:
        plan[prefix + "norm"] = SequenceParallel()
    head = next((m for m in modules if m.endswith("lm_head")), None)
    if head is not None:
        plan[head] = ColwiseParallel(input_layouts=Shard(1), output_layouts=Replicate())
    for norm in norms:
        block = norm.rsplit(".", 1)[0]
        plan[norm] = SequenceParallel()
        plan[f"{block}.post_attention_layernorm"] = SequenceParallel()
        plan[f"{block}.self_attn"] = PrepareModuleInput(input_kwarg_layouts={"hidden_states": Shard(1)},
                                                        desired_input_kwarg_layouts={"hidden_states": Replicate()})
        plan[f"{block}.mlp"] = PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),))
        for name in (f"{block}.self_attn.o_proj", f"{block}.mlp.down_proj"):
            plan[name] = RowwiseParallel(output_layouts=Shard(1), use_local_output=False)
    return plan


def tensor_plan(model: torch.nn.Module) -> dict[str, Any]:
    """The tensor-parallel plan of ``model``: ``{module name: ColwiseParallel() or RowwiseParallel()}``, from its
    transformers ``base_model_tp_plan`` when it has one (names relative to its base model), else from module
    names (module docstring). Raises ``ValueError`` naming a module it cannot split, or a plan entry of a kind it
    does not run."""
    modules = dict(model.named_modules())
    config = getattr(model, "config", None)
    shipped = getattr(config, "base_model_tp_plan", None) if config is not None else None
    plan: dict[str, Any] = {}
    if shipped:
        prefix = getattr(model, "base_model_prefix", "")
        for pattern, kind in shipped.items():
            if kind not in ("colwise", "rowwise"):
                raise ValueError(f"the model's tensor-parallel plan splits {pattern!r} as {kind!r}; the runner runs "
                                 "colwise and rowwise splits")
            patterns = [pattern, *([f"{prefix}.{pattern}"] if prefix else [])]  # relative to the base model
            for name in modules:
                if any(fnmatch.fnmatchcase(name, p) for p in patterns):
                    plan[name] = ColwiseParallel() if kind == "colwise" else RowwiseParallel()
        if not plan:
            raise ValueError(f"the tensor-parallel plan of model {type(model).__name__} names no module it has")
        return plan
    for name, module in modules.items():
        leaf = name.rsplit(".", 1)[-1]
        if leaf in UNSPLITTABLE and getattr(module, "fused_ranks", None) is None:
            raise ValueError(f"module {name!r} cannot be split by tensor parallelism: it {UNSPLITTABLE[leaf]}")
        if type(module).__name__ == "Conv1D":
            raise ValueError(f"module {name!r} is a Conv1D, which torch's tensor parallelism does not split: "
                             "linear_layers(model, t) makes it an nn.Linear (run_parallel does so)")
        if isinstance(module, torch.nn.Linear) and (leaf in COLUMN_NAMES or leaf in UNSPLITTABLE):
            plan[name] = ColwiseParallel()
        elif isinstance(module, torch.nn.Linear) and leaf in ROW_NAMES:
            plan[name] = RowwiseParallel()
    if not plan:
        raise ValueError(f"model {type(model).__name__} has no module the runner knows how to split (by name: "
                         f"{', '.join(COLUMN_NAMES + ROW_NAMES)}), and no base_model_tp_plan")
    return plan


def check_splits(model: torch.nn.Module, plan: Mapping[str, Any], tensor: int) -> None:
    """Refuse, naming it, a module of ``plan`` whose split dimension (a column split's outputs, a row split's
    inputs) ``tensor`` does not divide, and attention heads (``num_attention_heads``, ``num_key_value_heads`` of
    the model's config) it does not divide."""
    config = getattr(model, "config", None)
    for field in ("num_attention_heads", "num_key_value_heads"):
        heads = getattr(config, field, None)
        if isinstance(heads, int) and heads % tensor:
            raise ValueError(f"{tensor} tensor ranks do not divide the model's {heads} heads ({field})")
    modules = dict(model.named_modules())
    for name, style in plan.items():
        module = modules.get(name)
        if not isinstance(module, torch.nn.Linear):
            continue
        size = module.out_features if isinstance(style, ColwiseParallel) else module.in_features
        if size % tensor:
            raise ValueError(f"module {name!r}: {tensor} tensor ranks do not divide its {size} "
                             f"{'outputs' if isinstance(style, ColwiseParallel) else 'inputs'}")


__all__ = ["COLUMN_NAMES", "ROW_NAMES", "SEQUENCE_NAMES", "UNSPLITTABLE", "check_splits", "sequence_plan",
           "tensor_plan"]
