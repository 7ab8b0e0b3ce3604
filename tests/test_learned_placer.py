"""The learned placer: canonical labels, the elite archive, the guided search, pretraining, agents.place and the
benchmark (canonical optima, bad input, resumable caches)."""

import json
import subprocess
import sys
import time

import numpy as np
import pytest
import torch
from helpers import TickingClock

import agents
from agents.algorithms.problem import PlacementProblem, aligned_labels, canonical_labels, homogeneous
from agents.algorithms.search_rounds import EliteArchive, search_rounds
from agents.learned.placer import classical_starts, place
from agents.learned.policy_file import load_policy, new_network, save_policy
from agents.learned.pretrain_config import PretrainConfig
from agents.learned.pretraining import pretrain
from agents.paper.benchmark import format_report, run_benchmark, verdict
from agents.paper.benchmark_cells import Cell
from baselines import place as place_with
from placement_env import Cluster, load_graph, simulate
from placement_env.sim.canonical import CANONICAL_CASES, canonical_case


def test_canonical_labels_number_devices_in_order_of_first_use():
    order = np.array([2, 0, 1, 3])  # units in topological order
    rows = np.array([[1, 2, 0, 2], [2, 0, 1, 0]])
    # row 0 along the order: unit2->0, unit0->1, unit1->2, unit3->2: devices 0,1,2 first used as 0,1,2 -> labels
    assert canonical_labels(rows, order).tolist() == [[1, 2, 0, 2], [1, 2, 0, 2]]


def test_aligned_labels_agree_most_with_the_reference():
    reference = np.array([0, 0, 1, 1, 2, 2])
    rows = np.array([[2, 2, 0, 0, 1, 1], [1, 1, 1, 0, 2, 2]])
    aligned = aligned_labels(rows, reference)
    assert aligned[0].tolist() == reference.tolist()  # a permutation of the reference: identical once aligned
    assert (aligned[1] == reference).sum() == 5 and len(set(aligned[1].tolist())) == 3


def test_homogeneous_clusters_are_recognised():
    assert homogeneous(Cluster.preset("p100", 3))
    assert not homogeneous(Cluster.heterogeneous(["p100", "k80"]))


def test_the_archive_keeps_the_best_distinct_placements_in_order():
    archive = EliteArchive(2)
    rows = np.array([[0, 1], [1, 1], [0, 1], [1, 0]])
    archive.add(rows, np.array([3.0, 2.0, 3.0, 1.0]), np.array([0.0, 0.0, 0.0, 5.0]))
    assert [r.tolist() for r in archive.rows] == [[1, 1], [0, 1]]  # out of memory ranks last; no duplicates
    assert archive.best[1] == 2.0


def test_the_guided_search_is_never_worse_than_its_starts_and_learns():
    g, c = load_graph("synthetic/1"), Cluster.preset("p100", 3)
    network = new_network(max_devices=4)
    problem = PlacementProblem(g, c, 4)
    start = g.unit_placement(classical_starts(g, c, 0)[0])
    before = [p.detach().clone() for p in network.parameters()]
    import torch

    result = search_rounds(network, problem, 30.0, seed=0, optimizer=torch.optim.Adam(network.parameters()),
                           starts=[start], max_rounds=2)
    assert result.rounds == 2 and result.makespan <= problem.judge(start[None, :])[0][0]
    assert result.makespan == pytest.approx(simulate(g, result.units[g.unit_of], c).makespan)
    assert any(not torch.equal(a, b) for a, b in zip(before, network.parameters()))


@pytest.mark.parametrize("case", CANONICAL_CASES)
def test_the_learned_placer_reaches_each_canonical_optimum(case):
    g, c, optimal = canonical_case(case)
    best = simulate(g, optimal, c).makespan
    result = place(g, c, new_network(max_devices=4), budget_seconds=2.0)
    assert result.overflow == 0 and result.makespan <= 1.02 * best
    assert simulate(g, result.placement, c).makespan == pytest.approx(result.makespan)


def test_zero_shot_gives_a_placement_of_every_node_in_a_second_or_two():
    g, c = load_graph("default"), Cluster.preset("p100", 3)
    result = agents.place(g, c, new_network(), zero_shot=True)
    assert result.method == "zero-shot" and result.placement.shape == (g.num_nodes,)
    assert simulate(g, result.placement, c).makespan == pytest.approx(result.makespan)


def test_zero_shot_passes_keep_the_first_pass_s_best_or_better_and_each_edits_the_last_best(monkeypatch):
    """Pass 1 of ``passes=3`` is ``passes=1`` (same seed), later passes only replace it with a shorter placement,
    and each pass after the first shows the policy the best placement so far."""
    import agents.learned.placer as placer

    g, c = load_graph("cifar10/1"), Cluster.preset("p100", 3)
    network = new_network()
    one = place(g, c, network, zero_shot=True, samples=16)
    shown = []
    original = PlacementProblem.restarted

    def spy(self, start_units):
        shown.append(np.asarray(start_units).copy())
        return original(self, start_units)

    monkeypatch.setattr(PlacementProblem, "restarted", spy)
    three = placer.place(g, c, network, zero_shot=True, samples=16, passes=3)
    assert len(shown) == 2 and three.makespan <= one.makespan + 1e-12
    assert simulate(g, three.placement, c).makespan == pytest.approx(three.makespan)
    first = g.unit_placement(one.placement)
    assert np.array_equal(shown[0], first)  # the second pass sees the first pass's best
    with pytest.raises(ValueError, match="passes"):
        place(g, c, network, zero_shot=True, passes=0)
    single = place(g, c, network, zero_shot=True, samples=1)  # the likeliest placement alone
    assert single.makespan >= one.makespan - 1e-12


def test_bad_input_is_refused_naming_it(tmp_path):
    g = load_graph("default")
    for bad in (0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="budget_seconds"):
            place(g, Cluster.preset("p100", 3), new_network(), budget_seconds=bad)
    with pytest.raises(ValueError, match="the cluster has 5 devices; this policy places on at most 4"):
        place(g, Cluster.preset("p100", 5), new_network(max_devices=4), zero_shot=True)
    other = tmp_path / "reinforce.zip"
    from agents.algorithms import save_network
    from agents.algorithms.reinforce import ReinforceConfig

    network = new_network()
    save_network(network, ReinforceConfig(), other, network.observation_space)
    with pytest.raises(ValueError, match="holds a reinforce model, not a guided-search placement policy"):
        load_policy(other)


def test_a_saved_policy_loads_back_the_same_weights(tmp_path):
    import torch

    network = new_network(encoder="gcn", max_devices=5)
    save_policy(network, tmp_path / "p.zip", info={"note": 1})
    loaded = load_policy(tmp_path / "p.zip")
    assert loaded.encoder_name == "gcn" and loaded.max_devices == 5 and loaded.info == {"note": 1}
    assert all(torch.equal(a, b) for a, b in zip(network.state_dict().values(), loaded.state_dict().values()))


def test_pretraining_runs_resumes_and_never_uses_held_out_seeds(tmp_path):
    with pytest.raises(ValueError, match="held out"):
        PretrainConfig(seeds=101)
    config = PretrainConfig(suites=("cifar10",), seeds=1, devices=(2,), max_devices=4, expert_seconds=0.1,
                            improve_seconds=0.1, epochs=1, rounds=1, encoder="gcn")
    assert config.problems() == [("cifar10/0", 2)]
    path = pretrain(config, tmp_path, log=lambda line: None)
    record = json.loads((tmp_path / "pretrain.json").read_text())
    assert record["stages"]["epochs_done"] == 2 and record["stages"]["improved_round"] == 1
    assert load_policy(path).max_devices == 4
    pretrain(config, tmp_path, log=lambda line: None)  # done: resumes to nothing
    assert json.loads((tmp_path / "pretrain.json").read_text())["stages"]["epochs_done"] == 2
    with pytest.raises(ValueError, match="other settings"):
        pretrain(PretrainConfig(suites=("cifar10",), seeds=1, devices=(3,)), tmp_path)


def test_the_verdict_is_computed_from_the_numbers():
    def rec(makespan, overflow=0.0):
        return {"makespan": makespan, "overflow": overflow, "lower_bound": 1.0, "seconds": 1.0}

    table = {"a": {"heft": rec(4.0), "anneal": rec(2.0), "zero-shot": rec(3.0), "fine-tuned": rec(1.9),
                   "learned-scratch": rec(2.2)},
             "b": {"heft": rec(4.0), "anneal": rec(2.0), "zero-shot": rec(5.0), "fine-tuned": rec(2.0, 1.0),
                   "learned-scratch": rec(2.0)}}
    v = verdict(table)
    assert v["fine-tuned"]["at_or_below"] == 1 and v["fine-tuned"]["oom_where_a_classical_placer_fits"] == 1
    assert v["zero-shot"]["at_or_below"] == 1 and v["zero-shot"]["against"] == "heft"
    assert v["learned-scratch"]["at_or_below"] == 1 and v["learned-scratch"]["mean_gap"] == pytest.approx(0.05)
    markdown, table_csv = format_report(table, 5.0, "cmd")
    assert "**2.000**" in markdown and "OOM" in markdown and "at or below HEFT in 1 of 2 cells" in markdown
    assert len(table_csv.strip().splitlines()) == 1 + 10


def test_the_benchmark_caches_each_run_and_resumes(tmp_path):
    cells = [Cell("synthetic/1", 2)]
    markdown, _, failed = run_benchmark(cells, 0.2, tmp_path, None, ["heft", "anneal"])
    assert failed == {}
    [cached] = (tmp_path / "runs" / "synthetic-1_2gpu").glob("anneal-*.json")
    first = json.loads(cached.read_text())
    run_benchmark(cells, 0.2, tmp_path, None, ["heft", "anneal"])
    assert json.loads(cached.read_text()) == first  # not run again
    assert (tmp_path / "benchmark.md").read_text() == markdown and (tmp_path / "benchmark.csv").exists()


def test_the_benchmark_cache_is_keyed_by_the_graph_s_and_the_policy_s_content(tmp_path):
    """Two graphs of one file name, and two policies, into one --out: each reports its own numbers."""
    from placement_env import write_graph

    for name, seed in (("a", 1), ("b", 2)):
        (tmp_path / name).mkdir()
        write_graph(load_graph(f"synthetic/{seed}"), tmp_path / name / "g.json")
    out = tmp_path / "out"
    reports = {}
    for name in ("a", "b"):
        _, table_csv, _ = run_benchmark([Cell(str(tmp_path / name / "g.json"), 2)], 0.2, out, None, ["heft"])
        reports[name] = [row for row in table_csv.splitlines() if ",heft," in row][0]
    heft = {name: float(row.split(",")[2]) / 1e3 for name, row in reports.items()}
    for name, seed in (("a", 1), ("b", 2)):
        g, c = load_graph(f"synthetic/{seed}"), Cluster.preset("p100", 2)
        assert heft[name] == pytest.approx(simulate(g, place_with(g, c, "heft"), c).makespan, rel=1e-6)
    assert heft["a"] != heft["b"]
    policies = {}
    for name, seed in (("p", 0), ("q", 7)):
        torch.manual_seed(seed)
        save_policy(new_network(), tmp_path / f"{name}.zip")
        _, table_csv, _ = run_benchmark([Cell("synthetic/1", 2)], 0.2, out, str(tmp_path / f"{name}.zip"),
                                        ["zero-shot"])
        policies[name] = [row for row in table_csv.splitlines() if ",zero-shot," in row][0].split(",")[2]
    g, c = load_graph("synthetic/1"), Cluster.preset("p100", 2)
    for name in ("p", "q"):  # each policy's own zero-shot placement, not the first one's cached
        mine = place(g, c, load_policy(tmp_path / f"{name}.zip"), zero_shot=True, allow_oom=True).makespan
        assert float(policies[name]) / 1e3 == pytest.approx(mine, rel=1e-6)


@pytest.mark.parametrize("args, message", [
    (["--budget-seconds", "0"], "--budget-seconds must be positive"),
    (["--budget-seconds", "nan"], "--budget-seconds"),
    (["--seeds", "7"], "--seeds: 7 is a training seed"),
    (["--methods", "heft,nope"], "unknown method 'nope'"),
    (["--methods", "heft,deepspeed-uniform"], "deepspeed-uniform needs graphs with module names"),
    (["--out", "README.md"], "'README.md' is a file, not a folder"),
])
def test_benchmark_command_errors_are_one_line(args, message, capsys, tmp_path):
    from agents.benchmark import main

    assert main(["--out", str(tmp_path)] + args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and message in err[0]


@pytest.mark.parametrize("args, message", [
    (["--budget-seconds", "0"], "--budget-seconds must be positive"),
    (["--zero-shot", "--budget-seconds", "3"], "--zero-shot takes no --budget-seconds"),
    (["--policy", "missing.zip"], "--policy: no such file"),
    (["--passes", "2"], "--passes is for --zero-shot"),
    (["--zero-shot", "--passes", "0"], "--passes"),
    (["--graph", "nope"], "nope"),
    (["--zero-shot", "--out", "no/such/folder/p.json"], "folder 'no/such/folder' does not exist"),
    (["--zero-shot", "--samples", "100000000"], "--samples must be at most 65,536"),
])
def test_place_command_errors_are_one_line(args, message, capsys):
    from agents.place import main

    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and message in err[0]


def test_place_command_writes_the_placement_file(tmp_path):
    policy = tmp_path / "p.zip"
    save_policy(new_network(), policy)
    out = tmp_path / "placement.json"
    done = subprocess.run([sys.executable, "-m", "agents.place", "--graph", "default", "--devices", "3",
                           "--policy", str(policy), "--zero-shot", "--out", str(out)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    from placement_env.graph.placement_io import read_placement

    g = load_graph("default")
    assert read_placement(out, g).shape == (g.num_nodes,) and "zero-shot" in done.stdout
    lines = done.stdout.splitlines()  # the learned placement beside the best fast placer and the lower bound
    learned = next(line for line in lines if line.strip().startswith("learned (zero-shot"))
    fast = next(line for line in lines if line.strip().startswith("best fast placer ("))
    bound = next(line for line in lines if line.strip().startswith("lower bound"))
    ms = [float(line.split("ms")[0].split()[-1]) for line in (learned, fast, bound)]
    assert ms[2] <= min(ms[:2]) and "x lower bound" in learned and "(learned " in fast


def test_agents_place_raises_when_nothing_it_finds_fits_unless_asked_for_the_best_anyway():
    from baselines import PlacementInfeasibleError

    g = load_graph("synthetic/1")
    tight = Cluster.preset("p100", 2).with_memory(1e6)  # far below what the graph's parameters need
    with pytest.raises(PlacementInfeasibleError, match="no placement of 'synthetic/1' within the memory"):
        place(g, tight, new_network(), zero_shot=True)
    best = place(g, tight, new_network(), zero_shot=True, allow_oom=True)
    assert best.overflow > 0 and best.placement.shape == (g.num_nodes,)


def test_the_shipped_policy_loads_and_says_how_it_was_made():
    from agents.learned.policy_file import shipped_policy_path

    path = shipped_policy_path()
    assert path.stat().st_size <= 10 * 2**20
    network = load_policy(path)
    assert network.max_devices == 8 and network.encoder_name == "fadp-gt" and network.info["start"] == "best-fast"
    record = json.loads(path.with_name("pretrain.json").read_text())
    assert record["command"].startswith("python -m agents.pretrain") and record["machine"]["cpus"] >= 1
    assert all(seed < 100 for seed in range(record["config"]["seeds"]))  # never the held-out seeds
    g, c = load_graph("nmt/2"), Cluster.preset("p100", 5)
    result = place(g, c, zero_shot=True)  # the shipped policy by default
    assert result.overflow == 0 and result.placement.shape == (g.num_nodes,)


def test_agents_place_and_guided_search_are_there_in_a_fresh_interpreter():
    code = "import agents; print(callable(agents.place), agents.GuidedSearch.__name__)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.stdout.split() == ["True", "GuidedSearch"], done.stderr


def test_ctrl_c_during_fine_tuning_returns_the_best_placement_found_so_far(monkeypatch):
    import agents.learned.placer as placer

    g, cluster = load_graph("cifar10/0"), Cluster.preset("p100", 3)
    real, calls = placer.anneal_units, [0]

    def anneal_then_ctrl_c(*args, **kwargs):  # the second annealing chain is interrupted
        calls[0] += 1
        if calls[0] == 2:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(placer, "anneal_units", anneal_then_ctrl_c)
    zero = place(g, cluster, new_network(), zero_shot=True)
    result = place(g, cluster, new_network(), budget_seconds=5)
    assert result.interrupted and not result.terminated and result.seconds < 5 and result.rounds == 0
    assert simulate(g, result.placement, cluster).makespan == pytest.approx(result.makespan, rel=1e-9)
    assert result.makespan <= zero.makespan  # the first chain's result and the starts are kept


def test_ctrl_c_during_the_search_rounds_keeps_the_finished_rounds(monkeypatch):
    import agents.algorithms.search_rounds as rounds_module

    g, cluster = load_graph("cifar10/0"), Cluster.preset("p100", 3)
    real, calls = rounds_module.anneal_units, [0]

    def interrupted_in_round_two(*args, **kwargs):
        calls[0] += 1
        if calls[0] == 3:  # two chains a round: the first chain of the second round
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(rounds_module, "anneal_units", interrupted_in_round_two)
    TickingClock(1e-3).install(monkeypatch)  # 8 s: 8,000 clock reads, on any machine
    result = place(g, cluster, new_network(), budget_seconds=8)
    assert result.interrupted and result.rounds == 1
    assert simulate(g, result.placement, cluster).makespan == pytest.approx(result.makespan, rel=1e-9)


@pytest.mark.parametrize("signum, status, method", [  # SIGTERM of the fine-tuned placer beside its Ctrl-C: slow
    (2, 130, "fine-tuned"), pytest.param(15, 143, "fine-tuned", marks=pytest.mark.slow),
    (2, 130, "steered"), (15, 143, "steered")])
def test_the_place_command_writes_its_best_placement_when_stopped(tmp_path, signum, status, method):
    import signal

    from placement_env.graph.placement_io import read_placement

    out = tmp_path / "placement.json"
    # SIGINT as a terminal gives it: a test process of pytest-xdist (or a background shell job) starts its children
    # with SIGINT ignored, and Python leaves an ignored SIGINT ignored
    chosen = ["--method", "fine-tuned"] if method == "fine-tuned" else []  # steered: the default
    process = subprocess.Popen([sys.executable, "-m", "agents.place", "--graph", "cifar10/0", "--devices", "3",
                                "--budget-seconds", "120", "--out", str(out), *chosen], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    first = process.stdout.readline()  # an event, not a fixed wait: the command says when its search began
    assert first.startswith("searching for 120 s"), first + process.stderr.read()
    process.send_signal(signal.Signals(signum))
    stdout, stderr = process.communicate(timeout=60)
    assert process.returncode == status, stderr
    assert "the best placement found so far is in" in stderr and len(stderr.strip().splitlines()) == 1
    g = load_graph("cifar10/0")
    placement = read_placement(out, g)
    learned = next(line for line in stdout.splitlines() if line.strip().startswith(f"learned ({method}, interrupted"))
    assert float(learned.split("ms")[0].split()[-1]) == pytest.approx(
        simulate(g, placement, Cluster.preset("p100", 3)).makespan * 1e3, abs=1e-3)


def test_the_exploration_anneals_only_what_is_left_of_the_budget(monkeypatch):
    import time

    import agents.learned.placer as placer
    from agents.learned.placer import _explore, fitted_problem

    g, c = load_graph("synthetic/1"), Cluster.preset("p100", 2)
    network = new_network()
    problem = fitted_problem(g, c, network, 0, placer.PLAIN_STEP)
    asked: list[float] = []

    def recording(graph, cluster, start, seed, seconds, step):
        asked.append(seconds)
        return type("R", (), {"placement": graph.expand_unit_placement(start)})()

    monkeypatch.setattr(placer, "anneal_units", recording)
    proposal = np.zeros(problem.graph.num_units, dtype=np.int64)
    _explore(problem, EliteArchive(8), proposal, time.perf_counter() - 1.0, 0, True)
    assert asked == []  # the budget is spent: the starts join the archive, nothing is annealed
    _explore(problem, EliteArchive(8), proposal, time.perf_counter() + 2.0, 0, True)
    assert asked and all(0 < s <= placer.EXPLORE_SHARE * 2.0 / len(asked) for s in asked)


def test_a_policy_file_is_read_once_until_it_changes(tmp_path):
    import os

    from agents.learned.placer import load_placement_policy

    path = tmp_path / "p.zip"
    save_policy(new_network(), path)
    first = load_placement_policy(str(path))
    assert load_placement_policy(path) is first
    torch.manual_seed(3)
    save_policy(new_network(), path)
    os.utime(path, ns=(os.stat(path).st_atime_ns, os.stat(path).st_mtime_ns + 10**9))
    second = load_placement_policy(path)
    assert second is not first
    assert not torch.equal(next(first.parameters()), next(second.parameters()))


def test_the_command_s_sample_bound_is_the_placer_s():
    import agents.learned.placer as placer
    import agents.place as command

    assert command.MAX_SAMPLES == placer.MAX_SAMPLES and command.DEFAULT_SAMPLES == placer.DEFAULT_SAMPLES
    with pytest.raises(ValueError, match="samples must be at most 65,536"):
        placer.place(load_graph("cifar10/0"), Cluster.preset("p100", 3), new_network(), zero_shot=True,
                     samples=placer.MAX_SAMPLES + 1)


def test_fine_tuning_judges_only_the_proposals_its_share_of_the_budget_affords(monkeypatch):
    """With 64 micro-batches, judging 512 proposals took 4 s of a 10-s budget (agents.place took 64 s in all
    before the bounds): fine-tuning now judges the most likely proposals that fit its share, at least 8."""
    import agents.learned.placer as placer

    now = [0.0]
    monkeypatch.setattr(time, "perf_counter", lambda: now[0])

    class Problem:
        def __init__(self, seconds_each: float) -> None:
            self.each = seconds_each

        def judge(self, rows):
            now[0] += self.each * len(rows)
            return np.zeros(len(rows)), np.zeros(len(rows))

    rows = np.zeros((512, 4), dtype=np.int64)
    assert placer.affordable_rows(Problem(0.1), rows, 1.0) == 10
    assert placer.affordable_rows(Problem(1.0), rows, 1.0) == placer.FIRST_JUDGED
    assert placer.affordable_rows(Problem(1e-4), rows, 1.0) == 512
    assert placer.affordable_rows(Problem(0.0), rows, 1.0) == 512
