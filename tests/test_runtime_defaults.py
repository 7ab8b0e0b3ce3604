"""DeepSpeed's ``uniform`` and ``parameters`` partitions as placers: hand-computed cuts, the exact balanced cut
against every cut, the placements as the runtime exports read them, and ``python -m baselines``."""

import itertools

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

import baselines.__main__ as baselines_command
from baselines import PlacementInfeasibleError
from baselines.runtime_defaults import (
    deepspeed_parameters,
    deepspeed_uniform,
    partition_balanced,
    partition_uniform,
)
from placement_env import Cluster, from_torch, load_graph, write_graph
from placement_env.plan.module_tree import layer_sequence
from placement_env.runtime import to_device_map, to_split_points


class Block(nn.Module):
    def __init__(self, d: int, hidden: int) -> None:
        super().__init__()
        self.norm, self.up, self.down = nn.LayerNorm(d), nn.Linear(d, hidden), nn.Linear(hidden, d)

    def forward(self, x):
        return x + self.down(torch.relu(self.up(self.norm(x))))


def sequential_graph(hidden=(64,) * 6):
    model = nn.Sequential(nn.Linear(16, 64), *[Block(64, h) for h in hidden], nn.Linear(64, 4))
    return from_torch(model, (torch.randn(32, 16),))


def test_the_uniform_cut_gives_the_first_stages_one_more():
    assert partition_uniform(10, 3) == [0, 4, 7, 10]
    assert partition_uniform(9, 3) == [0, 3, 6, 9]
    assert partition_uniform(2, 3) == [0, 1, 2, 2]  # fewer layers than stages: one each, the last empty


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 20), min_size=1, max_size=7), st.integers(1, 4))
def test_the_balanced_cut_has_the_lightest_heaviest_stage_of_all_cuts(weights, parts):
    cut = partition_balanced(weights, parts)
    assert cut[0] == 0 and cut[-1] == len(weights) and cut == sorted(cut) and len(cut) == parts + 1

    def heaviest(bounds):
        return max(sum(weights[a:b]) for a, b in zip(bounds, bounds[1:]))

    if len(weights) <= parts:
        return
    best = min(heaviest([0, *inner, len(weights)])
               for inner in itertools.combinations_with_replacement(range(len(weights) + 1), parts - 1)
               if list(inner) == sorted(inner))
    assert heaviest(cut) == best


def test_the_partitions_place_whole_layers_in_order():
    g = sequential_graph(hidden=(64, 64, 64, 512, 512, 512))
    assert layer_sequence(g) == [str(i) for i in range(8)]
    cluster = Cluster.preset("p100", 3)
    uniform = deepspeed_uniform(g, cluster)
    assert to_device_map(g, uniform) == {"0": 0, "1": 0, "2": 0, "3": 1, "4": 1, "5": 1, "6": 2, "7": 2}
    assert to_split_points(g, uniform).parts == [0, 3, 6, 8]
    by_parameters = to_split_points(g, deepspeed_parameters(g, cluster))
    weights = [sum(n.param_bytes for n in g.nodes if n.module and n.module.split(".")[0] == str(i))
               for i in range(8)]
    assert by_parameters.parts == partition_balanced(weights, 3)
    assert by_parameters.parts != [0, 3, 6, 8]  # the wide blocks weigh more: fewer of them per stage


def test_a_graph_without_layers_is_refused_by_name():
    with pytest.raises(PlacementInfeasibleError, match="a DeepSpeed partition needs the graph's layers: graph "
                                                       "'cifar10/0' has no module names"):
        deepspeed_uniform(load_graph("default"), Cluster.preset("p100", 2))


def test_the_command_shows_them_for_graphs_with_module_names(tmp_path, capsys):
    path = tmp_path / "seq.json.gz"
    write_graph(sequential_graph(), path)
    assert baselines_command.main(["--graph", str(path), "--devices", "3", "--placers", "single,deepspeed-uniform,"
                                   "deepspeed-parameters"]) == 0
    out = capsys.readouterr().out
    assert "deepspeed-uniform" in out and "deepspeed-parameters" in out
    assert baselines_command.main(["--graph", "default", "--devices", "2", "--placers", "single"]) == 0
    assert "deepspeed" not in capsys.readouterr().out
    table = baselines_command.build_parser().parse_args(["--graph", "default"])
    assert table.placers is None  # the default list depends on the graph
    rows = np.asarray(deepspeed_uniform(sequential_graph(), Cluster.preset("p100", 3)))
    assert set(rows.tolist()) == {0, 1, 2}


def test_accelerate_balanced_is_what_accelerate_does_with_the_model_itself():
    pytest.importorskip("accelerate")
    import logging

    from accelerate import infer_auto_device_map
    from accelerate.utils import get_balanced_memory

    from baselines.runtime_defaults import accelerate_balanced

    torch.manual_seed(0)
    hidden = (64, 64, 512, 512, 64, 64)
    model = nn.Sequential(nn.Linear(16, 64), *[Block(64, h) for h in hidden], nn.Linear(64, 4))
    g = from_torch(model, (torch.randn(32, 16),))
    cluster = Cluster.preset("p100", 3)
    logging.getLogger("accelerate").setLevel(logging.ERROR)
    memory = {d: int(cluster.memory[d]) for d in range(3)}
    real = infer_auto_device_map(model, max_memory=get_balanced_memory(model, max_memory=memory))
    placement = accelerate_balanced(g, cluster)
    for name, device in real.items():  # every module of accelerate's own map: its ops on that device
        ops = [i for i, node in enumerate(g.nodes)
               if node.module is not None and (node.module == name or node.module.startswith(f"{name}."))]
        assert ops and {int(placement[i]) for i in ops} == {device}, name
    assert len(set(real.values())) > 1  # balanced: the model is spread
    with pytest.raises(PlacementInfeasibleError, match="accelerate's device map needs the graph's modules"):
        accelerate_balanced(load_graph("default"), cluster)


def test_the_benchmark_table_has_them_for_graphs_with_module_names(tmp_path, capsys):
    from agents.benchmark import main

    path = tmp_path / "seq.json.gz"
    write_graph(sequential_graph(), path)
    assert main(["--graph", str(path), "--devices", "3", "--methods", "heft,deepspeed-uniform,deepspeed-parameters,"
                 "accelerate-balanced", "--out", str(tmp_path / "bench"), "--budget-seconds", "1"]) == 0
    header = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("| cell"))
    assert header == "| cell | heft | deepspeed-uniform | deepspeed-parameters | accelerate-balanced |"
