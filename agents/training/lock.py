"""One run per output folder: :class:`OutputLock`, the operating system's lock on ``<folder>/.lock``."""

from __future__ import annotations

import os
from pathlib import Path
from typing import IO

LOCK_NAME = ".lock"


class OutputLock:
    """Holds ``folder`` for one run: an exclusive ``fcntl.flock`` on ``<folder>/.lock`` for as long as the run
    lasts (the file holds the holder's PID, for the message only).

    A second run on the folder gets a ``ValueError`` naming the holder, before it does any work. The operating
    system releases the lock when its holder ends, however it ends (killed too), so a lock file left behind is
    simply a file nobody holds: the next run takes it, with no notice needed and no race between runs starting
    together. Where ``fcntl`` does not exist (Windows), the folder is not locked.

    Raises:
        ValueError: another process holds the folder.
    """

    def __init__(self, folder: str | os.PathLike) -> None:
        self.folder = Path(folder)
        self.path = self.folder / LOCK_NAME
        self._file: IO[str] | None = None

    def __enter__(self) -> OutputLock:
        try:
            import fcntl
        except ImportError:  # pragma: no cover - Windows: no advisory locks here
            return self
        stream = open(self.path, "a+")  # never truncated before the lock is ours: a holder's PID stays readable
        try:
            fcntl.flock(stream.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            stream.seek(0)
            holder = stream.read().strip() or "?"
            stream.close()
            raise ValueError(f"--out {str(self.folder)!r} is in use by another run (PID {holder}); wait for it to "
                             f"end, or give another --out") from None
        stream.seek(0)
        stream.truncate()
        stream.write(f"{os.getpid()}\n")
        stream.flush()
        self._file = stream
        return self

    def __exit__(self, *exc: object) -> None:
        if self._file is not None:
            self._file.close()  # closing releases the lock; the file stays, held by nobody
            self._file = None
