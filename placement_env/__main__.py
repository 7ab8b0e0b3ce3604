"""``python -m placement_env``: simulate or export a placement, list the shipped graphs, or print table 1.

Examples::

    python -m placement_env simulate --graph default --placement p.json --devices 3
    python -m placement_env simulate --graph g.json.gz --placement p.json --cluster c.json --json
    python -m placement_env simulate --graph default --placement p.json --devices 3 --trace step.json
    python -m placement_env export --graph model.json.gz --placement p.json --format device-map
    python -m placement_env export --graph model.json.gz --placement p.json --format split-points --out stages.json
    python -m placement_env graphs
    python -m placement_env table1
"""

from __future__ import annotations

import argparse
import json
import sys

from placement_env.cli import (
    OneLineParser,
    add_graph_and_cluster_args,
    add_step_args,
    check_output_paths,
    checked_step_args,
    graph_and_cluster_from_args,
    run_cli,
)
from placement_env.graph.placement_io import read_placement
from placement_env.json_files import write_text_atomically
from placement_env.runtime import to_device_map, to_split_points
from placement_env.sim.chrome_trace import write_chrome_trace
from placement_env.sim.simulator import checked_param_factor, simulate
from placement_env.zoo.registry import (
    REAL_MODELS,
    REAL_MODELS_DIR,
    SUITES,
    TRANSFORMERS,
    TRANSFORMERS_DIR,
    list_graphs,
    load_graph,
)
from placement_env.zoo.suites import SUITE_NAMES, SUITE_SEEDS, shipped_path, table1_markdown


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="python -m placement_env", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sim = sub.add_parser("simulate", help="simulate one placement and report makespan, memory and OOM")
    add_graph_and_cluster_args(sim)
    sim.add_argument("--placement", required=True, metavar="FILE",
                     help="JSON list of device indices in node order, or object node id -> device")
    sim.add_argument("--param-factor", type=float, default=4.0,
                     help="static bytes per parameter byte (4 = training with Adam, 1 = inference)")
    add_step_args(sim)
    sim.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    sim.add_argument("--trace", metavar="FILE",
                     help="also write the schedule and each device's memory over time as a Chrome trace "
                          "(.json or .json.gz; open it in https://ui.perfetto.dev or chrome://tracing)")
    export = sub.add_parser("export", help="a placement of a graph with module names as a runtime takes it: "
                                           "accelerate's device_map or pipeline split points (JSON)")
    export.add_argument("--graph", required=True, help="a graph file imported by from_torch (it has module names)")
    export.add_argument("--placement", required=True, metavar="FILE", help="the placement file")
    export.add_argument("--format", required=True, choices=EXPORT_FORMATS,
                        help="device-map: {module: device} for accelerate.dispatch_model; split-points: the stages' "
                             "devices, split_spec for torch.distributed.pipelining, DeepSpeed's layers and parts")
    export.add_argument("--out", metavar="FILE", help="write the JSON there (default: standard output)")
    sub.add_parser("graphs", help="list the shipped graphs with their sizes")
    sub.add_parser("table1", help="the benchmark suites' structure in the layout of the paper's table 1")
    return parser


def _describe(name: str, path=None) -> str:
    g = load_graph(name)
    size = f"{path.stat().st_size / 1024:>7.0f} KiB" if path is not None else " " * 11
    return f"{name:<16} {g.num_nodes:>6} ops {g.num_edges:>7} edges {g.num_units:>6} units  {size}"


def list_shipped() -> None:
    """Print every shipped graph with its size, then the names built on demand and the suites."""
    print("shipped graphs (name, ops, op edges, placement units, file size):")
    for suite in SUITE_NAMES:
        for seed in SUITE_SEEDS:
            print("  " + _describe(f"{suite}/{seed}", shipped_path(suite, seed)))
    for models, folder in ((REAL_MODELS, REAL_MODELS_DIR), (TRANSFORMERS, TRANSFORMERS_DIR)):
        for model in models:
            path = folder / f"{model}.json.gz"
            print("  " + (_describe(model, path) if path.is_file() else f"{model:<16} not shipped in this install"))
    print("built on demand:")
    for name in list_graphs():
        if "<" in name:
            print(f"  {name:<16} (any non-negative integer seed; suites ship 0..16, seeds 100+ are held out)")
    print(f"  {'default':<16} = cifar10/0")
    for suite, members in SUITES.items():
        print(f"suite {suite:<10} {len(members)} graphs: {', '.join(members[:2])} .. {members[-1]}")


EXPORT_FORMATS = ("device-map", "split-points")


def export(args: argparse.Namespace) -> int:
    """``export``: the placement in ``args.format``, as JSON on stdout or in ``args.out`` (written whole)."""
    check_output_paths(args.out)
    graph = load_graph(args.graph)
    placement = read_placement(args.placement, graph)
    exported = (to_device_map(graph, placement) if args.format == "device-map"
                else to_split_points(graph, placement).to_dict())
    text = json.dumps(exported, indent=1)
    if args.out:
        write_text_atomically(args.out, text + "\n")
    else:
        print(text)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "export":
        return export(args)
    if args.command == "graphs":
        list_shipped()
        return 0
    if args.command == "table1":
        print(table1_markdown())
        return 0
    checked_param_factor(args.param_factor)
    graph, cluster = graph_and_cluster_from_args(args)
    step = checked_step_args(args, graph)
    placement = read_placement(args.placement, graph)
    result = simulate(graph, placement, cluster, param_factor=args.param_factor, **step)
    if args.trace is not None:
        write_chrome_trace(args.trace, graph, cluster, result)
    if args.json:
        print(json.dumps(result.to_dict()))
        return 0
    pipelined = f", {step['microbatches']} micro-batches, {step['schedule']}" if step["microbatches"] > 1 else ""
    print(f"graph {graph.name} ({graph.num_nodes} ops) on {cluster.name}{pipelined}")
    print(f"makespan     {result.makespan * 1e3:.3f} ms")
    print(f"lower bound  {result.lower_bound * 1e3:.3f} ms  (makespan / LB = {result.lb_ratio:.3f})")
    print(f"transfers    {result.schedule.num_transfers}")
    print(f"{'device':<8} {'peak memory (GB)':>16} {'capacity (GB)':>14} {'busy (ms)':>10}")
    for d in range(cluster.num_devices):
        print(f"{cluster.devices[d].name:<8} {result.peak_memory[d] / 1e9:>16.3f} {cluster.memory[d] / 1e9:>14.3f} "
              f"{result.busy[d] * 1e3:>10.3f}")
    print(f"OOM          {'yes' if result.oom else 'no'}")
    if args.trace is not None:
        print(f"trace        {args.trace} (open in https://ui.perfetto.dev or chrome://tracing)")
    return 0


if __name__ == "__main__":
    sys.exit(run_cli(main))
