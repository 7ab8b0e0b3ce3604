"""Local worker processes: none outlives its driver, and a failure names the worker at fault."""

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


def test_a_killed_worker_is_the_one_the_error_names():
    with pytest.raises(RuntimeError, match=r"^local worker 2 died \(killed by signal 9\)$"):
        run_on_local_workers(3, worker_jobs.last_worker_dies, None)


def test_a_worker_s_error_is_quoted_with_its_rank():
    with pytest.raises(RuntimeError, match="local worker 1 failed: ValueError: worker 1 refuses"):
        run_on_local_workers(2, worker_jobs.refuse, None)
