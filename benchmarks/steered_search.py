"""The steered annealing against plain annealing on the benchmark's held-out cells, at equal wall-clock and at
equal evaluations.

    python benchmarks/steered_search.py --policy agents/steering/pretrained/policy.json [--budgets 1 3]
        [--steps 60] [--seeds 1] [--large] [--pipelined] [--no-held-out] [--json experiments/steering/eval.json]

Cells: the 51 held-out cells of ``python -m agents.benchmark`` (ptb / cifar10 / nmt seeds 100-104 on 3, 5 and 8
P100s, the six real models on 8), with ``--large`` also its 18 large cells, with ``--pipelined`` its 12 pipelined
ones (contiguous: both searches in contiguous mode). For each cell and seed:

* **equal wall-clock**, each budget: the ``anneal`` placer and the ``steered`` one
  (:func:`agents.steering.placer.steered_placer`: the same starts, settings and clock), run one after the other
  on the same core after the start placers' shared set-up is built (:func:`agents.learned.report.warm_up`), the
  order alternating by cell;
* **equal evaluations** (REGAL's measure): from the best start of the annealing's start placers, ``--steps``
  annealing steps (64 placements judged a step) plain and steered, the same seed.

Printed per cell: the steered makespan over the plain one minus one (negative: the steered search is ahead).
The summary per budget: the mean of that difference, and the share of cells where the steered search is at or
below the plain one.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
from machine import machine_line

from agents.learned.report import warm_up
from agents.paper.benchmark_cells import held_out_cells, large_cells, pipelined_cells
from agents.steering.placer import steered_placer, steering_policy
from agents.steering.policy import SteeredProposals
from baselines.anneal import anneal_units
from baselines.placers import CONTIGUOUS_PLACERS, PLACERS, SEARCH_STARTS, search_placers
from baselines.starts import ranked_starts
from placement_env.sim.simulator import DEFAULT_PARAM_FACTOR, Simulator


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policy", default=None, help="a steering policy file (default: the shipped one)")
    parser.add_argument("--budgets", type=float, nargs="*", default=[1.0, 3.0],
                        help="seconds (default 1 3; none: equal evaluations only)")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--seeds", type=int, default=1)
    parser.add_argument("--large", action="store_true")
    parser.add_argument("--pipelined", action="store_true",
                        help="also the pipelined cells (the zoo's transformers on 8 and 16 A100s, 8 micro-batches, "
                             "contiguous)")
    parser.add_argument("--no-held-out", action="store_true", help="leave out the 51 held-out cells")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    print(machine_line(), flush=True)
    policy = steering_policy(args.policy)
    cells = (([] if args.no_held_out else held_out_cells()) + (large_cells() if args.large else [])
             + (pipelined_cells() if args.pipelined else []))
    rows = []
    for index, cell in enumerate(cells):
        graph, cluster = cell.load()
        simulator = Simulator(graph, cluster, DEFAULT_PARAM_FACTOR, *cell.step)
        simulator.run(np.zeros(graph.num_nodes, np.int64))  # compiled before any clock starts
        warm_up(graph, cluster, cell.step, cell.contiguous)  # the start placers' set-up both searches share
        row: dict = {"cell": cell.key}
        for seed in range(args.seeds):
            for budget in args.budgets:
                placers = {"anneal": search_placers(budget, cell.contiguous)["anneal"],
                           "steered": steered_placer(budget, policy, cell.contiguous)}
                order = ["anneal", "steered"] if (index + seed) % 2 == 0 else ["steered", "anneal"]
                result = {}
                for name in order:
                    began = time.perf_counter()
                    placement = placers[name](graph, cluster, seed, step=cell.step)
                    seconds = time.perf_counter() - began
                    makespan, peak, _ = simulator.run(placement)
                    result[name] = (float(makespan), seconds)
                row.setdefault(f"{budget:g}s", []).append(
                    {"anneal": result["anneal"], "steered": result["steered"],
                     "difference": result["steered"][0] / result["anneal"][0] - 1})
            starts = CONTIGUOUS_PLACERS if cell.contiguous else PLACERS
            found, _ = ranked_starts(graph, cluster, {name: starts[name] for name in SEARCH_STARTS}, seed,
                                     step=cell.step)
            start = graph.unit_placement(found[0][2])
            plain = anneal_units(graph, cluster, start, seed, None, args.steps, step=cell.step,
                                 contiguous=cell.contiguous).makespan
            steered = anneal_units(graph, cluster, start, seed, None, args.steps, step=cell.step,
                                   contiguous=cell.contiguous,
                                   proposals=SteeredProposals(policy, graph, cluster, contiguous=cell.contiguous,
                                                              step=cell.step)).makespan
            row.setdefault("evaluations", []).append({"anneal": plain, "steered": steered,
                                                      "difference": steered / plain - 1})
        rows.append(row)
        print(f"{cell.key:28s} " + "  ".join(
            f"{key} {np.mean([r['difference'] for r in row[key]]):+.2%}" for key in row if key != "cell"),
            flush=True)
    print("summary (steered / anneal - 1; negative: steered ahead):")
    for key in [f"{b:g}s" for b in args.budgets] + ["evaluations"]:
        differences = np.array([np.mean([r["difference"] for r in row[key]]) for row in rows])
        print(f"  {key:12s} mean {differences.mean():+.2%}  median {np.median(differences):+.2%}  at or below "
              f"anneal on {np.mean(differences <= 0):.0%} of {differences.size} cells", flush=True)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"machine": machine_line(), "command": " ".join(sys.argv),
                                               "policy": policy.to_dict(), "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
