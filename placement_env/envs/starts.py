"""Where episodes start: the start placements the environments accept by name, and how the placers are found.

The environments' own starts are :data:`OWN_STARTS`: ``single``, ``random`` and ``round_robin``. The classical
placers (:mod:`baselines`) are built on the simulator and the plans, so they sit above the whole of
:mod:`placement_env` in the house, the environments included; nothing here imports them. An installed package
offers its placers as episode starts through the entry-point group :data:`START_PLACERS_GROUP`: each entry point
names a function of no arguments returning :class:`StartPlacers`. This project declares ``baselines`` there
(``pyproject.toml``, ``[project.entry-points."placement_env.start_placers"]``); another package may add its own
placers the same way. The entry points are loaded on the first call that needs a placer, once per process.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib.metadata import entry_points

import numpy as np

from placement_env.cluster import Cluster
from placement_env.graph.model import ComputationGraph

OWN_STARTS = ("single", "random", "round_robin")
START_PLACERS_GROUP = "placement_env.start_placers"

StartPlacer = Callable[[ComputationGraph, Cluster, int], np.ndarray]


@dataclass(frozen=True)
class StartPlacers:
    """The placers one package offers as episode starts.

    * ``placers``: name -> ``placer(graph, cluster, seed)``, a device per node of ``graph``; a placer raises
      when it finds nothing within memory (the environment's constructor passes that on);
    * ``within_memory``: ``(graph, cluster)`` -> a placement the simulator finds within memory, or ``None`` when
      none of the package's placers finds one (the environments start ``single`` episodes from it when everything
      on one device runs out of memory).
    """

    placers: Mapping[str, StartPlacer]
    within_memory: Callable[[ComputationGraph, Cluster], np.ndarray | None]


@functools.cache
def installed_start_placers() -> tuple[StartPlacers, ...]:
    """The :class:`StartPlacers` of every entry point in :data:`START_PLACERS_GROUP`, in entry-point order.

    Raises ``TypeError`` naming an entry point whose function does not return :class:`StartPlacers`."""
    found = []
    for point in entry_points(group=START_PLACERS_GROUP):
        offered = point.load()()
        if not isinstance(offered, StartPlacers):
            raise TypeError(f"entry point {point.name!r} of {START_PLACERS_GROUP!r} ({point.value}) returned "
                            f"{type(offered).__name__}, not StartPlacers")
        found.append(offered)
    return tuple(found)


def start_names() -> tuple[str, ...]:
    """Every accepted ``initial_placement`` name: :data:`OWN_STARTS`, then the installed placers'."""
    return tuple(dict.fromkeys(OWN_STARTS + tuple(name for offered in installed_start_placers()
                                                  for name in offered.placers)))


def start_placer(name: str) -> StartPlacer:
    """The installed placer called ``name`` (the first package offering it).

    Raises ``ValueError`` naming ``name`` and every accepted name when no package offers it; when no package
    is installed in the group at all (a source checkout that was never ``pip install``-ed), it says so."""
    for offered in installed_start_placers():
        if name in offered.placers:
            return offered.placers[name]
    hint = "" if installed_start_placers() else (
        f" (no placers are installed in the entry-point group {START_PLACERS_GROUP!r}: install the project, "
        "pip install -e ., to start from the placers of baselines)")
    raise ValueError(f"unknown initial_placement {name!r}; use one of {', '.join(start_names())}{hint}")


def start_within_memory(graph: ComputationGraph, cluster: Cluster) -> np.ndarray | None:
    """The first installed package's placement of ``graph`` within memory, or ``None`` when none finds one."""
    for offered in installed_start_placers():
        found = offered.within_memory(graph, cluster)
        if found is not None:
            return found
    return None
