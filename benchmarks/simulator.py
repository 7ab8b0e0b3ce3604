"""Simulator throughput: evaluations per second, compiled kernel vs the literal heapq reference.

Run: ``python benchmarks/simulator.py`` (add ``--json FILE`` to keep the figures).

Measures, single-threaded, on the training graph of a seeded layered DAG of
500 forward ops (1,000 ops in all):

* ``simulate_batch`` on 2,000 random unit placements and on 2,000 "search"
  placements (HEFT's placement with 5% of the units moved at random, the kind
  of neighbourhood a search or a trained policy visits);
* ``simulate`` one placement at a time (building the full schedule);
* the pure-Python heapq reference on a few of the same placements (best of 3, as every rate here);

the same batched rate, with the heapq reference's rate, on every shipped
benchmark-suite training graph of 900 to 1,100 ops (``ptb``, ``nmt``, ``cifar10`` seeds
chosen by size, not by hand: about 2.2 edges per op, where the synthetic graph
above has 4; printed one by one and as minimum / median / maximum) and on two
real CNN training graphs (``resnet101``, ``inception_v3``: 1.4 edges per op);
the time per op on a 100-op and a
1,000-op graph (does the cost grow with the working set?), and the wall time of
one ``simulate`` call on a 10,000-op training graph.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time

import numpy as np

from baselines import place
from placement_env import Cluster, layered_dag, load_graph, simulate, simulate_batch
from placement_env.registry import SUITES
from placement_env.simulator_reference import simulate_reference


SIZE_RANGE = (900, 1100)  # "a training graph of about 1,000 ops"
SIZED_SUITES = ("ptb", "nmt", "cifar10")
CNN_GRAPHS = ("resnet101", "inception_v3")
TARGET = 10_000  # evaluations per second


def best_rate(fn, count: int, repeats: int = 3) -> float:
    """Evaluations per second: ``count`` evaluations per call of ``fn``, best of ``repeats``."""
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return count / best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", metavar="FILE", help="write the figures as JSON")
    parser.add_argument("--devices", type=int, default=3)
    args = parser.parse_args()

    cluster = Cluster.preset("p100", args.devices)
    graph = layered_dag(0, num_ops=500)
    rng = np.random.default_rng(0)
    random_units = rng.integers(0, args.devices, (2000, graph.num_units))
    random_p = random_units[:, graph.unit_of]
    heft_units = graph.unit_placement(place("heft", graph, cluster))
    search_units = np.repeat(heft_units[None, :], 2000, axis=0)
    moved = rng.random(search_units.shape) < 0.05
    search_units[moved] = rng.integers(0, args.devices, int(moved.sum()))
    search_p = search_units[:, graph.unit_of]
    simulate_batch(graph, random_p[:2], cluster)  # compile / load the kernel
    simulate(graph, random_p[0], cluster)

    figures = {
        "graph": {"name": graph.name, "ops": graph.num_nodes, "edges": graph.num_edges, "units": graph.num_units},
        "devices": args.devices,
        "batch_random_evals_per_s": best_rate(lambda: simulate_batch(graph, random_p, cluster, check=False), 2000),
        "batch_search_evals_per_s": best_rate(lambda: simulate_batch(graph, search_p, cluster, check=False), 2000),
        "single_random_evals_per_s": best_rate(lambda: [simulate(graph, p, cluster) for p in random_p[:300]], 300),
        "reference_random_evals_per_s": best_rate(
            lambda: [simulate_reference(graph, p, cluster) for p in random_p[:10]], 10),
    }
    figures["speedup_batch_vs_reference"] = figures["batch_random_evals_per_s"] / figures["reference_random_evals_per_s"]

    shipped = {}
    graphs = {name: load_graph(name) for suite in SIZED_SUITES for name in SUITES[suite]}
    sized = [name for name, g_ship in graphs.items() if SIZE_RANGE[0] <= g_ship.num_nodes <= SIZE_RANGE[1]]
    graphs.update((name, load_graph(name)) for name in CNN_GRAPHS)
    for name in sized + list(CNN_GRAPHS):
        g_ship = graphs[name]
        units = rng.integers(0, args.devices, (2000, g_ship.num_units))[:, g_ship.unit_of]
        simulate_batch(g_ship, units[:2], cluster)
        shipped[name] = {"ops": g_ship.num_nodes, "edges": g_ship.num_edges,
                         "batch_random_evals_per_s": best_rate(
                             lambda: simulate_batch(g_ship, units, cluster, check=False), 2000),
                         "reference_random_evals_per_s": best_rate(
                             lambda: [simulate_reference(g_ship, p, cluster) for p in units[:5]], 5)}
    figures["shipped_graphs"] = shipped
    sized_rates = [shipped[name]["batch_random_evals_per_s"] for name in sized]
    figures["sized_training_graphs"] = {
        "ops_range": list(SIZE_RANGE), "graphs": sized, "min": min(sized_rates),
        "median": float(np.median(sized_rates)), "max": max(sized_rates),
        "at_or_above_target": sum(r >= TARGET for r in sized_rates), "target": TARGET}

    per_op = {}
    for forward_ops in (50, 500):
        g_size = layered_dag(0, num_ops=forward_ops)
        units = rng.integers(0, args.devices, (1000, g_size.num_units))[:, g_size.unit_of]
        simulate_batch(g_size, units[:2], cluster)
        rate = best_rate(lambda: simulate_batch(g_size, units, cluster, check=False), 1000)
        per_op[g_size.num_nodes] = 1e9 / rate / g_size.num_nodes
    figures["ns_per_op_by_graph_size"] = per_op

    big = layered_dag(1, num_ops=5000, density=0.02)
    big_p = big.expand_unit_placement(rng.integers(0, args.devices, big.num_units))
    simulate(big, big_p, cluster)
    t0 = time.perf_counter()
    simulate(big, big_p, cluster)
    figures["big_graph"] = {"ops": big.num_nodes, "edges": big.num_edges, "seconds": time.perf_counter() - t0}
    figures["machine"] = {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
                          "python": platform.python_version()}

    g = figures["graph"]
    print(f"graph: {g['name']}, {g['ops']} ops, {g['edges']} edges, {g['units']} units; {args.devices} x p100")
    print(f"simulate_batch, random placements : {figures['batch_random_evals_per_s']:>10,.0f} evaluations/s")
    print(f"simulate_batch, search placements : {figures['batch_search_evals_per_s']:>10,.0f} evaluations/s")
    print(f"simulate (with schedule), random  : {figures['single_random_evals_per_s']:>10,.0f} evaluations/s")
    print(f"heapq reference, random           : {figures['reference_random_evals_per_s']:>10,.1f} evaluations/s")
    print(f"batch / reference speed-up        : {figures['speedup_batch_vs_reference']:>10,.0f}x")
    for name, f in shipped.items():
        print(f"simulate_batch, random, {name:<13}: {f['batch_random_evals_per_s']:>8,.0f} evaluations/s"
              f"  ({f['ops']} ops, {f['edges']} edges; heapq {f['reference_random_evals_per_s']:,.0f}/s)")
    z = figures["sized_training_graphs"]
    print(f"shipped training graphs of {SIZE_RANGE[0]:,}-{SIZE_RANGE[1]:,} ops ({len(sized)}): "
          f"min {z['min']:,.0f}, median {z['median']:,.0f}, max {z['max']:,.0f} evaluations/s; "
          f"{z['at_or_above_target']} of {len(sized)} at or above {TARGET:,}/s")
    for ops, ns in per_op.items():
        print(f"time per op, {ops:>5}-op graph, random placements: {ns:6.0f} ns")
    b = figures["big_graph"]
    print(f"{b['ops']:,}-op graph ({b['edges']:,} edges), one simulate call: {b['seconds'] * 1e3:.1f} ms")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(figures, f, indent=1)


if __name__ == "__main__":
    main()
