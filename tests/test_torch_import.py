"""from_torch: tracing PyTorch models into computation graphs."""

import inspect
import subprocess
import sys

import pytest
import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from placement_env import Cluster, from_torch, simulate
from placement_env.importers.pytorch import ROOFLINE_DEVICES


def total_flops(model, x):
    with FlopCounterMode(display=False) as counter:
        model(x)
    return counter.get_total_flops()


class BranchyCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.left = nn.Conv2d(8, 8, 3, padding=1)
        self.right = nn.Conv2d(8, 8, 1)
        self.head = nn.Linear(16 * 8 * 8, 10)

    def forward(self, x):
        y = torch.relu(self.stem(x))
        z = torch.cat([self.left(y), torch.relu(self.right(y))], dim=1)
        return self.head(z.flatten(1))


class Shared(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = nn.Linear(16, 16)

    def forward(self, x):
        return self.block(torch.tanh(self.block(x)))


class UnrolledRNN(nn.Module):
    def __init__(self, steps=4):
        super().__init__()
        self.cell = nn.LSTMCell(8, 16)
        self.out = nn.Linear(16, 4)
        self.steps = steps

    def forward(self, x):
        h = c = torch.zeros(x.shape[0], 16)
        for t in range(self.steps):
            h, c = self.cell(x[:, t], (h, c))
        return self.out(h)


class DataDependent(nn.Module):
    def forward(self, x):
        if x.sum() > 0:
            return x * 2
        return x - 1


MODELS = {
    "mlp": (nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10)), torch.randn(4, 32)),
    "cnn": (BranchyCNN(), torch.randn(2, 3, 8, 8)),
    "shared": (Shared(), torch.randn(3, 16)),
    "rnn": (UnrolledRNN(), torch.randn(2, 4, 8)),
}


@pytest.mark.parametrize("name", list(MODELS))
def test_traced_graph_flops_match_the_flop_counter(name):
    model, x = MODELS[name]
    model.eval()
    g = from_torch(model, x, training=False)
    assert sum(n.flops or 0.0 for n in g.nodes) == total_flops(model, x)
    assert g.nodes[0].op == "input" and g.nodes[0].output_bytes == x.numel() * 4
    out = model(x)
    sinks = [g.nodes[i] for i in range(g.num_nodes) if g.out_degree[i] == 0]
    assert any(s.output_bytes == out.numel() * 4 for s in sinks)
    params = sum(p.numel() * 4 for p in model.parameters())
    assert sum(n.param_bytes for n in g.nodes) == params  # every parameter charged exactly once


def test_linear_flops_and_bytes_by_hand():
    g = from_torch(nn.Linear(32, 10), torch.randn(4, 32), training=False)
    (lin,) = [n for n in g.nodes if n.op != "input"]
    assert lin.flops == 2 * 4 * 32 * 10
    assert lin.output_bytes == 4 * 10 * 4 and lin.param_bytes == (32 * 10 + 10) * 4
    roof = ROOFLINE_DEVICES["p100"]
    moved = lin.output_bytes + 4 * 32 * 4 + lin.param_bytes
    expected = max(lin.flops / (roof.peak_flops * roof.compute_efficiency),
                   moved / (roof.bandwidth * roof.memory_efficiency)) + roof.launch_overhead
    assert lin.cost == pytest.approx(expected)


def test_shared_parameters_are_ops_and_views_are_colocated():
    model, x = MODELS["shared"]
    g = from_torch(model, x, training=False)
    linears = [n for n in g.nodes if n.op == "linear"]
    weight, bias = 16 * 16 * 4, 16 * 4
    params = {n.id: n for n in g.nodes if n.op == "parameter"}  # shared weights are ops feeding every reader
    assert len(linears) == 2 and [n.param_bytes for n in linears] == [0, 0]
    assert sorted(n.param_bytes for n in params.values()) == [bias, weight]
    for p in params.values():
        assert p.output_bytes == p.param_bytes and p.cost == 0
        readers = [g.nodes[d].op for s, d in zip(g.edge_src.tolist(), g.edge_dst.tolist()) if s == g.index_of(p.id)]
        assert readers == ["linear", "linear"]
    legacy = from_torch(model, x, training=False, shared_parameters=False)
    linears = [n for n in legacy.nodes if n.op == "linear"]
    assert sorted(n.param_bytes for n in linears) == [0, weight + bias]
    cnn = from_torch(*MODELS["cnn"], training=False)
    flat = next(n for n in cnn.nodes if n.op == "flatten")
    producer = cnn.nodes[int(cnn.predecessors[1][cnn.predecessors[0][cnn.index_of(flat.id)]])]
    assert flat.colocation is not None and flat.colocation == producer.colocation


class _SavesLittle(nn.Module):
    """A linear layer keeps its input, a softmax its output, an addition, a view and a product by a number nothing."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(self.lin(x) + 1, -1).view(-1) * 2


@pytest.mark.parametrize("profile", [False, True])
def test_the_training_graph_keeps_what_autograd_saves_for_the_backward(profile):
    def kept(g):
        return {(g.ids[s], g.ids[d]) for s, d in zip(g.edge_src, g.edge_dst)
                if g.nodes[d].phase == "backward" and g.nodes[s].phase == "forward"}

    g = from_torch(_SavesLittle(), (torch.randn(4, 8),), profile=profile, repeats=1)
    assert kept(g) == {("x", "linear_grad"), ("softmax", "softmax_grad"), ("mul", "mul_grad")}  # mul: the sink
    every_input = from_torch(_SavesLittle(), (torch.randn(4, 8),), profile=profile, repeats=1,
                             saved_activations="inputs")
    assert kept(every_input) == {("x", "linear_grad"), ("linear", "add_grad"), ("add", "softmax_grad"),
                                 ("softmax", "view_grad"), ("view", "mul_grad"), ("mul", "mul_grad")}
    with pytest.raises(ValueError, match="saved_activations must be one of autograd, inputs, got 'all'"):
        from_torch(_SavesLittle(), (torch.randn(4, 8),), saved_activations="all")


def test_a_kept_view_holds_the_storage_it_aliases():
    class KeepsAView(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b = nn.Linear(8, 8), nn.Linear(8, 8)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h, g = torch.tanh(self.a(x)), torch.sigmoid(self.b(x))
            return (h.view(-1) * g.view(-1)).sum()  # the product keeps both views: the storages of h and g

    g = from_torch(KeepsAView(), (torch.randn(4, 8),))
    into_mul = {g.ids[s] for s, d in zip(g.edge_src, g.edge_dst) if g.ids[d] == "mul_grad"}
    assert into_mul == {"tanh", "sigmoid", "sum_1_grad"}  # the bases, not the views; and the gradient


def test_training_graph_simulates_and_profiling_measures():
    model, x = MODELS["cnn"]
    g = from_torch(model, x)
    assert g.num_nodes == 2 * from_torch(model, x, training=False).num_nodes
    assert {n.phase for n in g.nodes} == {"forward", "backward"}
    r = simulate(g, g.expand_unit_placement([u % 2 for u in range(g.num_units)]), Cluster.preset("p100", 2))
    assert r.makespan > 0 and not r.oom
    measured = from_torch(model, x, training=False, profile=True, repeats=3)
    assert all(n.cost > 0 for n in measured.nodes if n.op != "input")


def test_profiling_runs_on_the_thread_count_of_the_devices_it_costs_for(monkeypatch):
    import placement_env.importers.op_records as importer

    threads, seen = [2], []
    monkeypatch.setattr(torch, "get_num_threads", lambda: threads[0])
    monkeypatch.setattr(torch, "set_num_threads", lambda n: threads.__setitem__(0, n))
    run = importer.OpRecorder.run

    def recorded(self, *args):
        seen.append(threads[0])
        return run(self, *args)

    monkeypatch.setattr(importer.OpRecorder, "run", recorded)
    model = nn.Linear(4, 4)
    from_torch(model, torch.randn(2, 4), profile=True, repeats=1, training=False)
    assert seen == [1] and threads[0] == 2  # the local workers' one thread whatever the process had; restored
    from_torch(model, torch.randn(2, 4), profile=True, repeats=1, training=False, profile_threads=2)
    assert seen == [1, 2]
    with pytest.raises(ValueError, match="profile_threads must be an integer >= 1, got 0"):
        from_torch(model, torch.randn(2, 4), profile=True, profile_threads=0)


def test_untraceable_module_names_the_module_and_the_reasons():
    line = inspect.getsourcelines(DataDependent.forward)[1] + 1  # the `if`
    with pytest.raises(ValueError, match=f"cannot trace module DataDependent at .*test_torch_import.py:{line} "
                                         r"\(`if x.sum\(\) > 0:`\): torch.export failed .*torch.fx failed "
                                         ".*control flow"):
        from_torch(DataDependent(), torch.randn(3))
    with pytest.raises(ValueError, match="unknown device kind 'tpu'"):
        from_torch(nn.Linear(2, 2), torch.randn(1, 2), device_kind="tpu")


@pytest.mark.slow
def test_a_module_typed_in_on_standard_input_is_named_without_empty_code():
    script = ("import torch\nfrom placement_env import from_torch\n"
              "class Typed(torch.nn.Module):\n    def forward(self, x):\n        return x * 2 if x.sum() > 0 else x\n"
              "try:\n    from_torch(Typed(), torch.randn(3))\nexcept ValueError as e:\n    print(str(e)[:60])\n")
    out = subprocess.run([sys.executable, "-"], input=script, capture_output=True, text=True, timeout=120)
    assert out.stdout.startswith("cannot trace module Typed at <stdin>:5: torch.export failed"), out.stdout + out.stderr


def test_a_failed_trace_prints_nothing_but_its_error(capfd):
    with pytest.raises(ValueError, match="cannot trace module DataDependent"):
        from_torch(DataDependent(), torch.randn(3))
    captured = capfd.readouterr()
    assert captured.err == "" and captured.out == ""


@pytest.mark.parametrize("profile", [False, True])
def test_inputs_the_module_cannot_run_on_are_one_error_and_no_log(capfd, profile):
    mlp = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    with pytest.raises(ValueError, match=r"module Sequential does not run on example inputs \(tensor\[2, 5\]\): "
                                         "RuntimeError: "):
        from_torch(mlp, torch.randn(2, 5), profile=profile)
    assert capfd.readouterr().err == ""  # fake tensors log torch's own traceback unless silenced
    with pytest.raises(ValueError, match=r"example inputs \(none\)"):
        from_torch(mlp, ())
    with pytest.raises(ValueError, match="example_inputs must be a tensor or a sequence of inputs, got 'x'"):
        from_torch(mlp, "x")
    with pytest.raises(ValueError, match="repeats must be an integer >= 1, got 0"):
        from_torch(mlp, torch.randn(2, 4), profile=True, repeats=0)


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_a_multi_layer_rnn_imports_one_op_per_layer_with_the_same_outputs(kind):
    from placement_env.importers.pytorch import LayerwiseRNN, layerwise_recurrent

    torch.manual_seed(0)
    rnn = getattr(torch.nn, kind)(16, 32, num_layers=4, bidirectional=True)
    x = torch.randn(5, 2, 16)
    ours, theirs = LayerwiseRNN(rnn)(x), rnn(x)
    torch.testing.assert_close(ours[0], theirs[0])
    torch.testing.assert_close(ours[1][0] if kind == "LSTM" else ours[1], theirs[1][0] if kind == "LSTM" else theirs[1])
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), rnn)
    assert layerwise_recurrent(model) is not model and isinstance(model[1], type(rnn))  # the user's model is intact
    graph = from_torch(model, torch.randn(5, 2, 16))
    layers = [n for n in graph.nodes if n.op == kind.lower() and n.phase == "forward"]
    assert len(layers) == 4 and len({graph.unit_of[graph.index_of(n.id)] for n in layers}) == 4
    single = from_torch(model, torch.randn(5, 2, 16), split_recurrent=False)
    assert sum(n.op == kind.lower() and n.phase == "forward" for n in single.nodes) == 1


def test_a_4_layer_lstm_goes_one_layer_per_device():
    """GNMT's model parallelism: split places the 4 layers of a 4-layer LSTM on 4 devices when one device holds one
    layer's parameters only; the simulator runs it."""
    from baselines import place
    from placement_env import Cluster, simulate

    torch.manual_seed(0)
    model = torch.nn.LSTM(64, 256, num_layers=4)
    graph = from_torch(model, torch.randn(8, 4, 64))
    layers = [graph.unit_of[graph.index_of(n.id)] for n in graph.nodes if n.op == "lstm" and n.phase == "forward"]
    assert len(layers) == 4
    static = float((graph.param_bytes * 4).sum())
    cluster = Cluster.preset("p100", 4).with_memory(static * 0.3)  # about one layer's parameters, x 4, each
    placement = place(graph, cluster, "split")
    unit_device = graph.unit_placement(placement)
    assert sorted(unit_device[layers].tolist()) == [0, 1, 2, 3]
    assert not simulate(graph, placement, cluster).oom


def test_the_graph_records_the_batch_it_was_traced_with():
    model = nn.Sequential(nn.Linear(4, 3), nn.ReLU())
    assert from_torch(model, (torch.randn(6, 4),)).batch == 6
    assert from_torch(model, (torch.randn(6, 4),), training=True).batch == 6


def test_costs_for_a_device_kind_are_not_sped_up_twice():
    # a roofline import for H100s placed on H100s takes the H100 roofline time, not that divided by the H100's
    # speed once more; imported for P100s and run on P100s, the P100 roofline time
    model = nn.Sequential(nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 512))
    x = torch.randn(64, 512)
    for kind in ("p100", "h100-nvlink"):
        roof = ROOFLINE_DEVICES[kind]
        g = from_torch(model, (x,), device_kind=kind, training=False)
        c = Cluster.preset(kind, 1)
        linear = g.nodes[g.ops.index("linear")]
        flops = 2 * 64 * 512 * 512
        assert linear.flops == flops
        by_hand = max(flops / (roof.peak_flops * roof.compute_efficiency),
                      (64 * 512 * 4 * 2 + 512 * 513 * 4) / (roof.bandwidth * roof.memory_efficiency))
        assert linear.cost / c.speed[0] == pytest.approx(by_hand + roof.launch_overhead, rel=1e-6)
    # a one-GPU step is then the sum of the ops' roofline times on that GPU
    h100 = from_torch(model, (x,), device_kind="h100-nvlink", training=False)
    c = Cluster.preset("h100-nvlink", 1)
    assert simulate(h100, [0] * h100.num_nodes, c).makespan == pytest.approx(h100.total_cost / c.speed[0])


def test_half_precision_counts_bytes_in_it_and_costs_products_at_the_tensor_core_peak():
    model = nn.Sequential(nn.Linear(1024, 1024), nn.ReLU())
    x = torch.randn(256, 1024)
    fp32 = from_torch(model, (x,), device_kind="a100-nvlink", training=False)
    bf16 = from_torch(model, (x,), device_kind="a100-nvlink", training=False, dtype=torch.bfloat16)
    assert model[0].weight.dtype == torch.float32  # the user's model is not cast
    i = fp32.ops.index("linear")
    assert bf16.nodes[i].output_bytes == fp32.nodes[i].output_bytes / 2 == 256 * 1024 * 2
    assert bf16.nodes[i].param_bytes == fp32.nodes[i].param_bytes / 2
    roof, speed = ROOFLINE_DEVICES["a100-nvlink"], Cluster.preset("a100-nvlink", 1).speed[0]
    moved = 256 * 1024 * 2 * 2 + 1024 * 1025 * 2
    by_hand = max(2 * 256 * 1024 * 1024 / (312e12 * roof.compute_efficiency),
                  moved / (roof.bandwidth * roof.memory_efficiency)) + roof.launch_overhead
    assert bf16.nodes[i].cost / speed == pytest.approx(by_hand, rel=1e-6)
    with pytest.raises(ValueError, match="device kind 'p100': this device kind has no bfloat16 peak"):
        from_torch(model, (x,), device_kind="p100", dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="dtype must be one of"):
        from_torch(model, (x,), dtype=torch.int8)


def test_every_op_records_its_fixed_cost_the_part_a_micro_batch_pays_in_full():
    model, x = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 8)), torch.randn(32, 64)
    roofline = from_torch(model, x, device_kind="p100")
    ops = [n for n in roofline.nodes if n.cost > 0]
    assert all(n.fixed_cost == pytest.approx(min(n.cost, 5e-6)) for n in ops)  # the P100's launch overhead
    profiled = from_torch(model, x, profile=True, repeats=3)
    assert all(0 < (n.fixed_cost or 0.0) <= n.cost for n in profiled.nodes if n.cost > 0)


class ReturnsNothing(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(2, 2)

    def forward(self, x):
        return None


def test_a_function_a_batch_of_0_and_a_forward_that_computes_nothing_are_one_error_each():
    with pytest.raises(ValueError, match="module must be a torch.nn.Module, got function"):
        from_torch(lambda x: x * 2, torch.randn(3, 2))
    with pytest.raises(ValueError, match=r"an example input has a batch of 0 \(shape \[0, 2\]\)"):
        from_torch(nn.Linear(2, 2), torch.randn(0, 2))
    with pytest.raises(ValueError, match="module ReturnsNothing computes nothing from its inputs"):
        from_torch(ReturnsNothing(), torch.randn(3, 2))
