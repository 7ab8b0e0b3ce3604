"""A simulated step as a Chrome trace: open it in https://ui.perfetto.dev or chrome://tracing.

The Trace Event Format (JSON object with ``traceEvents``; times in
microseconds) as Chrome and Perfetto read it:

* one process per device, named after it, with three threads: ``compute``
  (one slice per op, named by node id, its op type as category), ``send`` and
  ``receive`` (one slice per transfer on each end, named ``<node> -> <device>``
  and ``<node> <- <device>``, the bytes in its arguments);
* a ``memory (bytes)`` counter per device: static + live buffers, from
  :func:`~placement_env.sim.memory_timeline.memory_timeline`, so its highest value
  is the device's simulated peak;
* ``otherData``: the graph, the cluster, makespan and lower bound (seconds),
  peaks and capacities (bytes), OOM.
"""

from __future__ import annotations

import os

from placement_env.cluster import Cluster
from placement_env.graph.model import ComputationGraph
from placement_env.json_files import write_json_file
from placement_env.sim.memory_timeline import memory_timeline
from placement_env.sim.pipeline import stepped_graph
from placement_env.sim.simulator import SimulationResult

US_PER_SECOND = 1e6
COMPUTE, SEND, RECEIVE = 0, 1, 2  # thread ids within a device's process


def chrome_trace(graph: ComputationGraph, cluster: Cluster, result: SimulationResult) -> dict:
    """The schedule and memory of ``result`` (a :func:`~placement_env.simulate` of ``graph`` on ``cluster``)
    as a Trace Event Format object (see the module docstring)."""
    m = cluster.num_devices
    if len(result.peak_memory) != m:
        raise ValueError(f"the result is of a cluster of {len(result.peak_memory)} devices, "
                         f"not of {cluster.name!r} ({m} devices)")
    timeline = memory_timeline(graph, result)  # first: it checks that the schedule is one of this graph
    graph = stepped_graph(graph, result.microbatches)
    names = [device.name for device in cluster.devices]
    events: list[dict] = []
    for d, name in enumerate(names):
        events.append({"name": "process_name", "ph": "M", "pid": d, "args": {"name": name}})
        events.append({"name": "process_sort_index", "ph": "M", "pid": d, "args": {"sort_index": d}})
        for tid, thread in ((COMPUTE, "compute"), (SEND, "send"), (RECEIVE, "receive")):
            events.append({"name": "thread_name", "ph": "M", "pid": d, "tid": tid, "args": {"name": thread}})
    schedule = result.schedule
    for v, op in enumerate(schedule.ops()):  # node order
        events.append({"name": op.node, "cat": graph.nodes[v].op, "ph": "X", "pid": op.device, "tid": COMPUTE,
                       "ts": op.start * US_PER_SECOND, "dur": (op.end - op.start) * US_PER_SECOND,
                       "args": {"output_bytes": float(graph.output_bytes[v]),
                                "param_bytes": float(graph.param_bytes[v])}})
    for x in schedule.transfers():
        ts, dur = x.start * US_PER_SECOND, (x.end - x.start) * US_PER_SECOND
        args = {"bytes": x.bytes}
        events.append({"name": f"{x.node} -> {names[x.dst_device]}", "cat": "transfer", "ph": "X",
                       "pid": x.src_device, "tid": SEND, "ts": ts, "dur": dur, "args": args})
        events.append({"name": f"{x.node} <- {names[x.src_device]}", "cat": "transfer", "ph": "X",
                       "pid": x.dst_device, "tid": RECEIVE, "ts": ts, "dur": dur, "args": args})
    for d, (times, used) in enumerate(timeline):
        events.extend({"name": "memory (bytes)", "ph": "C", "pid": d, "ts": float(t) * US_PER_SECOND,
                       "args": {"bytes": float(u)}} for t, u in zip(times, used))
    return {
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": {
            "graph": graph.name, "cluster": cluster.name, "makespan_s": result.makespan,
            "lower_bound_s": result.lower_bound, "peak_memory_bytes": [float(x) for x in result.peak_memory],
            "memory_bytes": [float(x) for x in cluster.memory], "oom": bool(result.oom),
            "param_factor": result.param_factor,
        },
    }


def write_chrome_trace(path: str | os.PathLike, graph: ComputationGraph, cluster: Cluster,
                       result: SimulationResult) -> None:
    """Write :func:`chrome_trace` to ``path`` (gzipped when the name ends in ``.gz``)."""
    write_json_file(chrome_trace(graph, cluster, result), path)
