"""agents.jobs: jobs give the same outcomes in this process, in worker processes and on Ray; a killed worker's
job runs again or is reported failed while the others finish; the experiments, the benchmark and pretraining
give the same results however they fan out; Ctrl-C stops the workers and leaves the cache consistent."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from fanout_jobs import die_always, die_once, refuse, square  # tests/ is on the path

from agents import experiments as cli
from agents.jobs import IN_PROCESS, Failure, FanOut, Job, run_jobs
from agents.learned.policy_file import load_policy
from agents.learned.pretrain_config import PretrainConfig
from agents.learned.pretraining import pretrain
from agents.paper import runs as ex
from agents.paper.benchmark import run_benchmark
from agents.paper.benchmark_cells import Cell

ROOT = Path(__file__).resolve().parents[1]
TIMING = ("out", "stopped_before_an_update", "budget_overrun")


@pytest.fixture(scope="module")
def ray_local():
    """One local Ray instance with two CPUs for the module's tests (its workers import tests/ modules)."""
    ray = pytest.importorskip("ray")
    os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT / "tests"), str(ROOT), os.environ.get("PYTHONPATH", "")])
    ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR")
    yield FanOut(ray="local")
    ray.shutdown()


def without_timing(value):
    """A record without its wall-clock fields (and the output folder, which differs between the compared runs)."""
    if isinstance(value, dict):
        return {k: without_timing(v) for k, v in value.items() if not (k.endswith("seconds") or k in TIMING)}
    if isinstance(value, list):
        return [without_timing(v) for v in value]
    return value


def test_jobs_give_the_same_outcomes_everywhere_and_a_killed_worker_s_job_runs_again(tmp_path, ray_local):
    expected = {f"square {i}": i * i for i in range(5)} | {"dies once": 49}
    for i, fanout in enumerate((IN_PROCESS, FanOut(workers=2), ray_local)):
        jobs = [Job(f"square {i}", f"square {i}", square, (i,)) for i in range(5)]
        jobs.append(Job("refuses", "refuses", refuse, (3,)))
        if fanout is not IN_PROCESS:  # a worker that dies: the job runs again in another
            jobs.append(Job("dies once", "dies once", die_once, (7, str(tmp_path / f"marker{i}"))))
        written: dict[str, int] = {}
        outcomes = run_jobs(jobs, fanout, on_done=lambda job, value: written.setdefault(job.key, value))  # noqa: B023
        assert outcomes.pop("refuses") == Failure("ValueError: job 3 refuses"), fanout
        assert outcomes == written == {k: v for k, v in expected.items() if k in outcomes}, fanout
        assert len(outcomes) == 5 + (fanout is not IN_PROCESS)


def test_a_job_whose_worker_always_dies_is_reported_failed_and_the_others_finish():
    jobs = [Job("dies", "dies", die_always, (1,))] + [Job(f"s{i}", f"s{i}", square, (i,)) for i in range(4)]
    outcomes = run_jobs(jobs, FanOut(workers=2, max_retries=1))
    assert outcomes["dies"] == Failure("its worker process died (exit code -9)")
    assert {k: v for k, v in outcomes.items() if k != "dies"} == {f"s{i}": i * i for i in range(4)}


@pytest.mark.parametrize("args, message", [
    (["--workers", "0"], "--workers must be a whole number >= 1, got 0"),
    (["--cpus-per-run", "nan"], "--cpus-per-run must be positive and finite, got nan"),
    (["--ray", "10.0.0.1:6379", "--workers", "2"], "--workers with --ray ADDRESS"),
])
def test_bad_fanout_settings_are_refused_before_any_run(tmp_path, capsys, args, message):
    with pytest.raises(SystemExit) as info:
        cli.main(["table5", "--quick", "--out", str(tmp_path / "out"), *args])
    assert info.value.code == 2 and message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


@pytest.mark.slow  # the default suite holds the jobs' outcomes everywhere (above) and the experiments' workers below
def test_experiment_runs_give_the_same_results_in_process_in_workers_and_on_ray(tmp_path, ray_local):
    """Step-limited PPO runs (--timesteps): the same curve, placement and numbers wherever they train (the guided
    search's annealing is timed, so its runs differ from one run to the next anyway)."""
    runs = [ex.Run(encoder, "synthetic/3", 3, 0) for encoder in ("fadp-gt", "gcn")]
    records = []
    for i, fanout in enumerate((IN_PROCESS, FanOut(workers=2), ray_local)):
        # a budget no machine reaches: the runs end at --timesteps, however busy the machine
        settings = ex.ExperimentConfig(seeds=1, budget_seconds=3600, algo="ppo", hidden_dim=16, timesteps=48,
                               out=tmp_path / str(i))
        assert ex.fan_out(runs, settings, fanout) == {}
        records.append([(without_timing(json.loads((ex.run_folder(r, settings) / ex.CACHE_ENTRY).read_text())),
                         (ex.run_folder(r, settings) / "placement.json").read_text()) for r in runs])
    assert records[0] == records[1] == records[2]
    assert len(records[0][0][0]["curve"]) > 1  # the policy moved: a comparison of something


@pytest.mark.slow  # the experiments' fan-out is held the same way (above), in the slow suite too
def test_benchmark_and_pretraining_give_the_same_results_however_they_fan_out(tmp_path, ray_local):
    cells = [Cell("synthetic/1", 2), Cell("synthetic/2", 3)]
    tables = []
    for i, fanout in enumerate((IN_PROCESS, FanOut(workers=2), ray_local)):
        _, table_csv, failed = run_benchmark(cells, 1.0, tmp_path / f"bench{i}", None, ["heft", "m-etf", "metis"],
                                             fanout)
        assert failed == {}
        tables.append([line.rsplit(",", 1)[0] for line in table_csv.splitlines()])  # the last column: seconds
    assert tables[0] == tables[1] == tables[2] and len(tables[0]) == 1 + 6

    config = PretrainConfig(suites=("ptb", "cifar10"), seeds=2, devices=(3,), expert_steps=20, epochs=1, rounds=0)
    results = []
    for i, fanout in enumerate((IN_PROCESS, FanOut(workers=2), ray_local)):
        path = pretrain(config, tmp_path / f"pretrain{i}", log=lambda line: None, fanout=fanout)
        targets = [t.read_text() for t in sorted((tmp_path / f"pretrain{i}" / "targets").iterdir())]
        results.append((load_policy(path).state_dict(), targets))
    for state, targets in results[1:]:
        assert targets == results[0][1] and len(targets) == 4
        assert state.keys() == results[0][0].keys() and all(torch.equal(state[k], results[0][0][k]) for k in state)


def worker_pids(driver: int) -> list[int]:
    """The worker processes (multiprocessing's spawned children) of ``driver``."""
    children = Path(f"/proc/{driver}/task/{driver}/children").read_text().split()
    return [int(c) for c in children if b"spawn_main" in Path(f"/proc/{c}/cmdline").read_bytes()]


def start_experiment(out: Path, *where: str) -> subprocess.Popen:
    # SIGINT as a terminal gives it (a background shell job would start the child with SIGINT ignored)
    return subprocess.Popen([sys.executable, "-m", "agents.experiments", "table6", "--quick", "--models", "vgg19",
                             "resnet50", "--out", str(out), *(where or ("--workers", "2"))], cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def wait_for_busy_workers(proc: subprocess.Popen, out: Path, seconds: float = 60.0) -> list[int]:
    """The workers' PIDs once both are training (each has taken a run folder)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        pids = worker_pids(proc.pid)
        if len(pids) == 2 and (out / "runs").exists() and len(list((out / "runs").glob("*/.lock"))) == 2:
            return pids
        time.sleep(0.1)
    raise AssertionError("the workers did not start")


def assert_cache_consistent(out: Path) -> int:
    """Every cache entry (run.json) is a whole record; how many there are."""
    files = list((out / "runs").glob("*/run.json"))
    for file in files:
        assert "makespan" in json.loads(file.read_text())
    assert not list((out / "runs").glob("*/.run*dp-tmp*"))
    return len(files)


@pytest.mark.slow  # the default suite runs a killed worker's job again (above) and stops experiments' workers below
def test_a_killed_worker_leaves_no_half_run_and_the_experiment_goes_on(tmp_path):
    out = tmp_path / "out"
    proc = start_experiment(out)
    os.kill(wait_for_busy_workers(proc, out)[0], signal.SIGKILL)  # in the middle of its run
    output, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, output
    assert "its worker process died (exit code -9); running it again" in output
    assert assert_cache_consistent(out) == 4
    assert "failed" not in (out / "table6.md").read_text()


@pytest.mark.parametrize("where", [["--workers", "2"],  # Ray's in the slow suite: the default one runs the workers'
                                   pytest.param(["--ray", "--workers", "2"], marks=pytest.mark.slow)],
                         ids=["workers", "ray"])
def test_ctrl_c_stops_the_workers_and_a_rerun_resumes(tmp_path, where):
    if "--ray" in where:
        pytest.importorskip("ray")
    out = tmp_path / "out"
    proc = start_experiment(out, *where)
    if "--ray" in where:  # Ray's workers are the raylet's children: wait for a first result instead
        deadline = time.monotonic() + 120
        while not list((out / "runs").glob("*/run.json")) and time.monotonic() < deadline:
            time.sleep(0.1)
        workers = []
    else:
        workers = wait_for_busy_workers(proc, out)
    proc.send_signal(signal.SIGINT)
    output, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130 and output.rstrip().endswith("interrupted"), output
    time.sleep(0.5)
    assert not [pid for pid in workers if Path(f"/proc/{pid}").exists()
                and "Z" not in Path(f"/proc/{pid}/stat").read_text().split()[2]]  # stopped, not left running
    done = assert_cache_consistent(out)
    assert done < 4  # interrupted before the end
    rerun = subprocess.run([sys.executable, "-m", "agents.experiments", "table6", "--quick", "--models", "vgg19",
                            "resnet50", "--out", str(out), "--workers", "2"], cwd=ROOT, text=True,
                           capture_output=True, timeout=300)
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    assert (f"{done} run(s) already in" in rerun.stdout) if done else "already in" not in rerun.stdout
    assert assert_cache_consistent(out) == 4


def alive(pids: list[int]) -> list[int]:
    """Those of ``pids`` still running (zombies, ended but not yet reaped, do not count)."""
    return [pid for pid in pids if Path(f"/proc/{pid}").exists()
            and "Z" not in Path(f"/proc/{pid}/stat").read_text().split()[2]]


def snapshot(out: Path) -> dict[str, int]:
    return {str(p): p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()}


@pytest.mark.parametrize("how", [signal.SIGTERM, pytest.param(signal.SIGKILL, marks=pytest.mark.slow)],
                         ids=["sigterm", "sigkill"])  # SIGKILL in the slow suite: the default one runs SIGTERM
def test_workers_die_with_their_driver_and_write_nothing_after(tmp_path, how):
    """A driver stopped by SIGTERM (as timeout, Slurm and Kubernetes stop jobs) or SIGKILL: its workers are gone
    within seconds, write nothing after, leave no half cache entry, and a rerun resumes at once."""
    out = tmp_path / "out"
    proc = start_experiment(out)
    workers = wait_for_busy_workers(proc, out)
    proc.send_signal(how)
    output, _ = proc.communicate(timeout=60)
    if how == signal.SIGTERM:
        assert proc.returncode == 143 and output.rstrip().endswith("terminated"), output
    else:
        assert proc.returncode == -signal.SIGKILL
    deadline = time.monotonic() + 5.0
    while alive(workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(workers)
    before = snapshot(out)
    time.sleep(2.0)
    assert snapshot(out) == before  # nothing written after
    done = assert_cache_consistent(out)
    rerun = subprocess.run([sys.executable, "-m", "agents.experiments", "table6", "--quick", "--models", "vgg19",
                            "resnet50", "--out", str(out), "--workers", "2"], cwd=ROOT, text=True,
                           capture_output=True, timeout=300)
    assert rerun.returncode == 0 and "in use by another run" not in rerun.stdout + rerun.stderr, rerun.stderr
    assert assert_cache_consistent(out) == 4 and done <= 4
    assert "failed" not in (out / "table6.md").read_text()


def test_ray_missing_is_one_clear_error(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # as on a machine without the [ray] extra
    with pytest.raises(SystemExit) as info:
        cli.main(["table5", "--quick", "--out", str(tmp_path / "out"), "--ray"])
    assert info.value.code == 2
    assert "--ray needs Ray: pip install 'device-placement[ray]'" in capsys.readouterr().err
