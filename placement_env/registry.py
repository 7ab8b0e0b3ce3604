"""Graphs by name: ``load_graph("default")``, ``load_graph("synthetic/7")``, a path, or a graph object.

Shipped names (until the benchmark suites arrive):

* ``synthetic/<seed>``: the training graph of a seeded layered DAG of
  ``SYNTHETIC_FORWARD_OPS`` forward ops (twice as many ops in all), with the
  default :class:`~placement_env.synthetic.LayeredDagSpec` distributions;
* ``default``: ``synthetic/0``, the graph the README's main command uses.

Suites (:func:`load_suite`): ``synthetic`` is ``synthetic/0`` .. ``synthetic/16``
(17 graphs, the size of the paper's suites); seeds from 100 up are held out
for generalization tests.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from .graph import ComputationGraph
from .graph_io import read_graph
from .synthetic import layered_dag

SYNTHETIC_FORWARD_OPS = 300
DEFAULT_GRAPH = "synthetic/0"
_SYNTHETIC = re.compile(r"synthetic/(\d+)")


def load_graph(source: str | os.PathLike | ComputationGraph) -> ComputationGraph:
    """A graph from a shipped name, a ``.json`` / ``.json.gz`` path, or a graph object (returned as is).

    Raises:
        ValueError: for a name that is neither an existing file nor a shipped graph.
    """
    if isinstance(source, ComputationGraph):
        return source
    if not isinstance(source, (str, os.PathLike)):
        raise ValueError(f"a graph must be a name, a path or a ComputationGraph, got {type(source).__name__}")
    text = os.fspath(source)
    if Path(text).is_file():
        return read_graph(text)
    if text == "default":
        text = DEFAULT_GRAPH
    match = _SYNTHETIC.fullmatch(text)
    if match:
        return layered_dag(int(match.group(1)), training=True, name=text, num_ops=SYNTHETIC_FORWARD_OPS)
    if text.endswith((".json", ".json.gz")):
        raise FileNotFoundError(f"graph file {text!r} does not exist")
    raise ValueError(f"unknown graph {text!r}: not an existing file and not a shipped graph "
                     f"(shipped: {', '.join(list_graphs())})")


SUITES = {"synthetic": [f"synthetic/{seed}" for seed in range(17)]}


def load_suite(name: str) -> list[ComputationGraph]:
    """The graphs of a suite (see :data:`SUITES`)."""
    if name not in SUITES:
        raise ValueError(f"unknown suite {name!r}; known suites: {', '.join(SUITES)}")
    return [load_graph(g) for g in SUITES[name]]


def list_graphs() -> list[str]:
    """The names :func:`load_graph` knows (``<seed>`` stands for any non-negative integer)."""
    return ["default", "synthetic/<seed>"]
