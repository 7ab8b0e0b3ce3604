"""The pipelined step's unrolled graph and schedule rule (``docs/spec/simulator.md`` section 3a).

* :func:`unrolled` builds (once per graph and micro-batch count) the graph of m micro-batches: every batch op
  ``v`` as the copies ``v@0 .. v@{m-1}`` with its fixed cost plus the rest of its cost divided by m, and bytes
  divided by m (rounded up to a whole byte), the update ops once, the
  parameters held once (copy 0 carries ``param_bytes``).
* :func:`schedule_keys` is the order in which a device picks its ready ops under a schedule; :func:`stage_caps`
  the 1F1B limit of micro-batches in flight per device.

Both simulators (:mod:`placement_env.sim.reference` and the compiled one) run the unrolled graph with these.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import NamedTuple

import numpy as np

from placement_env.graph.model import ComputationGraph, Edge
from placement_env.graph.stage_order import stage_order
from placement_env.parallelism import Parallelism, schedules_for

SCHEDULES = schedules_for("simulator")
"""Pipeline schedules (section 3a): ``1f1b`` (one forward, one backward; the default) and ``gpipe``
(:data:`placement_env.parallelism.SCHEDULES` says who supports which)."""
DEFAULT_SCHEDULE = "1f1b"

FORWARD, BACKWARD, UPDATE = 0, 1, 2  # op kinds


class Step(NamedTuple):
    """The step a placement is judged by: ``microbatches`` (1: the plain step) under ``schedule``; spread it
    into the simulator's arguments, ``Simulator(graph, cluster, param_factor, *step)``."""

    microbatches: int = 1
    schedule: str = DEFAULT_SCHEDULE

    @classmethod
    def of(cls, step: Step | Parallelism) -> Step:
        """``step`` itself, or the micro-batches and schedule of a :class:`~placement_env.parallelism.Parallelism`
        (what the graph simulator judges a placement by); ``TypeError`` for anything else."""
        if isinstance(step, Step):
            return step
        if isinstance(step, Parallelism):
            return cls(step.microbatches, step.schedule)
        raise TypeError(f"step must be a Step (Step(8, \"1f1b\") for 8 micro-batches) or a Parallelism, got "
                        f"{type(step).__name__} {step!r}")

    def checked(self, graph: ComputationGraph | None = None) -> Step:
        """This step, or a ``ValueError`` naming a bad micro-batch count (for ``graph``) or schedule."""
        return Step(checked_microbatches(self.microbatches, graph), checked_schedule(self.schedule))

    @property
    def pipelined(self) -> bool:
        return self.microbatches > 1

    def describe(self) -> str:
        """``"1 batch"`` or ``"8 micro-batches, 1f1b"``, for reports."""
        return f"{self.microbatches} micro-batches, {self.schedule}" if self.pipelined else "1 batch"


StepLike = Step | Parallelism
"""What the placers, :func:`~placement_env.sim.simulator.simulate` and a plan from a placement take as ``step``."""


def one_step(step: StepLike | None, microbatches: int | None, schedule: str | None) -> Step:
    """The step said once: ``step`` (:meth:`Step.of`), or ``microbatches`` (default 1) and ``schedule`` (default
    :data:`DEFAULT_SCHEDULE`); ``ValueError`` when ``step`` is given beside either of them."""
    if step is None:
        return Step(1 if microbatches is None else microbatches, DEFAULT_SCHEDULE if schedule is None else schedule)
    if microbatches is not None or schedule is not None:
        raise ValueError("give the step once: step=Step(8, \"1f1b\") or microbatches= and schedule=, not both")
    return Step.of(step)


PLAIN_STEP = Step()
"""The plain step of ``docs/spec/simulator.md`` section 3."""


MAX_MICROBATCHES = 4096
"""The most micro-batches a step may have (a graph that records no batch has no other bound)."""
MAX_UNROLLED_OPS = 500_000
"""The most ops an unrolled step may have (micro-batches x ops): about 1.2 KB of memory each while it is built,
so at most about 0.6 GB and 20 s (``benchmarks/simulator.py``); the cache of one graph's unrolled steps holds at
most this many ops in all."""


def checked_microbatches(value: object, graph: ComputationGraph | None = None) -> int:
    """``value`` as the number of micro-batches, or a ``ValueError`` naming it: not an integer (a bool is not
    one), below 1, above :data:`MAX_MICROBATCHES`; for ``graph``: above ``graph.batch`` or not dividing it (where
    the graph records the batch it was traced with: every micro-batch is the same size), or an unrolled step of
    more than :data:`MAX_UNROLLED_OPS` ops."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"microbatches must be an integer >= 1, got {value!r}")
    m = int(value)
    if m < 1:
        raise ValueError(f"microbatches must be an integer >= 1, got {m}")
    if m > MAX_MICROBATCHES:
        raise ValueError(f"microbatches {m} is more than the {MAX_MICROBATCHES} a step may have")
    if graph is not None and graph.batch is not None and m > graph.batch:
        raise ValueError(f"microbatches {m} is larger than the batch of {graph.batch} that graph "
                         f"{graph.name!r} was traced with")
    if graph is not None and graph.batch is not None and graph.batch % m:
        raise ValueError(f"microbatches {m} does not divide the batch of {graph.batch} that graph {graph.name!r} "
                         f"was traced with (the micro-batches would be uneven; divisors: "
                         f"{', '.join(str(k) for k in range(1, graph.batch + 1) if graph.batch % k == 0)})")
    if graph is not None and m > 1 and m * graph.num_nodes > MAX_UNROLLED_OPS:
        raise ValueError(f"microbatches {m}: the step of graph {graph.name!r} ({graph.num_nodes} ops) would unroll "
                         f"to {m * graph.num_nodes:,} ops, more than the {MAX_UNROLLED_OPS:,} the simulator takes "
                         f"(at most {max(1, MAX_UNROLLED_OPS // graph.num_nodes)} micro-batches here)")
    return m


def checked_schedule(value: object) -> str:
    """``value`` if it is one of :data:`SCHEDULES`, else a ``ValueError`` naming it."""
    if not isinstance(value, str) or value not in SCHEDULES:
        raise ValueError(f"unknown schedule {value!r}; known: {', '.join(SCHEDULES)}")
    return value


@dataclass(frozen=True)
class Unrolled:
    """The unrolled step of ``microbatches`` micro-batches of a graph.

    Attributes:
        graph: the unrolled graph (node order: micro-batch 0's copies, ..., micro-batch m-1's, the update ops).
        origin: for each unrolled node, the index of the graph's node it copies.
        micro: each unrolled node's micro-batch (``microbatches`` for an update op).
        kind: each unrolled node's :data:`FORWARD` / :data:`BACKWARD` / :data:`UPDATE`.
        origin_topo: the graph's topological index of the node each unrolled node copies (stage order).
        microbatches: m.
    """

    graph: ComputationGraph
    origin: np.ndarray
    micro: np.ndarray
    kind: np.ndarray
    origin_topo: np.ndarray
    microbatches: int


def op_kinds(graph: ComputationGraph) -> np.ndarray:
    """Each node's kind: update and backward by ``phase``, forward otherwise (phase ``forward`` or none)."""
    return np.array([UPDATE if n.phase == "update" else BACKWARD if n.phase == "backward" else FORWARD
                     for n in graph.nodes], np.int64)


def unrolled(graph: ComputationGraph, microbatches: int) -> Unrolled:
    """The unrolled step of ``graph`` for ``microbatches`` >= 2 (section 3a), built once per graph object and kept
    while the graph's unrolled steps together hold at most :data:`MAX_UNROLLED_OPS` ops (the oldest go first).

    Raises:
        ValueError: a bad micro-batch count for ``graph`` (:func:`checked_microbatches`).
    """
    cache: dict[int, Unrolled] = graph.derived.setdefault("unrolled", {})
    if microbatches not in cache:
        checked_microbatches(microbatches, graph)
        while cache and sum(u.graph.num_nodes for u in cache.values()) + microbatches * graph.num_nodes \
                > MAX_UNROLLED_OPS:
            del cache[next(iter(cache))]
        cache[microbatches] = _unroll(graph, microbatches)
    return cache[microbatches]


def stepped_graph(graph: ComputationGraph, microbatches: int) -> ComputationGraph:
    """The graph a step of ``microbatches`` runs: ``graph`` itself for 1, else its unrolled graph."""
    return graph if microbatches == 1 else unrolled(graph, microbatches).graph


def _unroll(graph: ComputationGraph, m: int) -> Unrolled:
    kinds = op_kinds(graph)
    batch = [i for i in range(graph.num_nodes) if kinds[i] != UPDATE]
    once = [i for i in range(graph.num_nodes) if kinds[i] == UPDATE]
    nodes, origin, micro = [], [], []
    for k in range(m):
        for i in batch:
            n = graph.nodes[i]
            fixed = n.fixed_cost or 0.0  # paid by every micro-batch; the rest scales with its size
            nodes.append(replace(n, id=f"{n.id}@{k}", cost=fixed + (n.cost - fixed) / m, fixed_cost=None,
                                 output_bytes=_share(n.output_bytes, m), param_bytes=n.param_bytes if k == 0 else 0.0))
            origin.append(i)
            micro.append(k)
    for i in once:
        nodes.append(graph.nodes[i])
        origin.append(i)
        micro.append(m)
    ids = graph.ids
    edges = []
    for s, d, b in zip(graph.edge_src.tolist(), graph.edge_dst.tolist(), graph.edge_bytes.tolist()):
        src_once, dst_once = kinds[s] == UPDATE, kinds[d] == UPDATE
        if src_once and dst_once:
            edges.append(Edge(ids[s], ids[d], b))
        elif src_once:
            edges.extend(Edge(ids[s], f"{ids[d]}@{k}", b) for k in range(m))
        elif dst_once:
            edges.extend(Edge(f"{ids[s]}@{k}", ids[d], _share(b, m)) for k in range(m))
        else:
            edges.extend(Edge(f"{ids[s]}@{k}", f"{ids[d]}@{k}", _share(b, m)) for k in range(m))
    g = ComputationGraph(nodes, edges, name=f"{graph.name}-x{m}")
    origin_a = np.array(origin, np.int64)
    return Unrolled(g, origin_a, np.array(micro, np.int64), kinds[origin_a], graph.topo_index[origin_a], m)


def _share(nbytes: float, m: int) -> float:
    """One micro-batch's bytes of a tensor of ``nbytes``: ``nbytes / m`` rounded up to a whole byte."""
    return float(math.ceil(nbytes / m))


def schedule_keys(step: Unrolled, schedule: str) -> np.ndarray:
    """Each unrolled node's rank in a device's choice (smallest first): (class, micro-batch, topological index)
    as one integer; class 0 / 1 are forward / backward under ``gpipe`` and backward / forward under ``1f1b``,
    2 the update ops."""
    klass = step.kind.copy()
    if schedule == "1f1b":
        klass = np.where(step.kind == FORWARD, 1, np.where(step.kind == BACKWARD, 0, 2))
    n = step.graph.num_nodes
    return (klass * (step.microbatches + 1) + step.micro) * n + step.graph.topo_index


def stage_caps(graph: ComputationGraph, placement: np.ndarray, num_devices: int) -> np.ndarray:
    """1F1B's limit of micro-batches in flight per device, ``P - s[d]`` (section 3a): P devices hold a forward
    op of ``graph``; stage ``s[d]`` orders them by the smallest topological index of a forward op on them
    (:func:`placement_env.graph.stage_order.stage_order`). Devices without forward ops get the limit of the last
    stage (they never start a forward op)."""
    stages, _ = stage_order(graph, placement)
    caps = np.ones(num_devices, np.int64)
    caps[stages] = len(stages) - np.arange(len(stages))
    return caps


__all__ = ["DEFAULT_SCHEDULE", "MAX_MICROBATCHES", "MAX_UNROLLED_OPS", "PLAIN_STEP", "SCHEDULES", "Step", "Unrolled",
           "StepLike", "checked_microbatches", "one_step",
           "checked_schedule", "schedule_keys", "stage_caps", "stepped_graph", "unrolled"]
