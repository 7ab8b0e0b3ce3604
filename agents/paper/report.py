"""The text around the tables: each section's header (command, machine, run settings), ``RESULTS.md``'s
introduction, and the sections of an existing results file that this invocation does not write."""

from __future__ import annotations

import os
import platform
from pathlib import Path

from .runs import ExperimentConfig

RESULTS_INTRO = """# Results

Every table below was written by `python -m agents.experiments` (the command line heads each table; the
per-run numbers are in the CSV files next to the tables in `experiments/`), on the machine each table's header
names, so the computation times are wall-clock times on it. Execution times are
simulated step times (`placement_env.simulate`, milliseconds) of 3, 5 or 8 simulated P100s on PCIe, not the
paper's measured training runs: compare ratios between rows with the paper, not absolute values. Each
"Against the paper" paragraph is computed from the table above it. See `agents/experiments.py` for what each
column means.
"""


def header(experiment: str, settings: ExperimentConfig, argv: list[str]) -> str:
    """The lines heading ``experiment``'s section: the command line (``argv``), the machine, each run's settings."""
    cpu = platform.processor() or platform.machine()
    return (f"Command: `python -m agents.experiments {' '.join(argv)}`  \n"
            f"Machine: {os.cpu_count()} CPU cores ({cpu}), {platform.platform()}; no GPU (the cluster is "
            f"simulated: P100s on PCIe).  \n"
            f"Each run: `train.py --algo {settings.algo} --budget-seconds {settings.budget_seconds:g} "
            f"--hidden-dim {settings.hidden_dim} --expected-moves {settings.expected_moves:g} "
            f"--initial-placement {settings.initial_placement}` on one graph; {settings.seeds} seed(s); "
            f"{settings.graphs} graph(s) per suite.\n")


def other_sections(path: Path, written: tuple[str, ...]) -> str:
    """The ``## `` sections of an existing results file (at ``path``) whose titles are not in ``written`` (kept as
    they are); empty when there is no such file."""
    if not path.exists():
        return ""
    parts = path.read_text().split("\n## ")[1:]
    kept = [part for part in parts if part.split("\n", 1)[0].strip() not in written]
    return "".join("\n## " + part.rstrip("\n") + "\n" for part in kept)
