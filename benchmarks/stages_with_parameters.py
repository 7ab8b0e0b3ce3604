"""Every contiguous placer on the zoo's transformers at 8 and 16 A100s: does any stage hold no parameter?

    python benchmarks/stages_with_parameters.py [--budget-seconds 1]

For each of the zoo's six transformers, on one node of 8 A100s and on 2 nodes of 8, with 8 micro-batches (1F1B),
every placer of ``python -m baselines --contiguous`` (the searches with ``--budget-seconds`` each) places the
graph; the placement's stages (runs of units in program order) are counted, and those whose ops hold no parameter.
DeepSpeed's own partitions (``deepspeed-uniform``, ``deepspeed-parameters``) are left out: they are what DeepSpeed
would run, empty stages included. Prints a line per placement and the count of placements with such a stage.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from machine import machine_line

from baselines.placers import placers_with_budget
from placement_env import Cluster, load_graph
from placement_env.graph.stage_order import program_order, stage_runs
from placement_env.plan.stages import unit_parameters
from placement_env.sim.pipeline import Step
from placement_env.zoo.registry import TRANSFORMERS


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget-seconds", type=float, default=1.0)
    args = parser.parse_args()
    print(machine_line(), flush=True)
    placers = placers_with_budget(args.budget_seconds, contiguous=True)
    with_empty = total = 0
    for model in TRANSFORMERS:
        graph = load_graph(model)
        for devices in (8, 16):
            cluster = Cluster.preset("a100-nvlink", devices, per_node=8)
            for name, placer in placers.items():
                began = time.perf_counter()
                placement = placer(graph, cluster, 0, step=Step(8))
                starts, stage_devices = stage_runs(graph.unit_placement(placement)[program_order(graph)])
                empty = int((np.add.reduceat(unit_parameters(graph), starts) == 0).sum())
                total += 1
                with_empty += empty > 0
                print(f"{model} on {devices}: {name}: {len(stage_devices)} stages, {empty} without parameters "
                      f"({time.perf_counter() - began:.1f} s)", flush=True)
    print(f"{with_empty} of {total} placements hold a stage without parameters")


if __name__ == "__main__":
    main()
