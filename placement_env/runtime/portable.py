"""A user's callable sent to worker processes: :func:`portable` (cloudpickle: a lambda or a closure travels by value,
a module's function by reference), refused by name before any worker starts when it cannot be sent."""

from __future__ import annotations

from collections.abc import Callable

import cloudpickle

from placement_env.checks import first_line


def portable(name: str, function: Callable | None) -> bytes | None:
    """``function`` as bytes every stage process can load (cloudpickle: a lambda or a closure by value, a module's
    function by reference); ``ValueError`` before any worker starts when it cannot be sent, saying what to pass."""
    if function is None:
        return None
    if not callable(function):
        raise TypeError(f"{name} must be callable, got {type(function).__name__}")
    try:
        return cloudpickle.dumps(function)
    except Exception as error:  # noqa: BLE001 - whatever keeps it from pickling, said before the workers start
        raise ValueError(f"{name} cannot be sent to the worker processes ({type(error).__name__}: "
                         f"{first_line(error)}): pass a function of a module, a functools.partial of one, or a "
                         "lambda that holds only picklable values") from None


__all__ = ["portable"]
