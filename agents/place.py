"""Place a graph with the pretrained policy: ``agents.place(graph, cluster)`` and ``python -m agents.place``.

Two ways, both from a policy made by :mod:`agents.pretrain` (the shipped one by default):

* **zero-shot** (``--zero-shot``): one forward pass of the policy, ``samples`` placements drawn from it and judged
  in one simulator call, the best kept (when every one is out of memory, the best is repaired as the classical
  placers' placements are). About a second.
* **fine-tuned** (the default, ``--budget-seconds``, default 10 s): first :data:`EXPLORE_SHARE` of the budget
  anneals from each of the :data:`EXPLORE_STARTS` best starts (the best zero-shot proposal and the fast classical
  placers' placements: the best start is often not the best basin), then the guided search
  (:func:`agents.guided_search.guided_search`) on this graph for the rest: the policy proposes, the annealing
  improves (in each round, a short chain from the best proposal and a longer one continuing the best placement
  found, on one cooling schedule over the whole budget), the policy learns from the best placements found. The
  search also starts from the placements of the fast classical placers (those the ``anneal`` placer starts from),
  so it uses all the toolkit knows; the benchmark (:mod:`agents.benchmark`) measures what the policy adds.

Example::

    python -m agents.place --graph cifar10/3 --devices 3 --budget-seconds 30 --out placement.json

The module is callable: ``import agents; agents.place(graph, cluster)`` calls :func:`place`.
"""

from __future__ import annotations

import os
import sys
import time
import types
from dataclasses import dataclass
from typing import Any

import numpy as np

from placement_env.checks import checked_count, checked_finite
from placement_env.cli import (
    OneLineParser,
    add_graph_and_cluster_args,
    check_output_paths,
    graph_and_cluster_from_args,
    run_cli,
)
from placement_env.cluster import Cluster
from placement_env.graph.model import ComputationGraph

DEFAULT_BUDGET_SECONDS = 10.0
DEFAULT_SAMPLES = 512
# Chosen on validation graphs (seeds 30-31 of the suites: neither training nor held-out) with the shipped policy,
# by python benchmarks/learned_settings.py --policy agents/pretrained/policy.zip (numbers in docs/learned.md):
ZERO_SHOT_TEMPERATURE = 0.25  # sharper than the policy's own (1.0): below its start placement more often
ROUNDS_PER_BUDGET = 8  # a round anneals for about a quarter of the budget (two chains of budget/8 s each) ...
EXPLORE_SHARE = 0.6  # the part of the budget first spent annealing from each of the EXPLORE_STARTS best starts
EXPLORE_STARTS = 3  # (the zero-shot proposal and the fast placers' placements), so that the search sees their basins
INCUMBENT_SHARE: float | None = 0.75  # ... 3/4 of it continuing the best placement on one cooling schedule over
#                                       the whole budget, 1/4 from the round's best proposal


@dataclass(frozen=True)
class LearnedPlacement:
    """A placement by the learned placer: a device per node of the graph given, its simulated makespan (s) and
    memory overflow (bytes, 0 when it fits), the seconds taken, ``method`` (``zero-shot`` or ``fine-tuned``) and
    the search rounds run."""

    placement: np.ndarray
    makespan: float
    overflow: float
    seconds: float
    method: str
    rounds: int


def checked_budget(budget_seconds: float) -> float:
    """A positive, finite budget (s), or a ``ValueError`` naming it."""
    value = checked_finite("budget_seconds", budget_seconds)
    if not value > 0:
        raise ValueError(f"budget_seconds must be positive, got {budget_seconds!r}")
    return value


def load_placement_policy(policy: Any = None) -> Any:
    """A :class:`~agents.reinforce.PlacementNetwork` from ``policy``: None (the shipped policy), a checkpoint path,
    or a network."""
    from .policy_file import load_policy, shipped_policy_path
    from .reinforce import PlacementNetwork

    if policy is None:
        path = shipped_policy_path()
        if not path.exists():
            raise ValueError(f"no shipped policy at {path}; make one with python -m agents.pretrain and pass it")
        return load_policy(path)
    if isinstance(policy, PlacementNetwork):
        return policy
    return load_policy(policy)


def start_units(graph: ComputationGraph, cluster: Cluster, kind: str, seed: int = 0) -> np.ndarray:
    """The placement (a device per unit) a policy's observation shows: ``best-fast``, the fastest placement within
    memory of the fast placers the ``anneal`` placer starts from (everything on device 0 when none fits), or
    ``single``, everything on device 0."""
    if kind == "best-fast":
        starts = classical_starts(graph, cluster, seed)
        if starts:
            return starts[0]
    elif kind != "single":
        raise ValueError(f"unknown policy start {kind!r}")
    return np.zeros(graph.num_units, np.int64)


def fitted_problem(graph: ComputationGraph, cluster: Cluster, network: Any, seed: int = 0):
    """The :class:`~agents.guided_search.PlacementProblem` of ``graph`` for ``network`` (its observation showing the
    start the policy was trained with): coarsened to the policy's unit limit when larger (with a notice); a
    cluster of more devices than the policy knows is a ``ValueError``."""
    from placement_env.envs.task import fit_units

    from .guided_search import PlacementProblem

    max_units, max_devices = network.max_nodes, network.max_devices
    if cluster.num_devices > max_devices:
        raise ValueError(f"the cluster has {cluster.num_devices} devices; this policy places on at most "
                         f"{max_devices} (pretrain one with python -m agents.pretrain --devices ...)")
    graph = fit_units(graph, max_units)
    start = start_units(graph, cluster, getattr(network, "info", {}).get("start", "single"), seed)
    return PlacementProblem(graph, cluster, max_devices, start)


def proposals(network: Any, problem: Any, samples: int, seed: int, temperature: float = 1.0) -> np.ndarray:
    """``samples`` unit placements drawn from one forward pass of ``network`` at ``temperature`` (logits divided by
    it: below 1, closer to the most likely placement, which is the first row)."""
    import torch

    from .guided_search import sample_rows

    with torch.no_grad():
        logits = problem.logits(network)
    generator = torch.Generator().manual_seed(seed)
    drawn = sample_rows(torch.softmax(logits / temperature, -1), samples - 1, 0.0, generator)
    return np.concatenate([logits.argmax(-1).numpy()[None, :], drawn])


def classical_starts(graph: ComputationGraph, cluster: Cluster, seed: int) -> list[np.ndarray]:
    """The unit placements of the fast placers the ``anneal`` placer starts from that fit in memory, fastest first
    (computed once per graph, cluster and seed)."""
    import json

    key = f"classical_starts:{seed}:{json.dumps(cluster.to_dict())}"
    if key not in graph.derived:
        graph.derived[key] = _classical_starts(graph, cluster, seed)
    return [units.copy() for units in graph.derived[key]]


def _classical_starts(graph: ComputationGraph, cluster: Cluster, seed: int) -> list[np.ndarray]:
    from baselines.memory import PlacementInfeasibleError
    from baselines.placers import CONSTRUCTIVE, SEARCH_STARTS
    from baselines.starts import ranked_starts

    try:
        found, _ = ranked_starts(graph, cluster, {name: CONSTRUCTIVE[name] for name in SEARCH_STARTS}, seed)
    except PlacementInfeasibleError:
        return []
    return [graph.unit_placement(placement) for _, _, placement in found]


def repaired(problem: Any, units: np.ndarray, makespan: float, overflow: float) -> tuple[np.ndarray, float, float]:
    """``units`` moved within memory by :func:`baselines.memory_repair.repair_memory` (the classical placers'
    repair) with its makespan and overflow, or as given when the repair finds nothing."""
    from baselines.memory import PlacementInfeasibleError
    from baselines.memory_repair import repair_memory

    try:
        fixed = problem.graph.unit_placement(repair_memory(problem.graph, problem.cluster,
                                                           problem.graph.expand_unit_placement(units)))
    except PlacementInfeasibleError:
        return units, makespan, overflow
    mk, over = problem.judge(fixed[None, :])
    return fixed, float(mk[0]), float(over[0])


def place(graph: ComputationGraph, cluster: Cluster, policy: Any = None, budget_seconds: float | None = None,
          zero_shot: bool = False, seed: int = 0, samples: int = DEFAULT_SAMPLES,
          use_classical_starts: bool = True, learn: bool = True) -> LearnedPlacement:
    """Place ``graph`` on ``cluster`` with ``policy`` (module docstring): zero-shot, or fine-tuned for
    ``budget_seconds`` (default :data:`DEFAULT_BUDGET_SECONDS`). ``learn=False`` samples the policy without
    updating it; ``use_classical_starts=False`` leaves the fast placers' placements out of the search."""
    import copy

    import torch

    from .guided_search import GuidedSearchSettings, guided_search

    began = time.perf_counter()
    budget = checked_budget(DEFAULT_BUDGET_SECONDS if budget_seconds is None else budget_seconds)
    checked_count("samples", samples, 1)
    network = copy.deepcopy(load_placement_policy(policy))  # fine-tuning must not change the caller's policy
    problem = fitted_problem(graph, cluster, network, seed)
    torch.manual_seed(seed)
    rows = proposals(network, problem, samples, seed, ZERO_SHOT_TEMPERATURE)
    makespan, overflow = problem.judge(rows)
    best = int(np.lexsort((makespan, overflow))[0])
    if zero_shot:
        units, mk, over, rounds = rows[best], float(makespan[best]), float(overflow[best]), 0
        if over > 0:  # every sample is out of memory: repaired as the classical placers' placements are
            units, mk, over = repaired(problem, units, mk, over)
    else:
        classical = classical_starts(problem.graph, cluster, seed) if use_classical_starts else []
        starts = [rows[best]] + classical
        if EXPLORE_SHARE > 0 and len(starts) > 1:
            from baselines.anneal import anneal_units

            order = np.lexsort(problem.judge(np.stack(starts))[::-1])[:EXPLORE_STARTS]
            seconds = EXPLORE_SHARE * budget / len(order)
            for i in order:
                found = anneal_units(problem.graph, cluster, starts[i], seed, seconds)
                starts.append(problem.graph.unit_placement(found.placement))
        optimizer = torch.optim.Adam(network.parameters(), lr=1e-3) if learn else None
        settings = GuidedSearchSettings(search_seconds=max(0.5, budget / ROUNDS_PER_BUDGET), chains=2,
                                        incumbent_share=INCUMBENT_SHARE)
        result = guided_search(network, problem, budget - (time.perf_counter() - began), settings, seed,
                               optimizer, starts)
        units, mk, over, rounds = result.units, result.makespan, result.overflow, result.rounds
    placement = problem.graph.expand_unit_placement(units)  # a device per node: coarsening only groups ops
    return LearnedPlacement(placement, mk, over, time.perf_counter() - began,
                            "zero-shot" if zero_shot else "fine-tuned", rounds)


def build_parser() -> OneLineParser:
    parser = OneLineParser(prog="python -m agents.place", description=__doc__.splitlines()[0])
    add_graph_and_cluster_args(parser)
    parser.add_argument("--policy", metavar="FILE", help="a policy from python -m agents.pretrain (default: the "
                                                        "shipped one)")
    parser.add_argument("--budget-seconds", type=float, metavar="S",
                        help=f"fine-tune on this graph for S seconds in all (default {DEFAULT_BUDGET_SECONDS:g})")
    parser.add_argument("--zero-shot", action="store_true",
                        help="no fine-tuning: one forward pass and the best of the sampled placements")
    parser.add_argument("--samples", type=int, default=DEFAULT_SAMPLES, help="placements drawn per forward pass")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", metavar="FILE", help="write the placement (the spec's placement file)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)

    def run() -> int:
        if args.budget_seconds is not None:
            checked_budget(args.budget_seconds)
            if args.zero_shot:
                raise ValueError("--zero-shot takes no --budget-seconds (it does not search)")
        checked_count("--samples", args.samples, 1)
        check_output_paths(args.out)
        graph, cluster = graph_and_cluster_from_args(args)
        if args.policy is not None and not os.path.isfile(args.policy):
            raise ValueError(f"--policy: no such file: {args.policy!r}")
        result = place(graph, cluster, args.policy, args.budget_seconds, args.zero_shot, args.seed, args.samples)
        from placement_env.graph.placement_io import write_placement

        state = "out of memory" if result.overflow > 0 else "fits in memory"
        print(f"{graph.name} on {cluster.num_devices} devices: {result.makespan * 1e3:.3f} ms ({state}), "
              f"{result.method} in {result.seconds:.1f} s")
        if args.out:
            write_placement(result.placement, args.out)
            print(f"placement in {args.out}")
        return 0

    return run_cli(run)


class _CallableModule(types.ModuleType):
    """Lets ``agents.place(...)`` call :func:`place` although ``python -m agents.place`` makes it a module."""

    def __call__(self, *args: Any, **kwargs: Any) -> LearnedPlacement:
        return place(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule

if __name__ == "__main__":
    sys.exit(main())
