"""The planner of plans at scale: :func:`search_scale_plan` decides tensor x pipeline x data ranks, the ZeRO stage,
the micro-batch size (so the micro-batch count), the schedule and its virtual stages, recomputation, sequence
parallelism and the rank order, within memory; any decision can be fixed, so a published configuration is
simulated the same way (``docs/spec/simulator.md`` section 3c).

How it decides: every configuration left open is simulated (:func:`~placement_env.plan.scale.step.simulate_scale`,
about 0.1 ms each) except those a cheaper one dominates under the step's own model, stated where they are skipped:

* t: the powers of two dividing the heads, up to two nodes' GPUs; S: every divisor of the GPUs left that is at
  most the layers; d: the largest that divides the batch and fits the GPUs, and every smaller one down to half of
  it (so a batch that the full count does not divide still gets a plan);
* the micro-batch size b in 1, 2, 4, ... 64 dividing the replica's batch;
* 1F1B, ZB-H1 and interleaved 1F1B with v dividing the rank's layers (m a multiple of S); GPipe is skipped, as the
  step's model gives it 1F1B's time and more memory;
* recomputation none, selective, full; ZeRO 1, 2, 3 (ZeRO 0 is skipped: ZeRO 1 takes the same seconds, as a
  reduce-scatter and an all-gather are an all-reduce, with less memory and a shorter update); sequence parallelism
  on wherever t >= 2 (it splits the element-wise work and memory for the same bytes);
* both rank orders.

The plan is the fastest that fits; with nothing that fits, the error names the configuration that needs least
memory and by how much it misses, or the real reason (too few GPUs, a batch no replica count divides).
"""

from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass

import numpy as np

from placement_env.parallelism import Parallelism

from .gpu_model import GIB, GpuCluster
from .model_shape import TransformerShape
from .step import ORDERS, ScaleStep, simulate_scale

MICRO_BATCHES = (1, 2, 4, 8, 16, 32, 64)
VIRTUAL_STAGES = (2, 3, 4, 5, 6, 7, 8)


@dataclass(frozen=True)
class ScalePlan:
    """A plan at scale and how it was found.

    Attributes:
        shape, cluster, global_batch: what was planned: the model, its GPUs, sequences a step.
        parallelism: the plan. ``order``: its rank order. ``micro_batch``: sequences a micro-batch.
        flash_attention, overlap: how its step was simulated (:func:`~.step.simulate_scale`).
        step: its simulated step.
        lower_bound: seconds no plan beats: the step's model FLOPs over every GPU at its peak.
        configurations: those simulated. ``seconds``: the planner's own time.
    """

    shape: TransformerShape
    cluster: GpuCluster
    global_batch: int
    parallelism: Parallelism
    order: str
    micro_batch: int
    flash_attention: bool
    overlap: bool
    step: ScaleStep
    lower_bound: float
    configurations: int
    seconds: float

    @property
    def gap(self) -> float:
        return self.step.seconds / self.lower_bound

    def describe(self) -> str:
        return (f"{self.parallelism.describe()}, micro-batch {self.micro_batch}, ranks {self.order}: "
                f"{self.step.seconds:.3f} s a step ({self.gap:.2f} x the lower bound), peak "
                f"{float(self.step.peak_memory.max()) / GIB:.1f} GiB")


def _powers_of_two(limit: int) -> list[int]:
    return [2**k for k in range(int(math.log2(limit)) + 1)]


def search_scale_plan(shape: TransformerShape, cluster: GpuCluster, global_batch: int, *,
                      tensor: int | None = None, pipeline: int | None = None, data: int | None = None,
                      micro_batch: int | None = None, microbatches: int | None = None, schedule: str | None = None,
                      virtual_stages: int | None = None, recompute: str | None = None, zero: int | None = None,
                      sequence_parallel: bool | None = None, order: str | None = None,
                      flash_attention: bool = False, overlap: bool = False) -> ScalePlan:
    """The fastest plan of ``shape`` on ``cluster`` at ``global_batch`` sequences that fits in memory (module
    docstring); each argument given fixes that decision (``micro_batch``: sequences a micro-batch, b;
    ``microbatches``: micro-batches a replica, m; the two fix the same decision once d is known).

    Raises:
        ValueError: a fixed decision out of range (named), or no plan that fits (the closest is named with the
            memory it lacks, or the reason no plan exists).
    """
    began = time.perf_counter()
    n = cluster.gpus
    if isinstance(global_batch, bool) or not isinstance(global_batch, int) or global_batch < 1:
        raise ValueError(f"global_batch must be an integer >= 1, got {global_batch!r}")
    if order is not None and order not in ORDERS:
        raise ValueError(f"unknown rank order {order!r}; known: {', '.join(ORDERS)}")
    tensors = [tensor] if tensor is not None else tensor_choices(shape, cluster)
    best: tuple[float, Parallelism, str, int, ScaleStep] | None = None
    closest: tuple[float, Parallelism, str, int] | None = None
    tried = 0
    reasons: list[str] = []
    for t in tensors:
        left = n // t
        pipelines = [pipeline] if pipeline is not None else pipeline_choices(shape, left)
        for s in pipelines:
            datas = data_counts(global_batch, n // (t * s), data)
            if not datas and data is not None:
                reasons.append(f"{data} replicas x t{t} x p{s} = {data * t * s} GPUs of {n}" if data * t * s > n
                               else f"{data} replicas do not divide the batch of {global_batch}")
            elif not datas:
                reasons.append(f"t{t} x p{s}: no replica count up to {n // (t * s)} divides the batch of "
                               f"{global_batch}")
            for d in datas:
                sizes = ([micro_batch] if micro_batch is not None else
                         [global_batch // (d * microbatches)] if microbatches is not None
                         and global_batch % (d * microbatches) == 0 else [] if microbatches is not None
                         else MICRO_BATCHES)
                for b in sizes:
                    if (global_batch // d) % b:
                        continue
                    m = global_batch // (d * b)
                    if microbatches is not None and m != microbatches:
                        continue
                    for name, v in schedule_choices(shape, s, m, schedule, virtual_stages):
                        for r, z, sp, o in itertools.product(
                                [recompute] if recompute is not None else ["none", "selective", "full"],
                                [zero] if zero is not None else [1, 2, 3],
                                [sequence_parallel] if sequence_parallel is not None else [t > 1],
                                [order] if order is not None else list(ORDERS)):
                            try:
                                p = Parallelism(pipeline=s, data=d, tensor=t, microbatches=m, schedule=name,
                                                virtual_stages=v, recompute=r, zero=z, sequence_parallel=sp)
                                step = simulate_scale(shape, p, cluster, global_batch, order=o,
                                                      flash_attention=flash_attention, overlap=overlap)
                            except ValueError as error:
                                reasons.append(str(error))
                                continue
                            tried += 1
                            over = float(np.max(step.peak_memory - step.memory))
                            if over > 0:
                                if closest is None or over < closest[0]:
                                    closest = (over, p, o, b)
                                continue
                            if best is None or step.seconds < best[0]:
                                best = (step.seconds, p, o, b, step)
    if best is None:
        if closest is not None:
            over, p, o, b = closest
            raise ValueError(f"no plan of {shape.name} ({shape.parameters / 1e9:.1f}B parameters) fits {n} x "
                             f"{cluster.gpu.name} at a batch of {global_batch}: the closest ({p.describe()}, "
                             f"micro-batch {b}, {o}) needs {over / GIB:.2f} GiB more a GPU")
        raise ValueError(f"no plan of {shape.name} on {n} GPUs at a batch of {global_batch} with the choices given: "
                         + (reasons[0] if reasons else "nothing to try"))
    _, p, o, b, step = best
    bound = step.model_flops / (n * cluster.gpu.peak_flops)
    return ScalePlan(shape, cluster, global_batch, p, o, b, flash_attention, overlap, step, bound, tried,
                     time.perf_counter() - began)


def tensor_choices(shape: TransformerShape, cluster: GpuCluster) -> list[int]:
    """Tensor-parallel ranks to try: the powers of two dividing the heads, up to two nodes' GPUs."""
    return [t for t in _powers_of_two(min(cluster.gpus, 2 * cluster.per_node)) if shape.heads % t == 0]


def pipeline_choices(shape: TransformerShape, gpus: int) -> list[int]:
    """Pipeline ranks to try on ``gpus`` GPUs (those a tensor group leaves): its divisors up to the layers."""
    return [s for s in range(1, min(gpus, shape.layers) + 1) if gpus % s == 0]


def data_counts(batch: int, most: int, fixed: int | None = None) -> list[int]:
    """Replica counts to try: ``fixed``, or those dividing the batch from the largest that fits ``most`` GPUs down
    to half of it."""
    if fixed is not None:
        return [fixed] if fixed <= most and batch % fixed == 0 else []
    counts = [d for d in range(most, 0, -1) if batch % d == 0]
    return [d for d in counts if d * 2 > counts[0]] if counts else []


def schedule_choices(shape: TransformerShape, s: int, m: int, fixed: str | None = None,
                     virtual: int | None = None) -> list[tuple[str, int]]:
    """(schedule, v) pairs to try for S = ``s`` ranks and ``m`` micro-batches (module docstring)."""
    names = [fixed] if fixed is not None else ["1f1b", "zb-h1", "interleaved-1f1b"]
    found = []
    for name in names:
        if name == "interleaved-1f1b":
            if s < 2 or m % s:
                continue
            vs = [virtual] if virtual is not None else [v for v in VIRTUAL_STAGES if shape.layers % (s * v) == 0]
            found += [(name, v) for v in vs if s * v <= shape.layers]
        else:
            found.append((name, 1))
    return found


__all__ = ["MICRO_BATCHES", "ScalePlan", "data_counts", "pipeline_choices", "schedule_choices", "search_scale_plan",
           "tensor_choices"]
