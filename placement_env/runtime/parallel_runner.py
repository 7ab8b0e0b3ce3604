"""Tensor, sequence, sharded data and pipeline parallelism that run: :func:`run_parallel`, training steps of a
``tensor x pipeline x data`` :class:`~placement_env.parallelism.Parallelism` with torch's own modules.

Each of the ``t x S x d`` ranks is one process on a ``(pp, dp, tp)`` ``DeviceMesh``: local gloo workers
(:mod:`placement_env.runtime.local_workers`), one process per CUDA device (``devices="cuda"``, nccl, rank ``r`` on
``cuda:r``), or, under ``torchrun`` (``RANK`` and ``WORLD_SIZE`` set), this process as rank ``RANK`` (gloo, or nccl
on ``cuda:LOCAL_RANK`` with ``devices="cuda"``). Its ranks: tensor ranks neighbours, then data, then pipeline
(Megatron-LM's order and the simulator's ``tp-dp-pp``):

* pipeline ranks (a decoder of a layout of :data:`~placement_env.runtime.decoder_stages.LAYOUTS`: transformers'
  Llama family, GPT-2, OPT, GPT-NeoX, GPT-J, Phi, Falcon; its stages checked against its own forward before any
  worker starts, :func:`~placement_env.runtime.decoder_stages.check_stages`): the model cut by hand into ``S x v``
  chunks of consecutive layers (:class:`~placement_env.runtime.decoder_stages.DecoderStage`, the first with the
  embeddings, the last with the final norm and the output layer), chunk ``c`` on pipeline rank ``c mod S``, each a
  ``PipelineStage`` run by the plan's schedule (torch's ``Schedule1F1B``, ``ScheduleGPipe``,
  ``ScheduleInterleaved1F1B``, ``ScheduleInterleavedZeroBubble``: :data:`~placement_env.parallelism.SCHEDULES`);
  a tied output layer's copies on the first and last chunks have their gradients summed; with sequence
  parallelism a stage sends its tensor rank's shard of the sequence;
* tensor parallelism by ``torch.distributed.tensor.parallel.parallelize_module``: ``ColwiseParallel`` and
  ``RowwiseParallel`` on the modules of the model's own tensor-parallel plan (``config.base_model_tp_plan``, as
  transformers ships it for Llama, Mistral, Qwen, Gemma, Phi-3, GPT-NeoX, GPT-J, ...: its ``colwise``, ``rowwise``,
  ``colwise_gather_output``, ``rowwise_split_input`` and ``embedding_rowwise`` entries, and
  ``replicated_with_grad_allreduce`` modules kept whole with their gradients summed over the tensor ranks:
  :data:`~placement_env.runtime.tensor_plans.SHIPPED_STYLES`; a tied embedding and output layer that the plan
  splits alike stay one parameter), or of one derived from module names (:func:`tensor_plan`:
  ``q_proj``, ``k_proj``, ``v_proj``, ``gate_proj``, ``up_proj``, ``query``, ``key``, ``value``, ``fc1``, ``c_fc``
  and GPT-2's fused ``c_attn`` split by columns; ``o_proj``, ``down_proj``, ``fc2``, ``c_proj`` by rows). GPT-2's
  ``Conv1D`` layers become ``nn.Linear`` first, its fused query-key-value layer laid out head-major for the ``t``
  ranks (:func:`~placement_env.runtime.fused_layers.linear_layers`; the parameters are reported in the model's own
  layout). A module it cannot split, or whose width or heads ``t`` does not divide, is refused by name;
* the data-parallel ranks each take ``1 / d`` of the batch: ZeRO 0 all-reduces the gradients (averaged, in buckets
  of :data:`BUCKET_BYTES` as DDP packs them), ZeRO 1
  shards the optimizer's states (``ZeroRedundancyOptimizer``, over each tensor rank's local shards: it takes no
  DTensor, so it steps plain parameters sharing their storage), ZeRO 2 and 3 shard gradients and parameters with
  FSDP2 (``fully_shard`` each layer and the model, ``reshard_after_forward`` False for 2, True for 3);
* ``microbatches`` micro-batches a step accumulate their gradients (each loss divided by their count), then the
  optimizer steps.

* recomputation (``full`` or ``selective``) by ``torch.utils.checkpoint`` on each layer
  (:func:`~placement_env.runtime.recomputation.recompute_layers`), after tensor parallelism and before FSDP.

* ``precision="bf16-mixed"``: each forward and its loss under ``torch.autocast`` in bf16 (the matrix products in
  bf16), the parameters, their gradients and the optimizer's states staying fp32, as mixed-precision training
  keeps them (16 bytes a parameter with Adam); ``"fp32"`` (the default) runs as the model is.

What it reports (:class:`ParallelRun`): each step's seconds (the slowest rank's, from a barrier), the losses, each
rank's parameter bytes held (what the sharding leaves it), on CUDA each rank's peak of allocated bytes
(``torch.cuda.max_memory_allocated``), and the parameters after the steps, whole, by name.
With ``sequence_parallel``, the norms of a Llama-family or GPT-2 decoder run on their shard of the sequence
(:func:`~placement_env.runtime.tensor_plans.sequence_plan`; an FFN the plan keeps whole, Mixtral's experts, takes
the whole sequence and gives back its shard). Not run here, each refused by name before any worker starts: a
pipeline of another model, or of a decoder whose own forward does more than its layers (Gemma 2's soft-capped
logits, Granite's and Cohere's scales; run it with :func:`~placement_env.runtime.pipeline_runner.run_pipeline`),
sequence parallelism on a model not named as a Llama or a GPT-2 (GPT-NeoX, GPT-J, OLMo 2), a plan entry of
another kind (``packed_colwise``, expert parallelism).
"""

from __future__ import annotations

import contextlib
import copy
import inspect
import io
import os
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import cloudpickle
import numpy as np
import torch
import torch.distributed as dist
from torch.distributed import pipelining
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.distributed.tensor import DTensor
from torch.distributed.tensor.parallel import parallelize_module

from placement_env.parallelism import SCHEDULES, Parallelism

from .decoder_stages import (
    DecoderStage,
    check_stages,
    decoder_layers,
    is_decoder,
    shared_parameters,
    stage_layers,
)
from .fused_layers import conv1d_modules, linear_layers
from .gradient_reduction import BUCKET_BYTES, average_gradients, local_grad, local_part
from .local_workers import check_local_workers, heartbeat, run_on_local_workers
from .losses import sum_of_outputs
from .portable import portable
from .recomputation import layers_of, recompute_layers
from .tensor_plans import (
    check_splits,
    check_ties,
    local_heads,
    retie,
    sequence_plan,
    summed_gradient_modules,
    tensor_plan,
)


@dataclass(frozen=True)
class ParallelRun:
    """What :func:`run_parallel` measured: ``steps`` (seconds each, the slowest rank's), ``seconds`` (their median),
    ``losses`` (each step's mean over the replicas), ``held_bytes`` (per rank, the parameter bytes it holds),
    ``parameters`` (whole, by name, after the steps) and ``peak_bytes`` (per rank, the most bytes the CUDA
    allocator held at once; None on CPU, where it is not measured)."""

    steps: list[float]
    losses: list[float]
    held_bytes: list[float]
    parameters: dict[str, np.ndarray]
    peak_bytes: list[float] | None = None

    @property
    def seconds(self) -> float:
        return float(statistics.median(self.steps))


@dataclass(frozen=True)
class _Job:
    model: bytes
    args: tuple
    kwargs: dict[str, Any]
    targets: Any
    parallelism: Parallelism
    steps: int
    loss_fn: bytes | None
    optimizer: bytes | None
    device: str = "cpu"  # "cpu" or "cuda"
    precision: str = "fp32"  # or "bf16-mixed"


PRECISIONS = ("fp32", "bf16-mixed")
"""What ``run_parallel(precision=)`` takes: the model as it is, or bf16 autocast over fp32 states."""


def run_parallel(model: torch.nn.Module, example_inputs: Sequence[Any] | Any, parallelism: Parallelism, *,
                 steps: int = 1, loss_fn: Callable[[Any, Any], Any] | None = None, targets: Any = None,
                 optimizer: Callable[[list], Any] | None = None,
                 example_kwargs: Mapping[str, Any] | None = None, devices: str | None = None,
                 precision: str = "fp32") -> ParallelRun:
    """Run ``steps`` training steps of ``model`` as ``parallelism`` says (module docstring) on ``t x S x d``
    local workers, CUDA devices, or the ranks of a torchrun world (each rank gets the whole result).

    Args:
        model: an ``nn.Module`` (pickled to the workers: its class must be importable).
        example_inputs, example_kwargs: one batch (tensors cut along their first dimension: ``1 / d`` a replica,
            then ``microbatches`` micro-batches).
        parallelism: ``tensor`` x ``pipeline`` x ``data`` ranks, ``microbatches``, ``schedule`` and
            ``virtual_stages``, ``recompute``, ``zero``, ``sequence_parallel``.
        loss_fn: ``loss_fn(output, target)`` per micro-batch (default: the sum of the output); ``targets``, cut as
            the inputs. ``optimizer``: ``optimizer(parameters)``, a lambda or a closure allowed (default: no
            update). Both travel by cloudpickle.
        devices: ``None`` (CPU: local gloo workers, or gloo under torchrun) or ``"cuda"`` (nccl, a CUDA device a
            rank).
        precision: ``"fp32"`` (the model as it is) or ``"bf16-mixed"`` (forward and loss under bf16 autocast,
            fp32 parameters, gradients and optimizer states).

    Raises:
        ValueError: a pipeline of a model other than a known decoder (:data:`~.decoder_stages.LAYOUTS`; run it
            with ``run_pipeline``) or of more
            chunks than layers, sequence parallelism on a model not named as a Llama or a GPT-2, a batch that
            ``d x microbatches`` does not divide, a module tensor parallelism cannot split, more workers than the
            machine runs, ``devices`` other than None or ``"cuda"``, a ``precision`` not in :data:`PRECISIONS`,
            fewer CUDA devices than ranks, a torchrun world of another size than ``t x S x d``.
        RuntimeError: a rank failed (its error) or died.
    """
    if not isinstance(parallelism, Parallelism):
        raise TypeError(f"parallelism must be a Parallelism, got {type(parallelism).__name__}")
    p = parallelism
    if p.pipeline > 1:
        if not is_decoder(model):
            raise ValueError(f"a pipeline of {p.pipeline} ranks: run_parallel cuts a decoder of transformers' Llama "
                             f"family, GPT-2, OPT, GPT-NeoX, GPT-J, Phi or Falcon into stages (model.layers, "
                             f"transformer.h, model.decoder.layers or gpt_neox.layers, their embeddings, final norm "
                             f"and lm_head); model {type(model).__name__} is not one: run its pipeline with "
                             "run_pipeline")
        layers = decoder_layers(model)
        if p.chunks > layers:
            raise ValueError(f"{p.chunks} pipeline chunks ({p.pipeline} ranks x {p.virtual_stages}) for {layers} "
                             "layers")
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps must be an integer >= 1, got {steps!r}")
    args = (example_inputs,) if isinstance(example_inputs, torch.Tensor) else tuple(example_inputs)
    kwargs = dict(example_kwargs or {})
    batch = next((t.shape[0] for t in [*args, *kwargs.values()] if isinstance(t, torch.Tensor) and t.dim() > 0),
                 None)
    if batch is not None:
        p.check_batch(batch)
    if p.pipeline > 1:  # the stages cut by hand must compute what the model's own forward does
        check_stages(model, p.chunks, kwargs.get("input_ids", args[0] if args else None))
    if p.tensor > 1:  # a module it cannot split is refused here, before any worker starts
        probe = model
        if conv1d_modules(model):
            probe = copy.deepcopy(model)
            linear_layers(probe, p.tensor)
        check_splits(probe, sequence_plan(probe) if p.sequence_parallel else tensor_plan(probe), p.tensor)
    if devices not in (None, "cuda"):
        raise ValueError(f"devices must be None (CPU) or 'cuda', got {devices!r}")
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}; got {precision!r}")
    torchrun = "RANK" in os.environ and "WORLD_SIZE" in os.environ
    if torchrun and int(os.environ["WORLD_SIZE"]) != p.devices:
        raise ValueError(f"torchrun started {os.environ['WORLD_SIZE']} processes; the plan has {p.devices} ranks "
                         f"({p.tensor} tensor x {p.pipeline} pipeline x {p.data} data)")
    if devices == "cuda" and not torchrun and torch.cuda.device_count() < p.devices:
        raise ValueError(f"the plan has {p.devices} ranks, a CUDA device each; this machine has "
                         f"{torch.cuda.device_count()} CUDA device(s)")
    if devices is None and not torchrun:
        check_local_workers(p.devices)
    buffer = io.BytesIO()
    torch.save(model, buffer)
    job = _Job(buffer.getvalue(), args, kwargs, targets, p, steps, portable("loss_fn", loss_fn),
               portable("optimizer", optimizer), devices or "cpu", precision)
    backend = "nccl" if devices == "cuda" else "gloo"
    if torchrun:
        reports = _under_torchrun(job, backend)
    else:
        reports = run_on_local_workers(p.devices, run_rank, job, backend=backend)
    steps_of = np.max([r["steps"] for r in reports], axis=0).tolist()
    losses = np.mean([r["losses"] for r in reports if r["last"]], axis=0).tolist()
    merged: dict[str, np.ndarray] = {}
    for report in reports:
        merged.update(report["parameters"])
    peaks = [r["peak"] for r in reports]
    return ParallelRun(steps_of, losses, [r["held"] for r in reports], merged,
                       None if any(x is None for x in peaks) else [float(x) for x in peaks])


def _under_torchrun(job: _Job, backend: str) -> list[dict]:
    """This process as rank ``RANK`` of a torchrun world (its process group made here unless the caller made one);
    every rank's report, gathered on every rank."""
    started = not dist.is_initialized()
    if started:
        dist.init_process_group(backend)
    try:
        world, rank = dist.get_world_size(), dist.get_rank()
        reports: list[Any] = [None] * world
        dist.all_gather_object(reports, run_rank(rank, world, job))
    finally:
        if started:
            dist.destroy_process_group()
    return reports


def _tied_groups(shared: Mapping[str, tuple[int, ...]], modules: Sequence[torch.nn.Module], rank: int,
                 p: Parallelism) -> list[tuple[int, str, Any]]:
    """``(module index, name in it, process group)`` of each parameter that this rank's chunks (``modules``) share
    with other ranks' (:func:`~placement_env.runtime.decoder_stages.shared_parameters` over the chunks: chunk
    ``c`` on pipeline rank ``c mod S``): the group of the ranks holding its copies at this rank's data and tensor
    coordinates. Every rank makes every group (as ``new_group`` requires)."""
    mine: list[tuple[int, str, Any]] = []
    for whole, chunks in sorted(shared.items()):
        holders = sorted({c % p.pipeline for c in chunks})
        for replica in range(p.data):
            for k in range(p.tensor):
                ranks = [s * p.data * p.tensor + replica * p.tensor + k for s in holders]
                group = dist.new_group(ranks)
                if rank in ranks:
                    mine += [(i, local, group) for i, module in enumerate(modules)
                             for local, held in getattr(module, "whole_names", {}).items() if held == whole]
    return mine


def _share(value: Any, index: int, parts: int, device: torch.device | None = None) -> Any:
    if not isinstance(value, torch.Tensor):
        return value
    part = value.chunk(parts)[index] if value.dim() > 0 else value
    return part if device is None else part.to(device)


def run_rank(rank: int, world: int, job: _Job) -> dict:
    """Rank ``rank``'s part of :func:`run_parallel` in an initialised gloo group of ``world`` processes: pipeline
    rank ``s``, replica ``r`` and tensor rank ``rank mod t`` of the ``(pp, dp, tp)`` mesh, holding chunks ``s``,
    ``s + S``, ... of the model."""
    p = job.parallelism
    device = torch.device("cpu")
    if job.device == "cuda":  # torchrun's LOCAL_RANK on a node of several; rank r on cuda:r for local workers
        device = torch.device(f"cuda:{os.environ.get('LOCAL_RANK', rank)}")
        torch.cuda.set_device(device)
    model = torch.load(io.BytesIO(job.model), weights_only=False).to(device)
    layout = linear_layers(model, p.tensor) if p.tensor > 1 else {}  # GPT-2's Conv1D layers, made splittable
    chunks = p.chunks if p.pipeline > 1 else 1
    shared = shared_parameters(model, chunks) if chunks > 1 else {}
    mesh = init_device_mesh(job.device, (p.pipeline, p.data, p.tensor), mesh_dim_names=("pp", "dp", "tp"))
    s, replica = rank // (p.data * p.tensor), (rank // p.tensor) % p.data
    first, last = s == 0, s == p.pipeline - 1
    modules: list[torch.nn.Module] = [model]
    if chunks > 1:
        bounds = stage_layers(decoder_layers(model), chunks)
        modules = [DecoderStage(model, *bounds[c], c == 0, c == chunks - 1) for c in range(s, chunks, p.pipeline)]
    tied = _tied_groups(shared, modules, rank, p)
    summed: list[torch.nn.Module] = []  # kept whole on each tensor rank, their gradients summed over the ranks
    for module in modules:
        if p.tensor > 1:
            if p.sequence_parallel and isinstance(module, DecoderStage):
                module.sequence_mesh = mesh["tp"]
            plan = sequence_plan(module) if p.sequence_parallel else tensor_plan(module)
            ties = check_ties(module, plan)
            parallelize_module(module, mesh["tp"], plan)
            retie(module, ties)  # a tied embedding and output layer split alike: one parameter again
            local_heads(module, p.tensor, plan)
            summed += [module.get_submodule(name) for name in summed_gradient_modules(module)]
        recompute_layers(module, p.recompute)
        if p.zero >= 2:
            for layer in layers_of(module):
                fully_shard(layer, mesh=mesh["dp"], reshard_after_forward=p.zero == 3)
            fully_shard(module, mesh=mesh["dp"], reshard_after_forward=p.zero == 3)
    parameters = list({id(q): q for m in modules for q in m.parameters() if q.requires_grad}.values())
    optimizer, shadows = None, []
    if job.optimizer is not None and parameters:
        factory = cloudpickle.loads(job.optimizer)
        if p.zero == 1 and p.data > 1:
            probe = factory([torch.nn.Parameter(torch.zeros(1))])  # the user's optimizer: its class and settings
            accepted = inspect.signature(type(probe).__init__).parameters
            settings = {k: v for k, v in probe.defaults.items() if k in accepted}
            # plain parameters on each one's local shard (its storage): the sharded optimizer updates them in place
            shadows = [torch.nn.Parameter(local_part(q).detach()) for q in parameters]
            optimizer = ZeroRedundancyOptimizer(shadows, optimizer_class=type(probe),
                                                process_group=mesh["dp"].get_group(), **settings)
        else:
            optimizer = factory(parameters)
    loss_fn = cloudpickle.loads(job.loss_fn) if job.loss_fn is not None else sum_of_outputs
    args = [_share(a, replica, p.data, device) for a in job.args]
    kwargs = {k: _share(v, replica, p.data, device) for k, v in job.kwargs.items()}
    targets = _share(job.targets, replica, p.data, device)
    m = p.microbatches
    schedule = None
    if chunks > 1:
        stages = [pipelining.PipelineStage(module, c, chunks, device, group=mesh["pp"].get_group())
                  for module, c in zip(modules, range(s, chunks, p.pipeline), strict=True)]
        kind = getattr(pipelining, str(SCHEDULES[p.schedule].runner))
        several = issubclass(kind, pipelining.schedules.PipelineScheduleMulti)  # interleaved, zero bubble
        schedule = kind(stages if several else stages[0], m, loss_fn=loss_fn)
    def autocast() -> contextlib.AbstractContextManager:
        """The forward's and the loss's context: bf16 autocast for ``bf16-mixed``, else nothing."""
        if job.precision == "bf16-mixed":
            return torch.autocast(device.type, dtype=torch.bfloat16)
        return contextlib.nullcontext()

    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    times, losses = [], []
    for k in range(job.steps):
        heartbeat(f"rank {rank} (stage {s}, replica {replica}, tensor rank {rank % p.tensor}): step {k + 1} of "
                  f"{job.steps}")
        dist.barrier()
        t0 = time.perf_counter()
        total = float("nan")
        if schedule is not None:  # the pipeline's schedule runs the micro-batches, each loss over m
            per: list[Any] = []
            tokens = kwargs.get("input_ids", args[0] if args else None)
            with autocast():  # the schedule runs each backward too: autocast leaves those as they are
                if first:
                    schedule.step(tokens, **({"target": targets, "losses": per} if last else {}))
                elif last:
                    schedule.step(target=targets, losses=per)
                else:
                    schedule.step()
            if last:
                total = float(torch.stack([x.detach().float() for x in per]).mean())
        else:
            total = 0.0
            for j in range(m):
                with autocast():
                    output = model(*[_share(a, j, m) for a in args],
                                   **{n: _share(v, j, m) for n, v in kwargs.items()})
                    loss = loss_fn(output, _share(targets, j, m)) / m
                loss.backward()
                total += float(loss.detach().float())
        for q in [q for module in summed for q in module.parameters() if q.grad is not None]:
            dist.all_reduce(local_grad(q), group=mesh["tp"].get_group())
        if p.zero <= 1 and p.data > 1:  # plain replicas: their gradients averaged over the data ranks, in buckets
            average_gradients(  # as DDP does
                [local_grad(q) for q in parameters if q.grad is not None], mesh["dp"].get_group(), p.data)
        for index, local_name, group in tied:  # a tied parameter's copies: their gradients summed over their ranks
            q = dict(modules[index].named_parameters())[local_name]
            if q.grad is not None:
                dist.all_reduce(local_grad(q), group=group)
        for shadow, q in zip(shadows, parameters if shadows else [], strict=True):  # ZeRO 1's plain parameters
            shadow.grad = local_grad(q) if q.grad is not None else None
        if optimizer is not None:
            optimizer.step()
            optimizer.zero_grad()
        for module in modules:
            module.zero_grad()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times.append(time.perf_counter() - t0)
        losses.append(total)
    held = float(sum(local_part(q).numel() * q.element_size() for q in {id(q): q for m_ in modules
                                                                      for q in m_.parameters()}.values()))
    whole = {}
    for module in modules:
        name = module.model_name if isinstance(module, DecoderStage) else (lambda n: n)
        for n, q in module.named_parameters():  # every rank gathers (a collective), replica 0's reports
            value = (q.full_tensor() if isinstance(q, DTensor) else q).detach().float().cpu().numpy().copy()
            whole[name(n)] = layout[name(n)](value) if name(n) in layout else value  # in the model's own layout
    keep = replica == 0 and rank % p.tensor == 0
    peak = float(torch.cuda.max_memory_allocated(device)) if device.type == "cuda" else None
    return {"steps": times, "losses": losses, "held": held, "parameters": whole if keep else {}, "last": last,
            "peak": peak}


__all__ = ["BUCKET_BYTES", "PRECISIONS", "ParallelRun", "average_gradients", "run_parallel", "sequence_plan",
           "tensor_plan"]
