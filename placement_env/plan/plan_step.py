"""The step of a plan, simulated on its chunks: :func:`simulate_layout` (and :func:`simulate_plan` for a
:class:`~placement_env.plan.pipeline_plan.PipelinePlan`).

The semantics are ``docs/spec/simulator.md`` section 3b: S ranks replicated D times, K = S x v chunks, m
micro-batches of ``batch / (D m)`` per replica, a schedule (:mod:`placement_env.plan.schedules`), recomputation
per rank, the gradients of each chunk all-reduced over its rank's replicas (ring) once every replica has ended
its backward, tied parameters summed across ranks, then the update. Each replica's compute is an event
simulation of its tasks and transfers; replicas whose devices and links are alike are simulated once.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from placement_env.cluster import Cluster
from placement_env.graph.io import graph_digest
from placement_env.graph.model import ComputationGraph

from .layers import ChunkCosts, layer_table
from .pipeline_plan import PipelinePlan
from .plan_kernel import simulate_replica_kernel
from .plan_reference import simulate_replica_reference
from .schedules import SPLIT_BACKWARD, checked_plan_schedule, sequence_arrays

BUCKET_BYTES = 25 * 2**20
"""Gradients are all-reduced in buckets of this many bytes (``DistributedDataParallel``'s ``bucket_cap_mb``)."""


@dataclass(frozen=True)
class PlanLayout:
    """Where and how a plan runs its chunks (what :func:`simulate_layout` needs beyond the chunks' costs).

    Attributes:
        devices: ``devices[s][r]``, the cluster device of rank ``s`` in replica ``r`` (S rows of D).
        microbatches: m, per replica and step.
        schedule: one of :data:`~placement_env.plan.schedules.PLAN_SCHEDULES`.
        virtual_stages: v, chunks per rank (chunk ``c`` on rank ``c mod S``).
        recompute: per rank, whether it keeps only its chunks' inputs and reruns the forward in the backward
            (empty: none does).
        tied: ``(bytes, ranks)`` of each parameter summed across ranks after the reductions.
        param_factor: static bytes per parameter byte.
    """

    devices: tuple[tuple[int, ...], ...]
    microbatches: int
    schedule: str = "1f1b"
    virtual_stages: int = 1
    recompute: tuple[bool, ...] = ()
    tied: tuple[tuple[float, tuple[int, ...]], ...] = ()
    param_factor: float = 4.0

    @property
    def ranks(self) -> int:
        return len(self.devices)

    @property
    def replicas(self) -> int:
        return len(self.devices[0]) if self.devices else 0

    def recomputes(self, rank: int) -> bool:
        return bool(self.recompute) and self.recompute[rank]


@dataclass(frozen=True)
class PlanStep:
    """A plan's simulated step.

    Attributes:
        seconds: the step's end (s).
        peak_memory: bytes per cluster device (0 on a device the plan leaves unused).
        busy: seconds of tasks and updates per cluster device.
        compute_seconds: when the slowest replica ends its last task (before reductions and updates).
        reductions: ``(rank, chunk, start s, end s)`` of every gradient all-reduce (D > 1).
        schedule: ``(task, device, start s, end s)`` of every task of every replica, tasks named ``F3@5``
            (chunk 3, micro-batch 5), ``B``, ``W``, ``update``; filled only when asked (``trace=True``).
    """

    seconds: float
    peak_memory: np.ndarray
    busy: np.ndarray
    compute_seconds: float
    reductions: list[tuple[int, int, float, float]] = field(default_factory=list)
    schedule: list[tuple[str, int, float, float]] = field(default_factory=list)


@dataclass
class _Replica:
    """One replica's simulated compute."""

    last_end: np.ndarray  # per rank: its last task's end
    chunk_ready: np.ndarray  # per chunk: the end of its last backward (weight) task
    chunk_started: np.ndarray  # per chunk: the start of that task
    activations: np.ndarray  # per rank: peak dynamic bytes (activations, the gradient accumulation)
    busy: np.ndarray  # per rank
    tasks: list[tuple[str, int, float, float]]  # (task, rank, start, end)


def ring_seconds(nbytes: float, devices: Sequence[int], cluster: Cluster) -> float:
    """A ring all-reduce of ``nbytes`` over ``devices`` (in ring order): ``2 (n - 1)`` steps, each as long as the
    slowest hop's ``latency + nbytes / (n bandwidth)``; 0 for fewer than two devices."""
    n = len(devices)
    if n < 2:
        return 0.0
    hops = [(devices[i], devices[(i + 1) % n]) for i in range(n)]
    return 2 * (n - 1) * max(float(cluster.latency[a, b]) + nbytes / n / float(cluster.bandwidth[a, b])
                             for a, b in hops)


def simulate_layout(costs: ChunkCosts, layout: PlanLayout, cluster: Cluster, trace: bool = False,
                    reference: bool = False) -> PlanStep:
    """Simulate the step of chunks ``costs`` run as ``layout`` on ``cluster`` (``docs/spec/simulator.md``
    section 3b). ``trace`` fills the step's ``schedule``; ``reference`` runs the plain Python event loop
    (:mod:`~placement_env.plan.plan_reference`) instead of the compiled one: identical results, slower.

    Raises:
        ValueError: a layout whose devices the cluster lacks or that uses a device twice, whose ranks, virtual
            stages and chunks disagree, or whose schedule it cannot run; D x m not dividing the graph's batch.
    """
    s_, d_, v, m = layout.ranks, layout.replicas, layout.virtual_stages, layout.microbatches
    check_layout(costs, layout, cluster)
    orders = sequence_arrays(layout.schedule, s_, v, m)
    q = 1.0 / (d_ * m)
    replicas: dict[tuple, _Replica] = {}
    of_replica = []
    for r in range(d_):
        devices = [layout.devices[s][r] for s in range(s_)]
        key = _replica_key(devices, costs.num_chunks, cluster)
        if key not in replicas:
            replicas[key] = _simulate_replica(costs, layout, cluster, devices, orders, q, reference, trace)
        of_replica.append(replicas[key])
    peak = np.zeros(cluster.num_devices)
    busy = np.zeros(cluster.num_devices)
    parameters = np.zeros(s_)
    for c in range(costs.num_chunks):
        parameters[c % s_] += costs.parameter_bytes[c]
    # reductions: in buckets, each once every replica's last backward of its chunk has produced it, one bucket at
    # a time per rank, chunks in the order they become ready
    ready = np.max([rep.chunk_ready for rep in of_replica], axis=0)
    reduced = np.max([rep.last_end for rep in of_replica], axis=0) if d_ == 1 else np.zeros(s_)
    reductions = []
    if d_ > 1:
        for s in range(s_):
            free = 0.0
            for c in sorted(range(s, costs.num_chunks, s_), key=lambda c: (ready[c], c)):
                nbytes = float(costs.parameter_bytes[c])
                buckets = max(1, math.ceil(nbytes / BUCKET_BYTES))
                produced = np.minimum(1.0, (np.arange(buckets) + 1) * BUCKET_BYTES / nbytes) if nbytes > 0 else \
                    np.ones(1)
                began = np.array([rep.chunk_started[c] for rep in of_replica])
                took = np.array([rep.chunk_ready[c] - rep.chunk_started[c] for rep in of_replica])
                bucket_ready = (began[:, None] + took[:, None] * produced[None, :]).max(axis=0)
                full = ring_seconds(float(BUCKET_BYTES), layout.devices[s], cluster)
                last = ring_seconds(nbytes - (buckets - 1) * BUCKET_BYTES, layout.devices[s], cluster)
                first = max(float(bucket_ready[0]), free)
                for j in range(buckets):
                    free = max(float(bucket_ready[j]), free) + (full if j < buckets - 1 else last)
                reductions.append((s, c, first, free))
            reduced[s] = free
    tied_end = np.zeros(s_)
    for nbytes, ranks in layout.tied:
        start = max(float(reduced[s]) for s in ranks)
        end = start + max(ring_seconds(nbytes, [layout.devices[s][r] for s in ranks], cluster) for r in range(d_))
        for s in ranks:
            tied_end[s] = max(tied_end[s], end)
    update = np.zeros(s_)
    for c in range(costs.num_chunks):
        update[c % s_] += costs.update[c]
    seconds = 0.0
    schedule: list[tuple[str, int, float, float]] = []
    for r, rep in enumerate(of_replica):
        for s in range(s_):
            device = layout.devices[s][r]
            start = max(float(rep.last_end[s]), float(reduced[s]) if d_ > 1 else 0.0, float(tied_end[s]))
            end = start + update[s] / cluster.speed[device]
            seconds = max(seconds, end)
            static = parameters[s] * layout.param_factor
            peak[device] = static + rep.activations[s]
            busy[device] = rep.busy[s] + update[s] / cluster.speed[device]
            if trace:
                schedule += [(name, device, a, b) for name, rank, a, b in rep.tasks if rank == s]
                if update[s] > 0:
                    schedule.append(("update", device, start, end))
    compute = float(max(rep.last_end.max() for rep in of_replica))
    return PlanStep(max(seconds, compute), peak, busy, compute, reductions, schedule)


def plan_layout(plan: PipelinePlan) -> PlanLayout:
    """The :class:`PlanLayout` of ``plan``: its devices, step, recomputation, and its tied parameters summed across
    ranks (a group whose stages all lie on one rank needs no sum)."""
    ranks = plan.num_stages
    tied = []
    for group in plan.tied:
        on = tuple(sorted({stage % ranks for stage in group.stages}))
        if len(on) > 1:
            tied.append((float(group.bytes), on))
    return PlanLayout(tuple(tuple(row) for row in plan.devices), plan.microbatches, plan.schedule,
                      plan.virtual_stages, tuple(plan.stages[s].recompute for s in range(ranks)), tuple(tied),
                      plan.param_factor)


def plan_chunks(graph: ComputationGraph, plan: PipelinePlan) -> ChunkCosts:
    """The costs of ``plan``'s chunks (its stages' layers) of ``graph``, for the plan's batch (scaled when it is
    not the graph's); ``ValueError`` when the plan was made for another graph (its digest differs)."""
    if plan.graph_digest != graph_digest(graph):
        raise ValueError(f"the plan was made for graph {plan.graph!r} (digest {plan.graph_digest[:12]}), not for "
                         f"graph {graph.name!r} (digest {graph_digest(graph)[:12]})")
    return layer_table(graph, plan.layers, plan.batch).chunks(plan.parts)


def simulate_plan(graph: ComputationGraph, plan: PipelinePlan, cluster: Cluster, trace: bool = False) -> PlanStep:
    """The simulated step of ``plan`` of ``graph`` on ``cluster`` (``docs/spec/simulator.md`` section 3b).

    Raises:
        ValueError: a plan for another graph, or one :func:`simulate_layout` refuses (devices the cluster lacks,
            a schedule the plan cannot use, a batch that D x m does not divide).
    """
    return simulate_layout(plan_chunks(graph, plan), plan_layout(plan), cluster, trace)


def check_layout(costs: ChunkCosts, layout: PlanLayout, cluster: Cluster) -> None:
    """The checks of :func:`simulate_layout` (``ValueError`` naming the item)."""
    s_, d_, v, m = layout.ranks, layout.replicas, layout.virtual_stages, layout.microbatches
    if s_ < 1 or d_ < 1 or any(len(row) != d_ for row in layout.devices):
        raise ValueError(f"a plan's devices are S rows of D replicas each, got rows of "
                         f"{[len(r) for r in layout.devices]}")
    if isinstance(m, bool) or not isinstance(m, int) or m < 1:
        raise ValueError(f"microbatches must be an integer >= 1, got {m!r}")
    flat = [d for row in layout.devices for d in row]
    bad = [d for d in flat if not (isinstance(d, (int, np.integer)) and 0 <= d < cluster.num_devices)]
    if bad:
        raise ValueError(f"the plan names device {bad[0]!r}; cluster {cluster.name!r} has {cluster.num_devices} "
                         f"devices (0 to {cluster.num_devices - 1})")
    if len(set(flat)) != len(flat):
        twice = next(d for d in flat if flat.count(d) > 1)
        raise ValueError(f"the plan uses device {twice} twice: each device runs one rank of one replica")
    if costs.num_chunks != s_ * v:
        raise ValueError(f"the plan has {costs.num_chunks} chunks for {s_} ranks of {v} virtual stages ({s_ * v})")
    checked_plan_schedule(layout.schedule, s_, v, m)
    if layout.recompute and len(layout.recompute) != s_:
        raise ValueError(f"recompute has {len(layout.recompute)} entries for {s_} ranks")
    if costs.batch is not None and costs.batch % (d_ * m):
        raise ValueError(f"{d_} replicas x {m} micro-batches = {d_ * m} does not divide the graph's batch of "
                         f"{costs.batch}: every micro-batch must be the same size")


def _replica_key(devices: list[int], chunks: int, cluster: Cluster) -> tuple:
    """What a replica's compute depends on beyond the chunks: its ranks' speeds and the links between the
    devices of consecutive chunks."""
    s_ = len(devices)
    links = []
    for c in range(chunks - 1):
        a, b = devices[c % s_], devices[(c + 1) % s_]
        links.append((a == b, float(cluster.latency[a, b]), float(cluster.bandwidth[a, b]),
                      float(cluster.latency[b, a]), float(cluster.bandwidth[b, a])))
    return tuple(float(cluster.speed[d]) for d in devices), tuple(links)


@dataclass(frozen=True)
class ReplicaInputs:
    """What one replica's event loop reads (prepared by :func:`replica_inputs`; both loops take these).

    Attributes:
        kind, chunk, micro: (S, n) each rank's sequence (kind 0 F, 1 B, 2 W).
        devices: (S,) each rank's cluster device.
        f_time, b_time, w_time: (K,) seconds of each chunk's tasks on its rank.
        message, saved, kept: (K,) bytes sent after a chunk, activations held per micro-batch, a recomputing
            chunk's inputs; ``recompute``: (K,) bool.
        held: (S,) each rank's parameter bytes (the gradient accumulation's copy).
        latency, bandwidth: (S, S) between the ranks' devices.
        split: weight tasks of their own.
    """

    kind: np.ndarray
    chunk: np.ndarray
    micro: np.ndarray
    devices: np.ndarray
    f_time: np.ndarray
    b_time: np.ndarray
    w_time: np.ndarray
    message: np.ndarray
    saved: np.ndarray
    kept: np.ndarray
    recompute: np.ndarray
    held: np.ndarray
    latency: np.ndarray
    bandwidth: np.ndarray
    split: bool

    def arrays(self) -> tuple:
        return (self.kind, self.chunk, self.micro, self.devices, self.f_time, self.b_time, self.w_time, self.message,
                self.saved, self.kept, self.recompute, self.held, self.latency, self.bandwidth, self.split)


def replica_inputs(costs: ChunkCosts, layout: PlanLayout, cluster: Cluster, devices: list[int],
                   sequences: tuple[np.ndarray, np.ndarray, np.ndarray], q: float) -> ReplicaInputs:
    """The :class:`ReplicaInputs` of a replica on ``devices`` (section 3b's Tasks)."""
    s_, k_ = len(devices), costs.num_chunks
    split = layout.schedule in SPLIT_BACKWARD
    dev = np.array(devices, dtype=np.int64)
    speed = np.array([cluster.speed[devices[c % s_]] for c in range(k_)])

    def part(total: np.ndarray, fixed: np.ndarray) -> np.ndarray:
        return fixed + q * (total - fixed)

    f_time = part(costs.forward, costs.forward_fixed) / speed
    b_time = part(costs.backward_input, costs.backward_input_fixed) / speed
    w_time = part(costs.backward_weight, costs.backward_weight_fixed) / speed
    if not split:
        b_time = b_time + w_time
    recompute = np.array([layout.recomputes(c % s_) for c in range(k_)], dtype=bool)
    b_time = b_time + np.where(recompute, f_time, 0.0)
    kind, chunk, micro = sequences
    held = np.zeros(s_)
    for c in range(k_):
        held[c % s_] += costs.parameter_bytes[c]
    return ReplicaInputs(kind, chunk, micro, dev, f_time, b_time, w_time, np.ceil(q * costs.boundary_bytes),
                         np.ceil(q * costs.saved_bytes), np.ceil(q * costs.input_bytes), recompute, held,
                         np.ascontiguousarray(cluster.latency[np.ix_(dev, dev)]),
                         np.ascontiguousarray(cluster.bandwidth[np.ix_(dev, dev)]), split)


def _simulate_replica(costs: ChunkCosts, layout: PlanLayout, cluster: Cluster, devices: list[int],
                      sequences: tuple[np.ndarray, np.ndarray, np.ndarray], q: float, reference: bool,
                      trace: bool) -> _Replica:
    """One replica's tasks and transfers, event by event (section 3b's Tasks, Devices and Events): the compiled
    loop, or with ``reference`` the plain one."""
    inputs = replica_inputs(costs, layout, cluster, devices, sequences, q)
    loop = simulate_replica_reference if reference else simulate_replica_kernel
    start, end, last_end, busy, chunk_ready, activations, stuck = loop(*inputs.arrays())
    # the start of each chunk's last backward (weight) task: its gradients are produced from then to its end
    last = (inputs.kind == (2 if inputs.split else 1))
    chunk_started = np.zeros(len(chunk_ready))
    for rank, i in zip(*np.nonzero(last)):
        c = int(inputs.chunk[rank, i])
        if end[rank, i] >= chunk_ready[c]:
            chunk_started[c] = start[rank, i]
    if stuck >= 0:  # cannot happen for the schedules of section 3b; a guard against a wrong sequence
        raise RuntimeError(f"the schedule {layout.schedule} deadlocked on rank {stuck}")
    names = "FBW"
    tasks = [(f"{names[inputs.kind[s, i]]}{inputs.chunk[s, i]}@{inputs.micro[s, i]}", s, float(start[s, i]),
              float(end[s, i])) for s in range(len(devices)) for i in range(inputs.kind.shape[1])] if trace else []
    return _Replica(last_end, chunk_ready, chunk_started, activations, busy, tasks)


__all__ = ["BUCKET_BYTES", "PlanLayout", "PlanStep", "check_layout", "plan_chunks", "plan_layout", "ring_seconds",
           "simulate_layout", "simulate_plan"]
