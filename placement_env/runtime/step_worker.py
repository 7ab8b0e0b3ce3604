"""One local worker's part of a measured training step: :func:`run_worker` (see
:mod:`placement_env.runtime.measured_step` for what a step is and what is measured)."""

from __future__ import annotations

import time
from typing import Any

import torch
import torch.distributed as dist
import torch.utils._pytree as pytree

from placement_env.importers.pytorch import trace_model

from .live_bytes import LiveBytes
from .local_workers import heartbeat
from .placed_program import _attr


def _structure(gm: Any, inputs: list[Any], keys: set[str]) -> dict[str, tuple[Any, list[Any]]]:
    """Each recorded fx node -> (treespec of its value, its leaves with each tensor as ``(shape, dtype,
    requires_grad)``), from one run of the whole program on this process."""
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


def run_worker(rank: int, world: int, payload: Any) -> dict:
    """Worker ``rank``'s part of a measured step: one warm-up step, ``repeats`` timed ones and one under
    :class:`~placement_env.runtime.live_bytes.LiveBytes`; its start and end times (``time.perf_counter``, the
    same clock in every process), busy seconds, peak bytes and the gradients of the parameters it holds."""
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

    heartbeat(f"device {rank}: warm-up step")
    step()  # warm-up
    starts, ends, busies = [], [], []
    for k in range(repeats):
        heartbeat(f"device {rank}: timed step {k + 1} of {repeats}")
        t0, t1, busy = step()
        starts.append(t0)
        ends.append(t1)
        busies.append(busy)
    tracker = LiveBytes()
    with tracker.mode:
        step()
    gradients = {target: _attr(gm, target).grad.numpy().copy() for target, d in plan.holders.items()
                 if d == rank and isinstance(_attr(gm, target), torch.nn.Parameter)
                 and _attr(gm, target).grad is not None}
    return {"starts": starts, "ends": ends, "busy": busies, "peak": held + tracker.peak, "gradients": gradients}


def _run(gm: Any, nodes: dict[str, Any], params: dict[str, Any], placeholders: dict[str, Any], key: str,
         args: dict[str, Any]) -> Any:
    """The value of op ``key`` (an fx node, or a parameter op) from its inputs' values ``args``."""
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
