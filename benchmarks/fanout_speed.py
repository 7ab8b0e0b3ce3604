"""Speed-up from fanning runs out: ``python -m agents.experiments`` (or pretraining) with 1 and 2 workers and Ray.

    python benchmarks/fanout_speed.py [--repeats 2]            # table2 --quick: --workers 1, --workers 2, --ray
    python benchmarks/fanout_speed.py --pretrain [--repeats 1]  # a small pretraining: --workers 1 and 2

Each repeat runs every variant once, one after the other (interleaved, so host noise falls on all of them), each
into a fresh output folder, and times the whole command; the speed-ups are the mean sequential time over the mean
time of each variant. For pretraining, the per-stage seconds of ``pretrain.json`` are shown too (experts and
improvement fan out; imitation stays in the driver).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from machine import machine_line

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENT = ["-m", "agents.experiments", "table2", "--quick"]
PRETRAIN = ["-m", "agents.pretrain", "--seeds", "6", "--devices", "3", "5", "8", "--epochs", "2", "--rounds", "1"]


def timed(command: list[str], out: Path) -> float:
    began = time.perf_counter()
    subprocess.run([sys.executable, *command, "--out", str(out)], cwd=ROOT, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    return time.perf_counter() - began


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--pretrain", action="store_true", help="time a small pretraining instead of table2")
    args = parser.parse_args()
    print(machine_line())
    base = PRETRAIN if args.pretrain else EXPERIMENT
    variants = {"--workers 1": ["--workers", "1"], "--workers 2": ["--workers", "2"]}
    if not args.pretrain:
        variants["--ray (2 CPUs)"] = ["--ray", "--workers", "2"]
    print("command: python " + " ".join(base))
    times: dict[str, list[float]] = {name: [] for name in variants}
    stages: dict[str, list[dict]] = {name: [] for name in variants}
    with tempfile.TemporaryDirectory() as folder:
        for repeat in range(args.repeats):
            for name, extra in variants.items():
                out = Path(folder) / f"{repeat}-{name.split()[0].strip('-')}-{extra[-1]}"
                seconds = timed(base + extra, out)
                times[name].append(seconds)
                if args.pretrain:
                    stages[name].append(json.loads((out / "pretrain.json").read_text())["stage_seconds"])
                print(f"repeat {repeat + 1}: {name}: {seconds:.1f} s", flush=True)
    sequential = sum(times["--workers 1"]) / args.repeats
    for name, values in times.items():
        mean = sum(values) / len(values)
        line = f"{name:<16} mean {mean:6.1f} s  speed-up {sequential / mean:.2f}x"
        if args.pretrain:
            line += "  stages (s): " + ", ".join(f"{k} {sum(s[k] for s in stages[name]) / len(stages[name]):.1f}"
                                                for k in stages[name][0])
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
