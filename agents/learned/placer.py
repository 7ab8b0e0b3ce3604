"""Place a graph with a pretrained policy: :func:`place`, what ``agents.place(graph, cluster)`` and
``python -m agents.place`` call.

Two ways, both from a policy made by :mod:`agents.learned.pretraining` (the shipped one by default):

* **zero-shot**: one forward pass of the policy, ``samples`` placements drawn from it (at
  :data:`ZERO_SHOT_TEMPERATURE`, the most likely placement first) and judged in one simulator call, the best
  kept; with ``passes`` above 1, each further pass shows the policy the best placement so far instead of the
  start placement and draws ``samples`` more; when every one is out of memory, the best is repaired as the
  classical placers' placements are.
* **fine-tuned** (the default, ``budget_seconds``, default :data:`DEFAULT_BUDGET_SECONDS`): the most likely of
  the ``samples`` proposals that can be judged in :data:`PROPOSAL_SHARE` of the budget give the first start
  (all of them on a quick step, a few on a long one such as many micro-batches); then
  :data:`EXPLORE_SHARE` of the budget anneals from each of the :data:`EXPLORE_STARTS` best starts (the best
  zero-shot proposal and the placements of the fast classical placers the ``anneal`` placer starts from), then
  the search rounds (:func:`agents.algorithms.search_rounds.search_rounds`) for the rest: the policy proposes,
  the annealing improves (in each round a chain from the best proposal and a longer one, :data:`INCUMBENT_SHARE`
  of the round, continuing the best placement found on one cooling schedule over the whole budget; a round
  lasts about 2 / :data:`ROUNDS_PER_BUDGET` of the budget), the policy learns from the best placements found.

How the constants were chosen, on which graphs, and what the benchmark measures: ``docs/learned.md``.
A policy of another algorithm (a PPO, A2C, MaskablePPO or REINFORCE checkpoint, or a model with SB3's
``predict``) places by acting in the environment instead (:func:`agents.algorithms.rollout.policy_placement`).
"""

from __future__ import annotations

import copy
import functools
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from agents.algorithms.checkpoint import read_checkpoint
from agents.algorithms.problem import PlacementProblem
from agents.algorithms.rollout import policy_placement
from agents.algorithms.search_rounds import EliteArchive, SearchRoundsConfig, sample_rows, search_rounds
from agents.policies.network import PlacementNetwork
from baselines.anneal import anneal_units
from baselines.memory import PlacementInfeasibleError
from baselines.memory_repair import repair_memory
from baselines.placers import CONSTRUCTIVE, QUICK_STARTS, SEARCH_STARTS
from baselines.starts import ranked_starts
from placement_env.checks import checked_count, checked_finite
from placement_env.cli import Terminated
from placement_env.cluster import Cluster
from placement_env.envs.task import fit_units
from placement_env.graph.model import ComputationGraph
from placement_env.sim.pipeline import PLAIN_STEP, Step
from placement_env.sim.simulator import DEFAULT_PARAM_FACTOR, Simulator

from .policy_file import ALGO, load_policy, shipped_policy_path
from .result import LearnedPlacement

DEFAULT_BUDGET_SECONDS = 10.0
DEFAULT_SAMPLES = 512
MAX_SAMPLES = 65_536
"""The most placements one forward pass draws (each a device per unit, judged at once: memory grows with it)."""
ZERO_SHOT_TEMPERATURE = 0.25  # logits divided by it: sharper than the policy's own (1.0)
ROUNDS_PER_BUDGET = 8  # each of a round's two chains anneals for budget / ROUNDS_PER_BUDGET seconds
EXPLORE_SHARE = 0.6  # the part of the budget first spent annealing from each of the EXPLORE_STARTS best starts
EXPLORE_STARTS = 3
INCUMBENT_SHARE: float | None = 0.75  # a round's share continuing the best placement (the rest: its best proposal)
ROLLOUT_STEPS = 10  # environment steps a policy of another algorithm takes
PROPOSAL_SHARE = 0.1  # fine-tuning judges the policy's first proposals for at most this part of the budget
FIRST_JUDGED = 8  # proposals judged first, to time a simulation of the step


def checked_budget(budget_seconds: float) -> float:
    """A positive, finite budget (s), or a ``ValueError`` naming it."""
    value = checked_finite("budget_seconds", budget_seconds)
    if not value > 0:
        raise ValueError(f"budget_seconds must be positive, got {budget_seconds!r}")
    return value


def load_placement_policy(policy: Any = None) -> PlacementNetwork:
    """A :class:`~agents.policies.network.PlacementNetwork` from ``policy``: None (the shipped policy), a policy
    file, or a network. Raises ``ValueError`` when there is no shipped policy or the file is not a policy file."""
    if policy is None:
        path = shipped_policy_path()
        if not path.exists():
            raise ValueError(f"no shipped policy at {path}; make one with python -m agents.pretrain and pass it")
        return _loaded(str(path.resolve()), *_stamp(path))
    if isinstance(policy, PlacementNetwork):
        return policy
    path = Path(policy)
    if not path.is_file():
        return load_policy(policy)  # its error names the file
    return _loaded(str(path.resolve()), *_stamp(path))


def _stamp(path: Path) -> tuple[int, int]:
    stat = path.stat()
    return stat.st_mtime_ns, stat.st_size


@functools.lru_cache(maxsize=4)
def _loaded(path: str, mtime_ns: int, size: int) -> PlacementNetwork:
    """The policy file at ``path`` as last read, read again when its time stamp or size changes (its callers
    copy it before training it)."""
    return load_policy(path)


def classical_starts(graph: ComputationGraph, cluster: Cluster, seed: int,
                     step: Step = PLAIN_STEP) -> list[np.ndarray]:
    """The unit placements of the fast placers the ``anneal`` placer starts from that fit in memory, fastest first
    (computed once per graph, cluster and seed; none when none fits; on a graph of more than
    :data:`~baselines.starts.LARGE_GRAPH_OPS` ops, only the quick ones, as the ``anneal`` placer's)."""
    key = f"classical_starts:{seed}:{tuple(step)}:{json.dumps(cluster.to_dict())}"
    if key not in graph.derived:
        try:
            found, _ = ranked_starts(graph, cluster, {name: CONSTRUCTIVE[name] for name in SEARCH_STARTS}, seed,
                                     quick=QUICK_STARTS, step=step)
        except PlacementInfeasibleError:
            found = []
        graph.derived[key] = [graph.unit_placement(placement) for _, _, placement in found]
    return [units.copy() for units in graph.derived[key]]


def start_units(graph: ComputationGraph, cluster: Cluster, kind: str, seed: int = 0,
                step: Step = PLAIN_STEP) -> np.ndarray:
    """The placement (a device per unit) a policy's observation shows: ``best-fast``, the fastest placement within
    memory of :func:`classical_starts` (everything on device 0 when none fits), or ``single``, everything on
    device 0. ``ValueError`` for another kind."""
    if kind == "best-fast":
        starts = classical_starts(graph, cluster, seed, step)
        if starts:
            return starts[0]
    elif kind != "single":
        raise ValueError(f"unknown policy start {kind!r}")
    return np.zeros(graph.num_units, np.int64)


def fitted_problem(graph: ComputationGraph, cluster: Cluster, network: PlacementNetwork,
                   seed: int = 0, step: Step = PLAIN_STEP) -> PlacementProblem:
    """The :class:`~agents.algorithms.problem.PlacementProblem` of ``graph`` for ``network`` (its observation
    showing the start the policy was trained with), coarsened to the policy's unit limit when larger; a cluster of
    more devices than a per-unit head knows is a ``ValueError`` (a device-embedding head places on any number, its
    observation padded to the cluster's)."""
    max_units, max_devices = network.max_nodes, network.max_devices
    if getattr(network, "device_agnostic", False):
        max_devices = cluster.num_devices
    elif cluster.num_devices > max_devices:
        raise ValueError(f"the cluster has {cluster.num_devices} devices; this policy places on at most "
                         f"{max_devices} (pretrain one with python -m agents.pretrain --devices ..., or place with "
                         "--method steered, the steered annealing, which takes any cluster)")
    graph = fit_units(graph, max_units)
    start = start_units(graph, cluster, getattr(network, "info", {}).get("start", "single"), seed, step)
    return PlacementProblem(graph, cluster, max_devices, start, step)


def proposals(network: PlacementNetwork, problem: PlacementProblem, samples: int, seed: int,
              temperature: float = 1.0) -> np.ndarray:
    """``samples`` unit placements (rows) drawn from one forward pass of ``network`` at ``temperature`` (logits
    divided by it: below 1, closer to the most likely placement, which is the first row)."""
    with torch.no_grad():
        logits = problem.logits(network)
    likeliest = logits.argmax(-1).numpy()[None, :]
    if samples == 1:
        return likeliest
    generator = torch.Generator().manual_seed(seed)
    drawn = sample_rows(torch.softmax(logits / temperature, -1), samples - 1, 0.0, generator)
    return np.concatenate([likeliest, drawn])


def repaired(problem: PlacementProblem, units: np.ndarray, makespan: float,
             overflow: float) -> tuple[np.ndarray, float, float]:
    """``units`` moved within memory by :func:`baselines.memory_repair.repair_memory` (the classical placers'
    repair) with its makespan (s) and overflow (bytes), or as given when the repair finds nothing."""
    try:
        fixed = problem.graph.unit_placement(repair_memory(problem.graph, problem.cluster,
                                                           problem.graph.expand_unit_placement(units),
                                                           step=problem.step))
    except PlacementInfeasibleError:
        return units, makespan, overflow
    mk, over = problem.judge(fixed[None, :])
    return fixed, float(mk[0]), float(over[0])


def is_placer_policy(policy: Any) -> bool:
    """Whether ``policy`` is for the learned placer (None, a :class:`PlacementNetwork`, or a policy file) rather
    than a policy of another algorithm, placed by rolling it out."""
    if policy is None or isinstance(policy, PlacementNetwork):
        return True
    if isinstance(policy, (str, os.PathLike)):
        return read_checkpoint(policy).algo == ALGO
    return False


def place(graph: ComputationGraph, cluster: Cluster, policy: Any = None, budget_seconds: float | None = None,
          zero_shot: bool = False, seed: int = 0, samples: int = DEFAULT_SAMPLES, use_classical_starts: bool = True,
          learn: bool = True, allow_oom: bool = False, step: Step = PLAIN_STEP, passes: int = 1,
          on_search: Callable[[], None] | None = None) -> LearnedPlacement:
    """Place ``graph`` on ``cluster`` with ``policy`` (module docstring): zero-shot, or fine-tuned for
    ``budget_seconds`` seconds in all.

    Args:
        graph, cluster: the problem.
        policy: None (the shipped policy), a policy file or a :class:`PlacementNetwork` (the learned placer; the
            caller's network is not changed), or a checkpoint or model of another algorithm (rolled out for
            :data:`ROLLOUT_STEPS` steps, the graph coarsened to its padding if need be: ``budget_seconds``,
            ``zero_shot`` and ``samples`` do not apply).
        budget_seconds: the fine-tuning's wall-clock budget (default :data:`DEFAULT_BUDGET_SECONDS`).
        zero_shot: one forward pass, no search.
        seed: seeds the sampling and the search.
        samples: placements drawn per forward pass.
        use_classical_starts: whether the search also starts from the fast placers' placements.
        learn: whether the policy learns during fine-tuning (False: it is only sampled).
        allow_oom: return the best placement found even when it is out of memory (``overflow`` > 0).
        step: the step placements are judged by (``Step(8, "1f1b")``: 8 micro-batches pipelined; the policy was
            pretrained on the plain step, the search judges by this one).
        passes: zero-shot forward passes (module docstring; 1: the start placement's alone).
        on_search: called once the fine-tuning's search begins: from then on Ctrl-C keeps the best placement found
            (a command says so; a test sends its signal then).

    Returns:
        a :class:`LearnedPlacement`, a device per node of ``graph`` (coarsening only groups ops). Ctrl-C (or
        SIGTERM, where a command turns it into :class:`~placement_env.cli.Terminated`) during the fine-tuning
        ends it early: the result is then the best placement of the steps that finished (the zero-shot proposals,
        the starts, each annealing chain and search round), with ``interrupted`` set.

    Raises:
        PlacementInfeasibleError: nothing found fits in memory (unless ``allow_oom``), as the classical placers.
        KeyboardInterrupt: Ctrl-C before any placement was judged, or when none found by then fits in memory.
        ValueError: a bad budget, sample or pass count, a cluster larger than the policy knows, a file that is
            not a checkpoint.
    """
    began = time.perf_counter()
    step = step.checked(graph)
    if not is_placer_policy(policy):
        placement, _ = policy_placement(graph, cluster, policy, ROLLOUT_STEPS, seed=seed, coarsen=True)
        result = Simulator(graph, cluster, DEFAULT_PARAM_FACTOR, *step).simulate(placement)
        over = float(np.maximum(0.0, result.peak_memory - cluster.memory).sum())
        found = LearnedPlacement(placement, result.makespan, over, time.perf_counter() - began, "rollout", 0)
    else:
        found = _learned_placement(graph, cluster, policy, budget_seconds, zero_shot, seed, samples,
                                   use_classical_starts, learn, began, step, passes, on_search)
    if found.overflow > 0 and not allow_oom:
        if found.interrupted:
            raise Terminated() if found.terminated else KeyboardInterrupt()
        raise PlacementInfeasibleError(
            f"the learned placer found no placement of {graph.name!r} within the memory of {cluster.num_devices} "
            f"devices (its best overflows by {found.overflow / 2**20:.1f} MiB); a larger cluster, or "
            "allow_oom=True for the best placement anyway")
    return found


def _learned_placement(graph: ComputationGraph, cluster: Cluster, policy: Any, budget_seconds: float | None,
                       zero_shot: bool, seed: int, samples: int, use_classical_starts: bool, learn: bool,
                       began: float, step: Step, passes: int,
                       on_search: Callable[[], None] | None = None) -> LearnedPlacement:
    """:func:`place` with a placer policy."""
    budget = checked_budget(DEFAULT_BUDGET_SECONDS if budget_seconds is None else budget_seconds)
    if checked_count("samples", samples, 1) > MAX_SAMPLES:
        raise ValueError(f"samples must be at most {MAX_SAMPLES:,} (placements drawn and judged at once), got "
                         f"{samples:,}")
    checked_count("passes", passes, 1)
    network = copy.deepcopy(load_placement_policy(policy))  # fine-tuning must not change the caller's policy
    problem = fitted_problem(graph, cluster, network, seed, step)
    torch.manual_seed(seed)
    rows = proposals(network, problem, samples, seed, ZERO_SHOT_TEMPERATURE)
    if not zero_shot:  # a start, judged within its share: a long step (many micro-batches) judges fewer
        rows = rows[:affordable_rows(problem, rows, PROPOSAL_SHARE * budget)]
    makespan, overflow = problem.judge(rows)
    best = int(np.lexsort((makespan, overflow))[0])
    if zero_shot:
        units, mk, over, rounds = rows[best], float(makespan[best]), float(overflow[best]), 0
        for index in range(1, passes):  # each pass edits the best placement so far
            more = proposals(network, problem.restarted(units), samples, seed + index, ZERO_SHOT_TEMPERATURE)
            makespan, overflow = problem.judge(more)
            best = int(np.lexsort((makespan, overflow))[0])
            if (overflow[best], makespan[best]) < (over, mk):
                units, mk, over = more[best], float(makespan[best]), float(overflow[best])
        if over > 0:  # every sample is out of memory: repaired as the classical placers' placements are
            units, mk, over = repaired(problem, units, mk, over)
    else:
        config = SearchRoundsConfig(search_seconds=max(0.5, budget / ROUNDS_PER_BUDGET), chains=2,
                                    incumbent_share=INCUMBENT_SHARE)
        archive = EliteArchive(config.elite)  # everything found, kept should Ctrl-C stop the search
        archive.add(rows[best][None, :], makespan[best:best + 1], overflow[best:best + 1])
        rounds, stop = 0, None
        try:
            if on_search is not None:
                on_search()
            _explore(problem, archive, rows[best], began + budget, seed, use_classical_starts)
            optimizer = torch.optim.Adam(network.parameters(), lr=1e-3) if learn else None
            result = search_rounds(network, problem, budget - (time.perf_counter() - began), config, seed,
                                   optimizer, archive=archive, stop_on_interrupt=True)
            rounds, stop = result.rounds, result.interrupted
        except KeyboardInterrupt as interruption:
            stop = interruption
        units, mk, over = archive.best
        if stop is not None:
            return LearnedPlacement(problem.graph.expand_unit_placement(units), mk, over,
                                    time.perf_counter() - began, "fine-tuned", rounds, True,
                                    isinstance(stop, Terminated))
    placement = problem.graph.expand_unit_placement(units)  # a device per node: coarsening only groups ops
    return LearnedPlacement(placement, mk, over, time.perf_counter() - began,
                            "zero-shot" if zero_shot else "fine-tuned", rounds)


def affordable_rows(problem: PlacementProblem, rows: np.ndarray, seconds: float) -> int:
    """How many of ``rows`` (placements, most likely first) ``problem.judge`` takes about ``seconds`` to judge,
    at least :data:`FIRST_JUDGED`, timed on those first ones."""
    first = rows[:FIRST_JUDGED]
    began = time.perf_counter()
    problem.judge(first)
    each = (time.perf_counter() - began) / len(first)
    return max(len(first), min(len(rows), int(seconds / each) if each > 0 else len(rows)))


def _explore(problem: PlacementProblem, archive: EliteArchive, proposal: np.ndarray, deadline: float, seed: int,
             use_classical_starts: bool) -> None:
    """The fine-tuning's first part: the fast placers' starts (when used) join ``archive`` beside the best
    zero-shot ``proposal``, and :data:`EXPLORE_SHARE` of what is left until ``deadline`` (a
    ``time.perf_counter()`` instant: the end of the budget) anneals from each of the :data:`EXPLORE_STARTS` best
    of them, every result joining ``archive`` as it finishes. What the policy's loading, its proposals and the
    starts took is not annealed again: a small budget stays near its target."""
    cluster = problem.cluster
    starts = [proposal] + (classical_starts(problem.graph, cluster, seed, problem.step) if use_classical_starts
                           else [])
    if len(starts) > 1:
        archive.add(np.stack(starts[1:]), *problem.judge(np.stack(starts[1:])))
    left = deadline - time.perf_counter()
    if EXPLORE_SHARE > 0 and len(starts) > 1 and left > 0:
        order = np.lexsort(problem.judge(np.stack(starts))[::-1])[:EXPLORE_STARTS]
        seconds = EXPLORE_SHARE * left / len(order)
        for i in order:
            annealed = anneal_units(problem.graph, cluster, starts[i], seed, seconds, step=problem.step)
            units = problem.graph.unit_placement(annealed.placement)[None, :]
            archive.add(units, *problem.judge(units))
