"""Real training steps of a placement: :func:`measure_step`.

Two ways to run the placed step (forward, then backward with the gradient of the sum of the model's outputs;
no optimizer update):

* **CUDA** (``devices`` given and present): :func:`~placement_env.runtime.placed_program.placed_module` on
  those devices; the step time between ``torch.cuda.synchronize()`` calls, the peak from
  ``torch.cuda.max_memory_allocated`` per device, the busy time the sum of the kernels the profiler records on
  each device.
* **Local workers** (otherwise): device ``d`` is worker process ``d`` with one CPU thread
  (:mod:`~placement_env.runtime.local_workers`), and every tensor the simulator transfers is sent between the
  processes. The workers execute the *training graph* (``docs/spec/simulator.md`` section 5) op by op:

  - every forward op is its own autograd segment (its inputs from other segments become detached leaves),
    except ops that alias their first input (views, ``getitem``, in-place ops; colocated with it), which join
    that input's segment; a segment's backward runs ``torch.autograd.backward`` on its outputs with the
    gradients its consumers sent, and sends its inputs' gradients back, one message per (tensor, consuming
    segment): the simulator's backward edges ``v' -> u'``;
  - a value goes once to each other device with consumers (one transfer per (tensor, destination)); a
    parameter with a ``parameter`` op lives on that op's device, is sent to its remote readers and gets their
    gradients back;
  - each worker runs its tasks in one global order: a topological order of the tasks that follows the
    simulated start times (the simulator's schedule of this placement on ``cluster``). Sends are
    non-blocking and every wait is for a task earlier in that order, so the run cannot deadlock.

  ``busy`` is the time a worker spends in its ops (not waiting for messages); ``seconds`` the time from the
  common start (a barrier) to the end of the last worker; ``peak_memory`` the parameters a worker holds plus
  the high-water mark of the tensors it allocates during one extra, untimed step (a
  ``TorchDispatchMode`` that counts each new storage until it is freed): comparable to
  ``simulate(..., param_factor=2.0)`` (weights and their gradients, no optimizer state).
"""

from __future__ import annotations

import heapq
import statistics
import time
import warnings
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from placement_env.cluster import Cluster, Device
from placement_env.graph.model import ComputationGraph

from .module_tree import checked_device_placement

NOMINAL_BANDWIDTH = 1e9  # bytes/s of the cluster that orders a step when none is given
NOMINAL_LATENCY = 1e-4  # s


@dataclass(frozen=True)
class MeasuredStep:
    """What :func:`measure_step` measured.

    Attributes:
        seconds: the median step time, seconds.
        steps: every timed step, seconds.
        busy: seconds each device spends in its ops (median over the timed steps).
        peak_memory: bytes per device (parameters held plus the step's high-water mark of allocations).
        backend: ``"cuda"`` or ``"local-workers"``.
        gradients: each trainable parameter's gradient after the last step, by qualified name, as the device
            holding it has it (for checking that the placed step computes the model's gradients).
    """

    seconds: float
    steps: tuple[float, ...]
    busy: np.ndarray
    peak_memory: np.ndarray
    backend: str
    gradients: dict[str, np.ndarray]

    def to_dict(self) -> dict:
        return {"seconds": self.seconds, "steps": list(self.steps), "busy": [float(x) for x in self.busy],
                "peak_memory": [int(x) for x in self.peak_memory], "backend": self.backend}


def nominal_cluster(num_devices: int) -> Cluster:
    """The cluster that orders a measured step when none is given: ``num_devices`` devices of speed 1.0 (costs in
    this machine's seconds) with ample memory, linked at :data:`NOMINAL_BANDWIDTH` and :data:`NOMINAL_LATENCY`."""
    devices = [Device(f"local:{d}", 1.0, 1 << 50) for d in range(num_devices)]
    return Cluster(devices, np.full((num_devices, num_devices), NOMINAL_BANDWIDTH),
                   np.full((num_devices, num_devices), NOMINAL_LATENCY), name=f"nominal-{num_devices}")


def measure_step(model: Any, example_inputs: Sequence[Any] | Any, graph: ComputationGraph,
                 placement: Sequence[int] | np.ndarray, devices: Sequence[Any] | None = None, *,
                 repeats: int = 5, example_kwargs: Mapping[str, Any] | None = None,
                 cluster: Cluster | None = None) -> MeasuredStep:
    """Run ``repeats`` real training steps of ``model`` placed by ``placement`` (see the module docstring).

    Args:
        model: the ``nn.Module`` ``graph`` was imported from; for local workers it is pickled to them, so its
            class must be importable (defined at module level).
        example_inputs, example_kwargs: as given to ``from_torch``.
        graph: its *training* graph (``from_torch(..., training=True)``, the default).
        placement: a device index per op of ``graph``.
        devices: CUDA devices (``["cuda:0", "cuda:1"]``) to run on when present; ``None``, or devices this
            machine lacks (with a ``RuntimeWarning``), runs local worker processes, one per device index.
        repeats: timed steps (>= 1) after one warm-up step; the median is reported.
        cluster: the cluster whose simulated schedule orders the local workers' ops (default
            :func:`nominal_cluster`; :func:`~placement_env.runtime.local_cluster.local_cluster` for the measured
            one).

    Returns:
        A :class:`MeasuredStep`.

    Raises:
        ValueError: a placement of the wrong length, naming a device ``devices`` or ``cluster`` lacks, or
            splitting a colocation group; a forward-only graph; a model that does not match the graph (the first
            op that differs is named); bad ``repeats``.
        RuntimeError: a local worker failed (its error is quoted).
    Warns:
        RuntimeWarning: more local devices than cores (the workers' timings then share cores).
    """
    import torch

    from placement_env.importers.pytorch import trace_model
    from placement_env.sim.simulator import simulate

    from .placed_program import _check_matches

    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"repeats must be an integer >= 1, got {repeats!r}")
    p = checked_device_placement(graph, placement)
    if not any(node.phase == "backward" for node in graph.nodes):
        raise ValueError(f"graph {graph.name!r} has no backward ops: measure_step runs training steps, import the "
                         "model with from_torch(..., training=True)")
    num_devices = int(p.max()) + 1
    if devices is not None:
        devices = [torch.device(d) for d in devices]
        if num_devices > len(devices):
            bad = int(np.argmax(p >= len(devices)))
            raise ValueError(f"op {graph.nodes[bad].id!r} is placed on device {int(p[bad])}, but only "
                             f"{len(devices)} device(s) are given")
        num_devices = len(devices)
    gm, _, _ = trace_model(model, example_inputs, example_kwargs)
    _check_matches(gm, graph)
    cluster = cluster if cluster is not None else nominal_cluster(num_devices)
    if cluster.num_devices < num_devices:
        raise ValueError(f"placement uses {num_devices} devices, cluster {cluster.name!r} has "
                         f"{cluster.num_devices}")
    schedule = simulate(graph, p, cluster).schedule  # checks colocation too
    if devices is not None and all(d.type == "cuda" for d in devices):
        present = torch.cuda.is_available() and all((d.index or 0) < torch.cuda.device_count() for d in devices)
        if present:
            return _measure_cuda(model, example_inputs, example_kwargs, graph, p, devices, repeats)
        warnings.warn(f"{', '.join(map(str, devices))} not present here: measuring on local worker processes",
                      RuntimeWarning, stacklevel=2)
    from .local_workers import check_local_workers, run_on_local_workers

    check_local_workers(num_devices)
    plan = _plan(gm, graph, p, schedule.op_start)
    payload = (model, example_inputs, dict(example_kwargs or {}), plan, repeats)
    reports = run_on_local_workers(num_devices, _worker, payload)
    starts = np.array([r["starts"] for r in reports])
    ends = np.array([r["ends"] for r in reports])
    steps = tuple(float(x) for x in ends.max(axis=0) - starts.min(axis=0))
    busy = np.array([statistics.median(r["busy"]) for r in reports])
    peak = np.array([r["peak"] for r in reports], dtype=np.float64)
    gradients = {name: grad for r in reports for name, grad in r["gradients"].items()}
    return MeasuredStep(statistics.median(steps), steps, busy, peak, "local-workers", gradients)


# ---------------------------------------------------------------------------------------------------- the plan

@dataclass
class _Plan:
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


def _plan(gm: Any, graph: ComputationGraph, p: np.ndarray, op_start: np.ndarray) -> _Plan:
    from placement_env.importers.pytorch import ALIASING_OPS

    from .placed_program import _parameter_holders

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
    return _Plan(device, inputs, segment, members, order, sends, tag, grad_tag, grad_sources,
                 {t: device[op] for t, op in holder_op.items()}, outputs)


# -------------------------------------------------------------------------------------------------- the worker

class _LiveBytes:
    """Bytes of the storages allocated under it and not yet freed, and their high-water mark."""

    def __init__(self) -> None:
        from torch.utils._python_dispatch import TorchDispatchMode
        from torch.utils.weak import WeakIdKeyDictionary

        tracker = self
        self.live = self.peak = 0
        seen = WeakIdKeyDictionary()

        def free(nbytes: int) -> None:
            tracker.live -= nbytes

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                import torch
                import torch.utils._pytree as pytree

                out = func(*args, **(kwargs or {}))
                for t in pytree.tree_leaves(out):
                    if isinstance(t, torch.Tensor):
                        storage = t.untyped_storage()
                        if storage not in seen:
                            seen[storage] = True
                            nbytes = storage.nbytes()
                            tracker.live += nbytes
                            tracker.peak = max(tracker.peak, tracker.live)
                            weakref.finalize(storage, free, nbytes)
                return out

        self.mode = Mode()


def _structure(gm: Any, inputs: list[Any], keys: set[str]) -> dict[str, tuple[Any, list[Any]]]:
    """Each recorded fx node -> (treespec of its value, its leaves with each tensor as ``(shape, dtype,
    requires_grad)``), from one run of the whole program on this process."""
    import torch
    import torch.utils._pytree as pytree

    out: dict[str, tuple[Any, list[Any]]] = {}

    class Recorder(torch.fx.Interpreter):
        def run_node(self, n: Any) -> Any:
            value = super().run_node(n)
            if n.name in keys:
                leaves, spec = pytree.tree_flatten(value)
                out[n.name] = (spec, [(tuple(x.shape), x.dtype, bool(x.requires_grad))
                                      if isinstance(x, torch.Tensor) else x for x in leaves])
            return value

    Recorder(gm).run(*inputs)
    return out


def _worker(rank: int, world: int, payload: Any) -> dict:
    import torch
    import torch.distributed as dist
    import torch.utils._pytree as pytree

    from placement_env.importers.pytorch import trace_model

    model, example_inputs, example_kwargs, plan, repeats = payload
    gm, inputs, _ = trace_model(model, example_inputs, example_kwargs)
    nodes = {n.name: n for n in gm.graph.nodes}
    placeholders = {n.name: v for n, v in zip([n for n in gm.graph.nodes if n.op == "placeholder"], inputs)}
    structure = _structure(gm, inputs, set(plan.device))
    mine = [t for t in plan.order if plan.device[t[1]] == rank]
    params = {t[len("param:"):]: gm.get_parameter(t[len("param:"):]) for t in plan.device if t.startswith("param:")}
    for key in params:
        structure[f"param:{key}"] = pytree.tree_flatten(params[key].detach())[1], [
            (tuple(params[key].shape), params[key].dtype, params[key].requires_grad)]
    held = sum(int(t.numel() * t.element_size()) for target, d in plan.holders.items() if d == rank
               for t in [_attr(gm, target)])

    def grad_leaves(key: str) -> list[int]:
        return [j for j, x in enumerate(structure[key][1]) if isinstance(x, tuple) and x[2]]

    def send(value: Any, dst: int, base: int, pending: list) -> None:
        for j, t in enumerate(pytree.tree_leaves(value)):
            if isinstance(t, torch.Tensor):
                t = t.detach()
                t = (t.to(torch.uint8) if t.dtype == torch.bool else t).contiguous()
                pending.append((dist.isend(t, dst, tag=base + j), t))

    def receive(key: str, src: int, base: int) -> Any:
        spec, leaves = structure[key]
        got = []
        for j, x in enumerate(leaves):
            if isinstance(x, tuple):
                shape, dtype, requires_grad = x
                buf = torch.empty(shape, dtype=torch.uint8 if dtype == torch.bool else dtype)
                dist.recv(buf, src, tag=base + j)
                buf = buf.bool() if dtype == torch.bool else buf
                got.append(buf.requires_grad_(requires_grad))
            else:
                got.append(x)
        return pytree.tree_unflatten(got, spec)

    def receive_grad(key: str, src: int, base: int) -> dict[int, Any]:
        leaves = structure[key][1]
        grads = {}
        for j in grad_leaves(key):
            shape, dtype, _ = leaves[j]
            buf = torch.empty(shape, dtype=dtype)
            dist.recv(buf, src, tag=base + j)
            grads[j] = buf
        return grads

    def leaf(value: Any) -> Any:
        return pytree.tree_map(lambda x: x.detach().requires_grad_(x.requires_grad)
                               if isinstance(x, torch.Tensor) else x, value)

    def step() -> tuple[float, float, float]:
        values: dict[str, Any] = {}  # raw outputs of this worker's ops
        copies: dict[str, Any] = {}  # values as other segments here read them (detached leaves)
        pending: list = []
        busy = 0.0
        for param in gm.parameters():
            param.grad = None
        dist.barrier()
        t0 = time.perf_counter()
        for kind, key in mine:
            if kind == "F":
                seg = plan.segment[key]
                args = {}
                for u in plan.inputs[key]:
                    if plan.segment[u] == seg:
                        args[u] = values[u]
                    else:
                        if u not in copies:
                            copies[u] = (leaf(values[u]) if plan.device[u] == rank
                                         else receive(u, plan.device[u], plan.tag[(u, rank)]))
                        args[u] = copies[u]
                t = time.perf_counter()
                values[key] = _run(gm, nodes, params, placeholders, key, args)
                busy += time.perf_counter() - t
                for d in plan.sends[key]:
                    send(values[key], d, plan.tag[(key, d)], pending)
            else:
                outs, grads = [], []
                for member in plan.members[key]:
                    js = grad_leaves(member)
                    if not js:
                        continue
                    total: dict[int, Any] = {}
                    if member in copies and plan.device[member] == rank:
                        for j, x in enumerate(pytree.tree_leaves(copies[member])):
                            if j in js and isinstance(x, torch.Tensor) and x.grad is not None:
                                total[j] = x.grad
                    for src, base in plan.grad_sources[member]:
                        for j, g in receive_grad(member, src, base).items():
                            total[j] = total[j] + g if j in total else g
                    leaves = pytree.tree_leaves(values[member])
                    if member in plan.outputs:
                        for j in js:
                            total[j] = total[j] + 1.0 if j in total else torch.ones_like(leaves[j])
                    for j, g in total.items():
                        if leaves[j].requires_grad:
                            outs.append(leaves[j])
                            grads.append(g)
                t = time.perf_counter()
                if outs:
                    torch.autograd.backward(outs, grads)
                busy += time.perf_counter() - t
                ins = dict.fromkeys(u for m in plan.members[key] for u in plan.inputs[m]
                                    if plan.segment[u] != key)
                for u in ins:
                    if plan.device[u] != rank and (u, key) in plan.grad_tag:
                        base = plan.grad_tag[(u, key)]
                        for j, x in enumerate(pytree.tree_leaves(copies[u])):
                            if isinstance(x, torch.Tensor) and x.requires_grad:
                                g = x.grad if x.grad is not None else torch.zeros_like(x)
                                pending.append((dist.isend(g.contiguous(), plan.device[u], tag=base + j), g))
                                x.grad = None
                for m in plan.members[key]:
                    values.pop(m, None)
            pending = [(w, t) for w, t in pending if not w.is_completed()]
        for w, _ in pending:
            w.wait()
        return t0, time.perf_counter(), busy

    step()  # warm-up
    starts, ends, busies = [], [], []
    for _ in range(repeats):
        t0, t1, busy = step()
        starts.append(t0)
        ends.append(t1)
        busies.append(busy)
    tracker = _LiveBytes()
    with tracker.mode:
        step()
    gradients = {target: _attr(gm, target).grad.numpy().copy() for target, d in plan.holders.items()
                 if d == rank and isinstance(_attr(gm, target), torch.nn.Parameter)
                 and _attr(gm, target).grad is not None}
    return {"starts": starts, "ends": ends, "busy": busies, "peak": held + tracker.peak, "gradients": gradients}


def _attr(gm: Any, target: str) -> Any:
    owner, _, attr = target.rpartition(".")
    return getattr(gm.get_submodule(owner) if owner else gm, attr)


def _run(gm: Any, nodes: dict[str, Any], params: dict[str, Any], placeholders: dict[str, Any], key: str,
         args: dict[str, Any]) -> Any:
    """The value of op ``key`` (an fx node, or a parameter op) from its inputs' values ``args``."""
    import torch

    if key.startswith("param:"):
        return params[key[len("param:"):]]
    n = nodes[key]
    if n.op == "placeholder":
        return placeholders[key]

    def value(a: Any) -> Any:
        if a.op == "get_attr":
            target = str(a.target)
            return args[f"param:{target}"] if f"param:{target}" in args else _attr(gm, target)
        return args[a.name]

    call_args = torch.fx.node.map_arg(n.args, value)
    call_kwargs = torch.fx.node.map_arg(n.kwargs, value)
    if n.op == "call_module":
        return gm.get_submodule(str(n.target))(*call_args, **call_kwargs)
    if n.op == "call_method":
        return getattr(call_args[0], str(n.target))(*call_args[1:], **call_kwargs)
    return n.target(*call_args, **call_kwargs)


def _measure_cuda(model: Any, example_inputs: Any, example_kwargs: Mapping[str, Any] | None,
                  graph: ComputationGraph, p: np.ndarray, devices: list[Any], repeats: int) -> MeasuredStep:
    import torch
    import torch.utils._pytree as pytree

    from placement_env.importers.pytorch import trace_model

    from .placed_program import placed_module

    placed = placed_module(model, example_inputs, graph, p, devices, example_kwargs=example_kwargs)
    _, inputs, _ = trace_model(model, example_inputs, example_kwargs)

    def step() -> None:
        for param in placed.parameters():
            param.grad = None
        out = [t for t in pytree.tree_leaves(placed(*inputs)) if isinstance(t, torch.Tensor) and t.requires_grad]
        if out:
            torch.autograd.backward(out, [torch.ones_like(t) for t in out])

    def synchronize() -> None:
        for d in devices:
            torch.cuda.synchronize(d)

    step()
    synchronize()
    steps = []
    for _ in range(repeats):
        synchronize()
        t0 = time.perf_counter()
        step()
        synchronize()
        steps.append(time.perf_counter() - t0)
    for d in devices:
        torch.cuda.reset_peak_memory_stats(d)
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        step()
        synchronize()
    peak = np.array([float(torch.cuda.max_memory_allocated(d)) for d in devices])
    busy = np.zeros(len(devices))
    where = {(d.index or 0): i for i, d in enumerate(devices)}
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA and event.device_index in where:
            busy[where[event.device_index]] += event.time_range.elapsed_us() * 1e-6
    gradients = {name: param.grad.detach().cpu().numpy() for name, param in placed.named_parameters()
                 if param.grad is not None}
    return MeasuredStep(statistics.median(steps), tuple(steps), busy, peak, "cuda", gradients)


__all__ = ["MeasuredStep", "measure_step", "nominal_cluster"]
