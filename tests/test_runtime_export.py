"""Placements that leave the simulator: the module names ``from_torch`` records, module placement units, and the
exports to accelerate's ``device_map`` and to pipeline split points (torch.distributed.pipelining, DeepSpeed)."""

import json

import numpy as np
import pytest
import torch
from torch import nn

from placement_env import ComputationGraph, from_torch, load_graph, read_graph, write_graph
from placement_env.__main__ import main as placement_env_main
from placement_env.runtime import to_device_map, to_split_points


class Block(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.ln = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, 4 * d)
        self.fc2 = nn.Linear(4 * d, d)

    def forward(self, x):
        return x + self.fc2(torch.relu(self.fc1(self.ln(x))))


class Net(nn.Module):
    """embed, four residual blocks, head: a transformer-shaped chain of modules."""

    def __init__(self, d: int = 8, n: int = 4) -> None:
        super().__init__()
        self.embed = nn.Linear(3, d)
        self.layers = nn.ModuleList([Block(d) for _ in range(n)])
        self.head = nn.Linear(d, 2)

    def forward(self, x, scale=None):
        x = self.embed(x)
        for layer in self.layers:
            x = layer(x)
        out = self.head(x)
        return (out * scale if scale is not None else out).sum()


def module_placement(graph, device_of):
    """A placement giving every op the device ``device_of(module)`` (inputs: device 0)."""
    return [0 if node.module is None else device_of(node.module) for node in graph.nodes]


def stages(module: str) -> int:  # embed, layers.0-1 -> 0; layers.2 -> 1; layers.3, head, glue -> 2
    if module.startswith(("embed", "layers.0", "layers.1")):
        return 0
    return 1 if module.startswith("layers.2") else 2


@pytest.fixture(scope="module")
def net_graph():
    torch.manual_seed(0)
    return from_torch(Net(), (torch.randn(2, 3),), colocate_modules=2)


def test_every_op_records_the_module_it_came_from():
    g = from_torch(Net(), (torch.randn(2, 3),), training=False)
    module = {node.id: node.module for node in g.nodes}
    assert module["x"] is None  # an input
    assert module["linear"] == "embed" and module["layer_norm"] == "layers.0.ln"
    assert module["linear_1"] == "layers.0.fc1" and module["relu"] == "layers.0"  # functional relu: the block
    assert module["add"] == "layers.0"  # the residual add: in the block, which owns no parameters itself
    assert module["sum_1"] == ""  # the model's own glue
    trained = from_torch(Net(), (torch.randn(2, 3),))
    by_id = {node.id: node for node in trained.nodes}
    for node in trained.nodes:  # each backward op is its forward op's module
        if node.phase == "backward":
            assert node.module == by_id[node.id.removesuffix("_grad")].module


def test_module_names_survive_the_graph_file_and_old_files_are_unchanged(tmp_path, net_graph):
    write_graph(net_graph, tmp_path / "g.json.gz")
    again = read_graph(tmp_path / "g.json.gz")
    assert [n.module for n in again.nodes] == [n.module for n in net_graph.nodes]
    assert again == net_graph
    from placement_env.graph.io import graph_to_dict

    assert all("module" not in node for node in graph_to_dict(load_graph("default"))["nodes"])


def test_a_multi_layer_lstm_is_named_after_the_lstm_of_the_model():
    class Tagger(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.rnn = nn.LSTM(4, 4, num_layers=2, batch_first=True)
            self.out = nn.Linear(4, 3)

        def forward(self, x):
            return self.out(self.rnn(x)[0]).sum()

    g = from_torch(Tagger(), (torch.randn(2, 5, 4),), training=False)
    assert sum(node.op == "lstm" for node in g.nodes) == 2  # still one op per layer
    assert {node.module for node in g.nodes if node.op == "lstm"} == {"rnn"}  # the model has no rnn.layers.0


def test_colocate_modules_makes_every_placement_a_module_placement(net_graph):
    leaf = from_torch(Net(), (torch.randn(2, 3),), colocate_modules=True)
    for g, cut in ((leaf, None), (net_graph, 2)):
        for members in g.unit_members:
            names = {g.nodes[i].module for i in members} - {None, ""}
            cut_names = {".".join(n.split(".")[:cut]) if cut else n for n in names}
            deepest = max(cut_names, key=lambda n: n.count("."), default="")
            # one (cut) module per unit, with its ancestors' own ops that follow it (Block's residual add, fc2's)
            assert all(deepest == n or deepest.startswith(f"{n}.") for n in cut_names)
    assert list(net_graph.unit_names) == ["x", "module:embed", "module:layers.0", "module:layers.1", "module:layers.2",
                                      "module:layers.3", "module:head", "sum_1"]
    for bad in (0, -1, 1.5, "layers"):
        with pytest.raises(ValueError, match="colocate_modules must be True, False or a depth >= 1"):
            from_torch(Net(), (torch.randn(2, 3),), colocate_modules=bad)


def test_views_between_modules_do_not_tie_them_into_one_unit():
    torch.manual_seed(0)
    encoder = nn.TransformerEncoder(nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True), 3)
    g = from_torch(encoder, (torch.randn(2, 5, 16),), colocate_modules=2)
    assert [name for name in g.unit_names if name.startswith("module:")] == ["module:layers.0", "module:layers.1",
                                                                              "module:layers.2"]
    assert g.num_units == 4  # and the input with its views


def test_keyword_inputs_are_example_kwargs_and_a_dict_of_inputs_is_one_clear_error():
    g = from_torch(Net(), (torch.randn(2, 3),), example_kwargs={"scale": torch.ones(1)}, training=False)
    assert [n.id for n in g.nodes if n.op == "input"] == ["x", "scale"] and "mul" in g.ids
    with pytest.raises(ValueError, match=r"example_inputs is a mapping \(keys 'x'\): pass keyword inputs as "
                                         "example_kwargs"):
        from_torch(Net(), {"x": torch.randn(2, 3)})
    with pytest.raises(ValueError, match="example_kwargs must be a mapping"):
        from_torch(Net(), (torch.randn(2, 3),), example_kwargs=[torch.ones(1)])


def test_the_device_map_is_the_coarsest_the_placement_implies(net_graph):
    assert to_device_map(net_graph, [0] * net_graph.num_nodes) == {"": 0}
    placement = module_placement(net_graph, stages)
    assert to_device_map(net_graph, placement) == {"embed": 0, "layers.0": 0, "layers.1": 0, "layers.2": 1,
                                                   "layers.3": 2, "head": 2}
    everything_but_head = module_placement(net_graph, lambda m: 1 if m.startswith("head") else 0)
    assert to_device_map(net_graph, everything_but_head) == {"embed": 0, "layers": 0, "head": 1}


def test_a_device_map_refuses_what_it_cannot_express(net_graph):
    leaf = from_torch(Net(), (torch.randn(2, 3),))  # ops placed one by one: a placer may split a module
    split = [0] * leaf.num_nodes
    split[leaf.index_of("linear_1_grad")] = 1  # layers.0.fc1's backward op elsewhere
    with pytest.raises(ValueError, match=r"the placement splits module 'layers.0.fc1': its ops are on devices "
                                         r"\[0, 1\]; .*colocate_modules=True"):
        to_device_map(leaf, split)
    with pytest.raises(ValueError, match="has no module names: import the model with placement_env.from_torch"):
        to_device_map(load_graph("default"), [0] * load_graph("default").num_nodes)
    with pytest.raises(ValueError, match="placement has 3 entries, graph 'Net' has"):
        to_device_map(net_graph, [0, 0, 0])
    with pytest.raises(ValueError, match=r"placement entry 1 \(op 'linear'\) is -1, not a device index"):
        to_device_map(net_graph, [0, -1] + [0] * (net_graph.num_nodes - 2))

    class Scaled(nn.Module):  # a module with a parameter of its own and a submodule
        def __init__(self) -> None:
            super().__init__()
            self.gain = nn.Parameter(torch.ones(4))
            self.inner = nn.Linear(4, 4)

        def forward(self, x):
            return self.inner(x * self.gain)

    class Outer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.block = Scaled()

        def forward(self, x):
            return self.block(x).sum()

    g = from_torch(Outer(), (torch.randn(2, 4),), colocate_modules=True)
    apart = module_placement(g, lambda m: 1 if m == "block.inner" else 0)
    with pytest.raises(ValueError, match="module 'block' holds parameters of its own on device 0 while its "
                                         r"submodules are on devices \[1\]"):
        to_device_map(g, apart)


def test_the_device_map_runs_through_accelerate_with_the_same_outputs(net_graph):
    accelerate = pytest.importorskip("accelerate")
    torch.manual_seed(0)
    model, x = Net(), torch.randn(2, 3)
    expected = model(x)
    device_map = to_device_map(net_graph, module_placement(net_graph, stages))
    on_cpu = {name: "cpu" for name in device_map}  # this machine's devices are one CPU: the map's structure is
    dispatched = accelerate.dispatch_model(model, device_map=on_cpu)  # what accelerate checks and hooks
    assert torch.allclose(dispatched(x), expected)
    assert set(getattr(dispatched, "hf_device_map", on_cpu)) == set(device_map)


class WithSpare(nn.Module):
    """A model with a module whose parameters its forward never reads."""

    def __init__(self) -> None:
        super().__init__()
        self.first, self.second, self.spare = nn.Linear(3, 3), nn.Linear(3, 3), nn.Linear(3, 3)

    def forward(self, x):
        return self.second(self.first(x))


def test_the_device_map_names_devices_and_places_unused_modules_for_accelerate():
    accelerate = pytest.importorskip("accelerate")
    model, x = WithSpare(), torch.randn(2, 3)
    g = from_torch(model, (x,), colocate_modules=True)
    assert to_device_map(g, [0] * g.num_nodes, devices=["cpu"]) == {"": "cpu"}
    apart = [1 if n.module == "second" else 0 for n in g.nodes]
    assert to_device_map(g, apart, devices=["cpu", "disk"]) == {"first": "cpu", "second": "disk"}
    full = to_device_map(g, apart, devices=["cpu", "cpu"], model=model)  # the graph knows no spare; the model does
    assert full == {"first": "cpu", "second": "cpu", "spare": "cpu"}
    assert torch.allclose(accelerate.dispatch_model(model, device_map=full)(x), model(x))
    with pytest.raises(ValueError, match=r"is placed on device 1, but devices names 1 \(cpu\)"):
        to_device_map(g, apart, devices=["cpu"])


def test_split_points_of_a_contiguous_placement(net_graph):
    points = to_split_points(net_graph, module_placement(net_graph, stages))
    assert points.devices == [0, 1, 2] and points.split_spec == ["layers.2", "layers.3"]
    assert points.layers == ["embed", "layers.0", "layers.1", "layers.2", "layers.3", "head"]
    assert points.parts == [0, 3, 4, 6]
    assert points.to_dict()["split_spec"] == {"layers.2": "BEGINNING", "layers.3": "BEGINNING"}
    one = to_split_points(net_graph, [0] * net_graph.num_nodes)
    assert one.devices == [0] and one.split_spec == [] and one.parts == [0, len(one.layers)]
    reversed_devices = to_split_points(net_graph, module_placement(net_graph, lambda m: 2 - stages(m)))
    assert reversed_devices.devices == [2, 1, 0] and reversed_devices.split_spec == ["layers.2", "layers.3"]


def test_split_points_build_torch_pipelining_stages(net_graph):
    from torch.distributed.pipelining import SplitPoint, pipeline

    points = to_split_points(net_graph, module_placement(net_graph, stages))
    torch.manual_seed(0)
    model, x = Net(), torch.randn(2, 3)
    pipe = pipeline(model, (x,), split_spec={name: SplitPoint.BEGINNING for name in points.split_spec})
    assert pipe.num_stages == len(points.devices)
    out = x
    for stage in range(pipe.num_stages):  # the stages in a row compute the model
        out = pipe.get_stage_module(stage)(out)
    assert torch.allclose(out, model(x))


def test_split_points_refuse_a_placement_that_is_not_contiguous(net_graph):
    back_and_forth = module_placement(net_graph, lambda m: 1 if m.startswith("layers.1") else 0)
    with pytest.raises(ValueError, match=r"the placement is not contiguous: op '\w+' \(module 'layers.2.ln'\) is on "
                                         "device 0, whose stage ended when device 1's began"):
        to_split_points(net_graph, back_and_forth)


def test_the_export_command_writes_json_and_says_what_is_wrong_in_one_line(tmp_path, net_graph, capsys):
    graph_file, placement_file = tmp_path / "net.json.gz", tmp_path / "p.json"
    write_graph(net_graph, graph_file)
    placement_file.write_text(json.dumps(module_placement(net_graph, stages)))
    out = tmp_path / "map.json"
    assert placement_env_main(["export", "--graph", str(graph_file), "--placement", str(placement_file),
                               "--format", "device-map", "--out", str(out)]) == 0
    assert json.loads(out.read_text())["layers.2"] == 1
    assert placement_env_main(["export", "--graph", str(graph_file), "--placement", str(placement_file),
                               "--format", "split-points"]) == 0
    assert json.loads(capsys.readouterr().out)["parts"] == [0, 3, 4, 6]
    zipped = tmp_path / "stages.json.gz"  # gzipped, as its name says and the project's reader takes it
    assert placement_env_main(["export", "--graph", str(graph_file), "--placement", str(placement_file),
                               "--format", "split-points", "--out", str(zipped)]) == 0
    from placement_env.json_files import read_json_file

    assert read_json_file(zipped)["parts"] == [0, 3, 4, 6]
    import subprocess
    import sys

    back = tmp_path / "back.json"
    back.write_text(json.dumps(module_placement(net_graph, lambda m: 1 if m.startswith("layers.1") else 0)))
    done = subprocess.run([sys.executable, "-m", "placement_env", "export", "--graph", str(graph_file), "--placement",
                           str(back), "--format", "split-points", "--out", str(tmp_path / "s.json")],
                          capture_output=True, text=True)
    assert done.returncode == 2 and done.stderr.startswith("error: the placement is not contiguous")
    assert len(done.stderr.strip().splitlines()) == 1 and not (tmp_path / "s.json").exists()
    done = subprocess.run([sys.executable, "-m", "placement_env", "export", "--graph", "default", "--placement",
                           str(back), "--format", "device-map"], capture_output=True, text=True)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1


def test_placements_of_every_placer_on_a_module_granular_graph_export(net_graph):
    from baselines import PLACERS
    from placement_env import Cluster

    cluster = Cluster.preset("p100", 3)
    for name in ("single", "m-topo", "heft", "split", "metis"):
        placement = np.asarray(PLACERS[name](net_graph, cluster, 0))
        device_map = to_device_map(net_graph, placement)  # never a split module
        assert set(device_map.values()) <= set(placement.tolist())


class OwnParameters(nn.Module):
    """Parameters on the model itself, no submodule."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(3, 3))

    def forward(self, x):
        return x @ self.weight


def test_split_points_of_a_model_without_submodules_are_one_error():
    g = from_torch(OwnParameters(), (torch.randn(2, 3),))
    with pytest.raises(ValueError, match="has no op of a submodule: a pipeline stage begins at a submodule"):
        to_split_points(g, [0] * g.num_nodes)


@pytest.mark.parametrize("module, message", [
    (".a", "records module '.a', not a qualified module name"),
    ("a..b", "records module 'a..b', not a qualified module name"),
    (".".join(["m"] * 300), "records a module 300 levels deep, more than the 64 taken"),
])
def test_module_names_that_are_not_names_or_nest_too_deep_are_one_error(module, message):
    from placement_env.graph.model import Edge, Node

    g = ComputationGraph([Node("x", "input", 0.0, 4), Node("f", "linear", 1.0, 4, 4, module=module)],
                         [Edge("x", "f")])
    for export in (to_device_map, to_split_points):
        with pytest.raises(ValueError, match=message.replace("(", r"\(")):
            export(g, [0, 0])


class MixtureOfExperts(nn.Module):
    """A router and four experts in an nn.ModuleList that is never called itself."""

    def __init__(self) -> None:
        super().__init__()
        self.router = nn.Linear(8, 4)
        self.experts = nn.ModuleList(nn.Linear(8, 8) for _ in range(4))
        self.head = nn.Linear(8, 2)

    def forward(self, x):
        weights = torch.softmax(self.router(x), dim=-1)
        mixed = sum(weights[:, k:k + 1] * expert(x) for k, expert in enumerate(self.experts))
        return self.head(mixed)


def test_the_layers_of_a_mixture_of_experts_are_its_experts_not_their_module_list():
    g = from_torch(MixtureOfExperts(), (torch.randn(4, 8),), colocate_modules=True)
    on_one = {n.colocation for n in g.nodes if n.module == "head"}
    points = to_split_points(g, [1 if n.colocation in on_one else 0 for n in g.nodes])
    assert "experts" not in points.layers
    assert [layer for layer in points.layers if layer.startswith("experts")] == [f"experts.{k}" for k in range(4)]
    assert points.layers[-1] == "head" and points.parts[-2] == len(points.layers) - 1


class DropoutTwice(nn.Module):
    """One dropout module called on both branches, as a ViT layer calls its dropout."""

    def __init__(self) -> None:
        super().__init__()
        self.first, self.drop, self.second = nn.Linear(4, 4), nn.Dropout(0.0), nn.Linear(4, 4)

    def forward(self, x):
        return self.drop(self.second(self.drop(self.first(x))))


def test_a_stage_never_begins_at_a_module_the_program_enters_twice():
    g = from_torch(DropoutTwice(), (torch.randn(2, 4),), colocate_modules=True)
    later = {n.colocation for n in g.nodes if n.module in ("drop", "second")}
    with pytest.raises(ValueError, match="stage 1 would begin at module 'drop', which the program enters more "
                                         "than once"):
        to_split_points(g, [1 if n.colocation in later else 0 for n in g.nodes])
    from placement_env.plan.module_tree import PlacedModules

    assert PlacedModules(g, [0] * g.num_nodes).called_again == {"drop"}  # each linear is called once
