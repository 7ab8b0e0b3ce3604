"""What a training run leaves in its output folder: the best placements judged, compared and drawn."""

from __future__ import annotations

import json
import os
import platform
import time
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from agents.training.config import TrainConfig
from agents.training.tracker import BestTracker
from baselines import PLACERS, PlacementInfeasibleError
from baselines.compare import FAST_COMPARED
from baselines.placers import search_placers
from baselines.starts import run_placer
from placement_env import Cluster, ComputationGraph, SimulationResult, simulate, write_placement
from placement_env.envs.render import gantt_rgb
from placement_env.json_files import replace_atomically, write_text_atomically
from placement_env.sim.pipeline import PLAIN_STEP, Step, stepped_graph

COMPARED_PLACERS = FAST_COMPARED  # and, with TrainConfig.compare_searches, the search placers at the run's budget
SEARCHES = ("local-search", "anneal")
VERSIONED = ("torch", "torch-geometric", "stable-baselines3", "sb3-contrib", "gymnasium", "numpy", "numba",
             "device-placement")


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def judge_graph(graph: ComputationGraph, placement: np.ndarray, cluster: Cluster, tracker: BestTracker,
                seed: int, search_seconds: float | None = None,
                step: Step = PLAIN_STEP) -> tuple[dict[str, Any], SimulationResult]:
    """Simulate ``placement`` (the validation, timed) and the compared placers' placements of ``graph``: the fast
    ones, and with ``search_seconds`` the search placers given that budget each (``baselines`` names s); every
    placement judged by ``step``, which the placers that judge by the simulator are given."""
    start = time.perf_counter()
    result = simulate(graph, placement, cluster, microbatches=step.microbatches, schedule=step.schedule)
    validation = time.perf_counter() - start
    placers = {name: PLACERS[name] for name in COMPARED_PLACERS}
    if search_seconds is not None:
        placers.update(search_placers(search_seconds))
    compared: dict[str, float | str] = {}
    for name, placer in placers.items():
        try:
            compared[name] = simulate(graph, run_placer(placer, graph, cluster, seed, step), cluster,
                                      microbatches=step.microbatches, schedule=step.schedule).makespan
        except PlacementInfeasibleError as exc:
            compared[name] = f"infeasible: {exc}"
    entry = {"graph": graph.name, "makespan": result.makespan, "lower_bound": result.lower_bound,
             "best_found_seconds": tracker.found_at.get(graph.name), "validation_seconds": validation,
             "lb_ratio": result.lb_ratio, "peak_memory": [int(x) for x in result.peak_memory], "oom": result.oom,
             "baselines": compared, "search_baseline_seconds": search_seconds}
    return entry, result


def write_outputs(config: TrainConfig, out: Path, graphs: list[ComputationGraph], cluster: Cluster,
                  tracker: BestTracker, steps: int, search_seconds: float, interrupted: bool,
                  run_facts: dict[str, Any] | None = None) -> dict[str, Any]:
    """Judge each graph's best placement, write every output file; returns ``results.json``'s content.

    Files: ``placement.json`` (the first graph's; ``placements/`` holds every graph's when there are several),
    ``results.json``, ``tracker.json``, ``learning_curve.png``, ``gantt.png``. ``run_facts`` (e.g. the CPU
    seconds used, whether training stopped before an update to keep its budget) go into ``results.json``.
    """
    graphs = [g for g in graphs if g.name in tracker.best]
    if not graphs:
        raise RuntimeError("training ended before any placement was evaluated")
    per_graph, first_result = [], None
    # the search placers get the run's own search time (split over a suite's graphs): equal time, however it ended
    searching = max(0.1, search_seconds) / len(graphs) if config.compare_searches else None
    for graph in graphs:
        placement = np.asarray(tracker.best[graph.name][1])
        entry, result = judge_graph(graph, placement, cluster, tracker, config.seed, searching, config.step)
        search_seconds += entry["validation_seconds"]  # validation is part of the search
        per_graph.append(entry)
        first_result = first_result or result
        if len(graphs) > 1:
            (out / "placements").mkdir(exist_ok=True)
            write_placement(placement, out / "placements" / f"{graph.name.replace('/', '_')}.json")
    assert first_result is not None
    write_placement(np.asarray(tracker.best[graphs[0].name][1]), out / "placement.json")
    results = {
        **per_graph[0], "cluster": cluster.to_dict(), "encoder": config.encoder, "algo": config.algo,
        "search_seconds": search_seconds, "steps": steps, "seed": config.seed, "interrupted": interrupted,
        **(run_facts or {}),
        "hyperparameters": config.as_dict(), "graphs": per_graph,
        "hardware": {"machine": platform.machine(), "processor": platform.processor(), "cpus": os.cpu_count(),
                     "system": platform.platform()},
        "versions": {p: _version(p) for p in VERSIONED},
    }
    write_text_atomically(out / "results.json", json.dumps(results, indent=1))
    write_text_atomically(out / "tracker.json", json.dumps(tracker.state()))
    draw(config, out, graphs[0], cluster, first_result, tracker, per_graph[0]["baselines"], len(graphs))
    return results


def draw(config: TrainConfig, out: Path, graph: ComputationGraph, cluster: Cluster, result: SimulationResult,
         tracker: BestTracker, compared: dict[str, Any], num_graphs: int) -> None:
    """``learning_curve.png`` (best makespan so far against steps, with the placers and the lower bound) and
    ``gantt.png`` (the best placement's simulated step)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4), dpi=100)
    if tracker.curve:
        xs, ys = zip(*tracker.curve)
        label = f"{config.encoder} + {config.algo}, best so far" + (" (mean over graphs)" if num_graphs > 1 else "")
        ax.step(xs, np.array(ys) * 1e3, where="post", label=label)
    for i, (name, value) in enumerate(compared.items()):
        if isinstance(value, float):
            ax.axhline(value * 1e3, linestyle="--", linewidth=0.8, label=name, color=f"C{1 + i}")
    ax.axhline(result.lower_bound * 1e3, color="k", linewidth=0.8, label="lower bound")
    ax.set_xlabel("environment steps")
    ax.set_ylabel("makespan (ms)")
    ax.set_title(f"{graph.name} on {cluster.name}", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    with replace_atomically(out / "learning_curve.png") as temporary:
        fig.savefig(temporary)
    plt.close(fig)
    names = [d.name for d in cluster.devices]
    with replace_atomically(out / "gantt.png") as temporary:
        ops = list(stepped_graph(graph, result.microbatches).ops)  # of the unrolled step when pipelined
        plt.imsave(temporary, gantt_rgb(result, ops, names, title=f"best placement, {graph.name}"))


def closing_table(result: Any) -> str:  # result: agents.training.run.RunResult (run imports this module)
    """The run's best placement beside every compared placer (the search placers had the run's budget), the lower
    bound, and how the run stands against the strongest classical result, whichever wins."""
    record = result.record
    budget = record.get("search_baseline_seconds")
    steps = "proposals" if record["algo"] == "guided" else "environment steps"
    lines = [f"{result.graph}: {record['encoder']} + {record['algo']}, {result.steps:,} {steps}, "
             f"{result.search_seconds:.1f} s of search on {os.cpu_count()} CPU cores",
             f"{'placement':<26} {'makespan (ms)':>14}",
             f"{'best found':<26} {result.makespan * 1e3:>14.3f}  ({result.lb_ratio:.3f} x lower bound"
             f"{', OOM' if result.oom else ''})"]
    for name, value in record["baselines"].items():
        label = f"{name} ({budget:.1f} s)" if budget is not None and name in ("local-search", "anneal") else name
        lines.append(f"{label:<26} " + (f"{value * 1e3:>14.3f}" if isinstance(value, float) else f"  {value}"))
    lines.append(f"{'lower bound':<26} {result.lower_bound * 1e3:>14.3f}")
    timed = {name: v for name, v in record["baselines"].items() if isinstance(v, float)}
    if timed and not result.oom:
        name = min(timed, key=timed.__getitem__)
        change = result.makespan / timed[name] - 1.0
        verdict = "below" if change < 0 else "above" if change > 0 else "level with"
        lines.append(f"the run's best is {abs(change):.1%} {verdict} the strongest classical placer, {name} "
                     f"({timed[name] * 1e3:.3f} ms)")
    lines.append(f"outputs in {result.out}/")
    return "\n".join(lines)
