"""Each device's memory over one simulated step, rebuilt from the schedule.

The memory model of ``docs/spec/simulator.md`` section 3 written as buffer
lifetimes, one ``(alloc, free, bytes)`` triple per buffer:

* the output of op ``u`` lives on ``p(u)`` from the start of ``u`` until the
  latest of: the end of ``u``, the end of its last consumer on ``p(u)``, the
  end of its last outbound transfer;
* the copy a transfer delivers lives on the receiving device from the start of
  the transfer until the end of the last consumer of ``u`` there;
* in a pipelined step (section 3a), a device's parameter bytes once more from the
  start of its first backward op of a micro-batch k >= 1 to the end of the step
  (the gradient accumulation: :func:`accumulation_lifetimes`).

A buffer occupies the half-open interval ``[alloc, free)``: at equal times,
frees come before allocations. :func:`buffer_lifetimes` is shared with the
literal reference simulator (:mod:`placement_env.sim.reference`), whose peak the
compiled simulator is tested to equal exactly; :func:`memory_timeline` turns the
lifetimes of a :class:`~placement_env.SimulationResult` into step functions,
for a look at *when* a device fills up (``python -m placement_env simulate --trace``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from placement_env.graph.model import ComputationGraph
from placement_env.sim.pipeline import BACKWARD, Unrolled, stepped_graph, unrolled
from placement_env.sim.simulator import SimulationResult

# (alloc time, free time, bytes): seconds, seconds, bytes
Lifetime = tuple[float, float, float]
# (node index, source device, destination device, bytes, start, end), as in Schedule.transfers()
TransferRecord = tuple[int, int, int, float, float, float]


def static_memory(graph: ComputationGraph, placement: Sequence[int], num_devices: int,
                  param_factor: float) -> list[float]:
    """Bytes each device holds for the whole step: ``param_bytes * param_factor`` of every op on it."""
    static = [0.0] * num_devices
    for v in range(graph.num_nodes):
        static[placement[v]] += float(graph.param_bytes[v]) * param_factor
    return static


def buffer_lifetimes(graph: ComputationGraph, placement: Sequence[int], start: Sequence[float],
                     end: Sequence[float], transfers: Sequence[TransferRecord],
                     num_devices: int) -> list[list[Lifetime]]:
    """Per device, every dynamic buffer as ``(alloc, free, bytes)`` (seconds, seconds, bytes).

    ``start`` / ``end`` are the ops' times in node order and ``transfers`` the
    booked transfers, as :func:`~placement_env.simulate` schedules them.
    Received copies come first (in booking order), then op outputs (in node order).
    """
    consumers: list[list[int]] = [[] for _ in range(graph.num_nodes)]
    for u, v in zip(graph.edge_src.tolist(), graph.edge_dst.tolist()):
        consumers[u].append(v)
    lifetimes: list[list[Lifetime]] = [[] for _ in range(num_devices)]
    out_transfer_end: dict[int, float] = {}
    for u, _a, b, nbytes, s, e in transfers:
        out_transfer_end[u] = max(out_transfer_end.get(u, 0.0), e)
        reader_ends = [end[v] for v in consumers[u] if placement[v] == b]
        if not reader_ends:
            raise ValueError(f"a transfer sends node {graph.ids[u]!r} to device {b}, where it has no consumer: "
                             f"the schedule is not one of graph {graph.name!r}")
        lifetimes[b].append((s, max(reader_ends), nbytes))
    for u in range(graph.num_nodes):
        a = placement[u]
        free = max([end[u], out_transfer_end.get(u, 0.0)] + [end[v] for v in consumers[u] if placement[v] == a])
        lifetimes[a].append((start[u], free, float(graph.output_bytes[u])))
    return lifetimes


def accumulation_lifetimes(step: Unrolled, placement: Sequence[int], start: Sequence[float],
                           num_devices: int) -> list[list[Lifetime]]:
    """Per device of a pipelined step, the gradient accumulation's buffer (section 3a) as ``(alloc, inf, bytes)``:
    the parameter bytes of the device's ops from the start of its first backward op of a micro-batch >= 1 (none
    on a device without parameters or without such an op)."""
    held = [0.0] * num_devices
    first = [np.inf] * num_devices
    for v in range(step.graph.num_nodes):
        d = placement[v]
        held[d] += float(step.graph.param_bytes[v])
        if step.kind[v] == BACKWARD and 1 <= step.micro[v] < step.microbatches:
            first[d] = min(first[d], start[v])
    return [[(first[d], np.inf, held[d])] if held[d] > 0 and first[d] < np.inf else [] for d in range(num_devices)]


def memory_timeline(graph: ComputationGraph, result: SimulationResult) -> list[tuple[np.ndarray, np.ndarray]]:
    """Each device's memory in use over the step of ``result`` (a :func:`~placement_env.simulate` of ``graph``).

    Returns, per device, ``(times, used)``: ``times`` in seconds, strictly
    increasing from 0.0; ``used[i]`` in bytes (static + live buffers) from
    ``times[i]`` until the next time, i.e. after every free and allocation at
    that instant. ``used.max()`` equals ``result.peak_memory`` of that device (exactly when
    sizes are whole bytes; fractional sizes may differ in the last bits, the sums being in another order).
    """
    graph_of_step, graph = graph, stepped_graph(graph, result.microbatches)
    schedule = result.schedule
    if tuple(schedule.node_ids) != tuple(graph.ids):
        raise ValueError(f"the result is a schedule of {len(schedule.node_ids)} other ops, "
                         f"not of graph {graph.name!r} ({graph.num_nodes} ops)")
    m = int(np.asarray(result.peak_memory).shape[0])
    placement = schedule.op_device.tolist()
    transfers = list(zip(schedule.transfer_node.tolist(), schedule.transfer_src.tolist(),
                         schedule.transfer_dst.tolist(), schedule.transfer_bytes.tolist(),
                         schedule.transfer_start.tolist(), schedule.transfer_end.tolist()))
    lifetimes = buffer_lifetimes(graph, placement, schedule.op_start.tolist(), schedule.op_end.tolist(),
                                 transfers, m)
    if result.microbatches > 1:
        held = accumulation_lifetimes(unrolled(graph_of_step, result.microbatches), placement,
                                      schedule.op_start.tolist(), m)
        lifetimes = [own + extra for own, extra in zip(lifetimes, held)]
    static = static_memory(graph, placement, m, result.param_factor)
    timeline = []
    for d in range(m):
        # (time, 0 = free | 1 = alloc, signed bytes): frees sort first at equal times
        changes = sorted([(f, 0, -b) for s, f, b in lifetimes[d] if s < f < np.inf]
                         + [(s, 1, b) for s, f, b in lifetimes[d] if f > s])
        times, used = [0.0], [static[d]]
        level = 0.0
        for t, _, delta in changes:
            level += delta
            if t != times[-1]:
                times.append(t)
                used.append(static[d] + level)
            else:
                used[-1] = static[d] + level
        timeline.append((np.array(times), np.array(used)))
    return timeline
