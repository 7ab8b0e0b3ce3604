"""What the runtimes do by default, as placers: DeepSpeed's ``uniform`` and ``parameters`` partitions, and Hugging
Face accelerate's ``device_map="balanced"``.

DeepSpeed's ``PipelineModule(layers, num_stages, partition_method=...)`` cuts its list of layers into contiguous
stages: ``"uniform"`` gives each stage the same number of layers (``partition_uniform``: the first
``len(layers) % num_stages`` stages one more), ``"parameters"`` balances the stages' trainable parameters
(``partition_balanced``: the contiguous cut whose heaviest stage is lightest). These are those two rules, written
here on the graph's layers (:func:`~placement_env.plan.module_tree.layer_sequence`, the model's submodules with
containers expanded, as a user lists them for DeepSpeed; parameter bytes stand for parameter counts, which gives
the same cuts for one precision). Stage ``s`` goes to device ``s``; an op outside every layer (an input, the
model's glue) goes with the op before it in program order, or, first of all, to stage 0. They ignore compute,
communication and memory, as DeepSpeed does; their placements are reported as they are (not repaired for
memory), so that a user sees what the runtime would run. They need a graph with module names
(``from_torch``); on another graph they raise :class:`~baselines.memory.PlacementInfeasibleError`.

``accelerate-balanced`` is accelerate's own code: the graph's modules are rebuilt as an ``nn.Module`` tree on the
meta device (each module holding its ops' parameter bytes, as float32; children in program order), and
``accelerate.utils.get_balanced_memory`` and ``infer_auto_device_map`` place it, as ``from_pretrained(...,
device_map="balanced")`` does, with each device's memory as its ``max_memory``: devices filled in module order
by parameter bytes alone, a module split into its children where it does not fit. A module it would offload to
the CPU or disk raises :class:`~baselines.memory.PlacementInfeasibleError` naming it.
"""

from __future__ import annotations

import logging

import numpy as np

from placement_env.cluster import Cluster
from placement_env.graph.model import ComputationGraph
from placement_env.plan.layers import placement_of_layers, placement_of_modules
from placement_env.plan.module_tree import layer_sequence
from placement_env.plan.partitions import partition_balanced, partition_uniform

from .memory import PlacementInfeasibleError


def _layers(graph: ComputationGraph, cluster: Cluster) -> list[str]:
    try:
        return layer_sequence(graph)
    except ValueError as error:
        raise PlacementInfeasibleError(f"a DeepSpeed partition needs the graph's layers: {error}") from None


def deepspeed_uniform(graph: ComputationGraph, cluster: Cluster, seed: int = 0) -> np.ndarray:
    """DeepSpeed's ``partition_method="uniform"``: the same number of layers per device."""
    layers = _layers(graph, cluster)
    return placement_of_layers(graph, layers, partition_uniform(len(layers), cluster.num_devices))


def deepspeed_parameters(graph: ComputationGraph, cluster: Cluster, seed: int = 0) -> np.ndarray:
    """DeepSpeed's ``partition_method="parameters"``: the stages' parameter bytes balanced."""
    layers = _layers(graph, cluster)
    weight = {layer: 0.0 for layer in layers}
    for node in graph.nodes:
        if node.module:
            layer = next((x for x in layers if node.module == x or node.module.startswith(f"{x}.")), None)
            if layer is not None:
                weight[layer] += node.param_bytes
    return placement_of_layers(graph, layers, partition_balanced([weight[x] for x in layers], cluster.num_devices))


def accelerate_balanced(graph: ComputationGraph, cluster: Cluster, seed: int = 0) -> np.ndarray:
    """accelerate's ``device_map="balanced"`` of the graph's modules (see the module docstring)."""
    try:  # optional (the [runtime] extra), and it loads torch: only for this placer

        import torch
        from accelerate import infer_auto_device_map
        from accelerate.utils import get_balanced_memory
    except ImportError:
        raise PlacementInfeasibleError("accelerate-balanced needs accelerate: pip install -e \".[runtime]\"") from None
    if all(node.module is None for node in graph.nodes):
        raise PlacementInfeasibleError(f"accelerate's device map needs the graph's modules: graph {graph.name!r} has "
                                       "no module names (import the model with placement_env.from_torch)")
    sizes: dict[str, float] = {}
    for node in graph.nodes:
        if node.module is not None:
            sizes[node.module] = sizes.get(node.module, 0.0) + node.param_bytes
    root = torch.nn.Module()
    for name, size in sizes.items():  # in program order
        module = root
        for part in [p for p in name.split(".") if name]:
            if part not in module._modules:
                module.add_module(part, torch.nn.Module())
            module = module._modules[part]  # type: ignore[assignment]
        numel = int(size // 4)
        if numel:
            module.register_parameter("weight", torch.nn.Parameter(torch.empty(numel, device="meta")))
    memory = {d: int(cluster.memory[d]) for d in range(cluster.num_devices)}
    quiet = logging.getLogger("accelerate")
    level, quiet.level = quiet.level, logging.ERROR  # "Device 0 is not available": we only plan here
    try:
        device_map = infer_auto_device_map(root, max_memory=get_balanced_memory(root, max_memory=memory))
    finally:
        quiet.setLevel(level)
    offloaded = [name for name, device in device_map.items() if not isinstance(device, int)]
    if offloaded:
        raise PlacementInfeasibleError(f"accelerate's balanced map puts module {offloaded[0]!r} on "
                                       f"{device_map[offloaded[0]]!r}: the parameters do not fit the devices")
    return placement_of_modules(graph, {name: int(device) for name, device in device_map.items()})
