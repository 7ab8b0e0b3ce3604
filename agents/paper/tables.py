"""The paper's tables 2-6 in its layout, from the cached runs and the classical placers: ``experiment_table2`` ...
``experiment_table6`` (each ``(config, csv_rows) -> (markdown, findings)``)."""

from __future__ import annotations

import numpy as np

from .cells import train_cells
from .design import design, dpfr_methods, faga_methods
from .findings import _mean, comparison_findings
from .runs import PLACERS, REFERENCE, ExperimentConfig, all_placers, suite_graphs


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


def experiment_table2(settings: ExperimentConfig, csv_rows: list[dict], metric: str = "exe") -> tuple[str, list[str]]:
    """Table 2 (``metric="exe"``, execution time) or 3 (``"com"``, computation time): every encoder per suite and
    device count, against Placeto's; ``(markdown, findings)``."""
    plan = design("table2", settings)
    methods, graphs_of = plan.methods, plan.graphs_of
    cells = train_cells(methods, graphs_of, settings, csv_rows, settings.devices)
    placers = all_placers(graphs_of, settings.devices, settings)
    args = (cells, placers, list(methods), list(graphs_of), settings.devices)
    what = "execution time" if metric == "exe" else "computation time"
    return (comparison_table(*args, REFERENCE, metric, "Dataset"),
            comparison_findings(*args, "fadp-gt", REFERENCE, metric, what))


def experiment_table3(settings: ExperimentConfig, csv_rows: list[dict]) -> tuple[str, list[str]]:
    """Table 3: :func:`experiment_table2` on computation time."""
    return experiment_table2(settings, csv_rows, metric="com")


def experiment_table4(settings: ExperimentConfig, csv_rows: list[dict]) -> tuple[str, list[str]]:
    """Table 4: the FAGA ablation; ``(markdown, findings)``."""
    return _ablation(faga_methods(), settings, csv_rows)


def _ablation(methods: dict, settings: ExperimentConfig, csv_rows: list[dict]) -> tuple[str, list[str]]:
    """Table 4 / 5: the variants against the first (everything off); the last row is the full model."""
    graphs_of = suite_graphs(settings)
    cells = train_cells(methods, graphs_of, settings, csv_rows, settings.devices)
    placers = all_placers(graphs_of, settings.devices, settings)
    args = (cells, placers, list(methods), list(graphs_of), settings.devices)
    labels = list(methods)
    findings = comparison_findings(*args, labels[-1], labels[0], "exe", "execution time")[:2]
    return comparison_table(*args, labels[0], "exe", "Dataset"), findings


def experiment_table5(settings: ExperimentConfig, csv_rows: list[dict]) -> tuple[str, list[str]]:
    """Table 5: the DPFR ablation; ``(markdown, findings)``."""
    return _ablation(dpfr_methods(), settings, csv_rows)


def experiment_table6(settings: ExperimentConfig, csv_rows: list[dict]) -> tuple[str, list[str]]:
    """Table 6: the real models, FADP-GT against Placeto, with the classical placers; ``(markdown, findings)``."""
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
