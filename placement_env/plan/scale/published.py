"""Published measured training runs as plans to simulate: :func:`read_published`, :class:`PublishedRun`.

The files are those of ``../shared/data/published`` (one JSON object a source: ``source``, ``setup``, ``rows``);
each row is a model's shape, its tensor x pipeline x data split, its batch and its measured iteration time (or the
throughput it is derived from). What a source does not give (a micro-batch size, virtual stages) is left open:
:attr:`PublishedRun.open` names it, and whoever simulates the run chooses it (the best within memory, as the
authors tuned their runs).
"""

from __future__ import annotations

import itertools
import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from placement_env.parallelism import Parallelism

from .gpu_model import GPUS, GpuCluster
from .model_shape import TransformerShape
from .step import ScaleStep, simulate_scale

SOURCES = {  # file -> (GPU, network bytes/s a GPU, schedule, recomputation, flash attention, vocabulary default,
    #                 ZeRO stage, data-parallel reduction overlapped)
    "vtrain_a100_3.6b_18.4b.json": ("a100-80gb", 800e9 / 8 / 8, "1f1b", "full", False, 51200, 0, False),
    "narayanan2021_table1.json": ("a100-80gb", 8 * 200e9 / 8 / 8, "interleaved-1f1b", "full", False, 51200, 0,
                                  False),
    "megatron_h100_weak_scaling.json": ("h100-80gb", 8 * 400e9 / 8 / 8, None, None, True, 131072, 1, True),
}
"""What each development-set file's ``setup`` says, as the simulator reads it (network: the node's adapters'
Gb/s over its 8 GPUs, in bytes/s; None: not given, left open). The H100 table's setup says the data-parallel
gradient reduce and parameter gather are overlapped: Megatron-LM's distributed optimizer (ZeRO 1) with
``--overlap-grad-reduce --overlap-param-gather``; the A100 runs of 2021-22 reduced after the pipeline's end."""


@dataclass(frozen=True)
class PublishedRun:
    """One measured run.

    Attributes:
        source: its file's name. ``index``: its row.
        shape, cluster: the model and the GPUs.
        tensor, pipeline, data: its split. ``global_batch``: sequences a step.
        micro_batch: sequences a micro-batch (None: not given).
        schedule, recompute: as the source states them (None: not given).
        flash_attention: whether its attention is fused (sources of 2024 on).
        zero: its ZeRO stage. ``overlap``: its data-parallel reduction overlapped with compute.
        measured_seconds: the iteration time, measured or derived from the reported throughput.
    """

    source: str
    index: int
    shape: TransformerShape
    cluster: GpuCluster
    tensor: int
    pipeline: int
    data: int
    global_batch: int
    micro_batch: int | None
    schedule: str | None
    recompute: str | None
    flash_attention: bool
    zero: int
    overlap: bool
    measured_seconds: float

    @property
    def name(self) -> str:
        size = f"{self.micro_batch}" if self.micro_batch else "?"
        return (f"{self.shape.name} t{self.tensor} p{self.pipeline} d{self.data} b{size} on {self.cluster.gpus} "
                f"{self.cluster.gpu.name}")

    @property
    def open(self) -> tuple[str, ...]:
        """The decisions the source leaves open."""
        missing = []
        if self.micro_batch is None:
            missing.append("micro_batch")
        if self.schedule is None or self.schedule == "interleaved-1f1b":
            missing.append("virtual_stages")
        if self.recompute is None:
            missing.append("recompute")
        return tuple(missing)


def read_published(path: str | os.PathLike) -> list[PublishedRun]:
    """The runs of one file of :data:`SOURCES`; ``ValueError`` naming a file or a row it cannot read."""
    path = Path(path)
    if path.name not in SOURCES:
        raise ValueError(f"{path}: not a known source of published runs ({', '.join(SOURCES)})")
    gpu, network, schedule, recompute, flash, vocabulary, zero, overlap = SOURCES[path.name]
    try:
        data = json.loads(path.read_text())
        rows = data["rows"]
        sequence_default = data.get("setup", {}).get("sequence")
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise ValueError(f"{path}: cannot read published runs: {error}") from None
    runs = []
    for i, row in enumerate(rows):
        try:
            shape = TransformerShape(layers=row["layers"], hidden=row["hidden"], heads=row["heads"],
                                     vocabulary=row.get("vocabulary", vocabulary),
                                     sequence=row.get("sequence", sequence_default),
                                     tied_embeddings=True, name=f"GPT {row['parameters_billion']}B")
            seconds = row.get("iteration_seconds", row.get("iteration_seconds_derived"))
            if seconds is None:  # model FLOPs a token (6N plus attention) over the reported throughput
                tokens = row["global_batch"] * shape.sequence
                flops = (6.0 * shape.parameters + 12.0 * shape.layers * shape.hidden * shape.sequence) * tokens
                seconds = flops / (row["gpus"] * row["tflops_per_gpu_reported"] * 1e12)
            runs.append(PublishedRun(path.name, i, shape, GpuCluster(GPUS[gpu], row["gpus"], 8, network),
                                     row["tensor_parallel"], row["pipeline_parallel"], row["data_parallel"],
                                     row["global_batch"], row.get("micro_batch"), schedule, recompute, flash,
                                     zero, overlap, float(seconds)))
        except (KeyError, TypeError, ValueError) as error:
            raise ValueError(f"{path}: row {i}: {error}") from None
    return runs




def published_choices(run: PublishedRun) -> list[Parallelism]:
    """Every parallelism the run may have had: its split as published, each open decision (``open``) over what
    Megatron-LM accepts (micro-batches of 1 to 16 sequences dividing a replica's batch; for an interleaved
    schedule, v with ``L`` a multiple of ``S v`` and ``m`` of ``S``, v = 1 meaning 1F1B; recomputation none,
    selective or full; sequence parallelism on or off where the tensor group has 2 or more ranks)."""
    per_replica = run.global_batch // run.data
    sizes = [run.micro_batch] if run.micro_batch else [b for b in (1, 2, 4, 8, 16) if per_replica % b == 0]
    recomputes = [run.recompute] if run.recompute else ["none", "selective", "full"]
    sequence = [False, True] if run.tensor > 1 and run.recompute is None else [False]
    found = []
    for b in sizes:
        m = per_replica // b
        if run.schedule in (None, "interleaved-1f1b") and run.pipeline > 1:
            schedules = [("1f1b", 1)] + [("interleaved-1f1b", v) for v in range(2, 9)
                                         if run.shape.layers % (run.pipeline * v) == 0 and m % run.pipeline == 0]
        else:
            schedules = [(run.schedule or "1f1b", 1)] if run.schedule != "interleaved-1f1b" else [("1f1b", 1)]
        for (schedule, v), recompute, sp in itertools.product(schedules, recomputes, sequence):
            found.append(Parallelism(pipeline=run.pipeline, data=run.data, tensor=run.tensor, microbatches=m,
                                     schedule=schedule, virtual_stages=v, recompute=recompute, zero=run.zero,
                                     sequence_parallel=sp))
    return found


def simulate_published(run: PublishedRun, order: str = "tp-dp-pp") -> tuple[Parallelism, ScaleStep]:
    """The run simulated with its published configuration: where a decision is open, the fastest choice within
    memory (or, when none fits, the one that needs least memory); ``ValueError`` when no choice is valid."""
    best: tuple[float, Parallelism, ScaleStep] | None = None
    for parallelism in published_choices(run):
        step = simulate_scale(run.shape, parallelism, run.cluster, run.global_batch, order=order,
                              flash_attention=run.flash_attention, overlap=run.overlap)
        key = step.seconds if step.fits else 1e9 + float(np.max(step.peak_memory))
        if best is None or key < best[0]:
            best = (key, parallelism, step)
    if best is None:
        raise ValueError(f"{run.name}: no valid configuration")
    return best[1], best[2]


__all__ = ["SOURCES", "PublishedRun", "published_choices", "read_published", "simulate_published"]
