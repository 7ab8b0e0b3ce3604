"""The benchmark as an anytime curve (``python -m agents.benchmark --budgets 0.3 1 3 10 30``).

Every method whose result depends on its budget (:data:`~agents.paper.benchmark_cells.BUDGETED`: the searches,
the learned placer from scratch and fine-tuned) runs once per budget on every cell; the others (the fast
placers, the runtimes' partitions, zero-shot) once, with the seconds they took. Per cell, each record's *gap* is
its makespan over the best makespan any method found on that cell at any budget, minus one (infinite for a
placement out of memory, or none). The report:

* the mean and median gap over the cells per method and budget (a cell where a method found nothing within
  memory counts in the number given beside, not in the mean), and per method without a budget its gap and
  mean seconds;
* for each budgeted method, the share of cells where it reached the *reference*, annealing's result at 10 s
  (at the largest budget when 10 s is not among them), by each budget, and the median over the cells of the
  first budget that reached it ("-" when the median cell never did);
* the mean seconds each method used per budget (its set-up counts: a budget is what it aims at);
* each budgeted method against annealing at the same budget, per group of cells: the mean and median of its
  makespan over annealing's minus one, and the share of the cells where it is at or below annealing;
* a PNG of the mean gap against the mean seconds used, a point per budget and a line per method
  (``anytime.png``), the zero-shot placement and the best fast placer of each cell as points at their mean
  seconds.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .benchmark_cells import BUDGETED

Table = dict[str, dict[str, dict]]  # cell -> method -> record
REFERENCE_METHOD, REFERENCE_BUDGET = "anneal", 10.0


def feasible_makespan(record: dict | None) -> float:
    """The record's makespan in seconds; infinite when out of memory, failed or missing."""
    if record is None or "makespan" not in record or record.get("overflow", 0) > 0:
        return float("inf")
    return float(record["makespan"])


def best_seen(tables: dict[float, Table]) -> dict[str, float]:
    """Per cell, the least feasible makespan of any method at any budget."""
    best: dict[str, float] = {}
    for table in tables.values():
        for cell, row in table.items():
            best[cell] = min(best.get(cell, float("inf")), *(feasible_makespan(r) for r in row.values()))
    return best


def gaps(tables: dict[float, Table], method: str, budget: float, best: dict[str, float]) -> np.ndarray:
    """The gap of ``method`` at ``budget`` on every cell (module docstring), in the order of the cells."""
    table = tables[budget]
    return np.array([feasible_makespan(row.get(method)) / best[cell] - 1.0 if np.isfinite(best[cell])
                     else float("inf") for cell, row in table.items()])


def _stats(values: np.ndarray) -> str:
    finite = values[np.isfinite(values)]
    text = f"{100 * finite.mean():.2f}% ({100 * np.median(finite):.2f}%)" if finite.size else "-"
    return text + (f", {values.size - finite.size} none" if finite.size < values.size else "")


def seconds_used(tables: dict[float, Table], method: str, budget: float) -> float:
    """The mean wall-clock seconds ``method`` took per cell at ``budget``."""
    return float(np.mean([row[method]["seconds"] for row in tables[budget].values()]))


def reference_budget(budgets: list[float]) -> float:
    """The budget of the reference: 10 s when asked for, else the largest."""
    return REFERENCE_BUDGET if REFERENCE_BUDGET in budgets else max(budgets)


def time_to_reference(tables: dict[float, Table], method: str, budgets: list[float]) -> dict[str, float]:
    """Per cell, the first budget at which ``method`` is at or below the reference (infinite if never)."""
    ref_table = tables[reference_budget(budgets)]
    out: dict[str, float] = {}
    for cell, row in ref_table.items():
        ref = feasible_makespan(row.get(REFERENCE_METHOD))
        reached = [b for b in sorted(budgets) if feasible_makespan(tables[b][cell].get(method)) <= ref * (1 + 1e-9)]
        out[cell] = reached[0] if reached and np.isfinite(ref) else float("inf")
    return out


def against_reference(tables: dict[float, Table], method: str, budget: float, cells: list[str]) -> np.ndarray:
    """Per cell of ``cells`` where both have a placement within memory, ``method``'s makespan over annealing's at
    the same ``budget``, minus one (negative: ``method`` is ahead)."""
    table = tables[budget]
    pairs = [(feasible_makespan(table[c].get(method)), feasible_makespan(table[c].get(REFERENCE_METHOD)))
             for c in cells if c in table]
    return np.array([a / b - 1.0 for a, b in pairs if np.isfinite(a) and np.isfinite(b)])


def against_reference_report(tables: dict[float, Table], budgets: list[float], methods: list[str],
                             groups: dict[str, list[str]]) -> list[str]:
    """Markdown lines: per budgeted method other than annealing, per group of cells (name -> cell keys) and
    budget, its makespan against annealing's at the same budget (:func:`against_reference`): mean / median / the
    share of the cells at or below annealing."""
    compared = [m for m in methods if m in BUDGETED and m != REFERENCE_METHOD]
    if REFERENCE_METHOD not in methods or not compared:
        return []
    lines = ["", "Against annealing at the same budget: makespan over annealing's minus one (negative: ahead), mean "
             "/ median / share of the cells at or below annealing, over the cells where both are within memory.", "",
             "| method | cells | " + " | ".join(f"{b:g} s" for b in sorted(budgets)) + " |",
             "|---" * (len(budgets) + 2) + "|"]
    for m in compared:
        for name, cells in groups.items():
            cols = []
            for b in sorted(budgets):
                d = against_reference(tables, m, b, cells)
                cols.append(f"{100 * d.mean():+.2f}% / {100 * np.median(d):+.2f}% / {100 * np.mean(d <= 0):.0f}%"
                            f" of {d.size}" if d.size else "-")
            lines.append(f"| {m} | {name} | " + " | ".join(cols) + " |")
    return lines


def anytime_report(tables: dict[float, Table], budgets: list[float], methods: list[str], command: str,
                   png: Path | None = None, groups: dict[str, list[str]] | None = None) -> str:
    """The anytime summary (Markdown; module docstring) of ``tables`` (budget -> cell -> method -> record, the
    unbudgeted methods' records the same at every budget); writes the PNG to ``png`` when given. ``groups``: names
    for sets of cells (cell keys) over which each budgeted method is also compared with annealing at the same
    budget (:func:`against_reference_report`; all the cells as one group when None)."""
    budgets = sorted(budgets)
    best = best_seen(tables)
    cells = len(best)
    budgeted = [m for m in methods if m in BUDGETED]
    others = [m for m in methods if m not in BUDGETED]
    ref_budget = reference_budget(budgets)
    lines = [f"Command: `{command}`", "",
             f"{cells} cells. Gap: makespan over the best any method found on the cell at any budget, minus one; "
             "mean (median) over the cells; \"n none\": cells where the method found nothing within memory.", "",
             "| method | " + " | ".join(f"{b:g} s" for b in budgets) + " |", "|---" * (len(budgets) + 1) + "|"]
    for m in budgeted:
        lines.append(f"| {m} | " + " | ".join(_stats(gaps(tables, m, b, best)) for b in budgets) + " |")
    lines += ["", "Mean seconds used per cell (a method's set-up included: a budget is a target, not a cap):", "",
              "| method | " + " | ".join(f"{b:g} s" for b in budgets) + " |", "|---" * (len(budgets) + 1) + "|"]
    for m in budgeted:
        lines.append(f"| {m} | " + " | ".join(f"{seconds_used(tables, m, b):.2f}" for b in budgets) + " |")
    first = tables[budgets[0]]
    lines += ["", "| method (no budget) | gap | mean seconds |", "|---|---|---|"] if others else []
    for m in others:
        seconds = np.mean([row[m]["seconds"] for row in first.values()])
        lines.append(f"| {m} | {_stats(gaps(tables, m, budgets[0], best))} | {seconds:.3f} |")
    lines += ["", f"Reaching annealing's {ref_budget:g}-s result: share of the cells by each budget, and the median "
              "first budget that reached it.", "",
              "| method | " + " | ".join(f"by {b:g} s" for b in budgets) + " | median time |",
              "|---" * (len(budgets) + 2) + "|"]
    for m in budgeted:
        reached = np.array(list(time_to_reference(tables, m, budgets).values()))
        shares = [f"{100 * np.mean(reached <= b):.0f}%" for b in budgets]
        median = float(np.median(reached)) if reached.size else float("inf")
        lines.append(f"| {m} | " + " | ".join(shares) + f" | {f'{median:g} s' if np.isfinite(median) else '-'} |")
    lines += against_reference_report(tables, budgets, methods, groups or {"all": list(tables[budgets[0]])})
    if png is not None:
        _plot(tables, budgets, budgeted, others, best, png)
        lines += ["", f"![mean gap against budget]({png.name})"]
    return "\n".join(lines) + "\n"


def _plot(tables: dict[float, Table], budgets: list[float], budgeted: list[str], others: list[str],
          best: dict[str, float], png: Path) -> None:
    import matplotlib  # only for the figure

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for m in budgeted:
        means = [np.mean(g[np.isfinite(g)]) * 100 if np.isfinite(g).any() else np.nan
                 for g in (gaps(tables, m, b, best) for b in budgets)]
        ax.plot([seconds_used(tables, m, b) for b in budgets], means, marker="o", label=m)
    first = tables[budgets[0]]
    fast = [m for m in others if m not in ("zero-shot",)]
    points = {"zero-shot": ["zero-shot"] if "zero-shot" in others else [], "best fast placer": fast}
    for label, group in points.items():
        if not group:
            continue
        per_cell = [min(group, key=lambda m: feasible_makespan(row[m])) for row in first.values()]
        gap = np.array([feasible_makespan(row[m]) / best[c] - 1 for (c, row), m in zip(first.items(), per_cell)])
        seconds = np.mean([row[m]["seconds"] if label == "zero-shot" else sum(row[x]["seconds"] for x in group)
                           for row, m in zip(first.values(), per_cell)])
        ax.scatter([max(seconds, 1e-3)], [np.mean(gap[np.isfinite(gap)]) * 100], marker="*", s=140, label=label,
                   color="black" if label == "zero-shot" else "grey", zorder=3)
    ax.set_xscale("log")
    ax.set_xlabel("mean seconds used per cell (one point per budget)")
    ax.set_ylabel("mean gap to the best seen (%)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(png, dpi=120)
    plt.close(fig)
