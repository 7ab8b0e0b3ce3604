"""A pipeline a runtime launches: :class:`PipelinePlan`, made by :func:`plan_from_placement`, read and written as JSON.

A contiguous placement of a graph with module names (its stages in program order, no module split:
:func:`~placement_env.plan.split_points.to_split_points`) becomes a plan with everything a pipeline runtime needs
and everything the simulator predicts for it:

* the stages in order; stage ``s`` runs on pipeline rank ``s`` (the ``s``-th process of the runner, torchrun's
  rank ``s``) and stands for the cluster's device ``device``; it begins at a split point (the module where its
  ops start: ``torch.distributed.pipelining``'s ``split_spec``) and runs the layers ``layers`` (DeepSpeed's
  ``layers[parts[s]:parts[s + 1]]``); ``parameter_bytes`` counts the parameters its ops read (a tied parameter in
  each stage that reads it, as the runtimes copy it); ``simulated_peak_memory`` is the simulator's peak of that
  device (``docs/spec/simulator.md`` section 4, parameters counted ``param_factor`` times) plus the copies of the
  tied parameters it reads that the simulator holds on another stage;
* the micro-batch count and the schedule (``1f1b`` or ``gpipe``);
* the tied parameter groups: a parameter read by ops of more than one stage (GPT-2's ``transformer.wte.weight``,
  read by the embedding on the first stage and the output layer on the last). Each stage holding it keeps a copy;
  the runner sums the copies' gradients before the optimizer step so that they stay one parameter;
* the simulated step (seconds) of the placement under that step;
* what the plan leaves out, stated rather than dropped: the cluster's devices that hold no stage, and stages
  whose ops hold no parameter (which a runtime cannot train: its optimizer gets an empty parameter list).

``PipelinePlan.to_json`` / ``PipelinePlan.from_json`` round-trip it (``python -m placement_env export --format
pipeline-plan`` writes one); the runner is :func:`placement_env.runtime.pipeline_runner.run_pipeline`.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from placement_env.checks import checked_instance, is_number
from placement_env.cluster import Cluster
from placement_env.deprecation import deprecated_function
from placement_env.graph.io import graph_digest
from placement_env.graph.model import ComputationGraph
from placement_env.json_files import read_json_file, write_json_file
from placement_env.parallelism import Parallelism
from placement_env.sim.pipeline import Step, one_step
from placement_env.sim.simulator import DEFAULT_PARAM_FACTOR, simulate

from .module_tree import checked_device_placement
from .schedules import checked_plan_schedule
from .split_points import to_split_points

PLAN_FORMAT = "device-placement-pipeline-plan"
PLAN_VERSION = 2
READABLE_VERSIONS = (1, 2)  # version 1: one replica, one chunk a rank, no recomputation


@dataclass(frozen=True)
class PlanStage:
    """One stage of a :class:`PipelinePlan` (see the module docstring).

    Attributes:
        rank: its pipeline rank (0 = the stage that takes the inputs).
        device: the cluster device it stands for.
        begins_at: the module where it begins (``None`` for the first stage).
        layers: the modules it runs, in program order.
        ops: its forward ops.
        parameter_bytes: bytes of the parameters its ops read.
        simulated_peak_memory: the simulator's peak memory of its device, plus ``param_factor`` times the bytes of
            each tied parameter the stage reads that the simulator holds on another stage (every stage that reads
            a tied parameter holds a copy of it and of its gradient), bytes.
        replica_devices: the device of each data-parallel replica (replica 0's is ``device``); empty for one
            replica.
        recompute: whether its rank keeps only its inputs and reruns the forward in the backward.
    """

    rank: int
    device: int
    begins_at: str | None
    layers: list[str]
    ops: int
    parameter_bytes: float
    simulated_peak_memory: float
    replica_devices: list[int] = field(default_factory=list)
    recompute: bool = False

    @property
    def devices(self) -> list[int]:
        """The device of each replica, replica 0 first."""
        return self.replica_devices or [self.device]


@dataclass(frozen=True)
class TiedGroup:
    """A parameter read by ops of several stages: its (first) qualified name, the ranks of those stages, bytes."""

    parameter: str
    stages: list[int]
    bytes: float


@dataclass(frozen=True)
class PipelinePlan:
    """A pipeline a runtime launches (see the module docstring).

    Attributes:
        graph: the graph's name; ``graph_digest`` its content digest (:func:`~placement_env.graph.io.graph_digest`).
        batch: the batch the graph was traced with (None when it records none).
        cluster: the cluster's name; ``num_devices`` its devices.
        microbatches, schedule: the pipelined step.
        stages: the stages in pipeline order.
        tied: the tied parameter groups.
        simulated_step_seconds: the simulated step of the placement, seconds.
        param_factor: static bytes per parameter byte in ``simulated_peak_memory``.
        unused_devices: the cluster's devices that hold no stage.
        notes: plain sentences on what a user should know (unused devices, stages without parameters).
        replicas: D, the data-parallel replicas of the pipeline (each stage's ``devices``).
        virtual_stages: v, the chunks each pipeline rank runs: ``stages`` lists the ``S x v`` chunks in program
            order, chunk ``c`` on rank ``c mod S`` (v = 1: a stage per rank).
        model_parameter_bytes: the bytes of the graph's parameters, each once (:func:`graph_parameter_bytes`): what the
            runner checks a model against (None in plan files of 0.8).
    """

    graph: str
    graph_digest: str
    batch: int | None
    cluster: str
    num_devices: int
    microbatches: int
    schedule: str
    stages: list[PlanStage]
    tied: list[TiedGroup]
    simulated_step_seconds: float
    param_factor: float = DEFAULT_PARAM_FACTOR
    unused_devices: list[int] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    replicas: int = 1
    virtual_stages: int = 1
    model_parameter_bytes: float | None = None

    @property
    def num_stages(self) -> int:
        """The pipeline's ranks (S: its stages, each on one device of each replica)."""
        return len(self.stages) // self.virtual_stages

    @property
    def devices(self) -> list[list[int]]:
        """``devices[s][r]``: the device of rank ``s`` in replica ``r``."""
        return [self.stages[s].devices for s in range(self.num_stages)]

    @property
    def split_spec(self) -> list[str]:
        """The module where each stage after the first begins (``pipeline(split_spec=...)``)."""
        return [str(stage.begins_at) for stage in self.stages[1:]]

    @property
    def layers(self) -> list[str]:
        """All stages' layers in order (DeepSpeed's ``layers``)."""
        return [layer for stage in self.stages for layer in stage.layers]

    @property
    def parts(self) -> list[int]:
        """DeepSpeed's stage boundaries into :attr:`layers`."""
        return [0, *np.cumsum([len(stage.layers) for stage in self.stages]).tolist()]

    @property
    def stages_without_parameters(self) -> list[int]:
        return [stage.rank for stage in self.stages if stage.parameter_bytes <= 0]

    def to_dict(self) -> dict:
        """The plan as plain JSON data (what :meth:`from_dict` reads)."""
        return {"format": PLAN_FORMAT, "version": PLAN_VERSION, **asdict(self),
                "split_spec": {name: "BEGINNING" for name in self.split_spec}, "parts": self.parts}

    def to_json(self, path: str | os.PathLike) -> None:
        """Write the plan to ``path`` (``.json`` or ``.json.gz``) atomically."""
        write_json_file(self.to_dict(), path)

    @classmethod
    def from_json(cls, path: str | os.PathLike) -> PipelinePlan:
        """Read a plan file; ``ValueError`` naming the file and the first field that is wrong."""
        return cls.from_dict(read_json_file(path), source=str(path))

    @classmethod
    def from_dict(cls, data: Any, source: str = "plan") -> PipelinePlan:
        """A plan from :meth:`to_dict`'s data; ``ValueError`` naming ``source`` and the first wrong field."""
        if not isinstance(data, dict) or data.get("format") != PLAN_FORMAT:
            raise ValueError(f"{source}: not a pipeline plan (no \"format\": \"{PLAN_FORMAT}\")")
        if data.get("version") not in READABLE_VERSIONS:
            raise ValueError(f"{source}: plan version {data.get('version')!r}, this version reads "
                             f"{', '.join(map(str, READABLE_VERSIONS))}")
        get = _Fields(data, source)
        _no_unknown_fields(data, PLAN_FIELDS, source)
        for k, raw in enumerate(data.get("stages") or []):
            if isinstance(raw, dict):
                _no_unknown_fields(raw, STAGE_FIELDS, f"{source}: stage {k}")
        num_devices = get.count("num_devices")
        replicas = get.count("replicas") if "replicas" in data else 1
        virtual = get.count("virtual_stages") if "virtual_stages" in data else 1
        raw_stages = get.array("stages")
        if not raw_stages:
            raise ValueError(f"{source}: a plan has at least one stage")
        if len(raw_stages) % virtual:
            raise ValueError(f"{source}: {len(raw_stages)} stages are not {virtual} virtual stages of each rank")
        ranks = len(raw_stages) // virtual
        stages: list[PlanStage] = []
        for k, raw in enumerate(raw_stages):
            item = _Fields(raw, f"{source}: stage {k}")
            replica_devices = [int(d) for d in item.array("replica_devices")] if "replica_devices" in raw else []
            recompute = raw.get("recompute", False)
            if not isinstance(recompute, bool):
                raise ValueError(f"{source}: stage {k}: recompute must be true or false, got {recompute!r}")
            stage = PlanStage(rank=item.count("rank", 0), device=item.count("device", 0),
                              begins_at=item.optional_text("begins_at"), layers=item.texts("layers"),
                              ops=item.count("ops", 0), parameter_bytes=item.number("parameter_bytes"),
                              simulated_peak_memory=item.number("simulated_peak_memory"),
                              replica_devices=replica_devices, recompute=recompute)
            if stage.rank != k % ranks:
                raise ValueError(f"{source}: stage {k} has rank {stage.rank}; stage k runs on rank k mod {ranks}")
            if len(stage.devices) != replicas or stage.devices[0] != stage.device:
                raise ValueError(f"{source}: stage {k} lists {len(stage.devices)} replica devices beginning with "
                                 f"{stage.devices[0]}; the plan has {replicas} replicas, the first on device "
                                 f"{stage.device}")
            bad = [d for d in stage.devices if not 0 <= d < num_devices]
            if bad:
                raise ValueError(f"{source}: stage {k} is on device {bad[0]}, the plan's cluster has "
                                 f"{num_devices} devices")
            if (k == 0) != (stage.begins_at is None):
                raise ValueError(f"{source}: stage {k} " + ("begins at a module; the first stage begins at the "
                                 "inputs" if k == 0 else "has no begins_at module"))
            if k >= ranks and (stage.devices != stages[k - ranks].devices
                               or stage.recompute != stages[k - ranks].recompute):
                raise ValueError(f"{source}: stage {k} runs on rank {stage.rank}, whose devices and recomputation "
                                 f"stage {k - ranks} gives otherwise")
            stages.append(stage)
        devices = [d for stage in stages[:ranks] for d in stage.devices]
        if len(set(devices)) != len(devices):
            raise ValueError(f"{source}: device {next(d for d in devices if devices.count(d) > 1)} holds two stages")
        tied = []
        for k, raw in enumerate(get.array("tied")):
            item = _Fields(raw, f"{source}: tied group {k}")
            group = TiedGroup(item.text("parameter"), [int(x) for x in item.array("stages")], item.number("bytes"))
            bad = [s for s in group.stages if not (isinstance(s, int) and 0 <= s < len(stages))]
            if bad or len(group.stages) < 2:
                raise ValueError(f"{source}: tied group {k} ({group.parameter}) names stages {group.stages}; it "
                                 f"needs two or more of 0..{len(stages) - 1}")
            tied.append(group)
        microbatches = get.count("microbatches")
        schedule = get.text("schedule")
        try:
            checked_plan_schedule(schedule, ranks, virtual, microbatches)
        except ValueError as error:
            raise ValueError(f"{source}: {error}") from None
        batch = data.get("batch")
        if batch is not None:
            batch = get.count("batch")
            if batch % (replicas * microbatches):
                raise ValueError(f"{source}: {replicas} replicas x {microbatches} micro-batches = "
                                 f"{replicas * microbatches} do not divide the plan's batch of {batch}")
        param_factor = get.number("param_factor")
        unused = [int(d) for d in get.array("unused_devices")]
        model_bytes = get.number("model_parameter_bytes") if data.get("model_parameter_bytes") is not None else None
        return cls(get.text("graph"), get.text("graph_digest"), batch, get.text("cluster"), num_devices,
                   microbatches, schedule, stages, tied, get.number("simulated_step_seconds"),
                   param_factor, unused, get.texts("notes"), replicas, virtual, model_bytes)


PLAN_FIELDS = {"format", "version", "graph", "graph_digest", "batch", "cluster", "num_devices", "microbatches",
               "schedule", "stages", "tied", "simulated_step_seconds", "param_factor", "unused_devices", "notes",
               "replicas", "virtual_stages", "split_spec", "parts", "model_parameter_bytes"}
STAGE_FIELDS = {"rank", "device", "begins_at", "layers", "ops", "parameter_bytes", "simulated_peak_memory",
                "replica_devices", "recompute"}


def _no_unknown_fields(data: dict, known: set[str], where: str) -> None:
    """``ValueError`` naming a field of ``data`` not in ``known`` (a misspelt field is an error, as in the graph and
    cluster files, not a silent default)."""
    unknown = sorted(set(data) - known)
    if unknown:
        raise ValueError(f"{where}: unknown field {unknown[0]!r} (a plan's fields: {', '.join(sorted(known))})")


class _Fields:
    """Typed reads of a JSON object's fields, each error naming ``where`` and the field."""

    def __init__(self, data: Any, where: str) -> None:
        if not isinstance(data, dict):
            raise ValueError(f"{where}: expected an object, got {type(data).__name__}")
        self.data, self.where = data, where

    def _get(self, key: str) -> Any:
        if key not in self.data:
            raise ValueError(f"{self.where}: missing field {key!r}")
        return self.data[key]

    def count(self, key: str, smallest: int = 1) -> int:
        value = self._get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < smallest:
            raise ValueError(f"{self.where}: {key} must be an integer >= {smallest}, got {value!r}")
        return value

    def number(self, key: str) -> float:
        value = self._get(key)
        if not is_number(value) or not math.isfinite(float(value)) or value < 0:
            raise ValueError(f"{self.where}: {key} must be a finite number >= 0, got {value!r}")
        return float(value)

    def text(self, key: str) -> str:
        value = self._get(key)
        if not isinstance(value, str):
            raise ValueError(f"{self.where}: {key} must be a string, got {value!r}")
        return value

    def optional_text(self, key: str) -> str | None:
        return None if self._get(key) is None else self.text(key)

    def array(self, key: str) -> list[Any]:
        value = self._get(key)
        if not isinstance(value, list):
            raise ValueError(f"{self.where}: {key} must be a list, got {type(value).__name__}")
        return value

    def texts(self, key: str) -> list[str]:
        values = self.array(key)
        bad = [v for v in values if not isinstance(v, str)]
        if bad:
            raise ValueError(f"{self.where}: {key} must be a list of strings, got {bad[0]!r}")
        return values


def plan_from_placement(graph: ComputationGraph, placement: Sequence[int] | np.ndarray, cluster: Cluster,
                        step: Step | Parallelism | None = None, *, microbatches: int | None = None,
                        schedule: str | None = None, param_factor: float = DEFAULT_PARAM_FACTOR) -> PipelinePlan:
    """The plan of a contiguous placement of ``graph`` on ``cluster`` (see the module docstring).

    Args:
        graph: a graph with module names (``from_torch``, ``from_huggingface``, the zoo's transformers).
        placement: a device per op, contiguous and splitting no module.
        cluster: the devices it places on.
        step: the pipelined step, the same object the placer judged the placement by (``Step(8, "1f1b")`` or a
            :class:`~placement_env.parallelism.Parallelism`; its micro-batches must divide the graph's batch).
            ``microbatches`` and ``schedule`` say the same one field at a time (not both ways at once).
        param_factor: static bytes per parameter byte of the simulated peak memory.

    Returns:
        A :class:`PipelinePlan` (stages without parameters and unused devices are stated in its ``notes``).

    Raises:
        ValueError: a placement of the wrong length or naming a device the cluster lacks (the op is named); one
            that is not contiguous or splits a module (:func:`~placement_env.plan.split_points.to_split_points`);
            a bad micro-batch count or schedule, or the step given twice.
    """
    checked_instance("cluster", cluster, Cluster)
    p = checked_device_placement(graph, placement)
    if int(p.max()) >= cluster.num_devices:
        bad = int(np.argmax(p >= cluster.num_devices))
        raise ValueError(f"op {graph.nodes[bad].id!r} is placed on device {int(p[bad])}, cluster {cluster.name!r} "
                         f"has {cluster.num_devices} devices (0 to {cluster.num_devices - 1})")
    m, schedule = one_step(step, microbatches, schedule).checked(graph)
    points = to_split_points(graph, p)
    result = simulate(graph, p, cluster, param_factor=param_factor, microbatches=m, schedule=schedule)
    rank_of = {device: rank for rank, device in enumerate(points.devices)}
    forward = [i for i, node in enumerate(graph.nodes) if node.phase not in ("backward", "update")]
    readers = _parameter_readers(graph, p, rank_of)
    parameter_bytes = np.zeros(len(points.devices))
    ops = np.zeros(len(points.devices), dtype=np.int64)
    for i in forward:
        node = graph.nodes[i]
        rank = rank_of.get(int(p[i]))
        if rank is None:  # an op outside every stage (an input or glue on a device of no module op)
            continue
        ops[rank] += 1
        if node.op != "parameter":  # a shared parameter counts in each stage reading it, below
            parameter_bytes[rank] += node.param_bytes
    tied = []
    copies = np.zeros(len(points.devices))  # tied parameters' copies beyond the one the simulator holds
    for i, ranks in readers.items():
        for rank in ranks:
            parameter_bytes[rank] += graph.nodes[i].param_bytes
            copies[rank] += graph.nodes[i].param_bytes * param_factor * (rank != rank_of.get(int(p[i])))
        if len(ranks) > 1:
            tied.append(TiedGroup(graph.nodes[i].id.removeprefix("param:"), sorted(ranks),
                                  float(graph.nodes[i].param_bytes)))
    stages = [PlanStage(rank=rank, device=int(device),
                        begins_at=None if rank == 0 else points.split_spec[rank - 1],
                        layers=points.layers[points.parts[rank]:points.parts[rank + 1]], ops=int(ops[rank]),
                        parameter_bytes=float(parameter_bytes[rank]),
                        simulated_peak_memory=float(result.peak_memory[device] + copies[rank]))
              for rank, device in enumerate(points.devices)]
    unused = sorted(set(range(cluster.num_devices)) - set(points.devices))
    notes = []
    if unused:
        notes.append(f"{len(points.devices)} of the cluster's {cluster.num_devices} devices hold a stage; "
                     f"{'devices' if len(unused) > 1 else 'device'} {', '.join(map(str, unused))} "
                     f"{'hold' if len(unused) > 1 else 'holds'} none")
    for stage in stages:
        if stage.parameter_bytes <= 0:
            notes.append(f"stage {stage.rank} (device {stage.device}) holds no parameters: a runtime cannot train "
                         "it (an optimizer of no parameters); join it to a neighbouring stage")
    for group in tied:
        notes.append(f"parameter {group.parameter} is tied across stages {group.stages}: the runner sums its "
                     "gradients over them before the optimizer step")
    return PipelinePlan(graph=graph.name, graph_digest=graph_digest(graph), batch=graph.batch, cluster=cluster.name,
                        num_devices=cluster.num_devices, microbatches=m, schedule=schedule, stages=stages, tied=tied,
                        simulated_step_seconds=float(result.makespan), param_factor=float(param_factor),
                        unused_devices=unused, notes=notes, model_parameter_bytes=graph_parameter_bytes(graph))


def graph_parameter_bytes(graph: ComputationGraph) -> float:
    """The bytes of ``graph``'s parameters, each counted once (its forward ops' own and its shared ``parameter``
    ops'): for a traced model, the bytes of the model's distinct parameters."""
    return float(sum(node.param_bytes for node in graph.nodes if node.phase in (None, "forward")))


def _parameter_readers(graph: ComputationGraph, p: np.ndarray, rank_of: dict[int, int]) -> dict[int, set[int]]:
    """Each ``parameter`` op (a parameter several ops read) -> the ranks of the stages whose forward ops read it."""
    readers: dict[int, set[int]] = {}
    for s, d in zip(graph.edge_src.tolist(), graph.edge_dst.tolist()):
        if graph.nodes[s].op == "parameter" and graph.nodes[d].phase not in ("backward", "update"):
            rank = rank_of.get(int(p[d]))
            if rank is not None:
                readers.setdefault(s, set()).add(rank)
    return readers


pipeline_plan = deprecated_function(plan_from_placement, "pipeline_plan", "plan_from_placement", "0.10.0")

__all__ = ["PLAN_FORMAT", "PLAN_VERSION", "PipelinePlan", "PlanStage", "TiedGroup", "plan_from_placement"]
