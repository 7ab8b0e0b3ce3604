"""Child processes that end with their driver: :func:`exit_with_parent`.

Every process the project starts to do work for a driver (the measured step's local workers, the runner's pipeline
stages, the experiments' ``--workers``) calls it first, so that none outlives the driver, whether the driver ends
normally, raises, or is killed by SIGTERM or SIGKILL (which run no clean-up of the driver's own).
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import os
import threading
import time

PARENT_POLL_SECONDS = 0.5
"""How often a child checks that its driver is alive: it ends within this long of the driver's death."""


def exit_with_parent(parent: int | None = None, every: float = PARENT_POLL_SECONDS) -> threading.Thread:
    """Start a daemon thread that ends this process at once (``os._exit``, nothing flushed or written) when its
    driver is gone, even killed by SIGKILL. ``parent``, a PID: the driver is gone when this process's parent PID
    changes (checked every ``every`` seconds). ``None``, for a ``multiprocessing`` child of any start method
    (a *forkserver*'s child has the server, not the driver, as its parent): when the driver's end of the pipe it
    started this process through closes (:func:`multiprocessing.parent_process`'s sentinel; at once, and at once
    when the driver ended before this call). The thread runs while the process computes or waits in torch (which
    releases the GIL). Returns the thread.

    Raises:
        ValueError: ``parent`` is None outside a ``multiprocessing`` child.
    """
    if parent is None:
        driver = multiprocessing.parent_process()
        if driver is None:
            raise ValueError("exit_with_parent() without a PID is for multiprocessing children; this is none")
        sentinel = driver.sentinel

        def watch() -> None:
            multiprocessing.connection.wait([sentinel])  # readable at EOF: the driver closed it, or died
            os._exit(1)
    else:
        def watch() -> None:
            while True:
                time.sleep(every)
                if os.getppid() != parent:
                    os._exit(1)

    thread = threading.Thread(target=watch, name="exit-with-parent", daemon=True)
    thread.start()
    return thread


__all__ = ["PARENT_POLL_SECONDS", "exit_with_parent"]
