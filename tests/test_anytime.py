"""The benchmark as an anytime curve (issue 41 point 1): every search method at every budget."""

import json

import pytest

from agents.paper.anytime import anytime_report, best_seen, gaps, time_to_reference
from agents.paper.benchmark import run_benchmark
from agents.paper.benchmark_cells import Cell, large_cells
from baselines.split import split
from placement_env import Cluster, load_graph, simulate
from placement_env.sim.pipeline import Step


def rec(ms: float, seconds: float = 0.1, overflow: float = 0.0) -> dict:
    return {"makespan": ms / 1e3, "overflow": overflow, "seconds": seconds, "lower_bound": 1e-3}


def hand_tables():
    """Two cells, two budgets; heft has no budget (the same record at both)."""
    heft = {"a": rec(12.0), "b": rec(30.0)}
    return {1.0: {"a": {"heft": heft["a"], "anneal": rec(11.0, 1.0)},
                  "b": {"heft": heft["b"], "anneal": rec(25.0, 1.0, overflow=5.0)}},
            10.0: {"a": {"heft": heft["a"], "anneal": rec(10.0, 10.0)},
                   "b": {"heft": heft["b"], "anneal": rec(20.0, 10.0)}}}


def test_gaps_and_the_time_to_the_reference_by_hand():
    tables = hand_tables()
    best = best_seen(tables)
    assert best == {"a": pytest.approx(0.010), "b": pytest.approx(0.020)}  # the out-of-memory 25 ms is no best
    assert gaps(tables, "anneal", 1.0, best).tolist() == [pytest.approx(0.1), float("inf")]
    assert gaps(tables, "heft", 1.0, best).tolist() == [pytest.approx(0.2), pytest.approx(0.5)]
    assert time_to_reference(tables, "anneal", [1.0, 10.0]) == {"a": 10.0, "b": 10.0}
    assert time_to_reference(tables, "heft", [1.0, 10.0]) == {"a": float("inf"), "b": float("inf")}
    report = anytime_report(tables, [1.0, 10.0], ["heft", "anneal"], "cmd")
    assert "| anneal | 10.00% (10.00%), 1 none | 0.00% (0.00%) |" in report
    assert "| heft | 35.00% (35.00%) | 0.100 |" in report
    assert "| anneal | 0% | 100% | 10 s |" in report  # reached annealing's 10-s result by 10 s, not by 1 s


def test_every_search_method_runs_at_every_budget_and_the_rest_once(tmp_path):
    cells = [Cell("synthetic/1", 2)]
    markdown, table_csv, failed = run_benchmark(cells, [0.2, 0.4], tmp_path, None, ["heft", "anneal"])
    assert failed == {}
    runs = sorted(p.name.split("-")[0] for p in (tmp_path / "runs" / "synthetic-1_2gpu").glob("*.json"))
    assert runs == ["anneal", "anneal", "heft"]
    budgets = sorted(json.loads(p.read_text())["budget_seconds"] or 0
                     for p in (tmp_path / "runs" / "synthetic-1_2gpu").glob("anneal-*.json"))
    assert budgets == [0.2, 0.4]
    assert "| anneal | " in markdown and "Reaching annealing's 0.4-s result" in markdown
    for name in ("anytime.png", "benchmark_0.2s.md", "benchmark_0.4s.md", "benchmark.md"):
        assert (tmp_path / name).stat().st_size > 0
    assert table_csv.splitlines()[0] == "cell,method,budget_seconds,makespan_ms,lower_bound_ms,ratio,oom,seconds"
    assert [line.split(",")[1:3] for line in table_csv.splitlines()[1:]] == [
        ["heft", ""], ["anneal", "0.2"], ["anneal", "0.4"]]
    before = {p: p.read_text() for p in (tmp_path / "runs").rglob("*.json")}
    run_benchmark(cells, [0.2, 0.4], tmp_path, None, ["heft", "anneal"])
    assert {p: p.read_text() for p in (tmp_path / "runs").rglob("*.json")} == before  # resumed: nothing run again


def test_the_benchmark_judges_a_pipelined_cell_by_its_step(tmp_path):
    cell = Cell("synthetic/1", 3, step=Step(4, "1f1b"))
    _, table_csv, _ = run_benchmark([cell], 0.2, tmp_path, None, ["split"])
    g, c = load_graph("synthetic/1"), Cluster.preset("p100", 3)
    expected = simulate(g, split(g, c, step=Step(4, "1f1b")), c, microbatches=4).makespan
    row = [line for line in table_csv.splitlines() if ",split," in line][0]
    assert float(row.split(",")[2]) / 1e3 == pytest.approx(expected, rel=1e-6)


def test_cells_of_other_kinds_and_nodes_are_named_by_their_cluster():
    assert Cell("gpt2", 16, device_kind="a100-nvlink", per_node=8).key == "gpt2_2x8xa100-nvlink"
    assert Cell("gpt2", 8, device_kind="a100-nvlink").key == "gpt2_8xa100-nvlink"
    assert Cell("ptb/100", 3).key == "ptb-100_3gpu"
    keys = [c.key for c in large_cells()]
    assert len(keys) == len(set(keys)) == 18 and "nasnet_large_64gpu" in keys


@pytest.mark.parametrize("args, message", [
    (["--budgets", "1", "0"], "--budgets must be positive, got 0.0"),
    (["--budgets", "-3"], "--budgets must be positive, got -3.0"),
    (["--budgets", "nan"], "--budgets"),
    (["--devices", "12", "--per-node", "8"], "per_node=8 does not divide the 12 devices"),
    (["--budgets", "1", "--budget-seconds", "2"], "not allowed with argument"),
    (["--graph", "gpt2", "--microbatches", "3"], "microbatches 3 does not divide the batch of 8 that graph 'gpt2'"),
])
def test_bad_budgets_and_nodes_are_one_line(args, message, capsys, tmp_path):
    from agents.benchmark import main

    status: object
    try:
        status = main(["--out", str(tmp_path / "o"), "--graph", "synthetic/1"] + args)
    except SystemExit as exit_:  # argparse's own errors
        status = exit_.code
    assert status == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and message in err[0]
    assert not (tmp_path / "o").exists()


def test_a_learned_method_beyond_its_policy_is_a_row_without_placement():
    from agents.paper.benchmark import run_method

    record = run_method("zero-shot", Cell("synthetic/1", 16), None, None)
    assert "makespan" not in record and "places on at most 8" in record["error"]


def test_a_budgeted_method_against_annealing_at_the_same_budget_by_hand():
    tables = hand_tables()
    tables[1.0]["a"]["steered"], tables[1.0]["b"]["steered"] = rec(9.9), rec(26.0)  # b: annealing out of memory
    tables[10.0]["a"]["steered"], tables[10.0]["b"]["steered"] = rec(10.5), rec(19.0)
    report = anytime_report(tables, [1.0, 10.0], ["heft", "anneal", "steered"], "cmd",
                            groups={"first": ["a"], "all": ["a", "b"]})
    assert "| steered | first | -10.00% / -10.00% / 100% of 1 | +5.00% / +5.00% / 0% of 1 |" in report
    assert "| steered | all | -10.00% / -10.00% / 100% of 1 | +0.00% / +0.00% / 50% of 2 |" in report


def test_cells_are_grouped_as_the_bar_of_the_steered_search_reads_them():
    from agents.paper.benchmark_cells import cell_groups, pipelined_cells

    cells = [Cell("ptb/100", 3), Cell("resnet50", 8), Cell("my.json", 2), large_cells()[0], pipelined_cells()[0]]
    assert cell_groups(cells) == {"ptb": ["ptb-100_3gpu"], "real models": ["resnet50_8gpu"],
                                  "held-out": ["ptb-100_3gpu", "resnet50_8gpu", "my_2gpu"],
                                  "large": [large_cells()[0].key], "pipelined": [pipelined_cells()[0].key],
                                  "large and pipelined": [large_cells()[0].key, pipelined_cells()[0].key],
                                  "all": [c.key for c in cells]}
