"""The learned placer's speed: placements judged per second, zero-shot time, pretraining time and memory.

    python benchmarks/learned_speed.py [--policy agents/learned/pretrained/policy.zip] [--seconds 20]

1. The guided search on ``cifar10/0`` (3 P100s) for ``--seconds``: placements judged per second, all of them
   (the policy's proposals and the annealing's neighbours) and the policy's proposals alone per second of
   proposing (forward pass, sampling and judging).
2. Zero-shot placement time (one forward pass, 512 samples judged, the start placement computed first) for the
   default graph and ``nasnet_large`` (8 P100s), after a warm-up on another graph (imports, compilation).
3. The shipped policy's pretraining: seconds and peak memory, from its ``pretrain.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

from agents.algorithms.problem import PlacementProblem
from agents.algorithms.search_rounds import SearchRoundsConfig, sample_rows, search_rounds
from agents.learned.placer import place
from agents.learned.policy_file import load_policy, shipped_policy_path
from placement_env import Cluster, load_graph


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policy", default=str(shipped_policy_path()))
    parser.add_argument("--seconds", type=float, default=20.0)
    args = parser.parse_args()
    network = load_policy(args.policy)
    g, c = load_graph("cifar10/0"), Cluster.preset("p100", 3)
    problem = PlacementProblem(g, c, network.max_devices)
    optimizer = torch.optim.Adam(network.parameters(), lr=1e-3)
    problem.judge(np.zeros((1, problem.num_units), np.int64))  # compiles the simulator before the clock starts
    result = search_rounds(network, problem, args.seconds, SearchRoundsConfig(search_seconds=args.seconds / 12),
                           optimizer=optimizer)
    print(f"guided search on cifar10/0, 3 GPUs, {result.seconds:.1f} s: {result.evaluations} placements judged, "
          f"{result.evaluations / result.seconds:,.0f}/s ({result.rounds} rounds)")
    generator, proposed, began = torch.Generator().manual_seed(0), 0, time.perf_counter()
    while time.perf_counter() - began < 5.0:
        with torch.no_grad():
            probs = torch.softmax(problem.logits(network), -1)
        rows = sample_rows(probs, 256, 0.0, generator)
        problem.judge(rows)
        proposed += len(rows)
    print(f"proposing alone (forward pass, 256 samples, one simulator call): "
          f"{proposed / (time.perf_counter() - began):,.0f} placements/s")
    place(load_graph("nmt/1"), Cluster.preset("p100", 8), network, zero_shot=True)  # warm-up
    for name, m in (("default", 3), ("nasnet_large", 8)):
        graph, cluster = load_graph(name), Cluster.preset("p100", m)
        seconds = place(graph, cluster, network, zero_shot=True).seconds  # the start placers' work is cached after
        print(f"zero-shot {name} ({graph.num_units} units, {m} GPUs): {seconds:.2f} s")
    record = Path(args.policy).with_name("pretrain.json")
    if record.exists():
        data = json.loads(record.read_text())
        print(f"pretraining ({record}): {data['seconds'] / 60:.1f} min, peak memory "
              f"{data['peak_memory_bytes'] / 2**30:.2f} GiB, on {data['machine']['processor']} "
              f"({data['machine']['cpus']} CPUs)")
    print(f"best makespan found: {result.makespan * 1e3:.3f} ms; units {np.unique(result.units).size} devices used")
    return 0


if __name__ == "__main__":
    sys.exit(main())
