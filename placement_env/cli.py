"""Pieces the command-line tools share: graph / cluster arguments and one-line errors."""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

from placement_env.cluster import DEFAULT_KIND, DEVICE_KINDS, Cluster
from placement_env.graph.model import ComputationGraph
from placement_env.sim.pipeline import DEFAULT_SCHEDULE, SCHEDULES, checked_microbatches, checked_schedule
from placement_env.stops import Terminated as Terminated  # the names commands import from here
from placement_env.stops import ignore_interrupts as ignore_interrupts
from placement_env.stops import sigterm_as_interrupt as sigterm_as_interrupt
from placement_env.zoo.registry import load_graph


class OneLineParser(argparse.ArgumentParser):
    """``argparse`` whose errors are one ``error:`` line (no usage block) and exit status 2, as every command's
    other errors are."""

    def error(self, message: str) -> NoReturn:
        if message.endswith("expected one argument"):  # --split -1,18: argparse takes the value for an option
            message += " (a value that begins with '-' is given with '=': --option=-1,18)"
        print(f"error: {message}", file=sys.stderr)
        raise SystemExit(2)


def add_graph_and_cluster_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--graph", default="default",
                        help="a shipped graph name (default, synthetic/<seed>) or a .json / .json.gz file")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--devices", type=int, help="number of identical devices of --device-kind (default 3)")
    group.add_argument("--cluster", metavar="FILE", help="a cluster JSON file (heterogeneous allowed)")
    parser.add_argument("--device-kind", default=DEFAULT_KIND, choices=list(DEVICE_KINDS),
                        help=f"device kind for --devices (default {DEFAULT_KIND})")
    parser.add_argument("--per-node", type=int, metavar="K",
                        help="with --devices: nodes of K devices, the kind's link within a node and the node's "
                             "network (InfiniBand figures of the kind) between nodes")
    parser.add_argument("--memory-gib", type=float, metavar="GIB",
                        help="give every device this much memory (GiB), e.g. to place under memory pressure")


def add_step_args(parser: argparse.ArgumentParser) -> None:
    """``--microbatches`` and ``--schedule``: the pipelined step of ``docs/spec/simulator.md`` section 3a."""
    parser.add_argument("--microbatches", type=_whole_number, default=1, metavar="M",
                        help="cut the batch into M micro-batches that flow through the placement pipelined "
                             "(default 1: the plain step)")
    parser.add_argument("--schedule", default=DEFAULT_SCHEDULE, choices=SCHEDULES,
                        help=f"pipeline schedule for --microbatches above 1 (default {DEFAULT_SCHEDULE})")


def _whole_number(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {text!r}") from None


def checked_step_args(args: argparse.Namespace, graph: ComputationGraph) -> dict:
    """``{"microbatches": m, "schedule": s}`` of the parsed step arguments, checked against ``graph``
    (``ValueError`` naming a value below 1 or above the batch the graph was traced with)."""
    return {"microbatches": checked_microbatches(args.microbatches, graph),
            "schedule": checked_schedule(args.schedule)}


def graph_and_cluster_from_args(args: argparse.Namespace) -> tuple[ComputationGraph, Cluster]:
    graph = load_graph(args.graph)
    if args.cluster and getattr(args, "per_node", None) is not None:
        raise ValueError("--per-node shapes a preset cluster (--devices); a --cluster file gives its own links")
    if args.cluster:
        cluster = Cluster.from_json(args.cluster)
    else:
        cluster = Cluster.preset(args.device_kind, 3 if args.devices is None else args.devices,
                                 per_node=getattr(args, "per_node", None))
    if getattr(args, "memory_gib", None) is not None:
        cluster = cluster.with_memory(args.memory_gib * 2**30)
    return graph, cluster


def _check_writable(folder: Path, what: str) -> None:
    """Refuse ``folder`` (or, if it does not exist yet, the nearest folder above it that does) when a file cannot
    be created in it: tried for real, as permissions, read-only mounts and full disks all show only then."""
    existing = folder
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    try:
        with tempfile.NamedTemporaryFile(dir=existing, prefix=".write-check-"):
            pass
    except OSError as error:
        raise ValueError(f"cannot write {what}: {str(existing)!r}: {error.strerror or error}") from None


def check_output_paths(file: str | None = None, folder: str | None = None, *more_folders: str | None) -> None:
    """Refuse, before any work is done, an output ``file`` that is a folder, lies in no folder or cannot be
    written, and an output ``folder`` (or any of ``more_folders``) that is a file or cannot be written in
    (``ValueError`` naming the path)."""
    if file is not None:
        path = Path(file)
        if path.is_dir():
            raise ValueError(f"{file!r} is a folder; give a file name to write")
        if not path.parent.is_dir():
            raise ValueError(f"cannot write {file!r}: folder {str(path.parent)!r} does not exist")
        _check_writable(path.parent, repr(file))
    for name in (folder, *more_folders):
        if name is not None and Path(name).exists() and not Path(name).is_dir():
            raise ValueError(f"{name!r} is a file, not a folder")
        if name is not None:
            _check_writable(Path(name), f"in {name!r}")


def os_error_message(exc: OSError) -> str:
    """``out.json: Is a directory`` (the file first, as the input validators say it) rather than
    ``[Errno 21] Is a directory: 'out.json'``."""
    if exc.filename is not None and exc.strerror:
        return f"{exc.filename}: {exc.strerror}"
    return str(exc)


INTERRUPTED_STATUS, TERMINATED_STATUS = 130, 143  # 128 + SIGINT, 128 + SIGTERM, as shells report them


def interrupted(exc: KeyboardInterrupt, what: str = "") -> int:
    """Say on stderr, in one line, that the command was interrupted (Ctrl-C) or terminated (SIGTERM), with
    ``what`` (e.g. what was kept); returns the exit status, 130 or 143."""
    word, status = ("terminated", TERMINATED_STATUS) if isinstance(exc, Terminated) else \
        ("interrupted", INTERRUPTED_STATUS)
    print(f"{word}{': ' + what if what else ''}", file=sys.stderr)
    return status


def run_cli(main: Callable[[], int]) -> int:
    """Run ``main``; bad input (or an output path that cannot be written) ends with a one-line
    ``error: ...`` on stderr and exit code 2; Ctrl-C with one line and 130, SIGTERM with one line and 143."""
    try:
        with sigterm_as_interrupt():
            return main()
    except (ValueError, KeyError) as exc:
        message = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        print(f"error: {message}", file=sys.stderr)
        return 2
    except OSError as exc:  # FileNotFoundError, IsADirectoryError, PermissionError, ...
        print(f"error: {os_error_message(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:
        return interrupted(exc)
