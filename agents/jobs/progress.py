"""One progress report over many jobs: :class:`JobsProgress`."""

from __future__ import annotations

import sys
import time
from typing import Any


def _clock(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


class JobsProgress:
    """Counts jobs done / running / failed; a line per finished job on stdout, a bar on stderr in a terminal."""

    def __init__(self, total: int, title: str, bar: bool | None = None) -> None:
        self.total, self.title = total, title
        self.done = self.failed = self.running = 0
        self.began = time.perf_counter()
        self._bar: Any = None
        if total and (sys.stderr.isatty() if bar is None else bar):
            from tqdm import tqdm

            self._bar = tqdm(total=total, desc=title, unit="run", file=sys.stderr, leave=False)

    def status(self) -> str:
        """``done/total title: counts; elapsed, estimated time left``."""
        elapsed = time.perf_counter() - self.began
        finished = self.done + self.failed
        left = f"~{_clock(elapsed / finished * (self.total - finished))} left" if finished else "time left unknown"
        return (f"{finished}/{self.total} {self.title}: {self.done} done, {self.running} running, {self.failed} "
                f"failed; {_clock(elapsed)} elapsed, {left}")

    def _refresh(self) -> None:
        if self._bar is not None:
            self._bar.n = self.done + self.failed
            self._bar.set_postfix_str(f"running {self.running}, failed {self.failed}", refresh=False)
            self._bar.refresh()

    def started(self, running: int) -> None:
        """``running`` jobs are running now."""
        self.running = running
        self._refresh()

    def finished(self, label: str, text: str, ok: bool, running: int) -> None:
        """A job (``label``) ended, done (``ok``) or failed, with ``text``; its progress line is printed."""
        self.running = running
        if ok:
            self.done += 1
        else:
            self.failed += 1
        line = f"[{self.status()}] {label}: {text}"
        if self._bar is not None:
            self._bar.clear()
        print(line, flush=True)
        self._refresh()

    def note(self, line: str) -> None:
        """Print ``line`` among the progress lines."""
        if self._bar is not None:
            self._bar.clear()
        print(line, flush=True)
        self._refresh()

    def close(self) -> None:
        """Close the bar, if any."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None

