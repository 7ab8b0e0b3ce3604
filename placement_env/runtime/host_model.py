"""This machine's CPU as the GPU model of plans at scale: :func:`measure_host`, :func:`host_cluster`.

Section 3c of ``docs/spec/simulator.md`` (:func:`~placement_env.plan.scale.step.simulate_scale`) prices a plan's
step from a :class:`~placement_env.plan.scale.gpu_model.GpuModel`: a peak throughput and a product's efficiency by
its shape, a memory bandwidth, a link's bandwidth and latency. The local gloo workers that
:func:`~placement_env.runtime.parallel_runner.run_parallel` starts are CPU processes of one thread each, so the same
section prices their step once those figures are this machine's, measured rather than read off a datasheet:

* matrix products: one thread's fp32 FLOP/s on square products of :data:`PRODUCT_SIZES`; the line of section 3c,
  ``peak x (d / (d + d0))^3`` for a cube of side ``d``, fitted to them (least squares of the logarithms), gives
  ``peak_flops`` and ``matmul_dimension`` (on a CPU the small products lose to each call's fixed cost rather
  than to unfilled tiles; the same curve stands for both);
* element-wise passes: one thread's bytes/s of ``a + b`` over :data:`STREAM_ELEMENTS` fp32 elements (three arrays
  read or written);
* links: :func:`~placement_env.runtime.local_cluster.local_cluster`'s gloo ping-pong, with compute running
  (latency and bandwidth); every collective step pays that latency;
* the workers run fp32 where section 3c counts bf16 bytes: each byte it counts is two here, so the memory and link
  bandwidths are halved;
* ranks run at once: the same products and pass timed in ``c`` worker processes at once (``c`` the cores) give
  what one of them reaches while every core computes (``busy_*``: on a virtual machine whose cores share a
  physical one, or their memory, far less than one thread alone); with ``r >= 2`` ranks each computes at that
  figure times ``min(1, c / r)`` (ranks beyond the cores share them; a pipeline's idle ranks yield their share,
  which this does not credit).

What this leaves out is measured, not assumed: the per-call cost of each op's dispatch (Python, autograd, the
DTensor and FSDP hooks) has no term in section 3c, and ``benchmarks/gpu_check.py --host`` reports how far the
model misses because of it (``docs/simulator.md``, the 3D plans on local workers).
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import numpy as np

from placement_env.plan.scale.gpu_model import Efficiencies, GpuCluster, GpuModel

from .local_cluster import _physical_memory, local_cluster
from .local_workers import run_on_local_workers

PRODUCT_SIZES = (64, 128, 256, 512, 1024)
"""Sides of the square fp32 products timed for the matrix-product curve."""
STREAM_ELEMENTS = 1 << 23
"""fp32 elements of each array of the element-wise pass timed for the memory bandwidth (32 MiB: beyond the caches)."""
FP32_PER_BF16 = 2
"""Bytes of this host's fp32 tensors per byte section 3c counts (bf16)."""


@dataclass(frozen=True)
class HostFigures:
    """One thread of this machine, measured (:func:`measure_host`).

    Attributes:
        product_flops: FLOP/s of the square products of :data:`PRODUCT_SIZES` (the same order).
        memory_bandwidth: bytes/s of an element-wise pass.
        busy_product_flops, busy_memory_bandwidth: the largest product's FLOP/s and the pass's bytes/s in one of
            ``cores`` workers timing them at once.
        link_latency, link_bandwidth: a gloo message between two workers (seconds; bytes/s).
        cores: the CPU cores the workers share.
        memory: bytes of the machine's memory.
    """

    product_flops: tuple[float, ...]
    memory_bandwidth: float
    busy_product_flops: float
    busy_memory_bandwidth: float
    link_latency: float
    link_bandwidth: float
    cores: int
    memory: float


def fit_products(sizes: tuple[int, ...], flops: tuple[float, ...]) -> tuple[float, float]:
    """``(peak, d0)`` of the curve ``flops(d) = peak x (d / (d + d0))^3`` fitted to square products of sides
    ``sizes`` measured at ``flops`` (least squares of the logarithms: ``d0`` by a golden-section search on
    ``[0, 100 max(sizes)]``, ``peak`` in closed form for each). ``ValueError`` for fewer than two sizes or a
    non-positive figure."""
    d = np.asarray(sizes, dtype=float)
    y = np.asarray(flops, dtype=float)
    if len(d) < 2 or len(d) != len(y) or np.any(d <= 0) or np.any(y <= 0):
        raise ValueError(f"need two or more positive sizes and FLOP/s, got {sizes!r} and {flops!r}")
    log_y = np.log(y)

    def residual(d0: float) -> tuple[float, float]:
        shape = 3 * np.log(d / (d + d0))
        log_peak = float(np.mean(log_y - shape))
        return float(np.sum((log_y - shape - log_peak) ** 2)), math.exp(log_peak)

    lo, hi = 0.0, 100.0 * float(d.max())
    ratio = (math.sqrt(5) - 1) / 2
    for _ in range(200):
        a, b = hi - ratio * (hi - lo), lo + ratio * (hi - lo)
        if residual(a)[0] <= residual(b)[0]:
            hi = b
        else:
            lo = a
    d0 = (lo + hi) / 2
    return residual(d0)[1], d0


def host_gpu(figures: HostFigures, ranks: int) -> GpuModel:
    """The :class:`GpuModel` of one of ``ranks`` worker processes on the host ``figures`` describes (module
    docstring: the product curve, bandwidths halved for fp32, the cores shared). ``ValueError`` for ``ranks`` not
    an integer >= 1."""
    if isinstance(ranks, bool) or not isinstance(ranks, int) or ranks < 1:
        raise ValueError(f"ranks must be an integer >= 1, got {ranks!r}")
    peak, d0 = fit_products(PRODUCT_SIZES[:len(figures.product_flops)], figures.product_flops)
    compute = memory = 1.0
    if ranks >= 2:
        share = min(1.0, figures.cores / ranks)
        compute = figures.busy_product_flops / figures.product_flops[-1] * share
        memory = figures.busy_memory_bandwidth / figures.memory_bandwidth * share
    efficiencies = Efficiencies(matmul=1.0, matmul_dimension=d0, memory=1.0, collective_overhead=0.0, nvlink=1.0,
                                network=1.0)
    return GpuModel(f"cpu-host x{compute:.2f}", peak * compute, figures.memory_bandwidth * memory / FP32_PER_BF16,
                    figures.memory / ranks, figures.link_bandwidth / FP32_PER_BF16,
                    latency_nvlink=figures.link_latency, latency_network=figures.link_latency, reserved=0.0,
                    efficiencies=efficiencies)


def host_cluster(figures: HostFigures, ranks: int) -> GpuCluster:
    """``ranks`` worker processes of this host as one node of :func:`host_gpu`'s GPUs (every link the gloo one)."""
    gpu = host_gpu(figures, ranks)
    return GpuCluster(gpu, ranks, per_node=ranks, network_bandwidth=gpu.nvlink_bandwidth)


def _seconds(fn: Callable[[], object], repeats: int) -> float:
    """The fastest of ``repeats`` timings of ``fn()`` after one warm-up call."""
    fn()
    best = math.inf
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def _time_products(sizes: tuple[int, ...], repeats: int) -> tuple[list[float], float]:
    """FLOP/s of square products of ``sizes`` and bytes/s of the element-wise pass, on this process's threads."""
    import torch

    flops = []
    for d in sizes:
        a, b = torch.randn(d, d), torch.randn(d, d)
        flops.append(2.0 * d**3 / _seconds(partial(torch.matmul, a, b), repeats))
    x, y = torch.randn(STREAM_ELEMENTS), torch.randn(STREAM_ELEMENTS)
    return flops, 3 * 4 * STREAM_ELEMENTS / _seconds(lambda: x + y, repeats)


def _busy_worker(rank: int, world: int, repeats: int) -> tuple[float, float]:
    """In a local worker: the largest product's FLOP/s and the pass's bytes/s, timed while every worker does the
    same (they start together at a barrier)."""
    import torch.distributed as dist

    dist.barrier()
    flops, bandwidth = _time_products(PRODUCT_SIZES[-1:], repeats)
    return flops[0], bandwidth


def measure_host(*, repeats: int = 5, link: tuple[float, float] | None = None) -> HostFigures:
    """This machine's :class:`HostFigures`: the products and the element-wise pass timed on one thread in this
    process (each the fastest of ``repeats``; the thread count is put back after), then in one local worker a core
    at once (the median worker's), and the link measured between two local workers
    (:func:`~placement_env.runtime.local_cluster.local_cluster`) unless ``link`` gives ``(latency s, bandwidth
    bytes/s)``. Takes a few seconds."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        flops, bandwidth = _time_products(PRODUCT_SIZES, repeats)
    finally:
        torch.set_num_threads(threads)
    cores = os.cpu_count() or 1
    busy = run_on_local_workers(cores, _busy_worker, repeats) if cores > 1 else [(flops[-1], bandwidth)]
    if link is None:
        cluster = local_cluster(2)
        link = (float(cluster.latency[0, 1]), float(cluster.bandwidth[0, 1]))
    return HostFigures(tuple(flops), bandwidth, float(np.median([f for f, _ in busy])),
                       float(np.median([b for _, b in busy])), link[0], link[1], cores, float(_physical_memory()))


__all__ = ["FP32_PER_BF16", "PRODUCT_SIZES", "STREAM_ELEMENTS", "HostFigures", "fit_products", "host_cluster",
           "host_gpu", "measure_host"]
