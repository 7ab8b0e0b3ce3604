"""Tensor-parallel plans of a model, as ``torch.distributed.tensor.parallel.parallelize_module`` takes them:
:func:`tensor_plan` (the model's own ``base_model_tp_plan``, or one derived from module names), :func:`sequence_plan`
(with Megatron-LM's sequence parallelism, for transformers' Llama family and GPT-2 and a pipeline stage of one), and
:func:`check_splits` (what ``t`` ranks cannot divide, refused by name before any worker starts)."""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping
from functools import partial
from typing import Any

import torch
from torch.distributed.tensor import Replicate, Shard
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    PrepareModuleInput,
    PrepareModuleInputOutput,
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


SHIPPED_STYLES: dict[str, Any] = {
    "colwise": ColwiseParallel, "rowwise": RowwiseParallel,
    "colwise_gather_output": partial(ColwiseParallel, output_layouts=Replicate()),
    "rowwise_split_input": partial(RowwiseParallel, input_layouts=Replicate()),
    "embedding_rowwise": partial(RowwiseParallel, input_layouts=Replicate()),
}
"""The kinds of a transformers ``base_model_tp_plan`` the runner runs, each as torch's style: a column split (its
outputs left split, or gathered), a row split (its inputs split, or whole and split here), an embedding split by
its vocabulary rows (GPT-NeoX's, GPT-J's)."""
SUMMED = "replicated_with_grad_allreduce"
"""The plan's kind of a module kept whole on every tensor rank, its gradients summed
(:func:`summed_gradient_modules`)."""

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
        if f"{block}.mlp.{mlp_out}" in plan:
            plan[f"{block}.mlp"] = PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),))
        else:  # an FFN the plan keeps whole (Mixtral's experts): the whole sequence in, each rank's shard of it out
            plan[f"{block}.mlp"] = PrepareModuleInputOutput(
                input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),), use_local_input=True,
                output_layouts=(Replicate(),), desired_output_layouts=(Shard(1),), use_local_output=False)
        for name in (f"{block}.{attention}.{attention_out}", f"{block}.mlp.{mlp_out}"):
            if name in plan:  # its inputs as the tensor plan splits them (or whole, split here), its outputs scattered
                inputs = plan[name].input_layouts[0] if isinstance(plan[name], RowwiseParallel) else Shard(-1)
                plan[name] = RowwiseParallel(input_layouts=inputs, output_layouts=Shard(1), use_local_output=False)
    absent = [name for name in plan if name not in modules]
    if absent:  # GPT-J's block has one norm (its attention and FFN side by side): no sequence plan fits it
        raise ValueError(f"sequence parallelism: model {type(model).__name__} has no module {absent[0]!r}, which "
                         "the sequence plan of its layout splits along the sequence (a block of a norm before its "
                         "attention and one before its FFN)")
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
        named = _shipped_modules(model, shipped)
        for name, kind in named.items():
            if kind != SUMMED:
                plan[name] = SHIPPED_STYLES[kind]()
        if not named:
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


def summed_gradient_modules(model: torch.nn.Module) -> list[str]:
    """The modules the model's own tensor-parallel plan keeps whole on every tensor rank with their gradients summed
    over the ranks (``replicated_with_grad_allreduce``: Qwen 3's per-head query and key norms, which each rank runs
    on its own heads); ``[]`` without such a plan."""
    config = getattr(model, "config", None)
    shipped = getattr(config, "base_model_tp_plan", None) if config is not None else None
    return [name for name, kind in _shipped_modules(model, shipped or {}).items() if kind == SUMMED]


def _shipped_modules(model: torch.nn.Module, shipped: Mapping[str, str]) -> dict[str, str]:
    """``{module name: kind}`` of the modules of ``model`` that a transformers ``base_model_tp_plan`` names (its
    patterns relative to the base model); ``ValueError`` naming a kind not in :data:`SHIPPED_STYLES` or
    :data:`SUMMED`."""
    modules = dict(model.named_modules())
    prefix = getattr(model, "base_model_prefix", "")
    named: dict[str, str] = {}
    for pattern, kind in shipped.items():
        if kind not in SHIPPED_STYLES and kind != SUMMED:
            raise ValueError(f"the model's tensor-parallel plan splits {pattern!r} as {kind!r}; the runner runs "
                             f"{', '.join([*SHIPPED_STYLES, SUMMED])}")
        patterns = [pattern, *([f"{prefix}.{pattern}"] if prefix else [])]
        named.update({name: kind for name in modules if any(fnmatch.fnmatchcase(name, p) for p in patterns)})
    return named


def _splits_outputs(style: Any) -> bool:
    """Whether ``style`` leaves a column-split layer's outputs split (a ``ColwiseParallel`` not gathering them)."""
    return isinstance(style, ColwiseParallel) and not isinstance(style.output_layouts[0], Replicate)


def local_heads(model: torch.nn.Module, tensor: int, plan: Mapping[str, Any] | None = None) -> int:
    """After ``parallelize_module`` with ``plan`` (default :func:`tensor_plan`): each attention module whose queries
    are split by columns and stay split (a ``q_proj`` or ``query`` linear layer; not one whose outputs the plan
    gathers, ``colwise_gather_output``) and that counts its heads (an integer ``num_heads``) counts its tensor
    rank's, ``1 / tensor`` of them, as Megatron-LM's attention does. OPT's attention reshapes its queries to
    ``num_heads`` heads, so a whole count would silently fold the sequence into heads; models that reshape by
    ``head_dim`` alone (the Llama family, GPT-2) are not changed in what they compute. Returns how many modules it
    changed."""
    plan = tensor_plan(model) if plan is None else plan
    names = {id(module): name for name, module in model.named_modules()}
    changed = 0
    for module in model.modules():
        queries = getattr(module, "q_proj", None) or getattr(module, "query", None)
        heads = getattr(module, "num_heads", None)
        if not _splits_outputs(plan.get(names.get(id(queries), ""))):
            continue
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
        columns = isinstance(style, ColwiseParallel)
        if isinstance(module, torch.nn.Linear):
            size, what = (module.out_features, "outputs") if columns else (module.in_features, "inputs")
        elif isinstance(module, torch.nn.Embedding) and isinstance(style, (ColwiseParallel, RowwiseParallel)):
            size, what = (module.embedding_dim, "dimensions") if columns else (module.num_embeddings, "rows")
        else:
            continue
        if size % tensor:
            raise ValueError(f"module {name!r}: {tensor} tensor ranks do not divide its {size} {what}")
    check_ties(model, plan)


def _weight_split(module: torch.nn.Module | None, style: Any) -> str:
    """How ``style`` lays out ``module``'s weight on the tensor ranks: ``"whole"``, ``"rows"`` (``Shard(0)``) or
    ``"columns"`` (``Shard(1)``)."""
    if not isinstance(style, (ColwiseParallel, RowwiseParallel)):
        return "whole"
    embedding = isinstance(module, torch.nn.Embedding)
    return "rows" if isinstance(style, ColwiseParallel) != embedding else "columns"


def check_ties(model: torch.nn.Module, plan: Mapping[str, Any]) -> list[list[str]]:
    """The tied parameters of ``model`` that ``plan`` splits (each a list of the names it goes by, e.g. a Gemma's
    ``model.embed_tokens.weight`` and ``lm_head.weight``): ``parallelize_module`` gives each module its own copy, so
    :func:`retie` makes them one again after it. ``ValueError`` naming a tied parameter whose holders the plan lays
    out differently (one split, another whole), which no copy could serve."""
    modules = dict(model.named_modules())
    holders: dict[int, list[str]] = {}
    for name, parameter in model.named_parameters(remove_duplicate=False):
        holders.setdefault(id(parameter), []).append(name)
    ties = []
    for names in holders.values():
        owners = [n.rsplit(".", 1)[0] if "." in n else "" for n in names]
        splits = {_weight_split(modules.get(owner), plan.get(owner)) for owner in owners}
        if len(names) > 1 and splits != {"whole"}:
            if len(splits) > 1:
                raise ValueError(f"the tied parameter {' = '.join(names)} would be laid out as "
                                 f"{' and '.join(sorted(splits))} by the tensor plan: tied weights need one layout")
            ties.append(names)
    return ties


def retie(model: torch.nn.Module, ties: list[list[str]]) -> None:
    """After ``parallelize_module``: each tied parameter of ``ties`` (:func:`check_ties`) one parameter again, the
    first name's (the copies were laid out alike, so its shard is each copy's)."""
    for names in ties:
        first = model.get_parameter(names[0])
        for name in names[1:]:
            owner, _, leaf = name.rpartition(".")
            setattr(model.get_submodule(owner), leaf, first)


__all__ = ["COLUMN_NAMES", "GPT2_SEQUENCE_NAMES", "ROW_NAMES", "SEQUENCE_NAMES", "SHIPPED_STYLES", "SUMMED",
           "UNSPLITTABLE", "check_splits", "check_ties", "local_heads", "retie", "sequence_plan",
           "summed_gradient_modules", "tensor_plan"]
