"""Reading and writing JSON files (``.json`` or gzipped ``.json.gz``) with errors that name the file."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import re
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

MAX_JSON_BYTES_VARIABLE = "DEVICE_PLACEMENT_MAX_JSON_BYTES"
DEFAULT_MAX_JSON_BYTES = 256 * 2**20  # a 100,000-op training graph is about 30 MB of JSON


def byte_limit(variable: str, default: int) -> int:
    """A size limit in bytes: the environment variable ``variable`` when set, else ``default``; ``ValueError``
    naming the variable for a value that is not a positive whole number."""
    text = os.environ.get(variable)
    if text is None:
        return default
    if not text.strip().isdigit() or int(text) < 1:
        raise ValueError(f"{variable} must be a positive whole number of bytes, got {text!r}")
    return int(text)


def max_json_bytes() -> int:
    """The most bytes a JSON file may hold once uncompressed: :data:`DEFAULT_MAX_JSON_BYTES`, or the environment
    variable ``DEVICE_PLACEMENT_MAX_JSON_BYTES`` when set."""
    return byte_limit(MAX_JSON_BYTES_VARIABLE, DEFAULT_MAX_JSON_BYTES)


class DuplicateKeyError(ValueError):
    """A JSON object names one key twice (``json`` would silently keep the last value)."""


def _object_without_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict:
    out: dict = {}
    for key, value in pairs:
        if key in out:
            raise DuplicateKeyError(f"key {key!r} appears twice in one object")
        out[key] = value
    return out


def read_json_file(path: str | os.PathLike) -> Any:
    """Parse a ``.json`` or ``.json.gz`` file; errors name the file. A key given twice in one object
    (say a node's device in a placement) is an error, not the last value silently winning.

    Bounded: a file that holds (or a gzip that expands to) more than :func:`max_json_bytes` is refused after
    reading at most that many bytes, and nesting deeper than Python's recursion limit is refused, each with a
    ``ValueError`` saying so."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no such file: {str(path)!r}")
    if path.is_dir():
        raise ValueError(f"{str(path)!r} is a directory, not a JSON file")
    if not path.is_file():  # a FIFO would block the read until a writer came; a device never ends
        raise ValueError(f"{str(path)!r} is not a regular file (a pipe, a device or a socket), not a JSON file")
    limit = max_json_bytes()
    try:
        opener = gzip.open if path.name.endswith(".gz") else open
        data = bytearray()
        with opener(path, "rb") as f:
            while len(data) <= limit and (chunk := f.read(min(2**20, limit + 1 - len(data)))):
                data += chunk
        if len(data) > limit:
            unpacked = " once uncompressed" if opener is gzip.open else ""
            raise ValueError(f"{str(path)!r} holds more than {limit:,} bytes of JSON{unpacked} (the limit; raise it "
                             f"with the environment variable {MAX_JSON_BYTES_VARIABLE})")
        return json.loads(data.decode("utf-8"), object_pairs_hook=_object_without_duplicate_keys)
    except RecursionError:
        raise ValueError(f"{str(path)!r} nests its JSON too deeply to be a file of this project") from None
    except DuplicateKeyError as exc:
        raise ValueError(f"{path}: {exc}") from None  # "file: what", as the graph and cluster validators say
    except (gzip.BadGzipFile, EOFError) as exc:
        raise ValueError(f"{str(path)!r} is not a complete gzip file: {exc}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{str(path)!r} is not valid JSON: {exc}") from None
    except OSError as exc:
        raise ValueError(f"cannot read {str(path)!r}: {exc.strerror or exc}") from None


def write_json_file(obj: Any, path: str | os.PathLike) -> None:
    """Write ``obj`` as JSON, gzipped when the name ends in ``.gz``, atomically (:func:`replace_atomically`)."""
    path = Path(path)
    text = json.dumps(obj, separators=(",", ":"))
    with replace_atomically(path) as temporary:
        if path.name.endswith(".gz"):
            with gzip.open(temporary, "wt", encoding="utf-8") as f:
                f.write(text)
        else:
            temporary.write_text(text, encoding="utf-8")


@contextmanager
def replace_atomically(path: str | os.PathLike) -> Iterator[Path]:
    """A temporary path in ``path``'s folder to write, renamed to ``path`` when the block ends without an error (and
    removed otherwise): a reader, or a kill at any moment, sees the old file or the new one, never a part of one.
    The temporary name keeps ``path``'s suffix, for writers that choose a format by it (matplotlib). A ``path``
    that is a symbolic link keeps its link (the file it names is replaced), and a file replaced keeps its
    permissions. Only regular files (and new paths) are replaced: a ``path`` that is, or links to, a character
    device, a pipe or a socket (``/dev/null``, ``/dev/stdout``, a FIFO) is written through as it is, never replaced."""
    try:
        mode: int | None = os.stat(path).st_mode  # follows links: what a write to ``path`` reaches
    except (FileNotFoundError, NotADirectoryError):
        mode = None
    if mode is not None and not stat.S_ISREG(mode) and not stat.S_ISDIR(mode):
        yield Path(path)  # a device or a pipe takes the bytes as they come: nothing to rename, nothing to remove
        return
    path = Path(os.path.realpath(path)) if Path(path).is_symlink() else Path(path)
    temporary = temporary_path(path)
    try:
        yield temporary
        if path.exists():
            os.chmod(temporary, stat.S_IMODE(path.stat().st_mode))
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)


TEMPORARY_MARK = "dp-tmp"


def temporary_path(path: Path) -> Path:
    """The temporary file an atomic write of ``path`` fills: ``.<name>.<pid>.dp-tmp<suffix>`` in its folder (the
    name cut to stay within a file system's 255 bytes; the mark keeps a user's own ``.tmp`` files out of
    :func:`remove_stale_temporaries`)."""
    return path.with_name(f".{path.stem[:120]}.{os.getpid()}.{TEMPORARY_MARK}{path.suffix[:40]}")


def digest_of(data: Any) -> str:
    """A SHA-256 hex digest of ``data`` (plain JSON data) written canonically (sorted keys): equal data, equal
    digests, whatever the key order."""
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


TEMPORARY_NAME = re.compile(rf"^\..*\.(\d+)\.{TEMPORARY_MARK}")  # what temporary_path names


def remove_stale_temporaries(folder: str | os.PathLike) -> list[Path]:
    """Remove the temporary files a killed atomic write left in ``folder`` (:func:`temporary_path`'s, of a process
    that no longer runs); returns those removed. A live writer's files, and any other file, are left alone."""
    removed: list[Path] = []
    folder = Path(folder)
    if not folder.is_dir():
        return removed
    for path in folder.iterdir():
        match = TEMPORARY_NAME.match(path.name)
        if match and path.is_file() and not _running(int(match.group(1))):
            path.unlink(missing_ok=True)
            removed.append(path)
    return removed


def _running(pid: int) -> bool:
    """Whether a process with this PID runs on this machine."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True
    return True


def write_text_atomically(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` to ``path`` atomically (:func:`replace_atomically`)."""
    with replace_atomically(path) as temporary:
        temporary.write_text(text, encoding="utf-8")
