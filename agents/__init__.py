"""Reinforcement-learning agents (the paper's REINFORCE agent, SB3 helpers).

Not implemented yet: they arrive with the encoders issue; until then
:func:`make_agent` raises ``NotImplementedError``.
"""

from __future__ import annotations


def make_agent(name: str, *args, **kwargs):
    raise NotImplementedError(f"agent {name!r}: the learning agents are not implemented yet")
