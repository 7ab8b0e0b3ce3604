"""Simulated step time and peak memory of a placement (``docs/spec/simulator.md`` sections 3-4).

* :func:`simulate` runs one placement and returns a :class:`SimulationResult` with the makespan (seconds),
  per-device peak memory (bytes) and busy time (seconds), the OOM flag and the full :class:`Schedule`.
* :func:`simulate_batch` evaluates many placements of one graph in one call (no schedule), for search loops.
* :func:`lower_bound` is the bound no placement can beat.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from placement_env.checks import checked_finite, checked_instance
from placement_env.cluster import Cluster
from placement_env.graph.model import ComputationGraph
from placement_env.sim import pipeline
from placement_env.sim.kernel import Workspace, sim_batch, sim_core
from placement_env.sim.pipeline import DEFAULT_SCHEDULE, checked_microbatches, checked_schedule, unrolled
from placement_env.sim.pipeline_kernel import PipelineWorkspace, pipeline_batch, pipeline_core, schedule_arrays

DEFAULT_PARAM_FACTOR = 4.0
"""Static memory per parameter byte when training with Adam: weights, gradients, two moments."""


def lb_ratio(makespan: float, lower_bound: float) -> float:
    """``makespan / lower_bound``; when the bound is 0 (every op costs 0 s), 1.0 for a makespan of 0 (optimal)
    and ``inf`` for a positive one (transfer time that a zero bound cannot cover)."""
    if lower_bound > 0:
        return makespan / lower_bound
    return 1.0 if makespan == 0 else math.inf


def checked_param_factor(value: float) -> float:
    """``value`` as a float, or a ``ValueError`` unless it is a finite number >= 0 (bytes per parameter byte)."""
    return checked_finite("param_factor", value, 0.0)


class OpInterval(NamedTuple):
    node: str
    device: int
    start: float
    end: float


class TransferInterval(NamedTuple):
    node: str  # producer of the tensor
    src_device: int
    dst_device: int
    bytes: float
    start: float
    end: float


@dataclass(frozen=True)
class Schedule:
    """Start and end (seconds) of every op and transfer.

    Op arrays are in node order. Transfers are in booking order; ``transfer_node``
    holds the producer's node index.
    """

    node_ids: tuple[str, ...]
    op_device: np.ndarray
    op_start: np.ndarray
    op_end: np.ndarray
    transfer_node: np.ndarray
    transfer_src: np.ndarray
    transfer_dst: np.ndarray
    transfer_bytes: np.ndarray
    transfer_start: np.ndarray
    transfer_end: np.ndarray

    @property
    def num_transfers(self) -> int:
        return int(self.transfer_node.shape[0])

    def ops(self) -> list[OpInterval]:
        """Every op as ``(node, device, start, end)``, in node order."""
        return [OpInterval(n, int(d), float(s), float(e))
                for n, d, s, e in zip(self.node_ids, self.op_device, self.op_start, self.op_end)]

    def transfers(self) -> list[TransferInterval]:
        """Every transfer as ``(node, src_device, dst_device, bytes, start, end)``, in booking order."""
        return [TransferInterval(self.node_ids[int(u)], int(a), int(b), float(x), float(s), float(e))
                for u, a, b, x, s, e in zip(self.transfer_node, self.transfer_src, self.transfer_dst,
                                            self.transfer_bytes, self.transfer_start, self.transfer_end)]

    def __iter__(self) -> Iterator[OpInterval]:
        return iter(self.ops())


@dataclass(frozen=True)
class SimulationResult:
    """Outcome of one simulated step.

    Attributes:
        makespan: seconds from the first op's start to the last op's end.
        peak_memory: bytes per device (static + peak dynamic).
        busy: seconds each device spends running ops.
        oom: whether any device's peak exceeds its memory.
        schedule: every op and transfer with device, start and end.
        lower_bound: :func:`lower_bound` of the graph on the cluster, seconds.
        param_factor: the static bytes held per parameter byte the step was simulated with.
        microbatches: the micro-batches of the step (1: the plain step; above, ``schedule`` is of the
            unrolled graph, ``placement_env.sim.pipeline.unrolled(graph, microbatches).graph``).
        pipeline_schedule: the pipeline schedule of a step of more than one micro-batch.
    """

    makespan: float
    peak_memory: np.ndarray
    busy: np.ndarray
    oom: bool
    schedule: Schedule
    lower_bound: float
    param_factor: float = DEFAULT_PARAM_FACTOR
    microbatches: int = 1
    pipeline_schedule: str = DEFAULT_SCHEDULE

    @property
    def lb_ratio(self) -> float:
        """``makespan / lower_bound`` (1.0 is optimal); see :func:`lb_ratio`."""
        return lb_ratio(self.makespan, self.lower_bound)

    def to_dict(self) -> dict:
        return {
            "makespan": self.makespan,
            "lower_bound": self.lower_bound,
            "peak_memory": [int(x) for x in self.peak_memory],
            "busy": [float(x) for x in self.busy],
            "oom": bool(self.oom),
            **({"microbatches": self.microbatches, "schedule": self.pipeline_schedule} if self.microbatches > 1
               else {}),
        }


@dataclass(frozen=True)
class BatchResult:
    """Outcome of :func:`simulate_batch`: ``makespan`` (B,), ``peak_memory`` and ``busy`` (B, M), ``oom`` (B,)."""

    makespan: np.ndarray
    peak_memory: np.ndarray
    busy: np.ndarray
    oom: np.ndarray


class _Prepared(NamedTuple):
    """Graph arrays in topological positions, as the kernel wants them."""

    order: np.ndarray  # node index at each topological position
    cost: np.ndarray
    out_bytes: np.ndarray
    param_bytes: np.ndarray
    sptr: np.ndarray
    sdst: np.ndarray
    sbytes: np.ndarray
    indeg: np.ndarray
    iptr: np.ndarray  # in-edge slots of position i: iptr[i]:iptr[i + 1]
    in_slot: np.ndarray  # in-edge slot of each out-edge
    critical_path: float


def _prepare(graph: ComputationGraph) -> _Prepared:
    """Kernel arrays of ``graph``, computed once per graph object (graphs are immutable)."""
    prep = graph.derived.get("simulator")
    if prep is None:
        prep = graph.derived["simulator"] = _build_prepared(graph)
    return prep


def _build_prepared(graph: ComputationGraph) -> _Prepared:
    order = graph.topo_order
    pos = graph.topo_index
    n = graph.num_nodes
    src, dst = pos[graph.edge_src], pos[graph.edge_dst]
    perm = np.lexsort((dst, src))
    sptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(src, minlength=n), out=sptr[1:])
    indeg = np.bincount(dst, minlength=n).astype(np.int64)
    sdst = dst[perm].astype(np.int64)
    iptr = np.zeros(n + 1, np.int64)
    np.cumsum(indeg, out=iptr[1:])
    in_slot = np.empty(sdst.shape[0], np.int64)
    in_slot[np.argsort(sdst, kind="stable")] = np.arange(sdst.shape[0])
    return _Prepared(order, graph.cost[order].copy(), graph.output_bytes[order].copy(),
                     graph.param_bytes[order].copy(), sptr, sdst, graph.edge_bytes[perm].copy(), indeg,
                     iptr, in_slot, _critical_path(graph))


def _is_device_index(x) -> bool:
    """An int (not a bool) or an integral finite float: what a placement entry may be."""
    if isinstance(x, bool):
        return False
    return isinstance(x, int) or (isinstance(x, float) and math.isfinite(x) and x.is_integer())


def _placement_array(placement, what: str = "placement must be a sequence of device indices, one per node"
                     ) -> np.ndarray:
    """``np.asarray(placement)``, except that a list or tuple holding a bool stays an object array.

    numpy reads ``[0, True, 0]`` as the ints ``[0, 1, 0]``; kept as objects, the
    ``True`` reaches :func:`check_placement`'s entry check, which names it.
    """
    try:
        p = np.asarray(placement)
    except ValueError as error:  # ragged nesting
        raise ValueError(f"{what}: {error}") from None
    if p.dtype.kind in "iuf" and isinstance(placement, (list, tuple)) and _holds_bool(placement):
        p = np.asarray(placement, dtype=object)
    return p


def _holds_bool(entries) -> bool:
    """Whether a (nested) list or tuple has a Python or numpy bool anywhere in it."""
    return any(isinstance(x, (bool, np.bool_)) or (isinstance(x, (list, tuple)) and _holds_bool(x))
               for x in entries)


def check_placement(graph: ComputationGraph, placement, cluster: Cluster, check_colocation: bool = True) -> np.ndarray:
    """Validate a device-per-node placement and return it as an int64 array.

    Raises:
        TypeError: when ``graph`` or ``cluster`` is something else.
        ValueError: for a placement that is not one-dimensional, a wrong length,
            a non-integer entry, a device outside the cluster (naming the node),
            or a split colocation group.
    """
    checked_instance("graph", graph, ComputationGraph)
    checked_instance("cluster", cluster, Cluster)
    if isinstance(placement, Mapping):
        raise ValueError("placement must be a device index per node, in node order, got a mapping; "
                         "convert a {node id: device} mapping with placement_env.placement_from_json(mapping, graph)")
    p = _placement_array(placement)
    n = graph.num_nodes
    if p.ndim != 1:
        raise ValueError(f"placement must be a 1-D sequence of device indices, one per node, got shape {p.shape}")
    if p.shape[0] != n:
        raise ValueError(f"placement has {p.shape[0]} entries, graph {graph.name!r} has {n} nodes")
    if p.dtype.kind == "f" and np.all(np.isfinite(p)) and np.all(p == np.round(p)):
        pass  # integral floats (2.0) are device indices: range-checked as floats below
    elif p.dtype.kind not in "iu":  # bools, strings, None, fractions are not
        entries = p.tolist()
        bad = next((i for i, x in enumerate(entries) if not _is_device_index(x)), None)
        if bad is not None:
            raise ValueError(f"placement entry for node {graph.nodes[bad].id!r} is not a device index: "
                             f"{entries[bad]!r}")
        p = np.array([int(x) if -2**63 <= x < 2**63 else -1 for x in entries], np.int64)  # -1: out of range

    m = cluster.num_devices
    outside = np.nonzero((p < 0) | (p >= m))[0]
    if outside.size:
        i = int(outside[0])
        device = int(np.asarray(placement).tolist()[i])  # as given: p may hold -1 for an out-of-range int
        raise ValueError(f"node {graph.nodes[i].id!r} is placed on device {device}, "
                         f"but the cluster has devices 0..{m - 1}")
    p = p.astype(np.int64, copy=False)
    if check_colocation:
        unit_dev = graph.unit_placement(p)
        split = np.nonzero(unit_dev[graph.unit_of] != p)[0]
        if split.size:
            i = int(split[0])
            group = graph.nodes[i].colocation
            first = graph.nodes[int(graph.unit_members[graph.unit_of[i]][0])]
            raise ValueError(f"colocation group {group!r} is split: node {first.id!r} on device "
                             f"{int(unit_dev[graph.unit_of[i]])}, node {graph.nodes[i].id!r} on device {int(p[i])}")
    return p


def _checked_row(graph: ComputationGraph, row: np.ndarray, cluster: Cluster, i: int) -> np.ndarray:
    """:func:`check_placement` of row ``i`` of a batch; its errors say which row."""
    try:
        return check_placement(graph, row, cluster)
    except ValueError as error:
        raise ValueError(f"placements row {i}: {error}") from None


class Simulator:
    """One graph on one cluster, with buffers kept between calls (for step loops).

    ``simulate`` / ``simulate_batch`` build one of these per call; an
    environment or a search keeps one and calls :meth:`run` (no schedule) or
    :meth:`simulate` (with schedule) many times.
    """

    def __init__(self, graph: ComputationGraph, cluster: Cluster, param_factor: float = DEFAULT_PARAM_FACTOR,
                 microbatches: int = 1, schedule: str = DEFAULT_SCHEDULE):
        self.graph = checked_instance("graph", graph, ComputationGraph)
        self.cluster = checked_instance("cluster", cluster, Cluster)
        self.param_factor = checked_param_factor(param_factor)
        self.microbatches = checked_microbatches(microbatches, graph)
        self.schedule = checked_schedule(schedule)
        m = cluster.num_devices
        if self.microbatches == 1:
            self._step = None
            self._prep = _prepare(graph)
            self._ws: Workspace | PipelineWorkspace = Workspace(graph.num_nodes, graph.num_edges, m)
            self.lower_bound = lower_bound(graph, cluster)
        else:  # the unrolled step of section 3a
            self._step = unrolled(graph, self.microbatches)
            step = self._step.graph
            self._prep = _prepare(step)
            self._pipe = schedule_arrays(self._step, self.schedule, self._prep.order)
            self._ws = PipelineWorkspace(step.num_nodes, step.num_edges, m)
            self.lower_bound = lower_bound(step, cluster)

    def _kernel_args(self) -> tuple:
        prep = self._prep
        return (prep.cost, prep.out_bytes, prep.param_bytes, prep.sptr, prep.sdst, prep.sbytes, prep.indeg,
                prep.iptr, prep.in_slot)

    def _core(self, placement: np.ndarray) -> tuple[float, int]:
        """One kernel run of a validated int64 node placement (results in the workspace)."""
        c, ws = self.cluster, self._ws
        if self._step is None:
            return sim_core(*self._kernel_args(), placement[self._prep.order], c.speed, c.bandwidth, c.latency,
                            self.param_factor, *ws.buffers())
        gather, *rule = self._pipe
        return pipeline_core(*self._kernel_args(), placement[gather], *rule, self.microbatches,
                             c.speed, c.bandwidth, c.latency, self.param_factor, *ws.buffers())

    def run(self, placement: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
        """``(makespan, peak_memory, busy)`` of a *validated* int64 node placement (arrays are copies)."""
        makespan, _ = self._core(placement)
        return float(makespan), self._buffers().peak.copy(), self._buffers().busy.copy()

    def op_times(self, placement: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(start, end, previous)`` of a *validated* int64 node placement, per op of the step (the unrolled one
        when pipelined; node order): seconds, and the op its device ran just before it (-1: its first)."""
        self._core(placement)
        ws, order = self._buffers(), self._prep.order
        start, end = np.empty(order.size), np.empty(order.size)
        start[order], end[order] = ws.start, ws.end
        ran = order[ws.devops]  # each device's ops in the order they ran, device after device
        previous = np.full(order.size, -1, dtype=np.int64)
        previous[ran[1:]] = ran[:-1]
        previous[ran[ws.hoff[:-1][np.diff(ws.hoff) > 0]]] = -1  # each device's first op
        return start, end, previous

    def _buffers(self) -> Workspace:
        return self._ws.plain if isinstance(self._ws, PipelineWorkspace) else self._ws

    def simulate(self, placement) -> SimulationResult:
        """Validate ``placement`` and simulate it, with the full schedule (of the unrolled step, ops
        ``v@k``, when pipelined)."""
        c = self.cluster
        p = check_placement(self.graph, placement, c)
        makespan, nx = self._core(p)
        if nx < 0:  # pragma: no cover - the graph was validated acyclic
            raise RuntimeError("simulation deadlocked")
        ws = self._buffers()
        graph = self.graph if self._step is None else self._step.graph
        op_device = p if self._step is None else p[self._step.origin]
        order = self._prep.order
        start = np.empty(graph.num_nodes)
        end = np.empty(graph.num_nodes)
        start[order] = ws.start
        end[order] = ws.end
        schedule = Schedule(graph.ids, op_device.copy(), start, end, order[ws.xsrc[:nx]], ws.xa[:nx].copy(),
                            ws.xb[:nx].copy(), ws.xbytes[:nx].copy(), ws.xs[:nx].copy(), ws.xe[:nx].copy())
        peak = ws.peak.copy()
        return SimulationResult(float(makespan), peak, ws.busy.copy(), bool(np.any(peak > c.memory)), schedule,
                                self.lower_bound, self.param_factor, self.microbatches, self.schedule)

    def simulate_batch(self, placements, check: bool = True) -> BatchResult:
        """Evaluate B node placements (B x N) in one kernel call; see :func:`simulate_batch`."""
        graph, c, ws = self.graph, self.cluster, self._ws
        P = _placement_array(placements, f"placements must be a B x N array with N = {graph.num_nodes} nodes")
        if P.ndim != 2 or P.shape[1] != graph.num_nodes:
            raise ValueError(f"placements must be a B x N array with N = {graph.num_nodes} nodes "
                             f"(graph {graph.name!r}), got shape {P.shape}")
        if check:
            rows = [_checked_row(graph, row, c, i) for i, row in enumerate(P)]
            P = np.stack(rows) if rows else P.astype(np.int64)
        b, m = P.shape[0], c.num_devices
        out_mk, out_peak, out_busy = np.zeros(b), np.zeros((b, m)), np.zeros((b, m))
        P = np.ascontiguousarray(P, dtype=np.int64)
        if self._step is None:
            sim_batch(*self._kernel_args(), P, self._prep.order, c.speed, c.bandwidth, c.latency,
                      self.param_factor, *ws.buffers(), out_mk, out_peak, out_busy)
        else:
            pipeline_batch(*self._kernel_args(), P, *self._pipe, self.microbatches, c.speed, c.bandwidth,
                           c.latency, self.param_factor, *ws.buffers(), out_mk, out_peak, out_busy)
        return BatchResult(out_mk, out_peak, out_busy, np.any(out_peak > c.memory[None, :], axis=1))


def simulate(graph: ComputationGraph, placement: Sequence[int] | np.ndarray, cluster: Cluster,
             param_factor: float = DEFAULT_PARAM_FACTOR, microbatches: int = 1,
             schedule: str = DEFAULT_SCHEDULE, *, step: pipeline.StepLike | None = None) -> SimulationResult:
    """Simulate one training step of ``graph`` placed by ``placement`` on ``cluster``.

    Args:
        graph, placement, cluster: the computation graph, a device index per node (in node order), the devices.
        param_factor: static bytes held per parameter byte (4 = Adam training, 1 = inference).
        microbatches: m >= 1; above 1, the pipelined step of m micro-batches (spec section 3a).
        schedule: ``"1f1b"`` or ``"gpipe"``, the pipeline schedule (ignored for m = 1).
        step: the two as one object, instead of them (:data:`~placement_env.sim.pipeline.StepLike`).

    Returns:
        The makespan in seconds, per-device peak memory (bytes) and busy time (seconds), the OOM flag and the
        full schedule (of the unrolled step when pipelined); the lower bound is that of the unrolled step.

    Raises:
        ValueError: a bad placement (naming the node), ``param_factor``, ``microbatches`` (not an integer,
            below 1, above the graph's ``batch``) or an unknown ``schedule``; ``step`` given beside them.
    """
    if step is not None:  # said once: microbatches and schedule left at their defaults
        given = (microbatches, schedule) != (1, DEFAULT_SCHEDULE)
        microbatches, schedule = pipeline.one_step(step, microbatches if given else None, schedule if given else None)
    return Simulator(graph, cluster, param_factor, microbatches, schedule).simulate(placement)


def simulate_batch(graph: ComputationGraph, placements, cluster: Cluster,
                   param_factor: float = DEFAULT_PARAM_FACTOR, check: bool = True, microbatches: int = 1,
                   schedule: str = DEFAULT_SCHEDULE) -> BatchResult:
    """Evaluate B placements (a B x N array, device per node) of one graph in one call.

    Gives exactly the makespans, peaks and busy times of :func:`simulate` on each
    row (``microbatches`` and ``schedule`` as there), without building schedules. ``check=False`` skips
    validation (for callers that produce placements themselves, e.g. search loops).
    """
    return Simulator(graph, cluster, param_factor, microbatches, schedule).simulate_batch(placements, check=check)


def critical_path(graph: ComputationGraph) -> float:
    """Longest path through the graph by ``cost`` (seconds on the reference device)."""
    return _prepare(checked_instance("graph", graph, ComputationGraph)).critical_path


def _critical_path(graph: ComputationGraph) -> float:
    finish = np.zeros(graph.num_nodes)
    ptr, src, _ = graph.predecessors
    cost = graph.cost
    for v in graph.topo_order.tolist():
        best = 0.0
        for k in range(ptr[v], ptr[v + 1]):
            f = finish[src[k]]
            if f > best:
                best = f
        finish[v] = best + cost[v]
    return float(finish.max())


def lower_bound(graph: ComputationGraph, cluster: Cluster) -> float:
    """``max(critical path / max speed, total cost / total speed)`` in seconds (spec section 4)."""
    checked_instance("cluster", cluster, Cluster)
    return max(critical_path(graph) / float(cluster.speed.max()), graph.total_cost / float(cluster.speed.sum()))
