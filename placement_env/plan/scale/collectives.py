"""What a collective costs on a :class:`~placement_env.plan.scale.gpu_model.GpuCluster`: :func:`collective_seconds`.

A group of n GPUs, g of them in each node it spans (n / g nodes), runs a collective as NCCL does on NVSwitch
nodes: within each node over NVLink, across nodes each GPU over its own share of the network (a DGX has an
adapter a GPU), on ``1 / g`` of the bytes (hierarchical). For ``S`` bytes:

* all-reduce: ``2 (g - 1) / g x S / (NVLink x e_nvlink) + 2 (k - 1) / k x S / g / (network x e_network)`` with
  ``k = n / g`` nodes, plus ``2 (g - 1)`` NVLink and ``2 (k - 1)`` network latencies;
* reduce-scatter and all-gather: half of each term (the all-reduce is one of each);
* a point-to-point send: a latency and ``S`` over the link (NVLink within a node, the network across).

So a tensor-parallel group that crosses nodes pays the network for each of its all-reduces.
"""

from __future__ import annotations

from .gpu_model import GpuCluster

KINDS = ("all-reduce", "reduce-scatter", "all-gather", "send")


def collective_seconds(kind: str, nbytes: float, members: int, per_node: int, cluster: GpuCluster) -> float:
    """Seconds of collective ``kind`` (:data:`KINDS`) of ``nbytes`` (each member's buffer) over ``members`` GPUs,
    ``per_node`` of them in each node they span (``members`` of them for a ``send``: 2 within a node, 1 across).

    Raises ``ValueError`` for an unknown kind or a group that does not fill its nodes evenly."""
    if kind not in KINDS:
        raise ValueError(f"unknown collective {kind!r}; known: {', '.join(KINDS)}")
    gpu, e = cluster.gpu, cluster.gpu.efficiencies
    nvlink, network = gpu.nvlink_bandwidth * e.nvlink, cluster.network_bandwidth * e.network
    if kind == "send":
        if members < 2 or nbytes <= 0:
            return 0.0
        return (gpu.latency_nvlink + nbytes / nvlink) if per_node >= 2 else (gpu.latency_network + nbytes / network)
    if members < 2 or nbytes <= 0:
        return 0.0
    if per_node < 1 or members % per_node:
        raise ValueError(f"a group of {members} GPUs cannot have {per_node} in each of its nodes")
    g, k = per_node, members // per_node
    seconds = 0.0
    if g > 1:
        seconds += 2 * (g - 1) / g * nbytes / nvlink + 2 * (g - 1) * gpu.latency_nvlink
    if k > 1:
        seconds += 2 * (k - 1) / k * nbytes / g / network + 2 * (k - 1) * gpu.latency_network
    return seconds if kind == "all-reduce" else seconds / 2


__all__ = ["KINDS", "collective_seconds"]
