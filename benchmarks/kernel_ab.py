"""A/B timing of simulator kernel variants against the current kernel, for kernel work.

Run: ``python benchmarks/kernel_ab.py variant.py [variant2.py ...]`` where each
variant is a copy of ``placement_env/sim/kernel.py`` with a change. A
variant may change its ``Workspace`` buffers and its kernel internals, but
``sim_batch`` must take the graph arrays of ``Simulator._kernel_args()``, the
placements, the topological order, the cluster arrays and ``param_factor``,
then its own ``Workspace.buffers()``, then the three output arrays, as the
current kernel's does.

Each variant must first give makespans, peaks and busy times bit-identical to
the current kernel's on every graph (else it is reported and not timed, unless
``--time-different``: for cut-down kernels that show what a part costs); then
all kernels are called in turn for ``--rounds`` rounds and each keeps its
fastest call, so that a slow spell of a shared machine costs every kernel the
same rounds. ``--self`` adds a second copy of the current kernel: the spread of
its ratio (a few percent, up to 7% in a slow spell of the project's
machines) is the noise floor any variant's gain must clear.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import os
import shutil
import sys
import tempfile
import time

import numpy as np
from machine import machine_line

from placement_env import Cluster, layered_dag, load_graph
from placement_env.sim import kernel as simulator_kernel
from placement_env.sim.simulator import Simulator

GRAPHS = ("synthetic", "ptb/12", "nmt/5")


def load_variant(path: str):
    """Import the kernel module at ``path`` under its file name (numba caches it beside the file)."""
    folder, file = os.path.split(os.path.abspath(path))
    if not file.endswith(".py"):
        raise SystemExit(f"error: {path!r} is not a .py file")
    if file[:-3] in sys.modules:
        raise SystemExit(f"error: a module named {file[:-3]!r} is already imported; rename {path!r}")
    sys.path.insert(0, folder)
    try:
        return importlib.import_module(file[:-3])
    finally:
        sys.path.remove(folder)


def kernel_call(kernel, sim: Simulator, placements: np.ndarray):
    """``(fn, outputs)``: a call of ``kernel.sim_batch`` on all rows, and the arrays it fills."""
    graph, cluster = sim.graph, sim.cluster
    ws = kernel.Workspace(graph.num_nodes, graph.num_edges, cluster.num_devices)
    outputs = (np.zeros(len(placements)), np.zeros((len(placements), cluster.num_devices)),
               np.zeros((len(placements), cluster.num_devices)))
    args = (*sim._kernel_args(), placements, sim._prep.order, cluster.speed, cluster.bandwidth, cluster.latency,
            sim.param_factor, *ws.buffers(), *outputs)
    return (lambda: kernel.sim_batch(*args)), outputs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("variants", nargs="*", help="kernel module files to compare with the current kernel")
    parser.add_argument("--self", action="store_true", help="add a copy of the current kernel (the noise floor)")
    parser.add_argument("--rounds", type=int, default=20, help="timed calls per kernel and graph; the fastest counts")
    parser.add_argument("--placements", type=int, default=1000, help="random placements per call")
    parser.add_argument("--devices", type=int, default=3)
    parser.add_argument("--time-different", action="store_true",
                        help="also time variants whose results differ (marked 'differs')")
    args = parser.parse_args()
    if args.rounds < 1 or args.placements < 1:
        parser.error("--rounds and --placements must be at least 1")
    if not args.variants and not args.self:
        parser.error("give at least one variant file, or --self")

    kernels = {"current": simulator_kernel}
    scratch = tempfile.mkdtemp(prefix="kernel_ab_")
    try:
        if args.self:
            shutil.copy(simulator_kernel.__file__, os.path.join(scratch, "current_copy.py"))
            kernels["current copy"] = load_variant(os.path.join(scratch, "current_copy.py"))
        for path in args.variants:
            kernels[os.path.basename(path)] = load_variant(path)
        run(kernels, args)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def run(kernels: dict, args: argparse.Namespace) -> None:
    cluster = Cluster.preset("p100", args.devices)
    rng = np.random.default_rng(0)
    calls, identical = {}, dict.fromkeys(kernels, True)
    for name in GRAPHS:
        graph = layered_dag(0, num_ops=500) if name == "synthetic" else load_graph(name)
        sim = Simulator(graph, cluster)
        placements = np.ascontiguousarray(
            rng.integers(0, args.devices, (args.placements, graph.num_units))[:, graph.unit_of], dtype=np.int64)
        reference = None
        for label, kernel in kernels.items():
            fn, outputs = kernel_call(kernel, sim, placements)
            fn()
            if reference is None:
                reference = outputs
            elif not all(np.array_equal(a, b) for a, b in zip(reference, outputs)):
                identical[label] = False
            calls[name, label] = fn
    timed = [label for label in kernels if identical[label] or args.time_different]
    best = dict.fromkeys(calls, float("inf"))
    gc.collect()
    gc.disable()
    try:
        for _ in range(args.rounds):
            for (name, label), fn in calls.items():
                if label in timed:
                    t0 = time.perf_counter()
                    fn()
                    best[name, label] = min(best[name, label], time.perf_counter() - t0)
    finally:
        gc.enable()

    print(machine_line())
    print(f"{args.placements} random placements per call, {args.devices} x p100, best of {args.rounds} rounds")
    for label in kernels:
        if not identical[label]:
            print(f"{label}: NOT bit-identical to the current kernel"
                  + (" (timed all the same: marked 'differs')" if args.time_different else " (not timed)"))
    for name in GRAPHS:
        base = best[name, "current"]
        cells = [f"{label}{'' if identical[label] else ' (differs)'} {args.placements / best[name, label]:,.0f}/s "
                 f"({base / best[name, label]:.3f}x)" for label in timed]
        print(f"{name:<10} " + "   ".join(cells))


if __name__ == "__main__":
    main()
