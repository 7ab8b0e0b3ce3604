"""``placement_env.runtime.placed_module``: every placer's placement of five models runs, with the model's outputs
and gradients, and copies tensors exactly where the simulator transfers them."""

import copy

import numpy as np
import pytest
import torch
from torch import nn

from baselines import PLACERS, placers_with_budget
from placement_env import Cluster, from_torch, simulate
from placement_env.runtime.placed_program import placed_module


class TwoBranch(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 8))
        self.b = nn.Sequential(nn.Linear(8, 8), nn.Tanh())
        self.out = nn.Linear(8, 2)

    def forward(self, x):
        return self.out(self.a(x) + self.b(x))


class Tagger(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(4, 8)
        self.rnn = nn.LSTM(8, 8, num_layers=2, batch_first=True)
        self.out = nn.Linear(8, 3)

    def forward(self, x):
        return self.out(self.rnn(self.embed(x))[0])


class ResidualCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1, self.bn = nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8)
        self.conv2, self.fc = nn.Conv2d(8, 8, 3, padding=1), nn.Linear(8, 4)

    def forward(self, x):
        y = torch.relu(self.bn(self.conv1(x)))
        y = y + torch.relu(self.conv2(y))
        return self.fc(y.mean((2, 3)))


class TiedHead(nn.Module):
    """GPT-2's tied embedding in small: the output layer reads the embedding's weight."""

    def __init__(self) -> None:
        super().__init__()
        self.emb, self.mid = nn.Embedding(20, 8), nn.Linear(8, 8)
        self.head = nn.Linear(8, 20, bias=False)
        self.head.weight = self.emb.weight

    def forward(self, x):
        return self.head(torch.relu(self.mid(self.emb(x))))


def models():
    torch.manual_seed(0)
    encoder = nn.TransformerEncoder(nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True), 2)
    return {
        "mlp": (nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 2)),
                torch.randn(4, 8)),
        "two-branch": (TwoBranch(), torch.randn(4, 8)),
        "lstm": (Tagger(), torch.randn(2, 5, 4)),
        "cnn": (ResidualCNN(), torch.randn(2, 3, 8, 8)),
        "transformer": (encoder, torch.randn(2, 5, 16)),
        "tied": (TiedHead(), torch.randint(0, 20, (3, 4))),
    }


MODELS = models()
CLUSTER = Cluster.preset("p100", 3)
PLACER_NAMES = ("round-robin", "random", "heft", "m-etf", "split", "anneal")


def placer(name):
    return placers_with_budget(0.3)["anneal"] if name == "anneal" else PLACERS[name]


def gradients(module: nn.Module) -> dict[str, torch.Tensor]:
    return {name: p.grad.clone() for name, p in module.named_parameters()}


@pytest.mark.parametrize("model_name", list(MODELS))
@pytest.mark.parametrize("placer_name", PLACER_NAMES)
def test_a_placed_module_gives_the_model_s_outputs_and_gradients(model_name, placer_name):
    model, x = MODELS[model_name]
    graph = from_torch(model, (x,))
    placement = np.asarray(placer(placer_name)(graph, CLUSTER, 0))
    placed = placed_module(model, (x,), graph, placement, ["cpu"] * CLUSTER.num_devices)
    model.zero_grad()
    expected = model(x)
    expected.square().sum().backward()
    out = placed(x)
    out.square().sum().backward()
    assert torch.allclose(out, expected, atol=1e-5)
    ours, theirs = gradients(placed), gradients(model)
    # a tied weight stays one parameter; export names parameters with "_" for "."; the order is the model's
    assert len(ours) == len(theirs)
    for (_, a), (_, b) in zip(ours.items(), theirs.items()):
        assert torch.allclose(a, b, atol=1e-5)


@pytest.mark.parametrize("model_name", list(MODELS))
def test_it_copies_tensors_exactly_where_the_simulator_transfers_them(model_name):
    model, x = MODELS[model_name]
    graph = from_torch(model, (x,), training=False)  # the forward step: the copies the fx program makes
    for name in ("round-robin", "random", "heft"):
        placement = np.asarray(PLACERS[name](graph, CLUSTER, 0))
        placed = placed_module(model, (x,), graph, placement, ["cpu"] * CLUSTER.num_devices)
        schedule = simulate(graph, placement, CLUSTER).schedule
        simulated = sorted((graph.ids[int(node)], int(dst)) for node, dst in zip(schedule.transfer_node,
                                                                                  schedule.transfer_dst))
        assert sorted(placed.transfers) == simulated


def test_write_back_gives_the_model_the_placed_module_s_trained_parameters():
    from placement_env.runtime.placed_program import write_back

    model, x = MODELS["cnn"]  # BatchNorm: buffers (running statistics) too
    graph = from_torch(model, (x,))
    placement = np.asarray(PLACERS["round-robin"](graph, CLUSTER, 0))
    placed = placed_module(model, (x,), graph, placement, ["cpu"] * CLUSTER.num_devices)
    trained = copy.deepcopy(model)
    for module in (placed, trained):
        optimizer = torch.optim.SGD(module.parameters(), lr=0.1)
        module(x).square().sum().backward()
        optimizer.step()
    assert not torch.allclose(model.fc.weight, trained.fc.weight)  # placed_module trained copies
    write_back(placed, model)
    for (name, ours), (_, theirs) in zip(model.state_dict().items(), trained.state_dict().items()):
        assert torch.allclose(ours, theirs, atol=1e-6), name
    with pytest.raises(ValueError, match="it was placed from another model"):
        write_back(placed, nn.Linear(2, 2))


def test_a_module_granular_placement_runs_too():
    model, x = MODELS["transformer"]
    graph = from_torch(model, (x,), colocate_modules=3)
    placement = np.asarray(PLACERS["round-robin"](graph, CLUSTER, 0))
    assert len(set(placement.tolist())) > 1
    assert torch.allclose(placed_module(model, (x,), graph, placement, ["cpu"] * 3)(x), model(x), atol=1e-5)


def test_bad_placements_and_a_model_of_another_graph_are_one_error_each():
    model, x = MODELS["mlp"]
    graph = from_torch(model, (x,))
    with pytest.raises(ValueError, match="placement has 2 entries, graph 'Sequential' has"):
        placed_module(model, (x,), graph, [0, 1], ["cpu"])
    with pytest.raises(ValueError, match=r"op 'input_1' is placed on device 2, but only 2 device\(s\) are given "
                                         r"\(cpu, cpu\)"):
        placed_module(model, (x,), graph, [2] * graph.num_nodes, ["cpu", "cpu"])
    other, y = MODELS["two-branch"]
    with pytest.raises(ValueError, match="the model does not match graph 'Sequential': its op 0 is 'x', the "
                                         "graph's is 'input_1'"):
        placed_module(other, (y,), graph, [0] * graph.num_nodes, ["cpu"])
