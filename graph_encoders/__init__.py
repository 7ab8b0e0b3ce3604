"""Graph encoders: FADP-GT and the baselines of the paper, one module each, one interface.

Every encoder maps the environment's observation (as a :class:`GraphBatch`)
to per-node embeddings and a pooled graph vector, with padding masked
everywhere. :func:`list_encoders` gives the registered names and
:func:`build_encoder` makes one.
"""

from __future__ import annotations

import inspect

from placement_env.checks import checked_option

from .base import GraphEncoder
from .batch import GraphBatch
from .fadp_gt import FADPGT
from .gat import GAT
from .gcn import GCN
from .gnn import GNN
from .graphormer import Graphormer
from .mamba import Mamba
from .pgnn import PGNN
from .placeto import Placeto
from .sage import GraphSAGE
from .transformer import Transformer

ENCODERS: dict[str, type[GraphEncoder]] = {
    cls.name: cls for cls in (FADPGT, Transformer, GCN, GAT, GraphSAGE, GNN, Graphormer, Placeto, PGNN, Mamba)
}


def list_encoders() -> list[str]:
    """Names accepted by :func:`build_encoder` (and by ``policy_kwargs=dict(encoder=...)``)."""
    return list(ENCODERS)


SMALLEST = {"dense_limit": 0}  # integer options are sizes and counts: >= 1 unless listed here (agents/names.py too)


def encoder_options(name: str) -> dict[str, str]:
    """The options of encoder ``name`` and their kinds (``"int"``, ``"float"``, ``"bool"``), from its constructor."""
    parameters = inspect.signature(ENCODERS[name].__init__).parameters
    return {key: str(getattr(p.annotation, "__name__", p.annotation))  # strings under postponed evaluation
            for key, p in parameters.items() if key not in ("self", "in_dim")}


def _check_option(encoder: str, key: str, value: object, kind: str) -> None:
    checked_option(f"encoder {encoder!r}", key, value, kind, SMALLEST.get(key, 1))


def build_encoder(name: str, in_dim: int, **kwargs) -> GraphEncoder:
    """The encoder called ``name`` for node features of width ``in_dim``; options are checked against the
    encoder's constructor (name, and kind by its annotation) before it is built."""
    if name not in ENCODERS:
        raise ValueError(f"unknown encoder {name!r}; known: {', '.join(ENCODERS)}")
    accepted = encoder_options(name)
    unknown = [k for k in kwargs if k not in accepted]
    if unknown:
        raise ValueError(f"encoder {name!r} has no option {unknown[0]!r}; its options: {', '.join(accepted)}")
    _check_option(name, "in_dim", in_dim, "int")
    for key, value in kwargs.items():
        _check_option(name, key, value, accepted[key])
    return ENCODERS[name](in_dim, **kwargs)


__all__ = ["ENCODERS", "GraphBatch", "GraphEncoder", "build_encoder", "list_encoders"] + [
    c.__name__ for c in ENCODERS.values()]
