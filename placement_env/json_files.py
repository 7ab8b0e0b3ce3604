"""Reading and writing JSON files (``.json`` or gzipped ``.json.gz``) with errors that name the file."""

from __future__ import annotations

import gzip
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


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
    (say a node's device in a placement) is an error, not the last value silently winning."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no such file: {str(path)!r}")
    if path.is_dir():
        raise ValueError(f"{str(path)!r} is a directory, not a JSON file")
    try:
        if path.name.endswith(".gz"):
            with gzip.open(path, "rt", encoding="utf-8") as f:
                return json.load(f, object_pairs_hook=_object_without_duplicate_keys)
        with open(path, encoding="utf-8") as f:
            return json.load(f, object_pairs_hook=_object_without_duplicate_keys)
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
    The temporary name keeps ``path``'s suffix, for writers that choose a format by it (matplotlib)."""
    path = Path(path)
    temporary = path.with_name(f".{path.stem}.{os.getpid()}.tmp{path.suffix}")
    try:
        yield temporary
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)


def write_text_atomically(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` to ``path`` atomically (:func:`replace_atomically`)."""
    with replace_atomically(path) as temporary:
        temporary.write_text(text, encoding="utf-8")
