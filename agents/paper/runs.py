"""The runs of the paper's experiments and their cache: :class:`Run`, :class:`ExperimentConfig`, :func:`fan_out`.

Each run is :func:`agents.training.train` (what ``train.py`` runs) of one encoder on one graph and device count
with one seed. Runs are cached under ``out/runs`` by their full configuration (:meth:`Run.key`), so tables that
share runs (table2 and table3 and figure4; table4's full row, table5's full row and table2's FADP-GT row) train
them once, and an interrupted experiment resumes where it stopped. Only the driver writes a run's
``run.json`` (the cache entry), whole, as results arrive from wherever the runs train (:mod:`agents.jobs`).
"""

from __future__ import annotations

import functools
import hashlib
import json
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from agents.jobs import IN_PROCESS, FanOut, Job, JobRunner, failures, run_jobs
from agents.training.config import TrainConfig
from baselines import PLACERS as ALL_PLACERS
from baselines import PlacementInfeasibleError
from placement_env import Cluster, load_graph, lower_bound, simulate
from placement_env.graph.io import graph_digest
from placement_env.json_files import digest_of, write_text_atomically
from placement_env.zoo.registry import REAL_MODELS as ZOO_REAL_MODELS
from placement_env.zoo.suites import SUITE_NAMES

SUITES = tuple(SUITE_NAMES)  # ptb, cifar10, nmt
DEVICE_COUNTS = (3, 5, 8)
# the paper's table-2 order; "transformer" (FADP-GT's backbone without FAGA/DPFR) is this project's extra row
ENCODERS = ("placeto", "sage", "pgnn", "gnn", "gcn", "gat", "graphormer", "mamba", "transformer", "fadp-gt")
REFERENCE = "placeto"
PLACERS = ("single", "m-topo", "m-etf", "heft", "metis")
REAL_MODELS = tuple(ZOO_REAL_MODELS)  # table 6's models


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
        """The run's cache key: a hash of the run (not its label), the content of its graph and cluster
        (:func:`problem_digest`: a graph file changed under the same name is another run) and ``settings``
        (:meth:`ExperimentConfig.run_settings`)."""
        text = json.dumps({**asdict(self), "label": None, **settings,
                           "problem": problem_digest(self.graph, self.devices)}, sort_keys=True, default=str)
        return hashlib.sha1(text.encode()).hexdigest()[:16]


@functools.cache
def problem_digest(graph: str, devices: int) -> str:
    """The digest of graph ``graph``'s content and of the cluster of ``devices`` P100s the experiments use."""
    return digest_of([graph_digest(load_graph(graph)), Cluster.preset("p100", devices).to_dict()])


@dataclass
class ExperimentConfig:
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


def train_config(run: Run, settings: ExperimentConfig, folder: Path) -> TrainConfig:
    """The training run ``run``, writing to ``folder``."""
    return TrainConfig(encoder=run.encoder, graph=run.graph, devices=run.devices, seed=run.seed,
                       budget_seconds=settings.budget_seconds, algo=settings.algo, hidden_dim=settings.hidden_dim,
                       expected_moves=settings.expected_moves, initial_placement=settings.initial_placement,
                       encoder_options=dict(run.options), out=str(folder), compare_searches=False,
                       timesteps=TrainConfig.timesteps if settings.timesteps is None else settings.timesteps)


CACHE_ENTRY = "run.json"  # in a run's folder: its results, with the curve; written by the driver alone


def run_folder(run: Run, settings: ExperimentConfig) -> Path:
    """Where ``run`` keeps its outputs (``train.py``'s) and its cache entry :data:`CACHE_ENTRY`."""
    return settings.out / "runs" / run.key(settings.run_settings())


def train_run(run: Run, settings: ExperimentConfig) -> dict:
    """Train ``run`` and return its results (``results.json``'s record, with the curve). The run writes its
    outputs in its folder (``train.py``'s: checkpoint, tracker, ``results.json``) but never the cache entry
    :data:`CACHE_ENTRY`, which the driver writes whole when the result reaches it (:func:`run_training`, or
    :func:`fan_out` as results arrive): a worker killed half-way leaves no entry, whatever it had written."""
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


def run_training(run: Run, settings: ExperimentConfig) -> dict:
    """``run``'s results: from the run cache, else (a run :func:`fan_out` reported failed) a failed record, else
    trained here and cached."""
    results_file = run_folder(run, settings) / CACHE_ENTRY
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


def fan_out(runs: list[Run], settings: ExperimentConfig, where: FanOut | JobRunner = IN_PROCESS,
            placer_columns: list[tuple[tuple[str, ...], int]] | None = None) -> dict[str, str]:
    """Train every run not yet in the cache where ``where`` says (one progress report over all of them), writing
    each cache entry here as it arrives, and place ``placer_columns`` (graph names, device count) with the
    classical placers alongside; returns ``{run key: why}`` of the runs that failed (also kept in
    ``settings.failed`` for the tables)."""
    absolute = replace(settings, out=settings.out.resolve())  # workers (Ray's too) start in other folders
    jobs: dict[str, Job] = {}
    for run in runs:
        key = run.key(settings.run_settings())
        if key not in jobs and not (run_folder(run, settings) / CACHE_ENTRY).exists():
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
        write_text_atomically(folder / CACHE_ENTRY, json.dumps(value, indent=1))

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


def suite_graphs(settings: ExperimentConfig) -> dict[str, list[str]]:
    """``{suite: its graph names}``: seeds ``0 .. settings.graphs - 1`` of each suite."""
    return {s: [f"{s}/{i}" for i in range(settings.graphs)] for s in SUITES}


def classical_rows(graph_names: list[str], devices: int, settings: ExperimentConfig) -> dict[str, tuple[float, float]]:
    """:func:`placer_rows`, computed once per invocation (by :func:`fan_out`, or here)."""
    key = (tuple(graph_names), devices)
    if key not in settings.placers:
        settings.placers[key] = placer_rows(graph_names, devices)
    return settings.placers[key]


def all_placers(graphs_of: dict[str, list[str]], devices, settings: ExperimentConfig) -> dict:
    """:func:`classical_rows` of every column and device count, ``{(column, devices): rows}``."""
    return {(c, d): classical_rows(names, d, settings) for c, names in graphs_of.items() for d in devices}
