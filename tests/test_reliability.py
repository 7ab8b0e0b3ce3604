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
from agents.training.lock import OutputLock
from placement_env import load_graph
from tests.helpers import running

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


def test_pretraining_holds_its_output_folder(tmp_path):
    with OutputLock(tmp_path):
        with pytest.raises(ValueError, match="is in use by another run"):
            pretraining.pretrain(TINY, tmp_path, log=lambda line: None)
    assert not (tmp_path / "pretrain.json").exists()  # refused before any work


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
    stale = tmp_path / f".checkpoint.zip.{dead.stdout.strip()}.dp-tmp"
    live = tmp_path / f".results.{os.getpid()}.dp-tmp.json"
    users = tmp_path / f".x.{dead.stdout.strip()}.tmp"  # a user's own file of that shape is not ours to remove
    for path in (stale, live, users):
        path.write_text("half")
    assert remove_stale_temporaries(tmp_path) == [stale] and live.exists() and users.exists()


def test_an_atomic_write_keeps_a_link_the_file_s_mode_and_takes_a_long_name(tmp_path):
    from placement_env.json_files import write_json_file, write_text_atomically

    target = tmp_path / "real.json"
    target.write_text("old")
    target.chmod(0o640)
    link = tmp_path / "link.json"
    link.symlink_to(target)
    write_text_atomically(link, "new")
    assert link.is_symlink() and target.read_text() == "new" and (target.stat().st_mode & 0o777) == 0o640
    long = tmp_path / ("n" * 244 + ".json")  # 249 characters: a valid name whose temporary must stay valid too
    write_json_file({"a": 1}, long)
    assert json.loads(long.read_text()) == {"a": 1}


# ------------------------------------------------------------------------------ train.py's resume

def train_config(graph_file: Path, out: Path, **overrides):
    from agents.training.config import TrainConfig

    settings = {"graph": str(graph_file), "algo": "reinforce", "encoder": "gcn", "hidden_dim": 8, "episodes": 4,
                "episode_length": 4, "checkpoint_every": 3, "compare_searches": False, "budget_seconds": 600.0,
                "out": str(out), "resume": True, **overrides}
    return TrainConfig(**settings)


@pytest.fixture(scope="module")
def tiny_graph(tmp_path_factory):
    from placement_env import layered_dag, write_graph

    path = tmp_path_factory.mktemp("graph") / "tiny.json.gz"
    write_graph(layered_dag(5, num_ops=10, name="tiny"), path)
    return path


def checkpoint_weights(path: Path) -> dict:
    from agents.algorithms.checkpoint import read_checkpoint

    saved = read_checkpoint(path)
    assert saved.optimizer_state is not None
    return {**saved.policy_state, **{f"optimizer.{k}": v for k, v in saved.optimizer_state["state"].items()}}


def same_tensors(a: dict, b: dict) -> bool:
    def flat(d):
        out = {}
        for k, v in d.items():
            if isinstance(v, dict):
                out.update({f"{k}.{kk}": vv for kk, vv in flat(v).items()})
            else:
                out[k] = v
        return out
    a, b = flat(a), flat(b)
    return a.keys() == b.keys() and all(torch.equal(torch.as_tensor(a[k]), torch.as_tensor(b[k])) for k in a)


@pytest.mark.parametrize("at", [0, 1, 2, 4, 5])  # checkpoints every 3 steps (mid-episode), 16 steps: 6 saves
def test_train_py_killed_at_any_checkpoint_resumes_reinforce_to_the_uninterrupted_weights(tmp_path, monkeypatch,
                                                                                      tiny_graph, at):
    from agents.training import run as training_run

    whole = training_run.train(train_config(tiny_graph, tmp_path / "whole"))
    with monkeypatch.context() as patch:
        kill_at_write(patch, training_run, "save", at)
        with pytest.raises(Killed):
            training_run.train(train_config(tiny_graph, tmp_path / "killed"))
    resumed = training_run.train(train_config(tiny_graph, tmp_path / "killed"))  # the same command again
    assert resumed.steps == whole.steps == 16
    assert same_tensors(checkpoint_weights(tmp_path / "killed" / "checkpoint.zip"),
                        checkpoint_weights(tmp_path / "whole" / "checkpoint.zip"))
    assert resumed.makespan == whole.makespan


def test_a_resumed_guided_search_continues_its_rounds_and_archives(tmp_path, tiny_graph):
    from agents.algorithms.registry import load_model
    from agents.training import run as training_run

    config = train_config(tiny_graph, tmp_path, algo="guided", budget_seconds=1.0, expected_moves=0.0)
    first = training_run.train(config)
    env = training_run.make_env(config)
    model = load_model(tmp_path / "checkpoint.zip", env)
    assert model.rounds > 0 and model.num_timesteps == first.steps
    _, archive = model._problems[0]
    assert archive.best[1] == pytest.approx(first.makespan, rel=1e-9)  # what it had found, not the start again


def test_a_tampered_training_state_is_one_error(tmp_path, tiny_graph):
    from agents.algorithms.registry import load_model
    from agents.training import run as training_run

    config = train_config(tiny_graph, tmp_path, episodes=1)
    training_run.train(config)
    path = tmp_path / "checkpoint.zip"
    rewrite_member(path, "training_state.json", lambda state: state["generators"].update(reinforce=[300] * 3))
    with pytest.raises(ValueError, match="its training state cannot be resumed.*'reinforce' is not 5056 bytes"):
        load_model(path, training_run.make_env(config))


def rewrite_member(path: Path, name: str, change) -> None:
    """Rewrite the JSON member ``name`` of the zip at ``path`` with ``change(data)``."""
    with zipfile.ZipFile(path) as archive:
        data = json.loads(archive.read(name))
    change(data)
    rewritten(path, path, **{name: json.dumps(data).encode()})


@pytest.mark.parametrize("change, message", [
    (lambda meta: meta["algo_kwargs"].update(info=[1, 2]), "its info .how the policy was made. is a list"),
    (lambda meta: meta["algo_kwargs"].update(info="notes"), "its info .how the policy was made. is a str"),
    (lambda meta: meta["algo_kwargs"].update(head_hidden=10**9), "declare head_hidden 1000000000, but its head"),
    (lambda meta: meta["algo_kwargs"].update(head_hidden="64"), "declare head_hidden '64'"),
])
def test_a_policy_whose_settings_have_the_wrong_type_is_one_error(tmp_path, change, message, capsys):
    import agents.place

    path = tmp_path / "policy.zip"
    save_policy(new_network("gcn", {"hidden_dim": 8}), path, info={"epochs": 1})
    rewrite_member(path, "checkpoint.json", change)
    with pytest.raises(ValueError, match=message):
        load_policy(path)
    assert agents.place.main(["--graph", "default", "--devices", "2", "--policy", str(path), "--zero-shot"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ")


REAPED_DRIVER = """import subprocess, sys, time
from agents.jobs.reaper import start_reaper
start_reaper(every=0.1, seen_file=sys.argv[1])
# a child in a session of its own, with a child of its own, as Ray's node processes are
child = subprocess.Popen([sys.executable, "-c", "import subprocess, sys, time; "
                          "g = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
                          "print(g.pid, flush=True); time.sleep(60)"], stdout=subprocess.PIPE, text=True,
                         start_new_session=True)
print(child.pid, child.stdout.readline().strip(), flush=True)
time.sleep(60)
"""


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="the reaper reads /proc")
def test_the_reaper_ends_the_descendants_of_a_killed_driver_and_nothing_else(tmp_path):
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    seen = tmp_path / "seen"
    driver = subprocess.Popen([sys.executable, "-c", REAPED_DRIVER, str(seen)], stdout=subprocess.PIPE, text=True,
                              cwd=Path(__file__).resolve().parents[1])
    try:
        child, grandchild = (int(x) for x in driver.stdout.readline().split())
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (seen.exists()
                                                   and {child, grandchild} <= set(map(int, seen.read_text().split()))):
            time.sleep(0.05)  # until the reaper has seen them
        assert running(child) and running(grandchild)
        driver.kill()
        driver.wait()
        deadline = time.monotonic() + 5
        while (running(child) or running(grandchild)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not running(child) and not running(grandchild)
        assert bystander.poll() is None  # not a descendant of the driver: left alone
    finally:
        bystander.kill()
        driver.kill()


UNBOUNDED = [["--microbatches", "1000000"], ["--devices", "100000"]]
COMMANDS = [["-m", "placement_env", "simulate", "--placement", "p.json"], ["-m", "baselines"], ["-m", "agents.place"],
            ["train.py", "--out", "out"], ["-m", "agents.benchmark", "--out", "out"]]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c[:3]))
@pytest.mark.parametrize("unbounded", UNBOUNDED, ids=lambda a: a[0])
def test_huge_micro_batch_and_device_counts_are_one_error_on_every_command(tmp_path, command, unbounded):
    (tmp_path / "p.json").write_text(json.dumps([0] * load_graph("default").num_nodes))
    done = subprocess.run([sys.executable, *[str(tmp_path / a) if a in ("p.json", "out") else a for a in command],
                           *unbounded], cwd=Path(__file__).resolve().parents[1], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2 and done.stderr.startswith("error: ") and len(done.stderr.splitlines()) == 1, \
        done.stderr
    assert not (tmp_path / "out").exists()  # nothing written
