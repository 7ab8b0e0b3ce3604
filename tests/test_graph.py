"""The graph model: validation, interchange format, networkx, units, training graphs, generator."""

import gzip
import json
import math
import os
import pickle
import subprocess
import sys

import networkx as nx
import numpy as np
import pytest
from helpers import graph

from placement_env import (
    Cluster,
    ComputationGraph,
    Edge,
    Node,
    layered_dag,
    load_graph,
    read_graph,
    simulate,
    to_training_graph,
    write_graph,
)
from placement_env.graph.coarsen import coarsen
from placement_env.graph.io import graph_from_dict, graph_to_dict
from placement_env.graph.training import BACKWARD_COST_NO_PARAMS, BACKWARD_COST_WITH_PARAMS


# ----------------------------------------------------------------- validation
@pytest.mark.parametrize("nodes, edges, message", [
    ([], [], "empty"),
    ([("a", 1.0, 0), ("a", 1.0, 0)], [], "duplicate node id 'a'"),
    ([("a", -1.0, 0)], [], "node 'a': cost is negative"),
    ([("a", math.nan, 0)], [], "node 'a': cost is NaN"),
    ([("a", math.inf, 0)], [], "node 'a': cost is infinite"),
    ([("a", 1.0, -5)], [], "node 'a': output_bytes is negative"),
    ([("a", 1.0, 0, math.nan)], [], "node 'a': param_bytes is NaN"),
    ([("a", 1.0, 0)], [("a", "a")], "self-loop on node 'a'"),
    ([("a", 1.0, 0)], [("a", "zz")], "unknown destination node 'zz'"),
    ([("a", 1.0, 0)], [("qq", "a")], "unknown source node 'qq'"),
    ([("a", 1.0, 0), ("b", 1.0, 0)], [("a", "b"), ("a", "b")], "duplicate edge"),
    ([("a", 1.0, 0), ("b", 1.0, 0)], [("a", "b", -1)], "edge 'a' -> 'b': bytes is negative"),
    ([("a", 1.0, 0), ("b", 1.0, 0)], [("a", "b", math.inf)], "edge 'a' -> 'b': bytes is infinite"),
])
def test_invalid_graphs_name_the_offending_item(nodes, edges, message):
    with pytest.raises(ValueError, match=message):
        graph(nodes, edges)


def test_cycle_error_names_the_nodes_on_the_cycle():
    # x feeds the cycle b -> c -> d -> b; e hangs off it (not on the cycle)
    with pytest.raises(ValueError, match="cycle") as info:
        graph([("x", 1, 0), ("b", 1, 0), ("c", 1, 0), ("d", 1, 0), ("e", 1, 0)],
              [("x", "b"), ("b", "c"), ("c", "d"), ("d", "b"), ("d", "e")])
    text = str(info.value)
    for name in ("'b'", "'c'", "'d'"):
        assert name in text
    assert "'e'" not in text and "'x'" not in text


# ------------------------------------------------------------ topological index
def test_topological_index_takes_the_smallest_ready_index():
    # node order: c, a, b, d; edges a -> d, c -> d; b free. Kahn smallest index first:
    # ready {c(0), a(1), b(2)} -> c, a, b, then d.
    g = graph([("c", 1, 0), ("a", 1, 0), ("b", 1, 0), ("d", 1, 0)], [("a", "d"), ("c", "d")])
    assert list(g.topo_order) == [0, 1, 2, 3]
    g2 = graph([("d", 1, 0), ("a", 1, 0), ("b", 1, 0)], [("a", "d"), ("b", "d")])
    assert [g2.nodes[i].id for i in g2.topo_order] == ["a", "b", "d"]
    assert list(g2.topo_index) == [2, 0, 1]


# ------------------------------------------------------------------- units
def test_colocation_groups_are_units_in_first_appearance_order():
    g = graph([("a", 1, 0, 0, "g1"), ("b", 1, 0), ("c", 1, 0, 0, "g1"), ("d", 1, 0, 0, "g2")])
    assert list(g.unit_of) == [0, 1, 0, 2]
    assert g.num_units == 3
    assert list(g.unit_names) == ["g1", "b", "g2"]
    assert list(g.expand_unit_placement([2, 0, 1])) == [2, 0, 2, 1]
    assert list(g.unit_placement([2, 0, 2, 1])) == [2, 0, 1]
    with pytest.raises(ValueError, match="3 placement units"):
        g.expand_unit_placement([0, 1])


# -------------------------------------------------------------- file format
def test_json_and_gzip_round_trip_exactly(tmp_path):
    g = layered_dag(3, num_ops=40)
    for name in ("g.json", "g.json.gz"):
        path = tmp_path / name
        write_graph(g, path)
        back = read_graph(path)
        assert back == g
        assert back.name == g.name
        assert np.array_equal(back.cost, g.cost)  # bit-exact floats
        write_graph(back, tmp_path / ("again-" + name))
        again = read_graph(tmp_path / ("again-" + name))
        assert again == g
    with gzip.open(tmp_path / "g.json.gz", "rt") as f:
        data = json.load(f)
    assert data["format"] == "device-placement-graph" and data["version"] == 1


def test_write_graph_with_arguments_in_another_order_names_the_graph_argument(tmp_path):
    with pytest.raises(TypeError, match="graph must be a ComputationGraph, got PosixPath"):
        write_graph(tmp_path / "g.json", layered_dag(3, num_ops=10))
    assert not (tmp_path / "g.json").exists()


def test_spec_example_file_loads(tmp_path):
    data = {"format": "device-placement-graph", "version": 1, "name": "resnet50-train",
            "nodes": [{"id": "conv1", "op": "conv2d", "cost": 1.2e-4, "output_bytes": 3211264,
                       "param_bytes": 37632, "colocation": "g0"},
                      {"id": "bn1", "op": "batch_norm", "cost": 1e-5, "output_bytes": 3211264, "param_bytes": 512}],
            "edges": [{"src": "conv1", "dst": "bn1", "bytes": 3211264}]}
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(data))
    g = load_graph(path)
    assert g.name == "resnet50-train" and g.num_nodes == 2 and g.edge_bytes[0] == 3211264
    assert g.nodes[0].colocation == "g0"


@pytest.mark.parametrize("content, message", [
    ("{not json", "not valid JSON"),
    ('{"format": "other"}', "format is 'other'"),
    ('{"nodes": [{"id": "a", "op": "x"}]}', "node 'a': missing field 'cost'"),
    ('{"nodes": [{"id": "a", "op": "x", "cost": 1, "colour": 2}]}', "unknown field"),
    ('{"nodes": [{"id": "a", "op": "x", "cost": 1}], "edges": [{"src": "a"}]}', "edge 0 must be an object"),
    ('{"nodes": [{"id": "a", "op": "x", "cost": "slow"}]}', "cost must be a number"),
    ('{"nodes": [{"id": "a", "op": "x", "cost": 1}], "edge": []}', r"unknown top-level field\(s\) \['edge'\]"),
    ('{"nodes": [{"id": "5", "op": "x", "cost": 1}, {"id": "b", "op": "x", "cost": 1}], '
     '"edges": [{"src": 5, "dst": "b"}]}', "edge 0 \\(5 -> 'b'\\): 'src' and 'dst' must be node ids"),
    ('{"name": 7, "nodes": [{"id": "a", "op": "x", "cost": 1}]}', "'name' must be a string, got 7"),
    ('{"nodes": [{"id": "a", "op": "x", "cost": 1, "cost": 2}]}', "key 'cost' appears twice in one object"),
    ('{"nodes": [{"id": "a", "op": "x", "cost": 1}, {"id": "b", "op": "x", "cost": 1}], '
     '"edges": [{"src": "a", "dst": "b"}, {"src": "b", "dst": "a"}]}', "cycle"),
])
def test_malformed_files_give_errors_naming_file_and_item(tmp_path, content, message):
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(ValueError, match=message) as info:
        read_graph(path)
    assert "bad.json" in str(info.value)


def test_unreadable_files_are_named(tmp_path):
    with pytest.raises(ValueError, match="'.*sub' is a directory, not a JSON file"):
        (tmp_path / "sub").mkdir()
        read_graph(tmp_path / "sub")
    (tmp_path / "plain.json.gz").write_text("{}")
    with pytest.raises(ValueError, match="plain.json.gz' is not a complete gzip file"):
        read_graph(tmp_path / "plain.json.gz")
    write_graph(layered_dag(seed=1, num_ops=20), tmp_path / "g.json.gz")
    whole = (tmp_path / "g.json.gz").read_bytes()
    (tmp_path / "cut.json.gz").write_bytes(whole[: len(whole) // 2])
    with pytest.raises(ValueError, match="cut.json.gz' is not a complete gzip file"):
        read_graph(tmp_path / "cut.json.gz")


def test_missing_file_and_unknown_name():
    with pytest.raises(FileNotFoundError, match="nope.json"):
        load_graph("nope.json")
    with pytest.raises(ValueError, match="unknown graph 'resnet9000'"):
        load_graph("resnet9000")


# ----------------------------------------------------------------- networkx
def test_networkx_round_trip():
    g = graph([("a", 1.5, 10, 4, "g"), ("b", 2.0, 20)], [("a", "b", 7)])
    nxg = g.to_networkx()
    assert isinstance(nxg, nx.DiGraph)
    assert nxg.nodes["a"]["cost"] == 1.5 and nxg.nodes["a"]["colocation"] == "g"
    assert nxg.edges["a", "b"]["bytes"] == 7
    back = ComputationGraph.from_networkx(nxg)
    assert back.nodes == g.nodes and back.edges() == g.edges()
    with pytest.raises(ValueError, match="no 'cost'"):
        ComputationGraph.from_networkx(nx.DiGraph([(1, 2)]))
    with pytest.raises(TypeError, match="g must be a DiGraph, got Graph"):
        ComputationGraph.from_networkx(nx.Graph([("a", "b")]))
    # networkx lists edges source by source, not in the file's order; the graph is still the same graph
    ptb = load_graph("ptb/12")
    again = ComputationGraph.from_networkx(ptb.to_networkx())
    assert again.edges() != ptb.edges() and again == ptb


def test_graph_equality_compares_edges_as_a_set():
    g = graph([("a", 1.0, 1), ("b", 1.0, 1), ("c", 1.0, 1)], [("a", "b", 7), ("a", "c", 5)])
    assert graph([("a", 1.0, 1), ("b", 1.0, 1), ("c", 1.0, 1)], [("a", "c", 5), ("a", "b", 7)]) == g
    assert graph([("a", 1.0, 1), ("b", 1.0, 1), ("c", 1.0, 1)], [("a", "c", 5), ("a", "b", 8)]) != g
    assert graph([("a", 1.0, 1), ("b", 1.0, 1), ("c", 1.0, 1)], [("a", "b", 7), ("b", "c", 5)]) != g
    assert graph([("a", 1.0, 1), ("b", 1.0, 1), ("c", 1.0, 1)], [("a", "b", 7)]) != g


def test_equal_graphs_hash_alike():
    g = graph([("a", 1.0, 1), ("b", 1.0, 1), ("c", 1.0, 1)], [("a", "b", 7), ("a", "c", 0.0)])
    same = graph([("a", 1.0, 1), ("b", 1.0, 1), ("c", 1.0, 1)], [("a", "c", -0.0), ("a", "b", 7)])
    other = graph([("a", 1.0, 1), ("b", 1.0, 1), ("c", 1.0, 1)], [("a", "b", 8), ("a", "c", 0.0)])
    assert same == g and hash(same) == hash(g)
    assert len({g, same, other}) == 2
    ptb = load_graph("ptb/12")
    assert hash(ComputationGraph.from_networkx(ptb.to_networkx(), name=ptb.name)) == hash(ptb)


def test_a_graph_sent_to_another_process_hashes_as_that_process_computes():
    # string hashes are salted per process: a hash cached here must not travel with the pickle
    code = ("import pickle, sys; from placement_env import load_graph; "
            "g = pickle.loads(sys.stdin.buffer.read()); assert hash(g) == hash(load_graph('ptb/12'))")
    g = load_graph("ptb/12")
    hash(g)
    subprocess.run([sys.executable, "-c", code], input=pickle.dumps(g), check=True,
                   env={**os.environ, "PYTHONHASHSEED": "random"})


# ------------------------------------------------------------ training graph
def test_training_graph_expansion_by_hand():
    # x (params) -> y (no params) -> z (sink)
    fwd = ComputationGraph([Node("x", "matmul", 1.0, 100, 50), Node("y", "relu", 0.5, 60),
                            Node("z", "add", 0.25, 8)], [Edge("x", "y"), Edge("y", "z")], name="f")
    t = to_training_graph(fwd)
    byid = {n.id: n for n in t.nodes}
    assert t.num_nodes == 6
    assert byid["x_grad"].cost == BACKWARD_COST_WITH_PARAMS * 1.0
    assert byid["y_grad"].cost == BACKWARD_COST_NO_PARAMS * 0.5
    assert byid["x_grad"].param_bytes == 0
    assert byid["z_grad"].output_bytes == 60  # gradient of z's input (y's output)
    assert byid["x_grad"].output_bytes == 0   # x has no inputs
    assert byid["x"].colocation == byid["x_grad"].colocation
    assert byid["y"].colocation != byid["x"].colocation
    assert {n.phase for n in t.nodes} == {"forward", "backward"}
    edges = {(e.src, e.dst): e.bytes for e in t.edges()}
    assert edges == {
        ("x", "y"): 100, ("y", "z"): 60,              # forward
        ("y_grad", "x_grad"): 100, ("z_grad", "y_grad"): 60,  # backward carries output_bytes[u]
        ("x", "y_grad"): 100, ("y", "z_grad"): 60,    # saved activations
        ("z", "z_grad"): 8,                            # the sink feeds its gradient
    }
    assert t.num_units == 3


def test_training_graph_keeps_only_the_saved_outputs_it_is_given():
    # x (params) -> y -> z (sink); y's backward keeps its own output (as softmax does), x's keeps nothing named,
    # z's the base x of a view it was given (not an input of z), and a name the graph lacks is refused
    fwd = ComputationGraph([Node("x", "matmul", 1.0, 100, 50), Node("y", "softmax", 0.5, 60),
                            Node("z", "mul", 0.25, 8)], [Edge("x", "y"), Edge("y", "z")], name="f")
    t = to_training_graph(fwd, saved={"y": ["y"], "z": ["x"]})
    saved = {(e.src, e.dst): e.bytes for e in t.edges() if not e.src.endswith("_grad") and e.dst.endswith("_grad")}
    assert saved == {("y", "y_grad"): 60, ("x", "z_grad"): 100, ("z", "z_grad"): 8}  # the sink feeds its gradient
    assert to_training_graph(fwd, saved={}) == to_training_graph(fwd)  # an op not named keeps its inputs
    one_device = Cluster.preset("p100", 1)
    kept_all = simulate(to_training_graph(fwd), np.zeros(6, np.int64), one_device, param_factor=0.0).peak_memory[0]
    kept_own = simulate(to_training_graph(fwd, saved={"y": [], "z": []}), np.zeros(6, np.int64), one_device,
                        param_factor=0.0).peak_memory[0]
    # by hand, ops in order x y z z' y' x': every input kept, y' runs holding x (kept for it), z' (its input) and
    # its own output: 100 + 60 + 100; keeping nothing, x is freed when y ends: the peak is y's run (x and y) and
    # y's (z' and its output), 160
    assert kept_all == 260 and kept_own == 160
    with pytest.raises(ValueError, match="saved names op 'w', which graph 'f' does not have"):
        to_training_graph(fwd, saved={"z": ["w"]})


def test_training_graph_keeps_existing_groups_and_refuses_training_graphs():
    fwd = ComputationGraph([Node("a", "op", 1.0, 1, colocation="g"), Node("b", "op", 1.0, 1, colocation="g")],
                           [Edge("a", "b")])
    t = to_training_graph(fwd)
    assert t.num_units == 1
    with pytest.raises(ValueError, match="already a training graph"):
        to_training_graph(t)
    with pytest.raises(TypeError, match="forward must be a ComputationGraph, got str"):
        to_training_graph("resnet50")


# ---------------------------------------------------------------- generator
def test_layered_dag_is_seeded_and_shaped_by_its_parameters():
    a, b = layered_dag(5, num_ops=100), layered_dag(5, num_ops=100)
    assert a == b
    assert layered_dag(6, num_ops=100) != a
    assert a.num_nodes == 200 and a.num_units == 100  # training graph: op + gradient per unit
    fwd = layered_dag(5, num_ops=100, training=False)
    assert fwd.num_nodes == 100
    sparse = layered_dag(1, num_ops=200, training=False, density=0.0)
    dense = layered_dag(1, num_ops=200, training=False, density=0.5)
    assert sparse.num_edges < dense.num_edges
    assert sparse.num_edges == 200 - int((sparse.in_degree == 0).sum())  # exactly one parent each
    wide = layered_dag(1, num_ops=200, training=False, fat=2.0)
    narrow = layered_dag(1, num_ops=200, training=False, fat=0.2)
    assert wide.depth().max() < narrow.depth().max()
    assert np.all(fwd.output_bytes % 4 == 0)
    heavy = layered_dag(2, num_ops=300, training=False, cost_median=1e-2)
    assert 5e-3 < float(np.median(heavy.cost)) < 2e-2
    with pytest.raises(ValueError, match="density"):
        layered_dag(0, density=1.5)
    with pytest.raises(ValueError, match="num_ops"):
        layered_dag(0, num_ops=0)
    with pytest.raises(ValueError, match="param_median must be positive and finite, got inf"):
        layered_dag(0, param_median=float("inf"))
    with pytest.raises(ValueError, match="cost_sigma must be >= 0 and finite, got nan"):
        layered_dag(0, cost_sigma=float("nan"))
    with pytest.raises(ValueError, match="bytes_sigma=400.0 draws infinite values"):
        layered_dag(0, num_ops=50, bytes_sigma=400.0)
    with pytest.raises(ValueError, match="seed must be an integer >= 0, got -1"):
        layered_dag(-1)


@pytest.mark.parametrize("kind, optimum, all_on_first", [("heavy-light", 4.0, 6.0), ("equal", 8.0, 16.0)])
def test_two_chains_optimum_by_hand(kind, optimum, all_on_first):
    from placement_env import simulate, two_chains

    g, cluster, optimal = two_chains(kind)
    assert simulate(g, optimal, cluster).makespan == optimum  # 8 ops of 1 s at speed 2, or of 0.5 s at speed 1
    assert simulate(g, [0] * 16, cluster).makespan == all_on_first
    swapped = simulate(g, [1 - d for d in optimal], cluster).makespan
    assert swapped == (8.0 if kind == "heavy-light" else optimum)
    with pytest.raises(ValueError, match="unknown two_chains kind 'three'"):
        two_chains("three")


def test_suites():
    from placement_env import load_suite

    suite = load_suite("synthetic")
    assert [g.name for g in suite] == [f"synthetic/{i}" for i in range(17)]
    assert suite[3] == load_graph("synthetic/3")
    assert load_suite("cifar10")[0] == load_graph("default")
    with pytest.raises(ValueError, match="unknown suite 'ptb9'"):
        load_suite("ptb9")


@pytest.mark.parametrize("name, suggestion", [("cifar1/3", "'cifar10/3'"), ("defualt", "'default'"),
                                              ("resnet5", "'resnet50'"), ("ptb3", "'ptb/3'")])
def test_an_unknown_graph_name_suggests_the_nearest_shipped_names(name, suggestion):
    from placement_env import load_graph

    with pytest.raises(ValueError, match=f"did you mean {suggestion}"):
        load_graph(name)


def test_the_traced_batch_is_kept_through_files_and_transforms(tmp_path):
    g = ComputationGraph([Node("a", "op", 1.0, 8), Node("b", "op", 1.0, 8)], [Edge("a", "b")], name="b", batch=16)
    write_graph(g, tmp_path / "g.json")
    assert read_graph(tmp_path / "g.json").batch == 16
    assert graph_to_dict(g)["batch"] == 16
    assert g.with_name("c").without_modules().batch == 16
    assert to_training_graph(g).batch == 16 and coarsen(g, 1).batch == 16
    assert "batch" not in graph_to_dict(ComputationGraph(g.nodes, g.edges()))


@pytest.mark.parametrize("bad", [0, -1, 2.0, True, "8"])
def test_a_bad_batch_is_refused_by_name(bad):
    with pytest.raises(ValueError, match="batch must be an integer >= 1"):
        ComputationGraph([Node("a", "op", 1.0)], batch=bad)
    data = graph_to_dict(ComputationGraph([Node("a", "op", 1.0)]))
    data["batch"] = bad
    with pytest.raises(ValueError, match="'batch' must be an integer >= 1"):
        graph_from_dict(data)
