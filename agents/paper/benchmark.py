"""The benchmark that settles it: every method on held-out cells at one budget (``python -m agents.benchmark``).

Cells: the ptb, cifar10 and nmt graphs of seeds 100-104 (never used in pretraining) on 3, 5 and 8 devices, and
the six real models on 8 devices (``--graph`` files and ``--cluster`` add or replace them). Methods, each on every
cell:

* every fast classical placer of ``baselines`` (``single`` ... ``split``), as they are;
* ``local-search`` and ``anneal`` with ``--budget-seconds`` each (their start placers included);
* ``learned-scratch``: the guided search (:func:`agents.learned.placer.place`) with an untrained policy, same budget;
* ``zero-shot``: the pretrained policy, one forward pass and the best of its samples;
* ``fine-tuned``: the pretrained policy fine-tuned on the cell, same budget;
* ``steered``: the annealing steered by the shipped steering policy (:mod:`agents.steering`), same budget.

Each result is cached (written atomically, by the driver alone) in ``--out/runs/<cell>/<method>-<digest>.json``,
keyed by everything that determines it (:func:`method_inputs`: the graph's and the cluster's content, the method,
its budget and seed, the policy file's bytes), so an interrupted benchmark resumes where it stopped and a cached
record is never reused for another graph or policy of the same name. The benchmark holds ``--out`` for its whole run
(:class:`~agents.training.lock.OutputLock`). ``--out/benchmark.md`` (a table of makespan / lower bound per cell,
``OOM`` marked, and the verdict) and ``--out/benchmark.csv`` are written at the end. The verdict counts the cells
where the fine-tuned learned placer is at or below the best non-learned method, and by how much it is above or
below.
"""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import io
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from agents.jobs import IN_PROCESS, FanOut, Job, JobRunner, failures, run_jobs
from agents.learned.placer import place
from agents.learned.policy_file import new_network, shipped_policy_path
from agents.steering.placer import SHIPPED_POLICY, steered_placer
from agents.training.lock import OutputLock
from baselines.memory import PlacementInfeasibleError
from baselines.placers import (
    CONSTRUCTIVE,
    CONTIGUOUS_CONSTRUCTIVE,
    CONTIGUOUS_RUNTIME_DEFAULTS,
    RUNTIME_DEFAULTS,
    search_placers,
)
from baselines.starts import run_placer
from placement_env.graph.io import graph_digest
from placement_env.json_files import digest_of, write_text_atomically
from placement_env.sim.simulator import DEFAULT_PARAM_FACTOR, Simulator

from .anytime import anytime_report
from .benchmark_cells import BUDGETED, LEARNED, SEARCHES, Cell, cell_groups


def run_method(method: str, cell: Cell, budget_seconds: float | None, policy: str | None, seed: int = 0) -> dict:
    """Run one method on one cell (``budget_seconds``: the budget of a :data:`BUDGETED` method, None for the
    others); its record: ``makespan`` (s), ``overflow`` (bytes), ``seconds`` (wall-clock), ``lower_bound`` (s), or
    ``error`` when the method found no placement (a learned method on a problem its policy cannot take, such as
    more devices than it knows, included: a row of the table, not a failed run)."""
    graph, cluster = cell.load()
    step = cell.step.checked(graph)
    simulator = Simulator(graph, cluster, DEFAULT_PARAM_FACTOR, *step)
    simulator.run(np.zeros(graph.num_nodes, np.int64))  # compiled before the clock starts, as torch is imported
    record: dict = {"method": method, "cell": cell.key, "budget_seconds": budget_seconds,
                    "lower_bound": float(simulator.lower_bound)}
    began = time.perf_counter()
    try:
        if method == "steered":
            placement = run_placer(steered_placer(checked_budget(budget_seconds), contiguous=cell.contiguous),
                                   graph, cluster, seed, step)
        elif method in CONSTRUCTIVE or method in SEARCHES or method in RUNTIME_DEFAULTS:
            constructive = CONTIGUOUS_CONSTRUCTIVE if cell.contiguous else CONSTRUCTIVE
            runtime = CONTIGUOUS_RUNTIME_DEFAULTS if cell.contiguous else RUNTIME_DEFAULTS
            placer = (constructive[method] if method in constructive else runtime[method] if method in runtime
                      else search_placers(checked_budget(budget_seconds), cell.contiguous)[method])
            placement = run_placer(placer, graph, cluster, seed, step)
        elif cell.contiguous:  # the placement policy places freely: a row that says so, not a failed run
            raise PlacementInfeasibleError(f"{method}: the learned placement policy has no contiguous mode")
        else:
            network = new_network() if method == "learned-scratch" else policy
            budget = None if method == "zero-shot" else checked_budget(budget_seconds)
            try:
                result = place(graph, cluster, network, budget, zero_shot=method == "zero-shot", seed=seed,
                               allow_oom=True, step=step)
            except ValueError as error:  # a problem beyond the policy (more devices than it knows): no placement
                raise PlacementInfeasibleError(f"{method}: {error}") from None
            placement = result.placement
    except PlacementInfeasibleError as error:
        record.update(error=str(error), seconds=time.perf_counter() - began)
        return record
    seconds = time.perf_counter() - began
    makespan, peak, _ = simulator.run(placement)
    record.update(makespan=float(makespan), overflow=float(np.maximum(0.0, peak - cluster.memory).sum()),
                  seconds=seconds)
    return record


def checked_budget(budget_seconds: float | None) -> float:
    """A budgeted method's budget, which must be given."""
    if budget_seconds is None:
        raise ValueError("a budgeted method needs its budget")
    return budget_seconds


def ratio(record: dict) -> float:
    """makespan / lower bound; infinite for a placement out of memory or none."""
    if "makespan" not in record or record.get("overflow", 0) > 0:
        return float("inf")
    return record["makespan"] / record["lower_bound"]


def verdict(table: dict[str, dict[str, dict]]) -> dict:
    """What the numbers say (per cell: the best non-learned makespan, the learned ones against it)."""
    non_learned = [m for m in next(iter(table.values())) if m not in LEARNED]
    out: dict = {"cells": len(table)}
    for learned, against in (("fine-tuned", "best"), ("zero-shot", "heft"), ("learned-scratch", "best"),
                             ("steered", "best")):
        gaps, oom_where_feasible = [], 0
        for row in table.values():
            reference = non_learned if against == "best" else [m for m in ("heft",) if m in row]
            if learned not in row or not reference:  # nothing to compare it with in this run's methods
                continue
            ref = min(ratio(row[m]) for m in reference)
            mine = ratio(row[learned])
            if mine == float("inf") and ref < float("inf"):
                oom_where_feasible += 1
            if ref < float("inf"):
                gaps.append(mine / ref - 1.0)
        gaps_a = np.array(gaps) if gaps else np.zeros(0)
        out[learned] = {"against": against, "cells": len(gaps), "at_or_below": int(np.sum(gaps_a <= 1e-9)),
                        "mean_gap": float(np.mean(gaps_a[np.isfinite(gaps_a)])) if gaps else None,
                        "worst_gap": float(np.max(gaps_a)) if gaps else None,
                        "oom_where_a_classical_placer_fits": oom_where_feasible}
    return out


def measured_columns(record: dict) -> list[str]:
    """A record's CSV columns after cell and method: makespan (ms, empty without a placement), lower bound (ms),
    ratio, oom (0 / 1), seconds."""
    return [f"{record['makespan'] * 1e3:.4f}" if "makespan" in record else "", f"{record['lower_bound'] * 1e3:.4f}",
            f"{ratio(record):.4f}", str(int(record.get("overflow", 0) > 0)), f"{record['seconds']:.2f}"]


def format_report(table: dict[str, dict[str, dict]], budget_seconds: float, command: str) -> tuple[str, str]:
    """``(markdown, csv)`` of the results."""
    names = list(next(iter(table.values())))
    lines = [f"Command: `{command}`", "",
             f"makespan / lower bound per cell (lower is better; OOM: out of memory; -: no placement); search "
             f"methods had {budget_seconds:g} s each. Bold: the best non-learned method of the row.", "",
             "| cell | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(["cell", "method", "makespan_ms", "lower_bound_ms", "ratio", "oom", "seconds"])
    for cell, row in table.items():
        best = min((ratio(row[m]) for m in names if m not in LEARNED), default=float("inf"))
        cells = []
        for m in names:
            r = row[m]
            if "makespan" not in r:
                text = "-"
            elif r["overflow"] > 0:
                text = "OOM"
            else:
                text = f"{ratio(r):.3f}"
                if ratio(r) == best and m not in LEARNED:
                    text = f"**{text}**"
            cells.append(text)
            writer.writerow([cell, m, *measured_columns(r)])
        lines.append(f"| {cell} | " + " | ".join(cells) + " |")
    v = verdict(table)
    lines += ["", "Seconds used per method (mean over cells): " + ", ".join(
        f"{m} {np.mean([row[m]['seconds'] for row in table.values()]):.1f}" for m in names), "", "Verdict:"]
    for learned in LEARNED:
        s = v[learned]
        if not s["cells"]:
            continue
        what = "the best non-learned method" if s["against"] == "best" else "HEFT"
        lines.append(f"- {learned}: at or below {what} in {s['at_or_below']} of {s['cells']} cells "
                     f"({100 * s['at_or_below'] / s['cells']:.0f}%); mean gap {100 * s['mean_gap']:+.2f}%, worst "
                     f"{100 * s['worst_gap']:+.2f}%; out of memory where a classical placer fits: "
                     f"{s['oom_where_a_classical_placer_fits']}")
    return "\n".join(lines) + "\n", buffer.getvalue()


def method_inputs(cell: Cell, method: str, budget_seconds: float | None, policy: str | None, seed: int = 0,
                  problem: tuple[str, dict] | None = None) -> str:
    """The digest of everything that determines ``method``'s record on ``cell``: the graph's content, the
    cluster's, the method, its budget (None for a method without one) and seed, and for the pretrained policy's
    methods the policy file's bytes (the shipped one when ``policy`` is None). A cached record is reused only
    under the same digest. ``problem``: the cell's :func:`problem_digest`, when already computed."""
    graph_key, cluster_dict = problem if problem is not None else problem_digest(cell)
    data: dict = {"graph": graph_key, "cluster": cluster_dict, "method": method,
                  "budget_seconds": budget_seconds, "seed": seed}
    if cell.step.pipelined:  # the plain step's digests stay those of the records cached before pipelining
        data["step"] = list(cell.step)
    if cell.contiguous:
        data["contiguous"] = True
    if method in ("zero-shot", "fine-tuned"):
        data["policy"] = hashlib.sha256(Path(policy or shipped_policy_path()).read_bytes()).hexdigest()
    if method == "steered":
        data["steering_policy"] = hashlib.sha256(SHIPPED_POLICY.read_bytes()).hexdigest()
    return digest_of(data)


def problem_digest(cell: Cell) -> tuple[str, dict]:
    """``(graph digest, cluster as plain data)`` of ``cell``, what its records' digests share."""
    graph, cluster = cell.load()
    return graph_digest(graph), cluster.to_dict()


def cached_record(path: Path, inputs: str) -> dict | None:
    """A method's cached record at ``path``, when it was measured from the same ``inputs``
    (:func:`method_inputs`); None otherwise (or when the file is not a whole record)."""
    if path.exists():
        try:
            record = json.loads(path.read_text())
        except (ValueError, OSError):
            return None
        if isinstance(record, dict) and record.get("inputs") == inputs:
            return record
    return None


def describe_record(record: dict) -> str:
    """A finished method in the progress lines."""
    measured = f"{ratio(record):.3f} x lower bound" if "makespan" in record else "no placement"
    return f"{measured} in {record['seconds']:.1f} s"


def run_benchmark(cells: list[Cell], budget_seconds: float | Sequence[float], out: Path, policy: str | None,
                  method_names: list[str], where: FanOut | JobRunner = IN_PROCESS) -> tuple[str, str, dict[str, str]]:
    """Run (or resume) every method on every cell where ``where`` says, the :data:`BUDGETED` methods at each of
    ``budget_seconds`` (one budget, or several: the anytime report of :mod:`agents.paper.anytime`); returns the
    report (also written to ``out``) and ``{cell/method: why}`` of the methods that failed (left out of the table).
    ``out`` is held for the whole run: a second benchmark on it fails at once (``ValueError``), as do two cells of
    one name."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    budgets = sorted({float(b) for b in ([budget_seconds] if isinstance(budget_seconds, (int, float))
                                         else budget_seconds)})
    with OutputLock(out):
        return _run_benchmark(cells, budgets, out, policy, method_names, where)


def _run_benchmark(cells: list[Cell], budgets: list[float], out: Path, policy: str | None,
                   method_names: list[str], where: FanOut | JobRunner) -> tuple[str, str, dict[str, str]]:
    """:func:`run_benchmark` once ``out`` is held."""
    runs = [(method, budget) for method in method_names
            for budget in (budgets if method in BUDGETED else [None])]
    problems = {cell.key: problem_digest(cell) for cell in cells}  # each graph loaded once
    inputs = {(cell.key, method, budget): method_inputs(cell, method, budget, policy, problem=problems[cell.key])
              for cell in cells for method, budget in runs}
    named: dict[str, Cell] = {}
    for cell in cells:
        if named.setdefault(cell.key, cell) != cell:
            raise ValueError(f"two cells are named {cell.key!r} ({named[cell.key].graph} and {cell.graph}); give "
                             "their graph files distinct names")

    def path_of(key: str, method: str, budget: float | None) -> Path:
        return out / "runs" / key / f"{method}-{inputs[(key, method, budget)][:16]}.json"

    jobs = []
    for cell in cells:
        # files as absolute paths: workers (Ray's too) start in other folders
        movable = dataclasses.replace(
            cell, graph=cell.graph if not Path(cell.graph).is_file() else str(Path(cell.graph).resolve()),
            cluster_file=cell.cluster_file and str(Path(cell.cluster_file).resolve()))
        for method, budget in runs:
            if cached_record(path_of(cell.key, method, budget), inputs[(cell.key, method, budget)]) is None:
                suffix = f"@{budget:g}s" if budget is not None and len(budgets) > 1 else ""
                jobs.append(Job(f"{cell.key}/{method}{suffix}", f"{cell.key} {method}{suffix}", run_method,
                                (method, movable, budget, policy and str(Path(policy).resolve()))))
    if jobs:
        fanout = where.fanout if isinstance(where, JobRunner) else where
        print(f"running {len(jobs)} method(s) on cells in {fanout.describe()}", flush=True)

    def write(job: Job, record: dict) -> None:
        method, key, budget = job.args[0], job.args[1].key, job.args[2]
        path = path_of(key, method, budget)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomically(path, json.dumps({**record, "inputs": inputs[(key, method, budget)]}, indent=1))

    failed = failures(run_jobs(jobs, where, on_done=write, describe=describe_record, title="methods"))
    tables: dict[float, dict[str, dict[str, dict]]] = {}
    for budget in budgets:
        table = tables.setdefault(budget, {})
        for cell in cells:
            row = table.setdefault(cell.key, {})
            for method in method_names:
                at = budget if method in BUDGETED else None
                record = cached_record(path_of(cell.key, method, at), inputs[(cell.key, method, at)])
                if record is not None:
                    row[method] = record
        tables[budget] = {key: row for key, row in table.items() if set(row) == set(method_names)}
    command = "python -m agents.benchmark " + " ".join(sys.argv[1:])
    if len(budgets) == 1:
        table = tables[budgets[0]]
        markdown, table_csv = format_report(table, budgets[0], command) if table else ("no cell finished\n", "")
    else:
        markdown, table_csv = _anytime_files(tables, budgets, method_names, command, out, cell_groups(cells))
    if failed:
        markdown += ("\nLeft out, as a method failed there (rerun to retry): "
                     + "; ".join(f"{key} ({why})" for key, why in failed.items()) + "\n")
    write_text_atomically(out / "benchmark.md", markdown)
    write_text_atomically(out / "benchmark.csv", table_csv)
    return markdown, table_csv, failed


def _anytime_files(tables: dict[float, dict[str, dict[str, dict]]], budgets: list[float], method_names: list[str],
                   command: str, out: Path, groups: dict[str, list[str]]) -> tuple[str, str]:
    """The anytime report and CSV (a ``budget_seconds`` column, empty for a method without a budget), and a table
    per budget in ``out/benchmark_<budget>s.md``."""
    common = set.intersection(*(set(t) for t in tables.values()))
    tables = {b: {key: row for key, row in t.items() if key in common} for b, t in tables.items()}
    if not common:
        return "no cell finished\n", ""
    markdown = anytime_report(tables, budgets, method_names, command, out / "anytime.png", groups)
    rows = ["cell,method,budget_seconds,makespan_ms,lower_bound_ms,ratio,oom,seconds"]
    for budget in budgets:
        per_budget, _ = format_report(tables[budget], budget, command)
        write_text_atomically(out / f"benchmark_{budget:g}s.md", per_budget)
        for key, row in tables[budget].items():
            for method, r in row.items():
                if method not in BUDGETED and budget != budgets[0]:
                    continue
                rows.append(",".join([key, method, f"{budget:g}" if method in BUDGETED else "",
                                      *measured_columns(r)]))
    markdown += "\nPer budget, every cell: " + ", ".join(f"benchmark_{b:g}s.md" for b in budgets) + "\n"
    return markdown, "\n".join(rows) + "\n"
