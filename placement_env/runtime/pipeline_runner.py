"""A plan that runs: :func:`run_pipeline`, training steps of a :class:`~placement_env.plan.PipelinePlan` with
``torch.distributed.pipelining``.

Each stage of the plan is one process, its pipeline rank the plan's (stage ``s`` takes the inputs when ``s == 0``
and computes the loss when it is the last). Every process traces the model into the plan's stages
(``pipeline(model, mb_args, split_spec=plan's split points)``) on the first micro-batch of the inputs, builds
its own stages (``Pipe.build_stage``: chunk ``c`` on rank ``c mod S``, so ``v`` chunks a rank under the
interleaved schedule) and runs the plan's schedule (:data:`SCHEDULE_CLASSES`: ``Schedule1F1B``, ``ScheduleGPipe``,
``ScheduleInterleaved1F1B``, ``ScheduleInterleavedZeroBubble``) over ``plan.microbatches`` micro-batches (the
inputs and targets cut along their first dimension); a recomputing rank's chunks run their forward under
``torch.utils.checkpoint``. The multi-chunk schedules send only between neighbouring chunks: a model whose later
layers read a value computed once before them (GPT-2's attention mask, Llama's rotary embeddings) is refused under
them by name (:func:`skipped_chunk`). A step is::

    schedule.step(...)              # forward and backward of every micro-batch; each micro-batch's loss is
                                    # loss_fn(output, target), the step's objective their mean
    sum tied gradients              # a parameter held by several stages (GPT-2's tied embedding): all-reduce
                                    # of its gradient over the stages holding a copy, so that the copies stay
                                    # one parameter
    optimizer.step(); zero_grad()   # optimizer(stage parameters) per stage; none: gradients only

without ``loss_fn`` the loss of a micro-batch is the sum of its outputs (what
:func:`~placement_env.runtime.measured_step.measure_step` differentiates). Where it runs:

* on local worker processes (the default; gloo, one CPU thread each: :mod:`placement_env.runtime.local_workers`);
* on one process per CUDA device (``devices="cuda"``; nccl; stage ``s`` on ``cuda:s``);
* under ``torchrun`` (``RANK`` and ``WORLD_SIZE`` set): this process is the plan's stage ``RANK``; the world must
  have one process per stage. Every rank returns the whole result.

What it reports (:class:`PipelineRun`): each step's seconds (the slowest stage's, from a barrier), their median
and spread, each stage's peak memory (parameters and their gradients plus the high-water mark of the tensors
the stage allocates during one more step, with no update, under
:class:`~placement_env.runtime.live_bytes.LiveBytes`; on CUDA ``max_memory_allocated``), the losses, and the
parameters after the steps, by qualified name, merged across stages.
"""

from __future__ import annotations

import functools
import io
import os
import statistics
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import cloudpickle
import numpy as np
import torch
import torch.distributed as dist
import torch.distributed.pipelining as pipelining
import torch.utils._pytree as pytree
from torch.utils.checkpoint import checkpoint

from placement_env.checks import first_line
from placement_env.importers.parameters import canonical_names
from placement_env.parallelism import SCHEDULES, data_pipeline_mesh, schedules_for
from placement_env.plan.pipeline_plan import PipelinePlan

from .live_bytes import LiveBytes
from .local_workers import check_local_workers, heartbeat, run_on_local_workers
from .losses import sum_of_outputs
from .pipelining_support import contiguous_messages, skipped_chunk
from .portable import portable

SCHEDULE_CLASSES = {name: str(SCHEDULES[name].runner) for name in schedules_for("runner")}
"""The ``torch.distributed.pipelining`` schedule that runs each of the plan's schedules."""


@dataclass(frozen=True)
class PipelineRun:
    """What :func:`run_pipeline` measured.

    Attributes:
        seconds: the median step, seconds.
        steps: every step, seconds (the first includes one-time work: allocations, the schedule's set-up).
        spread: ``(max - min) / median`` of the steps after the first (0 for fewer than three steps).
        peak_memory: bytes per stage (rank order).
        losses: each step's objective (the mean of its micro-batches' losses).
        parameters: each trainable parameter after the steps, by qualified name (a tied one once, under its
            first name).
        backend: ``"local-workers"``, ``"cuda"`` or ``"torchrun"``.
    """

    seconds: float
    steps: tuple[float, ...]
    spread: float
    peak_memory: np.ndarray
    losses: tuple[float, ...]
    parameters: dict[str, np.ndarray]
    backend: str

    def to_dict(self) -> dict:
        return {"seconds": self.seconds, "steps": list(self.steps), "spread": self.spread,
                "peak_memory": [int(x) for x in self.peak_memory], "losses": list(self.losses),
                "backend": self.backend}


@dataclass(frozen=True)
class _Job:
    """What every stage process runs (pickled to local workers)."""

    model: bytes  # torch.save of the model: each process its own copy (a tensor pickled to a worker process
    #               shares its memory with the driver's, and the stages' updates would reach the caller's model)
    args: tuple
    kwargs: dict[str, Any]
    targets: Any
    split_spec: list[str]
    microbatches: int
    schedule: str
    steps: int
    loss_fn: bytes | None  # cloudpickle of the callable: lambdas and closures travel by value
    optimizer: bytes | None
    device: str  # "cpu" or "cuda" (stage s on cuda:s)
    mesh: tuple[tuple[int, ...], ...] = ((0,),)  # mesh[r][s]: the process (rank) of stage s in replica r
    virtual: int = 1  # chunks a rank runs: chunk c on rank c mod S
    recompute: tuple[bool, ...] = ()  # per rank: its chunks rerun their forward in the backward


def run_pipeline(model: Any, example_inputs: Sequence[Any] | Any, plan: PipelinePlan, *, steps: int = 1,
                 loss_fn: Callable[[Any, Any], Any] | None = None, targets: Any = None,
                 optimizer: Callable[[list], Any] | None = None,
                 example_kwargs: Mapping[str, Any] | None = None, devices: str | None = None) -> PipelineRun:
    """Run ``steps`` training steps of ``model`` as ``plan`` says (see the module docstring).

    Args:
        model: the ``nn.Module`` the plan's graph was imported from (or one of the same architecture); pickled to
            local workers, so its class must be importable.
        example_inputs, example_kwargs: one batch of positional and keyword inputs (tensors cut into
            ``plan.microbatches`` micro-batches along their first dimension).
        plan: a :class:`~placement_env.plan.PipelinePlan` of the model.
        steps: training steps (>= 1).
        loss_fn: ``loss_fn(output, target)`` per micro-batch (default: the sum of the output).
        targets: the batch's targets, cut as the inputs (default: none).
        optimizer: ``optimizer(parameters) -> torch.optim.Optimizer``, called per stage with its parameters
            (default: no update; the steps compute gradients only).
        devices: ``None`` for local worker processes, ``"cuda"`` for one process per CUDA device; under torchrun
            this process runs its rank's stage whatever ``devices`` says.

    Returns:
        A :class:`PipelineRun`.

    Raises:
        ValueError: ``steps`` below 1; a schedule the runner does not know; 1f1b with fewer
            micro-batches than stages (torch refuses it); a plan naming a module the model
            lacks (a plan of another model); fewer CUDA devices than stages; a torchrun world of another size.
        RuntimeError: a stage failed (its error quoted) or its process died (the stage is named).
    """
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps must be an integer >= 1, got {steps!r}")
    if not isinstance(plan, PipelinePlan):
        raise TypeError(f"plan must be a PipelinePlan, got {type(plan).__name__}")
    if plan.schedule not in SCHEDULE_CLASSES:
        raise ValueError(f"the plan's schedule {plan.schedule!r} is not one the runner knows: "
                         f"{', '.join(SCHEDULE_CLASSES)}")
    if plan.schedule == "1f1b" and plan.microbatches < plan.num_stages:  # torch's Schedule1F1B refuses it
        raise ValueError(f"torch.distributed.pipelining runs 1f1b with at least as many micro-batches as stages; "
                         f"this plan has {plan.microbatches} for {plan.num_stages} stages (use gpipe, or "
                         f"microbatches >= {plan.num_stages})")
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    check_plan_matches(model, plan)
    args = (example_inputs,) if isinstance(example_inputs, torch.Tensor) else tuple(example_inputs)
    job = _Job(_saved(model), args, dict(example_kwargs or {}), targets,
               [called_split_point(model, name) for name in plan.split_spec], plan.microbatches,
               plan.schedule, steps, portable("loss_fn", loss_fn), portable("optimizer", optimizer),
               "cpu" if devices is None else str(devices), process_mesh(plan), plan.virtual_stages,
               tuple(stage.recompute for stage in plan.stages[:plan.num_stages]))
    world = plan.num_stages * plan.replicas
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        return _under_torchrun(job, plan)
    if devices is not None and devices != "cuda":
        raise ValueError(f"devices must be None (local workers) or 'cuda', got {devices!r}")
    if devices == "cuda" and torch.cuda.device_count() < world:
        raise ValueError(f"the plan runs {world} processes ({plan.num_stages} stages x {plan.replicas} replicas), "
                         f"this machine has {torch.cuda.device_count()} CUDA device(s)")
    if devices is None:
        check_local_workers(world)
    reports = run_on_local_workers(world, run_stage, job, backend="nccl" if devices == "cuda" else "gloo")
    return _merged(reports, "cuda" if devices == "cuda" else "local-workers")


def process_mesh(plan: PipelinePlan) -> tuple[tuple[int, ...], ...]:
    """``mesh[r][s]``: the process (torchrun's rank) that runs stage ``s`` of replica ``r``. With one replica,
    stage s is process s; with more, the plan's devices are the processes (its (dp, pp) ``DeviceMesh``), which must
    be ``0 .. S x D - 1``, each replica's stages in increasing order (``torch.distributed`` numbers a group's
    members in order, and a pipeline's stage s is its group's member s); ``ValueError`` otherwise."""
    if plan.replicas == 1:
        return (tuple(range(plan.num_stages)),)
    mesh = data_pipeline_mesh(plan.devices)
    flat = sorted(d for row in mesh for d in row)
    if flat != list(range(len(flat))):
        raise ValueError(f"the runner runs a plan with replicas on processes 0 .. {len(flat) - 1}: its devices are "
                         f"{flat}")
    bad = next((r for r, row in enumerate(mesh) if list(row) != sorted(row)), None)
    if bad is not None:
        raise ValueError(f"replica {bad}'s stages are on devices {list(mesh[bad])}: the runner needs them in "
                         "increasing order")
    return mesh


def called_split_point(model: Any, name: str) -> str:
    """The module a stage beginning at ``name`` begins with in a call: ``name`` itself, or, for a container the
    program never calls (an ``nn.ModuleList`` or ``nn.ModuleDict``, iterated by its parent), its first element,
    down to one that is called (``blocks`` -> ``blocks.0``). ``torch.distributed.pipelining`` splits at a
    module's call, so a split point at a list would split nowhere."""
    module = model.get_submodule(name)
    while isinstance(module, (torch.nn.ModuleList, torch.nn.ModuleDict)) and len(module) > 0:
        first, module = next(iter(module.named_children()))
        name = f"{name}.{first}"
    return name


def check_plan_matches(model: Any, plan: PipelinePlan) -> None:
    """Raise ``ValueError`` unless every module the plan names (its layers and split points) is a submodule of
    ``model`` and every tied parameter one of its parameters: a plan of another model, named by its first
    missing module."""
    modules = dict(model.named_modules())
    for stage in plan.stages:
        for name in [*stage.layers, *([stage.begins_at] if stage.begins_at else [])]:
            if name not in modules:
                raise ValueError(f"the plan (graph {plan.graph!r}) names module {name!r} of stage {stage.rank}, "
                                 f"which model {type(model).__name__} lacks: a plan of another model")
    parameters = {name for name, _ in model.named_parameters(remove_duplicate=False)}
    for group in plan.tied:
        if group.parameter not in parameters:
            raise ValueError(f"the plan (graph {plan.graph!r}) ties parameter {group.parameter!r}, which model "
                             f"{type(model).__name__} lacks: a plan of another model")
    if plan.model_parameter_bytes is not None:
        distinct = {id(p): p for p in model.parameters()}.values()
        held = float(sum(p.numel() * p.element_size() for p in distinct))
        if held != plan.model_parameter_bytes:
            raise ValueError(f"the plan was made for graph {plan.graph!r} (digest {plan.graph_digest[:12]}), whose "
                             f"parameters take {plan.model_parameter_bytes:,.0f} bytes; model {type(model).__name__} "
                             f"has {held:,.0f}: a plan of another model (another width or depth)")


def run_stage(rank: int, world: int, job: _Job) -> dict:
    """Process ``rank``'s part of :func:`run_pipeline` in an initialised process group of ``world`` processes: a
    stage of a replica (``job.mesh``); its step times, peak bytes, losses (a last stage) and parameters by first
    name (replica 0)."""
    warnings.filterwarnings("ignore", category=FutureWarning, module="copyreg")  # pipelining's pickled specs
    contiguous_messages()
    device = torch.device(f"cuda:{rank}" if job.device == "cuda" else "cpu")
    model = torch.load(io.BytesIO(job.model), weights_only=False)
    m, replicas, stages = job.microbatches, len(job.mesh), len(job.mesh[0])
    replica, stage_index = next((r, s) for r, row in enumerate(job.mesh) for s, p in enumerate(row) if p == rank)
    # every process builds every group, in the same order: a replica's pipeline, a stage's replicas
    pipelines = [dist.new_group(list(row)) for row in job.mesh] if replicas > 1 else [None]
    data_parallel = [dist.new_group([row[s] for row in job.mesh]) for s in range(stages)] if replicas > 1 else []
    args = tuple(_part(a, replica, replicas) for a in job.args)  # this replica's share of the batch
    kwargs = {k: _part(v, replica, replicas) for k, v in job.kwargs.items()}
    targets = _part(job.targets, replica, replicas)
    first_args = tuple(_first_microbatch(a, m) for a in args)
    first_kwargs = {k: _first_microbatch(v, m) for k, v in kwargs.items()}
    try:
        pipe = pipelining.pipeline(model, first_args, first_kwargs,
                                   split_spec={name: pipelining.SplitPoint.BEGINNING for name in job.split_spec})
    except Exception as error:  # noqa: BLE001 - torch's message hides the model's own error in its causes
        root: BaseException = error
        while root.__cause__ is not None:
            root = root.__cause__
        raise ValueError(f"the model cannot be traced into the plan's stages: {type(root).__name__}: "
                         f"{first_line(root)}") from None
    chunks = stages * job.virtual
    if pipe.num_stages != chunks:
        raise ValueError(f"the model splits into {pipe.num_stages} stages at the plan's split points, the plan has "
                         f"{chunks} ({stages} ranks x {job.virtual} chunks)")
    kind = getattr(pipelining, SCHEDULE_CLASSES[job.schedule])
    several = issubclass(kind, pipelining.schedules.PipelineScheduleMulti)  # interleaved, zero bubble
    skip = skipped_chunk(pipe) if several else None
    if skip is not None:
        raise ValueError(f"schedule {job.schedule}: chunk {skip[0]} takes an input from chunk {skip[1]}, not only from "
                         f"chunk {skip[0] - 1} (a value the model computes once and every layer reads, such as an "
                         "attention mask or rotary embeddings); torch's multi-chunk schedules send only between "
                         "neighbouring chunks: run this model under 1f1b or gpipe")
    built = [pipe.build_stage(c, device, group=pipelines[replica]) for c in range(stage_index, chunks, stages)]
    if job.recompute and job.recompute[stage_index]:  # each chunk reruns its forward in the backward
        for chunk in built:
            chunk.submod.forward = functools.partial(checkpoint, chunk.submod.forward, use_reentrant=False)
    parameters = list({id(p): p for chunk in built for p in chunk.submod.parameters()}.values())
    first_name = canonical_names(model)
    # a parameter -> the ranks holding a copy, from every chunk's module (each process traced all)
    holders: dict[str, list[int]] = {}
    for c in range(chunks):
        for name in dict.fromkeys(first_name.get(n, n) for n, _ in pipe.get_stage_module(c).named_parameters()):
            if c % stages not in holders.setdefault(name, []):
                holders[name].append(c % stages)
    tied = {name: sorted(ranks) for name, ranks in holders.items() if len(ranks) > 1}
    groups = {}
    for r, row in enumerate(job.mesh):  # every process, same order; this replica's groups kept
        for name, holding in sorted(tied.items()):
            group = dist.new_group([row[s] for s in holding])
            if r == replica:
                groups[name] = group
    local: dict[str, list[Any]] = {}
    for chunk in built:
        for n, p in chunk.submod.named_parameters():
            local.setdefault(first_name.get(n, n), []).append(p)
    loss_fn = cloudpickle.loads(job.loss_fn) if job.loss_fn is not None else sum_of_outputs
    schedule = kind(built if several else built[0], m, loss_fn=loss_fn)
    trainable = [p for p in parameters if p.requires_grad]
    optimizer = cloudpickle.loads(job.optimizer)(trainable) if job.optimizer is not None and trainable else None
    last = stage_index == stages - 1
    batch = next((t.shape[0] for t in pytree.tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)
                  and t.dim() > 0), m)
    placeholder_target = torch.zeros(batch)  # the schedules cut a target even when the loss takes none

    def step(update: bool) -> tuple[float, list[float]]:
        losses: list[Any] = []
        dist.barrier()
        t0 = time.perf_counter()
        inputs = [a.to(device) if isinstance(a, torch.Tensor) else a for a in args] if stage_index == 0 else []
        named = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()} \
            if stage_index == 0 else {}
        target = targets.to(device) if isinstance(targets, torch.Tensor) else placeholder_target
        # return_outputs=False: the last stage keeps no micro-batch's output to return (the losses are enough)
        if last:
            schedule.step(*inputs, target=target, losses=losses, return_outputs=False, **named)
        else:
            schedule.step(*inputs, return_outputs=False, **named)
        for name in sorted(tied):  # every process in the same order
            copies = local.get(name)
            if copies is None:
                continue
            total = sum((p.grad if p.grad is not None else torch.zeros_like(p) for p in copies[1:]),
                        copies[0].grad if copies[0].grad is not None else torch.zeros_like(copies[0]))
            dist.all_reduce(total, group=groups[name])
            for p in copies:
                p.grad = total.clone()
        for name, copies in local.items():  # two names of one parameter within a stage: one gradient
            if name not in tied and len(copies) > 1:
                total = sum(p.grad for p in copies if p.grad is not None)
                for p in copies:
                    p.grad = total.clone() if isinstance(total, torch.Tensor) else None
        if replicas > 1:  # the replicas' gradients averaged: each replica's loss is the mean over its share
            for p in parameters:
                if p.requires_grad:
                    grad = p.grad if p.grad is not None else torch.zeros_like(p)
                    dist.all_reduce(grad, group=data_parallel[stage_index])
                    p.grad = grad / replicas
        if update and optimizer is not None:
            optimizer.step()
        if job.device == "cuda":
            torch.cuda.synchronize(device)
        seconds = time.perf_counter() - t0
        for p in parameters:
            p.grad = None
        return seconds, [float(x.detach().float().mean()) for x in losses]

    times, step_losses = [], []
    for k in range(job.steps):
        heartbeat(f"stage {stage_index} of replica {replica}, step {k + 1} of {job.steps}")
        seconds, losses = step(update=True)
        times.append(seconds)
        step_losses.append(statistics.fmean(losses) if losses else float("nan"))
    held = sum(p.numel() * p.element_size() for p in parameters)
    if job.device == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        step(update=False)
        peak = float(torch.cuda.max_memory_allocated(device))
    else:
        tracker = LiveBytes()
        with tracker.mode:
            step(update=False)
        peak = float(held + tracker.peak)
    after = {name: copies[0].detach().float().cpu().numpy().copy() for name, copies in local.items()
             if copies[0].requires_grad} if replica == 0 else {}
    return {"steps": times, "peak": peak, "losses": step_losses if last else [], "parameters": after, "last": last}


def sgd(parameters: list, lr: float) -> torch.optim.Optimizer:
    """``torch.optim.SGD(parameters, lr=lr)``: ``functools.partial(sgd, lr=...)`` is an ``optimizer`` for
    :func:`run_pipeline` that pickles to its workers (a lambda does not)."""
    return torch.optim.SGD(parameters, lr=lr)


def _saved(model: Any) -> bytes:
    buffer = io.BytesIO()
    torch.save(model, buffer)
    return buffer.getvalue()


def _part(value: Any, index: int, parts: int) -> Any:
    """Replica ``index``'s share of a batch tensor (its first dimension cut in ``parts``); anything else whole."""
    if parts == 1 or not isinstance(value, torch.Tensor) or value.dim() == 0:
        return value
    if value.shape[0] % parts:
        raise ValueError(f"a batch of {value.shape[0]} does not divide among {parts} replicas")
    return value.tensor_split(parts)[index]


def _first_microbatch(value: Any, microbatches: int) -> Any:
    return value.tensor_split(microbatches)[0] if isinstance(value, torch.Tensor) else value


def _merged(reports: list[dict], backend: str) -> PipelineRun:
    steps = np.max(np.array([r["steps"] for r in reports]), axis=0)
    later = steps[1:] if steps.size >= 3 else steps[:0]
    median = float(np.median(steps))
    spread = float((later.max() - later.min()) / np.median(later)) if later.size else 0.0
    parameters: dict[str, np.ndarray] = {}
    for r in reports:
        for name, value in r["parameters"].items():
            parameters.setdefault(name, value)
    last = [r["losses"] for r in reports if r.get("last", True) and r["losses"]]
    losses = tuple(float(x) for x in np.mean(np.array(last), axis=0)) if last else ()  # the replicas' mean
    return PipelineRun(median, tuple(float(x) for x in steps), spread, np.array([r["peak"] for r in reports]),
                       losses, parameters, backend)


def _under_torchrun(job: _Job, plan: PipelinePlan) -> PipelineRun:
    """This process as stage ``RANK`` of a torchrun world; every rank gets the merged result."""
    world, rank = int(os.environ["WORLD_SIZE"]), int(os.environ["RANK"])
    if world != plan.num_stages * plan.replicas:
        raise ValueError(f"torchrun started {world} processes, the plan has {plan.num_stages} stages x "
                         f"{plan.replicas} replicas")
    started = not dist.is_initialized()
    if started:
        dist.init_process_group("nccl" if job.device == "cuda" else "gloo")
    try:
        report = run_stage(rank, world, job)
        reports: list[Any] = [None] * world
        dist.all_gather_object(reports, report)
    finally:
        if started:
            dist.destroy_process_group()
    return _merged(reports, "torchrun")


__all__ = ["SCHEDULE_CLASSES", "PipelineRun", "check_plan_matches", "process_mesh", "run_pipeline", "run_stage",
           "sgd"]
