"""The data-parallel gradient average of ``run_parallel``, one all-reduce a parameter against DDP-style buckets
(``placement_env.runtime.gradient_reduction.average_gradients``), interleaved in one run on local gloo workers.

    python benchmarks/gradient_buckets.py [--ranks 2] [--rounds 7]

Each worker holds the gradients of ``gpu_check.py``'s host Llama (4 layers, hidden 256: 37 tensors, 17 MB fp32)
and, in alternating rounds, averages them over the ranks one tensor at a time or in buckets; it prints each way's
median seconds and their ratio. Nothing is asserted: the host is shared and noisy, so both ways run in one process,
interleaved.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from machine import machine_line  # benchmarks/ is on the path


def _worker(rank: int, world: int, rounds: int) -> dict[str, list[float]]:
    import torch
    import torch.distributed as dist
    from gpu_check import HOST_MODEL, llama  # in the worker: its own interpreter loads them

    from placement_env.runtime.gradient_reduction import average_gradients  # in the worker, as above

    grads = [torch.randn_like(q) for q in llama(HOST_MODEL).parameters()]
    group = dist.group.WORLD
    seconds: dict[str, list[float]] = {"per tensor": [], "buckets": []}
    for k in range(2 * rounds + 2):
        way = "per tensor" if k % 2 == 0 else "buckets"
        dist.barrier()
        start = time.perf_counter()
        if way == "per tensor":
            for g in grads:
                dist.all_reduce(g, group=group)
                g.div_(world)
        else:
            average_gradients(grads, group, world)
        if k >= 2:  # the first round of each way warms the transport
            seconds[way].append(time.perf_counter() - start)
    return seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, default=2, help="local workers (2 or more)")
    parser.add_argument("--rounds", type=int, default=7, help="timed rounds of each way")
    args = parser.parse_args(argv)
    if args.ranks < 2 or args.rounds < 1:
        print(f"error: need --ranks >= 2 and --rounds >= 1, got {args.ranks} and {args.rounds}", file=sys.stderr)
        return 2
    from placement_env.runtime.local_workers import run_on_local_workers  # torch only once the arguments hold

    print(machine_line(), flush=True)
    reports = run_on_local_workers(args.ranks, _worker, args.rounds)
    median = {way: statistics.median(max(r[way][i] for r in reports) for i in range(args.rounds))
              for way in ("per tensor", "buckets")}
    print(f"{args.ranks} ranks, the host Llama's gradients: one all-reduce a tensor {median['per tensor'] * 1e3:.1f} "
          f"ms, in buckets {median['buckets'] * 1e3:.1f} ms (median of {args.rounds}, the slowest rank's); ratio "
          f"{median['per tensor'] / median['buckets']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
