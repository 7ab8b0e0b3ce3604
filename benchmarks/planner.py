"""The planner against the plans a practitioner tries: the zoo's transformers on 8 to 64 A100s and on A100 + V100
nodes (issue 53's tables).

    python benchmarks/planner.py [--models gpt2 ...] [--batch 512] [--out experiments/planner]

For each model and cluster (N devices):

* ``planner``: :func:`~placement_env.plan.planner.search_plan` with every decision open, and its seconds;
* ``hand grid``: the best of every S x D = N with Megatron-LM's uniform split, 1F1B and m in S x {1, 2, 4, 8},
  a replica's stages on neighbouring devices or a stage's replicas (all of it simulated), recomputation where
  memory needs it;
* ``DeepSpeed uniform`` / ``DeepSpeed parameters``: DeepSpeed's ``partition_method`` over all the layers
  (``split="deepspeed-uniform"`` / ``"parameters"``, tested against DeepSpeed's rules) with D replicas, the best
  over the same S x D, m and layouts.

Every plan is simulated by the same step (``docs/spec/simulator.md`` section 3b), batch ``--batch`` sequences (or
images). It writes ``table.md`` and ``rows.json`` in ``--out`` and prints the table.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from machine import machine_line

from placement_env import Cluster, load_graph
from placement_env.plan.planner import LAYOUTS, SearchedPlan, hand_plan, search_plan
from placement_env.zoo.registry import TRANSFORMERS

ROOT = Path(__file__).resolve().parents[1]
SIZES = (8, 16, 32, 64)
FACTORS = (1, 2, 4, 8)


def clusters() -> list[Cluster]:
    """A100 nodes of 8 (1 to 8 nodes), and 2 A100 nodes with 2 V100 nodes."""
    return [Cluster.preset("a100-nvlink", n, per_node=8) for n in SIZES] + [
        Cluster.of_nodes([("a100-nvlink", 8)] * 2 + [("v100-nvlink", 8)] * 2)]


def best_of(plans: list[SearchedPlan]) -> SearchedPlan | None:
    return min(plans, key=lambda p: p.step.seconds, default=None)


def grid(graph, cluster: Cluster, batch: int, split) -> SearchedPlan | None:
    """The best plan of every S x D = N and m in S x FACTORS with ``split(S)`` (a split name or layer counts)."""
    n = cluster.num_devices
    found = []
    for s in [s for s in range(1, n + 1) if n % s == 0]:
        for factor in FACTORS:
            for layout in LAYOUTS:  # Megatron-LM orders ranks with the stages outermost; either may be tried
                try:
                    found.append(hand_plan(graph, cluster, s, n // s, s * factor, split=split(s), layout=layout,
                                           batch=batch))
                except ValueError:  # m x D does not divide the batch, more chunks than layers, or it does not fit
                    pass
    return best_of(found)


def describe(planned: SearchedPlan | None) -> str:
    if planned is None:
        return "none fits"
    p = planned.plan
    extra = f", v={p.virtual_stages}" if p.virtual_stages > 1 else ""
    recomputing = sum(stage.recompute for stage in p.stages[:p.num_stages])
    extra += f", {recomputing} recompute" if recomputing else ""
    return f"{planned.step.seconds * 1e3:.1f} ms ({p.num_stages}x{p.replicas}, m={p.microbatches}, {p.schedule}{extra})"


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(TRANSFORMERS))
    parser.add_argument("--batch", type=int, default=512)
    parser.add_argument("--out", default=str(ROOT / "experiments" / "planner"))
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    print(machine_line(), flush=True)
    rows = []
    for name in args.models:
        graph = load_graph(name)
        for cluster in clusters():
            began = time.perf_counter()
            planned = search_plan(graph, cluster, batch=args.batch)
            seconds = time.perf_counter() - began
            hand = grid(graph, cluster, args.batch, lambda s: "uniform")
            ds_uniform = grid(graph, cluster, args.batch, lambda s: "deepspeed-uniform")
            ds_parameters = grid(graph, cluster, args.batch, lambda s: "parameters")
            row = {"model": name, "cluster": cluster.name, "devices": cluster.num_devices,
                   "planner": describe(planned), "planner_ms": planned.step.seconds * 1e3,
                   "planner_seconds": seconds, "lower_bound_ms": planned.lower_bound * 1e3,
                   "hand": describe(hand), "hand_ms": None if hand is None else hand.step.seconds * 1e3,
                   "deepspeed_uniform": describe(ds_uniform),
                   "deepspeed_uniform_ms": None if ds_uniform is None else ds_uniform.step.seconds * 1e3,
                   "deepspeed_parameters": describe(ds_parameters),
                   "deepspeed_parameters_ms": None if ds_parameters is None else ds_parameters.step.seconds * 1e3}
            rows.append(row)
            gain = "" if row["hand_ms"] is None else f"{(1 - row['planner_ms'] / row['hand_ms']) * 100:+.1f}%"
            print(f"{name} on {cluster.name}: planner {row['planner']} in {seconds:.1f} s; hand {row['hand']} "
                  f"({gain}); DeepSpeed uniform {row['deepspeed_uniform']}; parameters "
                  f"{row['deepspeed_parameters']}", flush=True)
            (out / "rows.json").write_text(json.dumps(rows, indent=1) + "\n")
    lines = ["| model | cluster | planner | faster than the hand grid's best | hand grid's best | hand grid over "
             "the lower bound | DeepSpeed uniform | DeepSpeed parameters | lower bound | planner's seconds |",
             "|" + "---|" * 10]
    for row in rows:
        faster = "-" if row["hand_ms"] is None else f"{(1 - row['planner_ms'] / row['hand_ms']) * 100:.1f}%"
        room = "-" if row["hand_ms"] is None else f"{row['hand_ms'] / row['lower_bound_ms']:.3f}x"
        lines.append(f"| {row['model']} | {row['cluster']} | {row['planner']} | {faster} | {row['hand']} | {room} | "
                     f"{row['deepspeed_uniform']} | {row['deepspeed_parameters']} | {row['lower_bound_ms']:.1f} ms | "
                     f"{row['planner_seconds']:.1f} |")
    large = [r for r in rows if r["devices"] >= 16 and r["hand_ms"] is not None]
    ahead = [r for r in large if r["planner_ms"] <= 0.9 * r["hand_ms"]]
    no_room = [r for r in large if r["hand_ms"] <= 1.1 * r["lower_bound_ms"] and r not in ahead]
    behind = [r for r in rows if r["hand_ms"] is not None and r["planner_ms"] > r["hand_ms"] * (1 + 1e-9)]
    lines += ["", f"Cells of 16 devices or more: {len(large)}; the planner at least 10% faster than the hand grid's "
              f"best in {len(ahead)}; of the others, {len(no_room)} have a hand plan within 10% of the lower bound "
              f"(no plan can be 10% faster there); slower than the hand grid in {len(behind)} of {len(rows)} cells; "
              f"the planner's seconds at most {max(r['planner_seconds'] for r in rows):.1f}."]
    (out / "table.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
