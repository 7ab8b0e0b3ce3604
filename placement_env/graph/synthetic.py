"""Seeded synthetic computation graphs from a layered DAG generator.

The structure follows the layered generators of the scheduling literature
(e.g. DAGGEN, Suter & Hunold): ops are spread over levels whose mean width is
``fat * sqrt(num_ops)``; ``regularity`` (0..1) controls how much level widths
vary (1 = all equal); every op of a level draws each op of the previous
``jump`` levels as a parent with probability ``density`` (and always gets at
least one parent, from the level just above, so there are no stray sources).

Op costs (seconds), output sizes and parameter sizes (bytes) are log-normal,
given by their medians and log-space spreads; sizes are multiples of 4 bytes
(float32 tensors). The result is a forward graph, or with ``training=True``
(the default) its training graph per :mod:`placement_env.graph.training`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from placement_env.checks import checked_count
from placement_env.cluster import Cluster, Device
from placement_env.graph.model import ComputationGraph, Edge, Node
from placement_env.graph.training import to_training_graph

_OPS_WITH_PARAMS = ("conv2d", "matmul", "embedding", "batch_norm")
_OPS_WITHOUT_PARAMS = ("relu", "add", "mul", "concat", "max_pool2d", "softmax", "transpose", "tanh")


@dataclass(frozen=True)
class LayeredDagConfig:
    """Parameters of :func:`layered_dag` (units: seconds and bytes)."""

    num_ops: int = 300
    fat: float = 0.5
    regularity: float = 0.5
    density: float = 0.1
    jump: int = 2
    cost_median: float = 2e-4
    cost_sigma: float = 1.0
    bytes_median: float = 2e6
    bytes_sigma: float = 1.0
    param_fraction: float = 0.4
    param_median: float = 2e6
    param_sigma: float = 1.0

    def __post_init__(self) -> None:
        checked_count("num_ops", self.num_ops)
        checked_count("jump", self.jump)
        for name in ("regularity", "density", "param_fraction"):
            x = getattr(self, name)
            if not 0.0 <= x <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {x!r}")
        for name in ("fat", "cost_median", "bytes_median", "param_median"):
            if not 0 < getattr(self, name) < np.inf:
                raise ValueError(f"{name} must be positive and finite, got {getattr(self, name)!r}")
        for name in ("cost_sigma", "bytes_sigma", "param_sigma"):
            if not 0 <= getattr(self, name) < np.inf:
                raise ValueError(f"{name} must be >= 0 and finite, got {getattr(self, name)!r}")


def layered_dag(seed: int = 0, training: bool = True, name: str | None = None, **params) -> ComputationGraph:
    """A seeded random layered DAG; ``params`` are the fields of :class:`LayeredDagConfig`.

    The same seed and parameters always give the same graph.
    """
    spec = LayeredDagConfig(**params)
    checked_count("seed", seed, 0)
    rng = np.random.default_rng(seed)
    n = int(spec.num_ops)
    mean_width = max(1.0, spec.fat * np.sqrt(n))
    widths: list[int] = []
    while sum(widths) < n:
        lo, hi = mean_width * spec.regularity, mean_width * (2.0 - spec.regularity)
        widths.append(max(1, int(round(rng.uniform(lo, hi)))))
    widths[-1] -= sum(widths) - n
    if widths[-1] < 1:  # pragma: no cover - the loop above leaves at least one op
        widths.pop()

    levels: list[list[int]] = []
    nxt = 0
    for w in widths:
        levels.append(list(range(nxt, nxt + w)))
        nxt += w

    edges: list[tuple[int, int]] = []
    for li in range(1, len(levels)):
        candidates = [u for lj in range(max(0, li - spec.jump), li) for u in levels[lj]]
        above = levels[li - 1]
        for v in levels[li]:
            chosen = {u for u in candidates if rng.random() < spec.density}
            if not chosen.intersection(above):
                chosen.add(above[int(rng.integers(len(above)))])
            edges += [(u, v) for u in sorted(chosen)]

    cost = rng.lognormal(np.log(spec.cost_median), spec.cost_sigma, n)
    out_bytes = 4 * np.maximum(1, np.round(rng.lognormal(np.log(spec.bytes_median / 4), spec.bytes_sigma, n)))
    has_params = rng.random(n) < spec.param_fraction
    param_bytes = np.where(has_params,
                           4 * np.maximum(1, np.round(rng.lognormal(np.log(spec.param_median / 4),
                                                                    spec.param_sigma, n))),
                           0)
    for what, values in (("cost", cost), ("bytes", out_bytes), ("param", param_bytes)):
        if not np.all(np.isfinite(values)):
            raise ValueError(f"{what}_median={getattr(spec, what + '_median')!r} with {what}_sigma="
                             f"{getattr(spec, what + '_sigma')!r} draws infinite values; use a smaller sigma")
    op_pick = rng.integers(0, 1 << 30, n)
    nodes = []
    for i in range(n):
        vocab = _OPS_WITH_PARAMS if has_params[i] else _OPS_WITHOUT_PARAMS
        nodes.append(Node(f"op{i}", vocab[op_pick[i] % len(vocab)], float(cost[i]), int(out_bytes[i]),
                          int(param_bytes[i])))
    label = name or f"layered-{n}-s{seed}"
    g = ComputationGraph(nodes, [Edge(f"op{u}", f"op{v}") for u, v in edges], name=label)
    return to_training_graph(g, name=label) if training else g


def two_chains(kind: str = "heavy-light", length: int = 8):
    """Two independent chains on a two-device cluster with a known optimum, for learning tests.

    ``"heavy-light"``: a chain of 1-s matmuls and a chain of 0.5-s convolutions,
    devices of speed 2 and 1: the optimum puts the heavy chain on device 0 and
    the light one on device 1 (``length`` / 2 seconds each); everything on
    device 0 takes 1.5x that, the chains swapped 2x. ``"equal"``: two chains of
    1-s matmuls on two equal devices: optimum one chain per device (``length``
    seconds), everything on one device twice that. Links are slow (0.3 s
    latency), so splitting a chain costs more than it gains.

    Returns ``(graph, cluster, optimal node placement)``.
    """
    if kind not in ("heavy-light", "equal"):
        raise ValueError(f"unknown two_chains kind {kind!r}; use 'heavy-light' or 'equal'")
    heavy_light = kind == "heavy-light"
    nodes = [Node(f"a{i}", "matmul", 1.0, 1000) for i in range(length)] + \
        [Node(f"b{i}", "conv2d" if heavy_light else "matmul", 0.5 if heavy_light else 1.0, 1000)
         for i in range(length)]
    edges = [Edge(f"{c}{i}", f"{c}{i + 1}") for c in "ab" for i in range(length - 1)]
    speeds = (2.0, 1.0) if heavy_light else (1.0, 1.0)
    cluster = Cluster([Device(f"gpu{i}", s, 10**9) for i, s in enumerate(speeds)], np.full((2, 2), 1e4),
                      np.full((2, 2), 0.3))
    return ComputationGraph(nodes, edges, name=f"two-chains-{kind}"), cluster, [0] * length + [1] * length
