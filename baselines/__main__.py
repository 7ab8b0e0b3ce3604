"""``python -m baselines``: compare the classical placers on one graph and cluster.

Example::

    python -m baselines --graph default --devices 3
    python -m baselines --graph my_graph.json.gz --cluster cluster.json --json results.json
    python -m baselines --graph default --devices 3 --traces-dir traces   # then open traces/heft.json in Perfetto
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from placement_env.cli import (
    OneLineParser,
    add_graph_and_cluster_args,
    add_step_args,
    check_output_paths,
    checked_step_args,
    graph_and_cluster_from_args,
    run_cli,
)
from placement_env.graph.placement_io import write_placement
from placement_env.json_files import write_text_atomically
from placement_env.sim.chrome_trace import write_chrome_trace
from placement_env.sim.pipeline import Step

from . import PLACERS
from .compare import compare_placers, format_table
from .placers import CONTIGUOUS_RUNTIME_DEFAULTS, QUICK_STARTS, RUNTIME_DEFAULTS, placers_with_budget
from .starts import LARGE_GRAPH_OPS


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="python -m baselines", description=__doc__.splitlines()[0])
    add_graph_and_cluster_args(parser)
    add_step_args(parser)
    parser.add_argument("--placers",
                        help=f"comma-separated subset of: {', '.join([*PLACERS, *RUNTIME_DEFAULTS])} (default: all; "
                             f"{', '.join(RUNTIME_DEFAULTS)}, DeepSpeed's partitions, for graphs with module names)")
    parser.add_argument("--contiguous", action="store_true",
                        help="every placer in contiguous mode: pipeline stages in program order, as "
                             "torch.distributed.pipelining and DeepSpeed run them (docs/placers.md#contiguous-stages)")
    parser.add_argument("--seed", type=int, default=0, help="seed for the randomized placers (default 0)")
    parser.add_argument("--budget-seconds", type=float, metavar="S",
                        help="wall-clock seconds for each search placer (local-search, anneal), start placers "
                             "included (default: local-search 200 rounds or 0.8 s per start, anneal 4 s)")
    parser.add_argument("--json", metavar="FILE", help="also write the table (and each placement) as JSON")
    parser.add_argument("--placements-dir", metavar="DIR",
                        help="write each placement as DIR/<placer>.json (the spec's placement format)")
    parser.add_argument("--traces-dir", metavar="DIR",
                        help="write each placement's simulated step as DIR/<placer>.json, a Chrome trace of ops, "
                             "transfers and memory per device (open in https://ui.perfetto.dev)")
    return parser


def _print_progress(index: int, total: int, name: str, seconds: float | None) -> None:
    """One stderr line per placer: ``[3/11] heft ...`` when it begins, ``42.8 s`` at its end."""
    if seconds is None:
        print(f"[{index}/{total}] {name} ...", end="", file=sys.stderr, flush=True)
    else:
        print(f" {seconds:.1f} s", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    check_output_paths(args.json, args.placements_dir, args.traces_dir)
    placers = {**placers_with_budget(args.budget_seconds, args.contiguous),
               **(CONTIGUOUS_RUNTIME_DEFAULTS if args.contiguous else RUNTIME_DEFAULTS)}
    graph, cluster = graph_and_cluster_from_args(args)
    step = Step(**checked_step_args(args, graph))
    has_modules = any(node.module is not None for node in graph.nodes)
    default = [*PLACERS, *(RUNTIME_DEFAULTS if has_modules else ())]
    names = [x.strip() for x in (args.placers or ",".join(default)).split(",") if x.strip()]
    unknown = [x for x in names if x not in placers]
    if unknown:
        raise ValueError(f"unknown placer {unknown[0]!r}; known: {', '.join(placers)}")
    progress = None
    if graph.num_nodes > LARGE_GRAPH_OPS:
        print(f"notice: graph {graph.name!r} has {graph.num_nodes:,} ops, more than {LARGE_GRAPH_OPS:,}: the "
              f"placers may take minutes (HEFT about 43 s for a million ops); the search placers start only from "
              f"{', '.join(QUICK_STARTS)}; progress on stderr", file=sys.stderr, flush=True)
        progress = _print_progress
    rows = compare_placers(graph, cluster, {n: placers[n] for n in names}, seed=args.seed, progress=progress,
                           step=step)
    print(format_table(rows, graph, cluster, step, args.contiguous))
    if args.json:
        payload = {"graph": graph.name, "cluster": cluster.to_dict(), "seed": args.seed,
                   "microbatches": step.microbatches, "schedule": step.schedule, "contiguous": args.contiguous,
                   "rows": [r.to_dict(with_placement=True) for r in rows]}
        write_text_atomically(args.json, json.dumps(payload, indent=1))
    if args.placements_dir:
        out = Path(args.placements_dir)
        out.mkdir(parents=True, exist_ok=True)
        for r in rows:
            if r.placement is not None:
                write_placement(r.placement, out / f"{r.placer}.json")
    if args.traces_dir:
        out = Path(args.traces_dir)
        out.mkdir(parents=True, exist_ok=True)
        for r in rows:
            if r.result is not None:
                write_chrome_trace(out / f"{r.placer}.json", graph, cluster, r.result)
    return 0


if __name__ == "__main__":
    sys.exit(run_cli(main))
