"""A placement that runs: :func:`placed_module`, the model as a ``torch.fx.GraphModule`` with every op on its
device.

The model is traced as :func:`~placement_env.importers.pytorch.from_torch` traces it (so the fx nodes are the
graph's ops, by name), then the traced program is rewritten:

* each parameter and buffer is moved to the device of the op that holds it in the graph (the op charged with
  its bytes, or its ``parameter`` op when several ops read it); an op that creates a tensor (``zeros``,
  ``arange``) creates it on its own device;
* one copy (``Tensor.to``, through any tuple or list the value is) is inserted per (value, destination device)
  where a consumer is on another device than the producer: exactly the transfers of the simulator's contract,
  one per (tensor, destination device), all consumers on that device sharing it. Autograd sends the gradients
  back the same way.

Its outputs and, after ``backward``, its parameters' gradients equal the model's (the same ops in the same order,
only moved). It holds copies of the model's parameters: :func:`write_back` copies them into the model after
training. The copies it makes are listed in ``placed.transfers`` as ``(producer op, device index)``; they
are made between device indices, so that ``devices=["cpu", "cpu"]`` makes the copies of a two-device placement
on one machine.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
import torch.utils._pytree as pytree
from torch import nn

from placement_env.graph.model import ComputationGraph
from placement_env.importers.parameters import canonical_names
from placement_env.importers.pytorch import trace_model
from placement_env.plan.module_tree import checked_device_placement


def move(value: Any, device: torch.device) -> Any:
    """``value`` with every tensor in it on ``device`` (the copy a placed module makes between devices)."""
    return pytree.tree_map(lambda x: x.to(device) if isinstance(x, torch.Tensor) else x, value)


def placed_module(model: nn.Module, example_inputs: Sequence[Any] | torch.Tensor, graph: ComputationGraph,
                  placement: Sequence[int] | np.ndarray, devices: Sequence[str | torch.device], *,
                  example_kwargs: Mapping[str, Any] | None = None) -> torch.fx.GraphModule:
    """``model`` rewritten to run each op of ``graph`` on ``devices[placement[op]]`` (see the module docstring).

    Args:
        model: the model ``graph`` was imported from, by ``from_torch(model, example_inputs, ...)``.
        example_inputs, example_kwargs: as given to ``from_torch`` (their shapes fix the traced program).
        graph: its graph (forward or training; module granular or not).
        placement: a device index per op of ``graph``.
        devices: the devices the indices name (``["cuda:0", "cuda:1"]``; ``["cpu", "cpu"]`` runs anywhere).

    Returns:
        A ``torch.fx.GraphModule`` called like ``model`` with the traced inputs (positional, then keyword
        values in order), with ``transfers``, the copies it makes.

    Raises:
        ValueError: a placement of the wrong length or naming a device ``devices`` lacks; a model that does not
            match the graph (the first op that differs is named).
    """
    p = checked_device_placement(graph, placement)
    devices = [torch.device(d) for d in devices]
    transfers_alias: dict[str, str] = {}  # an input's feeding node -> the input op
    for i, d in enumerate(p.tolist()):
        if d >= len(devices):
            raise ValueError(f"op {graph.nodes[i].id!r} is placed on device {d}, but only {len(devices)} device(s) "
                             f"are given ({', '.join(map(str, devices))})")
    gm, _, _ = trace_model(model, example_inputs, example_kwargs)
    _check_matches(gm, graph)
    index_of = {graph.nodes[i].id: d for i, d in enumerate(p.tolist())}  # fx node -> device index
    holder = _parameter_holders(gm, graph)
    aliases: dict[str, list[str]] = {}  # a tied parameter's first name -> all its names
    for name, first in canonical_names(gm).items():
        aliases.setdefault(first, []).append(name)
    for target, op in holder.items():  # parameters and buffers to their holders' devices
        tensor = _attr(gm, target)
        moved = tensor.detach().to(devices[index_of[op]], copy=True)  # a copy on any device, as on another
        for name in aliases.get(target, [target]):  # a tied parameter stays one parameter under all its names
            owner, _, attr = name.rpartition(".")
            module = gm.get_submodule(owner) if owner else gm
            if isinstance(tensor, nn.Parameter):
                moved = moved if isinstance(moved, nn.Parameter) else nn.Parameter(moved, tensor.requires_grad)
                setattr(module, attr, moved)
            elif attr in module._buffers:
                module.register_buffer(attr, moved)
            else:
                setattr(module, attr, moved)
    for node in list(gm.graph.nodes):
        if node.op == "get_attr" and str(node.target) in holder:
            index_of[node.name] = index_of[holder[str(node.target)]]
        elif node.op == "call_module" and node.name in index_of:  # torch.fx's trace: a module is one op
            gm.get_submodule(str(node.target)).to(devices[index_of[node.name]])
        elif node.op == "call_function" and "device" in node.kwargs and node.name in index_of:
            node.kwargs = {**node.kwargs, "device": devices[index_of[node.name]]}  # a factory op: on its device
        elif node.op == "placeholder":  # an input goes to its op's device first (feeding it, not a transfer)
            with gm.graph.inserting_after(node):
                fed = gm.graph.call_function(move, (node, devices[index_of[node.name]]))
            node.replace_all_uses_with(fed, delete_user_cb=lambda user, fed=fed: user is not fed)
            index_of[fed.name] = index_of.pop(node.name)
            transfers_alias[fed.name] = node.name
    transfers: list[tuple[str, int]] = []
    for node in list(gm.graph.nodes):
        if node.name not in index_of or node.op == "output":
            continue
        copies: dict[int, torch.fx.Node] = {}
        for user in list(node.users):
            there = index_of.get(user.name)
            if there is None or there == index_of[node.name]:
                continue
            if there not in copies:
                with gm.graph.inserting_after(node):
                    copies[there] = gm.graph.call_function(move, (node, devices[there]))
                producer = holder.get(str(node.target)) if node.op == "get_attr" else None
                transfers.append((producer or transfers_alias.get(node.name, node.name), there))
            user.replace_input_with(node, copies[there])
    gm.graph.lint()
    gm.recompile()
    gm.transfers = transfers  # type: ignore[assignment]
    return gm


def write_back(placed: torch.fx.GraphModule, model: nn.Module) -> None:
    """Copy the parameters and buffers of ``placed`` (a :func:`placed_module` of ``model``, trained since) into
    ``model``'s own, each onto the device the model keeps it on: ``placed_module`` trains copies, as
    ``torch.fx`` does, and ``model`` keeps its old values until this is called (``nn.Module.to`` and
    ``accelerate.dispatch_model`` move a model's own parameters instead).

    Raises:
        ValueError: ``placed`` lacks a parameter or buffer of ``model`` (it was placed from another model).
    """
    first = canonical_names(model)
    with torch.no_grad():
        for name, tensor in [*model.named_parameters(), *model.named_buffers()]:
            try:
                source = _attr(placed, first.get(name, name))
            except AttributeError:
                raise ValueError(f"the placed module has no {name!r}: it was placed from another model") from None
            tensor.copy_(source.detach().to(tensor.device))


def _attr(gm: torch.fx.GraphModule, target: str) -> Any:
    """The parameter, buffer or constant ``gm`` holds under the qualified name ``target``."""
    owner, _, attr = target.rpartition(".")
    return getattr(gm.get_submodule(owner) if owner else gm, attr)


def _recorded(gm: torch.fx.GraphModule) -> list[str]:
    """The fx nodes ``from_torch`` makes ops of: placeholders and calls (not export's guard)."""
    return [n.name for n in gm.graph.nodes if n.op == "placeholder" or (
        n.op in ("call_function", "call_method", "call_module") and not str(n.target).startswith("_guards"))]


def _check_matches(gm: torch.fx.GraphModule, graph: ComputationGraph) -> None:
    expected = [node.id for node in graph.nodes if node.phase != "backward" and node.op != "parameter"]
    traced = _recorded(gm)
    for k, (want, got) in enumerate(zip(expected, traced)):
        if want != got:
            raise ValueError(f"the model does not match graph {graph.name!r}: its op {k} is {got!r}, the graph's "
                             f"is {want!r}")
    if len(expected) != len(traced):
        raise ValueError(f"the model does not match graph {graph.name!r}: it traces to {len(traced)} forward ops, "
                         f"the graph has {len(expected)}")


def _parameter_holders(gm: torch.fx.GraphModule, graph: ComputationGraph) -> dict[str, str]:
    """Each parameter or buffer the program reads -> the graph op holding it: its ``parameter`` op when the graph
    has one, else the first op reading it (where ``from_torch`` charged it)."""
    ids = set(graph.ids)
    holder: dict[str, str] = {}
    for node in gm.graph.nodes:
        if node.op != "get_attr":
            continue
        target = str(node.target)
        if f"param:{target}" in ids:
            holder[target] = f"param:{target}"
            continue
        readers = [user.name for user in node.users if user.name in ids]
        if readers:
            holder[target] = readers[0]
    return holder
