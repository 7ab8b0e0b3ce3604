"""How much the runs a per-model calibration measures disagree: every step of every round, for one model.

    python benchmarks/calibration_noise.py [--model opt] [--rounds 3] [--steps 4]

The runs are those of ``placement_env.runtime.pipeline_calibration.calibrate_model`` (``run_pipeline`` of the
one-stage plan at m in {1, 2, 4, 8}, the ``deepspeed-uniform`` two-stage plan at m = 2 under GPipe, and eager
PyTorch at each m), on ``local_cluster(2)``, one thread a process, for a model of ``benchmarks/fidelity_common.py``
(the table's or an outside one). Printed per round and run: each step's milliseconds (the calibration drops the
first and takes the median of the rest); then per run its spread (slowest round over fastest, less 1), the gap
between the two fastest rounds (what calibrate_model judges: it refuses a calibration whose gap is above
``MAX_CALIBRATION_SPREAD``), and the trend within a run (its last step over its second).
"""

from __future__ import annotations

import argparse

import numpy as np
import torch
from fidelity_common import hugging_face_models, outside_models
from machine import machine_line

from baselines.placers import CONTIGUOUS_RUNTIME_DEFAULTS
from placement_env import from_torch
from placement_env.plan.pipeline_plan import plan_from_placement
from placement_env.runtime.local_cluster import local_cluster
from placement_env.runtime.pipeline_calibration import MAX_CALIBRATION_SPREAD, eager_seconds
from placement_env.runtime.pipeline_runner import run_pipeline
from placement_env.sim.pipeline import Step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    zoo = {**hugging_face_models(), **outside_models()}
    parser.add_argument("--model", default="opt", choices=sorted(zoo))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=4)
    args = parser.parse_args()
    if args.rounds < 2 or args.steps < 2:
        parser.error("--rounds and --steps must be at least 2")
    print(machine_line(), flush=True)
    torch.set_num_threads(1)
    cluster = local_cluster(2)
    model, inputs, kwargs, depth = zoo[args.model]
    graph = from_torch(model, inputs, example_kwargs=kwargs, profile=True, repeats=3, name=args.model,
                       colocate_modules=depth)
    two = CONTIGUOUS_RUNTIME_DEFAULTS["deepspeed-uniform"](graph, cluster, 0, step=Step(2, "gpipe"))
    plans = {f"one stage m={m}": plan_from_placement(graph, np.zeros(graph.num_nodes, dtype=np.int64), cluster,
                                                     microbatches=m, schedule="gpipe") for m in (1, 2, 4, 8)}
    plans["two stages m=2"] = plan_from_placement(graph, two, cluster, microbatches=2, schedule="gpipe")
    medians: dict[str, list[float]] = {name: [] for name in [*plans, *(f"eager m={m}" for m in (1, 2, 4, 8))]}
    trends: dict[str, list[float]] = {name: [] for name in plans}
    for r in range(args.rounds):
        for name, plan in plans.items():
            steps = run_pipeline(model, inputs, plan, steps=args.steps, example_kwargs=kwargs).steps
            medians[name].append(float(np.median(steps[1:])))
            trends[name].append(steps[-1] / steps[1])
            print(f"round {r + 1} {name:15s} steps (ms) {', '.join(f'{s * 1e3:.1f}' for s in steps)}", flush=True)
        for m in (1, 2, 4, 8):
            medians[f"eager m={m}"].append(eager_seconds(model, inputs, kwargs, m, args.steps))
        eager = ", ".join(f"m={m}: {medians['eager m=' + str(m)][-1] * 1e3:.1f}" for m in (1, 2, 4, 8))
        print(f"round {r + 1} eager (ms)      {eager}", flush=True)
    print(f"per run over {args.rounds} rounds (calibrate_model refuses two fastest apart by more than "
          f"{MAX_CALIBRATION_SPREAD:.0%}):")
    for name, values in medians.items():
        fastest = sorted(values)[:2]
        trend = f", last step / second step {np.mean(trends[name]):.2f}" if name in trends else ""
        print(f"  {name:15s} spread {max(values) / min(values) - 1:5.1%}  two fastest apart "
              f"{fastest[1] / fastest[0] - 1:5.1%}{trend}", flush=True)


if __name__ == "__main__":
    main()
