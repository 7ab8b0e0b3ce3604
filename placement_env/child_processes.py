"""Child processes that end with their driver: :func:`exit_with_parent`.

Every process the project starts to do work for a driver (the measured step's local workers, the runner's pipeline
stages, the experiments' ``--workers``) calls it first, so that none outlives the driver, whether the driver ends
normally, raises, or is killed by SIGTERM or SIGKILL (which run no clean-up of the driver's own).
"""

from __future__ import annotations

import os
import threading
import time

PARENT_POLL_SECONDS = 0.5
"""How often a child checks that its driver is alive: it ends within this long of the driver's death."""


def exit_with_parent(parent: int, every: float = PARENT_POLL_SECONDS) -> threading.Thread:
    """Start a daemon thread that ends this process at once (``os._exit``, nothing flushed or written) when its
    parent ``parent`` is gone (its parent PID changes: the driver was killed, even by SIGKILL); checked every
    ``every`` seconds. The thread runs while the process computes or waits in torch (which releases the GIL).
    Returns the thread."""

    def watch() -> None:
        while True:
            time.sleep(every)
            if os.getppid() != parent:
                os._exit(1)

    thread = threading.Thread(target=watch, name="exit-with-parent", daemon=True)
    thread.start()
    return thread


__all__ = ["PARENT_POLL_SECONDS", "exit_with_parent"]
