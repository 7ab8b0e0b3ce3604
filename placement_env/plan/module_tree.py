"""The modules a placement puts where: what :func:`~placement_env.runtime.device_map.to_device_map` and
:func:`~placement_env.plan.split_points.to_split_points` read from a graph that knows its modules.

A graph imported by :func:`~placement_env.importers.pytorch.from_torch` records for each op the qualified name
of its module (node field ``module``; ``""`` is the model itself, ``None`` an input). :class:`PlacedModules`
gathers, for a placement, the devices of each module's own ops, the names of all modules and their ancestors,
and the order modules first appear in (the order of the graph's ops, which is the traced program's).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np

from placement_env.checks import checked_instance
from placement_env.cluster import MAX_DEVICES
from placement_env.graph.model import ComputationGraph


def checked_device_placement(graph: ComputationGraph, placement: Sequence[int] | np.ndarray) -> np.ndarray:
    """``placement`` as an int64 array of one device index (>= 0) per op of ``graph``; raises ``ValueError``
    naming the wrong length or the first op whose entry is not a device index."""
    checked_instance("graph", graph, ComputationGraph)
    values = list(placement.tolist() if isinstance(placement, np.ndarray) else placement)
    if len(values) != graph.num_nodes:
        raise ValueError(f"placement has {len(values)} entries, graph {graph.name!r} has {graph.num_nodes} ops")
    for i, value in enumerate(values):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not 0 <= value < MAX_DEVICES:
            raise ValueError(f"placement entry {i} (op {graph.nodes[i].id!r}) is {value!r}, not a device index "
                             f"(0 to {MAX_DEVICES - 1})")
    return np.asarray(values, dtype=np.int64)


MAX_MODULE_DEPTH = 64
"""The deepest module name taken (``a.b.c`` is 3 deep; real models nest under 20): deeper ones are an error, not
minutes of scanning the module tree."""


def checked_module_name(op: str, name: str) -> str:
    """``name`` if it is a module's qualified name (``""``, or parts joined by dots, none empty, at most
    :data:`MAX_MODULE_DEPTH` of them), else a ``ValueError`` naming op ``op``."""
    if not isinstance(name, str) or (name and any(not part for part in name.split("."))):
        raise ValueError(f"op {op!r} records module {name!r}, not a qualified module name (parts joined by dots, "
                         "none empty: 'layers.3.mlp')")
    if name.count(".") + 1 > MAX_MODULE_DEPTH:
        raise ValueError(f"op {op!r} records a module {name.count('.') + 1} levels deep, more than the "
                         f"{MAX_MODULE_DEPTH} taken")
    return name


def parents(name: str) -> list[str]:
    """``name``'s ancestors from the outermost, itself last: ``"a.b.c"`` -> ``["a", "a.b", "a.b.c"]``
    (``""``, the model, is no one's listed ancestor)."""
    parts = name.split(".") if name else []
    return [".".join(parts[:k]) for k in range(1, len(parts) + 1)]


class PlacedModules:
    """The modules of ``graph`` under ``placement`` (see the module docstring).

    Attributes:
        own: module -> the set of devices its own ops (recorded with exactly that name) are on.
        own_runs: (module, run) -> the devices of one run of its own ops: a run ends where an op of one of its
            submodules comes (GPT-2's ``transformer`` has its own ops before ``h.0`` and after ``ln_f``).
        holds_parameters: the modules whose own ops hold parameters.
        first: module (and every ancestor) -> index of its first op in the graph, its place in program order.

    Raises:
        ValueError: the graph records no module for any op (naming ``from_torch``), or a bad placement.
    """

    def __init__(self, graph: ComputationGraph, placement: Sequence[int] | np.ndarray) -> None:
        self.graph = graph
        self.placement = checked_device_placement(graph, placement)
        if all(node.module is None for node in graph.nodes):
            raise ValueError(f"graph {graph.name!r} has no module names: import the model with "
                             "placement_env.from_torch (and colocate_modules=True, so that placers keep modules "
                             "whole) to export its placements")
        self.own: dict[str, set[int]] = {}
        self.own_runs: dict[tuple[str, int], set[int]] = {}
        self.holds_parameters: set[str] = set()
        self.first: dict[str, int] = {}
        run: dict[str, int] = {}
        interrupted: set[str] = set()
        self.called_again: set[str] = set()  # modules the program enters more than once (a dropout called twice)
        running: set[str] = set()
        closed: set[str] = set()
        for i, node in enumerate(graph.nodes):
            if node.module is None:
                continue
            checked_module_name(node.id, node.module)
            interrupted.update(parents(node.module)[:-1])  # a submodule's op ends its ancestors' runs
            if node.module in interrupted:
                run[node.module] = run.get(node.module, 0) + 1
                interrupted.discard(node.module)
            self.own.setdefault(node.module, set()).add(int(self.placement[i]))
            self.own_runs.setdefault((node.module, run.get(node.module, 0)), set()).add(int(self.placement[i]))
            if node.param_bytes > 0:
                self.holds_parameters.add(node.module)
            for name in ["", *parents(node.module)]:
                self.first.setdefault(name, i)
            if node.phase not in ("backward", "update"):  # the forward program: the calls a runtime sees
                now = set(parents(node.module))  # the modules running at this op: its module and ancestors
                self.called_again |= now & closed
                closed |= running - now
                running = now

    def children(self, name: str) -> list[str]:
        """The modules one level below ``name`` that hold ops, in program order."""
        if not hasattr(self, "_children"):  # every module's children, found once
            below: dict[str, list[str]] = {}
            for m in sorted((m for m in self.first if m), key=lambda m: self.first[m]):
                below.setdefault(m.rpartition(".")[0], []).append(m)
            self._children = below
        return list(self._children.get(name, []))

    def devices_under(self, name: str) -> set[int]:
        """The devices of the ops of ``name`` and of every module below it (all ops with a module, for ``""``)."""
        out: set[int] = set()
        for module, devices in self.own.items():
            if not name or module == name or module.startswith(f"{name}."):
                out |= devices
        return out

    def split_modules(self) -> list[tuple[str, list[int]]]:
        """The submodules with a run of their own ops (:attr:`own_runs`) on more than one device, with that run's
        devices, in program order. A module whose runs around its submodules are on different devices is not
        split: a pipeline stage may begin at any of its submodules."""
        split: dict[str, list[int]] = {}
        for (m, _), devices in self.own_runs.items():
            if m and len(devices) > 1 and m not in split:
                split[m] = sorted(devices)
        return sorted(split.items(), key=lambda item: self.first[item[0]])


def layer_sequence(graph: ComputationGraph) -> list[str]:
    """The model as a list of layers in program order, as a pipeline runtime lists them (DeepSpeed's
    ``PipelineModule(layers=...)``): the model's submodules, a container without ops of its own (an
    ``nn.ModuleList`` / ``nn.Sequential`` of blocks) replaced by its children, and so is a module that holds a
    list of blocks of one structure somewhere below it (``transformer`` of GPT-2: its embeddings, ``h.0`` ..
    ``h.11``, ``ln_f``). Raises ``ValueError`` for a graph
    without module names."""
    return _layers_and_blocks(graph)[0]


def block_layers(graph: ComputationGraph) -> list[str]:
    """Of :func:`layer_sequence`, the layers that are blocks of a list of blocks of one structure (GPT-2's
    ``transformer.h.0`` .. ``h.11``: Megatron-LM's transformer layers), in program order."""
    return _layers_and_blocks(graph)[1]


def _layers_and_blocks(graph: ComputationGraph) -> tuple[list[str], list[str]]:
    """:func:`layer_sequence` and :func:`block_layers`, found once per graph (kept in ``graph.derived``)."""
    cached = graph.derived.get("layers_and_blocks")
    if cached is None:
        cached = graph.derived["layers_and_blocks"] = _find_layers_and_blocks(graph)
    return list(cached[0]), list(cached[1])


def _find_layers_and_blocks(graph: ComputationGraph) -> tuple[list[str], list[str]]:
    placed = PlacedModules(graph, np.zeros(graph.num_nodes, dtype=np.int64))
    layers: list[str] = []
    blocks_found: list[str] = []

    def shape(name: str) -> tuple[str, ...]:
        return tuple(child.rsplit(".", 1)[-1] for child in placed.children(name))

    def repeats_blocks(name: str) -> bool:
        """A list of at least two blocks of one structure (``transformer.h``: ``h.0`` .. ``h.11``)."""
        children = placed.children(name)
        return len(children) >= 2 and bool(shape(children[0])) and all(shape(c) == shape(children[0])
                                                                        for c in children)

    @functools.cache
    def holds_blocks(name: str) -> bool:
        return repeats_blocks(name) or any(holds_blocks(child) for child in placed.children(name))

    def visit(name: str, block: bool = False) -> None:
        children = placed.children(name)
        # a module with glue ops of its own around a list of blocks (GPT2Model: position ids around h.0..h.11)
        # is listed by its parts, and each block of such a list is one layer (even without ops of its own, as
        # BertLayer), as a user lists them for DeepSpeed
        if name and (block or name in placed.own or not children) and not holds_blocks(name):
            layers.append(name)
            if block:
                blocks_found.append(name)
            return
        blocks = repeats_blocks(name)
        for child in children:
            visit(child, blocks)

    visit("")
    return layers, blocks_found
