"""Clusters: presets, heterogeneous lists, JSON, validation."""

import json
import subprocess
import sys

import numpy as np
import pytest

from placement_env import DEVICE_KINDS, Cluster, Device, layered_dag, load_graph, simulate

GIB = 1024**3


def test_default_preset_is_p100_on_pcie():
    c = Cluster.preset("p100", 3)
    assert c.num_devices == 3
    assert np.all(c.speed == 1.0)
    assert np.all(c.memory == 16 * GIB)
    assert c.bandwidth[0, 1] == 12e9 and c.latency[0, 1] == 10e-6
    assert Cluster.preset() == Cluster.preset("p100", 3)


@pytest.mark.parametrize("kind", list(DEVICE_KINDS))
def test_every_preset_builds_and_simulates(kind):
    c = Cluster.preset(kind, 4)
    g = layered_dag(0, num_ops=30)
    r = simulate(g, g.expand_unit_placement(np.arange(g.num_units) % 4), c)
    assert r.makespan > 0 and not r.oom


def test_faster_kinds_are_faster():
    assert DEVICE_KINDS["k80"].speed < DEVICE_KINDS["p100"].speed < DEVICE_KINDS["v100-nvlink"].speed
    assert DEVICE_KINDS["v100-nvlink"].speed < DEVICE_KINDS["a100-nvlink"].speed < DEVICE_KINDS["h100-nvlink"].speed


def test_heterogeneous_cluster_links_run_at_the_slower_end():
    c = Cluster.heterogeneous(["p100", "v100-nvlink"])
    assert list(c.speed) == [1.0, DEVICE_KINDS["v100-nvlink"].speed]
    assert c.bandwidth[0, 1] == 12e9 and c.bandwidth[1, 0] == 12e9
    assert c.memory[1] == 32 * GIB


def test_a_device_kind_given_as_a_cluster_file_points_to_the_preset(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FileNotFoundError, match=r"no such file: 'k80'; 'k80' is a device kind: for N such devices "
                                                r"use Cluster.preset\('k80', N\)"):
        Cluster.from_json("k80")
    Cluster.preset("k80", 2).to_json("k80")  # a file of that name is read as usual
    assert Cluster.from_json("k80") == Cluster.preset("k80", 2)


def test_heterogeneous_refuses_one_string_instead_of_a_list():
    message = r"got the string 'p100' \(for M devices of one kind: Cluster.preset\('p100', M\)\)"
    with pytest.raises(ValueError, match=message):
        Cluster.heterogeneous("p100")


def test_json_round_trip(tmp_path):
    c = Cluster.heterogeneous(["k80", "p100", "a100-nvlink"])
    c.to_json(tmp_path / "c.json")
    assert Cluster.from_json(tmp_path / "c.json") == c
    data = json.loads((tmp_path / "c.json").read_text())
    assert data["format"] == "device-placement-cluster" and data["bandwidth"][0][0] == 0.0


SPEC_EXAMPLE = {"format": "device-placement-cluster", "version": 1,
                "devices": [{"name": "gpu0", "speed": 1.0, "memory_bytes": 17179869184},
                            {"name": "gpu1", "speed": 1.0, "memory_bytes": 17179869184}],
                "bandwidth": [[0, 1.2e10], [1.2e10, 0]], "latency": [[0, 1.0e-5], [1.0e-5, 0]]}


def test_spec_example_cluster_loads(tmp_path):
    (tmp_path / "c.json").write_text(json.dumps(SPEC_EXAMPLE))
    c = Cluster.from_json(tmp_path / "c.json")
    assert c.num_devices == 2 and c.bandwidth[1, 0] == 1.2e10


@pytest.mark.parametrize("change, message", [
    ({"latencies": [[0, 1]]}, r"unknown top-level field\(s\) \['latencies'\]"),  # a typo is not ignored
    ({"devices": {"gpu0": {}}}, "'devices' must be a list"),
    ({"devices": [{"speed": 1, "memory_bytes": 1, "memory_gb": 16}] * 2},
     r"device 0: unknown field\(s\) \['memory_gb'\]"),
    ({"devices": [{"name": 0, "speed": 1, "memory_bytes": 1}] * 2}, "device 0: 'name' must be a string, got 0"),
    ({"name": ["x"]}, r"'name' must be a string, got \['x'\]"),
])
def test_malformed_cluster_files_name_the_field(tmp_path, change, message):
    (tmp_path / "c.json").write_text(json.dumps({**SPEC_EXAMPLE, **change}))
    with pytest.raises(ValueError, match=message):
        Cluster.from_json(tmp_path / "c.json")


@pytest.mark.parametrize("devices, bw, lat, message", [
    ([Device("g", 0.0, 10)], [[0]], [[0]], "speed must be positive"),
    ([Device("g", 1.0, -1)], [[0]], [[0]], "memory_bytes must be positive"),
    ([Device("g", float("nan"), 1)], [[0]], [[0]], "speed must be positive and finite"),
    ([Device("a", 1, 1), Device("b", 1, 1)], [[0, 0], [1, 0]], [[0, 0], [0, 0]], r"bandwidth\[0\]\[1\]"),
    ([Device("a", 1, 1), Device("b", 1, 1)], [[0, 1], [1, 0]], [[0, -1], [0, 0]], r"latency\[0\]\[1\]"),
    ([Device("a", 1, 1), Device("b", 1, 1)], [[0, 1]], [[0, 0], [0, 0]], "must be 2x2"),
    ([Device("a", 1, 1), Device("b", 1, 1)], [[0, 1], [1]], [[0, 0], [0, 0]],
     r"must be 2x2 .* row 1 \(b\) has 1 entries"),
    ([Device("a", 1, 1), Device("b", 1, 1)], [[0, "x"], [1, 0]], [[0, 0], [0, 0]],
     r"bandwidth\[0\]\[1\] \(a -> b\) must be a number, got 'x'"),
    ([Device("a", 1, 1), Device("b", 1, 1)], [[0, 1], [1, 0]], [[0, 0], [None, 0]],
     r"latency\[1\]\[0\] \(b -> a\) must be a number, got None"),
    ([Device("a", 1, 1), Device("b", 1, 1)], [[0, 1], [1, 0]], [[0, 0], [[1], 0]], r"latency\[1\]\[0\] .* got \[1\]"),
    ([], [], [], "at least one device"),
])
def test_invalid_clusters(devices, bw, lat, message):
    with pytest.raises(ValueError, match=message):
        Cluster(devices, bw, lat)


def test_diagonal_is_ignored_whatever_it_holds():
    devices = [Device("a", 1, 1), Device("b", 1, 1)]
    c = Cluster(devices, [[None, 2e9], [3e9, "n/a"]], [[None, 1e-5], [2e-5, None]])
    assert c.bandwidth[0, 1] == 2e9 and c.bandwidth[1, 0] == 3e9
    assert c.latency[0, 1] == 1e-5 and c.latency[1, 0] == 2e-5 and c.latency[0, 0] == 0.0


def test_bad_preset_arguments():
    with pytest.raises(ValueError, match="unknown device kind 'tpu'"):
        Cluster.preset("tpu", 2)
    with pytest.raises(ValueError, match="integer >= 1"):
        Cluster.preset("p100", 0)


def test_nodes_of_devices_have_the_network_between_them():
    c = Cluster.preset("a100-nvlink", 16, per_node=8)
    assert c.name == "2x8xa100-nvlink" and c.num_devices == 16
    assert c.bandwidth[0, 7] == 300e9 and c.latency[0, 7] == 5e-6  # NVSwitch within a node
    assert c.bandwidth[7, 8] == 200e9 / 8 and c.latency[7, 8] == 10e-6  # 8 x 200 Gb/s HDR per node, shared
    assert c.bandwidth[15, 0] == 200e9 / 8
    assert (Cluster.preset("a100-nvlink", 8, per_node=8).bandwidth
            == Cluster.preset("a100-nvlink", 8).bandwidth).all()
    for bad, message in ((3, "per_node=3 does not divide the 16 devices"), (0, "per_node must be"),
                         (2.0, "per_node must be")):
        with pytest.raises(ValueError, match=message):
            Cluster.preset("a100-nvlink", 16, per_node=bad)


def test_the_command_line_takes_nodes(tmp_path):
    placement = tmp_path / "p.json"
    placement.write_text(json.dumps([0] * load_graph("default").num_nodes))
    run = [sys.executable, "-m", "placement_env", "simulate", "--graph", "default", "--placement", str(placement),
           "--device-kind", "h100-nvlink"]
    ok = subprocess.run(run + ["--devices", "16", "--per-node", "8"], capture_output=True, text=True)
    assert ok.returncode == 0 and "2x8xh100-nvlink" in ok.stdout
    bad = subprocess.run(run + ["--devices", "12", "--per-node", "8"], capture_output=True, text=True)
    assert bad.returncode == 2
    assert bad.stderr.strip() == "error: per_node=8 does not divide the 12 devices into whole nodes"


def test_training_takes_nodes():
    import gymnasium

    from agents.training import TrainConfig

    config = TrainConfig(devices=16, device_kind="a100-nvlink", per_node=8)
    _, cluster = config.problem()
    assert cluster.name == "2x8xa100-nvlink" and cluster.bandwidth[0, 8] < cluster.bandwidth[0, 1]
    env = gymnasium.make(config.env_id(), **config.env_kwargs())
    assert env.unwrapped.task.cluster.name == "2x8xa100-nvlink"
    for bad, message in ((dict(devices=12, per_node=8), "per_node=8 does not divide the 12 devices"),
                         (dict(cluster="c.json", per_node=8), "--per-node shapes a preset cluster")):
        with pytest.raises(ValueError, match=message):
            TrainConfig(**bad)
    done = subprocess.run([sys.executable, "train.py", "--devices", "12", "--per-node", "8"], capture_output=True,
                          text=True)
    assert done.returncode == 2
    assert done.stderr.strip() == "error: per_node=8 does not divide the 12 devices into whole nodes"


def test_more_devices_than_a_cluster_may_have_is_one_error_and_a_device_index_is_bounded(tmp_path):
    with pytest.raises(ValueError, match="the number of devices must be at most 4096, got 100000"):
        Cluster.preset("p100", 100_000)
    with pytest.raises(ValueError, match="a cluster of 5000 devices is more than the 4096"):
        Cluster.heterogeneous(["p100"] * 5000)
    big = Cluster.preset("a100-nvlink", 4096, per_node=8)  # numpy-built links: seconds, not minutes
    assert big.bandwidth.shape == (4096, 4096) and big.bandwidth[0, 8] < big.bandwidth[0, 1]
    from placement_env.graph.placement_io import read_placement

    g = load_graph("default")
    path = tmp_path / "p.json"
    path.write_text(json.dumps([2**63] + [0] * (g.num_nodes - 1)))
    with pytest.raises(ValueError, match=r"must be an integer from 0 to 4095, got 9223372036854775808"):
        read_placement(path, g)


def test_nodes_of_several_kinds():
    same = Cluster.of_nodes([("a100-nvlink", 4)] * 3)
    preset = Cluster.preset("a100-nvlink", 12, per_node=4)
    assert np.array_equal(same.bandwidth, preset.bandwidth) and np.array_equal(same.latency, preset.latency)
    mixed = Cluster.of_nodes([("a100-nvlink", 8), ("v100-nvlink", 4)])
    a100, v100 = DEVICE_KINDS["a100-nvlink"], DEVICE_KINDS["v100-nvlink"]
    assert mixed.num_devices == 12 and mixed.memory[0] == a100.memory_bytes and mixed.memory[8] == v100.memory_bytes
    assert mixed.bandwidth[0, 1] == a100.bandwidth and mixed.bandwidth[8, 9] == v100.bandwidth
    # across the two nodes: the slower of the networks, each shared by its node's devices
    assert mixed.bandwidth[0, 8] == mixed.bandwidth[8, 0] == min(a100.node_network / 8, v100.node_network / 4)
    assert mixed.latency[0, 8] == max(a100.network_latency, v100.network_latency)
    with pytest.raises(ValueError, match="node 1's devices"):
        Cluster.of_nodes([("a100-nvlink", 8), ("v100-nvlink", 0)])
    with pytest.raises(ValueError, match="unknown device kind 'tpu'"):
        Cluster.of_nodes([("tpu", 8)])
