"""Placement under memory pressure: every placer on models that do not fit one device, and its speed.

    python benchmarks/memory_bound.py --out experiments/memory_bound.md     # the table in RESULTS.md
    python benchmarks/memory_bound.py --speed-only                         # the 2,000-op timing alone

The cells: NASNet-A Large and PNASNet-5 Large (43-44 GB for one training step on one device) on 3 and 8 P100s of
16 GiB; VGG19, Inception-v3, ResNet50 and ResNet101 (4.6-8.0 GB on one device) on 3 and 8 P100s cut to 4 GiB;
the suites' first three graphs of ptb, cifar10 and nmt on 3 P100s cut to half of their single-device peak. In
every cell everything-on-one-device runs out of memory in the simulator. Each placer's cell is its makespan over
the lower bound and, in brackets, its largest device peak over that device's memory; "infeasible" is the
placer's own verdict with its reason in the notes below the table.

The speed section: a 2,000-op synthetic training graph on 3 P100s whose memory is 45% of its single-device peak,
each placer timed (repair included).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from baselines import PLACERS, PlacementInfeasibleError
from placement_env import Cluster, ComputationGraph, layered_dag, load_graph, lower_bound, simulate
from placement_env.json_files import write_text_atomically

BIG = (("nasnet_large", None), ("pnasnet_large", None))
CNNS = (("vgg19", 4.0), ("inception_v3", 4.0), ("resnet50", 4.0), ("resnet101", 4.0))
SUITES = tuple(f"{suite}/{seed}" for suite in ("ptb", "cifar10", "nmt") for seed in range(3))


def single_device_peak(graph: ComputationGraph) -> float:
    return float(simulate(graph, np.zeros(graph.num_nodes, dtype=np.int64), Cluster.preset("p100", 1)).peak_memory[0])


def cells() -> list[tuple[str, ComputationGraph, Cluster]]:
    out = []
    for name, gib in BIG + CNNS:
        graph = load_graph(name)
        for devices in (3, 8):
            cluster = Cluster.preset("p100", devices)
            if gib is not None:
                cluster = cluster.with_memory(gib * 2**30)
            out.append((f"{name}, {cluster.name}", graph, cluster))
    for name in SUITES:
        graph = load_graph(name)
        cluster = Cluster.preset("p100", 3).with_memory(single_device_peak(graph) / 2)
        out.append((f"{name}, 3 x p100 at half its peak", graph, cluster))
    return out


def judge(graph: ComputationGraph, cluster: Cluster, placer: str) -> tuple[str, float, str | None]:
    """``(cell text, seconds, note)``."""
    start = time.perf_counter()
    try:
        placement = PLACERS[placer](graph, cluster, 0)
    except PlacementInfeasibleError as error:
        return "infeasible", time.perf_counter() - start, str(error)
    seconds = time.perf_counter() - start
    result = simulate(graph, placement, cluster)
    ratio = float(np.max(result.peak_memory / cluster.memory))
    return f"{result.makespan / lower_bound(graph, cluster):.2f} ({ratio:.2f})" + (" OOM" if result.oom else ""), \
        seconds, None


def table() -> str:
    placers = list(PLACERS)
    lines = ["| cell | one device needs | " + " | ".join(placers) + " |", "|---" * (len(placers) + 2) + "|"]
    notes: dict[str, dict[str, list[str]]] = {}  # cell -> reason -> placers
    slowest = (0.0, "")
    for label, graph, cluster in cells():
        row = []
        for placer in placers:
            text, seconds, note = judge(graph, cluster, placer)
            row.append(text)
            if seconds > slowest[0]:
                slowest = (seconds, f"{placer} on {label}")
            if note and placer != "single":
                notes.setdefault(label, {}).setdefault(note, []).append(placer)
        need = single_device_peak(graph) / cluster.memory.max()
        lines.append(f"| {label} | {need:.2f} x a device | " + " | ".join(row) + " |")
        print(lines[-1], flush=True)
    lines += ["", f"Slowest placer call: {slowest[0]:.1f} s ({slowest[1]})."]
    if notes:
        lines += ["", "Where placers other than `single` said infeasible, and why:", ""]
        for label, reasons in notes.items():
            for reason, who in reasons.items():
                lines.append(f"* {label}, {'every placer' if len(who) == len(placers) - 1 else ', '.join(who)}: "
                             f"{reason}")
    return "\n".join(lines) + "\n"


def speed() -> None:
    graph = layered_dag(0, num_ops=1000, name="layered-1000")  # its training graph: 2,000 ops
    cluster = Cluster.preset("p100", 3).with_memory(0.45 * single_device_peak(graph))
    print(f"{graph.name}: {graph.num_nodes} ops, {graph.num_units} units; 3 x p100 with "
          f"{cluster.memory[0] / 1e9:.2f} GB each (45% of the single-device peak)")
    for placer in PLACERS:
        text, seconds, note = judge(graph, cluster, placer)
        print(f"  {placer:<14} {seconds:7.2f} s   {text if note is None else 'infeasible: ' + note[:80]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--out", type=Path, help="write the table (Markdown) here")
    parser.add_argument("--speed-only", action="store_true", help="only time the placers on the 2,000-op graph")
    args = parser.parse_args()
    speed()
    if args.speed_only:
        return
    text = ("Makespan / lower bound (largest peak / memory) of each placer; `python benchmarks/memory_bound.py`.\n\n"
            + table())
    if args.out:
        write_text_atomically(args.out, text)
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
