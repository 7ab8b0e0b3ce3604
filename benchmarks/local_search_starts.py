"""Which start should the local search take? HEFT's placement, the best fast placer's, or the 3 best?

    python benchmarks/local_search_starts.py

For 9 graphs on 3 and 8 P100s: :func:`baselines.refine` (its default rounds and patience) from HEFT's
placement, from the best feasible placement of the fast placers, and from each of the 3 best (keeping the best
result). Prints each cell's makespans (ms) and how often each rule is at or below the HEFT start. The rule
``local-search`` uses (:data:`baselines.placers.SEARCH_STARTS`, 3 starts) comes from this measurement.
"""

import numpy as np
from benchmarks_common import feasible_starts

from baselines import PLACERS
from baselines.local_search import refine
from placement_env import Cluster, load_graph

GRAPHS = ("cifar10/0", "cifar10/5", "ptb/0", "ptb/7", "nmt/0", "nmt/3", "synthetic/0", "resnet50", "inception_v3")


def main() -> None:
    rows = []
    for name in GRAPHS:
        graph = load_graph(name)
        for devices in (3, 8):
            cluster = Cluster.preset("p100", devices)
            starts = feasible_starts(graph, cluster)
            heft = refine(graph, cluster, PLACERS["heft"](graph, cluster, 0)).makespan
            best = refine(graph, cluster, starts[0][2]).makespan
            top3 = min(refine(graph, cluster, p).makespan for _, _, p in starts[:3])
            rows.append((heft, best, top3))
            print(f"{name:12} {devices}  best fast: {starts[0][1]:13}  from HEFT {heft * 1e3:9.3f}  "
                  f"from the best {best * 1e3:9.3f}  from the 3 best {top3 * 1e3:9.3f} ms", flush=True)
    h, b, m = (np.array(column) for column in zip(*rows))
    for label, x in (("best start", b), ("3 best starts", m)):
        print(f"{label} against HEFT's start: at or below in {(x <= h).sum()} of {h.size} cells, "
              f"{(x < h).sum()} strictly; mean ratio {(x / h).mean():.3f}")


if __name__ == "__main__":
    main()
