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
* ``figure4``: learning curves (best makespan so far against environment steps) per encoder;
* ``encoders``: the encoders under equal pretraining, zero-shot and fine-tuned on the benchmark's held-out
  cells (its own options: ``python -m agents.experiments encoders --help``, :mod:`agents.paper.encoders_command`).

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
import os
import sys
from pathlib import Path

from agents.jobs import add_fanout_args, fanout_from_args, open_runner
from agents.paper import encoders_command
from agents.paper.design import design
from agents.paper.figure import experiment_figure4
from agents.paper.report import RESULTS_INTRO, header, other_sections
from agents.paper.runs import QUICK, REAL_MODELS, ExperimentConfig, Run, fan_out, train_config
from agents.paper.tables import (
    experiment_table2,
    experiment_table3,
    experiment_table4,
    experiment_table5,
    experiment_table6,
)
from placement_env.cli import OneLineParser, check_output_paths, run_cli
from placement_env.json_files import replace_atomically, write_text_atomically

EXPERIMENT_TABLES = {"table2": experiment_table2, "table3": experiment_table3, "table4": experiment_table4,
                     "table5": experiment_table5, "table6": experiment_table6, "figure4": experiment_figure4}
EXPERIMENTS = tuple(EXPERIMENT_TABLES)


def main(argv: list[str] | None = None) -> int:
    """Run the command (``argv``: its arguments); 0, 1 when runs failed, 2 after one ``error:`` line."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["encoders"]:
        return encoders_command.main(argv[1:])
    parser = OneLineParser(prog="python -m agents.experiments", description=(__doc__ or "").splitlines()[0])
    parser.add_argument("experiment", choices=EXPERIMENTS + ("all", "encoders"))
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
    settings = ExperimentConfig(**(QUICK if args.quick else {}))
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
    with open_runner(fanout, preload=("agents.paper.runs", "agents.training.run")) as runner:
        try:  # bad settings fail now, with the training library's message, not in the first run
            from agents.training.run import check_config  # torch: while the workers start

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
        body, findings = EXPERIMENT_TABLES[experiment](settings, csv_rows)
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
        write_text_atomically(args.results, RESULTS_INTRO + "\n" + report + other_sections(args.results, EXPERIMENTS))
        print(f"wrote {args.results}")
    if failed:
        print(f"error: {len(failed)} run(s) failed (their cells say 'failed'); rerun the command to retry them: "
              + "; ".join(f"{key}: {why}" for key, why in failed.items()), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(run_cli(main))
