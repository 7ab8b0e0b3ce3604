"""What the pipeline runtime costs beyond the ops' own work, measured on local workers.

``benchmarks/pipeline_overhead.py`` found two costs no profiled op holds (``docs/simulator.md``): the pipeline
runtime's own work per op call and micro-batch (a stage's traced module, the schedule, the loss per micro-batch:
8-26 us per op call on one stage), and the waits of two processes sending to each other while both cores compute.
Both are given to the simulator as inputs, its semantics unchanged (:meth:`RuntimeOverheads.applied`). Two ways
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
    simulated step of one two-stage plan at a small m equals the measured one (:func:`tensor_cost`);
  - or, given two micro-batch counts (``microbatches=(2, 8)``), ``tensor_seconds`` and ``step_seconds`` together,
    so that the simulated steps of the two-stage plan at both equal the measured ones
    (:func:`tensor_and_step_cost`): a cost per micro-batch and one per step of the pipelined run, which one run
    cannot tell apart (the one-stage intercept is then not used).

What each overhead adds to the simulator's inputs: :class:`~placement_env.runtime.runtime_overheads.RuntimeOverheads`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import torch
from torch import nn

from placement_env.cluster import Cluster
from placement_env.graph.model import ComputationGraph
from placement_env.importers.pytorch import from_torch
from placement_env.plan.pipeline_plan import plan_from_placement

from .pipeline_runner import run_pipeline
from .runtime_overheads import RuntimeOverheads, eager_seconds, fitted

CALIBRATION_MICROBATCHES = 8


def calibration_model() -> tuple[nn.Module, torch.Tensor]:
    """The calibration model and its input: 16 blocks of ``Linear(32, 32)`` and ``ReLU``, a batch of 8."""
    torch.manual_seed(0)
    blocks = [nn.Sequential(nn.Linear(32, 32), nn.ReLU()) for _ in range(16)]
    return nn.Sequential(*blocks).train(), torch.randn(8, 32)


def calibrate_pipeline(cluster: Cluster, rounds: int = 3, steps: int = 5) -> RuntimeOverheads:
    """The :class:`RuntimeOverheads` of ``run_pipeline`` on local workers (``cluster``: ``local_cluster(2)``),
    each measured value the fastest of ``rounds`` (module docstring). Run it with ``torch.set_num_threads(1)``,
    as the workers run."""
    model, x = calibration_model()
    graph = from_torch(model, (x,), profile=True, repeats=10, colocate_modules=1, name="calibration")
    m = CALIBRATION_MICROBATCHES
    one = {k: plan_from_placement(graph, np.zeros(graph.num_nodes, dtype=np.int64), cluster, microbatches=k,
                            schedule="gpipe") for k in (1, m)}
    second_half = [name.startswith("module:") and int(name.split(":")[1]) >= 8 for name in graph.unit_names]
    placement = graph.expand_unit_placement(np.array(second_half, dtype=np.int64))  # blocks 8-15 on device 1
    runner: dict[Any, list[float]] = {key: [] for key in (1, m, "two")}
    eager: dict[int, list[float]] = {1: [], m: []}
    for _ in range(rounds):
        for k in (1, m):
            runner[k].append(float(np.median(run_pipeline(model, (x,), one[k], steps=steps).steps[1:])))
            eager[k].append(eager_seconds(model, (x,), {}, k, steps))
        two = plan_from_placement(graph, placement, cluster, microbatches=m, schedule="gpipe")
        runner["two"].append(float(np.median(run_pipeline(model, (x,), two, steps=steps).steps[1:])))
    extra = (min(runner[m]) - min(eager[m])) - (min(runner[1]) - min(eager[1]))
    calls = sum(1 for node in graph.nodes if node.cost > 0)
    call = max(extra, 0.0) / ((m - 1) * calls)
    return RuntimeOverheads(call, message_latency(graph, placement, cluster, call, min(runner["two"]), m))


def message_latency(graph: ComputationGraph, placement: np.ndarray, cluster: Cluster, call_seconds: float,
                    measured_seconds: float, microbatches: int) -> float:
    """The latency (s) that, added to every link of ``cluster`` with ``call_seconds`` per op call applied, makes
    the simulated GPipe step of ``placement`` equal ``measured_seconds`` (0 when it is already slower)."""
    def simulated(latency: float) -> float:
        g, c = RuntimeOverheads(call_seconds, latency).applied(graph, cluster)
        return plan_from_placement(g, placement, c, microbatches=microbatches, schedule="gpipe").simulated_step_seconds

    return fitted(simulated, measured_seconds, measured_seconds)


def runtime_overheads(model: nn.Module, inputs: tuple, kwargs: dict, graph: ComputationGraph, cluster: Cluster,
                      *, rounds: int = 3, steps: int = 5, microbatches: Sequence[int] = (1, 2, 4, 8),
                      on_round: Callable[[], None] | None = None, with_rounds: bool = False) -> Any:
    """``(call_seconds, step_seconds)`` of ``run_pipeline`` on ``model`` (``graph``: its graph): the line through
    (one-stage runner - eager) over ``microbatches``, its slope per computing op of ``graph`` and its intercept
    (each at least 0; each measured value the fastest of ``rounds`` interleaved rounds of ``steps`` steps).
    ``on_round`` is called after the first round; ``with_rounds`` adds each run's measurements as a third value
    (``{m: [seconds a round]}``)."""
    one = {m: plan_from_placement(graph, np.zeros(graph.num_nodes, dtype=np.int64), cluster, microbatches=m,
                            schedule="gpipe") for m in microbatches}
    runner: dict[int, list[float]] = {m: [] for m in microbatches}
    eager: dict[int, list[float]] = {m: [] for m in microbatches}
    for _ in range(rounds):
        for m in microbatches:
            run = run_pipeline(model, inputs, one[m], steps=steps, example_kwargs=kwargs)
            runner[m].append(float(np.median(run.steps[1:])))
            eager[m].append(eager_seconds(model, inputs, kwargs, m, steps))
        if on_round is not None and len(runner[microbatches[0]]) == 1:
            on_round()
    extra = [min(runner[m]) - min(eager[m]) for m in microbatches]
    slope, intercept = np.polyfit(list(microbatches), extra, 1)
    calls = int(np.count_nonzero(graph.cost > 0))
    found = (max(float(slope), 0.0) / calls, max(float(intercept), 0.0))
    if with_rounds:
        return (*found, runner)
    return found


def spread(rounds: Sequence[float]) -> float:
    """How far a run's repeated measurements disagree: the slowest over the fastest, less 1."""
    return max(rounds) / min(rounds) - 1


def uncertainty(rounds: Sequence[float]) -> float:
    """How far a run's measured step (the fastest round's) may be off: the second fastest over the fastest, less 1
    (a machine's noise only slows a round, so the two fastest agree once the minimum is found; a slow round beside
    them does not make the minimum less sure). Infinite with fewer than two rounds."""
    if len(rounds) < 2:
        return float("inf")
    first, second = sorted(rounds)[:2]
    return second / first - 1


def tensor_cost(graph: ComputationGraph, placement: np.ndarray, cluster: Cluster, overheads: RuntimeOverheads,
                measured_seconds: float, microbatches: int, schedule: str) -> float:
    """The ``tensor_seconds`` that, with ``overheads`` applied, makes the simulated step of ``placement`` equal
    ``measured_seconds`` (0 when it is already slower)."""
    def simulated(seconds: float) -> float:
        g, c = replace(overheads, tensor_seconds=seconds).applied(graph, cluster, placement)
        return plan_from_placement(g, placement, c, microbatches=microbatches, schedule=schedule).simulated_step_seconds

    return fitted(simulated, measured_seconds, measured_seconds)


def tensor_and_step_cost(graph: ComputationGraph, placement: np.ndarray, cluster: Cluster,
                         overheads: RuntimeOverheads, measured: dict[int, float], schedule: str) -> tuple[float, float]:
    """``(tensor_seconds, step_seconds)`` that, with ``overheads``' call cost applied, make the simulated steps of
    ``placement`` at the two micro-batch counts of ``measured`` (``{m: seconds}``) equal the measured ones.

    For each ``step_seconds`` y up to the y at which the step cost alone (x = 0) simulates the smaller m as
    measured, the tensor cost x(y) is fitted at the smaller m (:func:`tensor_cost`); the simulated step at the larger
    m then only falls as y grows (a per-step cost replaces a per-micro-batch one), so y is found by bisection: 0
    when even y = 0 simulates the larger m no slower than measured (its costs then grow with m at least as fast as
    measured), the largest y (x = 0) when even that simulates it slower.

    Raises:
        ValueError: ``measured`` not two distinct micro-batch counts.
    """
    if len(measured) != 2:
        raise ValueError(f"a two-point fit needs two micro-batch counts, got {sorted(measured)}")
    low_m, high_m = sorted(measured)

    def at(y: float) -> tuple[float, float]:
        base = replace(overheads, step_seconds=y, tensor_seconds=0.0)
        x = tensor_cost(graph, placement, cluster, base, measured[low_m], low_m, schedule)
        g, c = replace(base, tensor_seconds=x).applied(graph, cluster, placement)
        return x, plan_from_placement(g, placement, c, microbatches=high_m, schedule=schedule).simulated_step_seconds

    def step_alone(y: float) -> float:
        g, c = replace(overheads, step_seconds=y, tensor_seconds=0.0).applied(graph, cluster, placement)
        return plan_from_placement(g, placement, c, microbatches=low_m, schedule=schedule).simulated_step_seconds

    low, high = 0.0, fitted(step_alone, measured[low_m], measured[low_m])
    x0, simulated0 = at(low)
    if simulated0 <= measured[high_m]:
        return x0, 0.0
    x1, simulated1 = at(high)
    if simulated1 >= measured[high_m]:
        return x1, high
    for _ in range(40):
        middle = (low + high) / 2
        low, high = (middle, high) if at(middle)[1] > measured[high_m] else (low, middle)
    y = (low + high) / 2
    return at(y)[0], y


MAX_CALIBRATION_SPREAD = 0.25
"""The most the two fastest of a calibration's repeated measurements of one run may disagree (:func:`uncertainty`):
beyond it the machine was too busy for the fastest to stand for the model, and the calibration is refused."""


def calibrate_model(model: nn.Module, inputs: tuple, kwargs: dict, graph: ComputationGraph,
                    placement: np.ndarray, cluster: Cluster, *, rounds: int = 3, steps: int = 5,
                    microbatches: int | tuple[int, int] = 2, schedule: str = "gpipe",
                    on_progress: Callable[[str], None] | None = None) -> RuntimeOverheads:
    """The :class:`RuntimeOverheads` of ``run_pipeline`` on ``model`` itself (module docstring): the runtime's
    overheads from one-stage runs (:func:`runtime_overheads`), then the tensor cost fitted to the two-stage plan
    of ``placement`` run at ``microbatches`` under ``schedule`` (the fastest of ``rounds``); given two counts
    (``(2, 8)``), the tensor cost and the step's cost fitted to that plan run at both
    (:func:`tensor_and_step_cost`). Run it with ``torch.set_num_threads(1)``, as the workers run.

    Its time: ``rounds`` rounds of five runs (``run_pipeline`` at m = 1, 2, 4, 8 on one stage and the two-stage
    plan, or six with two counts, each ``steps`` steps, beside eager steps); ``on_progress`` hears, after the first
    round, how long that round took and so about how long the whole calibration takes on this machine.

    Returns:
        The overheads, with ``spread``: how far the repeated measurements disagreed (the largest :func:`spread`,
        slowest over fastest less 1, of each run's ``rounds`` measurements).

    Raises:
        ValueError: before anything is measured, ``rounds`` below 1, ``steps`` below 2 (the first step is a
            warm-up), ``microbatches`` not one count or two distinct counts, or a placement the plan refuses (not
            contiguous, a module split, a bad micro-batch count or schedule); after, a run whose two fastest
            measurements disagree by more than :data:`MAX_CALIBRATION_SPREAD` (:func:`uncertainty`).
    """
    for name, value, least in (("rounds", rounds, 1), ("steps", steps, 2)):
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise ValueError(f"{name} must be an integer >= {least}, got {value!r}")
    counts = (microbatches,) if isinstance(microbatches, int) else tuple(microbatches)
    if len(counts) not in (1, 2) or len(set(counts)) != len(counts):
        raise ValueError(f"microbatches must be a count or two distinct counts, got {microbatches!r}")
    plans = {m: plan_from_placement(graph, placement, cluster, microbatches=m, schedule=schedule) for m in counts}
    began = time.perf_counter()

    def first_round_done() -> None:
        if on_progress is not None:
            took = time.perf_counter() - began
            on_progress(f"calibrate_model: round 1 of {rounds} took {took:.0f} s; about {took * rounds:.0f} s in "
                        "all on this machine")

    call, step, one_stage = runtime_overheads(model, inputs, kwargs, graph, cluster, rounds=rounds, steps=steps,
                                              on_round=first_round_done, with_rounds=True)
    two: dict[int, list[float]] = {m: [] for m in counts}
    for _ in range(rounds):  # interleaved, as the one-stage runs
        for m, plan in plans.items():
            two[m].append(float(np.median(run_pipeline(model, inputs, plan, steps=steps,
                                                       example_kwargs=kwargs).steps[1:])))
    runs = [*one_stage.values(), *two.values()]
    unsure = max(uncertainty(times) for times in runs) if rounds >= 2 else 0.0  # one round: nothing to judge
    if unsure > MAX_CALIBRATION_SPREAD:
        raise ValueError(f"the two fastest of the calibration's repeated measurements of a run disagree by "
                         f"{unsure:.0%}, more than the {MAX_CALIBRATION_SPREAD:.0%} it allows: the machine is too busy "
                         "to calibrate on; run it again when it is quiet, or with more rounds")
    overheads = RuntimeOverheads(call, step_seconds=step, spread=max(spread(times) for times in runs))
    if len(counts) == 2:
        tensor, per_step = tensor_and_step_cost(graph, placement, cluster, overheads,
                                                {m: min(times) for m, times in two.items()}, schedule)
        return replace(overheads, tensor_seconds=tensor, step_seconds=per_step)
    return replace(overheads, tensor_seconds=tensor_cost(graph, placement, cluster, overheads, min(two[counts[0]]),
                                                         counts[0], schedule))
