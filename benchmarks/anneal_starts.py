"""Where should ``anneal`` start? HEFT's placement, the best fast placement, or the 3 best with a third each?

    python benchmarks/anneal_starts.py [--budget-seconds 5]

For tuning graphs only (suite seeds 0-2 and synthetic graphs, 3 and 8 P100s; never the held-out seeds 100 and
up, nor the real models the learned-placer benchmark uses): the best makespan (ms) of :func:`baselines.anneal`
from each rule at the same total budget, and how often each rule is at or below the HEFT start.
"""

from __future__ import annotations

import argparse

import numpy as np
from benchmarks_common import feasible_starts

from baselines import PLACERS
from baselines.anneal import anneal
from placement_env import Cluster, load_graph

GRAPHS = ("cifar10/1", "cifar10/2", "ptb/1", "ptb/2", "nmt/1", "nmt/2", "synthetic/1", "synthetic/2")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--budget-seconds", type=float, default=5.0)
    budget = parser.parse_args().budget_seconds
    rows = []
    for name in GRAPHS:
        graph = load_graph(name)
        for devices in (3, 8):
            cluster = Cluster.preset("p100", devices)
            starts = feasible_starts(graph, cluster)
            heft = anneal(graph, cluster, PLACERS["heft"](graph, cluster, 0), time_budget=budget).makespan
            best = anneal(graph, cluster, starts[0][2], time_budget=budget).makespan
            top3 = min(anneal(graph, cluster, p, time_budget=budget / 3).makespan for _, _, p in starts[:3])
            rows.append((heft, best, top3))
            print(f"{name:12} {devices}  best fast: {starts[0][1]:13}  from HEFT {heft * 1e3:9.3f}  "
                  f"from the best {best * 1e3:9.3f}  3 best, a third each {top3 * 1e3:9.3f} ms", flush=True)
    h, b, m = (np.array(column) for column in zip(*rows))
    for label, x in (("best start", b), ("3 best starts", m)):
        print(f"{label} against HEFT's start: at or below in {(x <= h).sum()} of {h.size} cells, "
              f"{(x < h).sum()} strictly; mean ratio {(x / h).mean():.3f}")


if __name__ == "__main__":
    main()
