"""What the pipeline runtime costs beyond the ops' own work, measured on local workers: :func:`calibrate_pipeline`.

``benchmarks/pipeline_overhead.py`` found two costs no profiled op holds (``docs/simulator.md``): the pipeline
runtime's own work per op call and micro-batch (a stage's traced module, the schedule, the loss per micro-batch:
8-26 us per op call on one stage), and the waits of two processes sending to each other while both cores compute.
This module measures both on a calibration model of its own (:func:`calibration_model`, 16 blocks of a linear
layer and a ReLU, none of the models it is then applied to) and gives them to the simulator as inputs, its
semantics unchanged:

* ``call_seconds``: (runner - eager) at m = 8 minus the same at m = 1, per op call of the 7 extra micro-batches,
  from one-stage runs of the calibration model (``run_pipeline``) and eager PyTorch in this process;
* ``message_seconds``: with the call overhead applied, the latency that added to every link makes the simulated
  two-stage GPipe step at m = 8 equal the measured one (bisection: the step grows with the latency).

:meth:`PipelineOverheads.applied` adds ``call_seconds`` to every computing op's cost and fixed cost (a fixed cost is
paid by each micro-batch: spec section 3a) and ``message_seconds`` to every link's latency.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch
from torch import nn

from placement_env.cluster import Cluster
from placement_env.graph.model import ComputationGraph
from placement_env.importers.pytorch import from_torch
from placement_env.plan.pipeline_plan import pipeline_plan

from .pipeline_runner import run_pipeline

CALIBRATION_MICROBATCHES = 8


@dataclass(frozen=True)
class PipelineOverheads:
    """The pipeline runtime's costs (module docstring), in seconds."""

    call_seconds: float
    message_seconds: float

    def applied(self, graph: ComputationGraph, cluster: Cluster) -> tuple[ComputationGraph, Cluster]:
        """``graph`` with ``call_seconds`` added to each computing op's cost and fixed cost (ops of zero cost, the
        inputs and shared parameters, are not called), and ``cluster`` with ``message_seconds`` added to every
        link's latency."""
        nodes = [node if node.cost <= 0 else replace(node, cost=node.cost + self.call_seconds,
                                                         fixed_cost=(node.fixed_cost or 0.0) + self.call_seconds)
                 for node in graph.nodes]
        calibrated = ComputationGraph(nodes, graph.edges(), name=graph.name, batch=graph.batch)
        return calibrated, Cluster(cluster.devices, cluster.bandwidth, cluster.latency + self.message_seconds,
                                   cluster.name)


def calibration_model() -> tuple[nn.Module, torch.Tensor]:
    """The calibration model and its input: 16 blocks of ``Linear(32, 32)`` and ``ReLU``, a batch of 8."""
    torch.manual_seed(0)
    blocks = [nn.Sequential(nn.Linear(32, 32), nn.ReLU()) for _ in range(16)]
    return nn.Sequential(*blocks).train(), torch.randn(8, 32)


def eager_seconds(model: nn.Module, inputs: tuple, kwargs: dict, microbatches: int, steps: int) -> float:
    """The median of ``steps`` eager steps of ``model`` in this process: ``microbatches`` forward and backward
    passes of a micro-batch (the first ``batch / microbatches`` rows of each input), the outputs (or their
    ``logits``) summed."""
    batch = next(x.shape[0] for x in [*inputs, *kwargs.values()] if isinstance(x, torch.Tensor))
    size = batch // microbatches
    args = tuple(x[:size] for x in inputs)
    named = {k: v[:size] for k, v in kwargs.items()}
    times = []
    for _ in range(steps + 1):
        began = time.perf_counter()
        for _ in range(microbatches):
            out: Any = model(*args, **named)
            (out.logits if hasattr(out, "logits") else out).sum().backward()
        times.append(time.perf_counter() - began)
    model.zero_grad(set_to_none=True)
    return float(np.median(times[1:]))


def calibrate_pipeline(cluster: Cluster, rounds: int = 3, steps: int = 5) -> PipelineOverheads:
    """The :class:`PipelineOverheads` of ``run_pipeline`` on local workers (``cluster``: ``local_cluster(2)``),
    each measured value the fastest of ``rounds`` (module docstring). Run it with ``torch.set_num_threads(1)``,
    as the workers run."""
    model, x = calibration_model()
    graph = from_torch(model, (x,), profile=True, repeats=10, colocate_modules=1, name="calibration")
    m = CALIBRATION_MICROBATCHES
    one = {k: pipeline_plan(graph, np.zeros(graph.num_nodes, dtype=np.int64), cluster, microbatches=k,
                            schedule="gpipe") for k in (1, m)}
    second_half = [name.startswith("module:") and int(name.split(":")[1]) >= 8 for name in graph.unit_names]
    placement = graph.expand_unit_placement(np.array(second_half, dtype=np.int64))  # blocks 8-15 on device 1
    runner: dict[Any, list[float]] = {key: [] for key in (1, m, "two")}
    eager: dict[int, list[float]] = {1: [], m: []}
    for _ in range(rounds):
        for k in (1, m):
            runner[k].append(float(np.median(run_pipeline(model, (x,), one[k], steps=steps).steps[1:])))
            eager[k].append(eager_seconds(model, (x,), {}, k, steps))
        two = pipeline_plan(graph, placement, cluster, microbatches=m, schedule="gpipe")
        runner["two"].append(float(np.median(run_pipeline(model, (x,), two, steps=steps).steps[1:])))
    extra = (min(runner[m]) - min(eager[m])) - (min(runner[1]) - min(eager[1]))
    calls = sum(1 for node in graph.nodes if node.cost > 0)
    call = max(extra, 0.0) / ((m - 1) * calls)
    return PipelineOverheads(call, message_latency(graph, placement, cluster, call, min(runner["two"]), m))


def message_latency(graph: ComputationGraph, placement: np.ndarray, cluster: Cluster, call_seconds: float,
                    measured_seconds: float, microbatches: int) -> float:
    """The latency (s) that, added to every link of ``cluster`` with ``call_seconds`` per op call applied, makes
    the simulated GPipe step of ``placement`` equal ``measured_seconds`` (0 when it is already slower: the
    simulated step only grows with the latency, so a bisection finds it)."""
    def simulated(latency: float) -> float:
        g, c = PipelineOverheads(call_seconds, latency).applied(graph, cluster)
        return pipeline_plan(g, placement, c, microbatches=microbatches, schedule="gpipe").simulated_step_seconds

    low, high = 0.0, measured_seconds
    if simulated(low) >= measured_seconds:
        return 0.0
    for _ in range(40):
        middle = (low + high) / 2
        low, high = (middle, high) if simulated(middle) < measured_seconds else (low, middle)
    return (low + high) / 2
