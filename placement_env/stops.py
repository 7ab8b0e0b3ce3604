"""Stopping a command: SIGTERM raised as :class:`Terminated` (a ``KeyboardInterrupt``, as Ctrl-C is), and blocks
in which Ctrl-C and SIGTERM wait (:func:`ignore_interrupts`): what the block writes is written whole, the workers
it starts are all known. Below every command and the runtime's worker start, so both stop alike."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType


class Terminated(KeyboardInterrupt):
    """SIGTERM (what ``timeout``, Slurm and Kubernetes send) raised in the main thread: every command stops on it as
    on Ctrl-C (its workers stopped, whole files only), and exits with status 143 (:mod:`placement_env.cli`)."""


RESEND_S = 0.05
"""How long after a stop that came inside a finalizer it is sent again (:func:`_raise_stop`)."""


def _in_finalizer(frame: FrameType | None) -> bool:
    """Whether ``frame`` runs inside a ``__del__`` (up its stack)."""
    while frame is not None:
        if frame.f_code.co_name == "__del__":
            return True
        frame = frame.f_back
    return False


def _raise_stop(signum: int, frame: FrameType | None) -> None:
    """SIGTERM raised as :class:`Terminated`, SIGINT as ``KeyboardInterrupt``; but where the signal came inside a
    finalizer (a ``__del__``: numba's compiler frees its buffers in them), where Python would print the exception
    as ignored and lose it, the signal is sent again :data:`RESEND_S` later, to be raised where it stops the
    command."""
    if _in_finalizer(frame):
        threading.Timer(RESEND_S, os.kill, (os.getpid(), signum)).start()
        return
    raise Terminated if signum == signal.SIGTERM else KeyboardInterrupt


@contextmanager
def _signal_handlers(handlers: dict[signal.Signals, Callable[[int, FrameType | None], None]]) -> Iterator[None]:
    """``handlers`` installed while active (in the main thread; elsewhere nothing), the former ones back after."""
    try:
        previous = {signum: signal.signal(signum, handler) for signum, handler in handlers.items()}
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


@contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """While active (in the main thread), SIGTERM raises :class:`Terminated`, and a Ctrl-C whose handler is
    Python's default raises ``KeyboardInterrupt`` as before, neither lost inside a finalizer (:func:`_raise_stop`);
    the former handlers come back after. Elsewhere (not the main thread) it does nothing."""
    handlers: dict[signal.Signals, Callable[[int, FrameType | None], None]] = {signal.SIGTERM: _raise_stop}
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:  # an ignored Ctrl-C stays ignored
        handlers[signal.SIGINT] = _raise_stop
    with _signal_handlers(handlers):
        yield


@contextmanager
def ignore_interrupts() -> Iterator[None]:
    """While active (in the main thread), Ctrl-C and SIGTERM wait: what the block writes is written whole, and a
    signal that came meanwhile is raised after it (as ``KeyboardInterrupt`` or :class:`Terminated`); an ignored
    one stays ignored. Elsewhere it does nothing."""
    pending: list[int] = []

    def wait(signum: int, frame: FrameType | None) -> None:
        pending.append(signum)

    with _signal_handlers({signum: wait for signum in (signal.SIGINT, signal.SIGTERM)
                           if signal.getsignal(signum) is not signal.SIG_IGN}):
        yield
    if pending:
        raise Terminated() if signal.SIGTERM in pending else KeyboardInterrupt()


__all__ = ["RESEND_S", "Terminated", "ignore_interrupts", "sigterm_as_interrupt"]
