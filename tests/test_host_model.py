"""This machine's CPU as the GPU model of section 3c (placement_env.runtime.host_model): the product curve fitted
from timings, the bandwidths counted in fp32 bytes, the cores shared among more ranks than there are."""

from __future__ import annotations

import pytest

from placement_env import Parallelism
from placement_env.plan.scale import shape_from_config, simulate_scale
from placement_env.runtime.host_model import (
    FP32_PER_BF16,
    PRODUCT_SIZES,
    HostFigures,
    fit_products,
    host_cluster,
    host_gpu,
)


def figures(peak=50e9, d0=40.0, cores=2, busy=1.0, link_latency=100e-6) -> HostFigures:
    """A host whose products follow the curve exactly, ``peak (d / (d + d0))^3``, and reach ``busy`` of it (and of
    the memory bandwidth) while every core computes."""
    flops = tuple(peak * (d / (d + d0)) ** 3 for d in PRODUCT_SIZES)
    return HostFigures(flops, memory_bandwidth=10e9, busy_product_flops=busy * flops[-1],
                       busy_memory_bandwidth=busy * 10e9, link_latency=link_latency, link_bandwidth=2e9, cores=cores,
                       memory=16 * 2**30)


@pytest.mark.parametrize(("peak", "d0"), [(50e9, 40.0), (120e9, 5.0), (8e9, 300.0)])
def test_the_product_curve_is_recovered_from_its_own_points(peak, d0):
    got_peak, got_d0 = fit_products(PRODUCT_SIZES, figures(peak, d0).product_flops)
    assert got_peak == pytest.approx(peak, rel=1e-4) and got_d0 == pytest.approx(d0, rel=1e-3)


def test_a_flat_curve_has_no_dimension_cost_and_bad_points_are_refused():
    peak, d0 = fit_products((64, 1024), (30e9, 30e9))
    assert peak == pytest.approx(30e9, rel=1e-6) and d0 == pytest.approx(0.0, abs=1e-3)
    with pytest.raises(ValueError, match="two or more positive"):
        fit_products((64,), (1e9,))
    with pytest.raises(ValueError, match="two or more positive"):
        fit_products((64, 128), (1e9, 0.0))


def test_the_bandwidths_are_fp32_bytes_and_the_cores_are_shared():
    host = figures(cores=2, busy=0.5)
    one = host_gpu(host, 1)
    assert one.peak_flops == pytest.approx(50e9, rel=1e-4)
    assert one.memory_bandwidth == pytest.approx(10e9 / FP32_PER_BF16)  # a bf16 byte of section 3c: two here
    assert one.nvlink_bandwidth == pytest.approx(2e9 / FP32_PER_BF16)
    assert one.latency_nvlink == one.latency_network == 100e-6 and one.reserved == 0.0
    two = host_gpu(host, 2)  # a core each, at what a core reaches while the other computes too
    assert two.peak_flops == pytest.approx(one.peak_flops / 2)
    assert two.memory_bandwidth == pytest.approx(one.memory_bandwidth / 2)
    eight = host_gpu(host, 8)  # eight ranks on two cores: a quarter of that each
    assert eight.peak_flops == pytest.approx(two.peak_flops / 4)
    assert eight.memory_bandwidth == pytest.approx(two.memory_bandwidth / 4)
    assert eight.nvlink_bandwidth == one.nvlink_bandwidth and eight.memory == pytest.approx(host.memory / 8)
    with pytest.raises(ValueError, match="ranks must be an integer >= 1, got 0"):
        host_gpu(host, 0)


def test_a_plan_on_the_host_is_priced_by_its_figures():
    """A whole Llama step on one rank: every product at the host's curve, so doubling the host's FLOP/s (and
    nothing else) shortens the products' share, and a tensor-parallel pair pays the gloo link's latency."""
    config = {"num_hidden_layers": 2, "hidden_size": 256, "num_attention_heads": 8, "intermediate_size": 704,
              "vocab_size": 2048, "max_position_embeddings": 128, "hidden_act": "silu", "rope_theta": 1e4}
    shape = shape_from_config(config)
    whole = simulate_scale(shape, Parallelism(), host_cluster(figures(), 1), 8, flash_attention=True)
    faster = simulate_scale(shape, Parallelism(), host_cluster(figures(peak=100e9), 1), 8, flash_attention=True)
    assert faster.seconds < whole.seconds
    pair = simulate_scale(shape, Parallelism(tensor=2), host_cluster(figures(), 2), 8, flash_attention=True)
    slow_link = figures(link_latency=10e-3)
    assert simulate_scale(shape, Parallelism(tensor=2), host_cluster(slow_link, 2), 8,
                          flash_attention=True).tensor_parallel > pair.tensor_parallel + 2 * 4 * 10e-3 - 1e-9
