"""How fast the step of a plan is simulated, and how fast the planner plans, on a 100-layer transformer at 64
devices (issue 53's targets: a 64-device hybrid plan in at most 50 ms, a plan in at most 10 s).

    python benchmarks/plan_step.py [--layers 100] [--repeats 20]

The model is GPT-2's structure from ``transformers`` with ``--layers`` blocks (hidden 512, 8 heads, sequence 256,
batch 8, imported once with ``from_huggingface`` and cached in ``--cache``), planned for a batch of 512 on 8
nodes of 8 A100s. It prints the median seconds of: ``simulate_plan`` (chunk costs from the graph, then the
step), ``simulate_layout`` alone (the step from the chunks' costs, what the planner calls), the plain Python
reference of the same step, and ``search_plan`` with every decision open.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

from machine import machine_line

from placement_env import Cluster, from_huggingface, load_graph, write_graph
from placement_env.plan.plan_step import plan_chunks, plan_layout, simulate_layout, simulate_plan
from placement_env.plan.planner import hand_plan, search_plan

ROOT = Path(__file__).resolve().parents[1]


def median_seconds(call, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        began = time.perf_counter()
        call()
        times.append(time.perf_counter() - began)
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--layers", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--cache", default=str(ROOT / "experiments" / "plan_step"))
    args = parser.parse_args()
    print(machine_line())
    path = Path(args.cache) / f"gpt2-{args.layers}-layers.json.gz"
    if not path.exists():
        from transformers import GPT2Config

        path.parent.mkdir(parents=True, exist_ok=True)
        config = GPT2Config(n_layer=args.layers, n_embd=512, n_head=8, n_positions=256)
        write_graph(from_huggingface(config, batch=8, sequence=256, name=f"gpt2-{args.layers}-layers"), path)
    graph = load_graph(path)
    cluster = Cluster.preset("a100-nvlink", 64, per_node=8)
    print(f"graph {graph.name}: {graph.num_nodes} ops; cluster {cluster.name}")
    for stages, replicas, m, schedule in ((8, 8, 64, "1f1b"), (16, 4, 64, "interleaved-1f1b"), (4, 16, 32, "zb-h1"),
                                         (64, 1, 256, "1f1b")):
        plan = hand_plan(graph, cluster, stages, replicas, m, schedule=schedule, batch=512).plan
        costs, layout = plan_chunks(graph, plan), plan_layout(plan)
        whole = median_seconds(lambda plan=plan: simulate_plan(graph, plan, cluster), args.repeats)
        step = median_seconds(lambda c=costs, lay=layout: simulate_layout(c, lay, cluster), args.repeats)
        reference = median_seconds(lambda c=costs, lay=layout: simulate_layout(c, lay, cluster, reference=True),
                                   max(1, args.repeats // 10))
        print(f"{stages} stages x {replicas} replicas, m={m}, {schedule} (v={plan.virtual_stages}): simulate_plan "
              f"{whole * 1e3:.1f} ms, of which the step {step * 1e3:.1f} ms (reference {reference * 1e3:.1f} ms)")
    began = time.perf_counter()
    planned = search_plan(graph, cluster, batch=512)
    print(f"search_plan, every decision open: {time.perf_counter() - began:.1f} s ({planned.configurations} "
          f"configurations, {planned.simulated} simulated): {planned.plan.num_stages} stages x "
          f"{planned.plan.replicas} replicas, m={planned.plan.microbatches}, {planned.plan.schedule}, "
          f"{planned.step.seconds * 1e3:.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
