"""The pipelined step (docs/spec/simulator.md section 3a): closed forms, hand-computed schedules, the
unrolled graph, bad input; the compiled simulator against the literal reference on random problems."""

import json
import subprocess
import sys
from dataclasses import replace

import gymnasium
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from baselines import place
from baselines.split import split
from placement_env import Cluster, ComputationGraph, Device, Edge, Node, simulate, simulate_batch, write_graph
from placement_env.graph.training import to_training_graph
from placement_env.sim.memory_timeline import memory_timeline
from placement_env.sim.pipeline import Step, checked_microbatches, stage_caps, unrolled
from placement_env.sim.reference import simulate_reference
from tests.test_simulator_properties import problems


def chain(p: int, f: float, b: float, act: float = 1000.0, update: bool = False) -> ComputationGraph:
    """p stages in a chain, stage s a forward op F{s} (cost f, activations ``act`` bytes) and its backward
    B{s} (cost b), B{s} reading F{s}'s output and B{s+1}'s gradient; costs for the whole batch."""
    nodes = [Node(f"F{s}", "fwd", f, act, 10, phase="forward") for s in range(p)]
    nodes += [Node(f"B{s}", "bwd", b, act, 0, phase="backward") for s in range(p)]
    edges = [Edge(f"F{s}", f"F{s + 1}") for s in range(p - 1)] + [Edge(f"F{p - 1}", f"B{p - 1}")]
    edges += [Edge(f"B{s + 1}", f"B{s}") for s in range(p - 1)] + [Edge(f"F{s}", f"B{s}") for s in range(p - 1)]
    if update:
        nodes += [Node(f"U{s}", "adam", 0.5, 0, 0, phase="update") for s in range(p)]
        edges += [Edge(f"B{s}", f"U{s}") for s in range(p)]
    return ComputationGraph(nodes, edges, name=f"chain{p}")


def free_cluster(p: int) -> Cluster:
    return Cluster([Device(f"d{i}", 1.0, 10**12) for i in range(p)], np.full((p, p), 1e30), np.zeros((p, p)))


def stages(p: int, update: bool = False) -> list[int]:
    return list(range(p)) * (3 if update else 2)


@pytest.mark.parametrize("schedule", ["1f1b", "gpipe"])
@pytest.mark.parametrize("p,m", [(1, 4), (2, 3), (3, 6), (4, 8), (4, 2)])
def test_a_uniform_chain_ends_at_m_plus_p_minus_one_stage_times(schedule, p, m):
    f, b = 1.0, 2.0  # per micro-batch
    g = chain(p, f * m, b * m)
    ref = simulate_reference(g, stages(p), free_cluster(p), microbatches=m, schedule=schedule)
    assert ref["makespan"] == pytest.approx((m + p - 1) * (f + b))
    got = simulate(g, stages(p), free_cluster(p), microbatches=m, schedule=schedule)
    assert got.makespan == ref["makespan"]


@pytest.mark.parametrize("schedule", ["1f1b", "gpipe"])
@pytest.mark.parametrize("p,m", [(2, 3), (4, 8)])
def test_a_micro_batch_pays_an_op_s_fixed_cost_in_full(schedule, p, m):
    """Each op's fixed part (0.25 forward, 0.5 backward) is paid per micro-batch, the rest divided by m."""
    f, b, phi, psi = 1.0, 2.0, 0.25, 0.5  # per micro-batch: the variable parts, then the fixed ones
    base = chain(p, f * m + phi, b * m + psi)
    g = ComputationGraph([replace(n, fixed_cost=phi if n.phase == "forward" else psi) for n in base.nodes],
                         base.edges(), name="fixed")
    expected = (m + p - 1) * (f + phi + b + psi)  # cost per copy: fixed + (cost - fixed) / m
    ref = simulate_reference(g, stages(p), free_cluster(p), microbatches=m, schedule=schedule)
    assert ref["makespan"] == pytest.approx(expected)
    assert simulate(g, stages(p), free_cluster(p), microbatches=m, schedule=schedule).makespan == ref["makespan"]
    assert simulate(g, stages(p), free_cluster(p)).makespan == pytest.approx(p * (f * m + phi + b * m + psi))


def test_a_fixed_cost_above_the_cost_is_refused_and_round_trips_through_the_file(tmp_path):
    from placement_env import read_graph

    with pytest.raises(ValueError, match="node 'a': fixed_cost 2.0 is more than its cost 1.0"):
        ComputationGraph([Node("a", "op", 1.0, fixed_cost=2.0)])
    g = ComputationGraph([Node("a", "op", 1.0, fixed_cost=0.25), Node("b", "op", 1.0)], [Edge("a", "b")])
    write_graph(g, tmp_path / "g.json")
    assert read_graph(tmp_path / "g.json").nodes[0].fixed_cost == 0.25
    assert "fixed_cost" not in json.loads((tmp_path / "g.json").read_text())["nodes"][1]  # digests of old graphs


@pytest.mark.parametrize("schedule", ["1f1b", "gpipe"])
def test_one_micro_batch_is_the_plain_step(schedule):
    g = chain(3, 1.0, 2.0)
    plain = simulate(g, stages(3), free_cluster(3))
    one = simulate(g, stages(3), free_cluster(3), microbatches=1, schedule=schedule)
    assert one.makespan == plain.makespan == 9.0
    assert list(one.peak_memory) == list(plain.peak_memory)


def test_1f1b_holds_p_minus_s_micro_batches_of_activations_where_gpipe_holds_all():
    p, m, act = 4, 8, 8000.0
    g = chain(p, 1.0, 2.0, act=act)
    c = free_cluster(p)
    per = act / m  # one micro-batch's activations of one stage
    static = 10 * 4.0
    for schedule, held in (("1f1b", [p - s for s in range(p)]), ("gpipe", [m] * p)):
        r = simulate_reference(g, stages(p), c, microbatches=m, schedule=schedule)
        # stage s holds the forward outputs of the micro-batches in flight, plus at most three transient
        # buffers of one micro-batch (a received input or gradient, the output being made)
        for s in range(p):
            dynamic = r["peak_memory"][s] - static
            assert held[s] * per <= dynamic <= (held[s] + 3) * per, (schedule, s, dynamic / per)


@pytest.mark.parametrize("schedule, peak", [("1f1b", 600.0), ("gpipe", 800.0)])
def test_a_later_micro_batch_makes_its_weight_gradients_beside_the_accumulated_ones(schedule, peak):
    # one device, an op F (100 parameter bytes, 600 bytes of activations) and its backward B, 2 micro-batches,
    # parameters counted twice (weights, gradients): by hand, 1F1B runs F@0 B@0 F@1 B@1 and B@1 holds F@1's
    # 300 bytes and the gradient accumulation's 100: 200 + 400; GPipe runs F@0 F@1 B@0 B@1 and peaks with both
    # micro-batches' activations before any backward: 200 + 600
    g = ComputationGraph([Node("F", "fwd", 2.0, 600, 100, phase="forward"),
                          Node("B", "bwd", 2.0, 0, 0, phase="backward")], [Edge("F", "B")], name="one")
    c = free_cluster(1)
    r = simulate_reference(g, [0, 0], c, param_factor=2.0, microbatches=2, schedule=schedule)
    assert r["peak_memory"] == [peak]
    got = simulate(g, [0, 0], c, param_factor=2.0, microbatches=2, schedule=schedule)
    assert got.peak_memory.tolist() == [peak]
    times, used = memory_timeline(g, got)[0]
    assert used.max() == peak and used[-1] == 200 + 100  # the accumulation's copy is held to the step's end
    assert simulate(g, [0, 0], c, param_factor=2.0).peak_memory.tolist() == [200 + 600]  # one batch: none


def test_the_1f1b_schedule_by_hand():
    # 2 stages, 3 micro-batches, f = b = 1: stage 1 may hold one micro-batch, so its F1 waits for B0
    g = chain(2, 3.0, 3.0)
    r = simulate_reference(g, stages(2), free_cluster(2), microbatches=3, schedule="1f1b")
    ids = unrolled(g, 3).graph.ids
    start = dict(zip(ids, r["start"]))
    assert [start[f"F0@{k}"] for k in range(3)] == [0, 1, 4]
    assert [start[f"F1@{k}"] for k in range(3)] == [1, 3, 5]
    assert [start[f"B1@{k}"] for k in range(3)] == [2, 4, 6]
    assert [start[f"B0@{k}"] for k in range(3)] == [3, 5, 7]
    gp = simulate_reference(g, stages(2), free_cluster(2), microbatches=3, schedule="gpipe")
    start = dict(zip(ids, gp["start"]))
    assert [start[f"F1@{k}"] for k in range(3)] == [1, 2, 3]
    assert [start[f"B1@{k}"] for k in range(3)] == [4, 5, 6]


def test_update_ops_run_once_after_every_micro_batch():
    p, m = 2, 4
    g = chain(p, 4.0, 8.0, update=True)
    step = unrolled(g, m)
    assert step.graph.num_nodes == 2 * p * m + p
    assert sorted(step.graph.cost.tolist()).count(0.5) == p  # the update ops keep their cost
    ids = step.graph.ids
    r = simulate_reference(g, stages(p, update=True), free_cluster(p), microbatches=m)
    end = dict(zip(ids, r["end"]))
    for s in range(p):
        u = ids.index(f"U{s}")
        assert r["start"][u] >= max(end[f"B{s}@{k}"] for k in range(m))
    assert r["makespan"] == pytest.approx((m + p - 1) * 3.0 + 0.5)
    # parameters are held once: the static part of the peak is that of the graph
    one = simulate(g, stages(p, update=True), free_cluster(p), param_factor=4.0)
    assert simulate(g, stages(p, update=True), free_cluster(p), microbatches=m).peak_memory.min() >= 40
    assert one.peak_memory.min() >= 40


def test_the_unrolled_graph_divides_costs_and_bytes_and_keeps_parameters_once():
    g = chain(2, 4.0, 8.0, act=400.0)
    step = unrolled(g, 4)
    assert step.graph.ids[:4] == ("F0@0", "F1@0", "B0@0", "B1@0")
    assert step.graph.cost[:4].tolist() == [1.0, 1.0, 2.0, 2.0]
    assert step.graph.output_bytes[:4].tolist() == [100.0] * 4
    assert step.graph.param_bytes.sum() == g.param_bytes.sum()
    assert step.graph.num_edges == 4 * g.num_edges
    assert step.microbatches == 4 and step.micro.tolist()[:4] == [0] * 4


def test_stages_follow_the_first_forward_op_on_each_device():
    g = chain(3, 1.0, 1.0)
    assert stage_caps(g, np.array([2, 0, 1, 2, 0, 1]), 4).tolist() == [2, 1, 3, 1]


@pytest.mark.parametrize("bad", [0, -2, 1.5, True, "4", None])
def test_bad_micro_batch_counts_are_refused_by_name(bad):
    with pytest.raises(ValueError, match="microbatches"):
        simulate(chain(2, 1.0, 1.0), stages(2), free_cluster(2), microbatches=bad)


def test_more_micro_batches_than_the_traced_batch_is_refused():
    g = chain(2, 1.0, 1.0)
    g = ComputationGraph(g.nodes, g.edges(), name="traced", batch=4)
    assert checked_microbatches(4, g) == 4
    with pytest.raises(ValueError, match="larger than the batch of 4"):
        simulate(g, stages(2), free_cluster(2), microbatches=8)


def test_uneven_micro_batches_and_unbounded_unrolled_steps_are_refused():
    g = chain(2, 1.0, 1.0)
    traced = ComputationGraph(g.nodes, g.edges(), name="traced", batch=8)
    with pytest.raises(ValueError, match=r"microbatches 3 does not divide the batch of 8 .* divisors: 1, 2, 4, 8"):
        simulate(traced, stages(2), free_cluster(2), microbatches=3)
    with pytest.raises(ValueError, match="microbatches 1000000 is more than the 4096 a step may have"):
        simulate(g, stages(2), free_cluster(2), microbatches=1_000_000)
    big = chain(300, 1.0, 1.0)  # 600 ops: 1,000 micro-batches would unroll to 600,000
    with pytest.raises(ValueError, match=r"would unroll to 600,000 ops, more than the 500,000 .* \(at most 833"):
        simulate(big, [0] * big.num_nodes, free_cluster(1), microbatches=1000)


def test_the_cache_of_unrolled_steps_holds_a_bounded_number_of_ops(monkeypatch):
    import placement_env.sim.pipeline as pipeline

    monkeypatch.setattr(pipeline, "MAX_UNROLLED_OPS", 100)
    g = chain(2, 1.0, 1.0)  # 4 ops
    for m in range(2, 20):
        simulate(g, stages(2), free_cluster(2), microbatches=m)
        assert sum(u.graph.num_nodes for u in g.derived["unrolled"].values()) <= 100
    assert list(g.derived["unrolled"]) == [19]  # 72 + 76 ops of m = 18 and 19 are over 100: the older went


def test_an_unknown_schedule_is_refused_by_name():
    with pytest.raises(ValueError, match="unknown schedule 'zb-v'"):
        simulate(chain(2, 1.0, 1.0), stages(2), free_cluster(2), microbatches=2, schedule="zb-v")


@settings(max_examples=200, deadline=None)
@given(problems(), st.integers(2, 4), st.sampled_from(["1f1b", "gpipe"]))
def test_compiled_pipelined_step_equals_the_literal_reference(problem, m, schedule):
    assert_kernel_equals_reference(*problem, m, schedule)


def assert_kernel_equals_reference(g, c, p, m, schedule):
    """The compiled pipelined step (one placement, and batched) is the reference's, to the bit."""
    r = simulate(g, p, c, microbatches=m, schedule=schedule)
    ref = simulate_reference(g, p, c, microbatches=m, schedule=schedule)
    assert r.makespan == ref["makespan"]
    assert list(r.schedule.op_start) == ref["start"]
    assert list(r.schedule.op_end) == ref["end"]
    assert list(r.peak_memory) == ref["peak_memory"]
    assert list(r.busy) == ref["busy"]
    step = unrolled(g, m).graph
    got = [(step.index_of(t.node), t.src_device, t.dst_device, t.bytes, t.start, t.end)
           for t in r.schedule.transfers()]
    assert got == [tuple(x) for x in ref["transfers"]]
    batch = simulate_batch(g, np.array([p, p]), c, microbatches=m, schedule=schedule)
    assert batch.makespan.tolist() == [r.makespan] * 2
    assert batch.peak_memory[1].tolist() == list(r.peak_memory)


@st.composite
def training_problems(draw):
    """A random forward DAG made a training graph, with an update op (colocated) after every backward op of
    an op with parameters, on a random cluster; a random placement of its units."""
    g, c, _ = draw(problems())
    t = to_training_graph(g)
    nodes, edges = list(t.nodes), t.edges()
    for n in g.nodes:
        if n.param_bytes > 0:
            group = t.nodes[t.index_of(n.id)].colocation
            nodes.append(Node(f"{n.id}_adam", "adam", draw(st.sampled_from([0.0, 0.5])), 0, 0, group,
                              phase="update"))
            edges.append(Edge(f"{n.id}_grad", f"{n.id}_adam", n.param_bytes))
    t = ComputationGraph(nodes, edges, name="train")
    units = draw(st.lists(st.integers(0, c.num_devices - 1), min_size=t.num_units, max_size=t.num_units))
    return t, c, t.expand_unit_placement(units)


@settings(max_examples=200, deadline=None)
@given(training_problems(), st.integers(2, 4), st.sampled_from(["1f1b", "gpipe"]))
def test_compiled_pipelined_training_step_equals_the_literal_reference(problem, m, schedule):
    assert_kernel_equals_reference(*problem, m, schedule)
    g, c, p = problem
    r = simulate(g, p, c, microbatches=m, schedule=schedule)
    assert r.makespan >= r.lower_bound * (1 - 1e-12)


def test_the_environment_simulates_the_pipelined_step_when_asked():
    env = gymnasium.make("DevicePlacement-v0", graph="default", num_devices=2, microbatches=4, schedule="gpipe")
    env.reset(seed=0)
    task = env.unwrapped.task
    graph = task.graphs[0]
    units = (np.arange(graph.num_units) * 2) // graph.num_units  # first half on device 0, second on 1
    _, _, _, _, info = env.step(np.pad(units, (0, task.max_nodes - graph.num_units)))
    placement = graph.expand_unit_placement(units)
    pipelined = simulate(graph, placement, task.cluster, microbatches=4, schedule="gpipe").makespan
    assert info["makespan"] == pipelined != simulate(graph, placement, task.cluster).makespan
    for env_id in ("DevicePlacement-v0", "DevicePlacementSequential-v0"):
        with pytest.raises(ValueError, match="microbatches"):
            gymnasium.make(env_id, graph="default", num_devices=2, microbatches=0)
        with pytest.raises(ValueError, match="unknown schedule"):
            gymnasium.make(env_id, graph="default", num_devices=2, microbatches=2, schedule="1F1B")


def test_split_cuts_a_uniform_chain_into_one_stage_per_device_for_the_pipelined_step():
    p, m = 4, 8
    forward = ComputationGraph([Node(f"L{s}", "layer", 1.0, 1000, 10) for s in range(8)],
                               [Edge(f"L{s}", f"L{s + 1}") for s in range(7)], name="chain8")
    g = to_training_graph(forward)
    c = free_cluster(p)
    step = Step(m, "1f1b")
    placement = split(g, c, step=step)
    stages = [int(placement[g.index_of(f"L{s}")]) for s in range(8)]
    assert stages == sorted(stages) and len(set(stages)) == p  # contiguous, two layers a device
    got = simulate(g, placement, c, microbatches=m).makespan
    per_stage = (2 * 1.0 + 2 * 2.0) / m  # two layers a stage: forward 1 s each, backward 2 s each, per batch
    assert got == pytest.approx((m + p - 1) * per_stage)
    assert got < simulate(g, [0] * g.num_nodes, c, microbatches=m).makespan / 2


def test_the_searches_and_the_comparison_judge_by_the_pipelined_step(tmp_path):
    forward = ComputationGraph([Node(f"L{s}", "layer", 1e-3, 10**6, 10**4) for s in range(12)],
                               [Edge(f"L{s}", f"L{s + 1}") for s in range(11)], name="chain12")
    g = to_training_graph(forward)
    c = Cluster.preset("p100", 4)
    step = Step(8, "1f1b")
    one = simulate(g, [0] * g.num_nodes, c, microbatches=8).makespan
    annealed = place(g, c, "anneal", step=step)
    assert simulate(g, annealed, c, microbatches=8).makespan < 0.6 * one  # a pipeline, not one GPU
    assert simulate(g, place(g, c, "anneal"), c).makespan <= simulate(g, [0] * g.num_nodes, c).makespan
    path = tmp_path / "chain.json"
    write_graph(g, path)
    run = subprocess.run([sys.executable, "-m", "baselines", "--graph", str(path), "--devices", "4",
                          "--microbatches", "8", "--placers", "single,split", "--json", str(tmp_path / "t.json")],
                         capture_output=True, text=True)
    assert run.returncode == 0 and "step: 8 micro-batches, 1f1b" in run.stdout
    table = json.loads((tmp_path / "t.json").read_text())
    assert table["microbatches"] == 8 and table["rows"][0]["makespan"] == pytest.approx(one)
    bad = subprocess.run([sys.executable, "-m", "baselines", "--graph", str(path), "--microbatches", "-1"],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stderr.strip() == "error: microbatches must be an integer >= 1, got -1"


def test_train_and_the_learned_placer_take_the_pipelined_step(tmp_path):
    from agents.training import TrainConfig

    config = TrainConfig(graph="default", devices=2, microbatches=4, schedule="gpipe", out=str(tmp_path / "run"))
    assert config.env_kwargs()["microbatches"] == 4 and config.step == Step(4, "gpipe")
    assert "microbatches" not in TrainConfig(graph="default").env_kwargs()
    with pytest.raises(ValueError, match="microbatches must be an integer >= 1, got 0"):
        TrainConfig(microbatches=0)
    run = subprocess.run([sys.executable, "-m", "agents.place", "--graph", "default", "--devices", "2",
                          "--zero-shot", "--microbatches", "4", "--samples", "16"], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert "4 micro-batches, 1f1b" in run.stdout


def test_the_benchmark_cells_carry_the_step(tmp_path):
    from agents.paper.benchmark import method_inputs, run_method
    from agents.paper.benchmark_cells import Cell

    forward = ComputationGraph([Node(f"L{s}", "layer", 1e-3, 10**6, 10**4) for s in range(12)],
                               [Edge(f"L{s}", f"L{s + 1}") for s in range(11)], name="chain12")
    g = to_training_graph(forward)
    path = tmp_path / "chain12.json"
    write_graph(g, path)
    plain, piped = Cell(str(path), 4), Cell(str(path), 4, step=Step(8, "1f1b"))
    assert plain.key == "chain12_4gpu" and piped.key == "chain12_4gpu_m8-1f1b"
    assert method_inputs(plain, "split", 1.0, None) != method_inputs(piped, "split", 1.0, None)
    record = run_method("split", piped, 1.0, None)
    c = Cluster.preset("p100", 4)
    assert record["makespan"] == simulate(g, split(g, c, step=Step(8, "1f1b")), c, microbatches=8).makespan
    assert record["lower_bound"] == simulate(g, [0] * g.num_nodes, c, microbatches=8).lower_bound
    bad = subprocess.run([sys.executable, "-m", "agents.benchmark", "--graph", str(path), "--microbatches", "0",
                          "--out", str(tmp_path / "b")], capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stderr.strip() == "error: microbatches must be an integer >= 1, got 0"
    assert not (tmp_path / "b").exists()
