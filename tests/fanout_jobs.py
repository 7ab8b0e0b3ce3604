"""Jobs for tests/test_fanout.py: module-level functions that worker processes and Ray workers import by name."""

from __future__ import annotations

import os
import signal
from pathlib import Path


def square(x: int) -> int:
    return x * x


def refuse(x: int) -> int:
    raise ValueError(f"job {x} refuses")


def die_once(x: int, marker: str) -> int:
    """Kills its own worker process the first time (as `kill -9` from outside would); squares ``x`` on a retry."""
    if not Path(marker).exists():
        Path(marker).write_text(str(os.getpid()))
        os.kill(os.getpid(), signal.SIGKILL)
    return x * x


def die_always(x: int) -> int:
    os.kill(os.getpid(), signal.SIGKILL)
    return x
