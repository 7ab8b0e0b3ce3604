"""Where numba keeps the compiled kernels: :func:`configure_numba_cache`, run by ``import placement_env`` before
any kernel is compiled.

numba caches a ``cache=True`` function beside its source (``__pycache__``) or in the user's cache folder, and
raises ("cannot cache function ...: no locator available") when neither is writable, as in a read-only install
with a read-only home. Then the kernels are cached in a folder of the system's temporary directory instead (one
warning), so every command still runs; only the first run after an install compiles (about 30 s).
"""

from __future__ import annotations

import os
import sys
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent


def _writable(folder: Path) -> bool:
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f".write-probe-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
        return True
    except OSError:
        return False


def configure_numba_cache(package: Path = PACKAGE, writable: Callable[[Path], bool] = _writable) -> str | None:
    """Set ``NUMBA_CACHE_DIR`` when numba would find no writable cache (neither beside ``package``'s sources nor
    in the user's cache folder) and the user set none; returns the folder chosen, or None when nothing was
    changed. Must run before numba is imported."""
    if os.environ.get("NUMBA_CACHE_DIR") or "numba.core.config" in sys.modules:
        return None
    home_cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "numba"
    if writable(package / "__pycache__") or writable(home_cache):
        return None
    fallback = Path(tempfile.gettempdir()) / f"placement_env-numba-{os.getuid() if hasattr(os, 'getuid') else 0}"
    if not writable(fallback):
        warnings.warn("no writable folder for numba's cache (the install, the home and the temporary folder are "
                      "read-only): set NUMBA_CACHE_DIR to one", RuntimeWarning, stacklevel=2)
        return None
    os.environ["NUMBA_CACHE_DIR"] = str(fallback)
    warnings.warn(f"the install and the home are read-only: numba's kernels are cached in {fallback}",
                  RuntimeWarning, stacklevel=2)
    return str(fallback)


__all__ = ["configure_numba_cache"]
