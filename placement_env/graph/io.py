"""The JSON interchange format for graphs (``.json`` or gzipped ``.json.gz``).

Layout (``docs/spec/simulator.md`` section 1)::

    {"format": "device-placement-graph", "version": 1, "name": "...",
     "nodes": [{"id": ..., "op": ..., "cost": ..., "output_bytes": ..., "param_bytes": ...,
                "colocation": ..., "flops": ..., "phase": ...}],
     "edges": [{"src": ..., "dst": ..., "bytes": ...}]}

Writing then reading gives back an equal graph: numbers are written with
Python's shortest round-trip ``repr`` and optional fields only when set.
"""

from __future__ import annotations

import os
from typing import Any

from placement_env.checks import checked_instance
from placement_env.graph.model import ComputationGraph, Edge, Node
from placement_env.json_files import digest_of, read_json_file, write_json_file

GRAPH_FORMAT = "device-placement-graph"
GRAPH_VERSION = 1
_NODE_FIELDS = ("id", "op", "cost", "output_bytes", "param_bytes", "colocation", "flops", "phase", "module",
                "fixed_cost")
_OPTIONAL = ("colocation", "flops", "phase", "module", "fixed_cost")
_GRAPH_FIELDS = ("format", "version", "name", "batch", "nodes", "edges")


def graph_to_dict(graph: ComputationGraph) -> dict:
    """The interchange-format dictionary of ``graph``."""
    checked_instance("graph", graph, ComputationGraph)
    nodes = []
    for node in graph.nodes:
        d = {"id": node.id, "op": node.op, "cost": node.cost, "output_bytes": node.output_bytes,
             "param_bytes": node.param_bytes}
        for key in _OPTIONAL:
            value = getattr(node, key)
            if value is not None:
                d[key] = value
        nodes.append(d)
    edges = [{"src": e.src, "dst": e.dst, "bytes": _compact(e.bytes if e.bytes is not None else 0.0)}
             for e in graph.edges()]
    out: dict[str, Any] = {"format": GRAPH_FORMAT, "version": GRAPH_VERSION, "name": graph.name}
    if graph.batch is not None:
        out["batch"] = graph.batch
    out.update(nodes=nodes, edges=edges)
    return out


def graph_digest(graph: ComputationGraph) -> str:
    """A SHA-256 hex digest of ``graph``'s content (its interchange-format dictionary, name included): two graphs
    with one file name but other ops, costs or edges differ; computed once per graph object."""
    if "digest" not in graph.derived:
        graph.derived["digest"] = digest_of(graph_to_dict(graph))
    return graph.derived["digest"]


def _compact(x: float) -> int | float:
    """Integral floats as ints, so byte counts read naturally in the file."""
    return int(x) if float(x).is_integer() and abs(x) < 2**53 else x


def graph_from_dict(data: Any, source: str = "graph") -> ComputationGraph:
    """Build a graph from an interchange-format dictionary; errors name ``source`` and the item."""
    if not isinstance(data, dict):
        raise ValueError(f"{source}: expected a JSON object, got {type(data).__name__}")
    fmt = data.get("format", GRAPH_FORMAT)
    if fmt != GRAPH_FORMAT:
        raise ValueError(f"{source}: format is {fmt!r}, expected {GRAPH_FORMAT!r}")
    version = data.get("version", GRAPH_VERSION)
    if version != GRAPH_VERSION:
        raise ValueError(f"{source}: unsupported version {version!r} (this reader knows {GRAPH_VERSION})")
    unknown = set(data) - set(_GRAPH_FIELDS)
    if unknown:  # a misspelt "edge" would otherwise load as a graph without edges
        raise ValueError(f"{source}: unknown top-level field(s) {sorted(unknown)}; known: {', '.join(_GRAPH_FIELDS)}")
    raw_nodes, raw_edges = data.get("nodes"), data.get("edges", [])
    if not isinstance(raw_nodes, list):
        raise ValueError(f"{source}: 'nodes' must be a list")
    if not isinstance(raw_edges, list):
        raise ValueError(f"{source}: 'edges' must be a list")
    nodes = []
    for i, rn in enumerate(raw_nodes):
        if not isinstance(rn, dict):
            raise ValueError(f"{source}: node {i} is not an object")
        label = f"{source}: node {rn.get('id', i)!r}"
        unknown = set(rn) - set(_NODE_FIELDS)
        if unknown:
            raise ValueError(f"{label}: unknown field(s) {sorted(unknown)}")
        for key in ("id", "op", "cost"):
            if key not in rn:
                raise ValueError(f"{label}: missing field {key!r}")
        if not isinstance(rn["id"], str):
            raise ValueError(f"{label}: 'id' must be a string")
        fields: dict[str, Any] = {k: rn.get(k, 0 if k in ("output_bytes", "param_bytes") else None)
                                  for k in _NODE_FIELDS}
        nodes.append(Node(**fields))
    edges = []
    for i, re_ in enumerate(raw_edges):
        if not isinstance(re_, dict) or "src" not in re_ or "dst" not in re_:
            raise ValueError(f"{source}: edge {i} must be an object with 'src' and 'dst'")
        unknown = set(re_) - {"src", "dst", "bytes"}
        if unknown:
            raise ValueError(f"{source}: edge {re_['src']!r} -> {re_['dst']!r}: unknown field(s) {sorted(unknown)}")
        if not isinstance(re_["src"], str) or not isinstance(re_["dst"], str):
            raise ValueError(f"{source}: edge {i} ({re_['src']!r} -> {re_['dst']!r}): 'src' and 'dst' must be "
                             "node ids (strings)")
        edges.append(Edge(re_["src"], re_["dst"], re_.get("bytes")))
    name = data.get("name", source)
    if not isinstance(name, str):
        raise ValueError(f"{source}: 'name' must be a string, got {name!r}")
    batch = data.get("batch")
    if batch is not None and (isinstance(batch, bool) or not isinstance(batch, int) or batch < 1):
        raise ValueError(f"{source}: 'batch' must be an integer >= 1, got {batch!r}")
    try:
        return ComputationGraph(nodes, edges, name=name, batch=batch)
    except ValueError as exc:
        raise ValueError(f"{source}: {exc}") from None


def read_graph(path: str | os.PathLike) -> ComputationGraph:
    """Read a graph file (``.json`` or ``.json.gz``)."""
    return graph_from_dict(read_json_file(path), source=str(path))


def write_graph(graph: ComputationGraph, path: str | os.PathLike) -> None:
    """Write ``graph`` in the interchange format (gzipped if the name ends in ``.gz``)."""
    write_json_file(graph_to_dict(graph), path)
