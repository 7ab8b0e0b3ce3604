"""Placers in contiguous mode: every placement a pipeline runtime can run (:mod:`placement_env.plan.stages`).

:func:`contiguous_placer` wraps a placer: its placement is made contiguous by
:func:`~baselines.stages.nearest_contiguous` (unchanged when it already is: ``single``, ``m-topo``, ``split``
and DeepSpeed's partitions are contiguous by construction on graphs whose node order is the program's), then
checked by the simulator and, if it runs out of memory, repaired by :func:`fit_contiguous`: boundary shifts,
stage exchanges and cuts (least overflow first) until it fits, from the placer's placement and then from
``split``'s; :class:`~baselines.memory.PlacementInfeasibleError` when neither fits. The searches run in
contiguous mode themselves (``refine(..., contiguous=True)``, ``anneal_units(..., contiguous=True)``) from
contiguous starts.
"""

from __future__ import annotations

import functools

import numpy as np

from placement_env.cluster import Cluster
from placement_env.graph.model import ComputationGraph
from placement_env.sim.pipeline import PLAIN_STEP, Step
from placement_env.sim.simulator import DEFAULT_PARAM_FACTOR, Simulator

from .local_search import refine
from .memory import PlacementInfeasibleError, format_bytes
from .memory_repair import Placer
from .split import split
from .stages import nearest_contiguous
from .starts import run_placer

REPAIR_ROUNDS = 300  # rounds of the contiguous repair, or REPAIR_SECONDS, whichever ends first
REPAIR_SECONDS = 5.0


def fit_contiguous(graph: ComputationGraph, cluster: Cluster, placement: np.ndarray, seed: int = 0,
                   step: Step = PLAIN_STEP) -> np.ndarray:
    """``placement`` (contiguous) if it fits in memory in the simulator of ``step``, else a contiguous repair of it
    or of ``split``'s placement (see the module docstring). Raises
    :class:`~baselines.memory.PlacementInfeasibleError` naming the device that overflows most."""
    simulator = Simulator(graph, cluster, DEFAULT_PARAM_FACTOR, *step)
    _, peak, _ = simulator.run(placement)
    if np.all(peak <= cluster.memory):
        return placement
    for start in (placement, None):
        begin = placement if start is not None else split(graph, cluster, seed, step=step)
        result = refine(graph, cluster, begin, seed=seed, max_rounds=REPAIR_ROUNDS, patience=REPAIR_ROUNDS,
                        time_budget=REPAIR_SECONDS, step=step, contiguous=True, until_fits=True)
        if result.overflow == 0.0:
            return result.placement
    worst = int(np.argmax(peak - cluster.memory))
    raise PlacementInfeasibleError(
        f"no contiguous placement within memory found: device {worst} peaks at {format_bytes(peak[worst])} in the "
        f"simulator, over its {format_bytes(float(cluster.memory[worst]))}, and no shift of the stage boundaries "
        "brings every device within memory")


def contiguous_placer(placer: Placer, repair: bool = True) -> Placer:
    """``placer`` in contiguous mode (module docstring); ``repair=False`` leaves a placement that does not fit as it
    is (the runtimes' own partitions, which are what the runtime would run)."""
    @functools.wraps(placer)
    def placed(graph: ComputationGraph, cluster: Cluster, seed: int = 0, *, step: Step = PLAIN_STEP) -> np.ndarray:
        placement = nearest_contiguous(graph, run_placer(placer, graph, cluster, seed, step))
        return fit_contiguous(graph, cluster, placement, seed, step) if repair else placement

    return placed
