"""A process that ends what a driver started once the driver is gone: :func:`start_reaper`.

Worker processes of ``--workers`` watch their parent themselves
(:func:`placement_env.child_processes.exit_with_parent`),
but the processes a local Ray instance starts are Ray's: killed by SIGKILL, a driver cannot shut them down, and
Ray's task workers end within about 4 s while its node agents (``ray::DashboardAgent``, ``ray::RuntimeEnvAgent``)
live on for about 60 s (measured: ``benchmarks/reliability.py kill --ray``). The reaper is a small process of its
own session that, every half second, notes the driver's descendants (process ID and start time, read from
``/proc``); when the driver is gone it sends SIGKILL to those still running, and to their descendants, then
exits. It never touches a process it did not see descending from the driver (a recycled process ID has another
start time). Linux only (``/proc``); elsewhere :func:`start_reaper` returns None.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REAPER_POLL_SECONDS = 0.5

_REAPER = r"""
import os, signal, sys, time

def stat(pid):  # (state, parent, start time) of a process, None when it is gone
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()
    return fields[0], int(fields[1]), fields[19]

def descendants(roots):  # {pid: start time} of every descendant of roots
    table = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            info = stat(int(name))
            if info:
                table[int(name)] = info
    found, frontier = {}, set(roots)
    while frontier:
        following = set()
        for pid, (_, parent, start) in table.items():
            if parent in frontier and pid not in found and pid != os.getpid():
                found[pid] = start
                following.add(pid)
        frontier = following
    return found

driver, every, seen_file = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
born = stat(driver)[2]
seen = {}
while True:
    now = stat(driver)
    if now is None or now[0] == "Z" or now[2] != born:
        break
    seen.update(descendants([driver]))
    if seen_file:  # the processes it would end, one PID a line, replaced whole
        with open(seen_file + ".tmp", "w") as f:
            f.write("".join(f"{pid}\n" for pid in seen))
        os.replace(seen_file + ".tmp", seen_file)
    time.sleep(every)
seen.update(descendants(list(seen)))
for pid, start in seen.items():
    info = stat(pid)
    if info and info[2] == start:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
"""


def start_reaper(every: float = REAPER_POLL_SECONDS, seen_file: str | None = None) -> subprocess.Popen | None:
    """Start the reaper of this process (see the module docstring), noting descendants every ``every`` seconds;
    returns it, to be terminated when this process ends its children itself, or None where there is no
    ``/proc``. With ``seen_file``, after each look it writes there the PIDs it would end, one a line (replaced
    whole: for diagnosis, and for tests that wait until it has seen a process rather than for a fixed time)."""
    if not Path(f"/proc/{os.getpid()}/stat").exists():
        return None
    return subprocess.Popen([sys.executable, "-c", _REAPER, str(os.getpid()), str(every), seen_file or ""],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True, close_fds=True)
