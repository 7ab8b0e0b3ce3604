"""Local worker processes: none outlives its driver, and a failure names the worker at fault."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from placement_env.runtime.local_workers import run_on_local_workers
from tests import worker_jobs
from tests.helpers import running

ROOT = Path(__file__).resolve().parents[1]
DRIVER = """import sys
from placement_env.runtime.local_workers import run_on_local_workers
from tests.worker_jobs import wait_forever
run_on_local_workers(2, wait_forever, sys.argv[1])
"""


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGTERM])
def test_no_worker_outlives_its_killed_driver(tmp_path, how):
    driver = subprocess.Popen([sys.executable, "-c", DRIVER, str(tmp_path)], cwd=ROOT)
    try:
        pid_files = [tmp_path / "0.pid", tmp_path / "1.pid"]
        deadline = time.monotonic() + 120
        while not all(f.exists() and f.read_text() for f in pid_files):  # an event: both workers are waiting
            assert driver.poll() is None and time.monotonic() < deadline, "the workers never started"
            time.sleep(0.1)
        workers = [int(f.read_text()) for f in pid_files]
        assert all(map(running, workers))
        driver.send_signal(how)
        driver.wait(timeout=30)
        deadline = time.monotonic() + 5
        while any(map(running, workers)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(map(running, workers))
    finally:
        driver.kill()


STOPPED_DRIVER = """import sys
from placement_env.cli import run_cli
from placement_env.runtime.local_workers import run_on_local_workers
from tests.worker_jobs import StopsTheDriver, wait_forever

if __name__ == "__main__":
    sys.exit(run_cli(lambda: run_on_local_workers(4, wait_forever, StopsTheDriver(sys.argv[1], int(sys.argv[2])))))
"""


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
@pytest.mark.parametrize(("signum", "status", "said"), [(signal.SIGINT, 130, "interrupted"),
                                                        (signal.SIGTERM, 143, "terminated")])
def test_a_stop_while_the_workers_start_ends_in_one_line_and_no_worker_outlives_it(tmp_path, signum, status, said):
    """Issue 63: Ctrl-C or SIGTERM reaching the driver's process group while its workers start (sent by the first
    worker to start, as it reads its job, while the others still import) ends the command with one line on stderr
    and its status, no worker's start-up traceback; every worker that started is gone."""
    script = tmp_path / "driver.py"
    script.write_text(STOPPED_DRIVER)
    driver = subprocess.run([sys.executable, str(script), str(tmp_path), str(int(signum))], cwd=ROOT,
                            capture_output=True, text=True, timeout=300, start_new_session=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert (driver.returncode, driver.stderr) == (status, said + "\n")
    started = [int(f.name.split("-")[1]) for f in tmp_path.glob("started-*")]
    assert started
    deadline = time.monotonic() + 5
    while any(map(running, started)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(map(running, started))


ANOTHER_THREAD_DRIVER = """import sys, threading, time
from placement_env.cli import run_cli
from placement_env.runtime.local_workers import run_on_local_workers
from tests.worker_jobs import InterruptsAnotherThread, wait_forever

if __name__ == "__main__":
    other = threading.Thread(target=time.sleep, args=(600,), daemon=True)  # started before any stop is blocked
    other.start()
    sys.exit(run_cli(lambda: run_on_local_workers(3, wait_forever, InterruptsAnotherThread(sys.argv[1], other.ident))))
"""


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_a_ctrl_c_that_reaches_another_thread_of_the_driver_waits_until_every_worker_is_known(tmp_path):
    """The driver blocks Ctrl-C in its own thread while the workers start, but the kernel hands a signal to any
    thread that does not block it (numpy's), and Python then raises it in the main thread wherever it is: here
    while the first worker starts. It waits, as it does when it reaches the main thread: every worker is started,
    then all are ended, with one line and status 130."""
    script = tmp_path / "driver.py"
    script.write_text(ANOTHER_THREAD_DRIVER)
    driver = subprocess.Popen([sys.executable, str(script), str(tmp_path)], cwd=ROOT, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, start_new_session=True,
                              preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
                              env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        _, stderr = driver.communicate(timeout=300)
    finally:
        driver.kill()
    assert (driver.returncode, stderr) == (130, "interrupted\n")
    assert len(list(tmp_path.glob("pickled-*"))) == 3  # the stop waited until every worker was started
    deadline = time.monotonic() + 5  # every process it started (its workers, their server) is gone
    while _in_group(driver.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _in_group(driver.pid)


def _in_group(group: int) -> list[int]:
    """The PIDs of the living processes of process group ``group`` (read from /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if entry.name.isdigit() and int(fields[2]) == group and fields[0] != "Z":
            found.append(int(entry.name))
    return found


def test_a_killed_worker_is_the_one_the_error_names():
    with pytest.raises(RuntimeError, match=r"^local worker 2 died \(killed by signal 9\)$"):
        run_on_local_workers(3, worker_jobs.last_worker_dies, None)


def test_a_worker_s_error_is_quoted_with_its_rank():
    with pytest.raises(RuntimeError, match="local worker 1 failed: ValueError: worker 1 refuses"):
        run_on_local_workers(2, worker_jobs.refuse, None)


def test_workers_see_the_driver_s_environment_of_the_call_and_one_thread(monkeypatch):
    """The fork server starts with the first run; a variable set after it is still what the next run's workers
    read (they are forked from the server, which has its own, older environment)."""
    run_on_local_workers(2, worker_jobs.environment_and_threads, "PLACEMENT_TEST_X")
    monkeypatch.setenv("PLACEMENT_TEST_X", "set after the server started")
    monkeypatch.setenv("OMP_NUM_THREADS", "7")
    got = run_on_local_workers(2, worker_jobs.environment_and_threads, "PLACEMENT_TEST_X")
    assert got == [("set after the server started", "1", 1)] * 2
    assert os.environ["OMP_NUM_THREADS"] == "7"  # the driver's own is put back
