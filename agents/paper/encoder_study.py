"""The encoders compared where the encoder matters: equal pretraining, then the held-out cells
(``python -m agents.experiments encoders``).

Every row of :data:`STUDY_ROWS` (FADP-GT, FADP-GT without FAGA, without DPFR, and the encoders of Placeto, GCN,
GAT, GraphSAGE and Graphormer) is pretrained by :func:`agents.learned.pretraining.pretrain` on the same problems,
from the same expert placements (the first row computes them, the others copy them: ``experts=``), for the same
epochs, learning rate and seed, with the same head; each row's encoder width (``hidden_dim``) is the one that
brings the whole network's parameter count nearest the first row's (:func:`matched_options`), so every row has
about the same parameter budget. Each policy then places every cell zero-shot and fine-tuned at each budget
(:func:`agents.paper.benchmark.run_benchmark`, records cached per row).

The reference is the anytime benchmark's CSV (``experiments/anytime/benchmark.csv``, made by ``python -m
agents.benchmark --budgets ...``): per cell, the best makespan any of its methods found at any budget, and
annealing's result at each budget. A record's *gap* is its makespan over the best seen on the cell (by the
reference or any row of this study) minus one; a placement out of memory, or none, has no gap and is counted
apart.
"""

from __future__ import annotations

import csv
import json
import re
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from agents.jobs import IN_PROCESS, FanOut, open_runner
from agents.learned.policy_file import new_network
from agents.learned.pretrain_config import PretrainConfig
from agents.learned.pretraining import pretrain
from placement_env.json_files import write_text_atomically

from .anytime import feasible_makespan
from .benchmark import run_benchmark
from .benchmark_cells import Cell

STUDY_ROWS: dict[str, tuple[str, dict]] = {  # label -> (encoder, options); the first is the reference budget
    "FADP-GT": ("fadp-gt", {}),
    "FADP-GT without FAGA": ("fadp-gt", {"use_low": False, "use_high": False}),
    "FADP-GT without DPFR": ("fadp-gt", {"use_gap": False, "use_gmp": False}),
    "Placeto": ("placeto", {}),
    "GCN": ("gcn", {}),
    "GAT": ("gat", {}),
    "GraphSAGE": ("sage", {}),
    "Graphormer": ("graphormer", {}),
}
WIDTHS = tuple(range(16, 513, 8))  # the encoder widths tried when matching parameter budgets
WITHIN = 0.03  # "near the plateau": at most 3% above annealing's 10-s result
METHODS = ("zero-shot", "fine-tuned")
PADDED_DEVICES = PretrainConfig().max_devices  # the devices a per-unit head of the default padding places on


def slug(label: str) -> str:
    """A row's folder name: ``FADP-GT without FAGA`` -> ``fadp-gt-without-faga``."""
    return re.sub(r"[^a-z0-9]+", "-", label.lower()).strip("-")


def network_parameters(encoder: str, options: dict, head: str) -> int:
    """The parameter count of the whole placement network (encoder and head) with these settings."""
    return sum(p.numel() for p in new_network(encoder, options, head=head).parameters())


def matched_options(encoder: str, options: dict, target: int, head: str) -> tuple[dict, int]:
    """``options`` with the ``hidden_dim`` of :data:`WIDTHS` whose network has the parameter count nearest
    ``target``, and that count (widths the encoder refuses, such as one its heads do not divide, are skipped)."""
    best: tuple[int, int] | None = None
    for width in WIDTHS:
        try:
            count = network_parameters(encoder, {**options, "hidden_dim": width}, head)
        except ValueError:
            continue
        if best is None or abs(count - target) < abs(best[1] - target):
            best = (width, count)
    if best is None:
        raise ValueError(f"no width of {WIDTHS[0]}-{WIDTHS[-1]} builds encoder {encoder!r} with {options}")
    return {**options, "hidden_dim": best[0]}, best[1]


@dataclass(frozen=True)
class StudyConfig:
    """What the study runs: ``rows`` (labels of :data:`STUDY_ROWS`), the pretraining every row shares
    (``pretraining``, whose encoder settings are replaced per row), the ``budgets`` (s) the fine-tuned policy gets on
    each cell, and the ``cells``."""

    rows: tuple[str, ...]
    pretraining: PretrainConfig
    budgets: tuple[float, ...]
    cells: tuple[Cell, ...] = field(repr=False)

    def __post_init__(self) -> None:
        unknown = [row for row in self.rows if row not in STUDY_ROWS]
        if unknown:
            raise ValueError(f"rows: unknown row {unknown[0]!r}; known: {', '.join(STUDY_ROWS)}")
        if not self.rows:
            raise ValueError("rows: give at least one")


def row_configs(config: StudyConfig) -> dict[str, tuple[PretrainConfig, int]]:
    """Per row, its pretraining settings (the shared ones with its encoder, options and matched width; the first
    row at its own options) and its network's parameter count."""
    base = config.pretraining
    first, first_options = STUDY_ROWS[config.rows[0]]
    target = network_parameters(first, first_options, base.head)
    out = {}
    for i, row in enumerate(config.rows):
        encoder, options = STUDY_ROWS[row]
        count = target if i == 0 else 0
        if i > 0:
            options, count = matched_options(encoder, options, target, base.head)
        out[row] = (PretrainConfig(**{**base.__dict__, "encoder": encoder, "encoder_kwargs": dict(options)}), count)
    return out


def reference(path: Path) -> dict[str, dict]:
    """The anytime benchmark's CSV as ``{cell: {"best": s, "anneal": {budget: s}}}`` (makespans in seconds,
    infinite where out of memory). ``ValueError`` when the file is missing or is not such a CSV."""
    if not path.is_file():
        raise ValueError(f"reference: no such file {str(path)!r} (made by python -m agents.benchmark --budgets ...)")
    out: dict[str, dict] = {}
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        if not {"cell", "method", "budget_seconds", "makespan_ms", "oom"} <= set(reader.fieldnames or ()):
            raise ValueError(f"reference: {str(path)!r} is not the anytime benchmark's CSV")
        for line in reader:
            seen = out.setdefault(line["cell"], {"best": float("inf"), "anneal": {}})
            makespan = float(line["makespan_ms"]) / 1e3 if line["makespan_ms"] and line["oom"] == "0" \
                else float("inf")
            seen["best"] = min(seen["best"], makespan)
            if line["method"] == "anneal" and line["budget_seconds"]:
                seen["anneal"][float(line["budget_seconds"])] = makespan
    return out


def run_study(config: StudyConfig, runs: Path, reference_csv: Path, fanout: FanOut = IN_PROCESS,
              log: Callable[[str], None] = print) -> tuple[str, list[dict]]:
    """Pretrain every row into ``runs/<row>`` (resumed where it stopped; the first row's expert placements fanned
    out as ``fanout`` says), place every cell with it (cached in ``runs/<row>/benchmark``, fanned out likewise),
    and return the report (Markdown) and its rows (one per row, cell, method, budget)."""
    known = reference(reference_csv)
    missing = [cell.key for cell in config.cells if cell.key not in known]
    if missing:
        raise ValueError(f"reference: {str(reference_csv)!r} has no cell {missing[0]!r}")
    configs = row_configs(config)
    records: dict[str, dict[tuple[str, str, float | None], dict]] = {}
    pretrained: dict[str, dict] = {}
    experts = runs / slug(config.rows[0])
    for row in config.rows:
        folder = runs / slug(row)
        log(f"{row}: pretraining in {folder}")
        policy = pretrain(configs[row][0], folder, log=log, fanout=fanout,
                          experts=None if folder == experts else experts)
        pretrained[row] = json.loads((folder / "pretrain.json").read_text())
        log(f"{row}: placing {len(config.cells)} cells")
        with open_runner(fanout, preload=("agents.paper.benchmark",)) as runner:
            run_benchmark(list(config.cells), list(config.budgets), folder / "benchmark", str(policy),
                          list(METHODS), runner)
        records[row] = _records(folder / "benchmark", config)
    return _report(config, configs, pretrained, records, known)


def _records(folder: Path, config: StudyConfig) -> dict[tuple[str, str, float | None], dict]:
    """A row's cached benchmark records by ``(cell, method, budget)``, from the CSV its benchmark wrote."""
    out: dict[tuple[str, str, float | None], dict] = {}
    with open(folder / "benchmark.csv", newline="") as f:
        for line in csv.DictReader(f):
            budget = float(line["budget_seconds"]) if line.get("budget_seconds") else \
                (config.budgets[0] if line["method"] == "fine-tuned" else None)
            out[(line["cell"], line["method"], budget)] = {
                "overflow": float(line["oom"]), "seconds": float(line["seconds"]),
                **({"makespan": float(line["makespan_ms"]) / 1e3} if line["makespan_ms"] else {})}  # none: refused
    return out


def _report(config: StudyConfig, configs: dict[str, tuple[PretrainConfig, int]], pretrained: dict[str, dict],
            records: dict[str, dict], known: dict[str, dict]) -> tuple[str, list[dict]]:
    """The study's Markdown (one table for the cells on at most :data:`PADDED_DEVICES` devices, one for those on
    more, where a per-unit head places nothing) and its CSV rows (module docstring: gaps to the best seen)."""
    cells = [cell.key for cell in config.cells]
    best = {cell: min([known[cell]["best"]] + [feasible_makespan(r) for rows in records.values()
                                               for (c, _, _), r in rows.items() if c == cell]) for cell in cells}
    runs = [("zero-shot", None)] + [("fine-tuned", b) for b in config.budgets]
    table_rows: list[dict] = []
    values: dict[tuple[str, str, float | None], dict[str, tuple[float, float]]] = {}
    for row in config.rows:
        for method, at in runs:
            values[(row, method, at)] = {}
            for cell in cells:
                r = records[row].get((cell, method, at))
                mk = feasible_makespan(r)
                gap = mk / best[cell] - 1.0 if np.isfinite(best[cell]) else float("inf")
                values[(row, method, at)][cell] = (mk, gap)
                table_rows.append({"row": row, "cell": cell, "method": method, "budget_seconds": at,
                                   "makespan_ms": mk * 1e3 if np.isfinite(mk) else "", "gap": gap,
                                   "seconds": None if r is None else r["seconds"]})
    small = [cell.key for cell in config.cells if (cell.devices or 0) <= PADDED_DEVICES]
    large = [cell for cell in cells if cell not in small]
    parts = []
    for title, group in ((f"Cells on at most {PADDED_DEVICES} devices", small),
                         (f"Cells on more than {PADDED_DEVICES} devices", large)):
        if group:
            parts.append(f"### {title} ({len(group)})\n\n" + _table(config, configs, pretrained, records, known,
                                                                     values, group))
    return "\n".join(parts), table_rows


def _table(config: StudyConfig, configs: dict[str, tuple[PretrainConfig, int]], pretrained: dict[str, dict],
           records: dict[str, dict], known: dict[str, dict],
           values: dict[tuple[str, str, float | None], dict[str, tuple[float, float]]], cells: list[str]) -> str:
    """One Markdown table of the study over ``cells``: a line per row."""
    budgets = list(config.budgets)
    first = config.rows[0]
    head = ["encoder", "width", "parameters", "imitation s", "last loss", "zero-shot gap mean (median)",
            "within 3% of anneal@10s", "≤ anneal@0.3s", "zero-shot s",
            f"zero-shot against {first}: better / worse, geometric mean ratio"]
    head += [f"fine-tuned@{b:g}s gap mean (median)" for b in budgets]
    head += [f"fine-tuned ≤ anneal@{b:g}s" for b in budgets]
    head += [f"fine-tuned@{b:g}s against anneal@{b:g}s, mean" for b in budgets]
    head += [f"fine-tuned@{b:g}s s" for b in budgets]
    lines = ["| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
    for row in config.rows:
        settings, count = configs[row]
        record = pretrained[row]
        zero = values[(row, "zero-shot", None)]
        within = sum(zero[c][0] <= (1 + WITHIN) * known[c]["anneal"].get(10.0, float("inf")) for c in cells)
        early = sum(zero[c][0] <= known[c]["anneal"].get(0.3, float("inf")) for c in cells)
        seconds = np.mean([records[row][(c, "zero-shot", None)]["seconds"] for c in cells])
        stage = record.get("stage_seconds", {})
        cols = [row, str(settings.encoder_kwargs.get("hidden_dim", 64)), f"{count:,}",
                f"{stage.get('imitation', 0.0):.0f}", f"{record['stages']['loss'][-1]:.3f}",
                _stats([zero[c][1] for c in cells]), f"{within}/{len(cells)}", f"{early}/{len(cells)}",
                f"{seconds:.2f}", "-" if row == first else _paired(zero, values[(first, "zero-shot", None)], cells)]
        tuned = [values[(row, "fine-tuned", b)] for b in budgets]
        cols += [_stats([t[c][1] for c in cells]) for t in tuned]
        cols += [f"{sum(t[c][0] <= known[c]['anneal'].get(b, float('inf')) for c in cells)}/{len(cells)}"
                 for b, t in zip(budgets, tuned)]
        cols += [_against([t[c][0] for c in cells], [known[c]["anneal"].get(b, float("inf")) for c in cells])
                 for b, t in zip(budgets, tuned)]
        cols += [f"{np.mean([records[row][(c, 'fine-tuned', b)]['seconds'] for c in cells]):.2f}" for b in budgets]
        lines.append("| " + " | ".join(cols) + " |")
    return "\n".join(lines) + "\n"


def _paired(mine: dict[str, tuple[float, float]], theirs: dict[str, tuple[float, float]], cells: list[str]) -> str:
    """On the cells where both placed within memory: how many ``mine`` has the shorter makespan on, how many the
    longer, and the geometric mean of the makespan ratios (below 1: ``mine`` shorter)."""
    pairs = [(mine[c][0], theirs[c][0]) for c in cells if np.isfinite(mine[c][0]) and np.isfinite(theirs[c][0])]
    if not pairs:
        return "-"
    ratios = np.array([a / b for a, b in pairs])
    return f"{int((ratios < 1).sum())} / {int((ratios > 1).sum())}, ×{float(np.exp(np.log(ratios).mean())):.3f}"


def _against(mine: Sequence[float], theirs: Sequence[float]) -> str:
    """The mean of ``mine / theirs - 1`` over the cells where both are finite (negative: ``mine`` shorter)."""
    ratios = [a / b - 1.0 for a, b in zip(mine, theirs) if np.isfinite(a) and np.isfinite(b)]
    return f"{100 * np.mean(ratios):+.2f}%" if ratios else "-"


def _stats(values: Sequence[float]) -> str:
    finite = np.array([v for v in values if np.isfinite(v)])
    text = f"{100 * finite.mean():.1f}% ({100 * np.median(finite):.1f}%)" if finite.size else "-"
    return text + (f", {len(values) - finite.size} none" if finite.size < len(values) else "")


def copy_records(config: StudyConfig, runs: Path, out: Path) -> None:
    """Each row's ``pretrain.json`` into ``out/pretrain/<row>.json`` (the policies and targets stay in ``runs``)."""
    (out / "pretrain").mkdir(parents=True, exist_ok=True)
    for row in config.rows:
        shutil.copyfile(runs / slug(row) / "pretrain.json", out / "pretrain" / f"{slug(row)}.json")


def write_csv(path: Path, rows: list[dict]) -> None:
    """The study's per-cell rows as CSV, written atomically."""
    if not rows:
        return
    lines = [",".join(rows[0])]
    for r in rows:
        lines.append(",".join("" if v is None else f"{v:.6g}" if isinstance(v, float) else str(v)
                              for v in r.values()))
    write_text_atomically(path, "\n".join(lines) + "\n")
