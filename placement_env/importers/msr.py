"""Graphs in the input format of Microsoft Research's ``dnn-partitioning`` (Tarnawski et al., "Efficient
Algorithms for Device Placement of DNN Graph Operators", NeurIPS 2020; github.com/msr-fiddle/dnn-partitioning,
MIT): profiled operator and layer graphs of BERT, GNMT, ResNet-50 and Inception-v3.

Their format (its README): ``nodes`` with ``id``, ``fpgaLatency`` (the node's time on the accelerator, in
milliseconds: a 3-layer BERT's training graph sums to 123 ms), ``size`` (the bytes it takes on the accelerator),
``isBackwardNode`` and an optional ``colorClass`` (nodes of one class must share a device); ``edges`` with
``sourceId``, ``destId`` and ``size`` (bytes). :func:`from_msr` maps them to a :class:`ComputationGraph`:

* ``cost``: ``fpgaLatency`` / 1000 (seconds on the reference device);
* ``param_bytes``: ``size`` (memory the node holds for the step, as the paper's memory constraint counts it);
* ``output_bytes``: the largest ``size`` of the node's out-edges (0 for a sink);
* ``colocation``: ``color<class>``; ``phase``: ``backward`` or ``forward``; ``op``: the node's ``name``'s
  last dotted part, ``id`` its name (made unique with its id).
"""

from __future__ import annotations

import os
from pathlib import Path

from placement_env.graph.model import ComputationGraph, Edge, Node
from placement_env.json_files import read_json_file


def from_msr(path: str | os.PathLike, name: str | None = None) -> ComputationGraph:
    """The graph of an MSR ``dnn-partitioning`` input file (module docstring).

    Raises:
        ValueError: naming the file and the field, for a file not in that format.
    """
    data = read_json_file(path)
    source = os.fspath(path)
    if not isinstance(data, dict) or not isinstance(data.get("nodes"), list) or not isinstance(data.get("edges"),
                                                                                                  list):
        raise ValueError(f"{source}: not an MSR dnn-partitioning graph (no \"nodes\" and \"edges\" lists)")
    out_bytes: dict[int, float] = {}
    edges = []
    ids: dict[int, str] = {}
    for i, node in enumerate(data["nodes"]):
        for field in ("id", "fpgaLatency", "size"):
            if not isinstance(node, dict) or field not in node:
                raise ValueError(f"{source}: node {i} has no {field!r}")
        ids[int(node["id"])] = f"{node.get('name', 'node')}#{int(node['id'])}"
    for i, edge in enumerate(data["edges"]):
        for field in ("sourceId", "destId"):
            if not isinstance(edge, dict) or int(edge.get(field, -1)) not in ids:
                raise ValueError(f"{source}: edge {i}'s {field} names no node")
        a, b = int(edge["sourceId"]), int(edge["destId"])
        out_bytes[a] = max(out_bytes.get(a, 0.0), float(edge.get("size", 0.0)))
        edges.append(Edge(ids[a], ids[b]))
    nodes = []
    for node in data["nodes"]:
        k = int(node["id"])
        color = node.get("colorClass")
        nodes.append(Node(ids[k], str(node.get("name", "node")).rsplit(".", 1)[-1], float(node["fpgaLatency"]) / 1e3,
                          out_bytes.get(k, 0.0), float(node["size"]),
                          None if color is None else f"color{int(color)}",
                          phase="backward" if node.get("isBackwardNode") else "forward"))
    return ComputationGraph(nodes, edges, name=name or Path(source).name.split(".")[0])
