"""A contiguous placement as pipeline stages: :func:`to_split_points`, for ``torch.distributed.pipelining`` and
DeepSpeed.

A pipeline runtime cuts the model's program into stages, each on its own device, at module boundaries:
``torch.distributed.pipelining.pipeline(module, mb_args, split_spec={"layers.4": SplitPoint.BEGINNING})``
starts a stage where ``layers.4`` is called; DeepSpeed's ``PipelineModule`` holds a list of layers and the
boundaries ``parts`` (stage ``s`` runs ``layers[parts[s]:parts[s + 1]]``, as its ``_partition_layers`` sets
them; a subclass can set them so). Such a placement is *contiguous*: along the forward ops of the graph in
program order (:mod:`placement_env.graph.stage_order`; the model's glue ops, module ``""``, and inputs left
out, since they run where their inputs are), the devices form runs, one per device, a device's run never
resuming after another began.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from placement_env.graph.model import ComputationGraph
from placement_env.graph.stage_order import forward_ops, stage_order

from .module_tree import PlacedModules, parents


@dataclass(frozen=True)
class SplitPoints:
    """The stages of a contiguous placement.

    Attributes:
        devices: the device of each stage, in order.
        split_spec: the module where each stage after the first begins, for
            ``pipeline(split_spec={name: SplitPoint.BEGINNING for name in split_spec})``.
        layers: the modules in program order, each within one stage, each one that runs ops of its own (a
            container spanning stages, or with no op of its own, as an ``nn.ModuleList`` of experts that is never
            called itself, replaced by its children): DeepSpeed's ``layers``.
        parts: DeepSpeed's stage boundaries into ``layers``: ``[0, ..., len(layers)]``.
    """

    devices: list[int]
    split_spec: list[str]
    layers: list[str]
    parts: list[int]

    def to_dict(self) -> dict:
        return {"devices": self.devices, "split_spec": {name: "BEGINNING" for name in self.split_spec},
                "layers": self.layers, "parts": self.parts}


def to_split_points(graph: ComputationGraph, placement: Sequence[int] | np.ndarray) -> SplitPoints:
    """The pipeline stages of ``placement`` (a device per op of ``graph``; see the module docstring).

    Raises:
        ValueError: the graph has no module names, or no op of a submodule (no stage could begin anywhere); the
            placement splits a module; a stage would begin at a module the program enters more than once; it is
            not contiguous (the error names the first op whose device had already given way to another).
    """
    placed = PlacedModules(graph, placement)
    split = placed.split_modules()
    if split:
        name, devices = split[0]
        raise ValueError(f"the placement splits module {name!r}: its ops are on devices {devices}; pipeline "
                         "stages begin at module boundaries")
    counted = forward_ops(graph) & np.array([bool(node.module) for node in graph.nodes], dtype=bool)
    stage_devices, stage_first = stage_order(graph, placed.placement, counted)
    order, first_op = stage_devices.tolist(), stage_first.tolist()
    stage_of = {d: k for k, d in enumerate(order)}
    ops = np.flatnonzero(counted)
    ops = ops[np.argsort(graph.topo_index[ops], kind="stable")]
    stage = np.array([stage_of[d] for d in placed.placement[ops].tolist()], dtype=np.int64)
    reached = np.maximum.accumulate(stage) if stage.size else stage
    back = np.flatnonzero(stage < reached)
    if back.size:
        i, latest = int(ops[back[0]]), order[int(reached[back[0]])]
        node = graph.nodes[i]
        raise ValueError(f"the placement is not contiguous: op {node.id!r} (module {node.module!r}) is on "
                         f"device {int(placed.placement[i])}, whose stage ended when device {latest}'s began; "
                         "pipeline stages need each device's ops in one run of the program")
    if not order:
        raise ValueError(f"graph {graph.name!r} has no op of a submodule: a pipeline stage begins at a submodule, "
                         "and this model's ops (and parameters) are all its own (module '')")
    # the stages of each module's own ops (several for a module whose own ops lie around submodules in stages)
    stages_of_module = {m: {stage_of[d] for d in devices if d in stage_of} for m, devices in placed.own.items() if m}
    split_spec = []
    for k in range(1, len(order)):
        module = graph.nodes[first_op[k]].module or ""
        # the module of the stage's first op begins there (no module is split); so may some of its ancestors:
        # the outermost one that lies within the stage, else the module itself
        begins = [a for a in parents(module) if placed.first[a] == first_op[k]]
        contained = [a for a in begins if set().union(*(stages_of_module[m] for m in stages_of_module
                                                         if m == a or m.startswith(f"{a}."))) == {k}]
        # torch.distributed.pipelining splits at every call of a split module: one the program enters twice (a
        # dropout of a block's two residual branches) would begin two stages
        candidates = [a for a in [*contained, module] if a not in placed.called_again]
        if not candidates:
            raise ValueError(f"stage {k} would begin at module {module!r}, which the program enters more than once: "
                             "a pipeline runtime would begin a stage at each call; move the cut to a module called "
                             "once")
        split_spec.append(candidates[0])
    layers: list[str] = []

    def stages_under(name: str) -> set[int]:
        return set().union(*(stages_of_module[m] for m in stages_of_module
                             if not name or m == name or m.startswith(f"{name}.")))

    def flatten(name: str) -> None:
        stages = stages_under(name)
        container = name not in placed.own and bool(placed.children(name))  # a ModuleList is never called
        if name and len(stages) == 1 and not container:
            layers.append(name)
            return
        for child in placed.children(name):
            flatten(child)

    flatten("")
    stage_of_layer = [min(stages_under(layer)) for layer in layers]
    parts = [0] + [stage_of_layer.index(k) for k in range(1, len(order))] + [len(layers)]
    return SplitPoints(order, split_spec, layers, parts)
