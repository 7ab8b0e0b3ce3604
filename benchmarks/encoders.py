"""Encoder cost: forward + backward time per batch of 64 observations of a 500-unit graph, and peak memory.

Run: ``python benchmarks/encoders.py``. Each encoder runs in a fresh process
(so peak memory is its own): the observation batch is built, one warm-up
forward/backward fills the per-graph caches (FADP-GT's spectra), then the
best of 3 timed forward/backward passes is reported with the process's peak
resident memory above its level before the first pass. Single-threaded torch
unless ``--threads`` says otherwise.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

from machine import machine_line


def measure(name: str, batch_size: int, threads: int) -> dict:
    import gymnasium as gym
    import numpy as np
    import torch

    import placement_env  # noqa: F401
    from graph_encoders import GraphBatch, build_encoder
    from placement_env import layered_dag

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    env = gym.make("DevicePlacement-v0", graph=layered_dag(0, num_ops=500, name="layered-500"),
                   initial_placement="random")
    obs = [env.reset(seed=i)[0] for i in range(batch_size)]
    batch_obs = {k: torch.as_tensor(np.stack([o[k] for o in obs])) for k in obs[0]}
    encoder = build_encoder(name, GraphBatch.from_observation(batch_obs).x.shape[-1])
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    best = float("inf")
    for i in range(4):
        t0 = time.perf_counter()
        nodes, graph = encoder(GraphBatch.from_observation(batch_obs))
        (nodes.square().mean() + graph.square().mean()).backward()
        if i:  # the first pass warms the caches
            best = min(best, time.perf_counter() - t0)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    units = int(batch_obs["node_mask"][0].sum())
    return {"encoder": name, "seconds": best, "peak_mb": (peak - before) / 1024, "units": units,
            "batch": batch_size, "parameters": sum(p.numel() for p in encoder.parameters())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure(args.one, args.batch, args.threads)))
        return
    from graph_encoders import list_encoders

    rows = []
    for name in list_encoders():
        out = subprocess.run([sys.executable, __file__, "--one", name, "--batch", str(args.batch),
                              "--threads", str(args.threads)], capture_output=True, text=True, check=True)
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
    first = rows[0]
    print(machine_line())
    print(f"batch of {first['batch']} observations, {first['units']}-unit graph, {args.threads} thread(s), "
          f"forward + backward")
    print(f"{'encoder':<12} {'seconds':>8} {'peak MB':>8} {'params':>8}")
    for r in rows:
        print(f"{r['encoder']:<12} {r['seconds']:>8.3f} {r['peak_mb']:>8.0f} {r['parameters']:>8}")
    times = {r["encoder"]: r["seconds"] for r in rows}
    if "fadp-gt" in times and "transformer" in times:
        print(f"fadp-gt / transformer time: {times['fadp-gt'] / times['transformer']:.2f}x")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
