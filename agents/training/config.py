"""What one training run needs, checked once: :class:`TrainConfig`."""

from __future__ import annotations

import json
import math
import sys
import warnings
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from agents.names import ALGORITHMS, ENCODER_NAMES, check_encoder_options
from agents.training.progress import PROGRESS_MODES
from placement_env import Cluster, ComputationGraph
from placement_env.checks import checked_finite
from placement_env.cli import check_output_paths
from placement_env.envs.task import (
    DEFAULT_MAX_UNITS,
    CoarsenedGraphWarning,
    fit_units,
    initial_placement_names,
    resolve_graphs,
)
from placement_env.sim.pipeline import DEFAULT_SCHEDULE, Step

BIG_GRAPH_OPS, BIG_GRAPH_UNITS = 5_000, 1_000  # from these sizes on, train.py prints its memory estimate


def estimated_peak_bytes(ops: int, units: int) -> float:
    """A rough estimate of ``train.py``'s peak memory (bytes) for a graph of ``ops`` ops placed as ``units`` units:
    0.5 GiB (the interpreter, torch and the libraries) + 3 KiB per op (the graph, its simulator and the compared
    placers) + 130 bytes per unit squared (the encoder's dense per-graph matrices and attention): a guide, not a
    bound (the fit: ``docs/training.md``)."""
    return 0.5 * 2**30 + 3 * 2**10 * ops + 130.0 * units**2


def parse_encoder_options(items: list[str] | tuple[str, ...]) -> dict[str, Any]:
    """``["use_low=false", "num_layers=3"]`` as keyword arguments (values read as JSON: numbers, true/false,
    strings otherwise); a ``ValueError`` names an item that is not ``KEY=VALUE``."""
    options: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.isidentifier():
            raise ValueError(f"--encoder-option must be KEY=VALUE, got {item!r}")
        try:
            options[key] = json.loads(value)
        except json.JSONDecodeError:
            options[key] = value
    return options


@dataclass(frozen=True)
class TrainConfig:
    """One training run: the problem (graph and cluster), the policy, the algorithm, the limits, the outputs.

    Frozen: every field is checked when the config is built (a ``ValueError`` naming it) and cannot change
    after. Times are seconds; ``out`` is the output folder.

    The problem: ``graph`` (a shipped name such as ``default`` or ``cifar10/3``, a suite name, or a graph file),
    on ``devices`` identical devices of ``device_kind`` (default 3; in nodes of ``per_node`` devices joined by the
    kind's network when given) or the cluster file ``cluster``.
    The policy: ``encoder`` (``graph_encoders.list_encoders()``) with ``encoder_options`` and width
    ``hidden_dim``; ``expected_moves`` is the head's stay prior (units an untrained policy moves per step;
    0 turns it off: the spec's head exactly). The algorithm: ``algo`` (:data:`agents.names.ALGORITHMS`),
    ``learning_rate``, ``epsilon`` (REINFORCE's uniform exploration), ``n_envs`` parallel environments.
    The limits, whichever comes first: ``timesteps`` environment steps, ``episodes`` (REINFORCE), and
    ``budget_seconds`` of training. Episodes last ``episode_length`` steps (the whole-graph environment) and
    start from ``initial_placement``. A graph of more than ``max_units`` placement units is trained on coarsened
    to that many (a notice says so). ``progress``: ``"bar"`` (a bar on stderr), ``"lines"`` (a line every 5 s),
    ``"off"``. ``compare_searches``: the outputs also compare the search placers (``local-search`` and
    ``anneal``) given the run's own search time (split over the graphs of a suite), so that a run is judged
    against the strongest classical result at equal time.
    """

    graph: str = "default"
    devices: int | None = None
    cluster: str | None = None
    device_kind: str = "p100"
    per_node: int | None = None
    encoder: str = "fadp-gt"
    encoder_options: Mapping[str, Any] = field(default_factory=dict)
    hidden_dim: int = 64
    algo: str = "ppo"
    timesteps: int = 100_000
    episodes: int = 10_000
    budget_seconds: float = 60.0
    episode_length: int = 8
    seed: int = 0
    n_envs: int = 1
    initial_placement: str = "single"
    expected_moves: float = 1.0
    learning_rate: float = 1e-3
    epsilon: float = 0.1
    checkpoint_every: int = 2048
    max_units: int = DEFAULT_MAX_UNITS
    out: str = "runs/latest"
    resume: bool = False
    progress: str = "off"
    compare_searches: bool = True
    microbatches: int = 1
    schedule: str = DEFAULT_SCHEDULE

    def __post_init__(self) -> None:
        if self.encoder not in ENCODER_NAMES:
            raise ValueError(f"unknown encoder {self.encoder!r}; known: {', '.join(ENCODER_NAMES)}")
        if self.algo not in ALGORITHMS:
            raise ValueError(f"unknown algorithm {self.algo!r}; use one of {', '.join(ALGORITHMS)}")
        for name in ("timesteps", "episodes", "episode_length", "n_envs", "hidden_dim", "checkpoint_every",
                     "max_units"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be >= 1, got {value}")
        if self.devices is not None:
            if not isinstance(self.devices, int) or self.devices < 1:
                raise ValueError(f"--devices must be >= 1, got {self.devices}")
            if self.cluster is not None:
                raise ValueError("give --devices or --cluster, not both")
        if self.per_node is not None:
            if self.cluster is not None:
                raise ValueError("--per-node shapes a preset cluster (--devices); a --cluster file gives its own "
                                 "links")
            self.preset_cluster()  # a per_node that does not divide the devices: its ValueError names both
        if not (isinstance(self.budget_seconds, (int, float)) and 0 < self.budget_seconds < math.inf):
            raise ValueError(f"--budget-seconds must be positive and finite, got {self.budget_seconds}")
        if not (isinstance(self.learning_rate, (int, float)) and 0 < self.learning_rate < math.inf):
            raise ValueError(f"--learning-rate must be positive and finite, got {self.learning_rate}")
        if not isinstance(self.seed, int) or isinstance(self.seed, bool) or self.seed < 0:
            raise ValueError(f"--seed must be >= 0, got {self.seed}")
        if not (isinstance(self.expected_moves, (int, float)) and 0 <= self.expected_moves < math.inf):
            raise ValueError(f"--expected-moves must be >= 0, got {self.expected_moves}")
        if not 0 <= checked_finite("--epsilon", self.epsilon) <= 1:
            raise ValueError(f"--epsilon must be in [0, 1], got {self.epsilon}")
        if self.progress not in PROGRESS_MODES:
            raise ValueError(f"--progress must be one of {', '.join(PROGRESS_MODES)}, got {self.progress!r}")
        Step(self.microbatches, self.schedule).checked()  # against the graph's batch in problem()
        object.__setattr__(self, "encoder_options", dict(self.encoder_options))
        check_encoder_options(self.encoder, self.encoder_kwargs())  # before torch loads

    def encoder_kwargs(self) -> dict[str, Any]:
        """The encoder's keyword arguments: ``hidden_dim`` and :attr:`encoder_options`."""
        return {"hidden_dim": self.hidden_dim, **self.encoder_options}

    def total_timesteps(self) -> int:
        """The step limit: ``timesteps``, and for REINFORCE also ``episodes`` whole episodes."""
        if self.algo == "reinforce":
            return min(self.timesteps, self.episodes * self.episode_length)
        return self.timesteps

    def env_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of the environment (``gymnasium.make``) this run trains on."""
        kwargs: dict[str, Any] = {"graph": self.graph, "initial_placement": self.initial_placement,
                                  "max_units": self.max_units}
        if self.cluster:
            kwargs["cluster"] = self.cluster
        elif self.per_node is not None:
            kwargs["cluster"] = self.preset_cluster()
        else:
            kwargs["num_devices"] = 3 if self.devices is None else self.devices
            kwargs["device_kind"] = self.device_kind
        if self.algo != "maskable-ppo":
            kwargs["episode_length"] = self.episode_length
        if self.microbatches > 1:
            kwargs.update(microbatches=self.microbatches, schedule=self.schedule)
        return kwargs

    @property
    def step(self) -> Step:
        """The step this run's placements are judged by."""
        return Step(self.microbatches, self.schedule)

    def env_id(self) -> str:
        """``DevicePlacementSequential-v0`` for MaskablePPO (Placeto's MDP), else ``DevicePlacement-v0``."""
        return "DevicePlacementSequential-v0" if self.algo == "maskable-ppo" else "DevicePlacement-v0"

    def problem(self, notify: bool = False) -> tuple[list[ComputationGraph], Cluster]:
        """The graphs and the cluster this run places, after checking everything the config names that does not
        need torch (start placement, output folder, graph, cluster): a ``ValueError`` or ``OSError`` names it.
        With ``notify``, a notice on stderr for each graph placed coarsened."""
        if self.initial_placement not in initial_placement_names():
            raise ValueError(f"unknown --initial-placement {self.initial_placement!r}; use one of "
                             f"{', '.join(initial_placement_names())}")
        try:
            check_output_paths(folder=self.out)
        except ValueError as exc:
            raise ValueError(f"--out {exc}") from None
        graphs = []
        for graph in resolve_graphs(self.graph):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", CoarsenedGraphWarning)
                fitted = fit_units(graph, self.max_units)
            if fitted is not graph and notify:
                print(f"notice: graph {graph.name!r} has {graph.num_units} placement units, more than --max-units "
                      f"{self.max_units}: training places it coarsened to {fitted.num_units} units (same ops; the "
                      f"encoders' memory grows with the square of the units)", file=sys.stderr)
            if notify and (graph.num_nodes >= BIG_GRAPH_OPS or fitted.num_units >= BIG_GRAPH_UNITS):
                gib = estimated_peak_bytes(graph.num_nodes, fitted.num_units) / 2**30
                print(f"notice: graph {graph.name!r} ({graph.num_nodes:,} ops, {fitted.num_units:,} units placed): "
                      f"expect a peak memory of about {gib:.1f} GiB", file=sys.stderr)
            self.step.checked(fitted)  # no more micro-batches than the batch it was traced with
            graphs.append(fitted)
        return graphs, Cluster.from_json(self.cluster) if self.cluster else self.preset_cluster()

    def preset_cluster(self) -> Cluster:
        """The preset cluster of ``devices`` (default 3) of ``device_kind``, in nodes of ``per_node`` if given."""
        return Cluster.preset(self.device_kind, 3 if self.devices is None else self.devices, per_node=self.per_node)

    def as_dict(self) -> dict[str, Any]:
        """Every field, as plain data (``results.json``'s ``hyperparameters``)."""
        return asdict(self) | {"encoder_options": dict(self.encoder_options)}
