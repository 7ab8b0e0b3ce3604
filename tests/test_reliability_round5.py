"""The fifth reliability round (issue 63 point 5): each item a test that fails without its fix."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import threading

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

    monkeypatch.setenv("PLACEMENT_WORKER_SILENCE_S", "4")
    assert run_on_local_workers(2, _beating_job, (8, 1.0)) == [0, 1]  # 8 s of work, a beat a second


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
