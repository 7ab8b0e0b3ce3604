"""Graph encoders (FADP-GT and the paper's baselines) for the placement policy.

Not implemented yet: the encoders arrive with the encoders issue. Until then
:func:`list_encoders` returns no names and :func:`get_encoder` raises
``NotImplementedError``.
"""

from __future__ import annotations


def list_encoders() -> list[str]:
    """Names of the registered encoders (none yet)."""
    return []


def get_encoder(name: str):
    raise NotImplementedError(f"graph encoder {name!r}: the graph encoders are not implemented yet")
