"""The steering policy: which units the annealing moves and where, drawn from the placement it is at.

A :class:`SteeringPolicy` is weight vectors over the features of :mod:`agents.steering.features`, two for
placing freely:

.. math::

    P(\\text{move } u) = \\operatorname{softmax}_u(w_{\\text{unit}} \\cdot f_u + w_{\\text{chain}} \\cdot c_u), \\qquad
    P(u \\to d) = \\operatorname{softmax}_{d \\ne \\text{dev}(u)}(w_{\\text{device}} \\cdot g_{u,d})

where ``c_u`` are the unit's :data:`~agents.steering.critical_chain.CHAIN_FEATURES` (design 2: whether it is on the
current placement's critical chain, at a transfer of it, waiting for its device there; computed only when
``w_chain`` is not zero, by one simulation a step). With the vectors zero it draws units and devices uniformly: it
is then exactly the plain annealing's proposal (:func:`baselines.anneal.unit_neighbours`), which is where its
training starts. The features and softmaxes are computed by the compiled loops of :mod:`agents.steering.draws`.
:class:`SteeredProposals` is the :class:`~baselines.anneal.Proposals` the annealing calls each step: the same shares
of moves, swaps and block moves as the plain annealing (:class:`~baselines.anneal.AnnealConfig`), the moved unit and
its device drawn from the policy (a swap's first unit too; its partner, as in the plain annealing, uniformly among
the units on other devices; a block move takes the drawn unit's nearest units along). In contiguous mode (pipeline
stages) the neighbours are :func:`~baselines.stages.stage_neighbours`'s, whose shifts draw their boundary and side
from a third vector over the stage features (:meth:`SteeredProposals.boundary`); exchanges and cuts stay uniform.

A policy is a file of plain JSON (:meth:`SteeringPolicy.save` / :meth:`SteeringPolicy.load`): the feature
names, the vectors, and what made it.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from baselines.anneal import AnnealConfig, NearestUnits, nearest_units, unit_neighbours
from baselines.stages import stage_neighbours
from placement_env.cluster import Cluster
from placement_env.graph.model import ComputationGraph
from placement_env.graph.stage_order import program_order
from placement_env.json_files import read_json_file, write_json_file
from placement_env.plan.stages import unit_can_begin, unit_parameters
from placement_env.sim.pipeline import PLAIN_STEP, Step
from placement_env.sim.simulator import DEFAULT_PARAM_FACTOR

from .critical_chain import CHAIN_FEATURES, CriticalChain
from .draws import device_choices, unit_logits
from .features import DEVICE_FEATURES, STAGE_FEATURES, UNIT_FEATURES, SteeringView, steering_view

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
    stage: tuple[float, ...] = (0.0,) * len(STAGE_FEATURES)
    chain: tuple[float, ...] = (0.0,) * len(CHAIN_FEATURES)

    def __post_init__(self) -> None:
        for name, values, names in (("unit", self.unit, UNIT_FEATURES), ("device", self.device, DEVICE_FEATURES),
                                    ("stage", self.stage, STAGE_FEATURES), ("chain", self.chain, CHAIN_FEATURES)):
            if len(values) != len(names) or not np.all(np.isfinite(values)):
                raise ValueError(f"a steering policy's {name} weights must be {len(names)} finite numbers "
                                 f"({', '.join(names)}), got {list(values)!r}")

    @property
    def vector(self) -> np.ndarray:
        """The weights as one vector: ``unit``, ``device``, ``stage``, then ``chain``."""
        return np.array([*self.unit, *self.device, *self.stage, *self.chain], dtype=np.float64)

    @classmethod
    def from_vector(cls, vector: np.ndarray, made_by: dict | None = None) -> SteeringPolicy:
        """The policy of :attr:`vector` ``vector``; a shorter vector, as earlier designs trained them, leaves the
        weights it lacks (``stage``, ``chain``) zero."""
        sizes = [len(UNIT_FEATURES), len(DEVICE_FEATURES), len(STAGE_FEATURES), len(CHAIN_FEATURES)]
        values = [float(x) for x in vector] + [0.0] * max(sum(sizes) - len(vector), 0)
        ends = np.cumsum(sizes)
        unit, device, stage, chain = (tuple(values[e - s:e]) for s, e in zip(sizes, ends))
        return cls(unit, device, dict(made_by or {}), stage, chain)

    def to_dict(self) -> dict:
        return {"format": FORMAT, "unit_features": dict(zip(UNIT_FEATURES, self.unit)),
                "device_features": dict(zip(DEVICE_FEATURES, self.device)),
                "stage_features": dict(zip(STAGE_FEATURES, self.stage)),
                "chain_features": dict(zip(CHAIN_FEATURES, self.chain)), "made_by": self.made_by}

    @classmethod
    def from_dict(cls, data: dict, source: str = "steering policy") -> SteeringPolicy:
        """The policy of :meth:`to_dict`'s data (a file without ``stage_features`` or ``chain_features``, as
        earlier designs wrote them: those weights zero). Raises ValueError naming ``source`` and the missing or
        unknown feature."""
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ValueError(f"{source} is not a steering policy (no \"format\": \"{FORMAT}\")")
        weights = []
        for key, names in (("unit_features", UNIT_FEATURES), ("device_features", DEVICE_FEATURES),
                           ("stage_features", STAGE_FEATURES), ("chain_features", CHAIN_FEATURES)):
            optional = key in ("stage_features", "chain_features")
            given = data.get(key, dict.fromkeys(names, 0.0) if optional else None)
            if not isinstance(given, dict) or set(given) != set(names):
                raise ValueError(f"{source}: {key} must name exactly {', '.join(names)}; got "
                                 f"{sorted(given) if isinstance(given, dict) else given!r}")
            weights.append(tuple(float(given[n]) for n in names))
        return cls(weights[0], weights[1], dict(data.get("made_by", {})), weights[2], weights[3])

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
        contiguous: draw the contiguous neighbours, their shifts steered by the stage weights.
        param_factor: static bytes per parameter byte (the memory features).
        step: micro-batches and schedule of the step searched (the critical chain's simulation).
    """

    def __init__(self, policy: SteeringPolicy, graph: ComputationGraph, cluster: Cluster,
                 config: AnnealConfig | None = None, contiguous: bool = False,
                 param_factor: float = DEFAULT_PARAM_FACTOR, step: Step = PLAIN_STEP) -> None:
        config = config or AnnealConfig()
        self.view: SteeringView = steering_view(graph, cluster, param_factor)
        self.unit_weights, self.device_weights = np.array(policy.unit), np.array(policy.device)
        self.stage_weights = np.array(policy.stage)
        self.chain_weights = np.array(policy.chain)
        steer_chain = not contiguous and bool(np.any(self.chain_weights != 0))
        self.chain = CriticalChain(graph, cluster, step, param_factor) if steer_chain else None
        self.config, self.contiguous = config, contiguous
        self.near: NearestUnits = nearest_units(graph, config.block_max - 1)
        self.order = program_order(graph) if contiguous else np.zeros(0, dtype=np.int64)
        self.weight = unit_parameters(graph) if contiguous else None
        self.can_begin = unit_can_begin(graph) if contiguous else None

    def unit_probabilities(self, current: np.ndarray) -> np.ndarray:
        """P(move u) for every unit under the placement ``current``."""
        v = self.view  # unit_features(current) @ unit_weights, compiled (agents.steering.draws)
        logits = unit_logits(current, v.cost, v.memory, v.target, v.weight, v.offsets, v.speed, v.capacity,
                             self.unit_weights)
        if self.chain is not None:
            logits = logits + self.chain.unit_features(current) @ self.chain_weights
        p = np.exp(logits - logits.max())
        return p / p.sum()

    def targets(self, current: np.ndarray, units: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """A device for each of ``units``, drawn from P(u -> d) over the devices other than its own (Gumbel-max)."""
        v = self.view  # argmax(device_features(current, units) @ device_weights + Gumbel noise), compiled
        gumbel = rng.gumbel(size=(units.size, v.num_devices))
        return device_choices(current, units, gumbel, v.cost, v.memory, v.target, v.weight, v.offsets, v.speed,
                              v.capacity, v.node, self.device_weights)

    def boundary(self, current: np.ndarray) -> Callable[[np.ndarray, np.ndarray, np.random.Generator],
                                                        tuple[int, bool]]:
        """A shift's draw for :func:`~baselines.stages.stage_neighbours` under ``current``: the boundary from
        softmax(w_stage . h_b) over the boundaries (all but ``toward_lighter``), the side with
        P(the left stage grows) = sigmoid(w_toward_lighter x (right load - left load) / busiest), so that a
        positive weight moves units toward the lighter stage. Its distribution is computed once per step."""
        weights = self.stage_weights
        found: dict[str, np.ndarray] = {}

        def draw(starts: np.ndarray, devices: np.ndarray, rng: np.random.Generator) -> tuple[int, bool]:
            if "p" not in found:
                h = self.view.boundary_features(current, devices)
                logits = h[:, :-1] @ weights[:-1]
                p = np.exp(logits - logits.max())
                found["p"] = p / p.sum()
                found["left"] = 1.0 / (1.0 + np.exp(-weights[-1] * h[:, -1]))
            b = int(rng.choice(found["p"].size, p=found["p"]))
            return b + 1, bool(rng.random() < found["left"][b])

        return draw

    def __call__(self, current: np.ndarray, batch: int, rng: np.random.Generator) -> np.ndarray:
        m, nu = self.view.num_devices, current.size
        if self.contiguous:
            return stage_neighbours(current, self.order, m, batch, rng, self.weight, self.boundary(current),
                                    self.can_begin)
        moved = rng.choice(nu, size=batch, p=self.unit_probabilities(current))
        return unit_neighbours(current, self.near, m, batch, rng, self.config, moved,
                               self.targets(current, moved, rng))
