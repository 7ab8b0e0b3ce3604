"""The device-count-agnostic head, pretraining on shared experts, and the encoder study's pieces."""

import json

import numpy as np
import pytest
import torch

from agents.algorithms.problem import PlacementProblem
from agents.learned.placer import place
from agents.learned.policy_file import load_policy, new_network, save_policy
from agents.learned.pretrain_config import PretrainConfig
from agents.learned.pretraining import pretrain
from agents.policies.device_head import SHARE_COLUMNS, DeviceEmbeddingHead
from placement_env import Cluster, load_graph


def test_one_device_embedding_policy_scores_any_number_of_devices():
    torch.manual_seed(0)
    network = new_network(head="device-embedding", max_devices=8)
    graph = load_graph("cifar10/0")
    for m in (2, 3, 8, 16, 64):
        problem = PlacementProblem(graph, Cluster.preset(num_devices=m), m)
        logits = problem.logits(network)
        assert logits.shape == (graph.num_units, m) and torch.isfinite(logits).all()
    # the padding does not matter: devices beyond the cluster are masked, the rest scored the same
    small = PlacementProblem(graph, Cluster.preset(num_devices=3), 3)
    padded = PlacementProblem(graph, Cluster.preset(num_devices=3), 8)
    assert torch.allclose(small.logits(network), padded.logits(network), atol=1e-5)
    assert (network(padded.observation)[0, :graph.num_units, 3:] < -1e8).all()


def test_device_embeddings_are_the_mean_of_the_units_on_each_device_and_their_shares():
    head = DeviceEmbeddingHead(embed_dim=2, hidden_dim=4)
    head.device_mlp = torch.nn.Sequential()  # empty: read the described devices themselves
    nodes = torch.tensor([[[1.0, 0.0], [3.0, 2.0], [5.0, 4.0], [9.0, 9.0]]])
    static = torch.zeros(1, 4, 20)
    static[0, :, SHARE_COLUMNS[0]] = torch.tensor([1.0, 1.0, 2.0, 7.0])  # costs
    current = torch.tensor([[[1.0, 0, 0], [1.0, 0, 0], [0, 1.0, 0], [0, 0, 1.0]]])
    mask = torch.tensor([[True, True, True, False]])  # the last node is padding
    described = head.device_embeddings(nodes, static, current, mask, torch.tensor([[3]]))[0]
    assert torch.allclose(described[0, :2], torch.tensor([2.0, 1.0]))  # mean of units 0 and 1
    assert torch.allclose(described[1, :2], torch.tensor([5.0, 4.0]))
    assert torch.allclose(described[2, :2], torch.zeros(2))  # only padding there: empty
    assert torch.allclose(described[:, 2], torch.tensor([0.5, 0.5, 0.0]))  # cost shares of the real units
    assert torch.allclose(described[:, 5], torch.tensor([2 / 3, 1 / 3, 0.0]))  # unit shares
    assert torch.allclose(described[:, 6], torch.tensor([0.0, 0.0, 1.0]))  # the empty flag
    assert torch.allclose(described[:, 7], torch.tensor([0.0, 0.5, 1.0]))  # the position
    assert torch.allclose(described[:, 8], torch.full((3,), 1 / 3))


def test_a_device_embedding_policy_file_loads_and_places_beyond_its_padding(tmp_path):
    network = new_network(encoder="gcn", head="device-embedding", max_devices=4)
    save_policy(network, tmp_path / "p.zip")
    loaded = load_policy(tmp_path / "p.zip")
    assert loaded.head_name == "device-embedding" and loaded.device_agnostic
    assert all(torch.equal(a, b) for a, b in zip(network.state_dict().values(), loaded.state_dict().values()))
    result = place(load_graph("default"), Cluster.preset("p100", 6), tmp_path / "p.zip", zero_shot=True)
    assert result.placement.max() < 6
    with pytest.raises(ValueError, match="this policy places on at most 4"):
        place(load_graph("default"), Cluster.preset("p100", 6), new_network(encoder="gcn", max_devices=4),
              zero_shot=True)
    with pytest.raises(ValueError, match="unknown head 'wide'"):
        new_network(head="wide")


def test_a_per_unit_policy_file_keeps_its_settings_as_before(tmp_path):
    network = new_network(encoder="gcn")
    assert "head" not in network.settings()
    save_policy(network, tmp_path / "p.zip")
    assert load_policy(tmp_path / "p.zip").head_name == "per-unit"


def test_pretraining_settings_for_the_heads_are_checked():
    with pytest.raises(ValueError, match="devices: 16 is more than max_devices=8"):
        PretrainConfig(devices=(3, 16))
    assert PretrainConfig(devices=(3, 16), head="device-embedding").padding(16) == 16
    with pytest.raises(ValueError, match="head: use one of"):
        PretrainConfig(head="wide")


def test_a_pretraining_on_another_s_experts_copies_them_and_computes_none(tmp_path):
    config = PretrainConfig(suites=("cifar10",), seeds=1, devices=(2, 3), expert_seconds=0.1, epochs=1, rounds=0,
                            encoder="gcn")
    pretrain(config, tmp_path / "first", log=lambda line: None)
    lines: list[str] = []
    other = PretrainConfig(**{**config.__dict__, "encoder": "sage", "head": "device-embedding"})
    pretrain(other, tmp_path / "second", log=lines.append, experts=tmp_path / "first")
    assert "stage 1: 2 expert placement(s) copied" in lines[0]
    assert not any("in this process" in line for line in lines)  # no expert was computed
    for key in ("cifar10-0_2gpu", "cifar10-0_3gpu"):
        assert (tmp_path / "first" / "targets" / f"{key}.json").read_text() == \
            (tmp_path / "second" / "targets" / f"{key}.json").read_text()
    record = json.loads((tmp_path / "second" / "pretrain.json").read_text())
    assert record["experts_from"] == str(tmp_path / "first") and record["stages"]["epochs_done"] == 1
    assert set(record["stage_seconds"]) == {"experts", "imitation", "improvement"}
    assert load_policy(tmp_path / "second" / "policy.zip").head_name == "device-embedding"
    # experts made from other inputs are not copied: they are computed
    lines.clear()
    third = PretrainConfig(**{**config.__dict__, "expert_seconds": 0.2})
    pretrain(third, tmp_path / "third", log=lines.append, experts=tmp_path / "first")
    assert not any("copied" in line for line in lines) and any("2 expert placement(s) in" in line for line in lines)


def test_the_study_matches_parameter_budgets_and_names_its_rows():
    from agents.paper.encoder_study import STUDY_ROWS, matched_options, network_parameters, slug
    from agents.paper.encoders_command import ROW_NAMES

    assert ROW_NAMES == tuple(STUDY_ROWS)
    assert slug("FADP-GT without FAGA") == "fadp-gt-without-faga"
    target = network_parameters("fadp-gt", {}, "per-unit")
    for encoder in ("gcn", "gat", "graphormer"):
        options, count = matched_options(encoder, {}, target, "per-unit")
        assert abs(count - target) / target < 0.1
        assert count == network_parameters(encoder, options, "per-unit")
        others = [network_parameters(encoder, {"hidden_dim": w}, "per-unit") for w in (16, 512)]
        assert all(abs(count - target) <= abs(c - target) for c in others)


@pytest.mark.parametrize("args, message", [
    (["--rows", "Foo"], "--rows: unknown row 'Foo'"),
    (["--budgets", "0"], "--budgets must be positive"),
    (["--budgets", "nan"], "--budgets"),
    (["--epochs", "0"], "epochs"),
    (["--expert-seconds", "0"], "expert_seconds must be positive"),
    (["--reference", "/nonexistent.csv", "--rows", "GCN", "--seeds", "1", "--devices", "2", "--epochs", "1"],
     "reference: no such file"),
])
def test_study_command_errors_are_one_line(args, message, capsys, tmp_path):
    from agents.experiments import main

    assert main(["encoders"] + args + ["--out", str(tmp_path / "out"), "--runs", str(tmp_path / "runs")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and message in err[0]
    assert not (tmp_path / "out" / "encoders.md").exists()


def test_the_study_reads_the_anytime_benchmark_s_csv(tmp_path):
    from agents.paper.encoder_study import reference

    path = tmp_path / "b.csv"
    path.write_text("cell,method,budget_seconds,makespan_ms,lower_bound_ms,ratio,oom,seconds\n"
                    "a,anneal,1,5.0,1,5,0,1\na,anneal,10,4.0,1,4,0,10\na,heft,,3.5,1,3.5,1,0\n"
                    "a,zero-shot,,4.5,1,4.5,0,0.4\n")
    known = reference(path)
    assert known["a"]["best"] == pytest.approx(4.0e-3)  # heft is out of memory
    assert known["a"]["anneal"] == {1.0: pytest.approx(5e-3), 10.0: pytest.approx(4e-3)}
    path.write_text("x,y\n1,2\n")
    with pytest.raises(ValueError, match="is not the anytime benchmark's CSV"):
        reference(path)
    assert np.isfinite(known["a"]["best"])


def test_the_study_report_splits_cells_by_padding_and_counts_refusals_apart(tmp_path):
    """A refused record (empty makespan in the CSV) has no gap and is counted as 'none'; cells beyond the per-unit
    padding get a table of their own. Gaps hand-computed: 6/5 - 1 = 20%, 4/4 - 1 = 0%."""
    from agents.learned.pretrain_config import PretrainConfig
    from agents.paper.benchmark_cells import Cell
    from agents.paper.encoder_study import PADDED_DEVICES, StudyConfig, _records, _report

    small, large = Cell("cifar10/100", 3), Cell("ptb/103", PADDED_DEVICES * 2)
    config = StudyConfig(("GCN",), PretrainConfig(rounds=0), (1.0,), (small, large))
    folder = tmp_path / "benchmark"
    folder.mkdir()
    (folder / "benchmark.csv").write_text(
        "cell,method,budget_seconds,makespan_ms,lower_bound_ms,ratio,oom,seconds\n"
        f"{small.key},zero-shot,,6.0,1,6,0,0.5\n{small.key},fine-tuned,1,5.0,1,5,0,1\n"
        f"{large.key},zero-shot,,,,,0,0.1\n{large.key},fine-tuned,1,,,,0,0.1\n")
    records = _records(folder, config)
    assert "makespan" not in records[(large.key, "zero-shot", None)]
    known = {small.key: {"best": 5e-3, "anneal": {0.3: 7e-3, 1.0: 5.5e-3, 10.0: 5e-3}},
             large.key: {"best": 4e-3, "anneal": {0.3: 6e-3, 1.0: 5e-3, 10.0: 4e-3}}}
    pretrained = {"GCN": {"stage_seconds": {"imitation": 3.0}, "stages": {"loss": [1.5]}}}
    markdown, rows = _report(config, {"GCN": (config.pretraining, 1000)}, pretrained, {"GCN": records}, known)
    # a second row, paired against the first on the cells where both placed: 5.4 / 6.0 = 0.9
    two = StudyConfig(("GCN", "GAT"), config.pretraining, config.budgets, config.cells)
    key = (small.key, "zero-shot", None)
    faster = {**records, key: {**records[key], "makespan": 5.4e-3}}
    paired, _ = _report(two, dict.fromkeys(two.rows, (config.pretraining, 1000)), dict.fromkeys(two.rows,
                        pretrained["GCN"]), {"GCN": records, "GAT": faster}, known)
    assert "| GAT |" in paired and "| 1 / 0, ×0.900 |" in paired.split("| GAT |")[1].splitlines()[0] + "|"
    first, second = markdown.split(f"### Cells on more than {PADDED_DEVICES} devices (1)")
    assert f"### Cells on at most {PADDED_DEVICES} devices (1)" in first
    assert "| 20.0% (20.0%) | 0/1 | 1/1 | 0.50 |" in first and "| 0.0% (0.0%) | 1/1 | -9.09% | 1.00 |" in first
    assert "none" not in first and "1 none" in second
    gaps = {(r["cell"], r["method"]): r["gap"] for r in rows}
    assert gaps[(small.key, "zero-shot")] == pytest.approx(0.2) and gaps[(large.key, "zero-shot")] == float("inf")
