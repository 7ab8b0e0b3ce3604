"""Where the pipelined step's time goes on 2 local workers: the op-level cost model, eager PyTorch, the pipeline
runtime on one stage, and on two.

    python benchmarks/pipeline_overhead.py [--models gpt2,llama,cnn] [--rounds 3] [--steps 5]
        [--json experiments/pipeline_overhead/rows.json]

The models are those of ``benchmarks/pipeline_fidelity.py``, imported the same way (profiled on one thread, each
op's cost the fastest of ``--rounds`` profiles). For m in {1, 2, 4, 8} (1F1B needs m >= stages, so two stages
run GPipe and 1F1B from m = 2) each row gives, in ms:

* ``model``: the cost model's step of the whole graph on one device, ``m`` micro-batches (each op's fixed cost
  paid m times, the rest once: spec section 3a), that is the simulator's one-stage pipelined step;
* ``eager``: the same work in eager PyTorch in this process, ``m`` forward and backward passes of a micro-batch,
  no runtime around them (the fastest of ``--rounds`` medians of ``--steps`` steps);
* ``runner 1``: ``run_pipeline`` of the one-stage plan on one local worker (the pipeline runtime's own work:
  splitting the batch, the stage's traced module, its backward, the loss per micro-batch);
* ``runner 2`` and ``simulated 2``: the ``deepspeed-uniform`` plan on ``local_cluster(2)``, measured and simulated.

Read together, the columns split the pipelined fidelity table's error into the cost model (model against eager),
the runtime (runner 1 against eager) and the pipeline across processes (runner 2 against the others). Rounds
interleave the cells; each measured value is the fastest of its rounds.
"""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np
from benchmarks_common import write_rows
from fidelity_common import fastest_costs, hugging_face_models, outside_models
from pipeline_fidelity import measured_local_cluster

from baselines.placers import CONTIGUOUS_RUNTIME_DEFAULTS
from placement_env import from_torch
from placement_env.plan.pipeline_plan import plan_from_placement
from placement_env.runtime.pipeline_calibration import eager_seconds
from placement_env.runtime.pipeline_runner import run_pipeline
from placement_env.sim.pipeline import Step

MICROBATCHES = (1, 2, 4, 8)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="gpt2,llama,cnn")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    cluster = measured_local_cluster()
    zoo, rows = {**hugging_face_models(), **outside_models()}, []
    placer = CONTIGUOUS_RUNTIME_DEFAULTS["deepspeed-uniform"]
    for name in args.models.split(","):
        model, inputs, kwargs, depth = zoo[name]
        graph = fastest_costs([from_torch(model, inputs, example_kwargs=kwargs, profile=True, repeats=10,
                                          name=name, colocate_modules=depth) for _ in range(args.rounds)])
        cells: dict[tuple[int, str], dict[str, Any]] = {}
        for m in MICROBATCHES:
            cells[(m, "one")] = {"plan": plan_from_placement(graph, np.zeros(graph.num_nodes, dtype=np.int64), cluster,
                                                       microbatches=m, schedule="gpipe", param_factor=2.0),
                                 "rounds": []}
            cells[(m, "eager")] = {"rounds": []}
            for schedule in ("gpipe", "1f1b") if m >= 2 else ("gpipe",):
                placement = placer(graph, cluster, 0, step=Step(m, schedule))
                cells[(m, schedule)] = {"plan": plan_from_placement(graph, placement, cluster, microbatches=m,
                                                              schedule=schedule, param_factor=2.0), "rounds": []}
        for _ in range(args.rounds):
            for (m, kind), cell in cells.items():
                if kind == "eager":
                    cell["rounds"].append(eager_seconds(model, inputs, kwargs, m, args.steps))
                else:
                    run = run_pipeline(model, inputs, cell["plan"], steps=args.steps, example_kwargs=kwargs)
                    cell["rounds"].append(float(np.median(run.steps[1:])))
        for m in MICROBATCHES:
            one = cells[(m, "one")]
            row = {"model": name, "microbatches": m, "ops": graph.num_nodes,
                   "model_ms": one["plan"].simulated_step_seconds * 1e3,
                   "eager_ms": min(cells[(m, "eager")]["rounds"]) * 1e3,
                   "runner_one_ms": min(one["rounds"]) * 1e3}
            for schedule in ("gpipe", "1f1b"):
                if (m, schedule) in cells:
                    cell = cells[(m, schedule)]
                    row[f"runner_two_{schedule}_ms"] = min(cell["rounds"]) * 1e3
                    row[f"simulated_two_{schedule}_ms"] = cell["plan"].simulated_step_seconds * 1e3
            rows.append(row)
            ran = [s for s in ("gpipe", "1f1b") if f"runner_two_{s}_ms" in row]
            pipelined = "  ".join(f"{s}: simulated {row[f'simulated_two_{s}_ms']:6.1f} runner 2 "
                            f"{row[f'runner_two_{s}_ms']:6.1f}" for s in ran)
            print(f"{name:6s} m={m}  model {row['model_ms']:6.1f}  eager {row['eager_ms']:6.1f}  runner 1 "
                  f"{row['runner_one_ms']:6.1f}  {pipelined}", flush=True)
        ours = [r for r in rows if r["model"] == name]
        slope = np.polyfit([r["microbatches"] for r in ours],
                           [r["runner_one_ms"] - r["eager_ms"] for r in ours], 1)
        print(f"{name:6s} the runtime on one stage over eager: {slope[0]:.2f} ms a micro-batch + {slope[1]:.2f} ms "
              f"a step ({slope[0] / graph.num_nodes * 1e3:.1f} us an op call a micro-batch)", flush=True)
        write_rows(args.json, rows)


if __name__ == "__main__":
    main()
