"""Where a training step's memory goes: the simulator's peaks against measured ones, in eager PyTorch and in
one-stage pipelines.

    python benchmarks/pipeline_memory.py [--models gpt2,bert,vit,llama,cnn] [--json FILE]

The five models of ``benchmarks/pipeline_fidelity.py``, imported with ``from_torch`` (fake tensors: memory does not
depend on the op costs), on ``local_cluster(2)``. Two measurements per model, each against the simulator with
parameters counted twice (weights and gradients):

* **eager**: one training step of the whole batch in this process, the peak of the storages it allocates
  (:class:`~placement_env.runtime.live_bytes.LiveBytes`) plus the parameters, against the simulated peak of the
  plain step on one device, with the training graph keeping what autograd saves (``saved_activations="autograd"``,
  the default) and every input of every op (``"inputs"``, the rule the shipped graphs were made with);
* **one stage**: ``run_pipeline`` of the one-stage plan (every op on one worker) at m in {1, 2, 4, 8} under GPipe
  and 1F1B, its measured peak against the plan's simulated one, and the gradient accumulation's share of it (the
  parameters' bytes from the first backward of a micro-batch k >= 1, spec section 3a): what the simulated peak
  would be without that rule is the simulated peak minus that share where it sets the peak.

Printed per row: measured and simulated MiB and their ratio; the JSON holds the rows.
"""

from __future__ import annotations

import argparse

import numpy as np
import torch
from benchmarks_common import write_rows
from fidelity_common import hugging_face_models, outside_models
from machine import machine_line

from placement_env import from_torch, simulate
from placement_env.cluster import Cluster
from placement_env.plan.pipeline_plan import plan_from_placement
from placement_env.runtime.live_bytes import LiveBytes
from placement_env.runtime.local_cluster import local_cluster
from placement_env.runtime.pipeline_runner import run_pipeline

MIB = 2.0**20


def eager_peak(model: torch.nn.Module, inputs: tuple, kwargs: dict) -> float:
    """Bytes: the parameters plus the high-water mark of one training step's allocations (outputs summed)."""
    def step() -> None:
        out = model(*inputs, **kwargs)
        (out.logits if hasattr(out, "logits") else out).float().sum().backward()

    step()  # a warm-up: lazily made buffers are not the step's
    model.zero_grad(set_to_none=True)
    tracker = LiveBytes()
    with tracker.mode:
        step()
    model.zero_grad(set_to_none=True)
    return float(sum(p.numel() * p.element_size() for p in model.parameters()) + tracker.peak)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="gpt2,bert,vit,llama,cnn")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    print(machine_line(), flush=True)
    torch.set_num_threads(1)
    cluster = local_cluster(2)
    one_device = Cluster.preset("p100", 1)
    zoo = {**hugging_face_models(), **outside_models()}
    rows = []
    for name in args.models.split(","):
        model, inputs, kwargs, depth = zoo[name]
        graph = from_torch(model, inputs, example_kwargs=kwargs, name=name, colocate_modules=depth)
        every_input = from_torch(model, inputs, example_kwargs=kwargs, name=name, colocate_modules=depth,
                                 saved_activations="inputs")
        measured = eager_peak(model, inputs, kwargs)
        kept = [float(simulate(g, np.zeros(g.num_nodes, np.int64), one_device, param_factor=2.0).peak_memory[0])
                for g in (graph, every_input)]
        rows.append({"model": name, "run": "eager", "measured_mib": measured / MIB,
                     "simulated_mib": kept[0] / MIB, "every_input_kept_mib": kept[1] / MIB})
        print(f"{name:6s} eager, one device: measured {measured / MIB:6.2f} MiB; simulated, what autograd saves "
              f"{kept[0] / MIB:6.2f} ({kept[0] / measured:.2f}), every input kept {kept[1] / MIB:6.2f} "
              f"({kept[1] / measured:.2f})", flush=True)
        parameters = float(graph.param_bytes.sum())
        for m in (1, 2, 4, 8):
            for schedule in ("gpipe", "1f1b"):
                plan = plan_from_placement(graph, np.zeros(graph.num_nodes, np.int64), cluster, microbatches=m,
                                     schedule=schedule, param_factor=2.0)
                peak = float(run_pipeline(model, inputs, plan, steps=2, example_kwargs=kwargs).peak_memory[0])
                simulated = plan.stages[0].simulated_peak_memory
                rows.append({"model": name, "run": "one stage", "microbatches": m, "schedule": schedule,
                             "measured_mib": peak / MIB, "simulated_mib": simulated / MIB,
                             "parameters_mib": parameters / MIB})
                print(f"{name:6s} one stage, m={m} {schedule:5s}: measured {peak / MIB:6.2f} MiB, simulated "
                      f"{simulated / MIB:6.2f} ({simulated / peak:.2f}); measured - simulated "
                      f"{(peak - simulated) / MIB:+.2f} MiB (the parameters, the accumulation's share at m >= 2: "
                      f"{parameters / MIB:.2f} MiB)", flush=True)
        write_rows(args.json, rows)


if __name__ == "__main__":
    main()
