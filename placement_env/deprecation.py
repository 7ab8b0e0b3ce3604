"""Old names kept for one release: :func:`deprecated_function` and :func:`deprecated_names` warn on each use and
say what to use instead (``DeprecationWarning``, which Python shows in ``__main__`` and under pytest)."""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])


def _warn(old: str, new: str, removed_in: str) -> None:
    warnings.warn(f"{old} is deprecated and will be removed in {removed_in}: use {new}", DeprecationWarning,
                  stacklevel=3)


def deprecated_function(function: F, old: str, new: str, removed_in: str) -> F:
    """``function`` under its old name ``old``: the same call, with a ``DeprecationWarning`` naming ``new``."""

    @functools.wraps(function)
    def alias(*args: Any, **kwargs: Any) -> Any:
        _warn(old, new, removed_in)
        return function(*args, **kwargs)

    alias.__name__ = alias.__qualname__ = old.rsplit(".", 1)[-1]
    alias.__doc__ = f"Deprecated: use :func:`{new}` (removed in {removed_in})."
    return alias  # type: ignore[return-value]


def deprecated_names(module: str, names: dict[str, tuple[Any, str]], removed_in: str,
                     fallback: Callable[[str], Any] | None = None) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``module``: ``names`` maps each old name to ``(value, new name)``; a use warns
    and returns the value. Other names go to ``fallback`` (another ``__getattr__``) or raise ``AttributeError``."""

    def __getattr__(name: str) -> Any:
        if name in names:
            value, new = names[name]
            _warn(f"{module}.{name}", new, removed_in)
            return value
        if fallback is not None:
            return fallback(name)
        raise AttributeError(f"module {module!r} has no attribute {name!r}")

    return __getattr__


__all__ = ["deprecated_function", "deprecated_names"]
