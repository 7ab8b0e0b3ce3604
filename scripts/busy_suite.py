"""The test suite on a busy machine: every core kept busy by another process while ``python -m pytest`` runs.

    python scripts/busy_suite.py [--runs 3] [--hogs N] [--log busy.log] [-- PYTEST ARGS...]

``--hogs`` processes (default: one per core) each spin in a Python loop at normal priority for as long as the
runs last, as another job on a user's laptop would; the suite then runs ``--runs`` times in a row (each run's
exit status, seconds and pytest's summary line printed, and appended to ``--log``). The hogs are killed when the
runs end, or when this script is stopped. Exit status: 0 when every run passed, else 1.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SPIN = "while True:\n    pass\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--hogs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--log", default=None, help="append each run's line to this file")
    parser.add_argument("pytest_args", nargs="*", help="arguments for pytest (after --)")
    args = parser.parse_args()
    hogs = [subprocess.Popen([sys.executable, "-c", SPIN]) for _ in range(args.hogs)]
    passed = 0
    try:
        time.sleep(1.0)
        with open(os.devnull) as devnull:
            load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
            header = f"{args.hogs} spinning processes on {os.cpu_count()} cores (load {load:.1f}); pytest " \
                     f"{' '.join(args.pytest_args) or '(defaults)'}"
            print(header, flush=True)
            lines = [header]
            for run in range(1, args.runs + 1):
                began = time.monotonic()
                done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args.pytest_args],
                                      cwd=ROOT, stdin=devnull, capture_output=True, text=True)
                seconds = time.monotonic() - began
                summary = next((line for line in reversed(done.stdout.splitlines()) if " in " in line
                                and ("passed" in line or "failed" in line)), "no summary line")
                failures = [line for line in done.stdout.splitlines() if line.startswith("FAILED")]
                line = f"run {run}: exit {done.returncode} in {seconds:.0f} s: {summary.strip()}"
                print(line, *failures, sep="\n", flush=True)
                lines += [line, *failures]
                passed += done.returncode == 0
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    if args.log:
        with open(args.log, "a") as f:
            f.write("\n".join(lines) + "\n")
    print(f"{passed} of {args.runs} runs passed with every core busy")
    return 0 if passed == args.runs else 1


if __name__ == "__main__":
    sys.exit(main())
