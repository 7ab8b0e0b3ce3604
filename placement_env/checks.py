"""Validators every layer shares: a value of the right kind, or an error that names it.

Each ``checked_*`` returns the value it checked, typed, so callers keep the type.
"""

from __future__ import annotations

import math
from typing import TypeGuard, TypeVar

import numpy as np

T = TypeVar("T")


def is_number(value: object) -> TypeGuard[int | float | np.integer | np.floating]:
    """Whether ``value`` is an int or float (Python or numpy), not a bool, string or None."""
    return not isinstance(value, bool) and isinstance(value, (int, float, np.integer, np.floating))


def checked_finite(name: str, value: object, smallest: float | None = None) -> float:
    """``value`` as a float, or a ``ValueError`` naming ``name`` unless it is a finite number (and at least
    ``smallest`` when given); a bool, a string or None is not a number."""
    if not is_number(value) or not math.isfinite(value) or (smallest is not None and value < smallest):
        bound = "" if smallest is None else f" >= {smallest:g}"
        raise ValueError(f"{name} must be a finite number{bound}, got {value!r}")
    return float(value)


def checked_count(name: str, value: object, smallest: int = 1) -> int:
    """``value`` as an int, or a ``ValueError`` naming ``name`` unless it is an integer >= ``smallest``
    (a float such as 2.5 is refused, not truncated)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < smallest:
        raise ValueError(f"{name} must be an integer >= {smallest}, got {value!r}")
    return int(value)


def checked_instance(name: str, value: object, kind: type[T]) -> T:
    """``value`` if it is a ``kind``, else a ``TypeError`` naming ``name`` and what came instead (most often
    arguments given in another order)."""
    if not isinstance(value, kind):
        raise TypeError(f"{name} must be a {kind.__name__}, got {type(value).__name__}")
    return value


def first_line(error: BaseException) -> str:
    """The first line of ``error``'s message (torch's run to pages), or its type's name if it has none."""
    return (str(error).strip().splitlines() or [type(error).__name__])[0]


def checked_option(where: str, key: str, value: object, kind: str, smallest: int = 1) -> None:
    """Refuse an option value that is not of ``kind`` (``"bool"``, ``"int"``: an integer >= ``smallest``,
    ``"float"``: finite), naming ``where`` and the option ``key``."""
    if kind == "bool" and not isinstance(value, bool):
        raise ValueError(f"{where}: option {key!r} must be true or false, got {value!r}")
    if kind == "int":
        checked_count(f"{where}: option {key!r}", value, smallest)
    if kind == "float":
        checked_finite(f"{where}: option {key!r}", value)


MAX_COST_SECONDS = 1e6  # an op of more than 11 days is an error in the costs, and makespans of it overflow
MAX_BYTES = 1e18  # an exabyte


def checked_quantity(value: object, what: str, limit: float = MAX_BYTES) -> float:
    """Return ``value`` as a float, or raise ``ValueError`` naming ``what`` (NaN, infinite, negative, or above
    ``limit``)."""
    if not is_number(value):
        raise ValueError(f"{what} must be a number, got {value!r}")
    x = float(value)
    if math.isnan(x):
        raise ValueError(f"{what} is NaN")
    if math.isinf(x):
        raise ValueError(f"{what} is infinite")
    if x < 0:
        raise ValueError(f"{what} is negative ({x!r})")
    if x > limit:
        raise ValueError(f"{what} is {x:g}, more than {limit:g}: sums over the graph would overflow")
    return x
