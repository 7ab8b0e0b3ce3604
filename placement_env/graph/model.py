"""The computation graph: operations (nodes) and the tensors they exchange (edges).

Semantics and units follow ``docs/spec/simulator.md`` section 1:

* ``cost`` is seconds on the reference device (speed 1.0),
* ``output_bytes`` / ``param_bytes`` / edge ``bytes`` are bytes,
* ``colocation`` names a group of nodes that must share a device.

A :class:`ComputationGraph` is immutable once built: it is validated in the
constructor and keeps its derived arrays (topological index, successor lists,
placement units) so that the simulator and the placers never recompute them.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any

import numpy as np

from placement_env.checks import MAX_COST_SECONDS, checked_instance, checked_quantity

PHASES = ("forward", "backward", "update")


@dataclass(frozen=True)
class Node:
    """One operation.

    Attributes:
        id: unique name.
        op: operation type (``conv2d``, ``matmul``, ``add``...).
        cost: run time in seconds on a device of speed 1.0.
        output_bytes: bytes of the tensor(s) the op produces.
        param_bytes: bytes of the parameters the op owns (0 if none).
        colocation: nodes with the same value must be placed on one device.
        flops: floating-point operations (informative; ``cost`` is what is simulated).
        phase: ``forward``, ``backward`` or ``update`` (informative).
        module: qualified name of the ``nn.Module`` the op came from (``layers.3.mlp``; ``""`` the model
            itself), where the graph was imported from a model (:func:`~placement_env.importers.pytorch.from_torch`);
            what a placement is exported by (:mod:`placement_env.runtime`).
        fixed_cost: the part of ``cost`` (seconds) an op takes whatever the size of its batch (a call's dispatch
            and launch), which a micro-batch pays in full (``docs/spec/simulator.md`` section 3a); None: 0.
    """

    id: str
    op: str
    cost: float
    output_bytes: float = 0
    param_bytes: float = 0
    colocation: str | None = None
    flops: float | None = None
    phase: str | None = None
    module: str | None = None
    fixed_cost: float | None = None


@dataclass(frozen=True)
class Edge:
    """``dst`` consumes the output of ``src``; ``bytes`` defaults to ``src.output_bytes``."""

    src: str
    dst: str
    bytes: float | None = None


class ComputationGraph:
    """A validated DAG of operations.

    Args:
        nodes: the operations; their order is the node *index* 0..N-1.
        edges: the data dependencies (at most one per ordered pair).
        name: a label used in messages and reports.
        batch: the size of the batch the graph was traced with (an integer >= 1), where known: it bounds the
            micro-batches of a pipelined step (``docs/spec/simulator.md`` sections 1 and 3a).

    Raises:
        ValueError: a ``batch`` that is not an integer >= 1; naming the offending node or edge for an empty graph, a
            duplicate id, a negative / NaN / infinite number, a self-loop, an
            edge to an unknown node, a duplicate edge, or a cycle.
    """

    def __init__(self, nodes: Sequence[Node], edges: Iterable[Edge] = (), name: str = "graph",
                 batch: int | None = None) -> None:
        self.name = str(name)
        if batch is not None and (isinstance(batch, bool) or not isinstance(batch, int) or batch < 1):
            raise ValueError(f"graph {self.name!r}: batch must be an integer >= 1, got {batch!r}")
        self.batch = batch
        nodes = list(nodes)
        if not nodes:
            raise ValueError(f"graph {self.name!r} is empty: it has no nodes")
        index: dict[str, int] = {}
        for i, node in enumerate(nodes):
            if not isinstance(node, Node):
                raise ValueError(f"graph {self.name!r}: item {i} is not a Node: {node!r}")
            if not isinstance(node.id, str) or not node.id:
                raise ValueError(f"graph {self.name!r}: node {i} has no valid id ({node.id!r})")
            if node.id in index:
                raise ValueError(f"graph {self.name!r}: duplicate node id {node.id!r} (nodes {index[node.id]} and {i})")
            index[node.id] = i
            checked_quantity(node.cost, f"node {node.id!r}: cost", MAX_COST_SECONDS)
            if node.fixed_cost is not None and checked_quantity(node.fixed_cost, f"node {node.id!r}: fixed_cost",
                                                              MAX_COST_SECONDS) > float(node.cost):
                raise ValueError(f"node {node.id!r}: fixed_cost {node.fixed_cost!r} is more than its cost "
                                 f"{node.cost!r}")
            checked_quantity(node.output_bytes, f"node {node.id!r}: output_bytes")
            checked_quantity(node.param_bytes, f"node {node.id!r}: param_bytes")
            if node.flops is not None:
                checked_quantity(node.flops, f"node {node.id!r}: flops", 1e24)
            if node.phase is not None and node.phase not in PHASES:
                raise ValueError(f"node {node.id!r}: phase must be one of {PHASES}, got {node.phase!r}")
            if node.colocation is not None and not isinstance(node.colocation, str):
                raise ValueError(f"node {node.id!r}: colocation must be a string, got {node.colocation!r}")
            if node.module is not None and not isinstance(node.module, str):
                raise ValueError(f"node {node.id!r}: module must be a string, got {node.module!r}")
        self.nodes: tuple[Node, ...] = tuple(nodes)
        self._index = index

        src, dst, nbytes = [], [], []
        seen: set[tuple[int, int]] = set()
        for edge in edges:
            if not isinstance(edge, Edge):
                raise ValueError(f"graph {self.name!r}: not an Edge: {edge!r}")
            label = f"edge {edge.src!r} -> {edge.dst!r}"
            if edge.src not in index:
                raise ValueError(f"{label}: unknown source node {edge.src!r}")
            if edge.dst not in index:
                raise ValueError(f"{label}: unknown destination node {edge.dst!r}")
            if edge.src == edge.dst:
                raise ValueError(f"{label}: self-loop on node {edge.src!r}")
            s, d = index[edge.src], index[edge.dst]
            if (s, d) in seen:
                raise ValueError(f"{label}: duplicate edge (at most one per ordered pair)")
            seen.add((s, d))
            b = nodes[s].output_bytes if edge.bytes is None else checked_quantity(edge.bytes, f"{label}: bytes")
            src.append(s)
            dst.append(d)
            nbytes.append(float(b))
        self.edge_src = np.asarray(src, dtype=np.int64)
        self.edge_dst = np.asarray(dst, dtype=np.int64)
        self.edge_bytes = np.asarray(nbytes, dtype=np.float64)

        self.cost = np.array([float(n.cost) for n in nodes], dtype=np.float64)
        self.output_bytes = np.array([float(n.output_bytes) for n in nodes], dtype=np.float64)
        self.param_bytes = np.array([float(n.param_bytes) for n in nodes], dtype=np.float64)
        for arr in (self.cost, self.output_bytes, self.param_bytes, self.edge_src, self.edge_dst, self.edge_bytes):
            arr.setflags(write=False)
        self.topo_order = self._kahn_smallest_index_first()
        topo_index = np.empty(self.num_nodes, dtype=np.int64)
        topo_index[self.topo_order] = np.arange(self.num_nodes)
        self.topo_index = topo_index
        self.topo_order.setflags(write=False)
        self.topo_index.setflags(write=False)
        self.derived: dict[str, Any] = {}  # per-graph data other modules compute once (e.g. simulator arrays)

    # ------------------------------------------------------------------ sizes
    @property
    def num_nodes(self) -> int:
        return len(self.nodes)

    @property
    def num_edges(self) -> int:
        return int(self.edge_src.shape[0])

    def __len__(self) -> int:
        return self.num_nodes

    def __repr__(self) -> str:
        return (
            f"ComputationGraph(name={self.name!r}, nodes={self.num_nodes}, edges={self.num_edges}, "
            f"units={self.num_units})"
        )

    def index_of(self, node_id: str) -> int:
        """The index of the node called ``node_id`` (``KeyError`` naming it if absent)."""
        try:
            return self._index[node_id]
        except KeyError:
            raise KeyError(f"graph {self.name!r} has no node {node_id!r}") from None

    @cached_property
    def ids(self) -> tuple[str, ...]:
        return tuple(n.id for n in self.nodes)

    @property
    def ops(self) -> list[str]:
        return [n.op for n in self.nodes]

    @property
    def total_cost(self) -> float:
        """Sum of op costs, seconds on the reference device."""
        return float(self.cost.sum())

    # -------------------------------------------------------------- structure
    @cached_property
    def successors(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """CSR successor lists: ``(ptr, dst, bytes)``; node ``i``'s are ``ptr[i]:ptr[i+1]``.

        Within a node, successors are sorted by node index.
        """
        return _csr(self.num_nodes, self.edge_src, self.edge_dst, self.edge_bytes)

    @cached_property
    def predecessors(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """CSR predecessor lists: ``(ptr, src, bytes)``."""
        return _csr(self.num_nodes, self.edge_dst, self.edge_src, self.edge_bytes)

    @cached_property
    def in_degree(self) -> np.ndarray:
        return np.bincount(self.edge_dst, minlength=self.num_nodes).astype(np.int64)

    @cached_property
    def out_degree(self) -> np.ndarray:
        return np.bincount(self.edge_src, minlength=self.num_nodes).astype(np.int64)

    def _kahn_smallest_index_first(self) -> np.ndarray:
        """Kahn's algorithm always taking the ready node of smallest index (spec section 1)."""
        n = self.num_nodes
        ptr, dst, _ = _csr(n, self.edge_src, self.edge_dst, self.edge_bytes)
        indeg = np.bincount(self.edge_dst, minlength=n)
        heap = [i for i in range(n) if indeg[i] == 0]
        heapq.heapify(heap)
        order: list[int] = []
        ptr_l, dst_l, indeg_l = ptr.tolist(), dst.tolist(), indeg.tolist()
        while heap:
            u = heapq.heappop(heap)
            order.append(u)
            for k in range(ptr_l[u], ptr_l[u + 1]):
                v = dst_l[k]
                indeg_l[v] -= 1
                if indeg_l[v] == 0:
                    heapq.heappush(heap, v)
        if len(order) < n:
            raise ValueError(f"graph {self.name!r} has a cycle: {self._describe_cycle(set(range(n)) - set(order))}")
        return np.asarray(order, dtype=np.int64)

    def _describe_cycle(self, leftover: set[int]) -> str:
        """Name the nodes of one cycle among the nodes Kahn's algorithm could not order.

        Every left-over node has a left-over predecessor, so walking predecessors
        from any of them must revisit a node: that walk closes a cycle.
        """
        preds: dict[int, int] = {}
        for s, d in zip(self.edge_src.tolist(), self.edge_dst.tolist()):
            if s in leftover and d in leftover and d not in preds:
                preds[d] = s
        walk: list[int] = []
        pos: dict[int, int] = {}
        v = min(leftover)
        while v not in pos:
            pos[v] = len(walk)
            walk.append(v)
            v = preds[v]
        cycle = walk[pos[v]:][::-1]
        names = [self.nodes[i].id for i in cycle]
        return " -> ".join(repr(x) for x in names + names[:1])

    def depth(self) -> np.ndarray:
        """Longest number of edges from any source to each node."""
        depth = np.zeros(self.num_nodes, dtype=np.int64)
        ptr, dst, _ = self.successors
        for u in self.topo_order.tolist():
            for k in range(ptr[u], ptr[u + 1]):
                v = dst[k]
                if depth[u] + 1 > depth[v]:
                    depth[v] = depth[u] + 1
        return depth

    # ---------------------------------------------------------- colocation
    @cached_property
    def unit_of(self) -> np.ndarray:
        """Placement unit of every node (read-only int array).

        Units are the colocation groups; a node without a group is its own
        unit. Units are numbered in order of their first node.
        """
        units: dict[str, int] = {}
        out = np.empty(self.num_nodes, dtype=np.int64)
        count = 0
        for i, node in enumerate(self.nodes):
            key = node.colocation
            if key is None:
                out[i] = count
                count += 1
            elif key in units:
                out[i] = units[key]
            else:
                units[key] = count
                out[i] = count
                count += 1
        out.setflags(write=False)
        return out

    @property
    def num_units(self) -> int:
        return int(self.unit_of.max()) + 1

    @cached_property
    def unit_members(self) -> list[np.ndarray]:
        """Node indices of each unit, ascending."""
        order = np.argsort(self.unit_of, kind="stable")
        bounds = np.searchsorted(self.unit_of[order], np.arange(self.num_units + 1))
        return [order[bounds[u]:bounds[u + 1]] for u in range(self.num_units)]

    @cached_property
    def unit_first(self) -> np.ndarray:
        """Index of the first node of each unit."""
        first = np.array([int(m[0]) for m in self.unit_members], dtype=np.int64)
        first.setflags(write=False)
        return first

    @cached_property
    def unit_names(self) -> tuple[str, ...]:
        """A readable name per unit, in unit order: its colocation group, or its single node's id (a tuple, like
        :attr:`ids`)."""
        names = []
        for members in self.unit_members:
            first = self.nodes[int(members[0])]
            names.append(first.colocation if first.colocation is not None else first.id)
        return tuple(names)

    def expand_unit_placement(self, unit_placement: Sequence[int] | np.ndarray) -> np.ndarray:
        """Turn a device per placement unit into a device per node."""
        up = np.asarray(unit_placement)
        if up.ndim != 1 or up.shape[0] != self.num_units:
            raise ValueError(
                f"unit placement has shape {up.shape}, graph {self.name!r} has {self.num_units} placement units"
            )
        return up.astype(np.int64)[self.unit_of]

    def unit_placement(self, placement: Sequence[int] | np.ndarray) -> np.ndarray:
        """The device of every unit in a node placement (which must honour colocation)."""
        return np.asarray(placement, dtype=np.int64)[self.unit_first]

    # ----------------------------------------------------------- conversion
    def to_networkx(self):
        """A ``networkx.DiGraph`` with every node and edge field as attributes."""
        import networkx as nx

        g = nx.DiGraph(name=self.name)
        for node in self.nodes:
            attrs = {k: v for k, v in node.__dict__.items() if k != "id" and v is not None}
            g.add_node(node.id, **attrs)
        for s, d, b in zip(self.edge_src.tolist(), self.edge_dst.tolist(), self.edge_bytes.tolist()):
            g.add_edge(self.nodes[s].id, self.nodes[d].id, bytes=b)
        return g

    @classmethod
    def from_networkx(cls, g, name: str | None = None) -> ComputationGraph:
        """Build from a ``networkx.DiGraph`` whose nodes carry ``op`` and ``cost`` attributes.

        Node ids become strings; ``output_bytes`` and ``param_bytes`` default to 0.
        """
        import networkx as nx

        checked_instance("g", g, nx.DiGraph)
        nodes = []
        for nid, attrs in g.nodes(data=True):
            if "cost" not in attrs:
                raise ValueError(f"networkx node {nid!r} has no 'cost' attribute")
            nodes.append(
                Node(
                    id=str(nid),
                    op=str(attrs.get("op", "op")),
                    cost=attrs["cost"],
                    output_bytes=attrs.get("output_bytes", 0),
                    param_bytes=attrs.get("param_bytes", 0),
                    colocation=attrs.get("colocation"),
                    flops=attrs.get("flops"),
                    phase=attrs.get("phase"),
                    module=attrs.get("module"),
                    fixed_cost=attrs.get("fixed_cost"),
                )
            )
        edges = [Edge(str(s), str(d), attrs.get("bytes")) for s, d, attrs in g.edges(data=True)]
        return cls(nodes, edges, name=name if name is not None else (g.graph.get("name") or "graph"))

    def with_name(self, name: str) -> ComputationGraph:
        return ComputationGraph(self.nodes, self.edges(), name=name, batch=self.batch)

    def without_modules(self) -> ComputationGraph:
        """The same graph with no op's ``module`` nor ``fixed_cost`` recorded (as the benchmark's suites and real
        models were made, before either: their files and content digests stay as they were)."""
        return ComputationGraph([replace(n, module=None, fixed_cost=None) for n in self.nodes], self.edges(),
                                name=self.name, batch=self.batch)

    def edges(self) -> list[Edge]:
        """The edges as :class:`Edge` records, in stored order."""
        return [
            Edge(self.nodes[s].id, self.nodes[d].id, b)
            for s, d, b in zip(self.edge_src.tolist(), self.edge_dst.tolist(), self.edge_bytes.tolist())
        ]

    def __eq__(self, other: object) -> bool:
        """Same name, same nodes in the same order, same edges in any order (networkx lists edges by source)."""
        if not isinstance(other, ComputationGraph):
            return NotImplemented
        if self.name != other.name or self.nodes != other.nodes or self.num_edges != other.num_edges:
            return False
        return all(np.array_equal(a, b) for a, b in zip(self._edge_set, other._edge_set))

    @cached_property
    def _edge_set(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(src, dst, bytes)`` sorted by (src, dst): the edges as a set, for ``==`` and ``hash``
        (``-0.0`` bytes become ``0.0``, which they equal)."""
        order = np.lexsort((self.edge_dst, self.edge_src))
        return self.edge_src[order], self.edge_dst[order], self.edge_bytes[order] + 0.0

    def __hash__(self) -> int:
        """A hash of what ``==`` compares, so that equal graphs hash alike (sets, dict keys).

        Computed once per graph (the node tuple and the edge arrays are read-only) and cached.
        """
        cached = self.__dict__.get("_value_hash")
        if cached is None:
            edges = tuple(a.tobytes() for a in self._edge_set)
            cached = self.__dict__["_value_hash"] = hash((self.name, self.nodes, edges))
        return cached

    def __getstate__(self) -> dict:
        """Pickled without the cached hash (string hashes differ from one Python process to another) and
        without the sorted edge copy it was computed from (recomputed on demand)."""
        state = dict(self.__dict__)
        state.pop("_value_hash", None)
        state.pop("_edge_set", None)
        return state


def _csr(n: int, keys: np.ndarray, vals: np.ndarray, weights: np.ndarray):
    order = np.lexsort((vals, keys))
    ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(keys, minlength=n), out=ptr[1:])
    out_v, out_w = vals[order].astype(np.int64), weights[order].astype(np.float64)
    for a in (ptr, out_v, out_w):
        a.setflags(write=False)
    return ptr, out_v, out_w
