"""The simulator semantics written literally, with one ``heapq`` event queue.

This is the readable statement of ``docs/spec/simulator.md`` sections 3 and 3a (the pipelined step: the
unrolled graph of :mod:`placement_env.sim.pipeline`, each device choosing its next op by the schedule) and
the oracle the compiled simulators are tested against (results must be
identical, not close). It is much slower (``docs/simulator.md``; ``benchmarks/simulator.py`` prints both
speeds).

Events are ``(time, phase, key, ...)``. At equal times the phases run in the
spec's order: op completions (key: topological index), transfer completions
(key: booking number), transfer bookings (key: producer's topological index,
destination device), op starts (key: device index).
"""

from __future__ import annotations

import heapq

import numpy as np

from placement_env.cluster import Cluster
from placement_env.graph.model import ComputationGraph
from placement_env.sim.memory_timeline import accumulation_lifetimes, buffer_lifetimes, static_memory
from placement_env.sim.pipeline import FORWARD, Unrolled, schedule_keys, stage_caps, unrolled

OP_DONE, TRANSFER_DONE, BOOK, START = 0, 1, 2, 3


class _EarliestReady:
    """Section 3's choice: of the ready ops of a device, the smallest (ready time, topological index)."""

    def __init__(self, m: int, topo: list[int]) -> None:
        self.queues: list[list[tuple[float, int, int]]] = [[] for _ in range(m)]
        self.topo = topo

    def push(self, d: int, v: int, t: float) -> None:
        heapq.heappush(self.queues[d], (t, self.topo[v], v))

    def pop(self, d: int) -> int | None:
        return heapq.heappop(self.queues[d])[2] if self.queues[d] else None

    def ended(self, d: int, v: int) -> None:
        pass


class _Schedule:
    """Section 3a's choice: a ready op of the chunk (class, micro-batch) of the op that just ended on the device
    first, by topological index; otherwise the smallest (class, micro-batch, topological index) of the ready ops
    that may start: under 1F1B a forward op of micro-batch k on d only while ``k < retired[d] + cap[d]``, under
    GPipe a backward op only once every forward op on d has ended."""

    def __init__(self, m: int, keys: list[int], micro: list[int], forward: list[bool], p: list[int],
                 microbatches: int, caps: list[int] | None, chunk_span: int, gpipe: bool) -> None:
        self.queues: list[list[tuple[int, int]]] = [[] for _ in range(m)]
        self.keys, self.micro, self.forward, self.caps = keys, micro, forward, caps
        self.left = [[0] * (microbatches + 1) for _ in range(m)]  # ops of each micro-batch not yet ended
        self.forward_left = [0] * m  # forward ops not yet ended
        for v, d in enumerate(p):
            self.left[d][micro[v]] += 1
            self.forward_left[d] += int(forward[v])
        self.retired = [0] * m
        self.microbatches = microbatches
        self.chunk_span = chunk_span  # the chunk of key k is k // chunk_span
        self.gpipe = gpipe
        self.last_chunk = [-1] * m

    def push(self, d: int, v: int, t: float) -> None:
        heapq.heappush(self.queues[d], (self.keys[v], v))

    def _may_start(self, d: int, v: int) -> bool:
        if self.forward[v]:
            return self.caps is None or self.micro[v] < self.retired[d] + self.caps[d]
        return not (self.gpipe and self.micro[v] < self.microbatches and self.forward_left[d] > 0)

    def pop(self, d: int) -> int | None:
        q = self.queues[d]
        order = sorted(q)
        same = [entry for entry in order if entry[0] // self.chunk_span == self.last_chunk[d]]
        chosen = same[0] if same else next((entry for entry in order if self._may_start(d, entry[1])), None)
        if chosen is None:
            return None
        q.remove(chosen)
        heapq.heapify(q)
        self.last_chunk[d] = chosen[0] // self.chunk_span
        return chosen[1]

    def ended(self, d: int, v: int) -> None:
        self.left[d][self.micro[v]] -= 1
        self.forward_left[d] -= int(self.forward[v])
        while self.retired[d] < self.microbatches and self.left[d][self.retired[d]] == 0:
            self.retired[d] += 1


def simulate_reference(graph: ComputationGraph, placement, cluster: Cluster, param_factor: float = 4.0,
                       microbatches: int = 1, schedule: str = "1f1b") -> dict:
    """Simulate one placement. Returns ``makespan``, ``peak_memory``, ``busy``, ``start``,
    ``end`` (node order) and ``transfers`` (``(node, src, dst, bytes, start, end)`` in booking order); for
    ``microbatches`` > 1 those of the unrolled step (node order of its graph, ``unrolled(graph, m).graph``)."""
    p = [int(x) for x in placement]
    if microbatches == 1:
        return _simulate(graph, p, cluster, param_factor, _EarliestReady(cluster.num_devices,
                                                                         graph.topo_index.tolist()))
    step = unrolled(graph, microbatches)
    caps = stage_caps(graph, np.array(p, np.int64), cluster.num_devices).tolist() if schedule == "1f1b" else None
    up = [p[i] for i in step.origin.tolist()]
    chooser = _Schedule(cluster.num_devices, schedule_keys(step, schedule).tolist(), step.micro.tolist(),
                        (step.kind == FORWARD).tolist(), up, microbatches, caps, step.graph.num_nodes,
                        schedule == "gpipe")
    return _simulate(step.graph, up, cluster, param_factor, chooser, step)


def _simulate(graph: ComputationGraph, p: list[int], cluster: Cluster, param_factor: float,
              chooser: _EarliestReady | _Schedule, step: Unrolled | None = None) -> dict:
    n, m = graph.num_nodes, cluster.num_devices
    topo = graph.topo_index.tolist()
    cost = graph.cost.tolist()
    speed = cluster.speed.tolist()
    succ: list[list[tuple[int, float]]] = [[] for _ in range(n)]
    for s, d, b in zip(graph.edge_src.tolist(), graph.edge_dst.tolist(), graph.edge_bytes.tolist()):
        succ[s].append((d, b))
    missing = graph.in_degree.tolist()
    input_ready = [0.0] * n  # latest arrival among the inputs present so far

    start = [0.0] * n
    end = [0.0] * n
    busy = [0.0] * m
    running = [False] * m
    send_free = [0.0] * m
    recv_free = [0.0] * m
    transfers: list[tuple[int, int, int, float, float, float]] = []
    consumers_on: dict[int, tuple[int, list[int]]] = {}  # booking number -> (dst device, consumers)

    events: list[tuple] = []
    for v in range(n):
        if missing[v] == 0:
            chooser.push(p[v], v, 0.0)
    for d in range(m):
        heapq.heappush(events, (0.0, START, d))

    def input_arrives(v: int, t: float) -> None:
        input_ready[v] = max(input_ready[v], t)
        missing[v] -= 1
        if missing[v] == 0:
            chooser.push(p[v], v, t)
            heapq.heappush(events, (t, START, p[v]))

    while events:
        ev = heapq.heappop(events)
        t, phase = ev[0], ev[1]
        if phase == OP_DONE:
            u = ev[3]
            a = p[u]
            running[a] = False
            chooser.ended(a, u)
            remote: dict[int, float] = {}
            for v, b in succ[u]:
                if p[v] == a:
                    input_arrives(v, t)
                else:
                    remote[p[v]] = max(remote.get(p[v], 0.0), b)
            for dst, nbytes in remote.items():
                heapq.heappush(events, (t, BOOK, (topo[u], dst), u, nbytes))
            heapq.heappush(events, (t, START, a))
        elif phase == TRANSFER_DONE:
            dst, consumers = consumers_on.pop(ev[2])
            for v in consumers:
                input_arrives(v, t)
        elif phase == BOOK:
            _, dst = ev[2]
            u, nbytes = ev[3], ev[4]
            a = p[u]
            s = max(t, send_free[a], recv_free[dst])
            e = s + (float(cluster.latency[a, dst]) + nbytes / float(cluster.bandwidth[a, dst]))
            send_free[a] = recv_free[dst] = e
            consumers_on[len(transfers)] = (dst, [v for v, _ in succ[u] if p[v] == dst])
            heapq.heappush(events, (e, TRANSFER_DONE, len(transfers)))
            transfers.append((u, a, dst, nbytes, s, e))
        else:  # START
            d = ev[2]
            chosen = None if running[d] else chooser.pop(d)
            if chosen is not None:
                v = chosen
                tv = topo[v]
                dur = cost[v] / speed[d]
                start[v], end[v] = t, t + dur
                busy[d] += dur
                running[d] = True
                heapq.heappush(events, (t + dur, OP_DONE, tv, v))

    peak = _peak_memory(graph, p, cluster, start, end, transfers, param_factor, step)
    return {"makespan": max(end), "peak_memory": peak, "busy": busy, "start": start, "end": end,
            "transfers": transfers}


def _peak_memory(graph, p, cluster, start, end, transfers, param_factor, step) -> list[float]:
    """Interval sweep: each buffer lives on [alloc, free); frees sort before allocations; a pipelined step's
    gradient accumulation is one more buffer per device."""
    m = cluster.num_devices
    static = static_memory(graph, p, m, param_factor)
    lifetimes = buffer_lifetimes(graph, p, start, end, transfers, m)
    if step is not None:
        lifetimes = [own + held for own, held in zip(lifetimes, accumulation_lifetimes(step, p, start, m))]
    peaks = []
    for d in range(m):
        events = [(s, 1, size) for s, _, size in lifetimes[d]] + [(f, 0, size) for _, f, size in lifetimes[d]]
        cur = top = 0.0
        for _, kind, size in sorted(events):  # (time, 0 free | 1 alloc, bytes)
            cur += size if kind else -size
            top = max(top, cur)
        peaks.append(static[d] + top)
    return peaks
