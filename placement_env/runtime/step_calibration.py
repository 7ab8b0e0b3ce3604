"""What ``measure_step``'s executor costs beyond the ops' own work, measured on the model itself:
:func:`calibrate_step`.

``measure_step`` runs a placement op by op on local workers: every op is a call of its own with an autograd segment
and a ``backward`` call, and every tensor that crosses devices is a gloo send and receive while both cores compute.
Neither is in a profiled op's cost. :func:`calibrate_step` measures both on the model, in runs that are none of
the placements the calibrated simulator then predicts, and returns them as
:class:`~placement_env.runtime.runtime_overheads.RuntimeOverheads` (applied by its ``applied``):

* ``call_seconds``: (``measure_step`` with every op on one device - the same step in eager PyTorch in this process),
  per computing op;
* ``tensor_seconds``: with that applied, the time each tensor that crosses devices costs its sender and its
  receiver, fitted so that the simulated step of a calibration placement equals the measured one: the units
  placed on two devices at random (:func:`calibration_placement`), which sends many tensors, as the placements
  that are hardest to predict do.

Each measured value is the fastest of ``rounds`` interleaved rounds. Run it with ``torch.set_num_threads(1)``, as
the workers run.
"""

from __future__ import annotations

from collections.abc import Collection

import numpy as np
from torch import nn

from placement_env.cluster import Cluster
from placement_env.graph.model import ComputationGraph
from placement_env.sim.simulator import simulate

from .measured_step import measure_step
from .runtime_overheads import RuntimeOverheads, eager_seconds, fitted

CALIBRATION_SEED = 1_000_003


RANDOM_DRAWS = 1000
"""Random placements drawn before the calibration's placement is looked for in order (or refused)."""


def calibration_placement(graph: ComputationGraph, avoid: Collection[tuple[int, ...]] = ()) -> np.ndarray:
    """A device (0 or 1) per op of ``graph``: its units drawn at random (seed :data:`CALIBRATION_SEED`, then the
    next seeds), using both devices and none of the placements in ``avoid`` (the ones a table judges).

    Raises:
        ValueError: a graph of one unit (no placement uses two devices), or ``avoid`` holding every placement of
            its units on two devices.
    """
    count = graph.num_units
    if count < 2:
        raise ValueError(f"graph {graph.name!r} has one placement unit: no placement of it uses two devices")
    for seed in range(CALIBRATION_SEED, CALIBRATION_SEED + RANDOM_DRAWS):
        units = np.random.default_rng(seed).integers(0, 2, count)
        placement = graph.expand_unit_placement(units)
        if 0 < units.sum() < count and tuple(placement.tolist()) not in avoid:
            return placement
    if count <= 20:  # few units: every two-device placement, in order
        for code in range(1, 2**count - 1):
            units = (code >> np.arange(count)) & 1
            placement = graph.expand_unit_placement(units)
            if tuple(placement.tolist()) not in avoid:
                return placement
    raise ValueError(f"avoid holds every placement of graph {graph.name!r}'s {count} units on two devices that "
                     f"{RANDOM_DRAWS} random draws reached: nothing is left to calibrate on")


def calibrate_step(model: nn.Module, inputs: tuple, kwargs: dict, graph: ComputationGraph, cluster: Cluster, *,
                   rounds: int = 3, repeats: int = 5,
                   avoid: Collection[tuple[int, ...]] = ()) -> RuntimeOverheads:
    """The :class:`~placement_env.runtime.runtime_overheads.RuntimeOverheads` of ``measure_step`` on ``model``
    (``graph``: its training graph; ``cluster``: ``local_cluster(2)``) (module docstring).

    Args:
        model, inputs, kwargs: the model and its example inputs, as given to ``from_torch``.
        graph: its training graph, profiled on one thread.
        cluster: the measured local cluster the workers form.
        rounds: interleaved rounds; each value the fastest.
        repeats: ``measure_step``'s timed steps per run (and eager steps).
        avoid: placements (a device per op) the calibration must not run: those the caller will predict.

    Returns:
        ``RuntimeOverheads(call_seconds, tensor_seconds=...)``.

    Raises:
        ValueError: bad ``rounds`` or ``repeats``; a graph of one unit.
    """
    if rounds < 1 or repeats < 1:
        raise ValueError(f"rounds and repeats must be at least 1, got {rounds} and {repeats}")
    one = np.zeros(graph.num_nodes, dtype=np.int64)
    two = calibration_placement(graph, avoid)
    measured: dict[str, list[float]] = {"one": [], "two": [], "eager": []}
    for _ in range(rounds):
        measured["one"].append(measure_step(model, inputs, graph, one, repeats=repeats, example_kwargs=kwargs,
                                            cluster=cluster).seconds)
        measured["eager"].append(eager_seconds(model, inputs, kwargs, 1, repeats))
        measured["two"].append(measure_step(model, inputs, graph, two, repeats=repeats, example_kwargs=kwargs,
                                            cluster=cluster).seconds)
    calls = int(np.count_nonzero(graph.cost > 0))
    call = max(min(measured["one"]) - min(measured["eager"]), 0.0) / max(calls, 1)

    def simulated(seconds: float) -> float:
        g, c = RuntimeOverheads(call, tensor_seconds=seconds).applied(graph, cluster, two)
        return float(simulate(g, two, c).makespan)

    target = min(measured["two"])
    return RuntimeOverheads(call, tensor_seconds=fitted(simulated, target, target))


__all__ = ["CALIBRATION_SEED", "calibrate_step", "calibration_placement"]
