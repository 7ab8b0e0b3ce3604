"""What the reliability issue's findings measure, re-run: the output lock, workers' memory, workers of a killed driver.

    python benchmarks/reliability.py lock [--trials 40]       # contenders starting together: double holders?
    python benchmarks/reliability.py workers [--workers 64]   # two pretraining jobs with --workers 64: peak memory
    python benchmarks/reliability.py kill [--ray]             # SIGKILL / SIGTERM the driver: processes left after 5 s
    python benchmarks/reliability.py loading                  # hostile small files: refused how fast, in how much
    python benchmarks/reliability.py round4                   # the fourth round: unbounded counts, orphans, tied grads

``lock``: in each trial four processes start within a millisecond of each other on one output folder (fresh, or
with a lock file left by a process that no longer runs) and each holds :class:`agents.training.lock.OutputLock`
for 0.3 s if it gets it; a trial fails when two holders' times overlap. ``workers``: the whole process tree's
resident memory (driver and workers, polled every 0.1 s with psutil) and its largest number of processes.
``kill``: ``python -m agents.experiments table6 --quick`` with two workers (or on Ray), stopped once its workers
are busy; every process it started is counted at the kill and 5 s later (zombies not counted), and the files of
``--out`` are compared 2 s after that. ``loading``: the issue's three small files, each given to the command a
user would run (``python -m agents.place --policy``, ``python -m baselines --graph``): a 325 KB policy whose
``checkpoint.json`` declares ``hidden_dim`` 8192 and ``num_layers`` 8 (the shipped policy's weights), a 2 MB zip
whose ``policy.pt`` expands to 2 GiB, a 1 MB ``.json.gz`` of 1 GiB of whitespace; for each, the exit status, the
stderr lines, the seconds and the peak memory of the process. ``round4``: ``--microbatches 1000000`` and
``--devices 100000`` given to each of the five commands (exit status, stderr lines, seconds, peak memory, files
written into ``--out``); a driver running ``measure_step`` (GPT-2-sized matrix products on two local workers) and
``benchmarks/fidelity.py`` under ``timeout``, each stopped by SIGTERM and by SIGKILL once its workers are busy,
with the processes alive 5 s later; the largest difference between ``measure_step``'s gradients and the model's
for a tied embedding read on two devices.
"""

from __future__ import annotations

import argparse
import gzip
import json
import signal
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

import psutil
from machine import machine_line

ROOT = Path(__file__).resolve().parents[1]
CONTENDER = """import json, sys, time
from agents.training.lock import OutputLock
folder, start = sys.argv[1], float(sys.argv[2])
time.sleep(max(0.0, start - time.time()))
try:
    with OutputLock(folder):
        began = time.time(); time.sleep(0.3); print(json.dumps([began, time.time()]))
except ValueError:
    print("refused")
"""


def lock_trials(trials: int, stale: bool, root: Path) -> tuple[int, int]:
    """``(trials with two holders at once, trials)``."""
    doubles = 0
    for trial in range(trials):
        folder = root / f"{'stale' if stale else 'fresh'}{trial}"
        folder.mkdir()
        if stale:
            dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                                  text=True)
            (folder / ".lock").write_text(dead.stdout)
        start = time.time() + 2.5
        contenders = [subprocess.Popen([sys.executable, "-c", CONTENDER, str(folder), str(start)], cwd=ROOT,
                                       stdout=subprocess.PIPE, text=True) for _ in range(4)]
        held = sorted(json.loads(out) for out in (c.communicate(timeout=60)[0].strip() for c in contenders)
                      if out != "refused")
        doubles += any(a[1] > b[0] for a, b in zip(held, held[1:]))
    return doubles, trials


def tree_memory(process: psutil.Process) -> tuple[int, int]:
    """``(resident bytes, processes)`` of ``process`` and its descendants now."""
    total, count = 0, 0
    for p in [process, *process.children(recursive=True)]:
        try:
            total += p.memory_info().rss
            count += 1
        except psutil.Error:
            pass
    return total, count


def tree_peak(command: list[str]) -> tuple[int, int, float, int, str]:
    """Run ``command``: ``(peak resident bytes of its process tree, most processes, seconds, exit status,
    stderr)``, the tree polled every 0.1 s."""
    began = time.perf_counter()
    with tempfile.TemporaryFile(mode="w+") as err:
        proc = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=err, text=True)
        handle, peak, most = psutil.Process(proc.pid), 0, 0
        while proc.poll() is None:
            memory, count = tree_memory(handle)
            peak, most = max(peak, memory), max(most, count)
            time.sleep(0.1)
        err.seek(0)
        return peak, most, time.perf_counter() - began, proc.returncode, err.read()


def workers_peak(workers: int, out: Path) -> tuple[int, int, float]:
    """Two pretraining expert jobs with ``--workers``: ``(peak bytes, most processes, seconds)``."""
    command = [sys.executable, "-m", "agents.pretrain", "--suites", "cifar10", "--seeds", "1", "--devices", "2", "3",
               "--expert-steps", "20", "--epochs", "1", "--rounds", "0", "--workers", str(workers), "--out", str(out)]
    peak, most, seconds, status, err = tree_peak(command)
    if status != 0:
        raise SystemExit(f"the pretraining failed: {err}")
    return peak, most, seconds


def hostile_files(root: Path) -> dict[str, list[str]]:
    """The three small files and the command each is given to (name -> command)."""
    shipped = ROOT / "agents" / "learned" / "pretrained" / "policy.zip"
    with zipfile.ZipFile(shipped) as z:
        meta = json.loads(z.read("checkpoint.json"))
        weights = z.read("policy.pt")
    meta["policy"]["encoder_kwargs"] = {"hidden_dim": 8192, "num_layers": 8}
    wide = root / "wide.zip"
    with zipfile.ZipFile(wide, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("checkpoint.json", json.dumps(meta))
        z.writestr("policy.pt", weights)
    bomb = root / "bomb.zip"
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("checkpoint.json", json.dumps(json.loads(zipfile.ZipFile(shipped).read("checkpoint.json"))))
        with z.open("policy.pt", "w", force_zip64=True) as member:
            block = bytes(2**24)
            for _ in range(2**31 // len(block)):
                member.write(block)
    spaces = root / "spaces.json.gz"
    with gzip.open(spaces, "wb", compresslevel=9) as f:
        block = b" " * 2**24
        for _ in range(2**30 // len(block)):
            f.write(block)
    place = [sys.executable, "-m", "agents.place", "--graph", "default", "--devices", "3", "--policy"]
    return {f"policy declaring hidden_dim 8192, num_layers 8 ({wide.stat().st_size / 1e3:.0f} KB)": place + [str(wide)],
            f"zip whose policy.pt expands to 2 GiB ({bomb.stat().st_size / 1e6:.1f} MB)": place + [str(bomb)],
            f"gzip of 1 GiB of whitespace ({spaces.stat().st_size / 1e6:.1f} MB)":
                [sys.executable, "-m", "baselines", "--graph", str(spaces), "--devices", "3"]}


def alive(processes: list[psutil.Process]) -> list[psutil.Process]:
    living = []
    for p in processes:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                living.append(p)
        except psutil.Error:
            pass
    return living


def files(out: Path) -> dict[str, int]:
    return {str(p): p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()}


def kill_driver(how: signal.Signals, ray: bool, out: Path) -> str:
    """Start the experiment, stop its driver with ``how`` once it has busy workers; what is left after 5 s."""
    command = [sys.executable, "-m", "agents.experiments", "table6", "--quick", "--models", "vgg19", "resnet50",
               "--out", str(out), *(["--ray"] if ray else ["--workers", "2"])]
    proc = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    driver = psutil.Process(proc.pid)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:  # until two descendants use the CPU (runs under way)
        children = driver.children(recursive=True)
        busy = [c for c in children if c.is_running() and c.cpu_percent(interval=0.2) > 20]
        if len(busy) >= 2:
            break
    started = driver.children(recursive=True)
    proc.send_signal(how)
    proc.wait(timeout=60)
    time.sleep(5.0)
    left = alive(started)
    before = files(out)
    time.sleep(2.0)
    written_after = sorted(set(files(out).items()) - set(before.items()))
    names = ", ".join(sorted({p.name() for p in left if p.is_running()})) if left else ""
    for p in left:  # leave the machine clean
        try:
            p.kill()
        except psutil.Error:
            pass
    return (f"{how.name} on {'Ray' if ray else '--workers 2'}: {len(started)} processes started, "
            f"{len(left)} alive 5 s after the driver ended{' (' + names + ')' if names else ''}, "
            f"{len(written_after)} files written after")


UNBOUNDED = [["--microbatches", "1000000"], ["--devices", "100000"]]
COMMANDS = {"simulate": ["-m", "placement_env", "simulate", "--placement", "{p}"], "baselines": ["-m", "baselines"],
            "agents.place": ["-m", "agents.place"], "train.py": ["train.py", "--out", "{out}"],
            "agents.benchmark": ["-m", "agents.benchmark", "--out", "{out}"]}
MEASURING_DRIVER = """import torch, torch.nn as nn
from placement_env import from_torch
from placement_env.runtime import measure_step
class Wide(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(768, 3072), nn.Linear(3072, 768)
    def forward(self, x):
        return self.b(torch.relu(self.a(x)))
if __name__ == "__main__":
    model, x = Wide(), torch.randn(512, 768)
    graph = from_torch(model, (x,))
    measure_step(model, (x,), graph, [0 if n.module == "a" else 1 for n in graph.nodes], repeats=100000)
"""
TIED = """import numpy as np, torch, torch.nn as nn
from placement_env import from_torch
from placement_env.runtime import measure_step
class TiedHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb, self.mid = nn.Embedding(20, 16), nn.Linear(16, 16)
        self.head = nn.Linear(16, 20, bias=False)
        self.head.weight = self.emb.weight
    def forward(self, x):
        return self.head(torch.relu(self.mid(self.emb(x))))
if __name__ == "__main__":
    torch.manual_seed(0)
    model, x = TiedHead(), torch.randint(0, 20, (4, 5))
    graph = from_torch(model, (x,))
    got = measure_step(model, (x,), graph, [1 if n.module == "head" else 0 for n in graph.nodes], repeats=1)
    model(x).sum().backward()
    print(max(float(np.abs(got.gradients[n] - p.grad.numpy()).max()) for n, p in model.named_parameters()))
"""


def unbounded_rows(root: Path) -> list[str]:
    """Each command given each unbounded count: what it did."""
    from placement_env import load_graph

    placement = root / "p.json"
    placement.write_text(json.dumps([0] * load_graph("default").num_nodes))
    rows = []
    for name, command in COMMANDS.items():
        for extra in UNBOUNDED:
            out = root / f"out-{name}-{extra[0][2:]}"
            argv = [sys.executable, *[a.format(p=placement, out=out) for a in command], *extra]
            peak, _, seconds, status, err = tree_peak(argv)
            lines = err.strip().splitlines()
            written = sum(1 for p in out.rglob("*") if p.is_file()) if out.exists() else 0
            rows.append(f"{name} {' '.join(extra)}: exit {status} in {seconds:.1f} s, peak {peak / 2**20:.0f} MB, "
                        f"{len(lines)} stderr line(s), {written} file(s) written: {lines[-1] if lines else ''}")
    return rows


def stop_when_busy(command: list[str], how: signal.Signals, busy_children: int) -> str:
    """Start ``command``; once ``busy_children`` descendants use the CPU, send ``how`` to it; the processes it had
    started still alive 5 s after it ended."""
    proc = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    driver = psutil.Process(proc.pid)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            busy = [c for c in driver.children(recursive=True) if c.cpu_percent(interval=0.2) > 20]
        except psutil.Error:
            continue
        if len(busy) >= busy_children:
            break
    if proc.poll() is not None:
        return f"{how.name}: the driver ended (exit {proc.returncode}) before its workers were busy"
    started = driver.children(recursive=True)
    proc.send_signal(how)
    proc.wait(timeout=60)
    time.sleep(5.0)
    left = alive(started)
    for p in left:
        try:
            p.kill()
        except psutil.Error:
            pass
    return f"{how.name}: {len(started)} processes started, {len(left)} alive 5 s after the driver ended"


def round4(root: Path) -> None:
    for row in unbounded_rows(root):
        print(row)
    driver = root / "measuring.py"
    driver.write_text(MEASURING_DRIVER)
    for how in (signal.SIGTERM, signal.SIGKILL):
        print(f"measure_step's driver, {stop_when_busy([sys.executable, str(driver)], how, 2)}")
        print(f"benchmarks/fidelity.py, {stop_when_busy([sys.executable, 'benchmarks/fidelity.py'], how, 2)}")
    tied = root / "tied.py"
    tied.write_text(TIED)
    done = subprocess.run([sys.executable, str(tied)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    print(f"measure_step, tied embedding read on two devices: largest gradient difference from the model's "
          f"{done.stdout.strip() or done.stderr.strip().splitlines()[-1]}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=["lock", "workers", "kill", "loading", "round4"])
    parser.add_argument("--trials", type=int, default=40)
    parser.add_argument("--workers", type=int, default=64)
    parser.add_argument("--ray", action="store_true", help="kill: the experiment on Ray instead of --workers 2")
    args = parser.parse_args()
    print(machine_line())
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        if args.what == "lock":
            for stale in (False, True):
                doubles, trials = lock_trials(args.trials, stale, root)
                print(f"{'stale' if stale else 'fresh'} lock: two holders at once in {doubles} of {trials} trials "
                      "(4 contenders each)")
        elif args.what == "workers":
            peak, most, seconds = workers_peak(args.workers, root / "out")
            print(f"pretraining, 2 expert jobs, --workers {args.workers}: peak {peak / 2**30:.2f} GiB over the "
                  f"process tree, at most {most} processes, {seconds:.1f} s")
        elif args.what == "round4":
            round4(root)
        elif args.what == "loading":
            for name, command in hostile_files(root).items():
                peak, _, seconds, status, err = tree_peak(command)
                lines = err.strip().splitlines()
                print(f"{name}: exit {status} in {seconds:.1f} s, peak {peak / 2**30:.2f} GiB, {len(lines)} stderr "
                      f"line(s): {lines[-1] if lines else ''}")
        else:
            for how in (signal.SIGTERM, signal.SIGKILL):
                print(kill_driver(how, args.ray, root / f"out-{how.name}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
