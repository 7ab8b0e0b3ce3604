"""The encoders compared under equal pretraining: ``python -m agents.experiments encoders [options]``.

    python -m agents.experiments encoders --out experiments/encoders --epochs 12 --budgets 1 --workers 2
    python -m agents.experiments encoders --rows FADP-GT GCN --epochs 2 --seeds 4 --out /tmp/study

A thin command line over :func:`.encoder_study.run_study` (what is compared and how: there). The
pretrainings and their benchmark records live in ``--runs`` (resumed: rerun the same command after an
interruption); ``--out`` gets ``encoders.md`` (the table, with the command), ``encoders.csv`` (every row, cell,
method and budget) and each row's ``pretrain.json``. Exit status 0, 2 after one ``error:`` line, 130 on Ctrl-C.
"""

from __future__ import annotations

from pathlib import Path

from agents.jobs import add_fanout_args, fanout_from_args
from agents.learned.pretrain_config import POLICY_HEADS, PretrainConfig
from agents.paper.benchmark_cells import held_out_cells, large_cells
from placement_env.checks import checked_finite
from placement_env.cli import OneLineParser, check_output_paths, run_cli
from placement_env.json_files import write_text_atomically

ROW_NAMES = ("FADP-GT", "FADP-GT without FAGA", "FADP-GT without DPFR", "Placeto", "GCN", "GAT", "GraphSAGE",
             "Graphormer")  # .encoder_study.STUDY_ROWS, named here without torch


def main(argv: list[str]) -> int:
    """Run the command (``argv``: its arguments after ``encoders``); the exit status (module docstring)."""
    parser = OneLineParser(prog="python -m agents.experiments encoders",
                           description=(__doc__ or "").splitlines()[0])
    defaults = PretrainConfig()
    parser.add_argument("--out", default="experiments/encoders", help="where the report goes")
    parser.add_argument("--runs", default="runs/encoder_study", help="the pretrainings and their records")
    parser.add_argument("--rows", nargs="+", default=list(ROW_NAMES), metavar="ROW",
                        help="the rows, the first setting the parameter budget (default: " + ", ".join(ROW_NAMES)
                             + ")")
    parser.add_argument("--seeds", type=int, default=defaults.seeds, help="training graphs per suite")
    parser.add_argument("--devices", type=int, nargs="+", default=list(defaults.devices))
    parser.add_argument("--epochs", type=int, default=defaults.epochs, help="imitation passes per row")
    parser.add_argument("--expert-seconds", type=float, default=defaults.expert_seconds,
                        help="annealing seconds per expert placement (the first row computes them)")
    parser.add_argument("--head", choices=POLICY_HEADS, default=defaults.head)
    parser.add_argument("--budgets", type=float, nargs="+", default=[1.0], metavar="S",
                        help="the fine-tuned placer's budgets (s) on each cell (default 1)")
    parser.add_argument("--large", action="store_true", help="also the large cells of python -m agents.benchmark")
    parser.add_argument("--reference", default="experiments/anytime/benchmark.csv",
                        help="the anytime benchmark's CSV the gaps are measured against")
    add_fanout_args(parser)
    args = parser.parse_args(argv)

    def run() -> int:
        for value in args.budgets:
            if not checked_finite("--budgets", value) > 0:
                raise ValueError(f"--budgets must be positive, got {value!r}")
        unknown = [row for row in args.rows if row not in ROW_NAMES]
        if unknown:
            raise ValueError(f"--rows: unknown row {unknown[0]!r}; known: {', '.join(ROW_NAMES)}")
        pretraining = PretrainConfig(seeds=args.seeds, devices=tuple(args.devices), epochs=args.epochs, rounds=0,
                                     expert_seconds=args.expert_seconds,
                                     head=args.head)
        check_output_paths(None, args.out)
        check_output_paths(None, args.runs)
        fanout = fanout_from_args(args)
        cells = held_out_cells() + (large_cells() if args.large else [])
        from .encoder_study import StudyConfig, copy_records, run_study, write_csv  # torch: now

        config = StudyConfig(tuple(args.rows), pretraining, tuple(sorted(set(args.budgets))), tuple(cells))
        markdown, rows = run_study(config, Path(args.runs), Path(args.reference), fanout,
                                   log=lambda line: print(line, flush=True))
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        command = "python -m agents.experiments encoders " + " ".join(argv)
        write_text_atomically(out / "encoders.md", f"Command: `{command}`\n\n{markdown}")
        write_csv(out / "encoders.csv", rows)
        copy_records(config, Path(args.runs), out)
        print(markdown)
        return 0

    return run_cli(run)

