"""What the steering policy sees of a placement: per unit, why it might move; per unit and device, why it might go
there.

:class:`SteeringView` holds one problem's static arrays (each unit's compute, memory and edges with their bytes;
each device's speed, memory and node), built once; :meth:`SteeringView.unit_features` and
:meth:`SteeringView.device_features` read a current placement (a device per unit) in time linear in the units and
unit edges. Every feature is scale-free (a ratio or a 0/1 flag), so that one policy reads a 300-unit graph on 3
devices and a 3,000-unit graph on 64 alike:

unit features (:data:`UNIT_FEATURES`)
    ``device_load``: its device's compute seconds over the busiest device's; ``on_busiest``: 1 on the busiest
    device; ``cut_share``: the share of its edges' bytes that cross to another device; ``load_share``: its
    compute over its device's; ``over_memory``: how far its device is over its memory (0 within it, 1 at twice).

device features (:data:`DEVICE_FEATURES`), for unit ``u`` and device ``d``
    ``bytes_there``: the share of ``u``'s edge bytes whose other end is on ``d``; ``load``: ``d``'s compute
    seconds over the busiest device's; ``fill``: ``d``'s memory with ``u`` added over its capacity (at most 2);
    ``same_node``: 1 when ``d`` shares ``u``'s node (the fast links); ``speed``: ``d``'s speed over the fastest.

stage features (:data:`STAGE_FEATURES`), for the boundary between two consecutive pipeline stages (contiguous
mode, :meth:`SteeringView.boundary_features`)
    ``heavier_side``: the heavier stage's compute over the busiest device's; ``imbalance``: the two stages'
    difference over the busiest; ``bytes_across``: the bytes between the two stages over the most between any
    two consecutive stages; ``at_busiest``: 1 when either is the busiest; ``toward_lighter``: the signed
    imbalance (right minus left, over the busiest), whose weight sets which side grows.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from placement_env.cluster import Cluster
from placement_env.graph.model import ComputationGraph
from placement_env.json_files import digest_of
from placement_env.sim.simulator import DEFAULT_PARAM_FACTOR

UNIT_FEATURES = ("device_load", "on_busiest", "cut_share", "load_share", "over_memory")
DEVICE_FEATURES = ("bytes_there", "load", "fill", "same_node", "speed")
STAGE_FEATURES = ("heavier_side", "imbalance", "bytes_across", "at_busiest", "toward_lighter")


@dataclass(frozen=True)
class SteeringView:
    """One problem's static arrays (module docstring); :func:`steering_view` builds it.

    Attributes:
        cost: compute seconds per unit on the reference device.
        memory: bytes per unit (parameters times the step's factor, plus the forward outputs kept for backward).
        source, target, weight: the unit edges taken both ways (CSR by ``source``: ``offsets``), with the bytes
            of the tensors between the two units.
        offsets: ``offsets[u]:offsets[u + 1]`` are unit ``u``'s entries in ``target`` and ``weight``.
        speed, capacity: per device, its speed and memory (bytes).
        node: per device, the node it belongs to (devices whose link to each other is the cluster's fastest).
    """

    cost: np.ndarray
    memory: np.ndarray
    source: np.ndarray
    target: np.ndarray
    weight: np.ndarray
    offsets: np.ndarray
    speed: np.ndarray
    capacity: np.ndarray
    node: np.ndarray

    @property
    def num_units(self) -> int:
        return int(self.cost.size)

    @property
    def num_devices(self) -> int:
        return int(self.speed.size)

    def loads(self, current: np.ndarray) -> np.ndarray:
        """Compute seconds per device of the placement ``current`` (a device per unit)."""
        return np.bincount(current, weights=self.cost, minlength=self.num_devices) / self.speed

    def unit_features(self, current: np.ndarray) -> np.ndarray:
        """(units, len(UNIT_FEATURES)) float64: the unit features of the placement ``current``."""
        m = self.num_devices
        load = self.loads(current)
        busiest = max(float(load.max()), 1e-300)
        used = np.bincount(current, weights=self.memory, minlength=m)
        crossing = current[self.source] != current[self.target]
        total = np.bincount(self.source, weights=self.weight, minlength=self.num_units)
        cut = np.bincount(self.source, weights=self.weight * crossing, minlength=self.num_units)
        own = load[current]
        return np.column_stack([
            own / busiest,
            (own >= busiest).astype(np.float64),
            cut / np.maximum(total, 1e-300),
            self.cost / self.speed[current] / np.maximum(own, 1e-300),
            np.clip(used / self.capacity - 1.0, 0.0, 1.0)[current],
        ])

    def boundary_features(self, current: np.ndarray, devices: np.ndarray) -> np.ndarray:
        """(len(devices) - 1, len(STAGE_FEATURES)) float64: the features of each boundary between consecutive
        stages, whose devices in program order are ``devices``, under the contiguous placement ``current``."""
        m = self.num_devices
        load = self.loads(current)
        busiest = max(float(load.max()), 1e-300)
        pair = np.bincount(current[self.source] * m + current[self.target], weights=self.weight,
                           minlength=m * m).reshape(m, m)
        left, right = load[devices[:-1]], load[devices[1:]]
        across = pair[devices[:-1], devices[1:]]
        return np.column_stack([
            np.maximum(left, right) / busiest,
            np.abs(left - right) / busiest,
            across / max(float(across.max(initial=0.0)), 1e-300),
            ((left >= busiest) | (right >= busiest)).astype(np.float64),
            (right - left) / busiest,
        ])

    def device_features(self, current: np.ndarray, units: np.ndarray) -> np.ndarray:
        """(len(units), devices, len(DEVICE_FEATURES)) float64: the device features of each of ``units`` (unit
        indices, repeats allowed) under the placement ``current``."""
        m, k = self.num_devices, units.size
        load = self.loads(current)
        used = np.bincount(current, weights=self.memory, minlength=m)
        starts, ends = self.offsets[units], self.offsets[units + 1]
        lengths = ends - starts
        row = np.repeat(np.arange(k), lengths)
        entry = np.arange(int(lengths.sum())) - np.repeat(np.cumsum(lengths) - lengths, lengths) \
            + np.repeat(starts, lengths)
        there = np.bincount(row * m + current[self.target[entry]], weights=self.weight[entry],
                            minlength=k * m).reshape(k, m)
        total = there.sum(axis=1, keepdims=True)
        fill = (used[None, :] + self.memory[units][:, None]) / self.capacity[None, :]
        same = self.node[None, :] == self.node[current[units]][:, None]
        return np.stack([
            there / np.maximum(total, 1e-300),
            np.broadcast_to(load / max(float(load.max()), 1e-300), (k, m)),
            np.minimum(fill, 2.0),
            same.astype(np.float64),
            np.broadcast_to(self.speed / self.speed.max(), (k, m)),
        ], axis=2)


def device_nodes(cluster: Cluster) -> np.ndarray:
    """Per device, its node (the smallest device index in it): two devices share a node when the link between
    them is the fastest link of each (NVLink within a node is faster than the network out of it), and through
    such pairs."""
    m = cluster.num_devices
    bandwidth = np.where(np.eye(m, dtype=bool), -np.inf, cluster.bandwidth)
    best = bandwidth.max(axis=1) if m > 1 else np.zeros(1)
    fast = (bandwidth >= best[:, None] * (1 - 1e-9)) & (bandwidth >= best[None, :] * (1 - 1e-9))
    node = np.arange(m)
    for _ in range(m):  # label propagation: the smallest device index of each component
        updated = np.minimum(node, np.where(fast | fast.T, node[None, :], m).min(axis=1))
        if np.array_equal(updated, node):
            break
        node = updated
    return node


def steering_view(graph: ComputationGraph, cluster: Cluster,
                  param_factor: float = DEFAULT_PARAM_FACTOR) -> SteeringView:
    """The :class:`SteeringView` of ``graph`` on ``cluster`` (cached on the graph per cluster and factor)."""
    key = "steering_view " + digest_of([float(param_factor), cluster.bandwidth.tobytes().hex(),
                                        cluster.speed.tolist(), cluster.memory.tolist()])
    cached = graph.derived.get(key)
    if cached is not None:
        return cached
    nu, unit = graph.num_units, graph.unit_of
    forward = np.array([n.phase != "backward" for n in graph.nodes], dtype=bool)
    memory = np.bincount(unit, weights=graph.param_bytes * param_factor + graph.output_bytes * forward,
                         minlength=nu)
    a, b = unit[graph.edge_src], unit[graph.edge_dst]
    nbytes = graph.edge_bytes
    keep = a != b
    a, b, nbytes = a[keep], b[keep], nbytes[keep]
    source, target, weight = np.concatenate([a, b]), np.concatenate([b, a]), np.concatenate([nbytes, nbytes])
    order = np.argsort(source, kind="stable")
    source, target, weight = source[order], target[order], weight[order]
    offsets = np.zeros(nu + 1, dtype=np.int64)
    np.cumsum(np.bincount(source, minlength=nu), out=offsets[1:])
    view = SteeringView(np.bincount(unit, weights=graph.cost, minlength=nu), memory, source.astype(np.int64),
                        target.astype(np.int64), weight, offsets,
                        cluster.speed, cluster.memory, device_nodes(cluster))
    graph.derived[key] = view
    return view
