"""What the agent sees of a graph: placement units, the edges between them, and their features.

The agent places *units* (colocation groups; a node without a group is its
own unit). This module turns a :class:`ComputationGraph` into

* the unit graph: a directed edge ``a -> b`` when some op of unit ``a`` feeds
  an op of unit ``b`` (``a != b``; with forward and backward ops grouped, this
  graph may have cycles);
* the static part of the paper's initial node embedding X, one row per unit
  (columns in :data:`STATIC_FEATURES`); the environments append the unit's
  current device as a one-hot and a "current unit" flag.

Every static column is scaled into [0, 1] within the graph, so graphs of
different sizes and cost scales give comparable features.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from placement_env.graph.model import ComputationGraph

# op-type categories; an op name belongs to the first category one of whose
# keywords it contains (lower-cased), else to "other"
OP_CATEGORIES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("conv", ("conv",)),
    ("matmul", ("matmul", "linear", "gemm", "addmm", "bmm", "mm", "dense", "einsum", "dot")),
    ("norm", ("norm",)),
    ("embedding", ("embedding", "gather", "index")),
    ("attention", ("attention", "softmax")),
    ("pool", ("pool",)),
    ("reduce", ("sum", "mean", "reduce", "max", "min", "loss")),
    ("activation", ("relu", "gelu", "tanh", "sigmoid", "silu", "elu", "dropout")),
    ("elementwise", ("add", "mul", "sub", "div", "pow", "exp", "sqrt", "neg", "where", "clamp")),
    ("view", ("view", "reshape", "transpose", "permute", "concat", "cat", "split", "slice", "squeeze",
              "flatten", "expand", "getitem", "select", "contiguous", "t_")),
    ("update", ("update", "optimizer", "adam", "sgd")),
)
CATEGORY_NAMES: tuple[str, ...] = tuple(name for name, _ in OP_CATEGORIES) + ("other",)
STATIC_FEATURES: tuple[str, ...] = tuple(f"op:{c}" for c in CATEGORY_NAMES) + (
    "backward_share", "cost", "output_bytes", "param_bytes", "in_degree", "out_degree", "depth", "num_ops")


def op_category(op: str) -> int:
    """Index in :data:`CATEGORY_NAMES` of an op type name (``_grad`` suffixes are ignored)."""
    name = op.lower().removesuffix("_grad")
    for i, (_, keywords) in enumerate(OP_CATEGORIES):
        if any(k in name for k in keywords):
            return i
    return len(OP_CATEGORIES)


@dataclass(frozen=True)
class UnitGraph:
    """The placement units of one graph, their edges and static features."""

    num_units: int
    unit_of: np.ndarray  # unit of every node
    edges: np.ndarray  # (2, E) int64, unit -> unit, sorted, no self-loops or duplicates
    static: np.ndarray  # (num_units, len(STATIC_FEATURES)) float32 in [0, 1]
    topological_order: np.ndarray  # units by the smallest topological index of their ops
    names: tuple[str, ...]

    @property
    def num_edges(self) -> int:
        return int(self.edges.shape[1])


def unit_graph(graph: ComputationGraph) -> UnitGraph:
    """The :class:`UnitGraph` of ``graph`` (computed once per graph object)."""
    cached = graph.derived.get("unit_graph")
    if cached is None:
        cached = graph.derived["unit_graph"] = _build(graph)
    return cached


def _scaled(x: np.ndarray) -> np.ndarray:
    top = float(x.max()) if x.size else 0.0
    return x / top if top > 0 else np.zeros_like(x)


def unit_edges(graph: ComputationGraph) -> np.ndarray:
    """The unit graph's edges, a (2, E) int64 array sorted by (source, target), without self-loops or duplicates,
    computed once per graph object and without the features (a second on a million-op graph, where
    :func:`unit_graph` takes several)."""
    cached = graph.derived.get("unit_edges")
    if cached is None:
        nu = graph.num_units
        us, ud = graph.unit_of[graph.edge_src], graph.unit_of[graph.edge_dst]
        keep = us != ud
        pairs = np.unique(us[keep] * nu + ud[keep])
        cached = graph.derived["unit_edges"] = np.stack([pairs // nu, pairs % nu]).astype(np.int64)
        cached.setflags(write=False)
    return cached


def _build(graph: ComputationGraph) -> UnitGraph:
    nu = graph.num_units
    unit = graph.unit_of
    edges = unit_edges(graph)

    categories = np.array([op_category(op) for op in graph.ops], dtype=np.int64)
    ncat = len(CATEGORY_NAMES)
    weight = np.where(graph.cost > 0, graph.cost, 0.0)
    hist = np.zeros((nu, ncat))
    np.add.at(hist, (unit, categories), weight)
    counts = np.zeros((nu, ncat))
    np.add.at(counts, (unit, categories), 1.0)
    total = hist.sum(axis=1, keepdims=True)
    # cost-weighted op-type mix; a unit of zero-cost ops falls back to counts
    mix = np.where(total > 0, hist / np.where(total > 0, total, 1.0), counts / counts.sum(axis=1, keepdims=True))

    backward = np.array([n.phase == "backward" for n in graph.nodes], dtype=np.float64)
    ops_per_unit = np.bincount(unit, minlength=nu).astype(np.float64)
    backward_share = np.bincount(unit, weights=backward, minlength=nu) / ops_per_unit
    cost = np.bincount(unit, weights=graph.cost, minlength=nu)
    out = np.bincount(unit, weights=graph.output_bytes, minlength=nu)
    params = np.bincount(unit, weights=graph.param_bytes, minlength=nu)
    indeg = np.bincount(edges[1], minlength=nu).astype(np.float64)
    outdeg = np.bincount(edges[0], minlength=nu).astype(np.float64)
    node_depth = graph.depth().astype(np.float64)
    depth = np.full(nu, np.inf)
    np.minimum.at(depth, unit, node_depth)  # a unit sits at the depth of its shallowest op
    static = np.column_stack([
        mix, backward_share, _scaled(cost), _scaled(np.log1p(out)), _scaled(np.log1p(params)),
        _scaled(indeg), _scaled(outdeg), _scaled(depth), _scaled(ops_per_unit),
    ]).astype(np.float32)

    first_topo = np.full(nu, graph.num_nodes, dtype=np.int64)
    np.minimum.at(first_topo, unit, graph.topo_index)
    order = np.argsort(first_topo, kind="stable")
    for arr in (static, order):
        arr.setflags(write=False)
    return UnitGraph(nu, unit, edges, static, order, graph.unit_names)
