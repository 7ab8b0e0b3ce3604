"""What ``python -m agents.place`` prints: a learned placement beside the fast classical placers and the lower
bound, so that its number means something."""

from __future__ import annotations

import time

import numpy as np

from baselines.compare import FAST_COMPARED, best_row, compare_placers
from baselines.placers import CONTIGUOUS_PLACERS, PLACERS, SEARCH_STARTS, search_placers
from baselines.starts import ranked_starts
from placement_env.cluster import Cluster
from placement_env.graph.model import ComputationGraph
from placement_env.sim.pipeline import PLAIN_STEP, Step, stepped_graph
from placement_env.sim.simulator import DEFAULT_PARAM_FACTOR, Simulator, lower_bound

from .result import LearnedPlacement


def warm_up(graph: ComputationGraph, cluster: Cluster, step: Step = PLAIN_STEP, contiguous: bool = False) -> None:
    """Build what every search of ``graph`` shares and the first one to run would otherwise pay within its budget
    (the start placers' compiled code and caches, the simulator's arrays for ``step``: on GPT-2 over 16 devices
    the start placers take 0.39 s the first time and 0.17 s after, ``benchmarks/steering_speed.py``), so that a
    learned search and the annealing it is compared with start alike."""
    placers = CONTIGUOUS_PLACERS if contiguous else PLACERS
    ranked_starts(graph, cluster, {name: placers[name] for name in SEARCH_STARTS}, step=step)


def anneal_at_budget(graph: ComputationGraph, cluster: Cluster, budget_seconds: float, seed: int = 0,
                     step: Step = PLAIN_STEP, contiguous: bool = False) -> LearnedPlacement:
    """The ``anneal`` placer (its own starts and settings) with ``budget_seconds``, as a learned search is
    compared with it."""
    began = time.perf_counter()
    placement = search_placers(budget_seconds, contiguous)["anneal"](graph, cluster, seed, step=step)
    seconds = time.perf_counter() - began
    return LearnedPlacement(placement, *judged(graph, cluster, placement, step), seconds, "anneal", 0)


def judged(graph: ComputationGraph, cluster: Cluster, placement, step: Step = PLAIN_STEP) -> tuple[float, float]:
    """``(makespan s, memory overflow bytes)`` of ``placement`` under ``step``."""
    makespan, peak, _ = Simulator(graph, cluster, DEFAULT_PARAM_FACTOR, *step).run(placement)
    return float(makespan), float(np.maximum(0.0, peak - cluster.memory).sum())


def placement_report(graph: ComputationGraph, cluster: Cluster, result: LearnedPlacement, seed: int = 0,
                     step: Step = PLAIN_STEP, against: LearnedPlacement | None = None,
                     contiguous: bool = False) -> str:
    """Lines: the graph, cluster and step; ``result`` (ms, times the lower bound, the method and its seconds) and,
    with ``against`` (:func:`anneal_at_budget`), the annealing at the same budget on the same line, and which is
    faster; the best of the fast placers (:data:`baselines.compare.FAST_COMPARED`, placed now with ``seed``,
    judged by ``step``; their contiguous versions with ``contiguous``) and how much faster or slower the learned
    placement is; the lower bound (of ``step``)."""
    bound = lower_bound(stepped_graph(graph, step.microbatches), cluster)
    placers = CONTIGUOUS_PLACERS if contiguous else PLACERS
    fast = best_row(compare_placers(graph, cluster, {name: placers[name] for name in FAST_COMPARED}, seed,
                                    step=step))
    how = result.method + (", interrupted" if result.interrupted else "")
    pipelined = f", {step.describe()}" if step.pipelined else ""
    learned = (f"  {'learned (' + how + f', {result.seconds:.1f} s)':<34} {result.makespan * 1e3:>10.3f} ms  "
               f"{result.makespan / bound:.3f} x lower bound")
    if against is not None:
        change = result.makespan / against.makespan - 1.0
        who = "tie" if abs(change) < 5e-4 else "learned ahead" if change < 0 else "anneal ahead"
        learned += (f"; anneal at the same budget ({against.seconds:.1f} s) {against.makespan * 1e3:.3f} ms: "
                    f"learned {100 * change:+.1f}%, {who}")
    lines = [f"{graph.name} on {cluster.num_devices} devices ({cluster.name}{pipelined}):", learned]
    if fast is None or fast.makespan is None:
        lines.append(f"  {'fast classical placers':<34} none fits in memory")
    else:
        change = result.makespan / fast.makespan - 1.0
        lines.append(f"  {'best fast placer (' + fast.placer + ')':<34} {fast.makespan * 1e3:>10.3f} ms  "
                     f"{fast.makespan / bound:.3f} x lower bound (learned {100 * change:+.1f}%)")
    lines.append(f"  {'lower bound':<34} {bound * 1e3:>10.3f} ms")
    return "\n".join(lines)
