"""Training on big graphs: peak memory and seconds per environment step for 1k- to 100k-op training graphs.

    python benchmarks/big_graphs.py [--sizes 1000 5000 20000 100000] [--budget-seconds 60] [--algo ppo]

Each size is a chain of forward ops (4 MB activations, parameters on every 10th op) expanded into its training
graph (so N ops, N/2 units), trained by ``train.py`` (FADP-GT and ``--algo``, by default train.py's own, the guided
search; default ``--max-units`` 2,000: the bigger
graphs are placed coarsened) in a process of its own, for ``--budget-seconds`` of training on 3 P100s. Prints the
largest peak memory of the runs so far (``ru_maxrss`` of the children; the sizes grow, so it is the latest run's),
the command's wall time (graph, coarsening, training, and the classical placers it is compared with), and the
search time and steps ``results.json`` records.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from machine import machine_line

from placement_env import ComputationGraph, Edge, Node, to_training_graph, write_graph

ROOT = Path(__file__).resolve().parents[1]


def chain(ops: int) -> ComputationGraph:
    n = ops // 2
    nodes = [Node(f"op{i}", "matmul", 1e-4, 4e6, 1e6 if i % 10 == 0 else 0) for i in range(n)]
    return to_training_graph(ComputationGraph(nodes, [Edge(f"op{i}", f"op{i + 1}") for i in range(n - 1)],
                                              name=f"chain{ops}"))


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 5000, 20000, 100000])
    parser.add_argument("--budget-seconds", type=float, default=60.0)
    parser.add_argument("--algo", help="train.py's --algo (default: train.py's default)")
    args = parser.parse_args()
    print(machine_line())
    with tempfile.TemporaryDirectory() as scratch:
        for ops in args.sizes:
            path = Path(scratch) / f"chain{ops}.json.gz"
            write_graph(chain(ops), path)
            out = Path(scratch) / f"run{ops}"
            start = time.perf_counter()
            done = subprocess.run([sys.executable, str(ROOT / "train.py"), "--graph", str(path), "--budget-seconds",
                                   str(args.budget_seconds), "--out", str(out), "--progress", "off",
                                   *(["--algo", args.algo] if args.algo else [])],
                                  capture_output=True, text=True)
            wall = time.perf_counter() - start
            peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2**20  # GiB (ru_maxrss is in KiB)
            if done.returncode != 0:
                print(f"{ops:>7} ops: failed: {done.stderr.strip().splitlines()[-1]}")
                continue
            results = json.loads((out / "results.json").read_text())
            print(f"{ops:>7} ops: {results['steps']} steps in {results['search_seconds']:.1f} s of search "
                  f"({results['search_seconds'] / results['steps']:.3f} s per step); command {wall:.1f} s; peak "
                  f"memory so far {peak:.2f} GiB", flush=True)


if __name__ == "__main__":
    main()
