"""Run several placers on one graph and cluster, and judge each placement with the simulator."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field, fields

import numpy as np

from placement_env.cluster import Cluster
from placement_env.graph.model import ComputationGraph
from placement_env.sim.pipeline import PLAIN_STEP, Step, stepped_graph
from placement_env.sim.simulator import SimulationResult, lower_bound, simulate

from .memory import PlacementInfeasibleError
from .starts import run_placer

FAST_COMPARED = ("single", "heft", "m-etf", "metis")  # the fast placers a learned placement is printed beside


@dataclass
class ComparisonRow:
    """One placer's result. Times in seconds, memory as a fraction of device capacity.

    ``result`` is the simulation behind the numbers (with its schedule), kept
    for callers that look further (``python -m baselines --traces-dir``); it
    is not part of :meth:`to_dict`.
    """

    placer: str
    makespan: float | None
    lb_ratio: float | None
    max_memory_ratio: float | None
    oom: bool | None
    place_seconds: float
    error: str | None = None
    placement: list[int] | None = None
    result: SimulationResult | None = field(default=None, repr=False, compare=False)

    def to_dict(self, with_placement: bool = False) -> dict:
        d = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "result"}
        if d["lb_ratio"] is not None and not math.isfinite(d["lb_ratio"]):
            d["lb_ratio"] = None  # JSON has no infinity (a zero lower bound: every op costs 0 s)
        if not with_placement:
            d.pop("placement")
        return d


Progress = Callable[[int, int, str, "float | None"], None]  # (index from 1, placers, name, seconds or None)


def compare_placers(graph: ComputationGraph, cluster: Cluster, placers: dict, seed: int = 0,
                    progress: Progress | None = None, step: Step = PLAIN_STEP) -> list[ComparisonRow]:
    """Place ``graph`` with each of ``placers`` (name -> placer) and simulate the result (of ``step``, which
    the placers that judge by the simulator are given too).

    A placer that cannot fit the graph gives a row with ``error`` set instead of numbers. ``progress``, when
    given, is called before each placer runs (seconds None) and after it (its seconds).
    """
    rows = []
    for index, (name, placer) in enumerate(placers.items(), start=1):
        if progress is not None:
            progress(index, len(placers), name, None)
        t0 = time.perf_counter()
        try:
            p = np.asarray(run_placer(placer, graph, cluster, seed, step))
        except PlacementInfeasibleError as exc:
            rows.append(ComparisonRow(name, None, None, None, None, time.perf_counter() - t0, f"infeasible: {exc}"))
            if progress is not None:
                progress(index, len(placers), name, rows[-1].place_seconds)
            continue
        seconds = time.perf_counter() - t0
        if progress is not None:
            progress(index, len(placers), name, seconds)
        r = simulate(graph, p, cluster, microbatches=step.microbatches, schedule=step.schedule)
        rows.append(ComparisonRow(name, r.makespan, r.lb_ratio, float(np.max(r.peak_memory / cluster.memory)),
                                  r.oom, seconds, None, [int(x) for x in p], r))
    return rows


def format_table(rows: list[ComparisonRow], graph: ComputationGraph, cluster: Cluster,
                 step: Step = PLAIN_STEP, contiguous: bool = False) -> str:
    """The comparison as an aligned text table, with a header naming graph, cluster, step (``contiguous``: the
    placers in contiguous mode) and lower bound."""
    lb = lower_bound(stepped_graph(graph, step.microbatches), cluster)
    lines = [f"graph {graph.name}: {graph.num_nodes} ops, {graph.num_edges} edges, {graph.num_units} placement units",
             f"cluster {cluster.name}: {cluster.num_devices} devices; step: {step.describe()}; "
             f"{'contiguous stages; ' if contiguous else ''}lower bound {lb * 1e3:.3f} ms",
             ""]
    w = max([14, *(len(r.placer) for r in rows)])
    header = f"{'placer':<{w}} {'makespan (ms)':>13} {'/ LB':>6} {'peak mem / cap':>14} {'OOM':>4} {'place (s)':>9}"
    lines += [header, "-" * len(header)]
    for r in rows:
        if r.error:
            lines.append(f"{r.placer:<{w}} {r.error}")
            continue
        assert r.makespan is not None and r.lb_ratio is not None and r.max_memory_ratio is not None
        lines.append(f"{r.placer:<{w}} {r.makespan * 1e3:>13.3f} {r.lb_ratio:>6.3f} {r.max_memory_ratio:>14.3f} "
                     f"{'yes' if r.oom else 'no':>4} {r.place_seconds:>9.3f}")
    return "\n".join(lines)


def best_row(rows: list[ComparisonRow]) -> ComparisonRow | None:
    """The fastest row within memory (None when no placer placed the graph within memory)."""
    fitting = [r for r in rows if r.makespan is not None and not r.oom]
    return min(fitting, key=lambda r: r.makespan or 0.0) if fitting else None
