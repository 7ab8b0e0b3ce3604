"""Budgets under load: does ``train.py`` stop within 10% of ``--budget-seconds`` with busy processes beside it?

    python benchmarks/busy_budget.py [--budget-seconds 20] [--busy 2] [--algos guided ppo] [--repeats 2]

Starts ``--busy`` processes that spin on the CPU (on a 2-core machine, two of them take every core), then runs
``train.py`` on the default graph with each algorithm, ``--repeats`` times, and prints the search seconds
(``results.json``), their ratio to the budget, the CPU seconds the run got and the command's wall time.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from machine import machine_line

ROOT = Path(__file__).resolve().parents[1]


def spin() -> None:
    while True:
        pass


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget-seconds", type=float, default=20.0)
    parser.add_argument("--busy", type=int, default=2)
    parser.add_argument("--algos", nargs="+", default=["guided", "ppo"])
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    print(machine_line())
    busy = [multiprocessing.Process(target=spin, daemon=True) for _ in range(args.busy)]
    for process in busy:
        process.start()
    worst = 0.0
    try:
        with tempfile.TemporaryDirectory() as scratch:
            for repeat in range(args.repeats):
                for algo in args.algos:
                    out = Path(scratch) / f"{algo}{repeat}"
                    began = time.perf_counter()
                    done = subprocess.run([sys.executable, str(ROOT / "train.py"), "--algo", algo,
                                           "--budget-seconds", str(args.budget_seconds), "--out", str(out),
                                           "--progress", "off"], capture_output=True, text=True)
                    wall = time.perf_counter() - began
                    if done.returncode != 0:
                        print(f"{algo}: failed: {done.stderr.strip().splitlines()[-1]}")
                        continue
                    r = json.loads((out / "results.json").read_text())
                    ratio = r["search_seconds"] / args.budget_seconds
                    worst = max(worst, ratio)
                    print(f"{algo} (run {repeat + 1}): {r['search_seconds']:.1f} s of search for a "
                          f"{args.budget_seconds:g}-s budget ({ratio:.2f}x), {r['cpu_seconds']:.1f} CPU s, "
                          f"{r['steps']} steps, command {wall:.1f} s, best {r['makespan'] * 1e3:.3f} ms", flush=True)
    finally:
        for process in busy:
            process.terminate()
    print(f"worst: {worst:.2f}x the budget ({'within' if worst <= 1.1 else 'beyond'} 10%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
