"""The benchmark that settles it: ``python -m agents.benchmark``, every method on held-out cells at one budget.

    python -m agents.benchmark --budget-seconds 10 --out experiments/benchmark --workers 2
    python -m agents.benchmark --graph my_model.json --devices 4 --methods heft,anneal,fine-tuned

A thin command line over :func:`agents.paper.benchmark.run_benchmark` (the cells, the methods, the cache and the
verdict: there). Exit status 0, 1 when a method failed on some cell (left out of the table), 2 after one
``error:`` line (bad input), 130 on Ctrl-C.
"""

from __future__ import annotations

import sys
from pathlib import Path

from agents.jobs import add_fanout_args, fanout_from_args, open_runner
from agents.paper.benchmark_cells import HELD_OUT_SEEDS, REAL, RUNTIME, SUITES, Cell, has_module_names, methods
from placement_env.checks import checked_finite
from placement_env.cli import OneLineParser, add_step_args, check_output_paths, run_cli
from placement_env.cluster import Cluster
from placement_env.sim.pipeline import Step


def main(argv: list[str] | None = None) -> int:
    """Run the command (``argv``: its arguments); 0, 1 when a method failed somewhere, 2 after one ``error:``
    line."""
    parser = OneLineParser(prog="python -m agents.benchmark", description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--budget-seconds", type=float, default=60.0,
                        help="wall-clock seconds for each search method on each cell (default 60)")
    parser.add_argument("--out", default="runs/benchmark", help="output folder (results cached there)")
    parser.add_argument("--policy", metavar="FILE", help="the pretrained policy (default: the shipped one)")
    parser.add_argument("--graph", nargs="+", metavar="G", help="graphs (names or files) instead of the held-out "
                                                              "cells")
    parser.add_argument("--devices", type=int, nargs="+", default=[3, 5, 8], help="device counts (default 3 5 8)")
    parser.add_argument("--cluster", metavar="FILE", help="a cluster file instead of --devices")
    parser.add_argument("--seeds", type=int, nargs="+", default=list(HELD_OUT_SEEDS),
                        help="held-out seeds of the suites (default 100-104; all must be >= 100)")
    parser.add_argument("--no-real", action="store_true", help="leave out the six real models")
    parser.add_argument("--methods", help="comma-separated subset of the methods (default: all; with --graph "
                                          "graphs that record module names, also " + ", ".join(RUNTIME) + ")")
    add_step_args(parser)
    add_fanout_args(parser)
    args = parser.parse_args(argv)

    def run() -> int:
        budget = checked_finite("--budget-seconds", args.budget_seconds)
        if not budget > 0:
            raise ValueError(f"--budget-seconds must be positive, got {args.budget_seconds!r}")
        low = [s for s in args.seeds if s < 100]
        if low:
            raise ValueError(f"--seeds: {low[0]} is a training seed; the benchmark's cells are held out (>= 100)")
        check_output_paths(None, args.out)
        if args.cluster:
            Cluster.from_json(args.cluster)  # checked before any work
        step = Step(args.microbatches, args.schedule).checked()  # and against each graph's batch in its run
        if args.graph:
            cells = [Cell(g, None if args.cluster else m, args.cluster, step) for g in args.graph
                     for m in ([None] if args.cluster else args.devices)]
        else:
            cells = [Cell(f"{suite}/{seed}", None if args.cluster else m, args.cluster, step) for suite in SUITES
                     for seed in args.seeds for m in ([None] if args.cluster else args.devices)]
            if not args.no_real:
                cells += [Cell(model, None if args.cluster else 8, args.cluster, step) for model in REAL]
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
            markdown, _, failed = run_benchmark(cells, budget, Path(args.out), args.policy, names, runner)
        print(markdown)
        if failed:
            print(f"error: {len(failed)} method run(s) failed; their cells are left out of the table; rerun the "
                  "command to retry them", file=sys.stderr)
            return 1
        return 0

    return run_cli(run)


if __name__ == "__main__":
    sys.exit(main())
