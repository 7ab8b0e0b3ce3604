"""Pieces the command-line tools share: graph / cluster arguments and one-line errors."""

from __future__ import annotations

import argparse
import sys
from typing import Callable

from .cluster import DEFAULT_KIND, DEVICE_KINDS, Cluster
from .graph import ComputationGraph
from .registry import load_graph


def add_graph_and_cluster_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--graph", default="default",
                        help="a shipped graph name (default, synthetic/<seed>) or a .json / .json.gz file")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--devices", type=int, help="number of identical devices of --device-kind (default 3)")
    group.add_argument("--cluster", metavar="FILE", help="a cluster JSON file (heterogeneous allowed)")
    parser.add_argument("--device-kind", default=DEFAULT_KIND, choices=list(DEVICE_KINDS),
                        help=f"device kind for --devices (default {DEFAULT_KIND})")


def graph_and_cluster_from_args(args: argparse.Namespace) -> tuple[ComputationGraph, Cluster]:
    graph = load_graph(args.graph)
    if args.cluster:
        cluster = Cluster.from_json(args.cluster)
    else:
        cluster = Cluster.preset(args.device_kind, 3 if args.devices is None else args.devices)
    return graph, cluster


def run_cli(main: Callable[[], int]) -> int:
    """Run ``main``; bad input ends with a one-line ``error: ...`` on stderr and exit code 2."""
    try:
        return main()
    except (ValueError, FileNotFoundError, KeyError) as exc:
        message = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        print(f"error: {message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
