"""Real training steps of a placement on local worker processes, the cluster they form, profiled backward costs."""

import os

import numpy as np
import pytest
import torch
from torch import nn

from placement_env import from_torch
from placement_env.graph.model import ComputationGraph, Edge, Node
from placement_env.graph.training import to_training_graph
from placement_env.runtime.local_cluster import fit_link, local_cluster
from placement_env.runtime.local_workers import check_local_workers
from placement_env.runtime.measured_step import measure_step

pytestmark = pytest.mark.slow


class Net(nn.Module):
    """Two branches, a shared weight (a ``parameter`` op sent to the other device) and a view."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(16, 32)
        self.b = nn.Linear(16, 32)
        self.shared = nn.Linear(32, 32)
        self.head = nn.Linear(64, 3)

    def forward(self, x):
        left = self.shared(torch.relu(self.a(x)))
        right = self.shared(torch.tanh(self.b(x)))
        return self.head(torch.cat([left, right], 1).view(x.shape[0], 64))


class TiedHead(nn.Module):
    """An embedding whose weight is also the output layer's (GPT-2's tied embedding, in small)."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(20, 16)
        self.mid = nn.Linear(16, 16)
        self.head = nn.Linear(16, 20, bias=False)
        self.head.weight = self.emb.weight

    def forward(self, x):
        return self.head(torch.relu(self.mid(self.emb(x))))


def model_and_graph():
    torch.manual_seed(0)
    model, x = Net(), torch.randn(8, 16)
    return model, x, from_torch(model, (x,))


def two_device_placement(graph: ComputationGraph) -> list[int]:
    """The ``b`` branch and the head on device 1, the rest on 0 (whole colocation groups)."""
    on_one = {n.colocation for n in graph.nodes if n.module in ("b", "head")}
    return [1 if n.colocation in on_one else 0 for n in graph.nodes]


def test_a_two_device_step_runs_and_computes_the_model_s_gradients():
    model, x, graph = model_and_graph()
    placement = two_device_placement(graph)
    assert set(placement) == {0, 1}
    got = measure_step(model, (x,), graph, placement, repeats=3)
    assert got.backend == "local-workers" and len(got.steps) == 3
    assert got.busy.shape == (2,) and got.peak_memory.shape == (2,)
    assert (got.busy > 0).all() and (got.peak_memory > 0).all()
    assert got.seconds >= got.busy.max()  # each step contains each worker's busy time
    expected = model(x).sum()
    expected.backward()
    for name, param in model.named_parameters():
        np.testing.assert_allclose(got.gradients[name], param.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_a_tied_weight_read_on_two_devices_gets_both_readers_gradients():
    torch.manual_seed(0)
    model, x = TiedHead(), torch.randint(0, 20, (4, 5))
    graph = from_torch(model, (x,))
    on_one = {n.colocation for n in graph.nodes if n.module == "head"}
    placement = [1 if n.colocation in on_one else 0 for n in graph.nodes]
    tied = graph.ids.index("param:emb.weight")
    assert placement[tied] == 0 and 1 in placement  # the head reads the embedding's weight from the other device
    got = measure_step(model, (x,), graph, placement, repeats=1)
    model(x).sum().backward()
    for name, param in model.named_parameters():
        np.testing.assert_allclose(got.gradients[name], param.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_bad_placements_graphs_and_models_are_one_error_each():
    model, x, graph = model_and_graph()
    with pytest.raises(ValueError, match="placement has 3 entries"):
        measure_step(model, (x,), graph, [0, 0, 0])
    with pytest.raises(ValueError, match="no backward ops"):
        forward = from_torch(model, (x,), training=False)
        measure_step(model, (x,), forward, [0] * forward.num_nodes)
    with pytest.raises(ValueError, match="does not match graph"):
        measure_step(nn.Sequential(nn.Linear(16, 3)), (x,), graph, [0] * graph.num_nodes)
    with pytest.raises(ValueError, match="only 1 device"):
        measure_step(model, (x,), graph, two_device_placement(graph), devices=["cuda:0"])
    with pytest.raises(ValueError, match="repeats"):
        measure_step(model, (x,), graph, [0] * graph.num_nodes, repeats=0)


def test_more_local_devices_than_cores_warns(monkeypatch):
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    with pytest.warns(RuntimeWarning, match="3 local devices on 2 core"):
        check_local_workers(3)


def test_local_cluster_measures_its_link():
    cluster = local_cluster(3)
    assert cluster.num_devices == 3 and (cluster.speed == 1.0).all()
    off = ~np.eye(3, dtype=bool)
    assert (cluster.latency[off] >= 0).all() and (cluster.latency[off] < 0.05).all()
    assert (cluster.bandwidth[off] > 1e6).all() and np.isfinite(cluster.bandwidth[off]).all()
    idle = local_cluster(2, loaded=False)
    assert idle.latency[0, 1] >= 0 and idle.bandwidth[0, 1] > 1e6
    with pytest.raises(ValueError, match="num_devices"):
        local_cluster(0)


def test_fit_link_recovers_a_line():
    sizes = np.array([4, 4096, 65536, 1 << 20])
    latency, bandwidth = fit_link(sizes, 5e-5 + sizes / 2e9)
    assert latency == pytest.approx(5e-5, rel=1e-6) and bandwidth == pytest.approx(2e9, rel=1e-6)


def test_fit_link_takes_the_latency_from_the_small_messages():
    # the large messages off the line by +-20% (as a loaded host gives): the intercept of plain least squares
    # would follow them; the relative fit keeps the small messages' 100 us
    sizes = np.array([4, 4096, 65536, 1 << 19, 1 << 22])
    seconds = 1e-4 + sizes / 1e9
    seconds[3] *= 1.2
    seconds[4] *= 0.8
    latency, _ = fit_link(sizes, seconds)
    plain = max(0.0, float(np.polyfit(sizes, seconds, 1)[1]))
    assert abs(latency - 1e-4) < 0.1e-4 < abs(plain - 1e-4)


def test_measured_backward_costs_replace_the_rule():
    forward = ComputationGraph([Node("a", "matmul", 1.0, 8, 4), Node("b", "relu", 0.5, 8, 0)], [Edge("a", "b")])
    rule = to_training_graph(forward)
    measured = to_training_graph(forward, backward_costs={"a": 3.5})
    cost = {n.id: n.cost for n in measured.nodes}
    assert cost["a_grad"] == 3.5 and cost["b_grad"] == 0.5  # b keeps the 1x rule
    assert {n.id: n.cost for n in rule.nodes}["a_grad"] == 2.0


def test_profiled_training_graphs_time_each_op_s_backward():
    torch.manual_seed(0)
    model, x = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 8)), torch.randn(32, 64)
    graph = from_torch(model, (x,), profile=True, repeats=3)
    forward = {n.id: n for n in graph.nodes if n.phase == "forward"}
    for node in graph.nodes:
        if node.phase == "backward" and node.op in ("linear_grad", "relu_grad"):
            source = forward[node.id[: -len("_grad")]]
            assert node.cost > 0
            assert node.cost != pytest.approx(source.cost * (2.0 if source.param_bytes else 1.0), rel=1e-9)


def test_the_step_calibration_runs_no_judged_placement_and_recovers_known_overheads(monkeypatch):
    """On a fake clock: measure_step's one-device step is eager's plus 40 us per computing op, and its calibration
    placement's step the simulated one with 40 us a call and 300 us per crossing tensor; the fit finds both."""
    from placement_env import Cluster, simulate
    from placement_env.runtime import step_calibration
    from placement_env.runtime.runtime_overheads import RuntimeOverheads

    graph = to_training_graph(ComputationGraph([Node(f"l{i}", "linear", 1e-3, 4000, 100) for i in range(6)],
                                               [Edge(f"l{i}", f"l{i + 1}") for i in range(5)], name="chain"))
    cluster = Cluster.preset("p100", 2)
    truth = RuntimeOverheads(4e-5, tensor_seconds=3e-4)
    eager = 0.02
    seen = []

    class Step:
        def __init__(self, seconds: float) -> None:
            self.seconds = seconds

    def fake_measure(model, inputs, g, placement, repeats, example_kwargs, cluster):
        seen.append(tuple(int(d) for d in placement))
        if len(set(seen[-1])) == 1:
            return Step(eager + truth.call_seconds * int(np.count_nonzero(g.cost > 0)))
        calibrated, c = truth.applied(g, cluster, placement)
        return Step(float(simulate(calibrated, placement, c).makespan))

    monkeypatch.setattr(step_calibration, "measure_step", fake_measure)
    monkeypatch.setattr(step_calibration, "eager_seconds", lambda *args: eager)
    judged = {tuple(graph.expand_unit_placement(np.arange(graph.num_units) % 2).tolist())}
    found = step_calibration.calibrate_step(None, (), {}, graph, cluster, rounds=2, avoid=judged)
    assert found.call_seconds == pytest.approx(truth.call_seconds)
    assert found.tensor_seconds == pytest.approx(truth.tensor_seconds, rel=1e-6)
    assert not judged & set(seen) and {len(set(p)) for p in seen} == {1, 2}
    again = step_calibration.calibration_placement(graph, judged)
    assert tuple(again.tolist()) in seen  # the same seeded placement every time
    with pytest.raises(ValueError, match="one placement unit"):
        step_calibration.calibration_placement(ComputationGraph([Node("a", "op", 1.0, 1)], [], name="one"))
