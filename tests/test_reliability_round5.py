"""The fifth reliability round (issue 63 point 5): each item a test that fails without its fix."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

# ------------------------------------------------------------------------------ --out to devices and pipes

@pytest.mark.skipif(os.geteuid() != 0, reason="making a character device (mknod) needs root")
def test_an_out_that_is_a_device_is_written_through_never_replaced(tmp_path):
    from placement_env.json_files import write_json_file, write_text_atomically

    null = tmp_path / "null"
    os.mknod(null, stat.S_IFCHR | 0o666, os.makedev(1, 3))  # a private /dev/null
    link = tmp_path / "to-null.json"
    link.symlink_to(null)
    for target in (null, link):
        write_text_atomically(target, "{}")
        write_json_file({"a": 1}, target)
    assert stat.S_ISCHR(os.stat(null).st_mode) and link.is_symlink()
    assert not [p for p in tmp_path.iterdir() if p.name not in ("null", "to-null.json")]  # no temporary left


def test_an_out_that_is_a_pipe_gets_the_bytes(tmp_path):
    from placement_env.json_files import write_text_atomically

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    got: list[str] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_text()))
    reader.start()
    write_text_atomically(fifo, "through the pipe")
    reader.join(timeout=30)
    assert got == ["through the pipe"] and stat.S_ISFIFO(os.stat(fifo).st_mode)


def test_out_dev_stdout_into_a_pipe():
    run = subprocess.run([sys.executable, "-m", "placement_env", "plan", "--shape",
                          '{"layers": 4, "hidden": 256, "heads": 4}', "--devices", "8", "--device-kind",
                          "a100-nvlink", "--batch", "16", "--export", "device-mesh", "--out", "/dev/stdout"],
                         capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stderr
    assert '"mesh_dim_names"' in run.stdout


# ------------------------------------------------------------------------------ agents.place's comparison

@pytest.mark.parametrize("signum, status", [(2, 130), (15, 143)])
def test_a_stop_during_the_comparison_keeps_the_search_s_placement(tmp_path, signum, status):
    import signal

    from placement_env import Cluster, load_graph, simulate
    from placement_env.graph.placement_io import read_placement

    out = tmp_path / "placement.json"
    process = subprocess.Popen([sys.executable, "-m", "agents.place", "--graph", "cifar10/0", "--devices", "3",
                                "--budget-seconds", "1", "--out", str(out)], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert process.stdout is not None
    line = process.stdout.readline()
    while line and not line.startswith("comparing with annealing"):  # an event: the comparison has begun
        line = process.stdout.readline()
    assert line.startswith("comparing with annealing"), process.stderr.read() if process.stderr else ""
    process.send_signal(signal.Signals(signum))
    stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == status, stderr
    assert "the comparison with annealing was stopped; the search's best placement is in" in stderr
    assert len(stderr.strip().splitlines()) == 1
    graph = load_graph("cifar10/0")
    assert simulate(graph, read_placement(out, graph), Cluster.preset("p100", 3)).makespan > 0


# ------------------------------------------------------------------------------ local workers: silence, not length

def _beating_job(rank: int, world: int, payload: tuple[int, float]) -> int:
    import time

    from placement_env.runtime.local_workers import heartbeat

    beats, pause = payload
    for k in range(beats):
        heartbeat(f"beat {k}")
        time.sleep(pause)
    return rank


def _stalling_job(rank: int, world: int, payload: None) -> int:
    import time

    from placement_env.runtime.local_workers import heartbeat

    heartbeat("before the stall")
    if rank == 1:
        time.sleep(3600)  # a loss_fn that never returns
    return rank


def test_a_run_longer_than_the_bound_lives_while_its_workers_speak(monkeypatch):
    from placement_env.runtime.local_workers import run_on_local_workers

    monkeypatch.setenv("PLACEMENT_WORKER_SILENCE_S", "8")
    assert run_on_local_workers(2, _beating_job, (24, 0.5)) == [0, 1]  # 12 s of work, a beat each half second


def test_a_silent_worker_is_named_with_what_it_last_said(monkeypatch):
    from placement_env.runtime.local_workers import run_on_local_workers

    monkeypatch.setenv("PLACEMENT_WORKER_SILENCE_S", "3")
    with pytest.raises(RuntimeError, match="local worker 1 stalled: silent for [0-9]+ s since it said 'before the "
                                           "stall'"):
        run_on_local_workers(2, _stalling_job, None)
    monkeypatch.setenv("PLACEMENT_WORKER_SILENCE_S", "soon")
    with pytest.raises(ValueError, match="PLACEMENT_WORKER_SILENCE_S must be a number of seconds > 0, got 'soon'"):
        run_on_local_workers(2, _stalling_job, None)


def test_a_script_without_a_main_guard_is_told_what_to_add(tmp_path):
    script = tmp_path / "unguarded.py"
    script.write_text("from placement_env.runtime.local_workers import run_on_local_workers\n"
                      "print(run_on_local_workers(2, max, None))\n")
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, check=False, timeout=120)
    assert run.returncode != 0
    assert "Put the call under 'if __name__ == \"__main__\":'" in run.stderr
    assert "local worker 0 died" not in run.stderr and run.stderr.count("Traceback") == 1
    (tmp_path / "jobs.py").write_text("def job(rank, world, payload):\n    return rank\n")
    guarded = tmp_path / "guarded.py"
    guarded.write_text("from jobs import job\n"
                       "from placement_env.runtime.local_workers import run_on_local_workers\n"
                       "if __name__ == '__main__':\n    print(run_on_local_workers(2, job, None))\n")
    done = subprocess.run([sys.executable, str(guarded)], capture_output=True, text=True, check=False, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "[0, 1]", done.stderr



def test_a_guarded_script_edited_while_it_runs_is_not_refused(tmp_path):
    # the file on disk no longer matches the running code (its lines moved): the guard check claims nothing
    script = tmp_path / "edited.py"
    script.write_text("import pathlib\n"
                      "from placement_env.runtime.local_workers import check_main_guard\n"
                      "if __name__ == '__main__':\n"
                      "    pathlib.Path(__file__).write_text('x = 1\\n' * 12)\n"
                      "    check_main_guard()\n"
                      "    print('not refused')\n")
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, check=False, timeout=120)
    assert run.returncode == 0 and run.stdout.strip() == "not refused", run.stderr
    unguarded = tmp_path / "unguarded_comment.py"  # an unchanged unguarded script is still refused
    unguarded.write_text("# a comment\nfrom placement_env.runtime.local_workers import check_main_guard\n"
                         "check_main_guard()\n")
    run = subprocess.run([sys.executable, str(unguarded)], capture_output=True, text=True, check=False, timeout=120)
    assert run.returncode != 0 and "(line 3)" in run.stderr

# ------------------------------------------------------------------------------ calibration

def test_a_calibration_that_must_avoid_every_placement_is_refused_not_looped():
    from placement_env import layered_dag
    from placement_env.runtime.step_calibration import calibration_placement

    graph = layered_dag(0, training=False, num_ops=3)  # 3 units: 6 placements on two devices
    every = {tuple(graph.expand_unit_placement((code >> np.arange(graph.num_units)) & 1).tolist())
             for code in range(1, 2**graph.num_units - 1)}
    assert len(every) == 2**graph.num_units - 2
    with pytest.raises(ValueError, match="avoid holds every placement of graph"):
        calibration_placement(graph, every)
    last = sorted(every)[0]
    assert tuple(calibration_placement(graph, every - {last}).tolist()) == last


# ------------------------------------------------------------------------------ plan files and their runs

@pytest.fixture(scope="module")
def plan_data():
    from placement_env import Cluster, load_graph, plan_from_placement

    graph = load_graph("gpt2")
    plan = plan_from_placement(graph, np.zeros(graph.num_nodes, dtype=np.int64), Cluster.preset("a100-nvlink", 1))
    return plan.to_dict()


@pytest.mark.parametrize(("change", "named"), [
    (lambda d: d.update(virtual_stage=2), "unknown field 'virtual_stage'"),
    (lambda d: d["stages"][0].update(recomptue=True), "stage 0: unknown field 'recomptue'"),
    (lambda d: d.update(microbatches=1_000_000), "1000000 micro-batches = 1000000 do not divide the plan's batch"),
    (lambda d: d.update(param_factor=float("nan")), "param_factor must be a finite number >= 0"),
    (lambda d: d.update(param_factor=-100.0), "param_factor must be a finite number >= 0"),
])
def test_a_plan_file_with_a_wrong_field_is_refused_by_name(plan_data, change, named):
    import copy

    from placement_env import PipelinePlan

    data = copy.deepcopy(plan_data)
    change(data)
    with pytest.raises(ValueError, match=named):
        PipelinePlan.from_dict(data, source="p.json")


def test_a_plan_file_that_is_a_fifo_is_refused_not_waited_on(tmp_path):
    from placement_env import PipelinePlan

    fifo = tmp_path / "plan.json"
    os.mkfifo(fifo)
    with pytest.raises(ValueError, match="is not a regular file"):
        PipelinePlan.from_json(fifo)


def test_the_planner_refuses_a_bad_param_factor():
    from placement_env import Cluster, load_graph, search_plan

    for bad in (float("nan"), -100.0):
        with pytest.raises(ValueError, match="param_factor"):
            search_plan(load_graph("gpt2"), Cluster.preset("a100-nvlink", 2), param_factor=bad)


def test_local_workers_are_bounded_by_the_machine():
    from placement_env.runtime.local_workers import check_local_workers, max_local_workers

    most = max_local_workers()
    assert most >= 8
    with pytest.raises(ValueError, match=f"1000 local workers: this machine runs at most {most}"):
        check_local_workers(1000)


# ------------------------------------------------------------------------------ a read-only install

def test_a_read_only_install_and_home_cache_the_kernels_in_the_temporary_folder(tmp_path, monkeypatch):
    from placement_env.numba_cache import configure_numba_cache

    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    monkeypatch.setitem(sys.modules, "numba.core.config", None)  # as if numba were not loaded yet
    del sys.modules["numba.core.config"]
    read_only = {tmp_path / "site" / "__pycache__", tmp_path / "home" / ".cache" / "numba"}
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "home" / ".cache"))
    with pytest.warns(RuntimeWarning, match="numba's kernels are cached in"):
        chosen = configure_numba_cache(tmp_path / "site", writable=lambda folder: folder not in read_only)
    assert chosen is not None and os.environ["NUMBA_CACHE_DIR"] == chosen
    monkeypatch.delenv("NUMBA_CACHE_DIR")
    with pytest.warns(RuntimeWarning, match="no writable folder for numba's cache"):
        assert configure_numba_cache(tmp_path / "site", writable=lambda folder: False) is None
    assert configure_numba_cache(tmp_path / "site", writable=lambda folder: True) is None  # a writable install


def test_the_fallback_cache_serves_numba_in_a_fresh_process(tmp_path):
    """End to end: with the install's and the home's cache folders unwritable (as a read-only install under a
    read-only home), import placement_env and run a simulation."""
    path = Path(__file__).resolve().parents[1] / "placement_env" / "numba_cache.py"
    code = ("import importlib.util, os, sys, warnings\n"
            f"spec = importlib.util.spec_from_file_location('placement_env.numba_cache', {str(path)!r})\n"
            "c = importlib.util.module_from_spec(spec); spec.loader.exec_module(c)\n"
            "real = c._writable\n"
            "c.configure_numba_cache.__defaults__ = (c.PACKAGE, lambda f: False if ('__pycache__' in str(f) or "
            "'.cache' in str(f)) else real(f))\n"
            "sys.modules['placement_env.numba_cache'] = c  # what placement_env's first line imports\n"
            "warnings.simplefilter('ignore')\n"
            "import placement_env as pe\n"
            "g = pe.load_graph('default'); c3 = pe.Cluster.preset('p100', 3)\n"
            "print(os.environ.get('NUMBA_CACHE_DIR'), pe.simulate(g, [0] * g.num_nodes, c3).makespan > 0)\n")
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=False)
    assert run.returncode == 0, run.stderr
    folder, ok = run.stdout.split()
    assert "placement_env-numba" in folder and ok == "True"


# ------------------------------------------------------------------------------ the planner's reasons (issue 63, 4)

def test_the_planner_names_the_real_reason_and_tries_fewer_replicas():
    from placement_env import Cluster, load_graph, search_plan

    gpt2 = load_graph("gpt2")  # traced with a batch of 8
    wide = search_plan(gpt2, Cluster.preset("a100-nvlink", 64, per_node=8))  # 64 replicas cannot share 8 samples
    assert wide.plan.replicas * wide.plan.microbatches <= 8 and wide.plan.replicas > 1
    huge = search_plan(gpt2, Cluster.preset("a100-nvlink", 4096, per_node=8), batch=8, stages=1)
    assert huge.plan.replicas == 8
    with pytest.raises(ValueError, match="3 replicas do not divide the batch of 8"):
        search_plan(gpt2, Cluster.preset("a100-nvlink", 8), replicas=3)
    fixed = search_plan(gpt2, Cluster.preset("a100-nvlink", 8), microbatches=8)  # replicas open: 1 divides
    assert fixed.plan.microbatches == 8 and 8 % (fixed.plan.replicas * 8) == 0
    small = Cluster.preset("a100-nvlink", 2).with_memory(2**20)
    with pytest.raises(ValueError, match="fits the memory of 2 devices .* for the largest layer alone"):
        search_plan(gpt2, small)


# ------------------------------------------------------------------------------ calibrate_model

@pytest.fixture(scope="module")
def mlp_and_graph():
    torch = pytest.importorskip("torch")
    from placement_env import from_torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(8, 8) for _ in range(4)])
    x = torch.randn(8, 8)  # a batch of 8: the one-stage runs go up to 8 micro-batches
    return model, x, from_torch(model, (x,), colocate_modules=1)


def test_calibrate_model_checks_its_input_before_measuring(mlp_and_graph, monkeypatch):
    from placement_env import Cluster
    from placement_env.runtime import pipeline_calibration as calibration

    model, x, graph = mlp_and_graph
    monkeypatch.setattr(calibration, "run_pipeline", lambda *a, **k: pytest.fail("measured before checking"))
    cluster = Cluster.preset("p100", 2)
    halves = graph.expand_unit_placement((np.arange(graph.num_units) >= graph.num_units // 2).astype(np.int64))
    interleaved = graph.expand_unit_placement(np.arange(graph.num_units) % 2)
    for kwargs, named in (({"rounds": 0}, "rounds must be an integer >= 1, got 0"),
                          ({"steps": 1}, "steps must be an integer >= 2, got 1"),
                          ({"microbatches": (2, 2)}, r"a count or two distinct counts, got \(2, 2\)")):
        with pytest.raises(ValueError, match=named):
            calibration.calibrate_model(model, (x,), {}, graph, halves, cluster, **kwargs)
    with pytest.raises(ValueError, match="contiguous"):
        calibration.calibrate_model(model, (x,), {}, graph, interleaved, cluster)


def test_calibrate_model_reports_its_spread_and_refuses_disagreeing_measurements(mlp_and_graph, monkeypatch):
    """A run's measured step is its fastest round: a slow round beside two that agree is reported (``spread``) and
    accepted; two fastest rounds that disagree by more than 25% are refused."""
    from placement_env import Cluster
    from placement_env.runtime import pipeline_calibration as calibration

    model, x, graph = mlp_and_graph
    cluster = Cluster.preset("p100", 2)
    halves = graph.expand_unit_placement((np.arange(graph.num_units) >= graph.num_units // 2).astype(np.int64))
    runs = iter(range(1000))

    def fake_run(*args, slow: float, after: int, **kwargs):  # measurements as events: the runs from `after` on slow
        k = next(runs)
        seconds = 0.01 * (slow if k >= after else 1.0)
        return type("Run", (), {"steps": [seconds] * 5})()

    heard: list[str] = []
    monkeypatch.setattr(calibration, "eager_seconds", lambda *a, **k: 0.005)
    # the one-stage runs (m = 1, 2, 4, 8 a round), then the two-stage plan's: from the sixth run on twice as slow
    monkeypatch.setattr(calibration, "run_pipeline", lambda *a, **k: fake_run(slow=2.0, after=5))
    with pytest.raises(ValueError, match="the two fastest of the calibration's repeated measurements of a run "
                                         "disagree by 100%, more than the 25% it allows"):
        calibration.calibrate_model(model, (x,), {}, graph, halves, cluster, on_progress=heard.append)
    assert heard and heard[0].startswith("calibrate_model: round 1 of 3 took") and "in all on this machine" in heard[0]
    runs = iter(range(1000))  # from the eleventh: a one-stage run has one slow round at most (spread reported)
    monkeypatch.setattr(calibration, "run_pipeline", lambda *a, **k: fake_run(slow=2.0, after=10))
    overheads = calibration.calibrate_model(model, (x,), {}, graph, halves, cluster)
    assert overheads.spread == pytest.approx(1.0)
    runs = iter(range(1000))
    monkeypatch.setattr(calibration, "run_pipeline", lambda *a, **k: fake_run(slow=2.0, after=0))
    assert calibration.calibrate_model(model, (x,), {}, graph, halves, cluster, rounds=1).spread == 0.0
    # two counts: measured alike at m = 2 and 8, so what the pipeline adds is paid once a step, not per tensor
    runs = iter(range(1000))
    overheads = calibration.calibrate_model(model, (x,), {}, graph, halves, cluster, microbatches=(2, 8))
    assert overheads.tensor_seconds == pytest.approx(0.0, abs=1e-9) and overheads.step_seconds > 0


def _failing_job(rank: int, world: int, payload: None) -> int:
    raise RuntimeError("\n  the real reason, after torch's blank first line\nmore lines")


def test_a_worker_s_error_reaches_the_driver_by_its_first_real_line():
    from placement_env.checks import first_line
    from placement_env.runtime.local_workers import run_on_local_workers

    with pytest.raises(RuntimeError) as caught:
        run_on_local_workers(2, _failing_job, None)
    assert first_line(caught.value).startswith("local worker ") and first_line(caught.value).endswith(
        "failed: RuntimeError: the real reason, after torch's blank first line")


# ------------------------------------------------------------------------------ command lines and files

def test_a_huge_cluster_file_is_refused_by_its_count_before_it_is_parsed(tmp_path, monkeypatch):
    import placement_env.cluster as cluster_module
    from placement_env import Cluster

    path = tmp_path / "big.json"
    devices = ",".join('{"speed": 1, "memory_bytes": 1}' for _ in range(cluster_module.MAX_DEVICES + 1))
    path.write_text('{"devices": [' + devices + '], "bandwidth": 1, "latency": 0}')
    monkeypatch.setattr(cluster_module, "read_json_file", lambda p: pytest.fail("parsed before it was counted"))
    with pytest.raises(ValueError, match=f"about {cluster_module.MAX_DEVICES + 1} devices is more than the"):
        Cluster.from_json(path)


def test_an_option_value_beginning_with_a_dash_is_explained():
    run = subprocess.run([sys.executable, "-m", "placement_env", "plan", "--graph", "gpt2", "--split", "-1,18"],
                         capture_output=True, text=True, check=False)
    assert run.returncode == 2 and "--split: expected one argument" in run.stderr and "--option=-1,18" in run.stderr


def test_a_model_factory_that_raises_is_one_error_line(tmp_path, plan_data):
    (tmp_path / "broken_models.py").write_text("def factory():\n    raise RuntimeError('no weights here')\n")
    plan = tmp_path / "plan.json"
    plan.write_text(__import__("json").dumps(plan_data))
    run = subprocess.run([sys.executable, "-m", "placement_env", "run", "--plan", str(plan), "--model",
                          "broken_models:factory"], capture_output=True, text=True, check=False, cwd=tmp_path,
                         env={**os.environ, "PYTHONPATH": str(tmp_path)})
    assert run.returncode == 2 and run.stderr.startswith("error:") and len(run.stderr.strip().splitlines()) == 1
    assert "the factory raised RuntimeError: no weights here" in run.stderr


def test_the_runtimes_defaults_are_placers_of_place_too():
    from baselines import place
    from placement_env import Cluster, load_graph

    graph, cluster = load_graph("gpt2"), Cluster.preset("a100-nvlink", 2)
    for name in ("deepspeed-uniform", "deepspeed-parameters", "accelerate-balanced"):
        assert place(graph, cluster, name).max() == 1
    assert len(set(place(graph, cluster, "deepspeed-uniform", contiguous=True).tolist())) == 2


def test_the_plan_command_says_it_starts_and_names_chunks_as_chunks():
    run = subprocess.run([sys.executable, "-m", "placement_env", "plan", "--graph", "gpt2", "--devices", "4",
                          "--device-kind", "a100-nvlink", "--stages", "2", "--replicas", "2", "--microbatches", "4",
                          "--schedule", "interleaved-1f1b", "--virtual-stages", "2", "--batch", "64"],
                         capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("planning gpt2 on 4 devices (the first plan after an install also compiles")
    assert "layers per chunk (rank c mod S) [" in run.stdout


def test_a_long_plan_says_how_far_it_is_and_a_huge_one_is_refused_by_name(monkeypatch):
    import placement_env.plan.planner as planner
    from placement_env import Cluster, load_graph

    graph = load_graph("gpt2")
    heard: list[str] = []
    planner.search_plan(graph, Cluster.preset("a100-nvlink", 4), batch=64, on_progress=heard.append)
    assert heard[0].endswith("best exactly") and "configurations estimated" in heard[0]
    assert any(line.startswith("simulated ") for line in heard[1:])
    monkeypatch.setattr(planner, "MAX_PLAN_LAYERS", 5)
    with pytest.raises(ValueError, match="graph 'gpt2' has 17 layers; the planner plans at most 5"):
        planner.search_plan(graph, Cluster.preset("a100-nvlink", 4), batch=64)
