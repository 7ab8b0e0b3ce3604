"""The problem both environments pose: graphs, a cluster, padding, observations and start states.

Kept apart from the two ``gymnasium.Env`` classes so that the whole-graph and
the node-by-node MDPs share one definition of what the agent sees (padding and
masks handled here only) and of how episodes start.
"""

from __future__ import annotations

import os
import warnings

import numpy as np
from gymnasium import spaces

from placement_env.checks import checked_count
from placement_env.cluster import DEFAULT_KIND, Cluster
from placement_env.envs.starts import OWN_STARTS, start_names, start_placer, start_within_memory
from placement_env.graph.coarsen import coarsen
from placement_env.graph.model import ComputationGraph
from placement_env.graph.units import STATIC_FEATURES, UnitGraph, unit_graph
from placement_env.sim.pipeline import DEFAULT_SCHEDULE, checked_microbatches, checked_schedule, stepped_graph
from placement_env.sim.simulator import DEFAULT_PARAM_FACTOR, Simulator, checked_param_factor, lb_ratio
from placement_env.zoo.registry import SUITES, load_graph, load_suite

INITIAL_PLACEMENTS = OWN_STARTS


def initial_placement_names() -> tuple[str, ...]:
    """Every accepted ``initial_placement``: :data:`INITIAL_PLACEMENTS`, then the installed placers'
    (:mod:`placement_env.envs.starts`: those of ``baselines``)."""
    return start_names()


def unflatten_observation(obs: dict) -> dict:
    """Give ``embedding`` shape (..., max_nodes, F) and ``edge_index`` (..., 2, max_edges).

    For one observation or a batch, numpy arrays or torch tensors, flat or not:
    the sizes come from ``node_mask`` and ``edge_mask``.
    """
    lead = tuple(obs["node_mask"].shape[:-1])
    n, e = obs["node_mask"].shape[-1], obs["edge_mask"].shape[-1]
    out = dict(obs)
    out["embedding"] = obs["embedding"].reshape(*lead, n, -1)
    out["edge_index"] = obs["edge_index"].reshape(*lead, 2, e)
    return out


def resolve_graphs(graph) -> list[ComputationGraph]:
    """A graph spec, a suite name, or a list of them, as a flat list of graphs."""
    items = list(graph) if isinstance(graph, (list, tuple)) else [graph]
    if not items:
        raise ValueError("graph: an empty list of graphs")
    graphs: list[ComputationGraph] = []
    for item in items:
        graphs += load_suite(item) if isinstance(item, str) and item in SUITES else [load_graph(item)]
    return graphs


def _resolve_cluster(num_devices: int | None, cluster, device_kind: str) -> Cluster:
    if cluster is not None and num_devices is not None:
        raise ValueError("give num_devices or cluster, not both")
    if isinstance(cluster, Cluster):
        return cluster
    if isinstance(cluster, (str, os.PathLike)):
        return Cluster.from_json(cluster)
    if cluster is not None:
        raise ValueError(f"cluster must be a Cluster or a cluster JSON path, got {type(cluster).__name__}")
    return Cluster.preset(device_kind, 3 if num_devices is None else num_devices)


DEFAULT_MAX_UNITS = 2000  # placement units an episode places; a bigger graph is coarsened (fit_units)


class CoarsenedGraphWarning(UserWarning):
    """A graph had more placement units than ``max_units`` and is placed coarsened."""


def fit_units(graph: ComputationGraph, max_units: int | None) -> ComputationGraph:
    """``graph``, or, when it has more than ``max_units`` placement units, ``graph`` coarsened to at most that many
    (:func:`placement_env.coarsen`, same ops and name) with a :class:`CoarsenedGraphWarning` saying so.

    The encoders' memory and time grow with the units (attention and spectral maps with their square), so an
    unbounded graph would exhaust memory; ``max_units=None`` keeps every unit."""
    if max_units is None or graph.num_units <= checked_count("max_units", max_units):
        return graph
    coarse = coarsen(graph, max_units, name=graph.name)
    warnings.warn(CoarsenedGraphWarning(
        f"graph {graph.name!r} has {graph.num_units} placement units, more than max_units={max_units}: it is placed "
        f"coarsened to {coarse.num_units} units (same ops; max_units=None keeps every unit)"), stacklevel=3)
    return coarse


class PlacementTask:
    """Graphs to place on a cluster, with fixed-size padded observations.

    Args:
        graph: a graph name / path / object, or a list of them (one drawn per episode).
        num_devices: devices of kind ``device_kind`` (default 3), or
        cluster: a :class:`Cluster` or a cluster JSON path.
        max_nodes: padding for placement units (default: the largest graph's unit count).
        max_devices: padding for devices (default: the cluster's device count).
        max_edges: padding for unit-graph edges (default: the largest graph's).
        param_factor: static bytes per parameter byte in the simulator.
        flatten: store ``embedding`` and ``edge_index`` row-major as 1-D arrays (the default,
            which stable-baselines3 expects of a ``Box``) instead of as matrices.
        max_units: a graph with more placement units is coarsened to this many (:func:`fit_units`; default
            2,000; None: never).
        microbatches, schedule: the step simulated: m >= 1 micro-batches under ``"1f1b"`` or ``"gpipe"``
            (``docs/spec/simulator.md`` section 3a; default 1, the plain step).
    """

    def __init__(self, graph="default", num_devices: int | None = None, cluster=None, max_nodes: int | None = None,
                 max_devices: int | None = None, param_factor: float = DEFAULT_PARAM_FACTOR,
                 device_kind: str = DEFAULT_KIND, flatten: bool = True, max_edges: int | None = None,
                 max_units: int | None = DEFAULT_MAX_UNITS, microbatches: int = 1,
                 schedule: str = DEFAULT_SCHEDULE) -> None:
        self.flatten = bool(flatten)
        self.graphs = [fit_units(g, max_units) for g in resolve_graphs(graph)]
        self.schedule = checked_schedule(schedule)
        self.microbatches = checked_microbatches(microbatches)
        for g in self.graphs:
            checked_microbatches(microbatches, g)
        self.units: list[UnitGraph] = [unit_graph(g) for g in self.graphs]
        self.cluster = _resolve_cluster(num_devices, cluster, device_kind)
        self.param_factor = checked_param_factor(param_factor)
        biggest = max(u.num_units for u in self.units)
        self.max_nodes = biggest if max_nodes is None else checked_count("max_nodes", max_nodes)
        for g, u in zip(self.graphs, self.units):
            if not np.any(g.cost > 0):  # every placement without transfers is optimal; rewards relative to 0 s
                raise ValueError(f"graph {g.name!r}: every op costs 0 s, so there is no step time to learn to reduce")
            if u.num_units > self.max_nodes:
                raise ValueError(f"graph {g.name!r} has {u.num_units} placement units, more than "
                                 f"max_nodes={self.max_nodes}; pad more, or coarsen the graph "
                                 f"(placement_env.coarsen_to_fit)")
        m = self.cluster.num_devices
        self.max_devices = m if max_devices is None else checked_count("max_devices", max_devices)
        if m > self.max_devices:
            raise ValueError(f"the cluster has {m} devices, more than max_devices={self.max_devices}")
        most_edges = max(u.num_edges for u in self.units)
        self.max_edges = max(1, most_edges) if max_edges is None else checked_count("max_edges", max_edges)
        for g, u in zip(self.graphs, self.units):
            if u.num_edges > self.max_edges:
                raise ValueError(f"graph {g.name!r} has {u.num_edges} unit edges, more than "
                                 f"max_edges={self.max_edges}; pad more, or coarsen the graph "
                                 f"(placement_env.coarsen_to_fit)")
        self.num_features = len(STATIC_FEATURES) + self.max_devices + 1
        self._simulators: dict[int, Simulator] = {}
        self._initial: dict[tuple[int, str], np.ndarray] = {}
        self._padded = [self._pad(u) for u in self.units]
        onehot = np.zeros(self.max_devices, dtype=np.int8)
        onehot[m - 1] = 1
        self.gpu_onehot = onehot

    # ----------------------------------------------------------- spaces
    def observation_space(self) -> spaces.Dict:
        n, e, f = self.max_nodes, self.max_edges, self.num_features
        emb_shape, edge_shape = ((n * f,), (2 * e,)) if self.flatten else ((n, f), (2, e))
        return spaces.Dict({
            "embedding": spaces.Box(0.0, 1.0, emb_shape, np.float32),
            "edge_index": spaces.Box(0, max(n - 1, 1), edge_shape, np.int64),
            "edge_mask": spaces.MultiBinary(e),
            "node_mask": spaces.MultiBinary(n),
            "visited": spaces.MultiBinary(n),
            "gpu_onehot": spaces.MultiBinary(self.max_devices),
            "graph_id": spaces.Box(0, max(len(self.graphs) - 1, 1), (1,), np.int64),
        })

    def _pad(self, u: UnitGraph) -> dict:
        n, e = self.max_nodes, self.max_edges
        static = np.zeros((n, len(STATIC_FEATURES)), np.float32)
        static[:u.num_units] = u.static
        edge_index = np.zeros((2, e), np.int64)
        edge_index[:, :u.num_edges] = u.edges
        edge_mask = np.zeros(e, np.int8)
        edge_mask[:u.num_edges] = 1
        node_mask = np.zeros(n, np.int8)
        node_mask[:u.num_units] = 1
        return {"static": static, "edge_index": edge_index, "edge_mask": edge_mask, "node_mask": node_mask}

    def observation(self, gi: int, unit_devices: np.ndarray, visited: np.ndarray, current: int = -1) -> dict:
        """The observation for graph ``gi`` with units on ``unit_devices`` (``current``: unit to place next)."""
        pad, nu = self._padded[gi], self.units[gi].num_units
        emb = np.zeros((self.max_nodes, self.num_features), np.float32)
        k = len(STATIC_FEATURES)
        emb[:, :k] = pad["static"]
        emb[np.arange(nu), k + unit_devices] = 1.0
        if current >= 0:
            emb[current, -1] = 1.0
        vis = np.zeros(self.max_nodes, np.int8)
        vis[:nu] = visited
        edges = pad["edge_index"]
        embedding, edge_index = (emb.reshape(-1), edges.reshape(-1)) if self.flatten else (emb, edges)
        return {"embedding": embedding, "edge_index": edge_index.copy(), "edge_mask": pad["edge_mask"].copy(),
                "node_mask": pad["node_mask"].copy(), "visited": vis, "gpu_onehot": self.gpu_onehot.copy(),
                "graph_id": np.array([gi], np.int64)}

    # ------------------------------------------------------- simulation
    def simulator(self, gi: int) -> Simulator:
        sim = self._simulators.get(gi)
        if sim is None:
            sim = self._simulators[gi] = Simulator(self.graphs[gi], self.cluster, self.param_factor,
                                                             self.microbatches, self.schedule)
        return sim

    def checked_units(self, gi: int, unit_devices: np.ndarray) -> np.ndarray:
        """``unit_devices`` as int64 device indices, or a ``ValueError`` naming the first unit whose entry
        is not a device of the cluster (out of range, fractional, NaN, not a number)."""
        m = self.cluster.num_devices
        values = np.asarray(unit_devices)
        if values.dtype.kind in "iu":
            ok = (values >= 0) & (values < m)
        elif values.dtype.kind == "f":
            with np.errstate(invalid="ignore"):
                ok = (values >= 0) & (values < m) & (values == np.floor(values))  # False for NaN
        else:
            raise ValueError(f"an action holds device indices (integers), got an array of {values.dtype}")
        bad = np.nonzero(~ok)[0]
        if bad.size:
            u = int(bad[0])
            value = values[u].item()
            if isinstance(value, float) and not value.is_integer():  # NaN, inf, 1.5
                raise ValueError(f"action puts unit {self.units[gi].names[u]!r} (index {u}) on {value!r}, "
                                 f"which is not a device index (an integer in 0..{m - 1})")
            raise ValueError(f"action puts unit {self.units[gi].names[u]!r} (index {u}) on device "
                             f"{value!r}, but the cluster has devices 0..{m - 1}")
        return values.astype(np.int64)

    def evaluate(self, gi: int, unit_devices: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
        """``(makespan s, peak bytes per device, busy s per device)`` of a unit placement."""
        return self.simulator(gi).run(unit_devices[self.units[gi].unit_of])

    def overflow(self, peak: np.ndarray) -> np.ndarray:
        """Bytes over capacity per device."""
        return np.maximum(0.0, peak - self.cluster.memory)

    # ------------------------------------------------------ start states
    def initial_units(self, gi: int, kind: str, rng: np.random.Generator) -> np.ndarray:
        """A device per unit: ``single`` (all on the fastest device; when that runs out of memory in the
        simulator, the installed placers' placement within memory,
        :func:`~placement_env.envs.starts.start_within_memory`, if any fits: that of ``baselines`` is the fastest
        of its fast placers'), ``random``, ``round_robin`` (in topological order), or the name of an installed
        placer (:func:`~placement_env.envs.starts.start_names`: those of ``baselines``).

        Raises ``ValueError`` for a name no package offers."""
        u, m = self.units[gi], self.cluster.num_devices
        if kind == "single":
            if (gi, kind) not in self._initial:
                graph, fastest = self.graphs[gi], int(np.argmax(self.cluster.speed))
                units = np.full(u.num_units, fastest, np.int64)
                _, peak, _ = self.simulator(gi).run(units[graph.unit_of])
                if np.any(peak > self.cluster.memory):
                    fits = start_within_memory(graph, self.cluster)
                    if fits is not None:  # else nothing fits: start from one device, out of memory
                        units = graph.unit_placement(fits)
                self._initial[gi, kind] = units
            return self._initial[gi, kind].copy()
        if kind == "random":
            return rng.integers(0, m, u.num_units).astype(np.int64)
        if kind == "round_robin":
            out = np.empty(u.num_units, np.int64)
            out[u.topological_order] = np.arange(u.num_units) % m
            return out
        placer = start_placer(kind)
        if (gi, kind) not in self._initial:  # deterministic (seed 0): place once per graph
            self._initial[gi, kind] = self.graphs[gi].unit_placement(placer(self.graphs[gi], self.cluster, 0))
        return self._initial[gi, kind].copy()

    def draw_graph(self, rng: np.random.Generator) -> int:
        return int(rng.integers(len(self.graphs))) if len(self.graphs) > 1 else 0


REWARD_SCALES = ("relative", "seconds")


class Episode:
    """The state of one episode common to both environments: the graph drawn, the
    current unit placement and its makespan, the reward scale, and the best placement seen."""

    def __init__(self, task: PlacementTask, gi: int, units: np.ndarray, reward_scale: str,
                 memory_penalty: float) -> None:
        if reward_scale not in REWARD_SCALES:
            raise ValueError(f"reward_scale must be one of {REWARD_SCALES}, got {reward_scale!r}")
        self.task, self.gi, self.units = task, gi, units
        self.reward_scale, self.memory_penalty = reward_scale, float(memory_penalty)
        self.visited = np.zeros(task.units[gi].num_units, np.int8)
        self.best = (True, np.inf)
        self.best_nodes = np.zeros(0, np.int64)
        self.makespan, self.peak, self.busy = task.evaluate(gi, units)
        self.initial_makespan = self.makespan
        self._consider_best()

    @property
    def time_scale(self) -> float:
        """Seconds per reward unit of time: the initial makespan (relative) or 1 (seconds)."""
        return self.initial_makespan if self.reward_scale == "relative" else 1.0

    def penalty(self, peak: np.ndarray) -> float:
        """``c * sum_d overflow_d``, overflow as a fraction of memory (relative) or in GB (seconds)."""
        over = self.task.overflow(peak)
        if self.reward_scale == "relative":
            return self.memory_penalty * float(np.sum(over / self.task.cluster.memory))
        return self.memory_penalty * float(over.sum()) / 1e9

    def move_to(self, units: np.ndarray) -> tuple[float, float]:
        """Adopt a new unit placement; returns ``(previous makespan, previous penalty)``."""
        before = (self.makespan, self.penalty(self.peak))
        self.units = units
        self.makespan, self.peak, self.busy = self.task.evaluate(self.gi, units)
        self._consider_best()
        return before

    @property
    def oom(self) -> bool:
        return bool(np.any(self.task.overflow(self.peak) > 0))

    def _consider_best(self) -> None:
        if (self.oom, self.makespan) < self.best:
            self.best = (self.oom, self.makespan)
            self.best_nodes = self.node_placement()

    def node_placement(self) -> np.ndarray:
        return self.units[self.task.units[self.gi].unit_of]

    def info(self) -> dict:
        lb = self.task.simulator(self.gi).lower_bound
        return {"makespan": self.makespan, "peak_memory": self.peak.copy(), "busy": self.busy.copy(),
                "oom": self.oom, "lb_ratio": lb_ratio(self.makespan, lb), "best_placement": self.best_nodes.copy(),
                "best_makespan": self.best[1], "best_oom": self.best[0], "graph": self.task.graphs[self.gi].name}

    def render(self, mode: str, header: str):
        from placement_env.envs.render import gantt_rgb, summary_text  # matplotlib: only when rendering

        graph = self.task.graphs[self.gi]
        result = self.task.simulator(self.gi).simulate(self.node_placement())
        names = [d.name for d in self.task.cluster.devices]
        if mode == "ansi":
            return summary_text(result, self.task.cluster.memory, names, header)
        return gantt_rgb(result, stepped_graph(graph, result.microbatches).ops, names, title=header)
