"""One description of a parallel training step, and one table of the pipeline schedules.

* :class:`Parallelism`: how a step is parallelised (tensor x pipeline x data ranks, micro-batches, schedule,
  virtual stages, recomputation, ZeRO stage, sequence parallelism), checked whole when it is made, as
  torchtitan's ``ParallelDims`` is; the placers (``step=``), :func:`~placement_env.plan.pipeline_plan.
  plan_from_placement` and the plan files all read this one object.
* :data:`SCHEDULES`: each pipeline schedule with what supports it: the graph simulator (``docs/spec/simulator.md``
  section 3a), the plan's step and the planner (section 3b), the runner (``torch.distributed.pipelining``'s
  class). :func:`schedules_for` lists them by user.

A module of layer 0: it imports nothing of the project.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

RECOMPUTATION = ("none", "selective", "full")
"""Activation recomputation: ``none``; ``selective``, the attention core (softmax, its dropout and the product
with the values) as Korthikanti et al. 2022 define it; ``full``, each layer keeps only its input and reruns its
forward in the backward."""
ZERO_STAGES = (0, 1, 2, 3)
"""What data-parallel ranks shard (ZeRO, Rajbhandari et al. 2020): 0 nothing, 1 the optimizer states, 2 and the
gradients, 3 and the parameters (FSDP; FSDP2 without resharding after the forward is stage 2)."""


@dataclass(frozen=True)
class ScheduleSupport:
    """A pipeline schedule and who supports it.

    Attributes:
        name: the schedule's name in this project.
        simulator: the graph simulator's pipelined step (section 3a) runs it.
        planner: the plan's step (section 3b) and the planner run it.
        runner: ``torch.distributed.pipelining``'s class that runs it, or None where the runner does not yet.
        virtual: it runs several chunks a rank (v >= 2).
        split_backward: it runs the weights' gradients as tasks of their own (zero bubble).
    """

    name: str
    simulator: bool
    planner: bool
    runner: str | None
    virtual: bool = False
    split_backward: bool = False


SCHEDULES: dict[str, ScheduleSupport] = {row.name: row for row in (
    ScheduleSupport("1f1b", simulator=True, planner=True, runner="Schedule1F1B"),
    ScheduleSupport("gpipe", simulator=True, planner=True, runner="ScheduleGPipe"),
    ScheduleSupport("interleaved-1f1b", simulator=False, planner=True, runner="ScheduleInterleaved1F1B",
                    virtual=True),
    ScheduleSupport("zb-h1", simulator=False, planner=True, runner="ScheduleInterleavedZeroBubble",
                    split_backward=True),
)}
"""Every schedule the project knows, ``1f1b`` first (the default); the runner entries name the class
:mod:`placement_env.runtime.pipeline_runner` builds (it runs those of :data:`RUNNER_READY`)."""
RUNNER_READY = ("1f1b", "gpipe", "interleaved-1f1b", "zb-h1")
"""The schedules the runner runs (a schedule added to the simulator or the planner first is listed here when the
runner runs it, and refused by the runner by name until then)."""


def schedules_for(user: Literal["simulator", "planner", "runner"]) -> tuple[str, ...]:
    """The schedules ``user`` supports, in :data:`SCHEDULES`'s order."""
    if user == "runner":
        return tuple(name for name in SCHEDULES if name in RUNNER_READY)
    return tuple(name for name, row in SCHEDULES.items() if getattr(row, user))


def _positive(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    return value


@dataclass(frozen=True)
class Parallelism:
    """How one training step is parallelised; checked on construction (``ValueError`` naming the bad field).

    Ranks form a ``data x pipeline x tensor`` grid: ``tensor`` ranks split each layer (Megatron-LM's tensor
    parallelism), ``pipeline`` ranks hold consecutive chunks of layers, ``data`` replicas each take ``1 / data`` of
    the batch. Each replica runs ``microbatches`` micro-batches a step under ``schedule``.

    Attributes:
        pipeline: S, pipeline ranks. ``data``: D, data-parallel replicas. ``tensor``: t, tensor-parallel ranks.
        microbatches: m, per replica and step (gradient accumulation steps when ``pipeline`` is 1).
        schedule: a name of :data:`SCHEDULES`.
        virtual_stages: v, chunks a pipeline rank runs (2 or more only under a schedule that interleaves; then m
            must be a multiple of S, as Megatron-LM requires).
        recompute: one of :data:`RECOMPUTATION`.
        zero: the ZeRO stage (:data:`ZERO_STAGES`): what the ``data`` replicas shard.
        sequence_parallel: the tensor-parallel ranks also split the norms and dropouts along the sequence
            (all-gathers and reduce-scatters instead of all-reduces); needs ``tensor`` >= 2.
    """

    pipeline: int = 1
    data: int = 1
    tensor: int = 1
    microbatches: int = 1
    schedule: str = "1f1b"
    virtual_stages: int = 1
    recompute: str = "none"
    zero: int = 0
    sequence_parallel: bool = False

    def __post_init__(self) -> None:
        for name in ("pipeline", "data", "tensor", "microbatches", "virtual_stages"):
            _positive(name, getattr(self, name))
        if self.schedule not in SCHEDULES:
            raise ValueError(f"unknown schedule {self.schedule!r}; known: {', '.join(SCHEDULES)}")
        row = SCHEDULES[self.schedule]
        if row.virtual:
            if self.virtual_stages < 2:
                raise ValueError(f"schedule {self.schedule} needs 2 or more virtual stages a rank, got "
                                 f"{self.virtual_stages}")
            if self.microbatches % self.pipeline:
                raise ValueError(f"schedule {self.schedule} needs the micro-batches ({self.microbatches}) to be a "
                                 f"multiple of the pipeline's ranks ({self.pipeline}), as Megatron-LM's interleaved "
                                 "schedule does")
        elif self.virtual_stages != 1:
            raise ValueError(f"schedule {self.schedule} runs one chunk a rank, got {self.virtual_stages} virtual "
                             f"stages (use {', '.join(n for n, r in SCHEDULES.items() if r.virtual)})")
        if self.recompute not in RECOMPUTATION:
            raise ValueError(f"unknown recompute {self.recompute!r}; known: {', '.join(RECOMPUTATION)}")
        if isinstance(self.zero, bool) or self.zero not in ZERO_STAGES:
            raise ValueError(f"zero must be a ZeRO stage {', '.join(map(str, ZERO_STAGES))}, got {self.zero!r}")
        if not isinstance(self.sequence_parallel, bool):
            raise ValueError(f"sequence_parallel must be True or False, got {self.sequence_parallel!r}")
        if self.sequence_parallel and self.tensor < 2:
            raise ValueError("sequence_parallel splits along the sequence what the tensor-parallel ranks would "
                             f"repeat: it needs tensor >= 2, got tensor={self.tensor}")

    @property
    def devices(self) -> int:
        """The ranks of the step: ``tensor x pipeline x data``."""
        return self.tensor * self.pipeline * self.data

    @property
    def chunks(self) -> int:
        """The model's chunks: ``pipeline x virtual_stages``."""
        return self.pipeline * self.virtual_stages

    def check_batch(self, batch: int) -> int:
        """The micro-batch size, ``batch / (data x microbatches)`` sequences; ``ValueError`` when it is not whole."""
        _positive("batch", batch)
        if batch % (self.data * self.microbatches):
            raise ValueError(f"{self.data} replicas x {self.microbatches} micro-batches = "
                             f"{self.data * self.microbatches} do not divide the batch of {batch}")
        return batch // (self.data * self.microbatches)

    def describe(self) -> str:
        """``"t2 x p4 x d8, 16 micro-batches, interleaved-1f1b v=2, full recomputation, ZeRO-1"``, for reports."""
        parts = [f"t{self.tensor} x p{self.pipeline} x d{self.data}", f"{self.microbatches} micro-batches",
                 self.schedule + (f" v={self.virtual_stages}" if self.virtual_stages > 1 else "")]
        if self.recompute != "none":
            parts.append(f"{self.recompute} recomputation")
        if self.zero:
            parts.append(f"ZeRO-{self.zero}")
        if self.sequence_parallel:
            parts.append("sequence parallel")
        return ", ".join(parts)


def data_pipeline_mesh(devices: list[list[int]] | tuple[tuple[int, ...], ...]) -> tuple[tuple[int, ...], ...]:
    """The (data, pipeline) mesh of a plan whose rank ``s`` of replica ``r`` is ``devices[s][r]``: ``mesh[r][s]``,
    the order of ``torch.distributed``'s ``DeviceMesh(..., mesh_dim_names=("dp", "pp"))``. The one place the mesh
    is built (the exports and the runner read it)."""
    ranks = len(devices)
    replicas = len(devices[0]) if ranks else 0
    return tuple(tuple(int(devices[s][r]) for s in range(ranks)) for r in range(replicas))


__all__ = ["RECOMPUTATION", "RUNNER_READY", "SCHEDULES", "ZERO_STAGES", "Parallelism", "ScheduleSupport",
           "data_pipeline_mesh", "schedules_for"]
