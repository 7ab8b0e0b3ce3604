"""The benchmark that settles it: ``python -m agents.benchmark``, every method on held-out cells at one budget.

    python -m agents.benchmark --budget-seconds 10 --out experiments/benchmark --workers 2
    python -m agents.benchmark --budgets 0.3 1 3 10 30 --large --out experiments/anytime   # the anytime curve
    python -m agents.benchmark --budgets 1 3 10 --pipelined --no-real --seeds 100 --methods anneal,steered
    python -m agents.benchmark --graph my_model.json --devices 4 --methods heft,anneal,fine-tuned

A thin command line over :func:`agents.paper.benchmark.run_benchmark` (the cells, the methods, the cache and the
verdict: there). Exit status 0, 1 when a method failed on some cell (left out of the table), 2 after one
``error:`` line (bad input), 130 on Ctrl-C.
"""

from __future__ import annotations

import sys
from pathlib import Path

from agents.jobs import add_fanout_args, fanout_from_args, open_runner
from agents.paper.benchmark_cells import (
    HELD_OUT_SEEDS,
    REAL,
    RUNTIME,
    SUITES,
    Cell,
    has_module_names,
    large_cells,
    methods,
    pipelined_cells,
)
from placement_env.checks import checked_finite
from placement_env.cli import OneLineParser, add_step_args, check_output_paths, run_cli
from placement_env.cluster import DEFAULT_KIND, DEVICE_KINDS, Cluster
from placement_env.sim.pipeline import Step, checked_microbatches
from placement_env.zoo.registry import load_graph


def main(argv: list[str] | None = None) -> int:
    """Run the command (``argv``: its arguments); 0, 1 when a method failed somewhere, 2 after one ``error:``
    line."""
    parser = OneLineParser(prog="python -m agents.benchmark", description=(__doc__ or "").splitlines()[0])
    budgets = parser.add_mutually_exclusive_group()
    budgets.add_argument("--budget-seconds", type=float, default=60.0,
                         help="wall-clock seconds for each search method on each cell (default 60)")
    budgets.add_argument("--budgets", type=float, nargs="+", metavar="S",
                         help="several budgets: every search method at each, and the anytime report (mean gap "
                              "per budget, time to reach annealing's 10-s result, anytime.png)")
    parser.add_argument("--out", default="runs/benchmark", help="output folder (results cached there)")
    parser.add_argument("--policy", metavar="FILE", help="the pretrained policy (default: the shipped one)")
    parser.add_argument("--graph", nargs="+", metavar="G", help="graphs (names or files) instead of the held-out "
                                                              "cells")
    parser.add_argument("--devices", type=int, nargs="+", default=[3, 5, 8], help="device counts (default 3 5 8)")
    parser.add_argument("--cluster", metavar="FILE", help="a cluster file instead of --devices")
    parser.add_argument("--device-kind", default=DEFAULT_KIND, choices=list(DEVICE_KINDS),
                        help=f"device kind for --devices (default {DEFAULT_KIND})")
    parser.add_argument("--per-node", type=int, metavar="K",
                        help="with --devices: nodes of K devices joined by the kind's network")
    parser.add_argument("--large", action="store_true",
                        help="also the cells where search has not converged: the zoo's transformers on 1 and 2 "
                             "nodes of 8 A100s, NASNet-A / PNASNet-5 Large on 16, 32 and 64 P100s")
    parser.add_argument("--pipelined", action="store_true",
                        help="also the pipelined cells: the zoo's transformers on 1 and 2 nodes of 8 A100s, 8 "
                             "micro-batches under 1F1B, every method in contiguous mode (pipeline stages)")
    parser.add_argument("--seeds", type=int, nargs="+", default=list(HELD_OUT_SEEDS),
                        help="held-out seeds of the suites (default 100-104; all must be >= 100)")
    parser.add_argument("--no-real", action="store_true", help="leave out the six real models")
    parser.add_argument("--methods", help="comma-separated subset of the methods (default: all; with --graph "
                                          "graphs that record module names, also " + ", ".join(RUNTIME) + ")")
    add_step_args(parser)
    add_fanout_args(parser)
    args = parser.parse_args(argv)

    def run() -> int:
        flag, budgets = ("--budgets", args.budgets) if args.budgets else ("--budget-seconds", [args.budget_seconds])
        for value in budgets:
            if not checked_finite(flag, value) > 0:
                raise ValueError(f"{flag} must be positive, got {value!r}")
        if args.per_node is not None and args.cluster:
            raise ValueError("--per-node shapes a preset cluster (--devices); a --cluster file gives its own links")
        low = [s for s in args.seeds if s < 100]
        if low:
            raise ValueError(f"--seeds: {low[0]} is a training seed; the benchmark's cells are held out (>= 100)")
        check_output_paths(None, args.out)
        if args.cluster:
            Cluster.from_json(args.cluster)  # checked before any work
        step = Step(args.microbatches, args.schedule).checked()  # and against each graph's batch below
        def cell(graph: str, devices: int | None) -> Cell:
            return Cell(graph, None if args.cluster else devices, args.cluster, step, args.device_kind, args.per_node)

        if args.graph:
            cells = [cell(g, m) for g in args.graph for m in ([None] if args.cluster else args.devices)]
        else:
            cells = [cell(f"{suite}/{seed}", m) for suite in SUITES for seed in args.seeds
                     for m in ([None] if args.cluster else args.devices)]
            if not args.no_real:
                cells += [cell(model, 8) for model in REAL]
        if args.large:
            cells += large_cells(step)
        if args.pipelined:
            cells += pipelined_cells()
        for c in cells:
            if not c.cluster_file:
                c.preset()  # a --per-node that does not divide the devices: one error line
        if step.pipelined:  # micro-batches that do not divide a graph's batch: one error line, before any work
            for graph in dict.fromkeys(c.graph for c in cells):
                checked_microbatches(step.microbatches, load_graph(graph))
        modules = bool(args.graph) and all(has_module_names(g) for g in args.graph)
        names = methods(include_runtime=modules)
        if args.methods:
            asked = [m.strip() for m in args.methods.split(",") if m.strip()]
            runtime = [m for m in asked if m in RUNTIME]
            if runtime and not modules:
                raise ValueError(f"--methods: {runtime[0]} needs graphs with module names (from_torch); "
                                 "give them with --graph")
            known = methods(include_runtime=True)
            unknown = [m for m in asked if m not in known]
            if unknown:
                raise ValueError(f"--methods: unknown method {unknown[0]!r}; known: {', '.join(known)}")
            names = asked
        if args.policy is not None and not Path(args.policy).is_file():
            raise ValueError(f"--policy: no such file: {args.policy!r}")
        fanout = fanout_from_args(args)
        from agents.paper.benchmark import run_benchmark  # torch: loaded once the input is checked

        with open_runner(fanout, preload=("agents.paper.benchmark",)) as runner:
            markdown, _, failed = run_benchmark(cells, budgets, Path(args.out), args.policy, names, runner)
        print(markdown)
        if failed:
            print(f"error: {len(failed)} method run(s) failed; their cells are left out of the table; rerun the "
                  "command to retry them", file=sys.stderr)
            return 1
        return 0

    return run_cli(run)


if __name__ == "__main__":
    sys.exit(main())
