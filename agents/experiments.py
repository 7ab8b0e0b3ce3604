"""The paper's experiments, end to end: ``python -m agents.experiments <table> [options]``.

    python -m agents.experiments table2 --quick          # minutes; every row, a tiny search budget
    python -m agents.experiments table2 --seeds 3 --budget-seconds 60
    python -m agents.experiments all --seeds 1 --budget-seconds 30 --out experiments

Experiments (the paper's layout; every table also lists the classical placers and the lower bound):

* ``table2``: execution time of the best placement each encoder's policy finds, and its improvement over the
  Placeto encoder, per suite (ptb, cifar10, nmt) and device count (3, 5, 8);
* ``table3``: computation time of the same runs, and its improvement over Placeto;
* ``table4``: the FAGA ablation (adjacency matrix, high- and low-frequency terms switched off and on);
* ``table5``: the DPFR ablation (average- and max-pooling branches);
* ``table6``: the real models (VGG19 ... PNASNet), FADP-GT against Placeto;
* ``figure4``: learning curves (best makespan so far against environment steps) per encoder.

What is measured, on this machine's CPUs:

* **execution time** is the simulated time of one training step (``placement_env.simulate``, milliseconds) of
  the best placement the run found; the paper measured whole training runs on GPUs with Nsight, so only
  ratios between rows are comparable with it;
* **computation time** is the paper's: policy search plus validation, preprocessing excluded. Every run has
  the same wall-clock budget (``--budget-seconds``), so the time spent is the budget; what differs between
  encoders, and what the table reports, is the search time until the run first saw its final best placement,
  plus the validating simulation;
* each run is :func:`agents.training.train` (what ``train.py`` runs) on one graph (``--graphs K``: seeds
  0..K-1 of the suite, each trained separately) with one seed; a cell is the mean over the graphs, then
  mean +- standard deviation over ``--seeds``.

Runs are cached under ``--out``/runs by their full configuration, so tables that share runs (table2 and
table3 and figure4; table4's full row, table5's full row and table2's FADP-GT row) train them once, and an
interrupted experiment resumes where it stopped. Outputs: ``<table>.md`` (Markdown in the paper's layout, with
the command line and machine) and ``<table>.csv`` (one row per run) in ``--out``; ``figure4.png`` too.
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
import platform
import sys
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from agents.fanout import (
    IN_PROCESS,
    FanOut,
    Job,
    JobRunner,
    add_fanout_args,
    failures,
    fanout_from_args,
    open_runner,
    run_jobs,
)
from agents.training.config import TrainConfig
from baselines import PLACERS as ALL_PLACERS
from baselines import PlacementInfeasibleError
from placement_env import Cluster, load_graph, lower_bound, simulate
from placement_env.cli import OneLineParser, check_output_paths, run_cli
from placement_env.json_files import replace_atomically, write_text_atomically

SUITES = ("ptb", "cifar10", "nmt")
DEVICE_COUNTS = (3, 5, 8)
# the paper's table-2 order; "transformer" (FADP-GT's backbone without FAGA/DPFR) is this project's extra row
ENCODERS = ("placeto", "sage", "pgnn", "gnn", "gcn", "gat", "graphormer", "mamba", "transformer", "fadp-gt")
REFERENCE = "placeto"
PLACERS = ("single", "m-topo", "m-etf", "heft", "metis")
# table 4 rows (the paper's order): adjacency matrix, high frequency, low frequency
FAGA_ROWS = ((False, False, False), (True, False, False), (False, True, False), (False, False, True),
             (False, True, True), (True, True, True))
# table 5 rows: global average pooling, global max pooling
DPFR_ROWS = ((False, False), (True, False), (False, True), (True, True))
REAL_MODELS = ("vgg19", "inception_v3", "resnet50", "resnet101", "nasnet_large", "pnasnet_large")
EXPERIMENTS = ("table2", "table3", "table4", "table5", "table6", "figure4")
RESULTS_INTRO = """# Results

Every table below was written by `python -m agents.experiments` (the command line heads each table; the
per-run numbers are in the CSV files next to the tables in `experiments/`), on this project's 2-core CPU machine
while other work shared it, so the computation times are wall-clock times under load. Execution times are
simulated step times (`placement_env.simulate`, milliseconds) of 3, 5 or 8 simulated P100s on PCIe, not the
paper's measured training runs: compare ratios between rows with the paper, not absolute values. Each
"Against the paper" paragraph is computed from the table above it. See `agents/experiments.py` for what each
column means.
"""


@dataclass(frozen=True)
class Run:
    """One training run: an encoder (with options) on one graph and cluster, one seed."""

    encoder: str
    graph: str
    devices: int
    seed: int
    options: tuple[tuple[str, object], ...] = ()
    label: str = field(default="", compare=False)

    def key(self, settings: dict) -> str:
        text = json.dumps({**asdict(self), "label": None, **settings}, sort_keys=True, default=str)
        return hashlib.sha1(text.encode()).hexdigest()[:16]


@dataclass
class Settings:
    """What every run of one invocation shares."""

    seeds: int = 3
    graphs: int = 1
    devices: tuple[int, ...] = DEVICE_COUNTS
    budget_seconds: float = 60.0
    algo: str = "guided"
    hidden_dim: int = 64
    expected_moves: float = 1.0
    initial_placement: str = "single"
    models: tuple[str, ...] = REAL_MODELS
    model_devices: int = 8
    timesteps: int | None = None  # a step limit per run besides the budget (None: the budget decides)
    out: Path = Path("experiments")
    failed: dict[str, str] = field(default_factory=dict)  # run key -> why, for runs that failed (not a setting)
    placers: dict[tuple[tuple[str, ...], int], dict] = field(default_factory=dict)  # placer_rows, once computed

    def run_settings(self) -> dict:
        """What a run's cache key holds besides the run itself."""
        settings = {"budget_seconds": self.budget_seconds, "algo": self.algo, "hidden_dim": self.hidden_dim,
                    "expected_moves": self.expected_moves, "initial_placement": self.initial_placement}
        return settings if self.timesteps is None else {**settings, "timesteps": self.timesteps}


QUICK: dict[str, Any] = {"seeds": 1, "graphs": 1, "devices": (3,), "budget_seconds": 2.0, "hidden_dim": 16,
         "models": ("vgg19", "resnet50"), "model_devices": 3}


# ----------------------------------------------------------------------------------------------- running

def train_config(run: Run, settings: Settings, folder: Path) -> TrainConfig:
    """The training run ``run``, writing to ``folder``."""
    return TrainConfig(encoder=run.encoder, graph=run.graph, devices=run.devices, seed=run.seed,
                       budget_seconds=settings.budget_seconds, algo=settings.algo, hidden_dim=settings.hidden_dim,
                       expected_moves=settings.expected_moves, initial_placement=settings.initial_placement,
                       encoder_options=dict(run.options), out=str(folder),
                       timesteps=TrainConfig.timesteps if settings.timesteps is None else settings.timesteps)


def run_folder(run: Run, settings: Settings) -> Path:
    """Where ``run`` keeps its outputs and its ``results.json`` (the run cache)."""
    return settings.out / "runs" / run.key(settings.run_settings())


def train_run(run: Run, settings: Settings) -> dict:
    """Train ``run`` and return its results (``results.json``'s record, with the curve); writes its outputs
    (checkpoint, tracker) in its folder but not ``results.json``: that is the cache entry, written whole by
    the driver (:func:`run_training`, or :func:`fan_out` as results arrive)."""
    from agents.training.run import train  # torch: loaded where the run trains, not by a driver that only waits

    folder = run_folder(run, settings)
    result = train(train_config(run, settings, folder))
    if result.interrupted:  # Ctrl-C: a cut-short run is not a result to keep or tabulate
        raise KeyboardInterrupt
    results = dict(result.record)
    results["curve"] = json.loads((folder / "tracker.json").read_text())["curve"]
    return results


def failed_results(run: Run, why: str) -> dict:
    """What the tables show for a run that failed: no makespan (the cell says "failed")."""
    return {"seed": run.seed, "failed": why, "oom": False, "makespan": float("nan"), "lb_ratio": float("nan"),
            "best_found_seconds": None, "validation_seconds": 0.0, "search_seconds": 0.0, "steps": 0, "curve": []}


def run_training(run: Run, settings: Settings) -> dict:
    """``run``'s results: from the run cache, else (a run :func:`fan_out` reported failed) a failed record, else
    trained here and cached."""
    results_file = run_folder(run, settings) / "results.json"
    if results_file.exists():
        return json.loads(results_file.read_text())
    key = run.key(settings.run_settings())
    if key in settings.failed:
        return failed_results(run, settings.failed[key])
    results = train_run(run, settings)
    results_file.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomically(results_file, json.dumps(results, indent=1))
    return results


def describe_results(results: dict) -> str:
    """A finished job in the progress lines: a run's best makespan, or the classical placers' rows."""
    if "oom" not in results:
        return "classical placers placed"
    return "out of memory" if results["oom"] else f"{results['makespan'] * 1e3:.3f} ms"


def fan_out(runs: list[Run], settings: Settings, where: FanOut | JobRunner = IN_PROCESS,
            placer_columns: list[tuple[tuple[str, ...], int]] | None = None) -> dict[str, str]:
    """Train every run not yet in the cache where ``where`` says (one progress report over all of them), writing
    each ``results.json`` here as it arrives, and place ``placer_columns`` (graph names, device count) with the
    classical placers alongside; returns ``{run key: why}`` of the runs that failed (also kept in
    ``settings.failed`` for the tables)."""
    absolute = replace(settings, out=settings.out.resolve())  # workers (Ray's too) start in other folders
    jobs: dict[str, Job] = {}
    for run in runs:
        key = run.key(settings.run_settings())
        if key not in jobs and not (run_folder(run, settings) / "results.json").exists():
            jobs[key] = Job(key, f"{run.label or run.encoder} {run.graph} {run.devices} devices seed {run.seed}",
                            train_run, (run, absolute))
    cached = len({r.key(settings.run_settings()) for r in runs}) - len(jobs)
    if cached:
        print(f"{cached} run(s) already in {settings.out / 'runs'}", flush=True)
    if jobs:
        fanout = where.fanout if isinstance(where, JobRunner) else where
        print(f"training {len(jobs)} run(s) in {fanout.describe()}", flush=True)
    placer_jobs = {}
    for names, d in dict.fromkeys(placer_columns or []):
        if (names, d) not in settings.placers:
            key = f"placers {' '.join(names)} {d} devices"
            placer_jobs[key] = Job(key, f"classical placers on {', '.join(names)}, {d} devices", placer_rows,
                                   (list(names), d))

    def keep(job: Job, value: dict) -> None:
        if job.key in placer_jobs:
            settings.placers[(tuple(job.args[0]), job.args[1])] = value
            return
        folder = run_folder(job.args[0], settings)
        folder.mkdir(parents=True, exist_ok=True)  # on a cluster without a shared folder, the run wrote elsewhere
        write_text_atomically(folder / "results.json", json.dumps(value, indent=1))

    # the runs first (the longest jobs), the placers last, filling the tail
    outcomes = run_jobs(list(jobs.values()) + list(placer_jobs.values()), where, on_done=keep,
                        describe=describe_results)
    failed = failures({key: value for key, value in outcomes.items() if key in jobs})
    settings.failed.update(failed)
    return failed


def placer_rows(graph_names: list[str], devices: int) -> dict[str, tuple[float, float]]:
    """``{placer: (makespan s, placement wall time s)}`` and ``"lower bound"``, averaged over the graphs."""
    cluster = Cluster.preset("p100", devices)
    rows: dict[str, list[tuple[float, float]]] = {name: [] for name in PLACERS}
    rows["lower bound"] = []
    for name in graph_names:
        graph = load_graph(name)
        for placer in PLACERS:
            start = time.perf_counter()
            try:
                placement = ALL_PLACERS[placer](graph, cluster, 0)
                result = simulate(graph, placement, cluster)
                value = float("inf") if result.oom else result.makespan
            except PlacementInfeasibleError:
                value = float("inf")
            rows[placer].append((value, time.perf_counter() - start))
        rows["lower bound"].append((lower_bound(graph, cluster), 0.0))
    return {k: (float(np.mean([a for a, _ in v])), float(np.mean([b for _, b in v]))) for k, v in rows.items()}


@dataclass
class Cell:
    """Per seed: the graph-mean execution time (s, inf when OOM) and computation time (s) of one method."""

    exe: list[float]
    com: list[float]

    @staticmethod
    def of(runs: list[dict], seeds: int) -> Cell:
        exe, com = [], []
        for s in range(seeds):
            mine = [r for r in runs if r["seed"] == s]
            exe.append(float(np.mean([float("inf") if r["oom"] else r["makespan"] for r in mine])))
            com.append(float(np.mean([float("nan") if "failed" in r else (r["best_found_seconds"] or 0.0)
                                      + r["validation_seconds"] for r in mine])))
        return Cell(exe, com)


def train_cells(methods: dict[str, tuple[str, tuple]], graphs_of: dict[str, list[str]], settings: Settings,
                csv_rows: list[dict], devices: tuple[int, ...]) -> dict[tuple[str, str, int], Cell]:
    """Train every method on every column (graph group x device count) and seed; ``(method, column, devices)``
    -> :class:`Cell`."""
    cells = {}
    for column, graph_names in graphs_of.items():
        for d in devices:
            for label, (encoder, options) in methods.items():
                runs = []
                for seed in range(settings.seeds):
                    for g in graph_names:
                        r = run_training(Run(encoder, g, d, seed, options, label), settings)
                        runs.append(r)
                        csv_rows.append({"method": label, "column": column, "graph": g, "devices": d, "seed": seed,
                                         "makespan_ms": r["makespan"] * 1e3, "oom": r["oom"],
                                         "lb_ratio": r["lb_ratio"], "best_found_s": r["best_found_seconds"],
                                         "search_s": r["search_seconds"], "com_s": (r["best_found_seconds"] or 0.0)
                                         + r["validation_seconds"], "steps": r["steps"]})
                cells[(label, column, d)] = Cell.of(runs, settings.seeds)
    return cells


# ------------------------------------------------------------------------------------------- formatting

def _mean_spread(values: list[float], scale: float, digits: int) -> str:
    if any(np.isnan(v) for v in values):
        return "failed"
    finite = [v for v in values if np.isfinite(v)]
    if len(finite) < len(values):
        return "OOM"
    m = np.mean(finite) * scale
    return f"{m:.{digits}f}" if len(finite) == 1 else f"{m:.{digits}f} ± {np.std(finite) * scale:.{digits}f}"


def _improvement(value: list[float], reference: list[float]) -> str:
    v, r = np.mean(value), np.mean(reference)
    if not (np.isfinite(v) and np.isfinite(r)) or r == 0:
        return "-"
    return f"{(r - v) / r:+.2%}"


def comparison_table(cells, placers, methods: list[str], columns: list[str], devices: tuple[int, ...],
                     reference: str, metric: str, column_title: str) -> str:
    """Rows: methods, then placers and the lower bound; per device count: the metric and its improvement."""
    scale, digits, name = (1e3, 3, "Exe_Time (ms)") if metric == "exe" else (1.0, 2, "Com_Time (s)")
    head = f"| Method | {column_title} | " + " | ".join(f"{d} GPUs {name} | Impro" for d in devices) + " |"
    lines = [head, "|" + "---|" * (2 + 2 * len(devices))]
    for column in columns:
        for method in methods:
            parts = []
            for d in devices:
                cell, ref = cells[(method, column, d)], cells[(reference, column, d)]
                values, ref_values = (cell.exe, ref.exe) if metric == "exe" else (cell.com, ref.com)
                parts += [_mean_spread(values, scale, digits),
                          "-" if method == reference else _improvement(values, ref_values)]
            lines.append(f"| {method} | {column} | " + " | ".join(parts) + " |")
        for placer in list(PLACERS) + ["lower bound"]:
            parts = []
            for d in devices:
                exe, seconds = placers[(column, d)][placer]
                value = exe if metric == "exe" else seconds
                parts += [("infeasible" if not np.isfinite(value) else f"{value * scale:.{digits}f}"), ""]
            lines.append(f"| *{placer}* | {column} | " + " | ".join(parts) + " |")
    return "\n".join(lines)


def header(experiment: str, settings: Settings, argv: list[str]) -> str:
    cpu = platform.processor() or platform.machine()
    return (f"Command: `python -m agents.experiments {' '.join(argv)}`  \n"
            f"Machine: {os.cpu_count()} CPU cores ({cpu}), {platform.platform()}; no GPU (the cluster is "
            f"simulated: P100s on PCIe).  \n"
            f"Each run: `train.py --algo {settings.algo} --budget-seconds {settings.budget_seconds:g} "
            f"--hidden-dim {settings.hidden_dim} --expected-moves {settings.expected_moves:g} "
            f"--initial-placement {settings.initial_placement}` on one graph; {settings.seeds} seed(s); "
            f"{settings.graphs} graph(s) per suite.\n")


# ------------------------------------------------------------------------------------------------ findings

def _mean(cell: Cell, metric: str = "exe") -> float:
    return float(np.mean(cell.exe if metric == "exe" else cell.com))


def _pct(x: float) -> str:
    return f"{x:+.2%}"


def comparison_findings(cells, placers, methods: list[str], columns: list[str], devices, best: str, reference: str,
                        metric: str, what: str) -> list[str]:
    """Plain statements, computed from the cells, of where ``best`` stands (the paper: first everywhere)."""
    out = []
    settings_ = [(c, d) for c in columns for d in devices]
    first = [(c, d) for c, d in settings_
             if _mean(cells[(best, c, d)], metric) <= min(_mean(cells[(m, c, d)], metric) for m in methods)]
    word = "lowest" if metric == "exe" else "shortest"
    paper = ("the paper: in all of them" if metric == "exe" else
             "the paper: not the shortest, GNN, GCN and GAT are slightly faster, but far shorter than Placeto's")
    out.append(f"{best} has the {word} {what} (ties counted) of the {len(methods)} rows in {len(first)} of "
               f"{len(settings_)} settings ({paper})"
               + (f": {', '.join(f'{c}/{d}' for c, d in first)}." if first else "."))
    gains = [(_mean(cells[(reference, c, d)], metric) - _mean(cells[(best, c, d)], metric))
             / _mean(cells[(reference, c, d)], metric) for c, d in settings_
             if np.isfinite(_mean(cells[(reference, c, d)], metric)) and _mean(cells[(reference, c, d)], metric) > 0]
    if gains:
        out.append(f"Its improvement over {reference} ranges from {_pct(min(gains))} to {_pct(max(gains))} "
                   f"(mean {_pct(float(np.mean(gains)))}); the paper reports improvements in every setting.")
    if metric == "exe":
        beaten = [(c, d) for c, d in settings_
                  if _mean(cells[(best, c, d)]) < min(v[0] for k, v in placers[(c, d)].items() if k != "lower bound")]
        out.append(f"{best} beats every classical placer ({', '.join(PLACERS)}) in {len(beaten)} of "
                   f"{len(settings_)} settings (the paper does not compare with them).")
        if len(devices) > 1:
            monotone = [c for c in columns
                        if all(_mean(cells[(best, c, a)]) >= _mean(cells[(best, c, b)])
                               for a, b in zip(devices, devices[1:]))]
            out.append(f"{best}'s execution time falls (or stays) as devices are added in {len(monotone)} of "
                       f"{len(columns)} datasets (the paper: in all).")
    return out


# -------------------------------------------------------------------------------------------- experiments

def suite_graphs(settings: Settings) -> dict[str, list[str]]:
    return {s: [f"{s}/{i}" for i in range(settings.graphs)] for s in SUITES}


def classical_rows(graph_names: list[str], devices: int, settings: Settings) -> dict[str, tuple[float, float]]:
    """:func:`placer_rows`, computed once per invocation (by :func:`fan_out`, or here)."""
    key = (tuple(graph_names), devices)
    if key not in settings.placers:
        settings.placers[key] = placer_rows(graph_names, devices)
    return settings.placers[key]


def all_placers(graphs_of: dict[str, list[str]], devices, settings: Settings) -> dict:
    return {(c, d): classical_rows(names, d, settings) for c, names in graphs_of.items() for d in devices}


@dataclass(frozen=True)
class Design:
    """The runs one experiment tabulates: every method (label -> (encoder, options)) on every column's graphs
    (column -> graph names) at every device count, each seed."""

    methods: dict[str, tuple[str, tuple]]
    graphs_of: dict[str, list[str]]
    devices: tuple[int, ...]

    def runs(self, seeds: int) -> list[Run]:
        return [Run(encoder, g, d, seed, options, label) for graphs in self.graphs_of.values() for d in self.devices
                for label, (encoder, options) in self.methods.items() for seed in range(seeds) for g in graphs]

    def placer_columns(self) -> list[tuple[tuple[str, ...], int]]:
        """The (graphs, device count) the classical placers' rows are computed for."""
        return [(tuple(graphs), d) for graphs in self.graphs_of.values() for d in self.devices]


def faga_methods() -> dict[str, tuple[str, tuple]]:
    """Table 4's rows: FADP-GT with the adjacency matrix, high- and low-frequency terms switched off and on."""
    methods = {}
    for i, (adj, high, low) in enumerate(FAGA_ROWS, start=1):
        label = f"{i}: {_flags(('adjacency', 'high', 'low'), (adj, high, low))}"
        methods[label] = ("fadp-gt", () if (adj and high and low) else
                          (("use_adjacency", adj), ("use_high", high), ("use_low", low)))
    return methods


def dpfr_methods() -> dict[str, tuple[str, tuple]]:
    """Table 5's rows: FADP-GT with the average- and max-pooling branches switched off and on."""
    methods = {}
    for i, (gap, gmp) in enumerate(DPFR_ROWS, start=1):
        label = f"{i}: {_flags(('GAP', 'GMP'), (gap, gmp))}"
        methods[label] = ("fadp-gt", () if (gap and gmp) else (("use_gap", gap), ("use_gmp", gmp)))
    return methods


def design(experiment: str, settings: Settings) -> Design:
    """The runs of ``experiment`` (table2, table3 and figure4 share theirs)."""
    if experiment == "table6":
        return Design({"placeto": ("placeto", ()), "fadp-gt": ("fadp-gt", ())}, {m: [m] for m in settings.models},
                      (settings.model_devices,))
    methods = {"table4": faga_methods, "table5": dpfr_methods}.get(experiment, lambda: {e: (e, ()) for e in ENCODERS})
    return Design(methods(), suite_graphs(settings), settings.devices)


def experiment_table2(settings: Settings, csv_rows: list[dict], metric: str = "exe") -> tuple[str, list[str]]:
    plan = design("table2", settings)
    methods, graphs_of = plan.methods, plan.graphs_of
    cells = train_cells(methods, graphs_of, settings, csv_rows, settings.devices)
    placers = all_placers(graphs_of, settings.devices, settings)
    args = (cells, placers, list(methods), list(graphs_of), settings.devices)
    what = "execution time" if metric == "exe" else "computation time"
    return (comparison_table(*args, REFERENCE, metric, "Dataset"),
            comparison_findings(*args, "fadp-gt", REFERENCE, metric, what))


def experiment_table3(settings: Settings, csv_rows: list[dict]) -> tuple[str, list[str]]:
    return experiment_table2(settings, csv_rows, metric="com")


def _flags(names: tuple[str, ...], values: tuple[bool, ...]) -> str:
    return ", ".join(f"{n} {'✓' if v else '×'}" for n, v in zip(names, values))


def experiment_table4(settings: Settings, csv_rows: list[dict]) -> tuple[str, list[str]]:
    return _ablation(faga_methods(), settings, csv_rows)


def _ablation(methods: dict, settings: Settings, csv_rows: list[dict]) -> tuple[str, list[str]]:
    """Table 4 / 5: the variants against the first (everything off); the last row is the full model."""
    graphs_of = suite_graphs(settings)
    cells = train_cells(methods, graphs_of, settings, csv_rows, settings.devices)
    placers = all_placers(graphs_of, settings.devices, settings)
    args = (cells, placers, list(methods), list(graphs_of), settings.devices)
    labels = list(methods)
    findings = comparison_findings(*args, labels[-1], labels[0], "exe", "execution time")[:2]
    return comparison_table(*args, labels[0], "exe", "Dataset"), findings


def experiment_table5(settings: Settings, csv_rows: list[dict]) -> tuple[str, list[str]]:
    return _ablation(dpfr_methods(), settings, csv_rows)


def experiment_table6(settings: Settings, csv_rows: list[dict]) -> tuple[str, list[str]]:
    plan = design("table6", settings)
    graphs_of, methods = plan.graphs_of, plan.methods
    d = settings.model_devices
    cells = train_cells(methods, graphs_of, settings, csv_rows, (d,))
    placers = all_placers(graphs_of, (d,), settings)
    lines = [f"{d} simulated P100s.", "",
             "| Method | Model | Avg_Exe_Time (ms) | Impro | Avg_Com_Time (s) | Impro |", "|---|---|---|---|---|---|"]
    for model in settings.models:
        ref = cells[("placeto", model, d)]
        for method in methods:
            c = cells[(method, model, d)]
            first = method == "placeto"
            lines.append(f"| {method} | {model} | {_mean_spread(c.exe, 1e3, 3)} | "
                         f"{'-' if first else _improvement(c.exe, ref.exe)} | {_mean_spread(c.com, 1.0, 2)} | "
                         f"{'-' if first else _improvement(c.com, ref.com)} |")
        for placer, (exe, seconds) in placers[(model, d)].items():
            shown = "infeasible" if not np.isfinite(exe) else f"{exe * 1e3:.3f}"
            lines.append(f"| *{placer}* | {model} | {shown} | | {seconds:.2f} | |")
    better = [m for m in settings.models if _mean(cells[("fadp-gt", m, d)]) < _mean(cells[("placeto", m, d)])]
    oom = [m for m in settings.models if not np.isfinite(_mean(cells[("placeto", m, d)]))]
    findings = [f"FADP-GT's placement is faster than Placeto's on {len(better)} of {len(settings.models)} models "
                f"({', '.join(better) or 'none'}; the paper: on every model where Placeto fits)."]
    ours_oom = [m for m in settings.models if not np.isfinite(_mean(cells[("fadp-gt", m, d)]))]
    findings.append((f"Placeto's best placement runs out of memory on {', '.join(oom)}" if oom else
                     "Placeto's best placement fits in memory on every model")
                    + (f"; so does FADP-GT's on {', '.join(ours_oom)}" if ours_oom else "; FADP-GT's fits on all")
                    + " (the paper: Placeto runs out of memory on NASNet and PNASNet, FADP-GT does not).")
    return "\n".join(lines), findings


def experiment_figure4(settings: Settings, csv_rows: list[dict]) -> tuple[str, list[str]]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    graphs_of = suite_graphs(settings)
    fig, axes = plt.subplots(len(settings.devices), len(SUITES), figsize=(4 * len(SUITES), 3 * len(settings.devices)),
                             squeeze=False, dpi=90)
    lines = ["| Encoder | Dataset | GPUs | best after 25% of the steps (ms) | after 50% | final |",
             "|---|---|---|---|---|---|"]
    for col, suite in enumerate(SUITES):
        for row, d in enumerate(settings.devices):
            ax = axes[row][col]
            placers = classical_rows(graphs_of[suite], d, settings)
            for i, encoder in enumerate(ENCODERS):
                curves = []
                for seed in range(settings.seeds):
                    for g in graphs_of[suite]:
                        r = run_training(Run(encoder, g, d, seed, (), encoder), settings)
                        if "failed" in r:
                            continue
                        steps, values = zip(*r["curve"])
                        curves.append((np.asarray(steps), np.asarray(values)))
                        for s, v in r["curve"]:
                            csv_rows.append({"encoder": encoder, "suite": suite, "graph": g, "devices": d,
                                             "seed": seed, "step": s, "best_makespan_ms": v * 1e3})
                if not curves:
                    lines.append(f"| {encoder} | {suite} | {d} | failed | failed | failed |")
                    continue
                grid = np.linspace(0, min(c[0][-1] for c in curves), 50)
                mean = np.mean([np.interp(grid, s, v) for s, v in curves], axis=0) * 1e3
                ax.plot(grid, mean, label=encoder, color=f"C{i}", linewidth=2.0 if encoder == "fadp-gt" else 1.0)
                lines.append(f"| {encoder} | {suite} | {d} | {mean[12]:.3f} | {mean[25]:.3f} | {mean[-1]:.3f} |")
            for placer in ("single", "heft"):
                ax.axhline(placers[placer][0] * 1e3, linestyle="--", color="gray", linewidth=0.7)
            ax.axhline(placers["lower bound"][0] * 1e3, color="k", linewidth=0.7)
            ax.set_title(f"{suite}, {d} GPUs", fontsize=9)
            ax.set_xlabel("environment steps", fontsize=8)
            ax.set_ylabel("best makespan (ms)", fontsize=8)
    axes[0][0].legend(fontsize=6)
    fig.tight_layout()
    settings.out.mkdir(parents=True, exist_ok=True)
    with replace_atomically(settings.out / "figure4.png") as temporary:
        fig.savefig(temporary)
    plt.close(fig)
    finals: dict[tuple[str, str], dict[str, float]] = {}
    for line in lines[2:]:
        cells_ = [c.strip() for c in line.strip("|").split("|")]
        if cells_[5] == "failed":
            continue
        finals.setdefault((cells_[1], cells_[2]), {})[cells_[0]] = float(cells_[5])
    lowest = sum(1 for v in finals.values() if "fadp-gt" in v and v["fadp-gt"] <= min(v.values()))
    findings = [f"FADP-GT's curve ends lowest of the {len(ENCODERS)} encoders in {lowest} of {len(finals)} "
                "panels (the paper: lowest from start to end in every panel)."]
    return ("![learning curves](figure4.png)\n\nDashed: single device and HEFT; solid black: the lower bound. "
            "Curves are the best makespan seen so far, mean over seeds and graphs.\n\n" + "\n".join(lines), findings)


def other_sections(path: Path) -> str:
    """The ``## `` sections of an existing results file that no experiment here writes (kept as they are)."""
    if not path.exists():
        return ""
    parts = path.read_text().split("\n## ")[1:]
    kept = [part for part in parts if part.split("\n", 1)[0].strip() not in EXPERIMENTS]
    return "".join("\n## " + part.rstrip("\n") + "\n" for part in kept)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = OneLineParser(prog="python -m agents.experiments", description=__doc__.splitlines()[0])
    parser.add_argument("experiment", choices=EXPERIMENTS + ("all",))
    parser.add_argument("--quick", action="store_true",
                        help="every row, one seed, one graph, 3 GPUs, 2 s per run (a smoke test)")
    parser.add_argument("--seeds", type=int, help="seeds per cell (default 3)")
    parser.add_argument("--graphs", type=int, help="graphs per suite: seeds 0..K-1 (default 1)")
    parser.add_argument("--devices", type=int, nargs="+", help="device counts (default 3 5 8)")
    parser.add_argument("--budget-seconds", type=float, help="search budget per run (default 60)")
    parser.add_argument("--algo", choices=("ppo", "a2c", "reinforce", "guided"),
                        help="training algorithm (default guided, the learned placer of docs/learned.md, as "
                             "RESULTS.md was measured; ppo gives the tables of experiments/ppo/)")
    parser.add_argument("--hidden-dim", type=int, help="encoder width (default 64)")
    parser.add_argument("--expected-moves", type=float, help="the head's stay prior (default 1; 0: off)")
    parser.add_argument("--initial-placement", help="where episodes start (default single)")
    parser.add_argument("--models", nargs="+", choices=REAL_MODELS, help="table6's models (default all six)")
    parser.add_argument("--model-devices", type=int, help="table6's device count (default 8)")
    parser.add_argument("--out", type=Path, help="output folder (default experiments/)")
    parser.add_argument("--timesteps", type=int, help="also stop each run after this many environment steps (with "
                                                           "--algo ppo, a2c or reinforce: runs that give the same "
                                                           "numbers on any machine; the guided search's annealing is "
                                                           "timed)")
    parser.add_argument("--results", type=Path, help="also write every table of this invocation to this file")
    add_fanout_args(parser)
    args = parser.parse_args(argv)
    settings = Settings(**(QUICK if args.quick else {}))
    for name in ("seeds", "graphs", "devices", "budget_seconds", "algo", "hidden_dim", "expected_moves",
                 "initial_placement", "models", "model_devices", "timesteps", "out"):
        value = getattr(args, name)
        if value is not None:
            setattr(settings, name, tuple(value) if isinstance(value, list) else value)
    if settings.seeds < 1 or settings.graphs < 1 or not 1 <= settings.graphs <= 17:
        parser.error("--seeds must be >= 1 and --graphs between 1 and 17")
    if min(settings.devices) < 1 or settings.model_devices < 1:
        parser.error(f"--devices and --model-devices must be >= 1, got {list(settings.devices)} and "
                     f"{settings.model_devices}")
    try:
        fanout = fanout_from_args(args)
    except ValueError as exc:
        parser.error(str(exc))
    experiments = EXPERIMENTS if args.experiment == "all" else (args.experiment,)
    plans = [design(experiment, settings) for experiment in experiments]
    # the workers start (and load torch) while this process checks the settings
    with open_runner(fanout, preload=("agents.experiments", "agents.training.run")) as runner:
        try:  # bad settings fail now, with the training library's message, not in the first run
            from agents.training.run import check_config

            check_config(train_config(Run("fadp-gt", "default", settings.devices[0], 0), settings,
                                      settings.out / "runs"))
        except ValueError as exc:
            parser.error(str(exc))
        try:  # an unwritable --results or --out would otherwise fail after every run has trained
            check_output_paths(file=None if args.results is None else str(args.results), folder=str(settings.out))
        except ValueError as exc:
            parser.error(str(exc))
        settings.out.mkdir(parents=True, exist_ok=True)
        # every run of every table first, fanned out together with the classical placers; then the tables
        failed = fan_out([run for plan in plans for run in plan.runs(settings.seeds)], settings, runner,
                         [column for plan in plans for column in plan.placer_columns()])
    sections: list[str] = []
    for experiment in experiments:
        print(f"{experiment}:", flush=True)
        csv_rows: list[dict] = []
        body, findings = globals()[f"experiment_{experiment}"](settings, csv_rows)
        text = (f"## {experiment}\n\n{header(experiment, settings, argv)}\n{body}\n\n**Against the paper.** "
                + " ".join(findings) + "\n")
        sections.append(text)
        write_text_atomically(settings.out / f"{experiment}.md", text)
        if csv_rows:
            with replace_atomically(settings.out / f"{experiment}.csv") as temporary, \
                    open(temporary, "w", newline="") as f:
                writer = csv.DictWriter(f, fieldnames=list(csv_rows[0]))
                writer.writeheader()
                writer.writerows(csv_rows)
        print(text, flush=True)
    if args.results:
        figure = os.path.relpath(settings.out / "figure4.png", args.results.resolve().parent)
        report = "\n".join(sections).replace("](figure4.png)", f"]({figure})")
        write_text_atomically(args.results, RESULTS_INTRO + "\n" + report + other_sections(args.results))
        print(f"wrote {args.results}")
    if failed:
        print(f"error: {len(failed)} run(s) failed (their cells say 'failed'); rerun the command to retry them: "
              + "; ".join(f"{key}: {why}" for key, why in failed.items()), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(run_cli(main))
