"""The steering policy: which units the annealing moves and where, drawn from the placement it is at.

A :class:`SteeringPolicy` is two weight vectors over the features of :mod:`agents.steering.features`:

.. math::

    P(\\text{move } u) = \\operatorname{softmax}_u(w_{\\text{unit}} \\cdot f_u), \\qquad
    P(u \\to d) = \\operatorname{softmax}_{d \\ne \\text{dev}(u)}(w_{\\text{device}} \\cdot g_{u,d})

With both vectors zero it draws units and devices uniformly: it is then exactly the plain annealing's proposal
(:func:`baselines.anneal.unit_neighbours`), which is where its training starts. :class:`SteeredProposals` is the
:class:`~baselines.anneal.Proposals` the annealing calls each step: the same shares of moves, swaps and block
moves as the plain annealing (:class:`~baselines.anneal.AnnealConfig`), the moved unit and its device drawn from
the policy (a swap's first unit too; its partner, as in the plain annealing, uniformly among the units on other
devices; a block move takes the drawn unit's nearest units along). In contiguous mode it steers nothing yet and
draws the plain :func:`~baselines.stages.stage_neighbours`.

A policy is a file of plain JSON (:meth:`SteeringPolicy.save` / :meth:`SteeringPolicy.load`): the feature
names, the two vectors, and what made it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np

from baselines.anneal import AnnealConfig, NearestUnits, nearest_units, unit_neighbours
from baselines.stages import program_order, stage_neighbours, unit_parameters
from placement_env.cluster import Cluster
from placement_env.graph.model import ComputationGraph
from placement_env.json_files import read_json_file, write_json_file
from placement_env.sim.simulator import DEFAULT_PARAM_FACTOR

from .features import DEVICE_FEATURES, UNIT_FEATURES, SteeringView, steering_view

FORMAT = "steering-policy/1"


@dataclass(frozen=True)
class SteeringPolicy:
    """The weights of the two softmaxes (module docstring) and the record of how they were made.

    Attributes:
        unit: one weight per :data:`~agents.steering.features.UNIT_FEATURES`.
        device: one weight per :data:`~agents.steering.features.DEVICE_FEATURES`.
        made_by: free-form provenance (the command, the iterations, the problems), saved with the weights.
    """

    unit: tuple[float, ...] = (0.0,) * len(UNIT_FEATURES)
    device: tuple[float, ...] = (0.0,) * len(DEVICE_FEATURES)
    made_by: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name, values, names in (("unit", self.unit, UNIT_FEATURES), ("device", self.device, DEVICE_FEATURES)):
            if len(values) != len(names) or not np.all(np.isfinite(values)):
                raise ValueError(f"a steering policy's {name} weights must be {len(names)} finite numbers "
                                 f"({', '.join(names)}), got {list(values)!r}")

    @property
    def vector(self) -> np.ndarray:
        """The weights as one vector: ``unit`` then ``device``."""
        return np.array([*self.unit, *self.device], dtype=np.float64)

    @classmethod
    def from_vector(cls, vector: np.ndarray, made_by: dict | None = None) -> SteeringPolicy:
        """The policy of :attr:`vector` ``vector``."""
        k = len(UNIT_FEATURES)
        values = [float(x) for x in vector]
        return cls(tuple(values[:k]), tuple(values[k:]), dict(made_by or {}))

    def to_dict(self) -> dict:
        return {"format": FORMAT, "unit_features": dict(zip(UNIT_FEATURES, self.unit)),
                "device_features": dict(zip(DEVICE_FEATURES, self.device)), "made_by": self.made_by}

    @classmethod
    def from_dict(cls, data: dict, source: str = "steering policy") -> SteeringPolicy:
        """The policy of :meth:`to_dict`'s data. Raises ValueError naming ``source`` and the missing or unknown
        feature."""
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ValueError(f"{source} is not a steering policy (no \"format\": \"{FORMAT}\")")
        weights = []
        for key, names in (("unit_features", UNIT_FEATURES), ("device_features", DEVICE_FEATURES)):
            given = data.get(key)
            if not isinstance(given, dict) or set(given) != set(names):
                raise ValueError(f"{source}: {key} must name exactly {', '.join(names)}; got "
                                 f"{sorted(given) if isinstance(given, dict) else given!r}")
            weights.append(tuple(float(given[n]) for n in names))
        return cls(weights[0], weights[1], dict(data.get("made_by", {})))

    def save(self, path: str | os.PathLike) -> None:
        write_json_file(self.to_dict(), path)

    @classmethod
    def load(cls, path: str | os.PathLike) -> SteeringPolicy:
        """Raises ValueError naming the file when it is not a steering policy."""
        return cls.from_dict(read_json_file(path), f"steering policy {os.fspath(path)!r}")


class SteeredProposals:
    """The annealing's neighbours drawn from ``policy`` (module docstring): a
    :class:`~baselines.anneal.Proposals` for one problem.

    Args:
        policy: the weights.
        graph, cluster: the problem.
        config: the shares of moves, swaps and block moves and the largest block (the plain annealing's).
        contiguous: draw the plain contiguous neighbours (nothing steered yet in that mode).
        param_factor: static bytes per parameter byte (the memory features).
    """

    def __init__(self, policy: SteeringPolicy, graph: ComputationGraph, cluster: Cluster,
                 config: AnnealConfig | None = None, contiguous: bool = False,
                 param_factor: float = DEFAULT_PARAM_FACTOR) -> None:
        config = config or AnnealConfig()
        self.view: SteeringView = steering_view(graph, cluster, param_factor)
        self.unit_weights, self.device_weights = np.array(policy.unit), np.array(policy.device)
        self.config, self.contiguous = config, contiguous
        self.near: NearestUnits = nearest_units(graph, config.block_max - 1)
        self.order = program_order(graph) if contiguous else np.zeros(0, dtype=np.int64)
        self.weight = unit_parameters(graph) if contiguous else None

    def unit_probabilities(self, current: np.ndarray) -> np.ndarray:
        """P(move u) for every unit under the placement ``current``."""
        logits = self.view.unit_features(current) @ self.unit_weights
        p = np.exp(logits - logits.max())
        return p / p.sum()

    def targets(self, current: np.ndarray, units: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """A device for each of ``units``, drawn from P(u -> d) over the devices other than its own (Gumbel-max)."""
        logits = self.view.device_features(current, units) @ self.device_weights
        logits[np.arange(units.size), current[units]] = -np.inf
        return np.argmax(logits + rng.gumbel(size=logits.shape), axis=1)

    def __call__(self, current: np.ndarray, batch: int, rng: np.random.Generator) -> np.ndarray:
        m, nu = self.view.num_devices, current.size
        if self.contiguous:
            return stage_neighbours(current, self.order, m, batch, rng, self.weight)
        moved = rng.choice(nu, size=batch, p=self.unit_probabilities(current))
        return unit_neighbours(current, self.near, m, batch, rng, self.config, moved,
                               self.targets(current, moved, rng))
