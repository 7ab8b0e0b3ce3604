"""One run of a traced program, op by op: :class:`OpRecorder` records each op's output bytes and FLOPs (on fake
tensors) or also its measured forward and backward seconds (``profile``), and :func:`call_costs` the seconds of an
op call that computes nothing, the fixed part of every profiled op (``Node.fixed_cost``); what
:func:`~placement_env.importers.pytorch.from_torch` builds its graph from."""

from __future__ import annotations

import contextlib
import operator
import statistics
import time
import weakref
from typing import Any

import torch
import torch.utils._pytree as pytree
from torch import nn
from torch.multiprocessing.reductions import StorageWeakRef

# ops whose output aliases (or is a re-layout of) their first input: colocated with its producer
ALIASING_OPS = frozenset({
    "view", "_unsafe_view", "reshape", "view_as", "transpose", "permute", "t", "expand", "expand_as", "squeeze",
    "unsqueeze", "flatten", "unflatten", "slice", "select", "narrow", "getitem", "alias", "as_strided", "detach",
    "split", "chunk", "unbind", "contiguous", "dropout", "identity",
})


def tensor_bytes(value: Any) -> int:
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, (list, tuple)):
        return sum(tensor_bytes(v) for v in value)
    if isinstance(value, dict):
        return sum(tensor_bytes(v) for v in value.values())
    return 0


def op_name(gm: torch.fx.GraphModule, node: torch.fx.Node) -> str:
    if node.op == "call_module":
        return type(gm.get_submodule(str(node.target))).__name__.lower()
    if node.op == "call_method":
        return str(node.target)
    target = node.target
    if target is operator.getitem:
        return "getitem"
    name = getattr(target, "__name__", str(target))
    return name.split(".")[0]  # "conv2d.default" -> "conv2d"


class OpRecorder(torch.fx.Interpreter):
    """Runs the graph once, recording each op's output bytes, FLOPs and (optionally) measured forward and
    backward times.

    With ``saved`` (run it with autograd recording), each op's record also says what autograd keeps of the
    forward for the op's backward, found with :func:`torch.autograd.graph.saved_tensors_hooks` while the op runs:
    ``saved_from``, the fx nodes whose output storage it keeps (an input, the base a view of an input was made
    from, or the op's own output; parameters and buffers are not activations and are left out), and
    ``saved_internal_bytes``, the bytes of storages it keeps that no op returned (a dropout mask, a norm's
    statistics). Storages are told apart by identity, so a view counts as the storage it aliases; an identity
    is forgotten when its storage is freed, so that a new storage that reuses it is not taken for the old.
    """

    def __init__(self, gm: torch.fx.GraphModule, profile: bool, repeats: int, backward: bool = False,
                 saved: bool = False) -> None:
        super().__init__(gm)
        self.profile, self.repeats, self.backward, self.saved = profile, repeats, backward, saved
        self.records: dict[str, dict] = {}
        self._owner: dict[int, str] = {}  # storage identity -> the fx node whose output it first was
        self._static = {_storage_key(t) for t in [*gm.parameters(), *gm.buffers()]}

    def _own(self, n: torch.fx.Node, out: Any) -> None:
        """Record ``n`` as the owner of the output storages of ``out`` that no earlier node returned."""
        for t in pytree.tree_leaves(out):
            if isinstance(t, torch.Tensor):
                key = _storage_key(t)
                if key not in self._owner and key not in self._static:
                    self._owner[key] = n.name
                    weakref.finalize(t.untyped_storage(), self._owner.pop, key, None)

    def run_node(self, n: torch.fx.Node) -> Any:
        if n.op not in ("call_function", "call_method", "call_module"):
            out = super().run_node(n)
            if self.saved:
                self._own(n, out)
            return out
        from torch.utils.flop_counter import FlopCounterMode

        kept: list[tuple[int, int]] = []  # (storage identity, bytes) of each tensor autograd saves

        def pack(t: torch.Tensor) -> torch.Tensor:
            kept.append((_storage_key(t), t.untyped_storage().nbytes()))
            return t

        hooks = torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t) if self.saved \
            else contextlib.nullcontext()
        with FlopCounterMode(display=False) as counter, hooks:
            out = super().run_node(n)
        record: dict[str, Any] = {"flops": float(counter.get_total_flops()), "output_bytes": tensor_bytes(out)}
        if self.saved:
            self._own(n, out)
            sources: dict[str, None] = {}
            internal: dict[int, int] = {}
            for key, nbytes in kept:
                if key in self._owner:
                    sources[self._owner[key]] = None
                elif key not in self._static:
                    internal[key] = nbytes
            record["saved_from"] = list(sources)
            record["saved_internal_bytes"] = sum(internal.values())
        if self.profile:
            times = []
            for _ in range(self.repeats):
                t0 = time.perf_counter()
                super().run_node(n)
                times.append(time.perf_counter() - t0)
            record["measured"] = statistics.median(times)
            if self.backward:
                measured = self._backward_time(n)
                if measured is not None:
                    record["measured_backward"] = measured
        self.records[n.name] = record
        return out

    def _backward_time(self, n: torch.fx.Node) -> float | None:
        """The median of ``repeats`` timed backward passes of ``n`` alone (its tensor inputs made leaves that
        require grad, the gradient of its outputs ones), as a measured step runs an op's backward; ``None``
        when nothing of it is differentiable or autograd refuses it (an in-place op on a leaf)."""
        args, kwargs = self.fetch_args_kwargs_from_env(n)

        def leaf(x: Any) -> Any:
            if isinstance(x, torch.Tensor) and x.is_floating_point() and not isinstance(x, nn.Parameter):
                return x.detach().clone().requires_grad_(True)
            return x

        try:
            with torch.enable_grad():
                args, kwargs = pytree.tree_map(leaf, (args, kwargs))
                out = getattr(self, n.op)(n.target, args, kwargs)
                outs = [t for t in pytree.tree_leaves(out) if isinstance(t, torch.Tensor) and t.requires_grad]
                if not outs:
                    return None
                grads = [torch.ones_like(t) for t in outs]
                times = []
                for _ in range(self.repeats + 1):  # the first, untimed, warms the kernels up
                    t0 = time.perf_counter()
                    torch.autograd.backward(outs, grads, retain_graph=True)
                    times.append(time.perf_counter() - t0)
        except RuntimeError:
            return None
        finally:
            for param in self.module.parameters():
                param.grad = None
        return statistics.median(times[1:])


def _storage_key(t: torch.Tensor) -> int:
    """The identity of the storage ``t`` views (the same for every view of it, fake tensors included)."""
    return int(StorageWeakRef(t.untyped_storage()).cdata)


def call_costs(gm: torch.fx.GraphModule, records: dict[str, dict]) -> tuple[float, float]:
    """The profile's seconds of an op call that computes nothing, forward and backward: the median measured time
    of its views (an alias, a reshape: no arithmetic, only the call), each op's fixed cost (at most its cost);
    without views, the cheapest op's."""
    views = [records[n.name] for n in gm.graph.nodes if n.name in records and "measured" in records[n.name]
             and op_name(gm, n) in ALIASING_OPS]
    measured = [r for r in records.values() if "measured" in r]
    if not measured:
        return 0.0, 0.0
    forward = statistics.median([r["measured"] for r in views]) if views else min(r["measured"] for r in measured)
    backward_views = [r["measured_backward"] for r in views if "measured_backward" in r]
    backward = statistics.median(backward_views) if backward_views else forward
    return forward, backward


__all__ = ["ALIASING_OPS", "OpRecorder", "call_costs", "op_name", "tensor_bytes"]
