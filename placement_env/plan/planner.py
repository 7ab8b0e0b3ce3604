"""A planner of hybrid pipelines: :func:`search_plan` chooses stages, replicas, micro-batches, schedule,
recomputation, the layer split and the devices of each stage and replica, together, within memory.

How it decides (``docs/planner.md`` has the measurements):

1. The graph's layers (:func:`~placement_env.plan.module_tree.layer_sequence`) are costed once
   (:func:`~placement_env.plan.layers.chunk_costs`, one chunk a layer); a run of layers costs the sums of its
   layers (a parameter read by several of them counted once).
2. For every configuration the caller left open (S x D devices, S x D the cluster's size or, for S, any count
   up to it; m from the multiples a practitioner tries and the powers of two, D x m dividing the batch; the
   schedules; v in {2, 4} for the interleaved one; the devices of a replica within a node or across nodes),
   the layers are cut into S x v chunks whose slowest (compute and its sends) is fastest within each rank's
   memory: a binary search over that time, each probe a greedy cut (the longest chunk that fits, in order),
   which is optimal for a bottleneck of contiguous runs. Uniform and parameter-balanced cuts are kept beside it.
   A rank whose activations do not fit recomputes, when that fits.
3. An estimate of the step (``(m - 1)`` slowest chunks plus the pipeline's fill, the last reduction after)
   ranks the configurations; the best :data:`SIMULATED`, the best of each (S, D, schedule) and every
   configuration of the hand grid (uniform split, 1F1B, m in S x {1, 2, 4, 8}) are simulated exactly
   (``docs/spec/simulator.md`` section 3b), and the fastest that fits is the plan: never behind the grid.

It reports the lower bound ``work / total speed`` (every op of the step at full speed on every device, no
bubble, no message, no reduction) and the plan's gap to it.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from placement_env.cluster import Cluster
from placement_env.deprecation import deprecated_function, deprecated_names
from placement_env.graph.io import graph_digest
from placement_env.graph.model import ComputationGraph
from placement_env.sim.simulator import DEFAULT_PARAM_FACTOR, checked_param_factor

from .cuts import in_flight, layer_cut, recompute_choice
from .layers import ChunkCosts, LayerTable, layer_table, placement_of_layers
from .module_tree import block_layers, layer_sequence
from .pipeline_plan import PipelinePlan, PlanStage, TiedGroup, graph_parameter_bytes
from .plan_step import PlanLayout, PlanStep, ring_seconds, simulate_layout
from .planner_choices import (
    HAND_SPLITS,
    LAYOUTS,
    MAX_MICROBATCHES,
    MAX_PLAN_LAYERS,
    MICROBATCH_FACTORS,
    SPLITS,
    VIRTUAL_STAGES,
    check_fixed_decisions,
)
from .schedules import PLAN_SCHEDULES, SPLIT_BACKWARD, checked_plan_schedule

SIMULATED = 24
"""Configurations simulated exactly, the best by the estimate."""

@dataclass(frozen=True)
class SearchedPlan:
    """A plan and how it was found.

    Attributes:
        plan: the plan (:class:`~placement_env.plan.pipeline_plan.PipelinePlan`).
        step: its simulated step (section 3b).
        lower_bound: seconds no plan can beat (module docstring).
        configurations: the configurations estimated; ``simulated``: those simulated exactly.
        seconds: the planner's own time.
        split: how its layers were cut (``time``, ``uniform``, ``parameters`` or ``given``); ``layout``: its
            devices (:data:`LAYOUTS`).
    """

    plan: PipelinePlan
    step: PlanStep
    lower_bound: float
    configurations: int
    simulated: int
    seconds: float
    split: str
    layout: str

    @property
    def gap(self) -> float:
        """The plan's step over the lower bound."""
        return self.step.seconds / self.lower_bound if self.lower_bound > 0 else math.inf


@dataclass(frozen=True)
class _Config:
    ranks: int
    replicas: int
    microbatches: int
    schedule: str
    virtual: int
    layout: str
    split: str
    parts: tuple[int, ...]
    recompute: tuple[bool, ...]
    estimate: float


def search_plan(graph: ComputationGraph, cluster: Cluster, *, stages: int | None = None,
                  replicas: int | None = None, microbatches: int | None = None, schedule: str | None = None,
                  virtual_stages: int | None = None, recompute: bool | None = None,
                  split: str | Sequence[int] | None = None, layout: str | None = None, batch: int | None = None,
                  param_factor: float = DEFAULT_PARAM_FACTOR, simulated: int = SIMULATED,
                  on_progress: Callable[[str], None] | None = None) -> SearchedPlan:
    """Plan ``graph`` on ``cluster`` (module docstring); every argument given fixes that decision.

    Args:
        graph: a training graph with module names (``from_torch``, ``from_huggingface``, the zoo's transformers).
        cluster: the devices.
        stages: S, pipeline ranks. ``replicas``: D, data-parallel replicas (S x D at most the cluster's devices).
        microbatches: m per replica and step. ``schedule``: one of
            :data:`~placement_env.plan.schedules.PLAN_SCHEDULES`; ``virtual_stages``: v (interleaved only).
        recompute: True on every rank, False on none; None where memory needs it.
        split: ``"time"`` (balanced by the chunks' time, cut before, between or after blocks), ``"uniform"``
            (Megatron-LM's: the blocks as even as can be, the embedding first, the loss last),
            ``"deepspeed-uniform"`` and ``"parameters"`` (DeepSpeed's ``partition_method``: as many layers, or
            balanced parameters, over all the layers), or the number of layers of each chunk (a custom
            partition, Megatron's uneven layout).
        layout: one of :data:`LAYOUTS`.
        batch: the step's batch, when it is not the one the graph was traced with (the costs that grow with the
            batch are scaled: :meth:`~placement_env.plan.layers.ChunkCosts.with_batch`); a cluster's step is
            usually far larger than a trace's.
        param_factor: static bytes per parameter byte.
        simulated: how many of the best estimated configurations are simulated exactly.
        on_progress: hears how far the search is (the configurations estimated, then each tenth of the exact
            simulations): for long plans.

    Returns:
        A :class:`SearchedPlan`.

    Raises:
        ValueError: a graph without layers, a fixed decision that is out of range (S x D above the cluster's
            devices, a schedule the plan cannot use, D x m not dividing the batch, a split of the wrong
            length), or no configuration that fits in memory (the closest is named).
    """
    began = time.perf_counter()
    param_factor = checked_param_factor(param_factor)
    sequence = layer_sequence(graph)
    if len(sequence) > MAX_PLAN_LAYERS:
        raise ValueError(f"graph {graph.name!r} has {len(sequence):,} layers; the planner plans at most "
                         f"{MAX_PLAN_LAYERS:,} (import it with coarser modules, colocate_modules=1, or plan it at "
                         "scale from its shape)")
    table = layer_table(graph, sequence, batch, block_layers(graph))
    n, layers = cluster.num_devices, len(table)
    reasons: list[str] = []
    configs = _configurations(table, cluster, stages, replicas, microbatches, schedule, virtual_stages, recompute,
                              split, layout, param_factor, reasons)
    if not configs:
        if reasons and CUT not in reasons:  # nothing reached a cut: the batch, the schedule or the layers said no
            more = f" (and {len(reasons) - 1} other configurations, likewise)" if len(reasons) > 1 else ""
            raise ValueError(f"no plan of graph {graph.name!r} ({layers} layers) on {n} devices with the choices "
                             f"given: {reasons[0]}{more}")
        least = float(table.costs.parameter_bytes.max()) * param_factor
        raise ValueError(f"no plan of graph {graph.name!r} ({layers} layers) fits the memory of {n} devices "
                         f"({float(cluster.memory.min()) / 2**30:.2f} GiB the smallest) with the choices given: "
                         f"every stage holds its layers' parameters and optimizer state ({least / 2**30:.2f} GiB for "
                         "the largest layer alone) and the activations of the micro-batches in flight")
    configs.sort(key=lambda c: c.estimate)
    best: tuple[float, _Config, PlanStep] | None = None
    closest: tuple[float, _Config] | None = None
    tried = 0
    chosen = _to_simulate(configs, simulated)
    if on_progress is not None:
        on_progress(f"{len(configs):,} configurations estimated; simulating the {len(chosen):,} best exactly")
    for config in chosen:
        tried += 1
        if on_progress is not None and tried % max(1, len(chosen) // 10) == 0:
            on_progress(f"simulated {tried:,} of {len(chosen):,}")
        step = simulate_layout(table.chunks(config.parts), _layout(config, table, param_factor), cluster)
        over = float(np.max(step.peak_memory - cluster.memory))
        if over > 0:
            if closest is None or over < closest[0]:
                closest = (over, config)
            continue
        if best is None or step.seconds < best[0]:
            best = (step.seconds, config, step)
    if best is None:
        assert closest is not None
        over, config = closest
        raise ValueError(f"no plan of graph {graph.name!r} fits the memory of {n} devices: the closest "
                         f"({config.ranks} stages x {config.replicas} replicas, {config.microbatches} micro-batches, "
                         f"{config.schedule}) needs {over / 2**30:.2f} GiB more on a device")
    _, config, step = best  # simulated on table.chunks(config.parts), what simulate_plan reads from the plan
    work = float(np.sum(table.costs.forward + table.costs.backward_input + table.costs.backward_weight))
    plan = _plan(graph, cluster, table, config, table.chunks(config.parts), step, param_factor)
    return SearchedPlan(plan, step, work / float(np.sum(cluster.speed)), len(configs), tried,
                        time.perf_counter() - began, config.split, config.layout)


def _to_simulate(configs: list[_Config], simulated: int) -> list[_Config]:
    """Of ``configs`` (best estimate first), those simulated exactly: the ``simulated`` best, the best of each
    (S, D, schedule), and every one of the hand grid (a uniform split, 1F1B, m in S x {1, 2, 4, 8}), so that the
    plan is never behind a plan a practitioner would try."""
    chosen: dict[int, _Config] = {}
    seen: set[tuple[int, int, str]] = set()
    for i, config in enumerate(configs):
        group = (config.ranks, config.replicas, config.schedule)
        hand = (config.split in HAND_SPLITS and config.schedule == "1f1b"
                and config.microbatches in {config.ranks * f for f in MICROBATCH_FACTORS})
        if i < simulated or group not in seen or hand:
            chosen[i] = config
        seen.add(group)
    return [chosen[i] for i in sorted(chosen)]


def _layout(config: _Config, table: LayerTable, param_factor: float) -> PlanLayout:
    """The layout of ``config``, with the parameters its ranks share summed across them (as :func:`plan_layout`
    of its plan gives)."""
    tied = []
    for nbytes, readers in table.shared:
        ranks = tuple(sorted({(int(np.searchsorted(config.parts, layer, side="right")) - 1) % config.ranks
                              for layer in readers}))
        if len(ranks) > 1:
            tied.append((nbytes, ranks))
    return PlanLayout(_devices(config.ranks, config.replicas, config.layout), config.microbatches, config.schedule,
                      config.virtual, config.recompute, tuple(tied), param_factor)


def _devices(ranks: int, replicas: int, layout: str) -> tuple[tuple[int, ...], ...]:
    if layout == "replicas-across-nodes":
        return tuple(tuple(r * ranks + s for r in range(replicas)) for s in range(ranks))
    return tuple(tuple(s * replicas + r for r in range(replicas)) for s in range(ranks))


def _configurations(table: LayerTable, cluster: Cluster, stages: int | None, replicas: int | None,
                    microbatches: int | None, schedule: str | None, virtual_stages: int | None,
                    recompute: bool | None, split: str | Sequence[int] | None, layout: str | None,
                    param_factor: float, reasons: list[str]) -> list[_Config]:
    """Every configuration left open, estimated (module docstring, steps 2 and 3); why a configuration of the
    choices given cannot be run at all goes to ``reasons``."""
    n, layers, batch = cluster.num_devices, len(table), table.costs.batch
    check_fixed_decisions(n, layers, table.max_chunks, batch, stages, replicas, microbatches, schedule, virtual_stages,
                          split, layout)
    pairs = []
    for s in range(1, min(n, table.max_chunks) + 1):
        if stages is not None and s != stages:
            continue
        for d in ([replicas] if replicas is not None else _replica_counts(n // s, batch, stages is not None)):
            if d >= 1 and s * d <= n:
                pairs.append((s, d))
    found = []
    for s, d in pairs:
        if microbatches is not None:
            ms = [microbatches] if batch is None or batch % (d * microbatches) == 0 else []
            if not ms:
                reasons.append(f"{s} stages x {d} replicas: {d} replicas x {microbatches} micro-batches do not divide "
                               f"the batch of {batch}")
        else:
            ms = sorted({s * f for f in MICROBATCH_FACTORS} | {2 ** j for j in range(10)})
            ms = [m for m in ms if m <= MAX_MICROBATCHES and (batch is None or batch % (d * m) == 0)]
            if not ms:
                reasons.append(f"{d} replicas do not divide the batch of {batch}" if batch and batch % d else
                               f"{s} stages x {d} replicas: no micro-batch count splits a replica's share of the "
                               f"batch of {batch}")
        schedules = [schedule] if schedule is not None else list(PLAN_SCHEDULES)
        for m, name in itertools.product(ms, schedules):
            vs = ([virtual_stages] if virtual_stages is not None else
                  (list(VIRTUAL_STAGES) if name == "interleaved-1f1b" else [1]))
            for v in vs:
                try:
                    checked_plan_schedule(name, s, v, m)
                except ValueError as error:
                    if schedule is not None and stages is not None and microbatches is not None:
                        raise
                    reasons.append(f"{s} stages, {m} micro-batches: {error}")
                    continue
                if s * v > table.max_chunks or (name == "interleaved-1f1b" and s < 2):
                    reasons.append(f"{s} stages x {v} virtual stages: the graph's layers make at most "
                                   f"{table.max_chunks} chunks" if s * v > table.max_chunks else
                                   f"{name} needs 2 or more stages")
                    continue
                if CUT not in reasons:
                    reasons.append(CUT)  # a configuration reached the cuts: memory decides from here
                for place in ([layout] if layout is not None else list(LAYOUTS) if d > 1 and s > 1
                              else [LAYOUTS[0]]):
                    devices = _devices(s, d, place)
                    for config in _splits(table, cluster, s, d, m, name, v, place, devices, split, recompute,
                                          param_factor):
                        found.append(config)
    return found


CUT = "(a configuration reached the cuts)"  # in _configurations' reasons: memory, not the choices, decided


def _replica_counts(most: int, batch: int | None, also_one: bool) -> list[int]:
    """Replica counts to try for a stage count that leaves ``most`` devices a stage: ``most``, and the largest
    count that divides the batch (fewer replicas than the devices allow, where the batch needs it); 1 too when the
    stages are fixed."""
    counts = {most, *([1] if also_one else [])}
    if batch is not None:
        dividing = [d for d in range(min(most, batch), 0, -1) if batch % d == 0]
        if dividing:
            counts.add(dividing[0])
    return sorted(counts)


def _splits(table: LayerTable, cluster: Cluster, s: int, d: int, m: int, schedule: str, v: int, place: str,
            devices: tuple[tuple[int, ...], ...], split: str | Sequence[int] | None, recompute: bool | None,
            param_factor: float) -> list[_Config]:
    """The configurations of one (S, D, m, schedule, v, layout): each split asked for, estimated."""
    k = s * v
    if split is not None and not isinstance(split, str):
        if len(split) != k:
            return []
        candidates = {"given": tuple(np.concatenate([[0], np.cumsum(list(split))]).astype(int).tolist())}
    else:
        names = [split] if isinstance(split, str) else list(SPLITS)
        candidates = {}
        for name in names:
            # a cut depends on the chunks, their micro-batch's size, the memory held and the devices' links alone
            key = (name, k) if name == "parameters" else (
                name, k, s, d * m, tuple(in_flight(schedule, s, r, m, v) for r in range(s)), devices, recompute)
            if key not in table.cuts:
                table.cuts[key] = layer_cut(table, cluster, name, k, s, d, m, schedule, v, devices, recompute,
                                       param_factor)
            parts = table.cuts[key]
            if parts is not None:
                candidates[name] = parts
    found = []
    for name, parts in candidates.items():
        costs = table.chunks(parts)
        recomputing = recompute_choice(costs, cluster, s, d, m, schedule, devices, recompute, param_factor)
        if recomputing is None:
            continue
        found.append(_Config(s, d, m, schedule, v, place, name, parts, recomputing,
                             _estimate(costs, cluster, s, d, m, schedule, v, devices, recomputing)))
    return found


def _estimate(costs: ChunkCosts, cluster: Cluster, s: int, d: int, m: int, schedule: str, v: int,
              devices: tuple[tuple[int, ...], ...], recompute: tuple[bool, ...]) -> float:
    """The step, roughly: each rank's busy time per micro-batch, the slowest ``m - 1`` times plus one pass of
    the pipeline (a 1/v of it interleaved, less the weights' share under zb-h1), then the slowest reduction."""
    q = 1.0 / (d * m)
    k = costs.num_chunks
    rank = np.arange(k) % s
    dev = np.array([devices[r][0] for r in range(s)])[rank]
    nxt = np.array([devices[r][0] for r in range(s)])[(np.arange(k) + 1) % s]
    speed = cluster.speed[dev]

    def part(total: np.ndarray, fixed: np.ndarray) -> np.ndarray:
        return fixed + q * (total - fixed)

    f = part(costs.forward, costs.forward_fixed)
    t = (f + part(costs.backward_input, costs.backward_input_fixed)
         + part(costs.backward_weight, costs.backward_weight_fixed) + np.where(np.array(recompute)[rank], f, 0.0))
    t = t / speed
    sends = (np.arange(k) < k - 1) & (nxt != dev)
    t = t + np.where(sends, 2 * (cluster.latency[dev, nxt] + q * costs.boundary_bytes / cluster.bandwidth[dev, nxt]),
                     0.0)
    per_rank = np.bincount(rank, weights=t, minlength=s)
    fill = float(t.sum())
    if schedule in SPLIT_BACKWARD:
        weights = float(np.sum(q * costs.backward_weight / speed))
        fill -= 2 * weights * (s - 1) / max(s, 1)
    step = (m - 1) * float(per_rank.max()) + fill / (v if schedule == "interleaved-1f1b" else 1)
    reduce = max((ring_seconds(float(costs.parameter_bytes[c]), devices[c % s], cluster)
                  for c in range(k)), default=0.0) if d > 1 else 0.0
    return step + reduce


def _plan(graph: ComputationGraph, cluster: Cluster, table: LayerTable, config: _Config, costs: ChunkCosts,
          step: PlanStep, param_factor: float) -> PipelinePlan:
    """The :class:`PipelinePlan` of ``config``."""
    devices = _devices(config.ranks, config.replicas, config.layout)
    chunk_of = placement_of_layers(graph, table.layers, list(config.parts))
    forward = [i for i, node in enumerate(graph.nodes) if node.phase in (None, "forward")]
    ops = np.bincount(chunk_of[forward], minlength=costs.num_chunks)
    stages = []
    for c in range(costs.num_chunks):
        rank = c % config.ranks
        a, b = config.parts[c], config.parts[c + 1]
        stages.append(PlanStage(rank=rank, device=devices[rank][0], begins_at=None if c == 0 else table.layers[a],
                                layers=table.layers[a:b], ops=int(ops[c]),
                                parameter_bytes=float(costs.parameter_bytes[c]),
                                simulated_peak_memory=float(step.peak_memory[devices[rank][0]]),
                                replica_devices=list(devices[rank]) if config.replicas > 1 else [],
                                recompute=config.recompute[rank]))
    readers: dict[int, set[int]] = {}
    for s, d in zip(graph.edge_src.tolist(), graph.edge_dst.tolist()):
        if graph.nodes[s].op == "parameter" and graph.nodes[d].phase in (None, "forward"):
            readers.setdefault(s, set()).add(int(chunk_of[d]))
    tied = [TiedGroup(graph.nodes[s].id.removeprefix("param:"), sorted(chunks), float(graph.param_bytes[s]))
            for s, chunks in readers.items() if len(chunks) > 1]
    used = {dev for row in devices for dev in row}
    unused = sorted(set(range(cluster.num_devices)) - used)
    notes = [f"{config.ranks} stages x {config.replicas} replicas on {len(used)} of the cluster's "
             f"{cluster.num_devices} devices ({config.layout}), {config.microbatches} micro-batches of "
             f"{'1/' + str(config.replicas * config.microbatches) + ' of the batch'} each, {config.schedule}"
             + (f" with {config.virtual} chunks a rank" if config.virtual > 1 else "")]
    recomputing = [s for s in range(config.ranks) if config.recompute[s]]
    if recomputing:
        notes.append(f"ranks {', '.join(map(str, recomputing))} recompute their forward in the backward to fit")
    for group in tied:
        notes.append(f"parameter {group.parameter} is tied across stages {group.stages}: its gradients are summed "
                     "over them before the optimizer step")
    return PipelinePlan(graph=graph.name, graph_digest=graph_digest(graph), batch=costs.batch, cluster=cluster.name,
                        num_devices=cluster.num_devices, microbatches=config.microbatches, schedule=config.schedule,
                        stages=stages, tied=tied, simulated_step_seconds=float(step.seconds),
                        param_factor=float(param_factor), unused_devices=unused, notes=notes,
                        replicas=config.replicas, virtual_stages=config.virtual,
                        model_parameter_bytes=graph_parameter_bytes(graph))


def hand_plan(graph: ComputationGraph, cluster: Cluster, stages: int, replicas: int, microbatches: int,
              schedule: str = "1f1b", split: str | Sequence[int] = "uniform",
              layout: str = "replicas-across-nodes", batch: int | None = None,
              param_factor: float = DEFAULT_PARAM_FACTOR) -> SearchedPlan:
    """A plan with every decision fixed (Megatron-LM's default: a uniform split, 1F1B), simulated the same way;
    recomputation where memory needs it."""
    return search_plan(graph, cluster, stages=stages, replicas=replicas, microbatches=microbatches,
                         schedule=schedule, virtual_stages=1 if schedule != "interleaved-1f1b" else None,
                         split=split, layout=layout, batch=batch, param_factor=param_factor)


plan_pipeline = deprecated_function(search_plan, "plan_pipeline", "search_plan", "0.10.0")
if not TYPE_CHECKING:  # the old class name, with a warning on use
    __getattr__ = deprecated_names(__name__, {"PlannedPipeline": (SearchedPlan, "SearchedPlan")}, "0.10.0")

__all__ = ["HAND_SPLITS", "LAYOUTS", "SIMULATED", "SPLITS", "LayerTable", "SearchedPlan", "hand_plan",
           "search_plan"]
