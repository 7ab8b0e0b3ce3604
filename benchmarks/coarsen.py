"""Coarsening speed: seconds to bring a 10,000-op training graph down to a given number of units.

Run: ``python benchmarks/coarsen.py``.
"""

from __future__ import annotations

import time

from machine import machine_line

from placement_env import layered_dag
from placement_env.graph.coarsen import coarsen


def main() -> None:
    print(machine_line())
    graph = layered_dag(1, num_ops=5000, density=0.02)
    print(f"{graph.name}: {graph.num_nodes} ops, {graph.num_edges} edges, {graph.num_units} units")
    for target in (2000, 500, 100):
        t0 = time.perf_counter()
        coarse = coarsen(graph, target)
        print(f"to at most {target:>5} units: {coarse.num_units:>5} units in {time.perf_counter() - t0:6.2f} s")


if __name__ == "__main__":
    main()
