"""Policy-guided search: the learned placer's loop on one graph (expert iteration at the speed of the simulator).

Read top to bottom. :class:`PlacementProblem` is one graph on one cluster as the policy sees it (the observation
of the start placement, a device per unit) and as the simulator judges it (a batch of unit placements in one
``simulate_batch`` call). :func:`guided_search` runs rounds until its budget is spent; each round

1. **proposes**: one forward pass of the policy gives per-unit device probabilities; ``samples`` placements are
   drawn from them (mixed with ``epsilon`` of uniform noise) and judged in one batch;
2. **improves**: :func:`baselines.anneal.anneal_units` (the classical annealing, same moves and temperatures)
   runs for ``search_seconds`` from the best placement of the round's proposals and the elite archive's best
   (the *expert* step). With ``incumbent_share`` set (and a finite budget), the round's two chains share
   2 x ``search_seconds``: that share continues the archive's best at the temperatures the annealing's one cooling
   schedule over the whole budget has reached by then, the rest starts from the proposal;
3. **learns** (when an optimizer is given): the policy takes ``updates`` Adam steps of cross-entropy towards the
   ``elite`` best distinct placements found so far (the *imitation* step), each relabelled to agree most with
   the start placement the policy sees (:func:`aligned_labels`), so that the next round's proposals start in the
   basins that search found best.

So the policy is both a learned start distribution for the annealing (a kick in iterated local search whose
shape is learned) and the thing that carries what was learned to other graphs (:mod:`agents.pretrain`).
Placements out of memory rank after every placement within memory (least overflow first).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

import numpy as np
import torch
from torch import Tensor

from agents.policies.network import PlacementNetwork
from baselines.anneal import AnnealConfig, anneal_units

from .problem import PlacementProblem


@dataclass
class EliteArchive:
    """The ``size`` best distinct placements seen, least overflow, then makespan, first."""

    size: int
    rows: list[np.ndarray] = field(default_factory=list)
    keys: list[tuple[float, float]] = field(default_factory=list)

    def add(self, rows: np.ndarray, makespan: np.ndarray, overflow: np.ndarray) -> None:
        """Take in ``rows`` (B x units) with their makespans (s) and overflows (bytes), keeping the ``size`` best
        distinct ones."""
        entries = list(zip(self.keys, self.rows))
        entries += [((float(o), float(mk)), row.copy()) for row, mk, o in zip(rows, makespan, overflow)]
        entries.sort(key=lambda entry: entry[0])
        self.keys, self.rows = [], []
        for key, row in entries:
            if len(self.rows) == self.size:
                break
            if not any(k == key and np.array_equal(r, row) for k, r in zip(self.keys, self.rows)):
                self.keys.append(key)
                self.rows.append(row)

    @property
    def best(self) -> tuple[np.ndarray, float, float]:
        """``(unit placement, makespan s, overflow bytes)`` of the best placement."""
        return self.rows[0], self.keys[0][1], self.keys[0][0]


@dataclass(frozen=True)
class SearchRoundsConfig:
    """The loop's knobs (see the module docstring). ``search_seconds`` is the annealing per round (s)."""

    samples: int = 256
    epsilon: float = 0.02
    search_seconds: float = 1.0  # per chain; with ``incumbent_share`` s, the round's 2 x search_seconds are shared
    elite: int = 8
    updates: int = 2
    chains: int = 1
    incumbent_share: float | None = None
    anneal: AnnealConfig = AnnealConfig()


@dataclass
class SearchRoundsResult:
    """The best unit placement found, its makespan (s) and overflow (bytes), and the loop's counters."""

    units: np.ndarray
    makespan: float
    overflow: float
    rounds: int
    evaluations: int
    seconds: float
    history: list[tuple[float, float]]  # (seconds since the start, best makespan s) after each round
    interrupted: KeyboardInterrupt | None = None  # the Ctrl-C (or SIGTERM) that ended it, with stop_on_interrupt


def sample_rows(probs: Tensor, count: int, epsilon: float, generator: torch.Generator) -> np.ndarray:
    """``count`` unit placements drawn from per-unit device probabilities ``probs`` (units x devices) mixed with
    ``epsilon`` of the uniform distribution."""
    mixed = (1.0 - epsilon) * probs + epsilon / probs.shape[1]
    draws = torch.multinomial(mixed, count, replacement=True, generator=generator)  # (units, count)
    return draws.T.numpy().astype(np.int64)


def imitation_loss(logits: Tensor, targets: np.ndarray) -> Tensor:
    """Mean over ``targets`` (E x units, device labels) of the summed per-unit cross-entropy, per unit."""
    log_probs = torch.log_softmax(logits, dim=-1)  # (units, devices)
    index = torch.as_tensor(targets, dtype=torch.long).T  # (units, E)
    return -log_probs.gather(1, index).mean()


def search_rounds(network: PlacementNetwork, problem: PlacementProblem, budget_seconds: float,
                  config: SearchRoundsConfig = SearchRoundsConfig(), seed: int = 0,
                  optimizer: torch.optim.Optimizer | None = None, starts: list[np.ndarray] | None = None,
                  max_rounds: int | None = None, archive: EliteArchive | None = None,
                  stop_on_interrupt: bool = False) -> SearchRoundsResult:
    """Propose, improve, learn (module docstring) on ``problem`` for ``budget_seconds`` of wall-clock time (or
    ``max_rounds`` rounds). ``starts`` (unit placements) join the archive before the first round; ``archive``
    continues an earlier search's (it is updated in place). Without an ``optimizer`` the policy is only sampled
    (it does not learn). With ``stop_on_interrupt``, Ctrl-C (a ``KeyboardInterrupt``) during a round ends the
    search with the best placement of the rounds before and the round's finished steps, the exception in
    ``interrupted``; otherwise it propagates."""
    began = time.perf_counter()
    generator = torch.Generator().manual_seed(seed)
    archive = EliteArchive(config.elite) if archive is None else archive
    if starts:
        rows = np.stack(starts)
        archive.add(rows, *problem.judge(rows))
    counters = [0, 0]  # rounds, evaluations
    history: list[tuple[float, float]] = []
    interrupted = None
    try:
        _rounds(network, problem, budget_seconds, config, seed, optimizer, max_rounds, archive, began, generator,
                counters, history)
    except KeyboardInterrupt as stop:
        if not stop_on_interrupt:
            raise
        interrupted = stop
    units, best_makespan, best_overflow = archive.best
    return SearchRoundsResult(units, best_makespan, best_overflow, counters[0], counters[1],
                              time.perf_counter() - began, history, interrupted)


def _rounds(network: PlacementNetwork, problem: PlacementProblem, budget_seconds: float, config: SearchRoundsConfig,
            seed: int, optimizer: torch.optim.Optimizer | None, max_rounds: int | None, archive: EliteArchive,
            began: float, generator: torch.Generator, counters: list[int],
            history: list[tuple[float, float]]) -> None:
    """:func:`search_rounds`'s loop; ``counters`` (rounds, evaluations), ``history`` and ``archive`` are updated as
    it goes, so that an interruption keeps what finished."""
    rounds = 0
    proposing = 0.0  # how long the last round's forward pass, sampling and judging took (s)
    while True:
        left = budget_seconds - (time.perf_counter() - began)
        if left <= proposing or (max_rounds is not None and rounds >= max_rounds):
            break  # no round whose proposals alone would overrun the budget
        proposed = time.perf_counter()
        logits = problem.logits(network)
        rows = sample_rows(torch.softmax(logits.detach(), -1), config.samples, config.epsilon, generator)
        makespan, overflow = problem.judge(rows)
        counters[1] += len(rows)
        archive.add(rows, makespan, overflow)
        proposing = time.perf_counter() - proposed
        proposal = rows[int(np.lexsort((makespan, overflow))[0])]
        for chain, start in enumerate([proposal, archive.best[0]][:config.chains]):
            seconds = min(config.search_seconds, max(0.0, budget_seconds - (time.perf_counter() - began)))
            anneal = config.anneal
            if config.incumbent_share is not None and budget_seconds < float("inf"):
                # the incumbent's chain follows one cooling schedule over the whole budget; the proposal's is short
                share = config.incumbent_share if chain == 1 else 1.0 - config.incumbent_share
                seconds = min(2 * config.search_seconds * share,
                              max(0.0, budget_seconds - (time.perf_counter() - began)))
                if chain == 1:
                    low = (time.perf_counter() - began) / budget_seconds
                    high = min(1.0, low + seconds / budget_seconds)
                    ratio = anneal.t_end / anneal.t_start
                    anneal = replace(anneal, t_start=anneal.t_start * ratio**low, t_end=anneal.t_start * ratio**high)
            if seconds <= 0:
                break
            refined = anneal_units(problem.graph, problem.cluster, start, seed + rounds, seconds, config=anneal,
                                   step=problem.step)
            counters[1] += refined.evaluations
            units = problem.graph.unit_placement(refined.placement)[None, :]
            archive.add(units, np.array([refined.makespan]), np.array([refined.overflow]))
        if optimizer is not None and time.perf_counter() - began < budget_seconds:  # no update past the budget
            targets = problem.labels(np.stack(archive.rows))
            for step in range(config.updates):
                loss = imitation_loss(logits if step == 0 else problem.logits(network), targets)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
        rounds += 1
        counters[0] = rounds
        history.append((time.perf_counter() - began, archive.best[1]))

