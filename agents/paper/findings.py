"""What the tables say against the paper, in sentences computed from the cells: :func:`comparison_findings`."""

from __future__ import annotations

import numpy as np

from .cells import Cell
from .runs import PLACERS


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
