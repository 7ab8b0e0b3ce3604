"""Placement problems whose optimum is known, to check that a placer finds it.

Each case is ``(graph, cluster, optimal node placement)``; the optimal makespan is the simulator's for that
placement. :func:`canonical_cases` returns the four the learned placer is checked on:

* ``equal-chains``: two chains of 1-s matmuls on two equal devices, slow links: one chain per device.
* ``heavy-light``: a chain of 1-s and a chain of 0.5-s ops on devices of speed 2 and 1: the heavy chain on the
  fast device (:func:`~placement_env.graph.synthetic.two_chains`).
* ``chain-cut``: a chain of 8 ops whose parameters do not fit one device (each device holds 5 ops' worth), on two
  equal devices. Every placement needs a cut; a chain runs its ops one after another, so the makespan is the ops'
  time plus the transfers over the cut edges, and the optimum is one cut at the cheapest edge among the cuts that
  fit (after op 4: its output is 50x smaller than the others).
* ``fan-out-in``: a 0.1-s source, four branches of two 1-s ops and a 0.1-s sink, on four equal devices with fast
  links: one branch per device (the branches run side by side; any two on one device take 2 s longer).
"""

from __future__ import annotations

import numpy as np

from placement_env.cluster import Cluster, Device
from placement_env.graph.model import ComputationGraph, Edge, Node
from placement_env.graph.synthetic import two_chains
from placement_env.sim.simulator import DEFAULT_PARAM_FACTOR

CANONICAL_CASES = ("equal-chains", "heavy-light", "chain-cut", "fan-out-in")


def _cluster(count: int, memory: float, bandwidth: float, latency: float) -> Cluster:
    return Cluster([Device(f"gpu{i}", 1.0, int(memory)) for i in range(count)], np.full((count, count), bandwidth),
                   np.full((count, count), latency))


def chain_cut(length: int = 8, cheap_after: int = 4):
    """The ``chain-cut`` case (module docstring): ``(graph, cluster, optimal placement)``."""
    params = 10**9
    nodes = [Node(f"op{i}", "matmul", 0.1, 1_000_000 if i == cheap_after - 1 else 50_000_000, params)
             for i in range(length)]
    edges = [Edge(f"op{i}", f"op{i + 1}") for i in range(length - 1)]
    memory = 5.5 * DEFAULT_PARAM_FACTOR * params  # five ops' parameters fit, six do not
    cluster = _cluster(2, memory, 1e9, 1e-4)
    optimal = [0] * cheap_after + [1] * (length - cheap_after)
    return ComputationGraph(nodes, edges, name="chain-cut"), cluster, optimal


def fan_out_in(branches: int = 4, depth: int = 2):
    """The ``fan-out-in`` case (module docstring): ``(graph, cluster, optimal placement)``."""
    nodes = [Node("source", "split", 0.1, 1000)]
    edges = []
    for b in range(branches):
        for d in range(depth):
            nodes.append(Node(f"b{b}_{d}", "matmul", 1.0, 1000))
            edges.append(Edge("source" if d == 0 else f"b{b}_{d - 1}", f"b{b}_{d}"))
        edges.append(Edge(f"b{b}_{depth - 1}", "sink"))
    nodes.append(Node("sink", "concat", 0.1, 1000))
    optimal = [0] + [b for b in range(branches) for _ in range(depth)] + [0]
    return ComputationGraph(nodes, edges, name="fan-out-in"), _cluster(branches, 1e10, 1e10, 1e-3), optimal


def canonical_case(name: str):
    """One case of :data:`CANONICAL_CASES` by name: ``(graph, cluster, optimal node placement)``."""
    if name == "equal-chains":
        return two_chains("equal", 8)
    if name == "heavy-light":
        return two_chains("heavy-light", 8)
    if name == "chain-cut":
        return chain_cut()
    if name == "fan-out-in":
        return fan_out_in()
    raise ValueError(f"unknown canonical case {name!r}; use one of {', '.join(CANONICAL_CASES)}")


def canonical_cases() -> dict[str, tuple]:
    """Every case of :data:`CANONICAL_CASES`."""
    return {name: canonical_case(name) for name in CANONICAL_CASES}
