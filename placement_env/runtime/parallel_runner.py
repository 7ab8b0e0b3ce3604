"""Tensor, sequence, sharded data and pipeline parallelism that run: :func:`run_parallel`, training steps of a
``tensor x pipeline x data`` :class:`~placement_env.parallelism.Parallelism` with torch's own modules.

Each of the ``t x S x d`` ranks is one process (local gloo workers, :mod:`placement_env.runtime.local_workers`) on
a ``(pp, dp, tp)`` ``DeviceMesh`` (tensor ranks neighbours, then data, then pipeline: Megatron-LM's order and the
simulator's ``tp-dp-pp``):

* pipeline ranks (a decoder of transformers' Llama family or GPT-2): the model cut by hand into S stages of
  consecutive layers (:class:`~placement_env.runtime.decoder_stages.DecoderStage`, the first with the embeddings,
  the last with the final norm and the output layer), each a ``PipelineStage`` run by torch's ``Schedule1F1B`` or
  ``ScheduleGPipe``; a tied output layer's copies on the first and last stages have their gradients summed;
* tensor parallelism by ``torch.distributed.tensor.parallel.parallelize_module``: ``ColwiseParallel`` and
  ``RowwiseParallel`` on the modules of the model's own tensor-parallel plan (``config.base_model_tp_plan``, as
  transformers ships it for Llama, Mistral, ...), or of one derived from module names (:func:`tensor_plan`:
  ``q_proj``, ``k_proj``, ``v_proj``, ``gate_proj``, ``up_proj``, ``query``, ``key``, ``value``, ``fc1``, ``c_fc``
  and GPT-2's fused ``c_attn`` split by columns; ``o_proj``, ``down_proj``, ``fc2``, ``c_proj`` by rows). GPT-2's
  ``Conv1D`` layers become ``nn.Linear`` first, its fused query-key-value layer laid out head-major for the ``t``
  ranks (:func:`~placement_env.runtime.fused_layers.linear_layers`; the parameters are reported in the model's own
  layout). A module it cannot split, or whose width or heads ``t`` does not divide, is refused by name;
* the data-parallel ranks each take ``1 / d`` of the batch: ZeRO 0 all-reduces the gradients (averaged), ZeRO 1
  shards the optimizer's states (``ZeroRedundancyOptimizer``), ZeRO 2 and 3 shard gradients and parameters with
  FSDP2 (``fully_shard`` each layer and the model, ``reshard_after_forward`` False for 2, True for 3);
* ``microbatches`` micro-batches a step accumulate their gradients (each loss divided by their count), then the
  optimizer steps.

What it reports (:class:`ParallelRun`): each step's seconds (the slowest rank's, from a barrier), the losses, each
rank's parameter bytes held (what the sharding leaves it), and the parameters after the steps, whole, by name.
With ``sequence_parallel``, the norms of a Llama-family decoder run on their shard of the sequence
(:func:`sequence_plan`). Not run here, each refused by name: a pipeline of another model (run it with
:func:`~placement_env.runtime.pipeline_runner.run_pipeline`), a pipeline under the interleaved or zero-bubble
schedules or with sequence parallelism, recomputation (``run_pipeline`` runs those on stages x replicas).
"""

from __future__ import annotations

import copy
import fnmatch
import inspect
import io
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import cloudpickle
import numpy as np
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe
from torch.distributed.tensor import DTensor, Replicate, Shard
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    PrepareModuleInput,
    RowwiseParallel,
    SequenceParallel,
    parallelize_module,
)

from placement_env.parallelism import Parallelism

from .decoder_stages import DecoderStage, decoder_layers, is_decoder, shared_parameters, stage_layers
from .fused_layers import FUSED, conv1d_modules, linear_layers
from .local_workers import check_local_workers, heartbeat, run_on_local_workers
from .losses import sum_of_outputs
from .portable import portable

COLUMN_NAMES = ("q_proj", "k_proj", "v_proj", "gate_proj", "up_proj", "query", "key", "value", "fc1", "w1", "w3",
                "c_fc")
ROW_NAMES = ("o_proj", "down_proj", "fc2", "w2", "c_proj")
UNSPLITTABLE = {FUSED: "holds the queries, keys and values in one matrix: a column split would mix them (GPT-2's: "
                       "linear_layers(model, t) lays it out for t ranks; run_parallel does so)"}


@dataclass(frozen=True)
class ParallelRun:
    """What :func:`run_parallel` measured: ``steps`` (seconds each, the slowest rank's), ``seconds`` (their median),
    ``losses`` (each step's mean over the replicas), ``held_bytes`` (per rank, the parameter bytes it holds) and
    ``parameters`` (whole, by name, after the steps)."""

    steps: list[float]
    losses: list[float]
    held_bytes: list[float]
    parameters: dict[str, np.ndarray]

    @property
    def seconds(self) -> float:
        return float(statistics.median(self.steps))


SEQUENCE_NAMES = ("embed_tokens", "input_layernorm", "post_attention_layernorm", "self_attn", "mlp", "norm", "lm_head")
"""The module names of a decoder (transformers' Llama family) whose sequence-parallel plan the runner builds."""


def sequence_plan(model: torch.nn.Module) -> dict[str, Any]:
    """The tensor plan of :func:`tensor_plan` with the norms split along the sequence (Megatron-LM's sequence
    parallelism, as torchtitan writes it for Llama): the embedding's output and each block's output projections
    leave the sequence sharded (``Shard(1)``), the norms run on their shard (``SequenceParallel``), the attention
    and the FFN gather it back (``PrepareModuleInput``), the output layer gathers the logits. Needs the module names
    of transformers' Llama family (:data:`SEQUENCE_NAMES`); ``ValueError`` naming what is missing otherwise."""
    modules = dict(model.named_modules())
    plan = tensor_plan(model)
    norms = [name for name in modules if name.endswith(".input_layernorm")]
    missing = [n for n in ("embed_tokens", "lm_head") if not any(m.endswith(n) for m in modules)]
    if not norms or missing:
        raise ValueError(f"sequence parallelism needs a decoder named as transformers' Llama family "
                         f"({', '.join(SEQUENCE_NAMES)}); model {type(model).__name__} lacks "
                         f"{missing[0] if missing else 'input_layernorm'}")
    embedding = next(m for m in modules if m.endswith("embed_tokens"))
    plan[embedding] = RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1), use_local_output=False)
    final = embedding.rsplit(".", 1)[0] + ".norm" if "." in embedding else "norm"
    if final in modules:
        plan[final] = SequenceParallel()
    plan[next(m for m in modules if m.endswith("lm_head"))] = ColwiseParallel(input_layouts=Shard(1),
                                                                            output_layouts=Replicate())
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


@dataclass(frozen=True)
class _Job:
    model: bytes
    args: tuple
    kwargs: dict[str, Any]
    targets: Any
    pipeline: int
    schedule: str
    tensor: int
    sequence_parallel: bool
    data: int
    microbatches: int
    zero: int
    steps: int
    loss_fn: bytes | None
    optimizer: bytes | None


def run_parallel(model: torch.nn.Module, example_inputs: Sequence[Any] | Any, parallelism: Parallelism, *,
                 steps: int = 1, loss_fn: Callable[[Any, Any], Any] | None = None, targets: Any = None,
                 optimizer: Callable[[list], Any] | None = None,
                 example_kwargs: Mapping[str, Any] | None = None) -> ParallelRun:
    """Run ``steps`` training steps of ``model`` as ``parallelism`` says (module docstring) on ``t x d`` local
    workers.

    Args:
        model: an ``nn.Module`` (pickled to the workers: its class must be importable).
        example_inputs, example_kwargs: one batch (tensors cut along their first dimension: ``1 / d`` a replica,
            then ``microbatches`` micro-batches).
        parallelism: ``tensor`` x ``data`` ranks, ``microbatches``, ``zero``; ``pipeline`` 1.
        loss_fn: ``loss_fn(output, target)`` per micro-batch (default: the sum of the output); ``targets``, cut as
            the inputs. ``optimizer``: ``optimizer(parameters)``, a lambda or a closure allowed (default: no
            update). Both travel by cloudpickle.

    Raises:
        ValueError: a pipeline, recomputation (run pipelines and recomputation with ``run_pipeline``), sequence
            parallelism on a model not named as a Llama, ZeRO 1 with tensor parallelism, a batch that
            ``d x microbatches`` does not divide, a module tensor parallelism cannot split, more workers than the
            machine runs.
        RuntimeError: a rank failed (its error) or died.
    """
    if not isinstance(parallelism, Parallelism):
        raise TypeError(f"parallelism must be a Parallelism, got {type(parallelism).__name__}")
    p = parallelism
    if p.pipeline > 1:
        if not is_decoder(model):
            raise ValueError(f"a pipeline of {p.pipeline} ranks: run_parallel cuts a decoder of transformers' Llama "
                             f"family or GPT-2 into stages (model.layers or transformer.h, their embeddings, final "
                             f"norm and lm_head); model {type(model).__name__} is not one: run its pipeline with "
                             "run_pipeline")
        if p.schedule not in ("1f1b", "gpipe") or p.sequence_parallel:
            raise ValueError(f"a pipeline with tensor or sharded data parallelism runs 1f1b or gpipe without sequence "
                             f"parallelism here; the plan has {p.schedule}"
                             + (" with sequence parallelism" if p.sequence_parallel else ""))
        layers = decoder_layers(model)
        if p.pipeline > layers:
            raise ValueError(f"{p.pipeline} pipeline ranks for {layers} layers")
    if p.recompute != "none":
        raise ValueError(f"recompute {p.recompute!r}: run_parallel does not recompute (run_pipeline does)")
    if p.zero == 1 and p.tensor > 1:
        raise ValueError("ZeRO 1 with tensor parallelism: torch's ZeroRedundancyOptimizer takes no DTensor; use ZeRO "
                         "2 (FSDP2) or 0")
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps must be an integer >= 1, got {steps!r}")
    args = (example_inputs,) if isinstance(example_inputs, torch.Tensor) else tuple(example_inputs)
    kwargs = dict(example_kwargs or {})
    batch = next((t.shape[0] for t in [*args, *kwargs.values()] if isinstance(t, torch.Tensor) and t.dim() > 0),
                 None)
    if batch is not None:
        p.check_batch(batch)
    if p.tensor > 1:  # a module it cannot split is refused here, before any worker starts
        probe = model
        if conv1d_modules(model):
            probe = copy.deepcopy(model)
            linear_layers(probe, p.tensor)
        check_splits(probe, sequence_plan(probe) if p.sequence_parallel else tensor_plan(probe), p.tensor)
    check_local_workers(p.devices)
    buffer = io.BytesIO()
    torch.save(model, buffer)
    job = _Job(buffer.getvalue(), args, kwargs, targets, p.pipeline, p.schedule, p.tensor, p.sequence_parallel,
               p.data, p.microbatches,
               p.zero, steps, portable("loss_fn", loss_fn), portable("optimizer", optimizer))
    reports = run_on_local_workers(p.devices, run_rank, job)
    steps_of = np.max([r["steps"] for r in reports], axis=0).tolist()
    losses = np.mean([r["losses"] for r in reports if r["last"]], axis=0).tolist()
    merged: dict[str, np.ndarray] = {}
    for report in reports:
        merged.update(report["parameters"])
    return ParallelRun(steps_of, losses, [r["held"] for r in reports], merged)


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


def _tied_groups(shared: Mapping[str, tuple[int, ...]], module: torch.nn.Module, rank: int, pipeline: int,
                 data: int, tensor: int) -> list[tuple[str, Any]]:
    """``(name in module, process group)`` of each parameter this rank's stage shares with other stages
    (:func:`~placement_env.runtime.decoder_stages.shared_parameters`): the group of the ranks holding its copies
    at this rank's data and tensor coordinates. Every rank makes every group (as ``new_group`` requires)."""
    mine: list[tuple[str, Any]] = []
    names = getattr(module, "whole_names", {})
    for whole, stages in sorted(shared.items()):
        for replica in range(data):
            for k in range(tensor):
                ranks = [stage * data * tensor + replica * tensor + k for stage in stages]
                group = dist.new_group(ranks)
                if rank in ranks:
                    mine += [(local, group) for local, held in names.items() if held == whole]
    return mine


def _share(value: Any, index: int, parts: int) -> Any:
    return value.chunk(parts)[index] if isinstance(value, torch.Tensor) and value.dim() > 0 else value


def run_rank(rank: int, world: int, job: _Job) -> dict:
    """Rank ``rank``'s part of :func:`run_parallel` in an initialised gloo group of ``world`` processes: pipeline
    rank ``s``, replica ``r`` and tensor rank ``rank mod t`` of the ``(pp, dp, tp)`` mesh."""
    model = torch.load(io.BytesIO(job.model), weights_only=False)
    layout = linear_layers(model, job.tensor) if job.tensor > 1 else {}  # GPT-2's Conv1D layers, made splittable
    shared = shared_parameters(model, job.pipeline) if job.pipeline > 1 else {}
    mesh = init_device_mesh("cpu", (job.pipeline, job.data, job.tensor), mesh_dim_names=("pp", "dp", "tp"))
    s, replica = rank // (job.data * job.tensor), (rank // job.tensor) % job.data
    first, last = s == 0, s == job.pipeline - 1
    if job.pipeline > 1:
        begin, end = stage_layers(decoder_layers(model), job.pipeline)[s]
        module: torch.nn.Module = DecoderStage(model, begin, end, first, last)
    else:
        module = model
    tied = _tied_groups(shared, module, rank, job.pipeline, job.data, job.tensor)
    if job.tensor > 1:
        plan = sequence_plan(module) if job.sequence_parallel else tensor_plan(module)
        parallelize_module(module, mesh["tp"], plan)
    if job.zero >= 2:
        layers = [m for name, m in module.named_modules() if "." in name and name.rsplit(".", 1)[-1].isdigit()]
        for layer in layers:
            fully_shard(layer, mesh=mesh["dp"], reshard_after_forward=job.zero == 3)
        fully_shard(module, mesh=mesh["dp"], reshard_after_forward=job.zero == 3)
    parameters = [q for q in module.parameters() if q.requires_grad]
    optimizer = None
    if job.optimizer is not None and parameters:
        factory = cloudpickle.loads(job.optimizer)
        if job.zero == 1 and job.data > 1:
            probe = factory([torch.nn.Parameter(torch.zeros(1))])  # the user's optimizer: its class and settings
            accepted = inspect.signature(type(probe).__init__).parameters
            settings = {k: v for k, v in probe.defaults.items() if k in accepted}
            optimizer = ZeroRedundancyOptimizer(parameters, optimizer_class=type(probe),
                                                process_group=mesh["dp"].get_group(), **settings)
        else:
            optimizer = factory(parameters)
    loss_fn = cloudpickle.loads(job.loss_fn) if job.loss_fn is not None else sum_of_outputs
    args = [_share(a, replica, job.data) for a in job.args]
    kwargs = {k: _share(v, replica, job.data) for k, v in job.kwargs.items()}
    targets = _share(job.targets, replica, job.data)
    m = job.microbatches
    schedule = None
    if job.pipeline > 1:
        stage = PipelineStage(module, s, job.pipeline, torch.device("cpu"), group=mesh["pp"].get_group())
        kind = ScheduleGPipe if job.schedule == "gpipe" else Schedule1F1B
        schedule = kind(stage, m, loss_fn=loss_fn)
    times, losses = [], []
    for k in range(job.steps):
        heartbeat(f"rank {rank} (stage {s}, replica {replica}, tensor rank {rank % job.tensor}): step {k + 1} of "
                  f"{job.steps}")
        dist.barrier()
        t0 = time.perf_counter()
        total = float("nan")
        if schedule is not None:  # the pipeline's schedule runs the micro-batches, each loss over m
            per: list[Any] = []
            tokens = kwargs.get("input_ids", args[0] if args else None)
            if first:
                schedule.step(tokens)
            elif last:
                schedule.step(target=targets, losses=per)
            else:
                schedule.step()
            if last:
                total = float(torch.stack([x.detach().float() for x in per]).mean())
        else:
            total = 0.0
            for j in range(m):
                output = module(*[_share(a, j, m) for a in args], **{n: _share(v, j, m) for n, v in kwargs.items()})
                loss = loss_fn(output, _share(targets, j, m)) / m
                loss.backward()
                total += float(loss.detach().float())
        if job.zero <= 1 and job.data > 1:  # plain replicas: their gradients averaged over the data ranks
            for q in parameters:
                if q.grad is not None:
                    local = q.grad.to_local() if isinstance(q.grad, DTensor) else q.grad
                    dist.all_reduce(local, group=mesh["dp"].get_group())
                    local /= job.data
        held_here = dict(module.named_parameters())
        for local_name, group in tied:  # a tied parameter's copies: their gradients summed over their stages
            grad = held_here[local_name].grad
            if grad is not None:
                dist.all_reduce(grad.to_local() if isinstance(grad, DTensor) else grad, group=group)
        if optimizer is not None:
            optimizer.step()
            optimizer.zero_grad()
        else:
            module.zero_grad()
        times.append(time.perf_counter() - t0)
        losses.append(total)
    held = float(sum((q.to_local() if isinstance(q, DTensor) else q).numel() * q.element_size()
                     for q in module.parameters()))
    name = module.model_name if isinstance(module, DecoderStage) else (lambda n: n)
    whole = {}
    for n, q in module.named_parameters():  # every rank gathers (a collective), replica 0's reports
        value = (q.full_tensor() if isinstance(q, DTensor) else q).detach().float().numpy().copy()
        whole[name(n)] = layout[name(n)](value) if name(n) in layout else value  # in the model's own layout
    keep = replica == 0 and rank % job.tensor == 0
    return {"steps": times, "losses": losses, "held": held, "parameters": whole if keep else {}, "last": last}


__all__ = ["ParallelRun", "run_parallel", "sequence_plan", "tensor_plan"]
