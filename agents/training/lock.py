"""One run per output folder: :class:`OutputLock`."""

from __future__ import annotations

import os
import sys
from pathlib import Path

LOCK_NAME = ".lock"


def _alive(pid: int) -> bool:
    """Whether a process with this PID runs (on this machine)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # it exists, under another user
        return True
    return True


class OutputLock:
    """Holds ``folder`` for one run: a ``.lock`` file with the holder's PID, created atomically (``O_EXCL``).

    A second run on the folder gets a ``ValueError`` naming the holder, before it does any work. A lock left by a
    process that no longer runs (killed, or the machine restarted) is taken over with a notice on stderr. The lock
    is removed when the run ends, however it ends.
    """

    def __init__(self, folder: str | os.PathLike) -> None:
        self.folder = Path(folder)
        self.path = self.folder / LOCK_NAME

    def __enter__(self) -> OutputLock:
        for _ in range(2):
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                try:
                    holder = int(self.path.read_text().strip() or "0")
                except (OSError, ValueError):
                    holder = 0
                if holder and holder != os.getpid() and _alive(holder):
                    raise ValueError(f"--out {str(self.folder)!r} is in use by another run (PID {holder}); wait for "
                                     f"it to end, or give another --out") from None
                print(f"notice: {str(self.path)!r} was left by a run that no longer runs (PID {holder or '?'}); "
                      f"taking it over", file=sys.stderr)
                self.path.unlink(missing_ok=True)
                continue
            with os.fdopen(fd, "w") as stream:
                stream.write(f"{os.getpid()}\n")
            return self
        raise ValueError(f"--out {str(self.folder)!r}: could not take its lock {str(self.path)!r}")

    def __exit__(self, *exc: object) -> None:
        self.path.unlink(missing_ok=True)
