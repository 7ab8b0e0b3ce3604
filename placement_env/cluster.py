"""Clusters of devices and the links between them (``docs/spec/simulator.md`` section 2).

Units: ``speed`` is relative to the reference device (1.0 = one Tesla P100),
``memory_bytes`` in bytes, ``bandwidth`` in bytes/s and ``latency`` in
seconds, row = sender, column = receiver; the diagonal is ignored.
"""

from __future__ import annotations

import gzip
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from placement_env.checks import checked_count, is_number
from placement_env.json_files import read_json_file, write_json_file

CLUSTER_FORMAT = "device-placement-cluster"
CLUSTER_VERSION = 1
GIB = 1024**3


SPEED_RANGE = (1e-6, 1e6)  # device speeds times a P100 outside it make step times underflow or overflow
MIN_BANDWIDTH = 1.0  # bytes/s: slower links make transfer times overflow
MAX_DEVICES = 4096
"""The most devices a cluster may have: its two link matrices then take 128 MiB each (a larger count is an error,
not an hour of building matrices)."""


@dataclass(frozen=True)
class DeviceKind:
    """A device model and the link it sits on.

    Attributes:
        speed: FP32 peak throughput relative to the P100 reference (9.3 TFLOP/s).
        memory_bytes: device memory in bytes.
        bandwidth: bytes/s of one direction of a device-to-device link.
        latency: seconds of fixed cost per transfer.
        description: what the figures model.
        node_network: bytes/s one direction of the network a node of these devices has to other nodes, in all
            (its network cards together); a GPU's share when ``k`` of them form a node is ``node_network / k``.
        network_latency: seconds of fixed cost per transfer between nodes.
    """

    speed: float
    memory_bytes: int
    bandwidth: float
    latency: float
    description: str
    node_network: float = 12.5e9
    network_latency: float = 10e-6


# Datasheet figures (NVIDIA product pages / datasheets):
# * Tesla P100 PCIe 16 GB: 9.3 TFLOP/s FP32, 16 GB HBM2 at 732 GB/s. PCIe 3.0 x16:
#   8 GT/s x 16 lanes x 128/130 = 15.75 GB/s per direction theoretical; we use
#   12 GB/s, the rate device-to-device copies typically reach (~76%), and 10 us
#   per transfer (launch + PCIe round trip), as in the spec's example cluster.
# * Tesla K80: one board = two GK210 GPUs, 8.73 TFLOP/s FP32 (boost) and 24 GB
#   GDDR5 in all, i.e. per GPU 4.37 TFLOP/s and 12 GB, on PCIe 3.0 x16.
# * Tesla V100 SXM2 32 GB: 15.7 TFLOP/s FP32; NVLink 2.0, 300 GB/s aggregate
#   over 6 links (25 GB/s per link per direction); in a DGX-1 hybrid cube-mesh a
#   GPU pair is joined by 1-2 links: we use 2 links = 50 GB/s per direction.
# * A100 SXM4 80 GB: 19.5 TFLOP/s FP32; NVLink 3 with NVSwitch, 600 GB/s
#   bidirectional = 300 GB/s per direction between any pair.
# * H100 SXM5 80 GB: 67 TFLOP/s FP32; NVLink 4 with NVSwitch, 900 GB/s
#   bidirectional = 450 GB/s per direction between any pair.
# Between nodes (InfiniBand; per direction, 1 Gb/s = 0.125 GB/s):
# * P100 / K80 servers: one 100 Gb/s EDR adapter per node = 12.5 GB/s for all its GPUs.
# * DGX-1 (V100): four 100 Gb/s EDR adapters = 50 GB/s per node.
# * DGX A100: eight 200 Gb/s HDR adapters (one per GPU) = 200 GB/s per node.
# * DGX H100: eight 400 Gb/s NDR ports (one per GPU) = 400 GB/s per node.
# 10 us per transfer between nodes (RDMA plus the collective library's software path), as the PCIe figure.
# Speeds are FP32 peak ratios to the P100: a deliberately simple model (tensor
# cores, clocks and memory-bound ops would change the ratio per op).
_P100_TFLOPS = 9.3
DEVICE_KINDS: dict[str, DeviceKind] = {
    "p100": DeviceKind(1.0, 16 * GIB, 12e9, 10e-6, "Tesla P100 16 GB on PCIe 3.0 x16", 12.5e9),
    "k80": DeviceKind(4.37 / _P100_TFLOPS, 12 * GIB, 12e9, 10e-6, "Tesla K80 (one GK210, 12 GB) on PCIe 3.0 x16",
                      12.5e9),
    "v100-nvlink": DeviceKind(15.7 / _P100_TFLOPS, 32 * GIB, 50e9, 5e-6, "Tesla V100 SXM2 32 GB, NVLink 2.0 (2 links)",
                              50e9),
    "a100-nvlink": DeviceKind(19.5 / _P100_TFLOPS, 80 * GIB, 300e9, 5e-6, "A100 SXM4 80 GB, NVLink 3 / NVSwitch",
                              200e9),
    "h100-nvlink": DeviceKind(67.0 / _P100_TFLOPS, 80 * GIB, 450e9, 5e-6, "H100 SXM5 80 GB, NVLink 4 / NVSwitch",
                              400e9),
}
DEFAULT_KIND = "p100"


def _objects_in(path: str | os.PathLike) -> int:
    """How many JSON objects (``{``) a file holds, read in 1 MiB chunks (gzipped when its name ends in ``.gz``): a
    count that needs no memory, before the file is parsed. 0 when the file cannot be read (the reader says why)."""
    count = 0
    if not os.path.isfile(path):  # a pipe would block: the reader refuses what is not a regular file
        return 0
    try:
        opener = gzip.open if str(path).endswith(".gz") else open
        with opener(path, "rb") as f:
            while chunk := f.read(2**20):
                count += chunk.count(b"{")
    except (OSError, EOFError, gzip.BadGzipFile):
        return 0
    return count


def _link_matrix(label: str, values, devices: Sequence[Device]) -> np.ndarray:
    """``values`` (M x M nested sequence or array) as a float64 array, with a zero diagonal.

    Raises:
        ValueError: if it is not M x M (naming the short row), or naming the
            first entry ``label[a][b]`` that is not a number (a string, null, a list).
    """
    m = len(devices)
    if isinstance(values, np.ndarray) and values.shape == (m, m) and values.dtype.kind in "fiu":
        mat = values.astype(np.float64)  # the fast path of numeric arrays: nothing to check entry by entry
        np.fill_diagonal(mat, 0.0)
        return mat
    rows = values.tolist() if isinstance(values, np.ndarray) else values
    if not isinstance(rows, (list, tuple)) or len(rows) != m:
        got = f"{len(rows)} rows" if isinstance(rows, (list, tuple)) else repr(rows)
        raise ValueError(f"{label} must be {m}x{m} for {m} devices, got {got}")
    for a, row in enumerate(rows):
        if not isinstance(row, (list, tuple)) or len(row) != m:
            got = f"{len(row)} entries" if isinstance(row, (list, tuple)) else repr(row)
            raise ValueError(f"{label} must be {m}x{m} for {m} devices, row {a} ({devices[a].name}) has {got}")
    mat = np.zeros((m, m))
    for a, row in enumerate(rows):
        for b, value in enumerate(row):
            if a == b:  # the diagonal is ignored (spec section 2), whatever it holds
                continue
            if not is_number(value):
                raise ValueError(f"{label}[{a}][{b}] ({devices[a].name} -> {devices[b].name}) must be a number, "
                                 f"got {value!r}")
            mat[a, b] = value
    return mat


@dataclass(frozen=True)
class Device:
    """One device: a name, a speed relative to the reference device, and memory in bytes."""

    name: str
    speed: float
    memory_bytes: int


class Cluster:
    """M devices and, for every ordered pair, a link bandwidth (bytes/s) and latency (s).

    Args:
        devices: the devices, in device-index order.
        bandwidth: M x M bytes/s, row = sender; the diagonal is ignored.
        latency: M x M seconds, row = sender; the diagonal is ignored.
        name: a label for reports.

    Raises:
        ValueError: naming the device or link for a non-positive speed, memory
            or bandwidth, a negative latency, a NaN, a matrix entry that is not a
            number, or matrices of the wrong shape.
    """

    def __init__(self, devices: Sequence[Device], bandwidth, latency, name: str = "cluster") -> None:
        devices = list(devices)
        if not devices:
            raise ValueError("a cluster needs at least one device")
        m = len(devices)
        if m > MAX_DEVICES:
            raise ValueError(f"a cluster of {m} devices is more than the {MAX_DEVICES} a cluster may have")
        for i, d in enumerate(devices):
            for field, value in (("speed", d.speed), ("memory_bytes", d.memory_bytes)):
                if not is_number(value):
                    raise ValueError(f"device {i} ({d.name!r}): {field} must be a number, got {value!r}")
                if not math.isfinite(float(value)) or float(value) <= 0:
                    raise ValueError(f"device {i} ({d.name!r}): {field} must be positive and finite, got {value!r}")
            if not SPEED_RANGE[0] <= float(d.speed) <= SPEED_RANGE[1]:
                raise ValueError(f"device {i} ({d.name!r}): speed {d.speed!r} is outside [{SPEED_RANGE[0]:g}, "
                                 f"{SPEED_RANGE[1]:g}] (times a P100): no device is that slow or that fast")
        bw = _link_matrix("bandwidth", bandwidth, devices)
        lat = _link_matrix("latency", latency, devices)
        off = ~np.eye(m, dtype=bool)
        for a, b in zip(*np.nonzero(off & ~(np.isfinite(bw) & (bw > 0)))):
            raise ValueError(f"bandwidth[{a}][{b}] ({devices[a].name} -> {devices[b].name}) must be positive "
                             f"and finite, got {float(bw[a, b])!r}")
        for a, b in zip(*np.nonzero(off & (bw < MIN_BANDWIDTH))):
            raise ValueError(f"bandwidth[{a}][{b}] ({devices[a].name} -> {devices[b].name}) is {float(bw[a, b])!r} "
                             f"bytes/s, below the {MIN_BANDWIDTH:g} of any link")
        for a, b in zip(*np.nonzero(off & ~(np.isfinite(lat) & (lat >= 0)))):
            raise ValueError(f"latency[{a}][{b}] ({devices[a].name} -> {devices[b].name}) must be >= 0 "
                             f"and finite, got {float(lat[a, b])!r}")
        np.fill_diagonal(bw, np.inf)  # never used: same-device inputs need no transfer
        np.fill_diagonal(lat, 0.0)
        self.devices: tuple[Device, ...] = tuple(devices)
        self.bandwidth = bw
        self.latency = lat
        self.speed = np.array([float(d.speed) for d in devices], dtype=np.float64)
        self.memory = np.array([float(d.memory_bytes) for d in devices], dtype=np.float64)
        for arr in (self.bandwidth, self.latency, self.speed, self.memory):
            arr.setflags(write=False)
        self.name = name

    @property
    def num_devices(self) -> int:
        return len(self.devices)

    def __len__(self) -> int:
        return self.num_devices

    def __repr__(self) -> str:
        return f"Cluster(name={self.name!r}, devices={self.num_devices})"

    # ------------------------------------------------------------ builders
    @classmethod
    def preset(cls, kind: str = DEFAULT_KIND, num_devices: int = 3, per_node: int | None = None) -> Cluster:
        """``num_devices`` identical devices of a named kind (see ``DEVICE_KINDS``), fully connected; with
        ``per_node``, in nodes of that many (devices ``0..per_node-1`` the first node, ...): within a node the
        kind's link, between nodes the node's network shared by its devices (``node_network / per_node`` each
        way per pair, ``network_latency``).

        Raises:
            ValueError: an unknown kind, a count below 1, or a ``per_node`` below 1 or not dividing
                ``num_devices`` (naming it).
        """
        m = checked_count("the number of devices", num_devices)
        if m > MAX_DEVICES:
            raise ValueError(f"the number of devices must be at most {MAX_DEVICES}, got {m}")
        cluster = cls.heterogeneous([kind] * m)
        if per_node is None:
            return cluster
        k = checked_count("per_node", per_node)
        if m % k:
            raise ValueError(f"per_node={k} does not divide the {m} devices into whole nodes")
        spec = DEVICE_KINDS[kind]
        node = np.arange(m) // k
        across = node[:, None] != node[None, :]
        bandwidth = np.where(across, spec.node_network / k, cluster.bandwidth)
        latency = np.where(across, spec.network_latency, cluster.latency)
        return cls(cluster.devices, bandwidth, latency, name=f"{m // k}x{k}x{kind}")

    @classmethod
    def of_nodes(cls, nodes: Sequence[tuple[str, int]]) -> Cluster:
        """Nodes of possibly different kinds, ``[(kind, devices), ...]`` (devices numbered node by node): within a
        node its kind's link, between two nodes the slower of their networks shared by each node's devices (as
        :meth:`preset` with ``per_node``, which ``of_nodes([(kind, k)] * n)`` equals).

        Raises:
            ValueError: an unknown kind or a node of fewer than one device (naming it), no node.
        """
        if not nodes:
            raise ValueError("a cluster needs at least one node")
        kinds, node_of = [], []
        for i, (kind, count) in enumerate(nodes):
            checked_count(f"node {i}'s devices", count)
            kinds += [kind] * count
            node_of += [i] * count
        cluster = cls.heterogeneous(kinds)
        node = np.array(node_of)
        share = np.array([DEVICE_KINDS[kind].node_network / count for kind, count in nodes])
        across = node[:, None] != node[None, :]
        bandwidth = np.where(across, np.minimum.outer(share[node], share[node]), cluster.bandwidth)
        wait = np.array([DEVICE_KINDS[kind].network_latency for kind, _ in nodes])
        latency = np.where(across, np.maximum.outer(wait[node], wait[node]), cluster.latency)
        name = "+".join(f"{count}x{kind}" for kind, count in nodes)
        return cls(cluster.devices, bandwidth, latency, name=name)

    @classmethod
    def heterogeneous(cls, kinds: Sequence[str]) -> Cluster:
        """One device per named kind; a link runs at the slower of its two ends' link figures."""
        if isinstance(kinds, str):
            raise ValueError(f"kinds must be a list of device kinds, one per device, got the string {kinds!r} "
                             f"(for M devices of one kind: Cluster.preset({kinds!r}, M))")
        if not kinds:
            raise ValueError("a cluster needs at least one device")
        if len(kinds) > MAX_DEVICES:
            raise ValueError(f"a cluster of {len(kinds)} devices is more than the {MAX_DEVICES} a cluster may have")
        specs = []
        for k in kinds:
            if k not in DEVICE_KINDS:
                raise ValueError(f"unknown device kind {k!r}; known kinds: {', '.join(DEVICE_KINDS)}")
            specs.append(DEVICE_KINDS[k])
        m = len(specs)
        devices = [Device(f"gpu{i}", s.speed, s.memory_bytes) for i, s in enumerate(specs)]
        bandwidths, latencies = np.array([s.bandwidth for s in specs]), np.array([s.latency for s in specs])
        bw, lat = np.minimum.outer(bandwidths, bandwidths), np.maximum.outer(latencies, latencies)
        name = f"{m}x{kinds[0]}" if len(set(kinds)) == 1 else "+".join(kinds)
        return cls(devices, bw, lat, name=name)

    def with_memory(self, memory_bytes: float) -> Cluster:
        """The same devices and links with ``memory_bytes`` of memory each (to study placement under memory
        pressure: a model that fits one 16 GB device may not fit one of 4 GB)."""
        if not is_number(memory_bytes) or not math.isfinite(float(memory_bytes)) or float(memory_bytes) <= 0:
            raise ValueError(f"device memory must be a positive finite number of bytes, got {memory_bytes!r}")
        devices = [Device(d.name, d.speed, float(memory_bytes)) for d in self.devices]  # type: ignore[arg-type]
        label = f"{memory_bytes / 2**30:g}GiB" if float(memory_bytes) >= 2**20 else f"{memory_bytes:g}B"
        return Cluster(devices, self.bandwidth, self.latency, name=f"{self.name}-{label}")

    # ---------------------------------------------------------------- JSON
    def to_dict(self) -> dict:
        m = self.num_devices

        def matrix(a: np.ndarray) -> list[list[float]]:
            return [[0.0 if i == j else float(a[i, j]) for j in range(m)] for i in range(m)]

        return {
            "format": CLUSTER_FORMAT,
            "version": CLUSTER_VERSION,
            "name": self.name,
            "devices": [{"name": d.name, "speed": d.speed, "memory_bytes": d.memory_bytes} for d in self.devices],
            "bandwidth": matrix(self.bandwidth),
            "latency": matrix(self.latency),
        }

    @classmethod
    def from_dict(cls, data, source: str = "cluster") -> Cluster:
        if not isinstance(data, dict):
            raise ValueError(f"{source}: expected a JSON object")
        if data.get("format", CLUSTER_FORMAT) != CLUSTER_FORMAT:
            raise ValueError(f"{source}: format is {data.get('format')!r}, expected {CLUSTER_FORMAT!r}")
        if data.get("version", CLUSTER_VERSION) != CLUSTER_VERSION:
            raise ValueError(f"{source}: unsupported version {data.get('version')!r}")
        unknown = set(data) - {"format", "version", "name", "devices", "bandwidth", "latency"}
        if unknown:
            raise ValueError(f"{source}: unknown top-level field(s) {sorted(unknown)}")
        for key in ("devices", "bandwidth", "latency"):
            if key not in data:
                raise ValueError(f"{source}: missing field {key!r}")
        if not isinstance(data["devices"], list):
            raise ValueError(f"{source}: 'devices' must be a list")
        devices = []
        for i, d in enumerate(data["devices"]):
            if not isinstance(d, dict) or "speed" not in d or "memory_bytes" not in d:
                raise ValueError(f"{source}: device {i} needs 'speed' and 'memory_bytes'")
            unknown = set(d) - {"name", "speed", "memory_bytes"}
            if unknown:
                raise ValueError(f"{source}: device {i}: unknown field(s) {sorted(unknown)}")
            name = d.get("name", f"gpu{i}")
            if not isinstance(name, str):
                raise ValueError(f"{source}: device {i}: 'name' must be a string, got {name!r}")
            devices.append(Device(name, d["speed"], d["memory_bytes"]))
        name = data.get("name", source)
        if not isinstance(name, str):
            raise ValueError(f"{source}: 'name' must be a string, got {name!r}")
        try:
            return cls(devices, data["bandwidth"], data["latency"], name=name)
        except ValueError as exc:
            raise ValueError(f"{source}: {exc}") from None

    @classmethod
    def from_json(cls, path: str | os.PathLike) -> Cluster:
        """Read a cluster file (format in the spec)."""
        if isinstance(path, str) and path in DEVICE_KINDS and not os.path.exists(path):
            raise FileNotFoundError(
                f"no such file: {path!r}; {path!r} is a device kind: for N such devices use "
                f"Cluster.preset({path!r}, N) (--device-kind {path} --devices N on the command line, "
                f"device_kind={path!r} in the environments)")
        devices = _objects_in(path) - 1  # each device is a JSON object, inside the file's own: counted, not parsed
        if devices > MAX_DEVICES:
            raise ValueError(f"{path}: a cluster file of about {devices} devices is more than the {MAX_DEVICES} a "
                             "cluster may have")
        return cls.from_dict(read_json_file(path), source=str(path))

    def to_json(self, path: str | os.PathLike) -> None:
        write_json_file(self.to_dict(), path)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Cluster):
            return NotImplemented
        return (self.devices == other.devices and np.array_equal(self.bandwidth, other.bandwidth)
                and np.array_equal(self.latency, other.latency))

    __hash__ = object.__hash__

