"""The benchmark's cells and methods, by name (no torch: the command line checks its input with them)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from baselines.placers import CONSTRUCTIVE, RUNTIME_DEFAULTS
from placement_env.cluster import DEFAULT_KIND, Cluster
from placement_env.sim.pipeline import PLAIN_STEP, Step
from placement_env.zoo.registry import REAL_MODELS, load_graph
from placement_env.zoo.suites import SUITE_NAMES

HELD_OUT_SEEDS = tuple(range(100, 105))
SUITES = tuple(SUITE_NAMES)  # ptb, cifar10, nmt
REAL = tuple(REAL_MODELS)  # the six real models
SEARCHES = ("local-search", "anneal")
LEARNED = ("learned-scratch", "zero-shot", "fine-tuned", "steered")
BUDGETED = (*SEARCHES, "learned-scratch", "fine-tuned", "steered")  # the methods whose result depends on the budget
TRANSFORMERS = ("gpt2", "gpt2-medium", "bert-base", "bert-large", "llama-1b", "vit-b16")
RUNTIME = tuple(RUNTIME_DEFAULTS)  # what accelerate and DeepSpeed do by default: graphs with module names only


@dataclass(frozen=True)
class Cell:
    """One benchmark cell: a graph (name or file) on a cluster (``devices`` identical devices of ``device_kind``,
    in nodes of ``per_node`` when given, or a file), judged by ``step`` (the plain step, or a pipelined one);
    ``contiguous``: every method must give pipeline stages in program order (:mod:`placement_env.plan.stages`)."""

    graph: str
    devices: int | None = None
    cluster_file: str | None = None
    step: Step = PLAIN_STEP
    device_kind: str = DEFAULT_KIND
    per_node: int | None = None
    contiguous: bool = False

    @property
    def key(self) -> str:
        """The cell's name in the cache and the table: ``<graph>_<devices>gpu`` (P100s), ``<graph>_<preset cluster
        name>`` (another kind, or nodes: ``gpt2_2x8xa100-nvlink``) or ``<graph>_<cluster file stem>``, then
        ``_m<microbatches>-<schedule>`` for a pipelined step, then ``_contiguous`` for a contiguous cell."""
        if self.cluster_file:
            where = Path(self.cluster_file).stem
        elif self.device_kind == DEFAULT_KIND and self.per_node is None:
            where = f"{self.devices}gpu"
        else:
            where = self.preset().name
        graph = Path(self.graph).name.removesuffix(".gz").removesuffix(".json") if Path(self.graph).suffix in (
            ".json", ".gz") else self.graph.replace("/", "-")
        pipelined = f"_m{self.step.microbatches}-{self.step.schedule}" if self.step.pipelined else ""
        return f"{graph}_{where}{pipelined}" + ("_contiguous" if self.contiguous else "")

    def load(self):
        """``(graph, cluster)`` of the cell; ``ValueError`` / ``OSError`` naming what cannot be loaded."""
        cluster = Cluster.from_json(self.cluster_file) if self.cluster_file else self.preset()
        return load_graph(self.graph), cluster

    def preset(self) -> Cluster:
        """The preset cluster of the cell (``ValueError`` for a ``per_node`` that does not divide its devices)."""
        return Cluster.preset(self.device_kind, self.devices or 3, per_node=self.per_node)


def held_out_cells(seeds: tuple[int, ...] = HELD_OUT_SEEDS, devices: tuple[int, ...] = (3, 5, 8),
                   real_devices: int = 8) -> list[Cell]:
    """The benchmark's default cells (:mod:`agents.paper.benchmark` says which)."""
    cells = [Cell(f"{suite}/{seed}", m) for suite in SUITES for seed in seeds for m in devices]
    return cells + [Cell(model, real_devices) for model in REAL_MODELS]


def large_cells(step: Step = PLAIN_STEP) -> list[Cell]:
    """The cells where search has not converged in seconds: each transformer of the zoo on one node of 8 A100s
    and on 2 nodes of 8, and NASNet-A / PNASNet-5 Large (2,316-3,062 ops) on 16, 32 and 64 P100s."""
    cells = [Cell(model, 8, step=step, device_kind="a100-nvlink") for model in TRANSFORMERS]
    cells += [Cell(model, 16, step=step, device_kind="a100-nvlink", per_node=8) for model in TRANSFORMERS]
    return cells + [Cell(model, m, step=step) for model in ("nasnet_large", "pnasnet_large") for m in (16, 32, 64)]


def pipelined_cells() -> list[Cell]:
    """The pipelined cells: each transformer of the zoo on one node of 8 A100s and on 2 nodes of 8, 8
    micro-batches under 1F1B, contiguous (pipeline stages, as the runtimes run them)."""
    return [replace(cell, contiguous=True) for cell in large_cells(Step(8, "1f1b"))[:2 * len(TRANSFORMERS)]]


def cell_groups(cells: list[Cell]) -> dict[str, list[str]]:
    """The keys of ``cells`` by group: each suite's (``ptb``, ``cifar10``, ``nmt``) and the ``real models``, then
    ``held-out`` (those, and any cell given by the user), ``large`` (:func:`large_cells`), ``pipelined``
    (contiguous cells), ``large and pipelined`` (when both are), then ``all``; empty groups left out."""
    large = {cell.key for cell in large_cells()}
    groups: dict[str, list[str]] = {name: [] for name in (*SUITES, "real models", "held-out", "large", "pipelined")}
    for cell in cells:
        group = "pipelined" if cell.contiguous else "large" if cell.key in large else "held-out"
        groups[group].append(cell.key)
        suite = cell.graph.split("/")[0]
        if group == "held-out" and (suite in SUITES or cell.graph in REAL):
            groups[suite if suite in SUITES else "real models"].append(cell.key)
    groups["large and pipelined"] = groups["large"] + groups["pipelined"] if groups["large"] and groups["pipelined"] \
        else []
    return {name: keys for name, keys in groups.items() if keys} | {"all": [cell.key for cell in cells]}


def methods(include_learned: bool = True, include_runtime: bool = False) -> list[str]:
    """Every benchmarked method, classical first; the runtimes' defaults (:data:`RUNTIME`, which need module
    names) after the searches with ``include_runtime``."""
    return (list(CONSTRUCTIVE) + list(SEARCHES) + (list(RUNTIME) if include_runtime else [])
            + (list(LEARNED) if include_learned else []))


def has_module_names(graph: str) -> bool:
    """Whether graph ``graph`` (a name or a file) records module names (``from_torch``'s node field ``module``)."""
    return any(node.module is not None for node in load_graph(graph).nodes)
