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

import numpy as np

from placement_env.graph.model import ComputationGraph
from placement_env.plan.module_tree import PlacedModules


def to_device_map(graph: ComputationGraph, placement: Sequence[int] | np.ndarray) -> dict[str, int]:
    """The coarsest ``{module name: device index}`` that ``placement`` (a device per op of ``graph``) implies,
    in program order, for ``accelerate.dispatch_model`` (give it ``{name: devices[d]}`` for other device names).

    Raises:
        ValueError: the graph has no module names (import with ``from_torch(..., colocate_modules=True)``);
            the placement splits a module (its own ops on several devices; the error names it and them); or a
            module holds parameters of its own on one device while its submodules are on others.
    """
    placed = PlacedModules(graph, placement)
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
    return out
