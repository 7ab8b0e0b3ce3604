"""Results that cannot lie and machines that cannot be exhausted: exact resume, a lock that holds, bounded
loading, the smaller error cases."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest
import torch

import agents.learned.pretraining as pretraining
from agents.learned.policy_file import load_policy, new_network, save_policy
from agents.learned.pretrain_config import PretrainConfig

ROOT = Path(__file__).resolve().parents[1]
TINY = PretrainConfig(suites=("cifar10",), seeds=2, devices=(2,), max_devices=4, expert_steps=10, epochs=3,
                      rounds=0, encoder="gcn", encoder_kwargs={"hidden_dim": 8})


class Killed(BaseException):
    """Stands for a kill: raised at a chosen write, it ends the run with the files as they are at that moment."""


def kill_at_write(monkeypatch, target, name: str, at: int) -> None:
    """Make ``target.name`` (a writer) raise :class:`Killed` instead of its ``at``-th call (0-based)."""
    real, calls = getattr(target, name), [0]

    def writer(*args, **kwargs):
        calls[0] += 1
        if calls[0] - 1 == at:
            raise Killed
        return real(*args, **kwargs)

    monkeypatch.setattr(target, name, writer)


def weights(path: Path) -> dict:
    return {k: v.clone() for k, v in load_policy(path).state_dict().items()}


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    out = tmp_path_factory.mktemp("whole")
    path = pretraining.pretrain(TINY, out, log=lambda line: None)
    return weights(path), json.loads((out / "pretrain.json").read_text())["stages"]


# every write of one run: the targets (2), and per epoch the policy then the record (the record once more first)
@pytest.mark.parametrize("writer, at", [("write_text_atomically", 0), ("write_text_atomically", 1),
                                        ("write_text_atomically", 2), ("save_policy", 0),
                                        ("write_text_atomically", 3), ("save_policy", 1),
                                        ("write_text_atomically", 4), ("save_policy", 2)])
def test_a_pretraining_killed_at_any_write_resumes_to_the_uninterrupted_weights(tmp_path, monkeypatch,
                                                                                uninterrupted, writer, at):
    with monkeypatch.context() as patch:
        kill_at_write(patch, pretraining, writer, at)
        with pytest.raises(Killed):
            pretraining.pretrain(TINY, tmp_path, log=lambda line: None)
    path = pretraining.pretrain(TINY, tmp_path, log=lambda line: None)  # the same command again
    whole, stages = uninterrupted
    resumed = weights(path)
    assert resumed.keys() == whole.keys() and all(torch.equal(resumed[k], whole[k]) for k in whole)
    record = json.loads((tmp_path / "pretrain.json").read_text())["stages"]
    assert record["epochs_done"] == stages["epochs_done"] == 3 and record["loss"] == stages["loss"]


def test_expert_placements_are_redone_when_what_made_them_differs(tmp_path):
    pretraining.pretrain(TINY, tmp_path, log=lambda line: None)
    target = tmp_path / "targets" / "cifar10-0_2gpu.json"
    data = json.loads(target.read_text())
    target.write_text(json.dumps({**data, "inputs": "made from another graph"}))
    lines: list[str] = []
    pretraining.pretrain(TINY, tmp_path, log=lines.append)
    assert any(line.startswith("stage 1: 1 expert placement(s)") for line in lines)
    assert json.loads(target.read_text())["inputs"] == pretraining.expert_inputs("cifar10/0", 2, TINY)


# ------------------------------------------------------------------------------------------------- the lock

RACE = """import json, sys, time
from agents.training.lock import OutputLock
folder, start = sys.argv[1], float(sys.argv[2])
time.sleep(max(0.0, start - time.time()))  # every contender starts at once
try:
    with OutputLock(folder):
        began = time.time()
        time.sleep(0.3)
        print(json.dumps([began, time.time()]))
except ValueError:
    print("refused")
"""


@pytest.mark.parametrize("stale", [False, True], ids=["fresh", "stale"])
def test_processes_starting_together_never_both_hold_the_lock(tmp_path, stale):
    for trial in range(3):
        folder = tmp_path / f"trial{trial}"
        folder.mkdir()
        if stale:  # a lock file left by a process that no longer runs
            dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                                  text=True)
            (folder / ".lock").write_text(dead.stdout)
        start = time.time() + 3.0
        contenders = [subprocess.Popen([sys.executable, "-c", RACE, str(folder), str(start)], cwd=ROOT,
                                       stdout=subprocess.PIPE, text=True) for _ in range(4)]
        outputs = [c.communicate(timeout=60)[0].strip() for c in contenders]
        held = sorted(json.loads(out) for out in outputs if out != "refused")
        assert held, outputs
        assert all(a[1] <= b[0] for a, b in zip(held, held[1:])), held  # held one after another, never together


# --------------------------------------------------------------------------------------------- bounded loading

def rewritten(source: Path, target: Path, **members: bytes) -> Path:
    """A copy of the checkpoint ``source`` with some members replaced."""
    with zipfile.ZipFile(source) as archive:
        items = {name: archive.read(name) for name in archive.namelist()}
    items.update(members)
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in items.items():
            archive.writestr(name, data)
    return target


def test_a_small_checkpoint_declaring_a_huge_network_or_a_zip_bomb_is_refused_before_building(tmp_path,
                                                                                            monkeypatch):
    small = tmp_path / "small.zip"
    save_policy(new_network(encoder_kwargs={"hidden_dim": 16}), small)
    with zipfile.ZipFile(small) as archive:
        meta = json.loads(archive.read("checkpoint.json"))
    meta["policy"]["encoder_kwargs"] = {"hidden_dim": 8192, "num_layers": 8}
    huge = rewritten(small, tmp_path / "huge.zip", **{"checkpoint.json": json.dumps(meta).encode()})
    with pytest.raises(ValueError, match="declare a 'fadp-gt' encoder .* refused before building it"):
        load_policy(huge)
    monkeypatch.setenv("DEVICE_PLACEMENT_MAX_CHECKPOINT_BYTES", "1000")
    with pytest.raises(ValueError, match="member 'policy.pt' expands to .* DEVICE_PLACEMENT_MAX_CHECKPOINT_BYTES"):
        load_policy(small)
    monkeypatch.delenv("DEVICE_PLACEMENT_MAX_CHECKPOINT_BYTES")
    network = new_network(encoder_kwargs={"hidden_dim": 16})
    with torch.no_grad():
        next(iter(network.parameters())).fill_(float("nan"))
    save_policy(network, tmp_path / "nan.zip")
    with pytest.raises(ValueError, match="are not all finite"):
        load_policy(tmp_path / "nan.zip")


def test_json_that_expands_too_far_or_nests_too_deep_is_one_error(tmp_path, monkeypatch):
    import gzip

    from placement_env import load_graph

    with gzip.open(tmp_path / "g.json.gz", "wb") as f:
        f.write(b'{"nodes": [' + b" " * 4096 + b"]}")
    monkeypatch.setenv("DEVICE_PLACEMENT_MAX_JSON_BYTES", "1024")
    with pytest.raises(ValueError, match="more than 1,024 bytes of JSON once uncompressed"):
        load_graph(tmp_path / "g.json.gz")
    monkeypatch.delenv("DEVICE_PLACEMENT_MAX_JSON_BYTES")
    (tmp_path / "deep.json").write_text("[" * 5000 + "]" * 5000)
    with pytest.raises(ValueError, match="nests its JSON too deeply"):
        load_graph(tmp_path / "deep.json")


def test_degenerate_speeds_and_overflowing_costs_are_refused_with_their_names():
    from placement_env import Cluster, ComputationGraph, Device
    from placement_env.graph.model import Node

    with pytest.raises(ValueError, match=r"device 0 \('slow'\): speed 1e-300 is outside"):
        Cluster([Device("slow", 1e-300, 1e9), Device("b", 1.0, 1e9)], [[0, 1e9], [1e9, 0]], [[0, 0], [0, 0]])
    with pytest.raises(ValueError, match="node 'x': cost is 1e\\+308, more than"):
        ComputationGraph([Node("x", "matmul", 1e308, 1, 1)])


def test_temporaries_of_a_killed_write_are_removed_and_a_live_writer_s_kept(tmp_path):
    import os

    from placement_env.json_files import remove_stale_temporaries

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stale = tmp_path / f".checkpoint.zip.{dead.stdout.strip()}.tmp"
    live = tmp_path / f".results.{os.getpid()}.tmp.json"
    for path in (stale, live):
        path.write_text("half")
    assert remove_stale_temporaries(tmp_path) == [stale] and live.exists() and not stale.exists()
