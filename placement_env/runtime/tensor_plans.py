"""Tensor-parallel plans of a model, as ``torch.distributed.tensor.parallel.parallelize_module`` takes them:
:func:`tensor_plan` (the model's own ``base_model_tp_plan``, or one derived from module names), :func:`sequence_plan`
(with Megatron-LM's sequence parallelism, for transformers' Llama family and GPT-2 and a pipeline stage of one), and
:func:`check_splits` (what ``t`` ranks cannot divide, refused by name before any worker starts)."""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping
from typing import Any

import torch
from torch.distributed.tensor import Replicate, Shard
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    PrepareModuleInput,
    PrepareModuleOutput,
    RowwiseParallel,
    SequenceParallel,
)

from .fused_layers import FUSED

COLUMN_NAMES = ("q_proj", "k_proj", "v_proj", "gate_proj", "up_proj", "query", "key", "value", "fc1", "w1", "w3",
                "c_fc")
ROW_NAMES = ("o_proj", "down_proj", "fc2", "w2", "c_proj", "out_proj")
"""Split by rows (their inputs split by columns before them); ``out_proj`` only beside a ``q_proj`` linear layer
(OPT's attention: an ``nn.MultiheadAttention``'s output projection reads its own unsplit attention)."""
UNSPLITTABLE = {FUSED: "holds the queries, keys and values in one matrix: a column split would mix them (GPT-2's: "
                       "linear_layers(model, t) lays it out for t ranks; run_parallel does so)"}


SEQUENCE_NAMES = ("embed_tokens", "input_layernorm", "post_attention_layernorm", "self_attn", "mlp", "norm", "lm_head")
"""The module names of a decoder (transformers' Llama family) whose sequence-parallel plan the runner builds."""

GPT2_SEQUENCE_NAMES = ("drop", "ln_1", "attn", "ln_2", "mlp", "ln_f", "lm_head")
"""The same for GPT-2 (transformers' ``GPT2LMHeadModel``: learned positions added before the sequence is split)."""


def sequence_plan(model: torch.nn.Module) -> dict[str, Any]:
    """The tensor plan of :func:`tensor_plan` with the norms split along the sequence (Megatron-LM's sequence
    parallelism, as torchtitan writes it for Llama): the embedding's output and each block's output projections
    leave the sequence sharded (``Shard(1)``), the norms run on their shard (``SequenceParallel``), the attention
    and the FFN gather it back (``PrepareModuleInput``), the output layer gathers the logits.

    ``model`` is a whole decoder of transformers' Llama family (:data:`SEQUENCE_NAMES`) or GPT-2
    (:data:`GPT2_SEQUENCE_NAMES`), or a pipeline stage of one
    (:class:`~placement_env.runtime.decoder_stages.DecoderStage`: its embedding ``embed`` and GPT-2's ``dropout``,
    on the first stage only; ``lm_head`` on the last only); a whole model needs both ends. GPT-2's token and
    position embeddings stay whole (its output layer is tied to the token embedding): the sum leaves the dropout
    after them as its shard of the sequence, and the output layer, whole too, takes the gathered sequence.
    ``ValueError`` naming what is missing otherwise."""
    modules = dict(model.named_modules())
    plan = tensor_plan(model)
    stage = type(model).__name__ == "DecoderStage"
    llama = [name for name in modules if name.endswith(".input_layernorm")]
    gpt2 = [name for name in modules if name.endswith(".ln_1")]
    ends = ("embed_tokens", "lm_head") if llama or not gpt2 else ("drop", "lm_head")
    missing = [] if stage else [n for n in ends if not any(m.endswith(n) for m in modules)]
    if not (llama or gpt2) or missing:
        raise ValueError(f"sequence parallelism needs a decoder named as transformers' Llama family "
                         f"({', '.join(SEQUENCE_NAMES)}) or GPT-2 ({', '.join(GPT2_SEQUENCE_NAMES)}); model "
                         f"{type(model).__name__} lacks {missing[0] if missing else 'input_layernorm'}")
    head = next((m for m in modules if m.endswith("lm_head")), None)
    if llama:
        prefix = llama[0][:llama[0].rindex("layers.")]  # "model." in a whole Llama, "" in a stage
        embedding = next((m for m in modules if m.endswith("embed_tokens") or (stage and m == "embed")), None)
        if embedding is not None:
            plan[embedding] = RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1),
                                              use_local_output=False)
        final = prefix + "norm"
        if head is not None:
            plan[head] = ColwiseParallel(input_layouts=Shard(1), output_layouts=Replicate())
        blocks = [(norm.rsplit(".", 1)[0], "input_layernorm", "post_attention_layernorm", "self_attn", "o_proj",
                   "down_proj") for norm in llama]
    else:
        dropout = next((m for m in modules if m.endswith(".drop") or m == "drop" or (stage and m == "dropout")),
                       None)
        if dropout is not None:
            plan[dropout] = PrepareModuleOutput(output_layouts=Replicate(), desired_output_layouts=Shard(1),
                                                use_local_output=False)
        final = "norm" if stage else gpt2[0][:gpt2[0].rindex("h.")] + "ln_f"  # "transformer.ln_f" when whole
        if head is not None:
            plan[head] = PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),),
                                            use_local_output=True)
        blocks = [(norm.rsplit(".", 1)[0], "ln_1", "ln_2", "attn", "c_proj", "c_proj") for norm in gpt2]
    if final in modules:
        plan[final] = SequenceParallel()
    for block, first_norm, second_norm, attention, attention_out, mlp_out in blocks:
        plan[f"{block}.{first_norm}"] = SequenceParallel()
        plan[f"{block}.{second_norm}"] = SequenceParallel()
        plan[f"{block}.{attention}"] = (
            PrepareModuleInput(input_kwarg_layouts={"hidden_states": Shard(1)},
                               desired_input_kwarg_layouts={"hidden_states": Replicate()}) if llama else
            PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)))
        plan[f"{block}.mlp"] = PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),))
        for name in (f"{block}.{attention}.{attention_out}", f"{block}.mlp.{mlp_out}"):
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
            parent = modules[name.rsplit(".", 1)[0]] if "." in name else model
            if leaf != "out_proj" or isinstance(getattr(parent, "q_proj", None), torch.nn.Linear):
                plan[name] = RowwiseParallel()
    if not plan:
        raise ValueError(f"model {type(model).__name__} has no module the runner knows how to split (by name: "
                         f"{', '.join(COLUMN_NAMES + ROW_NAMES)}), and no base_model_tp_plan")
    return plan


def local_heads(model: torch.nn.Module, tensor: int) -> int:
    """After ``parallelize_module``: each attention module whose queries are split by columns (a ``q_proj`` or
    ``query`` linear layer) and that counts its heads (an integer ``num_heads``) counts its tensor rank's, ``1 /
    tensor`` of them, as Megatron-LM's attention does. OPT's attention reshapes its queries to ``num_heads`` heads,
    so a whole count would silently fold the sequence into heads; models that reshape by ``head_dim`` alone (the
    Llama family, GPT-2) are not changed in what they compute. Returns how many modules it changed."""
    changed = 0
    for module in model.modules():
        queries = getattr(module, "q_proj", None) or getattr(module, "query", None)
        heads = getattr(module, "num_heads", None)
        if isinstance(queries, torch.nn.Linear) and isinstance(heads, int) and not isinstance(heads, bool):
            if heads % tensor:
                raise ValueError(f"{tensor} tensor ranks do not divide the {heads} heads of {type(module).__name__}")
            setattr(module, "num_heads", heads // tensor)  # noqa: B010 (an int attribute of a Module)
            changed += 1
    return changed


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


__all__ = ["COLUMN_NAMES", "GPT2_SEQUENCE_NAMES", "ROW_NAMES", "SEQUENCE_NAMES", "UNSPLITTABLE", "check_splits",
           "local_heads", "sequence_plan", "tensor_plan"]
