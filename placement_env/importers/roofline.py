"""Roofline op costs per device kind and precision: :data:`ROOFLINE_DEVICES`, :func:`roofline_seconds`.

An op takes ``max(flops / (peak x compute efficiency), bytes moved / (bandwidth x memory efficiency))`` plus a
launch overhead. The peak is the FP32 one, or, for the FLOPs of an op in half precision (the matrix products
and convolutions ``FlopCounterMode`` counts), the kind's dense tensor-core peak of that precision; a kind
without one for a precision refuses it by name.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import torch

PRECISIONS: dict[torch.dtype, str] = {torch.float32: "float32", torch.bfloat16: "bfloat16",
                                      torch.float16: "float16"}


@dataclass(frozen=True)
class RooflineDevice:
    """Peak FP32 FLOP/s and memory bandwidth (bytes/s) of a device kind, its dense half-precision peaks
    (``{"float16": FLOP/s, "bfloat16": FLOP/s}``, those it has), the fractions of them ops reach, and a fixed
    per-op launch overhead (s)."""

    peak_flops: float
    bandwidth: float
    half_peaks: Mapping[str, float] = field(default_factory=dict)
    compute_efficiency: float = 0.6
    memory_efficiency: float = 0.7
    launch_overhead: float = 5e-6

    def peak(self, precision: str) -> float:
        """FLOP/s of matrix products in ``precision`` (``ValueError`` naming a precision the kind lacks)."""
        if precision == "float32":
            return self.peak_flops
        if precision not in self.half_peaks:
            raise ValueError(f"this device kind has no {precision} peak (it has: float32"
                             f"{''.join(', ' + p for p in self.half_peaks)})")
        return self.half_peaks[precision]


# Datasheet peaks (NVIDIA product pages and datasheets; see cluster.py for the links' sources), dense (without
# structured sparsity):
# * P100 PCIe: 9.3 TFLOP/s FP32, 18.7 FP16 (no tensor cores, packed half2), no BF16; 732 GB/s HBM2.
# * K80 (one GK210): 4.37 TFLOP/s FP32 (boost), no faster FP16 path, no BF16; 240 GB/s GDDR5.
# * V100 SXM2: 15.7 TFLOP/s FP32, 125 FP16 tensor-core, no BF16; 900 GB/s HBM2.
# * A100 SXM4: 19.5 TFLOP/s FP32, 312 BF16 / FP16 tensor-core; 2,039 GB/s HBM2e.
# * H100 SXM5: 67 TFLOP/s FP32, 989.4 BF16 / FP16 tensor-core; 3,350 GB/s HBM3.
ROOFLINE_DEVICES: dict[str, RooflineDevice] = {
    "p100": RooflineDevice(9.3e12, 732e9, {"float16": 18.7e12}),
    "k80": RooflineDevice(4.37e12, 240e9),
    "v100-nvlink": RooflineDevice(15.7e12, 900e9, {"float16": 125e12}),
    "a100-nvlink": RooflineDevice(19.5e12, 2039e9, {"float16": 312e12, "bfloat16": 312e12}),
    "h100-nvlink": RooflineDevice(67e12, 3350e9, {"float16": 989.4e12, "bfloat16": 989.4e12}),
}


def precision_name(dtype: torch.dtype, kind: str) -> str:
    """The name of ``dtype`` if device ``kind`` runs matrix products in it, else a ``ValueError`` naming both."""
    if dtype not in PRECISIONS:
        raise ValueError(f"dtype must be one of {', '.join(str(d) for d in PRECISIONS)}, got {dtype!r}")
    name = PRECISIONS[dtype]
    try:
        ROOFLINE_DEVICES[kind].peak(name)
    except ValueError as error:
        raise ValueError(f"device kind {kind!r}: {error}") from None
    return name


def roofline_seconds(device: RooflineDevice, flops: float, moved_bytes: float, precision: str = "float32") -> float:
    """Seconds of one op on ``device``: its FLOPs at the peak of ``precision``, its bytes at the bandwidth."""
    return max(flops / (device.peak(precision) * device.compute_efficiency),
               moved_bytes / (device.bandwidth * device.memory_efficiency)) + device.launch_overhead


__all__ = ["PRECISIONS", "ROOFLINE_DEVICES", "RooflineDevice", "precision_name", "roofline_seconds"]
