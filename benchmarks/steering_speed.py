"""What steering costs the annealing: the draws of a step, steered and plain, beside judging them; and the set-up
the first search on a graph pays.

    python benchmarks/steering_speed.py [--policy agents/steering/pretrained/policy.json] [--repeats 300]

1. On ptb/3 over 5 P100s, from m-ETF's placement: the milliseconds of one step's 64 neighbours drawn by
   :class:`~agents.steering.policy.SteeredProposals` (the shipped policy) and by the plain annealing's
   :func:`~baselines.anneal.unit_neighbours`, interleaved, each the median of ``--repeats``; and of judging them
   (one ``simulate_batch``).
2. On GPT-2 over 2 nodes of 8 A100s, 8 micro-batches: the seconds the annealing's start placers take on a graph
   seen for the first time and on the same graph again (what :func:`agents.learned.report.warm_up` builds before a
   search and the annealing it is compared with are timed).
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from machine import machine_line

from agents.learned.report import warm_up
from agents.steering.placer import steering_policy
from agents.steering.policy import SteeredProposals
from baselines.anneal import nearest_units, unit_neighbours
from baselines.local_search import judge_unit_placements
from baselines.placers import place
from placement_env.cluster import Cluster
from placement_env.sim.pipeline import Step
from placement_env.sim.simulator import DEFAULT_PARAM_FACTOR, Simulator
from placement_env.zoo.registry import load_graph


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policy", default=None)
    parser.add_argument("--repeats", type=int, default=300)
    args = parser.parse_args()
    print(machine_line(), flush=True)
    graph, cluster = load_graph("ptb/3"), Cluster.preset("p100", 5)
    start = graph.unit_placement(place(graph, cluster, "m-etf"))
    steered = SteeredProposals(steering_policy(args.policy), graph, cluster)
    near = nearest_units(graph, 11)
    simulator = Simulator(graph, cluster, DEFAULT_PARAM_FACTOR)
    rng = np.random.default_rng(0)
    times: dict[str, list[float]] = {"steered draws": [], "plain draws": [], "judging 64": []}
    rows = steered(start, 64, rng)
    judge_unit_placements(simulator, rows)  # compiled before the clock
    for _ in range(args.repeats):
        began = time.perf_counter()
        rows = steered(start, 64, rng)
        times["steered draws"].append(time.perf_counter() - began)
        began = time.perf_counter()
        unit_neighbours(start, near, cluster.num_devices, 64, rng)
        times["plain draws"].append(time.perf_counter() - began)
        if len(times["judging 64"]) < 50:
            began = time.perf_counter()
            judge_unit_placements(simulator, rows)
            times["judging 64"].append(time.perf_counter() - began)
    print(f"ptb/3 on 5 x p100 ({graph.num_units} units), one step of 64 neighbours, median ms:")
    for name, seconds in times.items():
        print(f"  {name:14s} {np.median(seconds) * 1e3:7.3f}")
    step = Step(8, "1f1b")
    cluster = Cluster.preset("a100-nvlink", 16, per_node=8)
    for label in ("first", "again"):
        if label == "first":
            gpt2 = load_graph("gpt2")
        began = time.perf_counter()
        warm_up(gpt2, cluster, step, contiguous=True)
        print(f"gpt2 on 2 x 8 a100, 8 micro-batches, the start placers ({label} time on the graph): "
              f"{time.perf_counter() - began:.2f} s", flush=True)


if __name__ == "__main__":
    main()
