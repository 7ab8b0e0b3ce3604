"""A GPU model for plans at scale: what a matrix product, an element-wise pass and a collective cost on A100s,
H100s and H200s (:class:`GpuModel`, :data:`GPUS`), and a cluster of them (:class:`GpuCluster`).

Each constant is either from a datasheet (peak bf16 throughput, memory bandwidth and size, NVLink and network
bandwidth) or an efficiency fitted on the development set of published measured runs
(``../shared/data/published``, ``python benchmarks/published_runs.py --fit``) and nothing else; ``docs/cluster.md``
lists each with its source. The H100's and the H200's efficiencies are the A100's (no H100 run in the development
set gives micro-batches or recomputation, so none is fitted there; its weak-scaling table is a check of the order
of magnitude only).

Units: seconds, bytes, bytes/s, FLOP/s.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from placement_env.cluster import DEVICE_KINDS

GIB = 2**30


@dataclass(frozen=True)
class Efficiencies:
    """What a GPU reaches of its datasheet figures (fitted: module docstring).

    Attributes:
        matmul: of the peak bf16 throughput, by a large matrix product.
        matmul_dimension: a product of shape (M, N, K) reaches ``matmul x prod(d / (d + matmul_dimension))``
            over its three dimensions (small and split shapes fill the GPU's tiles less).
        memory: of the memory bandwidth, by element-wise kernels (norms, activations, dropout, softmax).
        collective_overhead: seconds each tensor-parallel collective costs beyond its bytes and latencies (its
            launch, and the wait for the group's slowest rank).
        nvlink: of the NVLink bandwidth, by a collective within a node.
        network: of a GPU's share of its node's network bandwidth, by a collective across nodes.
    """

    matmul: float
    matmul_dimension: float
    memory: float
    collective_overhead: float
    nvlink: float
    network: float


FITTED = Efficiencies(matmul=0.6996, matmul_dimension=79.14, memory=0.9993, collective_overhead=1.229e-4, nvlink=1.0,
                      network=0.7476)
"""The efficiencies fitted on the development set (module docstring; the fit's command and its residuals are in
``docs/cluster.md`` and RESULTS.md)."""


@dataclass(frozen=True)
class GpuModel:
    """One GPU kind: datasheet figures and the efficiencies reached of them.

    Attributes:
        name: e.g. ``"a100-80gb"``.
        peak_flops: dense bf16/fp16 tensor-core FLOP/s (datasheet).
        memory_bandwidth: HBM bytes/s (datasheet).
        memory: bytes of HBM (datasheet).
        nvlink_bandwidth: NVLink bytes/s a GPU sends (one direction; datasheet: half the bidirectional figure).
        latency_nvlink, latency_network: a collective step's latency within a node and across nodes, seconds
            (NCCL's order of magnitude; its tests report 5-20 us within a node and tens across).
        reserved: bytes of HBM the runtime holds beside the model (CUDA context, NCCL buffers, the allocator's
            slack).
        efficiencies: :class:`Efficiencies`.
    """

    name: str
    peak_flops: float
    memory_bandwidth: float
    memory: float
    nvlink_bandwidth: float
    latency_nvlink: float = 10e-6
    latency_network: float = 20e-6
    reserved: float = 2 * GIB
    efficiencies: Efficiencies = FITTED

    def matmul_seconds(self, m: float, n: float, k: float, count: float = 1.0) -> float:
        """``count`` products of an (m x k) by a (k x n) matrix: ``2 m n k`` FLOPs each at the shape's efficiency."""
        e = self.efficiencies
        d0 = e.matmul_dimension
        efficiency = e.matmul * (m / (m + d0)) * (n / (n + d0)) * (k / (k + d0))
        return count * 2.0 * m * n * k / (self.peak_flops * efficiency)

    def memory_seconds(self, nbytes: float) -> float:
        """Element-wise kernels reading and writing ``nbytes`` in all."""
        return nbytes / (self.memory_bandwidth * self.efficiencies.memory)

    def with_efficiencies(self, efficiencies: Efficiencies) -> GpuModel:
        return replace(self, efficiencies=efficiencies)


GPUS: dict[str, GpuModel] = {
    # A100 SXM4 80 GB: 312 TFLOP/s bf16 dense, 2,039 GB/s HBM2e, 80 GB, NVLink 3: 600 GB/s both directions
    "a100-80gb": GpuModel("a100-80gb", 312e12, 2.039e12, 80 * GIB, 300e9),
    # A100 SXM4 40 GB: as above with 1,555 GB/s HBM2 and 40 GB
    "a100-40gb": GpuModel("a100-40gb", 312e12, 1.555e12, 40 * GIB, 300e9),
    # H100 SXM5 80 GB: 989 TFLOP/s bf16 dense, 3,350 GB/s HBM3, 80 GB, NVLink 4: 900 GB/s both directions
    "h100-80gb": GpuModel("h100-80gb", 989e12, 3.35e12, 80 * GIB, 450e9),
    # H200 SXM 141 GB: the H100's compute (989 TFLOP/s bf16 dense), 4,800 GB/s HBM3e, 141 GB, NVLink 4
    "h200-141gb": GpuModel("h200-141gb", 989e12, 4.8e12, 141 * GIB, 450e9),
}
"""The GPU kinds a plan at scale may name."""


@dataclass(frozen=True)
class GpuCluster:
    """GPUs in nodes joined by a network; checked when made.

    Attributes:
        gpu: a :class:`GpuModel` (or its name in :data:`GPUS`).
        gpus: how many. ``per_node``: GPUs a node (joined by NVLink / NVSwitch).
        network_bandwidth: bytes/s a GPU sends to other nodes (its node's network bandwidth over its GPUs: a DGX
            A100's eight 200 Gb/s adapters give 25 GB/s a GPU).
    """

    gpu: GpuModel
    gpus: int
    per_node: int = 8
    network_bandwidth: float = 25e9

    def __post_init__(self) -> None:
        if isinstance(self.gpu, str):
            if self.gpu not in GPUS:
                raise ValueError(f"unknown GPU {self.gpu!r}; known: {', '.join(GPUS)}")
            object.__setattr__(self, "gpu", GPUS[self.gpu])
        for name in ("gpus", "per_node"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        if self.gpus % self.per_node and self.gpus > self.per_node:
            raise ValueError(f"{self.gpus} GPUs do not fill nodes of {self.per_node}")
        if not (isinstance(self.network_bandwidth, (int, float)) and self.network_bandwidth > 0):
            raise ValueError(f"network_bandwidth must be a positive number of bytes/s, got {self.network_bandwidth!r}")

    @property
    def nodes(self) -> int:
        return max(1, self.gpus // self.per_node)

    def describe(self) -> str:
        return (f"{self.gpus} x {self.gpu.name} in nodes of {self.per_node}, {self.network_bandwidth / 1e9:.1f} GB/s "
                "a GPU across nodes")

    @classmethod
    def from_device_kind(cls, kind: str, gpus: int, per_node: int | None = None) -> GpuCluster:
        """The GPUs of a placement cluster's device kind (``a100-nvlink``, ``h100-nvlink``: the command lines'
        ``--device-kind``), in nodes of ``per_node`` (default 8), each GPU with its share of the node's network;
        ``ValueError`` for a kind with no GPU model."""
        if kind not in GPU_OF_DEVICE_KIND:
            raise ValueError(f"device kind {kind!r} has no GPU model for plans at scale; known: "
                             f"{', '.join(GPU_OF_DEVICE_KIND)}")
        per_node = 8 if per_node is None else per_node
        return cls(GPUS[GPU_OF_DEVICE_KIND[kind]], gpus, per_node, DEVICE_KINDS[kind].node_network / per_node)


GPU_OF_DEVICE_KIND = {"a100-nvlink": "a100-80gb", "h100-nvlink": "h100-80gb"}
"""The GPU model of each device kind of :data:`placement_env.cluster.DEVICE_KINDS` that has one."""


__all__ = ["FITTED", "GIB", "GPUS", "GPU_OF_DEVICE_KIND", "Efficiencies", "GpuCluster", "GpuModel"]
