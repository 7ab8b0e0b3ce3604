"""Regenerate the shipped suite graphs: ``python -m placement_env.zoo.suites.build [--suite ptb] [--check]``.

Traces seeds 0..16 of every suite and writes ``placement_env/zoo/data/suites/<suite>/<seed>.json.gz``; with
``--check`` compares fresh builds against the shipped files instead and exits 1 on any difference.
"""

from __future__ import annotations

import argparse
import sys

from placement_env.graph.io import read_graph, write_graph
from placement_env.zoo.suites import SUITE_NAMES, SUITE_SEEDS, build_suite_graph, shipped_path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m placement_env.zoo.suites.build",
                                     description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--suite", choices=SUITE_NAMES, action="append", help="only these suites (repeatable)")
    parser.add_argument("--check", action="store_true", help="compare with the shipped files, write nothing")
    args = parser.parse_args(argv)
    different = []
    for suite in args.suite or SUITE_NAMES:
        for seed in SUITE_SEEDS:
            graph, path = build_suite_graph(suite, seed), shipped_path(suite, seed)
            if args.check:
                same = path.is_file() and read_graph(path) == graph
                if not same:
                    different.append(str(path))
                print(f"{graph.name}: {'same' if same else 'DIFFERENT'}")
            else:
                path.parent.mkdir(parents=True, exist_ok=True)
                write_graph(graph, path)
                print(f"{graph.name}: {graph.num_nodes} ops, {graph.num_units} units -> {path}")
    if different:
        print(f"{len(different)} shipped graphs differ from a fresh build", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
