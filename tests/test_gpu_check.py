"""The GPU check (issue 65 point 5; ``scripts/gpu_check.sh``, ``benchmarks/gpu_check.py``): what can be checked
without a GPU. Its dry run on a CPU worker goes the whole way (model, plan, run_parallel in mixed precision, the
GPU model's step, the files written); on a machine without CUDA the real run is refused with one error line; the
CUDA device names map to the GPU model's kinds."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from gpu_check import gpu_name  # noqa: E402


def test_cuda_device_names_map_to_the_gpu_model_s_kinds():
    assert gpu_name("NVIDIA H100 80GB HBM3", 81559 * 2**20) == "h100-80gb"
    assert gpu_name("NVIDIA H200", 143771 * 2**20) == "h200-141gb"
    assert gpu_name("NVIDIA A100-SXM4-80GB", 80 * 2**30) == "a100-80gb"
    assert gpu_name("NVIDIA A100-SXM4-40GB", 40 * 2**30) == "a100-40gb"
    with pytest.raises(ValueError, match="the GPU model has no 'Tesla T4'; known: a100-80gb"):
        gpu_name("Tesla T4", 16 * 2**30)


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA machine runs the check itself")
def test_without_cuda_the_check_says_so_in_one_line(tmp_path):
    run = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_check.py"), "--out", str(tmp_path)],
                         capture_output=True, text=True, cwd=ROOT, check=False, timeout=300)
    assert run.returncode == 2 and run.stderr.strip().splitlines() == [
        "error: no CUDA device (give --cpu for a dry run on CPU workers, --host for the host model)"]


@pytest.mark.slow  # a model and a worker: the default suite checks the refusal and the names
def test_the_script_s_dry_run_goes_the_whole_way(tmp_path):
    env = {**os.environ, "OUT": str(tmp_path)}
    run = subprocess.run(["bash", str(ROOT / "scripts" / "gpu_check.sh"), "--cpu", "--max-plans", "1"],
                         capture_output=True, text=True, cwd=ROOT, env=env, check=False, timeout=300)
    assert run.returncode == 0, run.stderr + run.stdout
    written = json.loads((tmp_path / "gpu_check.json").read_text())
    assert "dry run on CPU" in written["header"][0]
    (row,) = written["rows"]
    assert row["plan"] == "t1 x p1 x d1, 1 micro-batches, 1f1b" and row["measured_ms"] > 0
    assert row["simulated_ms"] > 0 and row["memory_ratio"] is None and len(row["losses"]) == 5
    assert "1 plans measured" in (tmp_path / "gpu_check.md").read_text()
    assert (tmp_path / "gpu_check.log").read_text().startswith("GPU check, dry run")


@pytest.mark.slow  # the host's figures measured, then a plan on two workers
def test_the_host_mode_simulates_plans_on_the_host_s_own_figures(tmp_path):
    """``--host``: this machine's figures measured first (in the header), a two-rank plan run on local workers in
    fp32 and simulated on them (the ratio's value depends on the host and its load: only its presence is checked)."""
    run = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_check.py"), "--host", "--plans",
                          "t2", "--out", str(tmp_path)], capture_output=True, text=True, cwd=ROOT, check=False,
                         timeout=600)
    assert run.returncode == 0, run.stderr + run.stdout
    written = json.loads((tmp_path / "gpu_check.json").read_text())
    assert "simulated on this host's figures" in written["header"][0] and "GFLOP/s" in written["header"][0]
    (row,) = written["rows"]
    assert row["plan"].startswith("t2 x p1 x d1")
    assert row["time_ratio"] == pytest.approx(row["simulated_ms"] / row["measured_ms"])
    assert row["simulated_ms"] > 0 and row["memory_ratio"] is None and len(row["losses"]) == 5
