"""train.py end to end: every encoder and algorithm with a tiny budget, outputs, resume, bad arguments."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import TickingClock

import train
from agents import read_checkpoint
from graph_encoders import list_encoders
from placement_env import Cluster, layered_dag, read_placement, simulate, write_graph

ROOT = Path(__file__).resolve().parents[1]
OUTPUTS = ("placement.json", "results.json", "learning_curve.png", "gantt.png", "tracker.json")


@pytest.fixture(scope="module")
def graph_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("graphs") / "tiny.json.gz"
    write_graph(layered_dag(5, num_ops=10, name="tiny"), path)
    return path


def run(graph_file, out, *extra):
    """train.py with PPO (quick with --timesteps) unless ``extra`` names another algorithm."""
    algo = [] if "--algo" in extra else ["--algo", "ppo"]
    argv = ["--graph", str(graph_file), "--out", str(out), "--progress", "off", "--hidden-dim", "16", *algo, *extra]
    assert train.main(argv) == 0
    return json.loads((out / "results.json").read_text())


def check_outputs(graph_file, out, results):
    for name in OUTPUTS:
        assert (out / name).exists(), name
    graph = layered_dag(5, num_ops=10, name="tiny")
    placement = read_placement(out / "placement.json", graph)
    assert simulate(graph, placement, Cluster.preset("p100", 3)).makespan == results["makespan"]
    assert results["lb_ratio"] >= 1.0 and results["search_seconds"] > 0
    assert set(results["baselines"]) == {"single", "heft", "m-etf", "metis", "local-search", "anneal"}
    assert results["search_baseline_seconds"] == pytest.approx(max(0.1, results["search_seconds"]
                                                                   - results["validation_seconds"]))
    assert results["versions"]["torch"] and results["hyperparameters"]["seed"] == 0


@pytest.mark.parametrize("encoder", list_encoders())
def test_every_encoder_with_ppo(graph_file, tmp_path, encoder):
    results = run(graph_file, tmp_path, "--encoder", encoder, "--timesteps", "16")
    check_outputs(graph_file, tmp_path, results)
    assert results["encoder"] == encoder


@pytest.mark.parametrize("algo, extra", [("a2c", ["--timesteps", "16"]),
                                         ("reinforce", ["--episodes", "3", "--epsilon", "0"]),
                                         ("maskable-ppo", ["--timesteps", "16"]),
                                         ("guided", ["--budget-seconds", "1.5"])])
def test_every_algorithm(graph_file, tmp_path, algo, extra):
    results = run(graph_file, tmp_path, "--algo", algo, "--encoder", "gcn", *extra)
    check_outputs(graph_file, tmp_path, results)
    assert results["interrupted"] is False
    assert read_checkpoint(tmp_path / "checkpoint.zip").algo == algo  # one format for every algorithm


def test_resume_continues_from_the_checkpoint(graph_file, tmp_path):
    first = run(graph_file, tmp_path, "--encoder", "gcn", "--timesteps", "16")
    second = run(graph_file, tmp_path, "--encoder", "gcn", "--timesteps", "32", "--resume")
    assert second["steps"] > first["steps"]
    assert second["makespan"] <= first["makespan"]  # the best placement carries over
    # search seconds add up over the runs, as the time the best was found does
    assert second["search_seconds"] > first["search_seconds"] - first["validation_seconds"]
    assert second["best_found_seconds"] <= second["search_seconds"]
    with pytest.raises(ValueError, match="has encoder 'gcn', the command line asks for 'fadp-gt'"):
        run(graph_file, tmp_path, "--encoder", "fadp-gt", "--timesteps", "48", "--resume")
    with pytest.raises(ValueError, match="has expected moves 1.0, the command line asks for 0.0"):
        run(graph_file, tmp_path, "--encoder", "gcn", "--expected-moves", "0", "--timesteps", "48", "--resume")
    with pytest.raises(ValueError, match="judged placements by 1 batch, the command line asks for 2 micro-batches"):
        run(graph_file, tmp_path, "--encoder", "gcn", "--timesteps", "48", "--resume", "--microbatches", "2")
    (tmp_path / "tracker.json").write_text("{")
    with pytest.raises(ValueError, match="tracker.json' is not a tracker file written by train.py"):
        run(graph_file, tmp_path, "--encoder", "gcn", "--timesteps", "48", "--resume")
    (tmp_path / "tracker.json").unlink()
    (tmp_path / "checkpoint.zip").write_text("not a zip")
    with pytest.raises(ValueError, match="checkpoint.zip' is not a checkpoint of this project"):
        run(graph_file, tmp_path, "--encoder", "gcn", "--timesteps", "48", "--resume")


@pytest.mark.slow
@pytest.mark.parametrize("algo, extra", [("ppo", ["--timesteps", "16"]), ("reinforce", ["--episodes", "2"])])
def test_search_time_leaves_out_building_the_agent(graph_file, tmp_path, monkeypatch, algo, extra):
    """A slow agent build (1.5 s here, of a clock that moves 1 ms a read: the same on any machine) counts neither in
    the search time nor against the budget."""
    from agents.training import run as training_run

    clock = TickingClock(1e-3).install(monkeypatch)

    def slow(real):
        def build(*args, **kwargs):
            clock.now += 1.5
            return real(*args, **kwargs)
        return build

    monkeypatch.setattr(training_run, "make_model", slow(training_run.make_model))
    results = run(graph_file, tmp_path, "--algo", algo, "--encoder", "gcn", "--budget-seconds", "1", *extra)
    assert 0 < results["search_seconds"] < 1.5 and results["best_found_seconds"] < 1.5
    assert results["steps"] >= 2  # the budget did not run out while building (PPO would stop after one step)


def test_resume_without_a_checkpoint_says_it_starts_a_new_policy(graph_file, tmp_path, capsys):
    results = run(graph_file, tmp_path / "fresh", "--encoder", "gcn", "--timesteps", "16", "--resume")
    assert f"--resume: no checkpoint {str(tmp_path / 'fresh' / 'checkpoint.zip')!r} yet" in capsys.readouterr().err
    assert results["steps"] >= 16
    run(graph_file, tmp_path / "fresh", "--encoder", "gcn", "--timesteps", "32", "--resume")
    assert "no checkpoint" not in capsys.readouterr().err


def test_resuming_reinforce_with_another_encoder_is_refused(graph_file, tmp_path):
    run(graph_file, tmp_path, "--algo", "reinforce", "--encoder", "gcn", "--episodes", "2")
    with pytest.raises(ValueError, match="has encoder options {'hidden_dim': 16}, the command line asks for "
                                         "{'hidden_dim': 8}"):
        train.main(["--graph", str(graph_file), "--out", str(tmp_path), "--progress", "off", "--algo", "reinforce",
                    "--encoder", "gcn", "--hidden-dim", "8", "--episodes", "2", "--resume"])


@pytest.mark.parametrize("args, message", [
    (["--encoder", "bert"], "unknown encoder 'bert'"),
    (["--graph", "no/such/file.json"], "no/such/file.json"),
    (["--devices", "0"], "--devices must be >= 1"),
    (["--algo", "sac"], "unknown algorithm 'sac'"),
    (["--timesteps", "ten"], "invalid int value"),
    (["--encoder-option", "use_low"], "must be KEY=VALUE"),
    (["--encoder", "gcn", "--encoder-option", "use_low=false"], "encoder 'gcn' has no option 'use_low'"),
    (["--encoder-option", "use_low=3"], "encoder 'fadp-gt': option 'use_low' must be true or false, got 3"),
    (["--initial-placement", "best"], "unknown --initial-placement 'best'; use one of single, random"),
    (["--expected-moves", "-1"], "--expected-moves must be >= 0"),
    (["--epsilon", "1.5"], "--epsilon must be in [0, 1]"),
    (["--budget-seconds", "nan"], "--budget-seconds must be positive and finite, got nan"),
    (["--learning-rate", "-1"], "--learning-rate must be positive and finite, got -1.0"),
    (["--seed", "-5"], "--seed must be >= 0, got -5"),
    (["--out", "README.md"], "--out 'README.md' is a file, not a folder"),
    (["--cluster", "tests"], "'tests' is a directory, not a JSON file"),
])
def test_bad_arguments_end_with_one_line_and_exit_2(tmp_path, monkeypatch, capsys, args, message):
    monkeypatch.chdir(ROOT)
    assert train.run(["--out", str(tmp_path), *args]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and message in err and "\n" not in err
    assert not (tmp_path / "results.json").exists()


def test_bad_encoder_options_are_reported_before_torch_loads(tmp_path):
    code = ("import sys, train; status = train.run(['--out', sys.argv[1], '--encoder-option', 'heads=0']); "
            "print(status, 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], cwd=ROOT, capture_output=True, text=True,
                         timeout=300)
    assert out.stdout.split() == ["2", "False"] and "option 'heads'" in out.stderr


@pytest.mark.slow
def test_the_script_itself_keeps_the_error_contract(tmp_path):
    out = subprocess.run([sys.executable, "train.py", "--out", str(tmp_path), "--devices", "0"], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 2 and out.stderr.strip() == "error: --devices must be >= 1, got 0"


@pytest.mark.slow
def test_a_suite_gets_one_best_placement_per_graph(tmp_path):
    results = run("synthetic", tmp_path, "--encoder", "gcn", "--timesteps", "48", "--episode-length", "2")
    names = [g["graph"] for g in results["graphs"]]
    assert len(names) == len(set(names)) >= 2 and all(n.startswith("synthetic/") for n in names)
    from placement_env import load_graph

    for entry in results["graphs"]:
        graph = load_graph(entry["graph"])
        placement = read_placement(tmp_path / "placements" / f"{entry['graph'].replace('/', '_')}.json", graph)
        assert simulate(graph, placement, Cluster.preset("p100", 3)).makespan == entry["makespan"]


@pytest.mark.slow
def test_parallel_environments(graph_file, tmp_path):
    results = run(graph_file, tmp_path, "--encoder", "gcn", "--timesteps", "32", "--n-envs", "2")
    check_outputs(graph_file, tmp_path, results)
    assert results["steps"] >= 32


@pytest.mark.slow
def test_ctrl_c_stops_cleanly_and_keeps_the_best_placement(graph_file, tmp_path):
    import signal
    import time

    proc = subprocess.Popen([sys.executable, "train.py", "--graph", str(graph_file), "--encoder", "gcn",
                             "--budget-seconds", "300", "--out", str(tmp_path), "--progress", "off",
                             "--checkpoint-every", "16"], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # as a terminal
    deadline = time.time() + 120
    while not (tmp_path / "tracker.json").exists() and time.time() < deadline:  # training has started
        time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "interrupted" in err and "best found" in out
    results = json.loads((tmp_path / "results.json").read_text())
    check_outputs(graph_file, tmp_path, results)
    assert results["search_seconds"] < 300 and results["interrupted"]


def test_encoder_options_initial_placement_and_search_times(graph_file, tmp_path):
    results = run(graph_file, tmp_path, "--timesteps", "16", "--encoder-option", "use_low=false",
                  "--encoder-option", "num_layers=1", "--initial-placement", "heft", "--expected-moves", "0")
    check_outputs(graph_file, tmp_path, results)
    assert results["hyperparameters"]["encoder_options"] == {"use_low": False, "num_layers": 1}
    # the best placement is at least as good as the episodes' starting placement (HEFT's)
    assert results["makespan"] <= results["baselines"]["heft"]
    assert 0 <= results["best_found_seconds"] <= results["search_seconds"]
    assert 0 < results["validation_seconds"] < results["search_seconds"]


def test_training_stops_before_an_update_that_would_overrun_the_budget(tmp_path):
    """The callback compares the budget left with the last update's duration at a rollout's last step."""
    from types import SimpleNamespace

    from agents.training import TrainConfig
    from agents.training.run import TrackBest
    from agents.training.tracker import BestTracker

    class Clock:
        left = 100.0

        def expired(self):
            return self.left <= 0

        def remaining(self):
            return self.left

    info = {"graph": "g", "best_makespan": 1.0, "best_oom": False, "best_placement": [0]}
    clock = Clock()
    track = TrackBest(TrainConfig(out=str(tmp_path)), tmp_path, BestTracker(), clock, SimpleNamespace(requested=False))
    track.model = SimpleNamespace(n_steps=4, n_epochs=4, num_timesteps=1)  # type: ignore[assignment]  # 1: no checkpoint
    track.locals = {"infos": [info]}
    track.update_seconds = 10.0  # the last update took 10 s

    def rollout():
        track.on_rollout_start()
        return [track.on_step() for _ in range(4)]

    assert rollout() == [True] * 4 and not track.skipped_update  # 100 s left: the update goes ahead
    track.update_seconds = 10.0
    clock.left = 9.0
    assert rollout() == [True, True, True, False] and track.skipped_update  # 9 s left: stop before the update


def test_a_graph_that_does_not_fit_one_device_trains_from_a_placement_that_fits(tmp_path):
    from baselines import unit_demand

    g = layered_dag(4, num_ops=60, name="big")
    write_graph(g, tmp_path / "big.json")
    small = Cluster.preset("p100", 3).with_memory(unit_demand(g).sum() * 0.45)
    small.to_json(tmp_path / "small.json")
    assert simulate(g, [0] * g.num_nodes, small).oom
    out = tmp_path / "run"
    assert train.main(["--graph", str(tmp_path / "big.json"), "--cluster", str(tmp_path / "small.json"), "--out",
                       str(out), "--progress", "off", "--hidden-dim", "16", "--encoder", "gcn", "--timesteps",
                       "16"]) == 0
    results = json.loads((out / "results.json").read_text())
    assert results["oom"] is False and all(g_["oom"] is False for g_ in results["graphs"])
    assert not simulate(g, read_placement(out / "placement.json", g), small).oom


def test_a_second_run_on_the_same_out_is_refused_and_a_lock_nobody_holds_is_taken(graph_file, tmp_path):
    """A live holder (a process holding the lock) keeps --out; once it has ended, its lock file is held by nobody."""
    holder = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(ValueError, match=rf"is in use by another run \(PID {holder.pid}\)"):
            run(graph_file, tmp_path, "--encoder", "gcn", "--timesteps", "16")
        assert not (tmp_path / "results.json").exists()
    finally:
        holder.kill()
        holder.wait()
    assert (tmp_path / ".lock").read_text().strip() == str(holder.pid)  # left behind by a killed holder
    results = run(graph_file, tmp_path, "--encoder", "gcn", "--timesteps", "16")
    assert results["steps"] >= 16


HOLD_LOCK = """import sys, time
from agents.training.lock import OutputLock
with OutputLock(sys.argv[1]):
    print("held", flush=True)
    time.sleep(600)
"""


def test_an_overrun_of_the_budget_says_why(tmp_path):
    from types import SimpleNamespace

    from agents.training import TrainConfig
    from agents.training.run import TrackBest
    from agents.training.tracker import BestTracker

    clock = SimpleNamespace(budget_seconds=10.0, remaining=lambda: -3.0)
    track = TrackBest(TrainConfig(out=str(tmp_path)), tmp_path, BestTracker(), clock, SimpleNamespace())
    assert "3.0 s past its 10-s budget: one environment step or update outlasted it" in str(track.overrun_note())
    track.last_go, track.update_seconds = (4.0, 2.5), 7.0
    assert "an update expected to take 2.5 s started with 4.0 s left" in str(track.overrun_note())
    clock.remaining = lambda: -0.5  # 5% over: within the 10% the budget allows
    assert track.overrun_note() is None


@pytest.mark.slow
@pytest.mark.parametrize("after", [0.4, 1.5])
def test_ctrl_c_while_starting_is_one_line_and_status_130(graph_file, tmp_path, after):
    """SIGINT while the arguments are checked (0.4 s) and while torch loads (1.5 s); during training, see
    test_ctrl_c_stops_cleanly_and_keeps_the_best_placement."""
    import signal
    import time

    # A shell runs a background job (`.ci/run &`) with SIGINT ignored, and Python leaves an ignored SIGINT ignored,
    # so without restoring the default the child would never see this Ctrl-C (as a user's background job would not).
    proc = subprocess.Popen([sys.executable, "train.py", "--graph", str(graph_file), "--encoder", "gcn",
                             "--out", str(tmp_path), "--progress", "off"], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    time.sleep(after)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 130, err
    assert "Traceback" not in err and len(err.strip().splitlines()) <= 2, err  # "interrupted" (+ a stop notice)


def test_progress_lines_keep_coming_and_say_the_best_so_far(capsys):
    import time

    from agents.training.progress import ProgressReport

    best: list[float] = []
    report = ProgressReport("lines", 60.0, 1000, lambda: 12.0, lambda: 345,
                            lambda: best[-1] if best else None, every=0.05)
    shown = ""

    def wait_for_lines(count: int) -> None:  # however slow the machine: an event, not a fixed sleep
        nonlocal shown
        deadline = time.monotonic() + 60
        while shown.count("\n") < count and time.monotonic() < deadline:
            time.sleep(0.01)
            shown += capsys.readouterr().err

    with report:
        wait_for_lines(2)  # no step comes (as during a long update): lines still do
        best.append(0.021315)
        wait_for_lines(shown.count("\n") + 1)
    lines = (shown + capsys.readouterr().err).strip().splitlines()
    assert len(lines) >= 3 and lines[0] == ("training: 12 s of 60 s, 345 environment steps (stops at --timesteps "
                                            "1,000), best none yet")
    assert lines[-1] == "training: 12 s of 60 s, 345 environment steps (stops at --timesteps 1,000), best 21.315 ms"
    with pytest.raises(ValueError, match="progress must be one of bar, lines, off"):
        ProgressReport("on", 1.0, 1, lambda: 0.0, lambda: 0, lambda: None)


def test_a_big_graph_is_coarsened_with_a_notice_and_a_memory_estimate(tmp_path, capsys):
    from agents.training import TrainConfig
    from agents.training.config import estimated_peak_bytes

    path = tmp_path / "big.json.gz"
    write_graph(layered_dag(1, num_ops=5_000, name="big"), path)
    graphs, _ = TrainConfig(graph=str(path), max_units=300, out=str(tmp_path / "out")).problem(notify=True)
    err = capsys.readouterr().err
    assert graphs[0].num_units <= 300 and "training places it coarsened to" in err
    gib = estimated_peak_bytes(5_000, graphs[0].num_units) / 2**30
    assert f"expect a peak memory of about {gib:.1f} GiB" in err
    assert estimated_peak_bytes(0, 1000) == 0.5 * 2**30 + 130e6  # hand-computed: the base and the units' term


def test_the_closing_table_puts_the_searches_at_equal_time_and_the_strongest_placer_beside_the_run(
        graph_file, tmp_path, capsys):
    results = run(graph_file, tmp_path / "a", "--timesteps", "16")
    out = capsys.readouterr().out
    seconds = results["search_baseline_seconds"]
    assert f"anneal ({seconds:.1f} s)" in out and f"local-search ({seconds:.1f} s)" in out
    timed = {k: v for k, v in results["baselines"].items() if isinstance(v, float)}
    strongest = min(timed, key=timed.__getitem__)
    assert f"the strongest classical placer, {strongest} ({timed[strongest] * 1e3:.3f} ms)" in out
    results = run(graph_file, tmp_path / "b", "--timesteps", "16", "--no-compare-searches")
    assert set(results["baselines"]) == {"single", "heft", "m-etf", "metis"}


def test_a_second_run_into_one_folder_says_it_replaces_the_first(graph_file, tmp_path, capsys):
    run(graph_file, tmp_path, "--timesteps", "16", "--no-compare-searches")
    assert "holds an earlier run" not in capsys.readouterr().err
    run(graph_file, tmp_path, "--timesteps", "16", "--no-compare-searches")
    assert f"notice: {tmp_path}/ holds an earlier run; this run replaces its outputs" in capsys.readouterr().err


def test_the_guided_search_s_progress_counts_proposals():
    from agents.training.progress import ProgressReport

    report = ProgressReport("off", 60.0, 100_000, lambda: 1.0, lambda: 2560, lambda: None, step_name="proposals")
    assert report.text() == "2,560 proposals (stops at --timesteps 100,000), best none yet"
