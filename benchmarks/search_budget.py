"""The search placers' budgets on big graphs: ``python -m baselines`` on chains of 100,000 and 1,000,000 ops.

    python benchmarks/search_budget.py [--sizes 100000 1000000] [--budget-seconds 4] [--placers all]

Each size is a chain of forward ops (10 us each, 10 kB activations, 1 kB parameters, so that one P100 holds
it) written as a graph file and placed on 4 P100s by the command a user runs, ``python -m baselines --graph F
--devices 4 --budget-seconds B --json J``, in a process of its own. Prints the command's wall time, whether it
printed the large-graph notice, and each placer's seconds from ``J``; for the search placers (local-search,
anneal) also their seconds over the budget, which should stay near or below 1.00.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from machine import machine_line

from placement_env import ComputationGraph, Edge, Node, write_graph

ROOT = Path(__file__).resolve().parents[1]
SEARCH_PLACERS = ("local-search", "anneal")


def chain(ops: int) -> ComputationGraph:
    nodes = [Node(f"op{i}", "matmul", 1e-5, 1e4, 1e3) for i in range(ops)]
    return ComputationGraph(nodes, [Edge(f"op{i}", f"op{i + 1}") for i in range(ops - 1)], name=f"chain{ops}")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--budget-seconds", type=float, default=4.0)
    parser.add_argument("--placers", default="all", help="python -m baselines --placers (default: all)")
    args = parser.parse_args()
    print(machine_line())
    with tempfile.TemporaryDirectory() as scratch:
        for ops in args.sizes:
            path, table = Path(scratch) / f"chain{ops}.json.gz", Path(scratch) / f"chain{ops}.table.json"
            write_graph(chain(ops), path)
            command = [sys.executable, "-m", "baselines", "--graph", str(path), "--devices", "4",
                       "--budget-seconds", str(args.budget_seconds), "--json", str(table)]
            if args.placers != "all":
                command += ["--placers", args.placers]
            start = time.perf_counter()
            done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
            wall = time.perf_counter() - start
            if done.returncode != 0:
                print(f"{ops:>9,} ops: failed: {(done.stderr.strip().splitlines() or ['?'])[-1]}")
                continue
            notice = any(line.startswith("notice:") for line in done.stderr.splitlines())
            rows = json.loads(table.read_text())["rows"]
            print(f"{ops:>9,} ops: command {wall:.1f} s, notice {'yes' if notice else 'no'}")
            for row in rows:
                ratio = (f"  {row['place_seconds'] / args.budget_seconds:.2f} x the {args.budget_seconds:g} s budget"
                         if row["placer"] in SEARCH_PLACERS else "")
                print(f"    {row['placer']:<14} {row['place_seconds']:>7.2f} s{ratio}")


if __name__ == "__main__":
    main()
