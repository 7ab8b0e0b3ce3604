"""The shipped real models of the paper's table 6."""

import os
import sys

import numpy as np
import pytest
import torch

from placement_env import Cluster, from_torch, load_graph, load_suite, simulate
from placement_env.zoo.registry import REAL_MODELS

# the benchmarks' helpers (machine, placed_module_speed), after the installed packages
sys.path.append(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))


def test_every_real_model_is_shipped_loads_and_simulates():
    graphs = load_suite("real")
    assert [g.name for g in graphs] == list(REAL_MODELS)
    cluster = Cluster.preset("p100", 8)
    for g in graphs:
        assert {n.phase for n in g.nodes} == {"forward", "backward"} and g.param_bytes.sum() > 0
        result = simulate(g, g.expand_unit_placement(np.arange(g.num_units) * 8 // g.num_units), cluster)
        assert result.makespan >= result.lower_bound > 0
    sizes = {g.name: g.num_units for g in graphs}
    assert sizes["nasnet_large"] > sizes["resnet101"] > sizes["resnet50"] > sizes["vgg19"]


@pytest.mark.slow
def test_resnet50_architecture_copy_traces_to_the_shipped_graph():
    """benchmarks/resnet50_model.py (no torchvision here) against the file the extraction script wrote with
    torchvision: every op, its FLOPs, bytes and cost, and every edge."""
    from resnet50_model import ResNet50

    torch.manual_seed(0)
    traced = from_torch(ResNet50().train(), torch.zeros(32, 3, 224, 224), name="resnet50",
                        saved_activations="inputs")  # the rule the shipped graphs were made with
    assert traced.without_modules() == load_graph("resnet50")  # the shipped files predate module names
    assert {n.module for n in traced.nodes if n.op == "conv2d"} >= {"conv1", "layer1.0.conv1"}
    forward_flops = sum(n.flops or 0.0 for n in traced.nodes if n.phase == "forward")
    assert forward_flops == pytest.approx(32 * 2 * 4.09e9, rel=0.02)  # ResNet50: 4.1 GMAC per 224x224 image
