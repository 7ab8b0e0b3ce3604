"""Zero-shot refinement passes: does showing the policy its own best placement, pass after pass, close the gap?

    python benchmarks/zero_shot_passes.py --policy runs/plateau/gcn/policy.zip --passes 1 2 3
    python benchmarks/zero_shot_passes.py --policy P --passes 1 3 --large --reference experiments/anytime/benchmark.csv

On every held-out cell of ``python -m agents.benchmark`` (with ``--large`` also its large cells), the policy's
zero-shot placement (``agents.place(..., zero_shot=True, passes=k)``) for each ``k`` of ``--passes``, run one
after the other on each cell so that the machine's load is alike, after an unmeasured call that fills what
the first call on a cell caches. Against the anytime benchmark's CSV
(``--reference``): per ``k``, the mean (median) gap to the best placement seen on the cell, the cells within 3% of
annealing's 10-s result, the cells at or below annealing's 0.3-s result, and the mean and largest seconds. The
cells the policy cannot place (more devices than a per-unit head knows) are counted apart.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from agents.learned.placer import place
from agents.learned.policy_file import load_policy
from agents.paper.benchmark_cells import held_out_cells, large_cells
from agents.paper.encoder_study import WITHIN, reference


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--policy", required=True, help="a policy file of python -m agents.pretrain")
    parser.add_argument("--passes", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--large", action="store_true", help="also the benchmark's large cells")
    parser.add_argument("--reference", default="experiments/anytime/benchmark.csv")
    args = parser.parse_args()
    if min(args.passes) < 1:
        parser.error(f"--passes must be >= 1, got {args.passes}")
    known = reference(Path(args.reference))
    network = load_policy(args.policy)
    cells = held_out_cells() + (large_cells() if args.large else [])
    found: dict[int, list[tuple[str, float, float]]] = {k: [] for k in args.passes}
    refused = 0
    for cell in cells:
        graph, cluster = cell.load()
        try:  # unmeasured: what the first call on a cell caches (its start placement) is then there for every k
            place(graph, cluster, network, zero_shot=True, samples=1, allow_oom=True, step=cell.step)
        except ValueError:
            pass
        for k in args.passes:
            try:
                result = place(graph, cluster, network, zero_shot=True, passes=k, allow_oom=True, step=cell.step)
            except ValueError:  # more devices than the policy's head knows
                refused += 1
                break
            makespan = result.makespan if result.overflow == 0 else float("inf")
            found[k].append((cell.key, makespan, result.seconds))
        print(cell.key, " ".join(f"{k}: {mk * 1e3:.3f} ms {s:.2f} s" for k in args.passes
                                 for c, mk, s in found[k][-1:] if c == cell.key), flush=True)
    print(f"\n{args.policy}: {len(found[args.passes[0]])} cells placed, {refused} refused")
    print("| passes | gap mean (median) | within 3% of anneal@10s | ≤ anneal@0.3s | seconds mean (max) |")
    print("|---|---|---|---|---|")
    for k in args.passes:
        best = {c: min(known[c]["best"], *(mk for rows in found.values() for c2, mk, _ in rows if c2 == c))
                for c, _, _ in found[k]}
        gaps = np.array([mk / best[c] - 1 for c, mk, _ in found[k] if np.isfinite(mk)])
        oom = f", {len(found[k]) - gaps.size} out of memory" if gaps.size < len(found[k]) else ""
        within = sum(mk <= (1 + WITHIN) * known[c]["anneal"][10.0] for c, mk, _ in found[k])
        early = sum(mk <= known[c]["anneal"][0.3] for c, mk, _ in found[k])
        seconds = np.array([s for _, _, s in found[k]])
        n = len(found[k])
        print(f"| {k} | {100 * gaps.mean():.1f}% ({100 * np.median(gaps):.1f}%){oom} | {within}/{n} | {early}/{n} | "
              f"{seconds.mean():.2f} ({seconds.max():.2f}) |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
