"""What ``python -m agents.place`` prints: a learned placement beside the fast classical placers and the lower
bound, so that its number means something."""

from __future__ import annotations

from baselines.compare import FAST_COMPARED, best_row, compare_placers
from baselines.placers import PLACERS
from placement_env.cluster import Cluster
from placement_env.graph.model import ComputationGraph
from placement_env.sim.pipeline import PLAIN_STEP, Step, stepped_graph
from placement_env.sim.simulator import lower_bound

from .placer import LearnedPlacement


def placement_report(graph: ComputationGraph, cluster: Cluster, result: LearnedPlacement, seed: int = 0,
                     step: Step = PLAIN_STEP) -> str:
    """Lines: the graph, cluster and step; ``result`` (ms, times the lower bound, the method and its seconds); the
    best of the fast placers (:data:`baselines.compare.FAST_COMPARED`, placed now with ``seed``, judged by
    ``step``) and how much faster or slower the learned placement is; the lower bound (of ``step``)."""
    bound = lower_bound(stepped_graph(graph, step.microbatches), cluster)
    fast = best_row(compare_placers(graph, cluster, {name: PLACERS[name] for name in FAST_COMPARED}, seed,
                                    step=step))
    how = result.method + (", interrupted" if result.interrupted else "")
    pipelined = f", {step.describe()}" if step.pipelined else ""
    lines = [f"{graph.name} on {cluster.num_devices} devices ({cluster.name}{pipelined}):",
             f"  {'learned (' + how + f', {result.seconds:.1f} s)':<34} {result.makespan * 1e3:>10.3f} ms  "
             f"{result.makespan / bound:.3f} x lower bound"]
    if fast is None or fast.makespan is None:
        lines.append(f"  {'fast classical placers':<34} none fits in memory")
    else:
        change = result.makespan / fast.makespan - 1.0
        lines.append(f"  {'best fast placer (' + fast.placer + ')':<34} {fast.makespan * 1e3:>10.3f} ms  "
                     f"{fast.makespan / bound:.3f} x lower bound (learned {100 * change:+.1f}%)")
    lines.append(f"  {'lower bound':<34} {bound * 1e3:>10.3f} ms")
    return "\n".join(lines)
