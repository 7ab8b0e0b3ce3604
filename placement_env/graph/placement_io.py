"""Placement files: a JSON list of device indices in node order, or an object mapping node id to device."""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence

import numpy as np

from placement_env.cluster import MAX_DEVICES
from placement_env.graph.model import ComputationGraph
from placement_env.json_files import read_json_file, write_json_file


def placement_from_json(data, graph: ComputationGraph, source: str = "placement") -> np.ndarray:
    """A device per node from a parsed placement file; errors name the file and the node."""
    if isinstance(data, list):
        if len(data) != graph.num_nodes:
            raise ValueError(f"{source}: {len(data)} entries, graph {graph.name!r} has {graph.num_nodes} nodes")
        values = list(enumerate(data))
    elif isinstance(data, dict):
        unknown = [k for k in data if k not in graph._index]
        if unknown:
            raise ValueError(f"{source}: node {unknown[0]!r} is not in graph {graph.name!r}")
        missing = [nid for nid in graph.ids if nid not in data]
        if missing:
            raise ValueError(f"{source}: no device given for node {missing[0]!r} ({len(missing)} nodes missing)")
        values = [(graph.index_of(k), v) for k, v in data.items()]
    else:
        raise ValueError(f"{source}: a placement is a JSON list or object, got {type(data).__name__}")
    out = np.empty(graph.num_nodes, dtype=np.int64)
    for i, v in values:
        if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < MAX_DEVICES:
            raise ValueError(f"{source}: device of node {graph.nodes[i].id!r} must be an integer from 0 to "
                             f"{MAX_DEVICES - 1}, got {v!r}")
        out[i] = v
    return out


def read_placement(path: str | os.PathLike, graph: ComputationGraph) -> np.ndarray:
    """Read a placement file for ``graph``."""
    return placement_from_json(read_json_file(path), graph, source=str(path))


def write_placement(placement: Sequence[int] | np.ndarray, path: str | os.PathLike) -> None:
    """Write a placement (a device index per node, in node order) as a JSON list.

    Raises:
        ValueError: when ``placement`` is not a 1-D sequence of non-negative
            integers (integral floats such as ``2.0`` are accepted), naming the
            first bad entry; nothing is written then.
    """
    if isinstance(placement, (str, bytes, os.PathLike)) or not isinstance(placement, Iterable):
        raise ValueError(f"placement must be a sequence of device indices, got {type(placement).__name__} "
                         f"{placement!r} (the arguments are placement, then path)")
    if isinstance(placement, np.ndarray) and placement.ndim != 1:
        raise ValueError(f"placement must be a 1-D sequence of device indices, got shape {placement.shape}")
    devices = []
    for i, v in enumerate(placement.tolist() if isinstance(placement, np.ndarray) else placement):
        if isinstance(v, (np.integer, np.floating)):
            v = v.item()
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not float(v).is_integer() or v < 0:
            raise ValueError(f"placement entry {i} must be a non-negative integer device index, got {v!r}")
        devices.append(int(v))
    write_json_file(devices, path)
