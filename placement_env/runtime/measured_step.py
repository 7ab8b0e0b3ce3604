"""Real training steps of a placement: :func:`measure_step`.

Two ways to run the placed step (forward, then backward with the gradient of the sum of the model's outputs;
no optimizer update):

* **CUDA** (``devices`` given and present): :func:`~placement_env.runtime.placed_program.placed_module` on
  those devices; the step time between ``torch.cuda.synchronize()`` calls, the peak from
  ``torch.cuda.max_memory_allocated`` per device, the busy time the sum of the kernels the profiler records on
  each device.
* **Local workers** (otherwise): device ``d`` is worker process ``d`` with one CPU thread
  (:mod:`~placement_env.runtime.local_workers`), and every tensor the simulator transfers is sent between the
  processes. The workers execute the *training graph* (``docs/spec/simulator.md`` section 5) op by op:

  - every forward op is its own autograd segment (its inputs from other segments become detached leaves),
    except ops that alias their first input (views, ``getitem``, in-place ops; colocated with it), which join
    that input's segment; a segment's backward runs ``torch.autograd.backward`` on its outputs with the
    gradients its consumers sent, and sends its inputs' gradients back, one message per (tensor, consuming
    segment): the simulator's backward edges ``v' -> u'``;
  - a value goes once to each other device with consumers (one transfer per (tensor, destination)); a
    parameter with a ``parameter`` op lives on that op's device, is sent to its remote readers and gets their
    gradients back;
  - each worker runs its tasks in one global order: a topological order of the tasks that follows the
    simulated start times (the simulator's schedule of this placement on ``cluster``). Sends are
    non-blocking and every wait is for a task earlier in that order, so the run cannot deadlock.

  ``busy`` is the time a worker spends in its ops (not waiting for messages); ``seconds`` the time from the
  common start (a barrier) to the end of the last worker; ``peak_memory`` the parameters a worker holds plus
  the high-water mark of the tensors it allocates during one extra, untimed step (a
  ``TorchDispatchMode`` that counts each new storage until it is freed): comparable to
  ``simulate(..., param_factor=2.0)`` (weights and their gradients, no optimizer state).
"""

from __future__ import annotations

import statistics
import time
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.utils._pytree as pytree
from torch.profiler import ProfilerActivity, profile

from placement_env.cluster import Cluster, Device
from placement_env.graph.model import ComputationGraph
from placement_env.importers.pytorch import trace_model
from placement_env.plan.module_tree import checked_device_placement
from placement_env.sim.simulator import simulate

from .local_workers import check_local_workers, run_on_local_workers
from .placed_program import _check_matches, placed_module
from .step_worker import run_worker
from .worker_tasks import worker_tasks

NOMINAL_BANDWIDTH = 1e9  # bytes/s of the cluster that orders a step when none is given
NOMINAL_LATENCY = 1e-4  # s


@dataclass(frozen=True)
class MeasuredStep:
    """What :func:`measure_step` measured.

    Attributes:
        seconds: the median step time, seconds.
        steps: every timed step, seconds.
        busy: seconds each device spends in its ops (median over the timed steps), one entry per device index up
            to the largest the placement uses (0 for one it leaves idle).
        peak_memory: bytes per device (parameters held plus the step's high-water mark of allocations), indexed
            as ``busy``.
        backend: ``"cuda"`` or ``"local-workers"``.
        gradients: each trainable parameter's gradient after the last step, by qualified name, as the device
            holding it has it (for checking that the placed step computes the model's gradients).
    """

    seconds: float
    steps: tuple[float, ...]
    busy: np.ndarray
    peak_memory: np.ndarray
    backend: str
    gradients: dict[str, np.ndarray]

    def to_dict(self) -> dict:
        return {"seconds": self.seconds, "steps": list(self.steps), "busy": [float(x) for x in self.busy],
                "peak_memory": [int(x) for x in self.peak_memory], "backend": self.backend}


def nominal_cluster(num_devices: int) -> Cluster:
    """The cluster that orders a measured step when none is given: ``num_devices`` devices of speed 1.0 (costs in
    this machine's seconds) with ample memory, linked at :data:`NOMINAL_BANDWIDTH` and :data:`NOMINAL_LATENCY`."""
    devices = [Device(f"local:{d}", 1.0, 1 << 50) for d in range(num_devices)]
    return Cluster(devices, np.full((num_devices, num_devices), NOMINAL_BANDWIDTH),
                   np.full((num_devices, num_devices), NOMINAL_LATENCY), name=f"nominal-{num_devices}")


def measure_step(model: Any, example_inputs: Sequence[Any] | Any, graph: ComputationGraph,
                 placement: Sequence[int] | np.ndarray, devices: Sequence[Any] | None = None, *,
                 repeats: int = 5, example_kwargs: Mapping[str, Any] | None = None,
                 cluster: Cluster | None = None) -> MeasuredStep:
    """Run ``repeats`` real training steps of ``model`` placed by ``placement`` (see the module docstring).

    Args:
        model: the ``nn.Module`` ``graph`` was imported from; for local workers it is pickled to them, so its
            class must be importable (defined at module level).
        example_inputs, example_kwargs: as given to ``from_torch``.
        graph: its *training* graph (``from_torch(..., training=True)``, the default).
        placement: a device index per op of ``graph``.
        devices: CUDA devices (``["cuda:0", "cuda:1"]``) to run on when present; ``None``, or devices this
            machine lacks (with a ``RuntimeWarning``), runs local worker processes, one per device the placement
            uses (a placement on devices 3 and 9 starts two).
        repeats: timed steps (>= 1) after one warm-up step; the median is reported.
        cluster: the cluster whose simulated schedule orders the local workers' ops (default
            :func:`nominal_cluster`; :func:`~placement_env.runtime.local_cluster.local_cluster` for the measured
            one).

    Returns:
        A :class:`MeasuredStep`.

    Raises:
        ValueError: a placement of the wrong length, naming a device ``devices`` or ``cluster`` lacks, or
            splitting a colocation group; a forward-only graph; a model that does not match the graph (the first
            op that differs is named); bad ``repeats``.
        RuntimeError: a local worker failed (its error is quoted).
    Warns:
        RuntimeWarning: more local devices than cores (the workers' timings then share cores).
    """
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"repeats must be an integer >= 1, got {repeats!r}")
    p = checked_device_placement(graph, placement)
    if not any(node.phase == "backward" for node in graph.nodes):
        raise ValueError(f"graph {graph.name!r} has no backward ops: measure_step runs training steps, import the "
                         "model with from_torch(..., training=True)")
    num_devices = int(p.max()) + 1
    if devices is not None:
        devices = [torch.device(d) for d in devices]
        if num_devices > len(devices):
            bad = int(np.argmax(p >= len(devices)))
            raise ValueError(f"op {graph.nodes[bad].id!r} is placed on device {int(p[bad])}, but only "
                             f"{len(devices)} device(s) are given")
        num_devices = len(devices)
    gm, _, _ = trace_model(model, example_inputs, example_kwargs)
    _check_matches(gm, graph)
    used = sorted(set(p.tolist()))  # one worker per device the placement uses, not per index up to its largest
    if cluster is None:  # the nominal devices are all alike: the used ones, renumbered, order the same step
        schedule = simulate(graph, np.searchsorted(used, p), nominal_cluster(len(used))).schedule
    else:
        if cluster.num_devices < num_devices:
            raise ValueError(f"op {graph.nodes[int(np.argmax(p))].id!r} is placed on device {int(p.max())}, "
                             f"cluster {cluster.name!r} has {cluster.num_devices} devices")
        schedule = simulate(graph, p, cluster).schedule  # checks colocation too
    if devices is not None and all(d.type == "cuda" for d in devices):
        present = torch.cuda.is_available() and all((d.index or 0) < torch.cuda.device_count() for d in devices)
        if present:
            return _measure_cuda(model, example_inputs, example_kwargs, graph, p, devices, repeats)
        warnings.warn(f"{', '.join(map(str, devices))} not present here: measuring on local worker processes",
                      RuntimeWarning, stacklevel=2)
    check_local_workers(len(used))
    plan = worker_tasks(gm, graph, np.searchsorted(used, p), schedule.op_start)  # worker k runs device used[k]
    payload = (model, example_inputs, dict(example_kwargs or {}), plan, repeats)
    reports = run_on_local_workers(len(used), run_worker, payload)
    starts = np.array([r["starts"] for r in reports])
    ends = np.array([r["ends"] for r in reports])
    steps = tuple(float(x) for x in ends.max(axis=0) - starts.min(axis=0))
    busy, peak = np.zeros(num_devices), np.zeros(num_devices)
    busy[used] = [statistics.median(r["busy"]) for r in reports]
    peak[used] = [r["peak"] for r in reports]
    gradients = {name: grad for r in reports for name, grad in r["gradients"].items()}
    return MeasuredStep(statistics.median(steps), steps, busy, peak, "local-workers", gradients)


def _measure_cuda(model: Any, example_inputs: Any, example_kwargs: Mapping[str, Any] | None,
                  graph: ComputationGraph, p: np.ndarray, devices: list[Any], repeats: int) -> MeasuredStep:
    placed = placed_module(model, example_inputs, graph, p, devices, example_kwargs=example_kwargs)
    _, inputs, _ = trace_model(model, example_inputs, example_kwargs)

    def step() -> None:
        for param in placed.parameters():
            param.grad = None
        out = [t for t in pytree.tree_leaves(placed(*inputs)) if isinstance(t, torch.Tensor) and t.requires_grad]
        if out:
            torch.autograd.backward(out, [torch.ones_like(t) for t in out])

    def synchronize() -> None:
        for d in devices:
            torch.cuda.synchronize(d)

    step()
    synchronize()
    steps = []
    for _ in range(repeats):
        synchronize()
        t0 = time.perf_counter()
        step()
        synchronize()
        steps.append(time.perf_counter() - t0)
    for d in devices:
        torch.cuda.reset_peak_memory_stats(d)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        step()
        synchronize()
    peak = np.array([float(torch.cuda.max_memory_allocated(d)) for d in devices])
    busy = np.zeros(len(devices))
    where = {(d.index or 0): i for i, d in enumerate(devices)}
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA and event.device_index in where:
            busy[where[event.device_index]] += event.time_range.elapsed_us() * 1e-6
    gradients = {name: param.grad.detach().cpu().numpy() for name, param in placed.named_parameters()
                 if param.grad is not None}
    return MeasuredStep(statistics.median(steps), tuple(steps), busy, peak, "cuda", gradients)


__all__ = ["MeasuredStep", "measure_step", "nominal_cluster"]
