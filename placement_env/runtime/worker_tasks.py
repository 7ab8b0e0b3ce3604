"""What every local worker of a measured step executes: :func:`worker_tasks` (plain data, pickled to the workers).

Keys are the fx node names of the graph's ops and ``param:<target>`` for its ``parameter`` ops. Tasks are
``("F", op)`` (an op's forward) and ``("B", root)`` (the backward of the autograd segment rooted at ``root``: an
op and the ops aliasing it); ``F(v)`` follows ``F`` of its inputs, ``B(S)`` follows ``F`` of its members and
``B`` of every other segment reading one of them. One global order (Kahn's algorithm, ties by simulated start
time then graph index) is a topological order of those tasks, so each worker running its own tasks in it never
waits for a message that is sent later (:mod:`placement_env.runtime.measured_step`).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Any

import numpy as np

from placement_env.graph.model import ComputationGraph
from placement_env.importers.pytorch import ALIASING_OPS

from .placed_program import _parameter_holders


@dataclass
class WorkerTasks:
    """Plain data every worker executes (keys: fx node names of the graph's ops, and ``param:<target>``)."""

    device: dict[str, int]
    inputs: dict[str, list[str]]  # op -> its input keys, in fx argument order (duplicates kept once)
    segment: dict[str, str]  # op -> its segment's root
    members: dict[str, list[str]]  # root -> its ops in order
    order: list[tuple[str, str]]  # ("F", op) | ("B", root), global task order
    sends: dict[str, list[int]]  # value -> the other devices it goes to
    tag: dict[tuple[str, int], int]  # (value, destination) -> base tag of its forward message
    grad_tag: dict[tuple[str, str], int]  # (value, consuming segment) -> base tag of the gradient it sends back
    grad_sources: dict[str, list[tuple[int, int]]]  # value -> (device, base tag) of each remote gradient message
    holders: dict[str, int]  # parameter target -> holder device (its bytes are that device's)
    outputs: list[str]  # the model's output values


def worker_tasks(gm: Any, graph: ComputationGraph, p: np.ndarray, op_start: np.ndarray) -> WorkerTasks:
    """The plan of one training step of ``graph`` placed by ``p`` (``gm``: its traced program), the tasks in a
    topological order that follows the simulated start times ``op_start`` (node order)."""
    index = {node.id: i for i, node in enumerate(graph.nodes)}
    forward = [i for i, node in enumerate(graph.nodes) if node.phase != "backward"]
    n_fwd = len(forward)
    grad_index = {graph.nodes[i].id: n_fwd + (n_fwd - 1 - k) for k, i in enumerate(forward)}
    device = {key: int(p[i]) for key, i in index.items() if graph.nodes[i].phase != "backward"}
    params = {key[len("param:"):] for key in device if key.startswith("param:")}

    def key_of(fx_node: Any) -> str | None:
        if fx_node.op == "get_attr":
            target = str(fx_node.target)
            return f"param:{target}" if target in params else None
        return fx_node.name if fx_node.name in device else None

    inputs: dict[str, list[str]] = {}
    segment: dict[str, str] = {}
    members: dict[str, list[str]] = {}
    fx_nodes = [n for n in gm.graph.nodes if n.name in device]
    for key in sorted(device, key=index.__getitem__):
        if key.startswith("param:"):
            inputs[key], segment[key] = [], key
            members[key] = [key]
    for n in fx_nodes:
        ins = list(dict.fromkeys(k for k in map(key_of, n.all_input_nodes) if k is not None))
        inputs[n.name] = ins
        op = graph.nodes[index[n.name]].op
        aliasing = op in ALIASING_OPS or (op.endswith("_") and not op.endswith("__"))
        sources = [a.name for a in n.all_input_nodes if a.name in device]  # from_torch's alias source
        root = segment[sources[0]] if aliasing and sources and device[sources[0]] == device[n.name] else n.name
        segment[n.name] = root
        members.setdefault(root, []).append(n.name)
    consumers: dict[str, list[str]] = {key: [] for key in device}  # value -> consuming ops
    for op, ins in inputs.items():
        for u in ins:
            consumers[u].append(op)
    sends = {u: sorted({device[v] for v in vs} - {device[u]}) for u, vs in consumers.items()}
    tag: dict[tuple[str, int], int] = {}
    grad_tag: dict[tuple[str, str], int] = {}
    stride = 1 << 10  # tensors per value at most
    for u in sorted(device, key=index.__getitem__):
        for d in sends[u]:
            tag[(u, d)] = (len(tag) + len(grad_tag) + 1) * stride
        for seg in dict.fromkeys(segment[v] for v in consumers[u]):
            if seg != segment[u]:
                grad_tag[(u, seg)] = (len(tag) + len(grad_tag) + 1) * stride
    # the task graph: F(v) after F(inputs); B(S) after F(members) and B(every other segment consuming S)
    tasks: list[tuple[str, str]] = [("F", key) for key in sorted(device, key=index.__getitem__)]
    tasks += [("B", root) for root in members]
    priority = {("F", k): (float(op_start[index[k]]), index[k]) for k in device}
    for root, ms in members.items():
        latest = max(ms, key=lambda k: float(op_start[grad_index[k]]))
        priority[("B", root)] = (float(op_start[grad_index[latest]]), grad_index[latest])
    after: dict[tuple[str, str], list[tuple[str, str]]] = {t: [] for t in tasks}
    missing = {t: 0 for t in tasks}

    def edge(a: tuple[str, str], b: tuple[str, str]) -> None:
        after[a].append(b)
        missing[b] += 1

    for op, ins in inputs.items():
        for u in ins:
            edge(("F", u), ("F", op))
            if segment[u] != segment[op]:
                edge(("B", segment[op]), ("B", segment[u]))
        edge(("F", op), ("B", segment[op]))
    heap = [(priority[t], t) for t in tasks if missing[t] == 0]
    heapq.heapify(heap)
    order: list[tuple[str, str]] = []
    while heap:
        _, t = heapq.heappop(heap)
        order.append(t)
        for b in after[t]:
            missing[b] -= 1
            if missing[b] == 0:
                heapq.heappush(heap, (priority[b], b))
    assert len(order) == len(tasks), "the task graph of a DAG is acyclic"
    grad_sources: dict[str, list[tuple[int, int]]] = {u: [] for u in device}
    for (u, seg), base in grad_tag.items():
        if device[seg] != device[u]:
            grad_sources[u].append((device[seg], base))
    holder_op = _parameter_holders(gm, graph)
    output_node = next(n for n in gm.graph.nodes if n.op == "output")
    outputs = list(dict.fromkeys(k for k in map(key_of, output_node.all_input_nodes) if k is not None))
    return WorkerTasks(device, inputs, segment, members, order, sends, tag, grad_tag, grad_sources,
                 {t: device[op] for t, op in holder_op.items()}, outputs)
