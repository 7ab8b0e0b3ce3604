"""Simulator throughput: evaluations per second, compiled kernel vs the literal heapq reference.

Run: ``python benchmarks/simulator.py`` (add ``--json FILE`` to keep the figures).

Measures, single-threaded, on the training graph of a seeded layered DAG of
500 forward ops (1,000 ops in all):

* ``simulate_batch`` on 2,000 random unit placements, on 2,000 "search"
  placements (HEFT's placement with 5% of the units moved at random, the kind
  of neighbourhood a search or a trained policy visits) and on 2,000
  neighbours of HEFT's placement as the local search draws them (one unit
  moved, or two swapped: ``baselines.local_search.neighbours``);
* ``simulate`` one placement at a time (building the full schedule);
* the pure-Python heapq reference on a few of the same placements;

the same batched rate, with the heapq reference's rate, on every shipped
benchmark-suite training graph of 900 to 1,100 ops (``ptb``, ``nmt``, ``cifar10`` seeds
chosen by size, not by hand: about 2.2 edges per op, where the synthetic graph
above has 4; printed one by one and as minimum / median / maximum; the rate on
local-search neighbours too, as minimum / median / maximum) and on two
real CNN training graphs (``resnet101``, ``inception_v3``: 1.4 edges per op);
the time per op on a 100-op and a 1,000-op graph (does the cost grow with the
working set?), and the wall time of one ``simulate`` call on a 10,000-op
training graph; the pipelined step (``microbatches=8``, 1F1B and GPipe) on the
1,000-op graph's random placements, as a multiple of the plain step per
placement (the target: at most ``1.5 x 8``), beside the plain kernel run on the
unrolled graph itself (what the 8 x larger working set alone costs); and the
plain step of a 2,000-op training graph on 64 devices (target: 1,000 a second).

Every rate is the best of ``--repeats`` timed calls (default 5), taken in
rounds over all the figures after one untimed round: on a shared virtual
machine another tenant can slow the code by 10-20% for seconds at a time, and
never speed it up, so the fastest call is the figure that repeats. Python's
garbage collector is off while timing, as in ``timeit``.
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import time

import numpy as np
from machine import machine_line, machine_summary

from baselines import place
from baselines.local_search import neighbours
from placement_env import Cluster, layered_dag, load_graph, simulate, simulate_batch
from placement_env.sim.pipeline import SCHEDULES, unrolled
from placement_env.sim.reference import simulate_reference
from placement_env.zoo.registry import SUITES

SIZE_RANGE = (900, 1100)  # "a training graph of about 1,000 ops"
SIZED_SUITES = ("ptb", "nmt", "cifar10")
CNN_GRAPHS = ("resnet101", "inception_v3")
TARGET = 10_000  # evaluations per second
MICROBATCHES = 8
PIPELINE_TARGET = 1.5 * MICROBATCHES  # pipelined step's cost per placement, in plain steps
WIDE_TARGET = 1_000  # evaluations per second of a 2,000-op graph on 64 devices


REPEATS = 5


def best_rates(calls: dict, repeats: int = REPEATS) -> dict:
    """Evaluations per second of each ``name: (fn, count)``: the fastest of ``repeats`` timed calls.

    ``count`` evaluations are done per call of ``fn``. Every ``fn`` is called
    once untimed (the first calls on fresh arrays run up to 15% slower), then
    the repeats go round all of them in turn, so that a slow spell of the
    machine lasting seconds costs each figure one repeat, not all of them.
    Python's garbage collector is off while timing, as in :mod:`timeit`: its
    passes over every live object (all the loaded graphs) would otherwise land
    at random in the pure-Python reference's calls.
    """
    for fn, _ in calls.values():
        fn()
    best = dict.fromkeys(calls, float("inf"))
    gc.collect()
    gc.disable()
    try:
        for _ in range(repeats):
            for name, (fn, _) in calls.items():
                t0 = time.perf_counter()
                fn()
                best[name] = min(best[name], time.perf_counter() - t0)
    finally:
        gc.enable()
    return {name: count / best[name] for name, (_, count) in calls.items()}


def _batch(graph, placements: np.ndarray, cluster) -> tuple:
    """A timed call: ``simulate_batch`` of all rows, and how many evaluations that is."""
    return functools.partial(simulate_batch, graph, placements, cluster, check=False), len(placements)


def _each(fn, graph, placements: np.ndarray, cluster) -> tuple:
    """A timed call: ``fn(graph, row, cluster)`` for each row, and how many evaluations that is."""
    return (lambda: [fn(graph, p, cluster) for p in placements]), len(placements)


def _heft_units(graph, cluster) -> np.ndarray:
    """HEFT's placement of ``graph``, a device per placement unit."""
    return graph.unit_placement(place(graph, cluster, "heft"))


def _neighbour_placements(graph, units: np.ndarray, cluster, rng: np.random.Generator) -> np.ndarray:
    """2,000 placements (per node) next to ``units``, as the local search draws them: one unit moved or two swapped."""
    return neighbours(units, cluster.num_devices, 2000, rng)[:, graph.unit_of]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", metavar="FILE", help="write the figures as JSON")
    parser.add_argument("--devices", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=REPEATS, help="timed calls per figure; the fastest counts")
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")

    cluster = Cluster.preset("p100", args.devices)
    graph = layered_dag(0, num_ops=500)
    rng = np.random.default_rng(0)
    neighbour_rng = np.random.default_rng(1)  # its own stream: the random placements stay those of earlier runs
    random_units = rng.integers(0, args.devices, (2000, graph.num_units))
    random_p = random_units[:, graph.unit_of]
    heft_units = _heft_units(graph, cluster)
    search_units = np.repeat(heft_units[None, :], 2000, axis=0)
    moved = rng.random(search_units.shape) < 0.05
    search_units[moved] = rng.integers(0, args.devices, int(moved.sum()))
    search_p = search_units[:, graph.unit_of]
    calls = {
        "batch_random": _batch(graph, random_p, cluster),
        "batch_search": _batch(graph, search_p, cluster),
        "batch_neighbours": _batch(graph, _neighbour_placements(graph, heft_units, cluster, neighbour_rng), cluster),
        "single_random": _each(simulate, graph, random_p[:300], cluster),
        "reference_random": _each(simulate_reference, graph, random_p[:10], cluster),
    }
    step = unrolled(graph, MICROBATCHES)
    for schedule in SCHEDULES:
        calls[f"pipelined {schedule}"] = (functools.partial(
            simulate_batch, graph, random_p[:250], cluster, check=False, microbatches=MICROBATCHES,
            schedule=schedule), 250)
    calls["plain kernel, unrolled graph"] = _batch(step.graph, random_p[:250][:, step.origin], cluster)
    wide_graph, wide_cluster = layered_dag(0, num_ops=1000), Cluster.preset("a100-nvlink", 64)
    calls["64 devices"] = _batch(wide_graph, rng.integers(0, 64, (500, wide_graph.num_units))[:, wide_graph.unit_of],
                                 wide_cluster)

    graphs = {name: load_graph(name) for suite in SIZED_SUITES for name in SUITES[suite]}
    sized = [name for name, g_ship in graphs.items() if SIZE_RANGE[0] <= g_ship.num_nodes <= SIZE_RANGE[1]]
    graphs.update((name, load_graph(name)) for name in CNN_GRAPHS)
    for name in sized + list(CNN_GRAPHS):
        g_ship = graphs[name]
        units = rng.integers(0, args.devices, (2000, g_ship.num_units))[:, g_ship.unit_of]
        calls[f"batch {name}"] = _batch(g_ship, units, cluster)
        if name in sized:
            calls[f"neighbours {name}"] = _batch(
                g_ship, _neighbour_placements(g_ship, _heft_units(g_ship, cluster), cluster, neighbour_rng), cluster)
        calls[f"reference {name}"] = _each(simulate_reference, g_ship, units[:5], cluster)

    sizes = {}
    for forward_ops in (50, 500):
        g_size = layered_dag(0, num_ops=forward_ops)
        units = rng.integers(0, args.devices, (1000, g_size.num_units))[:, g_size.unit_of]
        sizes[g_size.num_nodes] = f"size {g_size.num_nodes}"
        calls[sizes[g_size.num_nodes]] = _batch(g_size, units, cluster)

    big = layered_dag(1, num_ops=5000, density=0.02)
    big_p = big.expand_unit_placement(rng.integers(0, args.devices, big.num_units))
    calls["big"] = _each(simulate, big, big_p[None, :], cluster)

    rates = best_rates(calls, args.repeats)

    figures = {
        "graph": {"name": graph.name, "ops": graph.num_nodes, "edges": graph.num_edges, "units": graph.num_units},
        "devices": args.devices, "repeats": args.repeats,
        "batch_random_evals_per_s": rates["batch_random"],
        "batch_search_evals_per_s": rates["batch_search"],
        "batch_neighbours_evals_per_s": rates["batch_neighbours"],
        "single_random_evals_per_s": rates["single_random"],
        "reference_random_evals_per_s": rates["reference_random"],
    }
    figures["speedup_batch_vs_reference"] = (figures["batch_random_evals_per_s"]
                                             / figures["reference_random_evals_per_s"])
    shipped = {name: {"ops": graphs[name].num_nodes, "edges": graphs[name].num_edges,
                      "batch_random_evals_per_s": rates[f"batch {name}"],
                      "reference_random_evals_per_s": rates[f"reference {name}"]}
               for name in sized + list(CNN_GRAPHS)}
    figures["shipped_graphs"] = shipped
    sized_rates = [shipped[name]["batch_random_evals_per_s"] for name in sized]
    sized_speedups = [shipped[name]["batch_random_evals_per_s"] / shipped[name]["reference_random_evals_per_s"]
                      for name in sized]
    figures["sized_training_graphs"] = {
        "ops_range": list(SIZE_RANGE), "graphs": sized, "min": min(sized_rates),
        "median": float(np.median(sized_rates)), "max": max(sized_rates),
        "at_or_above_target": sum(r >= TARGET for r in sized_rates), "target": TARGET,
        "speedup_vs_reference": [min(sized_speedups), max(sized_speedups)]}
    neighbour_rates = [rates[f"neighbours {name}"] for name in sized]
    figures["sized_training_graphs_neighbours"] = {
        "min": min(neighbour_rates), "median": float(np.median(neighbour_rates)), "max": max(neighbour_rates),
        "at_or_above_target": sum(r >= TARGET for r in neighbour_rates)}
    figures["ns_per_op_by_graph_size"] = {ops: 1e9 / rates[key] / ops for ops, key in sizes.items()}
    figures["big_graph"] = {"ops": big.num_nodes, "edges": big.num_edges, "seconds": 1.0 / rates["big"]}
    plain = rates["batch_random"]
    figures["pipelined_step"] = {
        "microbatches": MICROBATCHES, "target_plain_steps": PIPELINE_TARGET,
        "plain_steps_per_placement": {schedule: plain / rates[f"pipelined {schedule}"] for schedule in SCHEDULES},
        "plain_kernel_on_the_unrolled_graph": plain / rates["plain kernel, unrolled graph"]}
    figures["wide_cluster"] = {"ops": wide_graph.num_nodes, "devices": 64, "evals_per_s": rates["64 devices"],
                               "target": WIDE_TARGET}
    figures["machine"] = machine_summary()

    print(machine_line(figures["machine"]))
    g = figures["graph"]
    print(f"graph: {g['name']}, {g['ops']} ops, {g['edges']} edges, {g['units']} units; {args.devices} x p100; "
          f"best of {args.repeats} call{'s' if args.repeats > 1 else ''}")
    print(f"simulate_batch, random placements : {figures['batch_random_evals_per_s']:>10,.0f} evaluations/s")
    print(f"simulate_batch, search placements : {figures['batch_search_evals_per_s']:>10,.0f} evaluations/s")
    print(f"simulate_batch, HEFT's neighbours : {figures['batch_neighbours_evals_per_s']:>10,.0f} evaluations/s")
    print(f"simulate (with schedule), random  : {figures['single_random_evals_per_s']:>10,.0f} evaluations/s")
    print(f"heapq reference, random           : {figures['reference_random_evals_per_s']:>10,.1f} evaluations/s")
    print(f"batch / reference speed-up        : {figures['speedup_batch_vs_reference']:>10,.0f}x")
    for name, f in shipped.items():
        print(f"simulate_batch, random, {name:<13}: {f['batch_random_evals_per_s']:>8,.0f} evaluations/s"
              f"  ({f['ops']} ops, {f['edges']} edges; heapq {f['reference_random_evals_per_s']:,.0f}/s)")
    z = figures["sized_training_graphs"]
    print(f"shipped training graphs of {SIZE_RANGE[0]:,}-{SIZE_RANGE[1]:,} ops ({len(sized)}): "
          f"min {z['min']:,.0f}, median {z['median']:,.0f}, max {z['max']:,.0f} evaluations/s; "
          f"{z['at_or_above_target']} of {len(sized)} at or above {TARGET:,}/s; "
          f"{z['speedup_vs_reference'][0]:.0f}-{z['speedup_vs_reference'][1]:.0f}x heapq")
    z = figures["sized_training_graphs_neighbours"]
    print(f"the same graphs, HEFT's neighbours: min {z['min']:,.0f}, median {z['median']:,.0f}, max {z['max']:,.0f} "
          f"evaluations/s; {z['at_or_above_target']} of {len(sized)} at or above {TARGET:,}/s")
    for ops, ns in figures["ns_per_op_by_graph_size"].items():
        print(f"time per op, {ops:>5}-op graph, random placements: {ns:6.0f} ns")
    b = figures["big_graph"]
    print(f"{b['ops']:,}-op graph ({b['edges']:,} edges), one simulate call: {b['seconds'] * 1e3:.1f} ms")
    z = figures["pipelined_step"]
    for schedule, cost in z["plain_steps_per_placement"].items():
        print(f"pipelined step, m = {MICROBATCHES}, {schedule:5}: {cost:5.1f} plain steps per placement "
              f"(target <= {PIPELINE_TARGET:.0f}; the plain kernel on the unrolled graph: "
              f"{z['plain_kernel_on_the_unrolled_graph']:.1f})")
    z = figures["wide_cluster"]
    print(f"{z['ops']:,}-op graph on 64 devices, random placements: {z['evals_per_s']:,.0f} evaluations/s "
          f"(target {WIDE_TARGET:,})")
    if args.json:
        with open(args.json, "w") as stream:
            json.dump(figures, stream, indent=1)


if __name__ == "__main__":
    main()
