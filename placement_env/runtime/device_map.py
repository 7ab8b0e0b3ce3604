"""A placement as Hugging Face accelerate's ``device_map``: :func:`to_device_map`.

accelerate places a model by a map of module names to devices (``dispatch_model(model, device_map)``,
``from_pretrained(device_map=...)``): each named module's parameters and buffers go to its device and its
inputs are moved there when it is called. The map :func:`to_device_map` writes is the coarsest one the
placement implies: a module all of whose ops are on one device is one entry (``{"": 0}`` when everything is on
device 0); a module spread over devices is replaced by its submodules. The model's own glue ops (module
``""``) and ops of a module between its submodules that hold no parameters run where their inputs are, as
accelerate runs them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from placement_env.graph.model import ComputationGraph
from placement_env.plan.module_tree import PlacedModules


def to_device_map(graph: ComputationGraph, placement: Sequence[int] | np.ndarray,
                  devices: Sequence[str | int] | None = None, model: Any = None) -> dict[str, Any]:
    """The coarsest ``{module name: device}`` that ``placement`` (a device per op of ``graph``) implies, in program
    order, for ``accelerate.dispatch_model``.

    Args:
        graph, placement: the graph (with module names) and a device index per op.
        devices: what each device index names in the map (``["cpu", "cuda:1", "disk"]``, accelerate's names);
            default the indices themselves (CUDA ordinals).
        model: the model; when given, a module of it whose parameters no op reads (and which the graph therefore
            does not know) joins the map on the device of the map's first entry, so that ``dispatch_model``, which
            wants every parameter placed, takes the map.

    Raises:
        ValueError: the graph has no module names (import with ``from_torch(..., colocate_modules=True)``);
            the placement splits a module (its own ops on several devices; the error names it and them); or a
            module holds parameters of its own on one device while its submodules are on others; a device index
            ``devices`` does not name (the op is named).
    """
    placed = PlacedModules(graph, placement)
    if devices is not None:
        names = list(devices)
        beyond = np.flatnonzero(placed.placement >= len(names))
        if beyond.size:
            i = int(beyond[0])
            raise ValueError(f"op {graph.nodes[i].id!r} is placed on device {int(placed.placement[i])}, but devices "
                             f"names {len(names)} ({', '.join(map(str, names))})")
    split = placed.split_modules()
    if split:
        name, devices = split[0]
        raise ValueError(f"the placement splits module {name!r}: its ops are on devices {devices}; a device map "
                         "places whole modules (import with from_torch(..., colocate_modules=True) so that "
                         "every placer keeps modules whole)")
    out: dict[str, int] = {}

    def visit(name: str) -> None:
        devices = placed.devices_under(name)
        if len(devices) == 1:
            out[name] = next(iter(devices))
            return
        if name in placed.holds_parameters:
            mine = sorted(placed.own[name])
            label = repr(name) if name else "'' (the model itself)"
            raise ValueError(f"module {label} holds parameters of its own on device {mine[0]} while its submodules "
                             f"are on devices {sorted(devices - set(mine)) or sorted(devices)}: a device map cannot "
                             "express that")
        for child in placed.children(name):
            visit(child)

    visit("")
    if model is not None and out:
        first = next(iter(out.values()))
        covered = list(out)
        for name, module in model.named_modules():
            if not any(True for _ in module.parameters(recurse=False)):
                continue
            if not any(name == c or name.startswith(f"{c}.") or c == "" for c in covered):
                out[name] = first  # parameters no op reads: anywhere will do, the first device
                covered.append(name)
    return out if devices is None else {name: names[d] for name, d in out.items()}
