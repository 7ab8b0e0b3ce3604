"""What a runtime costs beyond the ops' own work, as inputs to the simulator: :class:`RuntimeOverheads`.

Profiled op costs hold each op's arithmetic; a runtime adds its own work per op call (a pipeline stage's traced
module, ``measure_step``'s executor: an autograd segment and a ``backward`` call per op), per step, and per tensor
it sends or receives between processes (gloo's sends and receives while both cores compute, which a link measured
between the workers cannot see). :meth:`RuntimeOverheads.applied` gives them to the simulator as op costs and link
latencies, its semantics unchanged:

* ``call_seconds`` is added to every computing op's cost and fixed cost (a fixed cost is paid by each micro-batch:
  spec section 3a);
* ``step_seconds`` to the cost of the first computing op (paid once a step);
* ``tensor_seconds`` to the cost and fixed cost of each op, per tensor it sends to or receives from another device
  under the placement (parameters excepted: a runtime keeps a copy on each device that reads one:
  :func:`crossing_tensors`);
* ``message_seconds`` to every link's latency.

They are measured on local workers by :mod:`placement_env.runtime.pipeline_calibration` (the pipeline runner) and
:mod:`placement_env.runtime.step_calibration` (``measure_step``), each from runs that are none of the placements
the calibrated simulator then predicts; :func:`eager_seconds` and :func:`fitted` are what both use.
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


@dataclass(frozen=True)
class RuntimeOverheads:
    """A runtime's costs beyond the ops' own work (module docstring), in seconds."""

    call_seconds: float
    message_seconds: float = 0.0
    step_seconds: float = 0.0
    tensor_seconds: float = 0.0
    spread: float = 0.0  # how far the calibration's repeated measurements disagreed (slowest / fastest - 1)

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


__all__ = ["RuntimeOverheads", "crossing_tensors", "eager_seconds", "fitted"]
