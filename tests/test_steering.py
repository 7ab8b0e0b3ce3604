"""The steered annealing: its features by hand, the zero policy as plain annealing, the policy file, the training."""

import json

import numpy as np
import pytest
from helpers import uniform_cluster

from agents.steering.features import DEVICE_FEATURES, STAGE_FEATURES, UNIT_FEATURES, device_nodes, steering_view
from agents.steering.policy import SteeredProposals, SteeringPolicy
from agents.steering.problems import TRAINING_SUITE_SEEDS, problem_cluster, problem_specs
from agents.steering.training import SteeringTrainConfig, pretrain_steering
from baselines.anneal import anneal_units
from placement_env import Cluster, layered_dag, simulate
from placement_env.graph.model import ComputationGraph, Edge, Node


def chain() -> ComputationGraph:
    """a -> b -> c, costs 1, 2, 3 s, 100 and 300 bytes between them (a forward graph: units are ops)."""
    nodes = [Node("a", "matmul", 1.0, 100, 10), Node("b", "matmul", 2.0, 300, 20), Node("c", "matmul", 3.0, 0, 30)]
    return ComputationGraph(nodes, [Edge("a", "b"), Edge("b", "c")], name="chain")


def test_the_features_of_a_chain_by_hand():
    graph, cluster = chain(), uniform_cluster(3, memory=100)
    view = steering_view(graph, cluster, param_factor=1.0)
    current = np.array([0, 0, 1])  # loads 3, 3, 0 s; the b -> c edge (300 bytes) crosses
    f = dict(zip(UNIT_FEATURES, view.unit_features(current).T))
    assert f["device_load"].tolist() == [1.0, 1.0, 1.0] and f["on_busiest"].tolist() == [1.0, 1.0, 1.0]
    assert f["cut_share"].tolist() == pytest.approx([0.0, 300 / 400, 1.0])
    assert f["load_share"].tolist() == pytest.approx([1 / 3, 2 / 3, 1.0])
    # memory: parameters x 1 plus outputs: a 110, b 320, c 30; device 0 holds 430 of 100: over by 3.3 -> 1
    assert f["over_memory"].tolist() == [1.0, 1.0, 0.0]
    g = dict(zip(DEVICE_FEATURES, np.moveaxis(view.device_features(current, np.array([1, 2])), 2, 0)))
    assert g["bytes_there"][0].tolist() == pytest.approx([100 / 400, 300 / 400, 0.0])  # unit b: a on 0, c on 1
    assert g["bytes_there"][1].tolist() == pytest.approx([1.0, 0.0, 0.0])  # unit c: b on 0
    assert g["load"][0].tolist() == pytest.approx([1.0, 1.0, 0.0])
    assert g["fill"][1].tolist() == pytest.approx([2.0, (30 + 30) / 100, 0.3])  # 460 / 100 on device 0: capped
    assert g["same_node"][0].tolist() == [1.0, 1.0, 1.0] and g["speed"][0].tolist() == [1.0, 1.0, 1.0]


def test_the_stage_features_of_a_chain_by_hand():
    graph, cluster = chain(), uniform_cluster(3)
    view = steering_view(graph, cluster, param_factor=1.0)
    current = np.array([2, 0, 1])  # stages in program order on devices 2, 0, 1: loads 1, 2, 3 s
    h = dict(zip(STAGE_FEATURES, view.boundary_features(current, np.array([2, 0, 1])).T))
    assert h["heavier_side"].tolist() == pytest.approx([2 / 3, 1.0])
    assert h["imbalance"].tolist() == pytest.approx([1 / 3, 1 / 3])
    assert h["bytes_across"].tolist() == pytest.approx([100 / 300, 1.0])
    assert h["at_busiest"].tolist() == [0.0, 1.0] and h["toward_lighter"].tolist() == pytest.approx([1 / 3, 1 / 3])


def test_a_steered_shift_moves_units_toward_the_lighter_stage():
    graph, cluster = chain(), uniform_cluster(3)
    current = np.array([0, 0, 1])  # stage 0 (a, b: 3 s) then stage 1 (c: 3 s): equal, so no side is favoured
    uniform = SteeredProposals(SteeringPolicy(), graph, cluster, contiguous=True).boundary(current)
    sides = [uniform(np.array([0, 2]), np.array([0, 1]), np.random.default_rng(i))[1] for i in range(400)]
    assert 0.4 < np.mean(sides) < 0.6
    graph3 = ComputationGraph([Node(n, "matmul", c, 100) for n, c in (("a", 5.0), ("b", 5.0), ("c", 1.0))],
                              [Edge("a", "b"), Edge("b", "c")], name="lopsided")
    steer = SteeredProposals(SteeringPolicy(stage=(0.0, 0.0, 0.0, 0.0, 20.0)), graph3, cluster, contiguous=True)
    draw = steer.boundary(np.array([0, 0, 1]))  # left 10 s, right 1 s: the right stage grows
    assert all(draw(np.array([0, 2]), np.array([0, 1]), np.random.default_rng(i)) == (1, False) for i in range(50))
    rows = steer(np.array([0, 0, 1]), 32, np.random.default_rng(0))
    from placement_env.plan.stages import is_contiguous

    assert all(is_contiguous(graph3, row) for row in rows)


def test_nodes_are_the_devices_joined_by_the_fastest_links():
    assert device_nodes(Cluster.preset("a100-nvlink", 8, per_node=4)).tolist() == [0] * 4 + [4] * 4
    assert device_nodes(Cluster.preset("p100", 3)).tolist() == [0, 0, 0]
    assert device_nodes(Cluster.of_nodes([("v100-nvlink", 2), ("a100-nvlink", 2)])).tolist()[:2] == [0, 0]


def test_the_zero_policy_draws_as_the_plain_annealing_does():
    graph, cluster = layered_dag(3, num_ops=40), Cluster.preset("p100", 4)
    proposals = SteeredProposals(SteeringPolicy(), graph, cluster)
    current = np.random.default_rng(0).integers(0, 4, graph.num_units)
    assert np.allclose(proposals.unit_probabilities(current), 1 / graph.num_units)
    units = np.zeros(20000, dtype=np.int64)
    drawn = proposals.targets(current, units, np.random.default_rng(1))
    counts = np.bincount(drawn, minlength=4)
    assert counts[current[0]] == 0 and np.all(np.abs(counts[np.arange(4) != current[0]] / 20000 - 1 / 3) < 0.02)


def test_a_policy_that_follows_the_bytes_sends_a_unit_to_its_neighbours():
    graph, cluster = chain(), uniform_cluster(3)
    proposals = SteeredProposals(SteeringPolicy(device=(50.0, 0.0, 0.0, 0.0, 0.0)), graph, cluster)
    drawn = proposals.targets(np.array([0, 2, 0]), np.array([1] * 50), np.random.default_rng(0))
    assert drawn.tolist() == [0] * 50  # unit b's neighbours are both on device 0


def test_steered_annealing_is_deterministic_and_never_worse_than_its_start():
    graph, cluster = layered_dag(5, num_ops=80), Cluster.preset("p100", 3)
    start = np.zeros(graph.num_units, dtype=np.int64)
    policy = SteeringPolicy(unit=(1.0, 0.5, 1.0, 0.0, 0.0), device=(2.0, -1.0, 0.0, 0.0, 0.0))

    def run():
        return anneal_units(graph, cluster, start, seed=2, time_budget=None, max_steps=30,
                            proposals=SteeredProposals(policy, graph, cluster))

    a, b = run(), run()
    assert np.array_equal(a.placement, b.placement) and a.makespan == b.makespan
    assert a.makespan <= simulate(graph, graph.expand_unit_placement(start), cluster).makespan


def test_a_policy_file_round_trips_and_a_bad_one_is_named(tmp_path):
    policy = SteeringPolicy(unit=(1.0, 2.0, 3.0, 4.0, 5.0), device=(-1.0, 0.0, 0.5, 0.0, 2.0), made_by={"x": 1})
    policy.save(tmp_path / "p.json")
    assert SteeringPolicy.load(tmp_path / "p.json") == policy
    data = json.loads((tmp_path / "p.json").read_text())
    del data["stage_features"]  # a policy of design 1, before the stage weights: they read as zero
    (tmp_path / "old.json").write_text(json.dumps(data))
    assert SteeringPolicy.load(tmp_path / "old.json").stage == (0.0,) * len(STAGE_FEATURES)
    del data["unit_features"]["cut_share"]
    (tmp_path / "bad.json").write_text(json.dumps(data))
    with pytest.raises(ValueError, match=r"bad.json'?: unit_features must name exactly device_load"):
        SteeringPolicy.load(tmp_path / "bad.json")
    with pytest.raises(ValueError, match="must be 5 finite numbers"):
        SteeringPolicy(unit=(float("nan"),) * 5)


def test_the_training_problems_leave_the_held_out_seeds_out():
    specs = problem_specs(400, seed=3)
    assert problem_specs(150, seed=3) == specs[:150]  # a longer list begins with the shorter one
    assert 0.2 < np.mean([s.get("contiguous", False) for s in specs]) < 0.4
    seeds = [int(s["graph"].split("/")[1]) for s in specs if not s["graph"].startswith("layered/")]
    assert seeds and max(seeds) < 100 and set(seeds) <= set(TRAINING_SUITE_SEEDS)
    sizes = [problem_cluster(s).num_devices for s in specs]
    assert min(sizes) == 2 and max(sizes) == 64
    assert any(s["microbatches"] > 1 for s in specs) and any(len({k for k, _ in s["nodes"]}) == 2 for s in specs)


def test_a_problem_takes_the_most_micro_batches_that_divide_its_batch(monkeypatch):
    import agents.steering.problems as problems

    traced = ComputationGraph(chain().nodes, chain().edges(), name="traced", batch=20)
    assert problems.microbatches_for(traced, 8) == 5 and problems.microbatches_for(traced, 4) == 4
    assert problems.microbatches_for(chain(), 8) == 8  # no batch recorded: as drawn
    monkeypatch.setattr(problems, "problem_graph", lambda name: traced)
    spec = {"graph": "ptb/52", "nodes": [["p100", 2]], "microbatches": 8, "schedule": "gpipe"}
    problem = problems.build_problem(spec)
    assert problem.step.microbatches == 5 and problem.step.schedule == "gpipe" and problem.start.size == 3


def test_the_pretraining_writes_its_policy_and_resumes(tmp_path, monkeypatch):
    import agents.steering.problems as problems

    specs = [{"graph": f"layered/{i}", "nodes": [["p100", 3]], "microbatches": 1, "schedule": "1f1b",
              **({"contiguous": True} if i % 2 else {})} for i in range(4)]
    monkeypatch.setattr(problems, "layered_graph", lambda seed: layered_dag(seed, num_ops=30))
    config = SteeringTrainConfig(validation_every=4, steps=3, population=2, iterations=2, evaluate_every=1,
                                 checkpoint_seconds=0.0)
    with pytest.raises(ValueError, match="holds 0 problems within memory: too few to train on"):
        pretrain_steering(config, tmp_path, log=lambda line: None)
    assert problems.write_problems(tmp_path / "problems.jsonl", specs, log=lambda line: None) == 4
    assert problems.write_problems(tmp_path / "problems.jsonl", specs[:2], log=lambda line: None) == 4  # kept
    pretrain_steering(config, tmp_path, log=lambda line: None, command="test")
    record = json.loads((tmp_path / "pretrain.json").read_text())
    assert [v["iteration"] for v in record["validation"]] == [0, 1, 2]
    assert set(record["seconds"]) == {"training"}
    assert SteeringPolicy.load(tmp_path / "policy.json").made_by["iterations"] == 2
    lines: list[str] = []
    state = json.loads((tmp_path / "checkpoint.json").read_text())
    for key in ("mu", "first", "second"):  # a checkpoint of design 1's ten weights resumes with the others at 0
        state[key] = state[key][:10]
    (tmp_path / "checkpoint.json").write_text(json.dumps(state))
    pretrain_steering(SteeringTrainConfig(**{**config.__dict__, "iterations": 3}), tmp_path, log=lines.append)
    assert lines[0] == "resumed at iteration 2" and "iteration 3: validation reward" in lines[-1]
    assert len(SteeringPolicy.load(tmp_path / "policy.json").vector) == 18  # unit, device, stage, chain
    from agents.steering.training import ship

    ship(tmp_path, tmp_path / "policy.json", tmp_path / "shipped")
    shipped = json.loads((tmp_path / "shipped" / "pretrain.json").read_text())
    assert SteeringPolicy.load(tmp_path / "shipped" / "policy.json") == SteeringPolicy.load(tmp_path / "policy.json")
    assert shipped["problems"]["lines"] == 4 and shipped["compute_seconds"]["problems_timed_lines"] == 4
    assert shipped["record"]["validation"][-1]["iteration"] == 3


@pytest.mark.parametrize("args, message", [
    (["--method", "fine-tuned", "--contiguous"], "--contiguous is for --method steered"),
    (["--policy", "p.zip", "--contiguous"], "--contiguous is for --method steered"),  # --policy: fine-tuned
    (["--method", "steered", "--zero-shot"], "--zero-shot is --method zero-shot; it cannot go with --method steered"),
    (["--method", "steered", "--steering-policy", "missing.json"], "--steering-policy: no such file"),
    (["--method", "steered", "--passes", "2"], "--passes is for the fine-tuned and zero-shot placers"),
    (["--method", "steered", "--samples", "8"], "--samples is for the fine-tuned and zero-shot placers"),
    (["--zero-shot", "--method", "steered"], "--zero-shot is --method zero-shot"),
    (["--method", "steered", "--budget-seconds", "nan"], "--budget-seconds"),
])
def test_the_place_command_s_steered_errors_are_one_line(args, message, capsys):
    from agents.place import main

    assert main(["--graph", "default", "--devices", "3"] + args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and message in err[0], err


def test_the_place_command_steers_on_any_cluster_and_compares_with_anneal_on_one_line(tmp_path, capsys):
    from agents.place import main
    from placement_env.graph.placement_io import read_placement
    from placement_env.zoo.registry import load_graph

    policy = tmp_path / "steer.json"
    SteeringPolicy(device=(1.0, -1.0, 0.0, 0.0, 0.0)).save(policy)
    out = tmp_path / "placement.json"
    assert main(["--graph", "default", "--devices", "12", "--method", "steered", "--steering-policy", str(policy),
                 "--budget-seconds", "0.3", "--contiguous", "--out", str(out)]) == 0
    printed = capsys.readouterr().out.splitlines()
    line = next(line for line in printed if line.strip().startswith("learned (steered"))
    assert "; anneal at the same budget (" in line and ("learned ahead" in line or "anneal ahead" in line
                                                        or line.endswith("tie"))
    graph = load_graph("default")
    from placement_env.plan.stages import is_contiguous

    assert is_contiguous(graph, read_placement(out, graph))
    (tmp_path / "bad.json").write_text('{"format": "something else"}')
    assert main(["--graph", "default", "--devices", "3", "--method", "steered", "--steering-policy",
                 str(tmp_path / "bad.json")]) == 2
    assert "bad.json' is not a steering policy" in capsys.readouterr().err


def test_the_benchmark_runs_the_steered_search_and_contiguous_cells(tmp_path, monkeypatch):
    import agents.paper.benchmark as benchmark
    from agents.paper.benchmark_cells import Cell, pipelined_cells
    from placement_env.plan.stages import is_contiguous
    from placement_env.sim.pipeline import Step

    policy = tmp_path / "steer.json"
    SteeringPolicy(device=(1.0, 0.0, 0.0, 0.0, 0.0)).save(policy)
    monkeypatch.setattr(benchmark, "SHIPPED_POLICY", policy)
    monkeypatch.setattr(benchmark, "steered_placer",
                        lambda budget, contiguous=False: benchmark_steered(budget, policy, contiguous))
    cell = Cell("default", 4, contiguous=True)
    assert cell.key == "default_4gpu_contiguous"
    for method in ("anneal", "steered", "split"):
        record = benchmark.run_method(method, cell, 0.2 if method != "split" else None, None)
        assert "error" not in record, record
    assert "no contiguous mode" in benchmark.run_method("fine-tuned", cell, 0.2, None)["error"]
    graph, cluster = cell.load()
    placement = benchmark_steered(0.2, policy, True)(graph, cluster, 0)
    assert is_contiguous(graph, placement)
    digests = {benchmark.method_inputs(c, "steered", 1.0, None) for c in (cell, Cell("default", 4))}
    assert len(digests) == 2  # contiguity and the steering policy are in the cache key
    cells = pipelined_cells()
    assert len(cells) == 12 and all(c.contiguous and c.step == Step(8, "1f1b") for c in cells)
    assert cells[0].key == "gpt2_8xa100-nvlink_m8-1f1b_contiguous"


def benchmark_steered(budget, path, contiguous):
    from agents.steering.placer import steered_placer

    return steered_placer(budget, SteeringPolicy.load(path), contiguous)


def test_a_problem_whose_start_takes_too_long_is_kept_as_an_error_line(tmp_path, monkeypatch):
    import time

    import agents.steering.problems as problems

    def forever(spec, start=None):
        while True:
            time.sleep(0.01)

    monkeypatch.setattr(problems, "build_problem", forever)
    monkeypatch.setattr(problems, "PROBLEM_SECONDS", 0.05)
    spec = {"graph": "layered/1", "nodes": [["p100", 2]], "microbatches": 1, "schedule": "1f1b"}
    assert problems.write_problems(tmp_path / "p.jsonl", [spec], log=lambda line: None) == 1
    (line,) = problems.read_problem_lines(tmp_path / "p.jsonl")
    assert line["spec"] == spec and line["error"] == "its start placers took more than 0.05 s" and line["seconds"] >= 0


def test_an_msr_graph_by_hand_and_the_msr_problems(tmp_path):
    from agents.steering.problems import MSR_GRAPHS, msr_specs, problem_graph
    from placement_env.importers.msr import from_msr

    data = {"maxSizePerFPGA": 1e9, "maxFPGAs": 2, "maxCPUs": 1, "nodes": [
        {"name": "l.weight", "id": 0, "fpgaLatency": 0.0, "size": 400.0, "isBackwardNode": False, "colorClass": 1},
        {"name": "l.matmul", "id": 1, "fpgaLatency": 2.5, "size": 100.0, "isBackwardNode": False, "colorClass": 1},
        {"name": "l.matmul_grad", "id": 2, "fpgaLatency": 5.0, "size": 50.0, "isBackwardNode": True}],
        "edges": [{"sourceId": 0, "destId": 1, "cost": 0.1, "size": 400.0},
                  {"sourceId": 1, "destId": 2, "cost": 0.1, "size": 64.0}]}
    (tmp_path / "g.json").write_text(json.dumps(data))
    graph = from_msr(tmp_path / "g.json")
    assert [n.id for n in graph.nodes] == ["l.weight#0", "l.matmul#1", "l.matmul_grad#2"]
    assert graph.cost.tolist() == [0.0, 2.5e-3, 5e-3] and graph.output_bytes.tolist() == [400.0, 64.0, 0.0]
    assert graph.param_bytes.tolist() == [400.0, 100.0, 50.0] and graph.num_units == 2  # color 1 together
    assert [n.phase for n in graph.nodes] == ["forward", "forward", "backward"]
    data["edges"].append({"sourceId": 1, "destId": 9})
    (tmp_path / "bad.json").write_text(json.dumps(data))
    with pytest.raises(ValueError, match="bad.json: edge 2's destId names no node"):
        from_msr(tmp_path / "bad.json")
    specs = msr_specs(per_graph=2)
    assert len(specs) == 2 * len(MSR_GRAPHS) and not any("resnet" in s["graph"] or "inception" in s["graph"]
                                                          for s in specs)
    assert problem_graph("msr/bert_l-3_training").num_nodes == 600


def test_the_critical_chain_of_a_chain_by_hand():
    from agents.steering.critical_chain import CHAIN_FEATURES, CriticalChain

    graph, cluster = chain(), uniform_cluster(3)
    marks = dict(zip(CHAIN_FEATURES, CriticalChain(graph, cluster).unit_features(np.array([0, 0, 1])).T))
    # a then b on device 0, c on device 1 after b's output crosses: every op on the chain, one transfer (b -> c)
    assert {k: v.tolist() for k, v in marks.items()} == {"on_chain": [1, 1, 1], "chain_transfer": [0, 1, 1],
                                                         "device_bound": [0, 0, 0]}
    apart = ComputationGraph([Node("x", "matmul", 1.0, 0), Node("y", "matmul", 2.0, 0), Node("z", "matmul", 0.5, 0)],
                             [], name="apart")
    # x and y share device 0 (x first: 0-1 s, y: 1-3 s), z alone on device 1 (0-0.5 s): the chain is x -> y,
    # y waited for its device; z is off it
    marks = dict(zip(CHAIN_FEATURES, CriticalChain(apart, cluster).unit_features(np.array([0, 0, 1])).T))
    assert marks["on_chain"].tolist() == [1, 1, 0] and marks["device_bound"].tolist() == [0, 1, 0]
    assert marks["chain_transfer"].tolist() == [0, 0, 0]


def test_the_chain_weights_steer_moves_to_the_critical_chain_and_zero_weights_cost_nothing():
    graph, cluster = layered_dag(3, num_ops=40), Cluster.preset("p100", 4)
    current = np.random.default_rng(0).integers(0, 4, graph.num_units)
    assert SteeredProposals(SteeringPolicy(), graph, cluster).chain is None  # no simulation a step
    steer = SteeredProposals(SteeringPolicy(chain=(30.0, 0.0, 0.0)), graph, cluster)
    on = steer.chain.unit_features(current)[:, 0] == 1
    assert 0 < on.sum() < graph.num_units
    assert steer.unit_probabilities(current)[on].sum() > 0.999


def test_the_compiled_draws_are_the_features_softmaxes():
    graph = layered_dag(4, num_ops=120)
    cluster = Cluster.of_nodes([("v100-nvlink", 2), ("a100-nvlink", 3)])
    policy = SteeringPolicy(unit=(0.7, -1.2, 2.0, 0.4, -0.6), device=(1.5, 0.8, -0.9, 0.6, 1.1))
    proposals = SteeredProposals(policy, graph, cluster)
    view = proposals.view
    for seed in range(5):
        current = np.random.default_rng(seed).integers(0, cluster.num_devices, graph.num_units)
        logits = view.unit_features(current) @ np.array(policy.unit)
        expected = np.exp(logits - logits.max())
        assert np.allclose(proposals.unit_probabilities(current), expected / expected.sum(), rtol=1e-12)
        units = np.random.default_rng(seed).integers(0, graph.num_units, 64)
        noise = np.random.default_rng(seed + 100).gumbel(size=(64, cluster.num_devices))
        scores = view.device_features(current, units) @ np.array(policy.device) + noise
        scores[np.arange(64), current[units]] = -np.inf
        drawn = proposals.targets(current, units, np.random.default_rng(seed + 100))
        assert drawn.tolist() == np.argmax(scores, axis=1).tolist()


def test_an_interrupted_steered_search_returns_the_best_placement_it_had_found(monkeypatch):
    from agents.steering.placer import steered_search

    graph, cluster = layered_dag(5, num_ops=80), Cluster.preset("p100", 3)
    real, calls, began = SteeredProposals.__call__, [0], []

    def stopped_at_step_four(self, current, batch, rng):
        calls[0] += 1
        if calls[0] == 4:
            raise KeyboardInterrupt
        return real(self, current, batch, rng)

    monkeypatch.setattr(SteeredProposals, "__call__", stopped_at_step_four)
    result = steered_search(graph, cluster, 3600.0, SteeringPolicy(unit=(1.0, 0.0, 1.0, 0.0, 0.0)),
                            on_search=lambda: began.append(True))
    assert result.interrupted and not result.terminated and began == [True] and result.method == "steered"
    assert simulate(graph, result.placement, cluster).makespan == pytest.approx(result.makespan, rel=1e-12)
    assert calls[0] == 4  # it stopped there: no later step of this search, no other search
