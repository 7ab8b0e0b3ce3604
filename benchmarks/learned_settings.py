"""How the learned placer's two settings were chosen, on validation graphs (neither training nor held-out).

    python benchmarks/learned_settings.py --policy agents/learned/pretrained/policy.zip
    python benchmarks/learned_settings.py --policy P --skip-zero-shot --schedules none:4 0.75:4 0.75:8

Validation graphs (``--graphs``, ``--fine-tune-graphs``): by default seeds 60 and 61 of ptb, cifar10 and nmt, at 3,
5 and 8 devices: neither the shipped policy's training graphs (seeds 0-47:
``agents/learned/pretrained/pretrain.json``) nor the benchmark's held-out ones (seeds 100-104). The settings of
``agents.learned.placer`` were chosen with seeds 30 and 31 (``--graphs cifar10/30 nmt/30 ptb/30 cifar10/31 nmt/31
ptb/31 --fine-tune-graphs cifar10/30 nmt/31 ptb/31 ptb/30``), which were validation graphs for the first policies
(trained on seeds 0-23) but are training graphs of the shipped one; they were never held-out graphs.

1. Zero-shot temperature: for each temperature, in how many cells the zero-shot placement is at or below HEFT's,
   and below the start placement the policy sees (the best fast placement).
2. Fine-tuning schedules ``SHARE:R``: rounds of two chains of budget / R seconds each, or with SHARE a number, the
   round's 2 x budget / R seconds shared: SHARE continuing the best placement on one cooling schedule over the
   whole budget, the rest from the round's best proposal. For each, in how many cells the fine-tuned placement is
   at or below the ``anneal`` placer's at the same budget (run one after the other on each cell, so that the
   machine's load is alike).
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

import agents.learned.placer as learned
from agents.learned.policy_file import load_policy
from baselines.placers import CONSTRUCTIVE, placers_with_budget
from placement_env import Cluster, load_graph
from placement_env.sim.simulator import Simulator

VALIDATION = ("cifar10/60", "nmt/60", "ptb/60", "cifar10/61", "nmt/61", "ptb/61")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policy", required=True)
    parser.add_argument("--temperatures", type=float, nargs="+", default=[1.0, 0.5, 0.25])
    parser.add_argument("--budget-seconds", type=float, default=10.0)
    parser.add_argument("--schedules", nargs="+", default=["none:4", "none:12", "0.75:4", "0.75:8"])
    parser.add_argument("--graphs", nargs="+", default=list(VALIDATION), help="graphs of the zero-shot part")
    parser.add_argument("--fine-tune-graphs", nargs="+", default=["cifar10/60", "nmt/61", "ptb/61", "ptb/60"])
    parser.add_argument("--skip-zero-shot", action="store_true")
    args = parser.parse_args()
    network = load_policy(args.policy)

    rows = []
    for name in ([] if args.skip_zero_shot else args.graphs):
        for m in (3, 5, 8):
            g, c = load_graph(name), Cluster.preset("p100", m)
            sim = Simulator(g, c)
            heft = sim.run(CONSTRUCTIVE["heft"](g, c, 0))[0]
            start = sim.run(g.expand_unit_placement(learned.start_units(g, c, "best-fast")))[0]
            zero = []
            for t in args.temperatures:
                learned.ZERO_SHOT_TEMPERATURE = t
                zero.append(learned.place(g, c, network, zero_shot=True).makespan)
            rows.append([heft, start, *zero])
            print(f"{name} {m} GPUs: heft {heft * 1e3:.3f} ms, start {start * 1e3:.3f}, zero-shot "
                  + ", ".join(f"T={t:g} {z * 1e3:.3f}" for t, z in zip(args.temperatures, zero)), flush=True)
    a = np.array(rows).reshape(-1, 2 + len(args.temperatures))
    for i, t in enumerate(args.temperatures if rows else []):
        print(f"zero-shot T={t:g}: at or below HEFT in {(a[:, 2 + i] <= a[:, 0] * (1 + 1e-9)).sum()} of {len(a)}, "
              f"below its start in {(a[:, 2 + i] < a[:, 1] * (1 - 1e-9)).sum()}")
    learned.ZERO_SHOT_TEMPERATURE = 0.25

    rows = []
    for name in args.fine_tune_graphs:
        for m in (3, 5, 8):
            g, c = load_graph(name), Cluster.preset("p100", m)
            sim = Simulator(g, c)
            row = [sim.run(placers_with_budget(args.budget_seconds)["anneal"](g, c, 0))[0]]
            for schedule in args.schedules:
                share, rounds, *explore = schedule.split(":")
                learned.INCUMBENT_SHARE = None if share == "none" else float(share)
                learned.ROUNDS_PER_BUDGET = int(rounds)
                learned.EXPLORE_SHARE = float(explore[0]) if explore else 0.0
                row.append(learned.place(g, c, network, args.budget_seconds).makespan)
            rows.append(row)
            print(f"{name} {m} GPUs: anneal {row[0] * 1e3:.3f} ms, fine-tuned "
                  + ", ".join(f"{s} {x * 1e3:.3f}" for s, x in zip(args.schedules, row[1:])), flush=True)
    a = np.array(rows)
    for i, schedule in enumerate(args.schedules):
        print(f"fine-tuned {schedule}: at or below anneal in {(a[:, 1 + i] <= a[:, 0] * (1 + 1e-9)).sum()} of "
              f"{len(a)}, mean ratio {np.mean(a[:, 1 + i] / a[:, 0]):.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
