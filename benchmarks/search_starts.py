"""Where should a search placer start? HEFT's placement, the best fast placement, or the 3 best?

    python benchmarks/search_starts.py --search local-search
    python benchmarks/search_starts.py --search anneal [--budget-seconds 5]

``local-search``: :func:`baselines.refine` (its default rounds and patience) on 9 graphs, 3 and 8 P100s; from
the 3 best starts each refinement runs in full. ``anneal``: :func:`baselines.anneal` on 8 tuning graphs (suite
seeds 1-2 and synthetic graphs; never the held-out seeds 100 and up, nor the real models the learned-placer
benchmark uses) at the same total budget; from the 3 best starts, a third of it each. Prints each cell's best
makespan (ms) under each rule and how often a rule is at or below the HEFT start. The rules the two placers use
(:data:`baselines.placers.SEARCH_STARTS`, 3 starts) come from these measurements.
"""

from __future__ import annotations

import argparse

import numpy as np
from benchmarks_common import feasible_starts

from baselines import PLACERS
from baselines.anneal import anneal
from baselines.local_search import refine
from placement_env import Cluster, load_graph

GRAPHS = {
    "local-search": ("cifar10/0", "cifar10/5", "ptb/0", "ptb/7", "nmt/0", "nmt/3", "synthetic/0", "resnet50",
                     "inception_v3"),
    "anneal": ("cifar10/1", "cifar10/2", "ptb/1", "ptb/2", "nmt/1", "nmt/2", "synthetic/1", "synthetic/2"),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--search", choices=sorted(GRAPHS), required=True)
    parser.add_argument("--budget-seconds", type=float, default=5.0, help="anneal's budget per cell and rule")
    args = parser.parse_args()
    budget = args.budget_seconds

    def search(graph, cluster, placement, share: float = 1.0) -> float:
        if args.search == "anneal":
            return anneal(graph, cluster, placement, time_budget=budget * share).makespan
        return refine(graph, cluster, placement).makespan

    rows = []
    for name in GRAPHS[args.search]:
        graph = load_graph(name)
        for devices in (3, 8):
            cluster = Cluster.preset("p100", devices)
            starts = feasible_starts(graph, cluster)
            heft = search(graph, cluster, PLACERS["heft"](graph, cluster, 0))
            best = search(graph, cluster, starts[0][2])
            top3 = min(search(graph, cluster, p, 1 / 3 if args.search == "anneal" else 1.0) for _, _, p in starts[:3])
            rows.append((heft, best, top3))
            print(f"{name:12} {devices}  best fast: {starts[0][1]:13}  from HEFT {heft * 1e3:9.3f}  "
                  f"from the best {best * 1e3:9.3f}  from the 3 best {top3 * 1e3:9.3f} ms", flush=True)
    h, b, m = (np.array(column) for column in zip(*rows))
    for label, x in (("best start", b), ("3 best starts", m)):
        print(f"{label} against HEFT's start: at or below in {(x <= h).sum()} of {h.size} cells, "
              f"{(x < h).sum()} strictly; mean ratio {(x / h).mean():.3f}")


if __name__ == "__main__":
    main()
