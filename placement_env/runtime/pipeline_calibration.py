"""What the pipeline runtime costs beyond the ops' own work, measured on local workers.

``benchmarks/pipeline_overhead.py`` found two costs no profiled op holds (``docs/simulator.md``): the pipeline
runtime's own work per op call and micro-batch (a stage's traced module, the schedule, the loss per micro-batch:
8-26 us per op call on one stage), and the waits of two processes sending to each other while both cores compute.
Both are given to the simulator as inputs, its semantics unchanged (:meth:`PipelineOverheads.applied`). Two ways
to measure them:

* :func:`calibrate_pipeline`, on a calibration model of its own (:func:`calibration_model`, 16 blocks of a linear
  layer and a ReLU, none of the models it is then applied to):

  - ``call_seconds``: (runner - eager) at m = 8 minus the same at m = 1, per op call of the 7 extra
    micro-batches, from one-stage runs (``run_pipeline``) and eager PyTorch in this process;
  - ``message_seconds``: with the call overhead applied, the latency that added to every link makes the
    simulated two-stage GPipe step at m = 8 equal the measured one (:func:`message_latency`).

* :func:`calibrate_model`, on the model itself, from runs that are none of the plans it then predicts:

  - ``call_seconds`` and ``step_seconds``: the line through (runner - eager) of one-stage runs at m in
    {1, 2, 4, 8} (:func:`runtime_overheads`): its slope per op call, its intercept once a step;
  - ``tensor_seconds``: with those applied, the time each tensor that crosses between stages costs its sender
    and its receiver per micro-batch (gloo's sends and receives while both cores compute), fitted so that the
    simulated step of one two-stage plan at a small m equals the measured one (:func:`tensor_cost`).

:meth:`PipelineOverheads.applied` adds ``call_seconds`` to every computing op's cost and fixed cost (a fixed cost is
paid by each micro-batch: spec section 3a), ``step_seconds`` to the cost of the first computing op (paid once a
step), ``tensor_seconds`` to the cost and fixed cost of each op, per tensor it sends to or receives from another
device under the placement (parameters excepted: the runtime keeps a copy on each stage that reads one), and
``message_seconds`` to every link's latency.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
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
    message_seconds: float = 0.0
    step_seconds: float = 0.0
    tensor_seconds: float = 0.0

    def applied(self, graph: ComputationGraph, cluster: Cluster,
                placement: Sequence[int] | np.ndarray | None = None) -> tuple[ComputationGraph, Cluster]:
        """``graph`` and ``cluster`` with the overheads added (module docstring; ops of zero cost, the inputs and
        shared parameters, are not called). ``placement`` (a device per op) is needed when ``tensor_seconds`` is
        not 0.

        Raises:
            ValueError: ``tensor_seconds`` without a placement, or a placement of the wrong length.
        """
        extra = np.where(graph.cost > 0, self.call_seconds, 0.0)
        if self.tensor_seconds:
            extra += self.tensor_seconds * crossing_tensors(graph, placement)
        once = np.zeros(graph.num_nodes)
        computing = np.flatnonzero(graph.cost > 0)
        if len(computing):
            once[computing[np.argmin(graph.topo_index[computing])]] = self.step_seconds
        nodes = [node if extra[i] == 0 and once[i] == 0 else
                 replace(node, cost=node.cost + extra[i] + once[i], fixed_cost=(node.fixed_cost or 0.0) + extra[i])
                 for i, node in enumerate(graph.nodes)]
        calibrated = ComputationGraph(nodes, graph.edges(), name=graph.name, batch=graph.batch)
        return calibrated, Cluster(cluster.devices, cluster.bandwidth, cluster.latency + self.message_seconds,
                                   cluster.name)


def crossing_tensors(graph: ComputationGraph, placement: Sequence[int] | np.ndarray | None) -> np.ndarray:
    """Per op, the tensors it sends to or receives from another device under ``placement``: one per other device
    its output goes to, one per op on another device it reads; parameters (``op == "parameter"``) send nothing.

    Raises:
        ValueError: no placement, or one of the wrong length.
    """
    if placement is None or len(placement) != graph.num_nodes:
        raise ValueError(f"a tensor cost needs a device per op of graph {graph.name!r} ({graph.num_nodes} ops)")
    p = np.asarray(placement)
    index = {node.id: i for i, node in enumerate(graph.nodes)}
    count = np.zeros(graph.num_nodes)
    sent: set[tuple[int, int]] = set()
    for edge in graph.edges():
        u, v = index[edge.src], index[edge.dst]
        if p[u] == p[v] or graph.nodes[u].op == "parameter":
            continue
        count[v] += 1
        if (u, int(p[v])) not in sent:
            sent.add((u, int(p[v])))
            count[u] += 1
    return count


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
    the simulated GPipe step of ``placement`` equal ``measured_seconds`` (0 when it is already slower)."""
    def simulated(latency: float) -> float:
        g, c = PipelineOverheads(call_seconds, latency).applied(graph, cluster)
        return pipeline_plan(g, placement, c, microbatches=microbatches, schedule="gpipe").simulated_step_seconds

    return fitted(simulated, measured_seconds, measured_seconds)


def fitted(simulated: Callable[[float], float], measured_seconds: float, high: float) -> float:
    """The ``x`` in [0, ``high``] at which ``simulated(x)``, a step that only grows with ``x``, equals
    ``measured_seconds`` (bisection, 40 halvings); 0 when ``simulated(0)`` is already at least that."""
    low = 0.0
    if simulated(low) >= measured_seconds:
        return 0.0
    for _ in range(40):
        middle = (low + high) / 2
        low, high = (middle, high) if simulated(middle) < measured_seconds else (low, middle)
    return (low + high) / 2


def runtime_overheads(model: nn.Module, inputs: tuple, kwargs: dict, graph: ComputationGraph, cluster: Cluster,
                      *, rounds: int = 3, steps: int = 5,
                      microbatches: Sequence[int] = (1, 2, 4, 8)) -> tuple[float, float]:
    """``(call_seconds, step_seconds)`` of ``run_pipeline`` on ``model`` (``graph``: its graph): the line through
    (one-stage runner - eager) over ``microbatches``, its slope per computing op of ``graph`` and its intercept
    (each at least 0; each measured value the fastest of ``rounds`` interleaved rounds of ``steps`` steps)."""
    one = {m: pipeline_plan(graph, np.zeros(graph.num_nodes, dtype=np.int64), cluster, microbatches=m,
                            schedule="gpipe") for m in microbatches}
    runner: dict[int, list[float]] = {m: [] for m in microbatches}
    eager: dict[int, list[float]] = {m: [] for m in microbatches}
    for _ in range(rounds):
        for m in microbatches:
            run = run_pipeline(model, inputs, one[m], steps=steps, example_kwargs=kwargs)
            runner[m].append(float(np.median(run.steps[1:])))
            eager[m].append(eager_seconds(model, inputs, kwargs, m, steps))
    extra = [min(runner[m]) - min(eager[m]) for m in microbatches]
    slope, intercept = np.polyfit(list(microbatches), extra, 1)
    calls = int(np.count_nonzero(graph.cost > 0))
    return max(float(slope), 0.0) / calls, max(float(intercept), 0.0)


def tensor_cost(graph: ComputationGraph, placement: np.ndarray, cluster: Cluster, overheads: PipelineOverheads,
                measured_seconds: float, microbatches: int, schedule: str) -> float:
    """The ``tensor_seconds`` that, with ``overheads`` applied, makes the simulated step of ``placement`` equal
    ``measured_seconds`` (0 when it is already slower)."""
    def simulated(seconds: float) -> float:
        g, c = replace(overheads, tensor_seconds=seconds).applied(graph, cluster, placement)
        return pipeline_plan(g, placement, c, microbatches=microbatches, schedule=schedule).simulated_step_seconds

    return fitted(simulated, measured_seconds, measured_seconds)


def calibrate_model(model: nn.Module, inputs: tuple, kwargs: dict, graph: ComputationGraph,
                    placement: np.ndarray, cluster: Cluster, *, rounds: int = 3, steps: int = 5,
                    microbatches: int = 2, schedule: str = "gpipe") -> PipelineOverheads:
    """The :class:`PipelineOverheads` of ``run_pipeline`` on ``model`` itself (module docstring): the runtime's
    overheads from one-stage runs (:func:`runtime_overheads`), then the tensor cost fitted to the two-stage plan
    of ``placement`` run at ``microbatches`` under ``schedule`` (the fastest of ``rounds``). Run it with
    ``torch.set_num_threads(1)``, as the workers run."""
    call, step = runtime_overheads(model, inputs, kwargs, graph, cluster, rounds=rounds, steps=steps)
    plan = pipeline_plan(graph, placement, cluster, microbatches=microbatches, schedule=schedule)
    measured = min(float(np.median(run_pipeline(model, inputs, plan, steps=steps, example_kwargs=kwargs).steps[1:]))
                   for _ in range(rounds))
    overheads = PipelineOverheads(call, step_seconds=step)
    return replace(overheads, tensor_seconds=tensor_cost(graph, placement, cluster, overheads, measured,
                                                         microbatches, schedule))
