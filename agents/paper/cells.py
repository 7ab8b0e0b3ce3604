"""A table cell: the runs of one method in one column, per seed (:class:`Cell`, :func:`train_cells`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .runs import ExperimentConfig, Run, run_training


@dataclass
class Cell:
    """Per seed: the graph-mean execution time (s, inf when OOM) and computation time (s) of one method."""

    exe: list[float]
    com: list[float]

    @staticmethod
    def of(runs: list[dict], seeds: int) -> Cell:
        """The cell of ``runs`` (results records) over ``seeds`` seeds: per seed, the mean over its graphs."""
        exe, com = [], []
        for s in range(seeds):
            mine = [r for r in runs if r["seed"] == s]
            exe.append(float(np.mean([float("inf") if r["oom"] else r["makespan"] for r in mine])))
            com.append(float(np.mean([float("nan") if "failed" in r else (r["best_found_seconds"] or 0.0)
                                      + r["validation_seconds"] for r in mine])))
        return Cell(exe, com)


def train_cells(methods: dict[str, tuple[str, tuple]], graphs_of: dict[str, list[str]], settings: ExperimentConfig,
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
