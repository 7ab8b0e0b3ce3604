"""The benchmark suites and the registry: shipped graphs, fresh builds, table 1."""

import numpy as np
import pytest

from placement_env import Cluster, load_graph, load_suite, simulate
from placement_env.__main__ import main as env_main
from placement_env.graph.io import read_graph
from placement_env.zoo.registry import REAL_MODELS, REAL_MODELS_DIR
from placement_env.zoo.suites import (
    PAPER_TABLE1,
    SUITE_NAMES,
    build_suite_graph,
    graph_structure,
    shipped_path,
    suite_structure,
)


@pytest.mark.parametrize("suite", SUITE_NAMES)
def test_every_shipped_suite_graph_loads_validates_and_simulates(suite):
    graphs = load_suite(suite)
    assert [g.name for g in graphs] == [f"{suite}/{s}" for s in range(17)]
    cluster = Cluster.preset("p100", 3)
    for g in graphs:
        assert {n.phase for n in g.nodes} == {"forward", "backward"}
        assert g.cost.sum() > 0 and g.param_bytes.sum() > 0
        units = np.arange(g.num_units) % 3
        result = simulate(g, g.expand_unit_placement(units), cluster)
        assert result.makespan >= result.lower_bound > 0 and not result.oom
    assert len({g.num_nodes for g in graphs}) > 3  # seeds really vary the architecture


@pytest.mark.slow
@pytest.mark.parametrize("suite", SUITE_NAMES)
def test_shipped_file_equals_a_fresh_trace_and_held_out_seeds_build(suite):
    assert build_suite_graph(suite, 5) == read_graph(shipped_path(suite, 5))
    held_out = load_graph(f"{suite}/100")
    assert held_out.name == f"{suite}/100" and not shipped_path(suite, 100).exists()
    assert held_out is load_graph(f"{suite}/100")  # traced once per process


@pytest.mark.slow
def test_suite_averages_are_within_25_percent_of_the_papers_table1(capsys):
    for suite in SUITE_NAMES:
        s = suite_structure(suite)
        units, edges = PAPER_TABLE1[suite][:2]
        assert abs(s.units / units - 1) <= 0.25 and abs(s.edges / edges - 1) <= 0.25, (suite, s)
    assert env_main(["table1"]) == 0
    out = capsys.readouterr().out
    assert all(f"| {suite} |" in out for suite in SUITE_NAMES) and "paper 498" in out


def test_graph_structure_by_hand():
    from placement_env import ComputationGraph, Edge, Node

    fwd = ComputationGraph([Node("a", "x", 1, 1), Node("b", "x", 1, 1), Node("c", "x", 1, 1)],
                           [Edge("a", "b"), Edge("a", "c")])
    s = graph_structure(fwd)
    assert (s.units, s.edges, s.out_degree) == (3, 2, 2 / 3) and s.density == pytest.approx(2 / 6)


@pytest.mark.slow
def test_graphs_command_lists_every_shipped_graph_with_sizes(capsys):
    assert env_main(["graphs"]) == 0
    out = capsys.readouterr().out
    for name in ("ptb/0", "cifar10/16", "nmt/7"):
        line = next(row for row in out.splitlines() if row.split()[:1] == [name])
        assert "ops" in line and "units" in line and "KiB" in line
    assert "default          = cifar10/0" in out


def test_registry_errors_name_the_graph():
    with pytest.raises(ValueError, match="unknown graph 'ptb/x'"):
        load_graph("ptb/x")
    with pytest.raises(ValueError, match="unknown suite 'resnet'"):
        load_suite("resnet")
    missing = [m for m in REAL_MODELS if not (REAL_MODELS_DIR / f"{m}.json.gz").exists()]
    for m in missing:
        with pytest.raises(FileNotFoundError, match=m):
            load_graph(m)
