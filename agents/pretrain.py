"""Pretrain one placement policy on many training graphs: ``python -m agents.pretrain``.

    python -m agents.pretrain --out runs/pretrain --workers 2
    python -m agents.pretrain --out runs/pretrain --seeds 8 --devices 3 5 --expert-steps 400

A thin command line over :func:`agents.learned.pretraining.pretrain` (the stages, what they write and how they
resume: there). Rerun the same command after an interruption to resume. Exit status 0, 2 after one ``error:``
line (bad input), 1 when jobs failed (what was done is kept), 130 on Ctrl-C.
"""

from __future__ import annotations

import sys

from agents.jobs import add_fanout_args, fanout_from_args
from agents.learned.pretrain_config import HELD_OUT_FIRST_SEED, POLICY_STARTS, PretrainConfig
from placement_env.cli import OneLineParser, check_output_paths, interrupted, sigterm_as_interrupt


def main(argv: list[str] | None = None) -> int:
    """Run the command (``argv``: its arguments); the exit status (module docstring)."""
    parser = OneLineParser(prog="python -m agents.pretrain", description=(__doc__ or "").splitlines()[0])
    defaults = PretrainConfig()
    parser.add_argument("--out", default="runs/pretrain", help="output folder (resumed when it holds a run)")
    parser.add_argument("--suites", nargs="+", default=list(defaults.suites))
    parser.add_argument("--seeds", type=int, default=defaults.seeds,
                        help=f"train on seeds 0..SEEDS-1 of each suite (at most {HELD_OUT_FIRST_SEED})")
    parser.add_argument("--devices", type=int, nargs="+", default=list(defaults.devices))
    parser.add_argument("--expert-seconds", type=float, default=defaults.expert_seconds)
    parser.add_argument("--improve-seconds", type=float, default=defaults.improve_seconds)
    parser.add_argument("--epochs", type=int, default=defaults.epochs)
    parser.add_argument("--rounds", type=int, default=defaults.rounds)
    parser.add_argument("--start", choices=POLICY_STARTS, default=defaults.start,
                        help="the placement the policy's observation shows: the best fast classical placement "
                             "(default) or everything on one device")
    parser.add_argument("--expert-steps", type=int, default=None,
                        help="annealing steps per expert placement instead of --expert-seconds (the same experts on "
                             "any machine and under any load)")
    parser.add_argument("--seed", type=int, default=defaults.seed)
    add_fanout_args(parser)
    args = parser.parse_args(argv)
    try:
        with sigterm_as_interrupt():
            path = _pretrain(args)
    except (ValueError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except RuntimeError as error:  # jobs that failed: what was done is kept
        print(f"error: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM (sigterm_as_interrupt): 130 or 143
        return interrupted(exc, f"what was done is kept in {args.out}; rerun the command to resume")
    print(f"policy in {path}")
    return 0


def _pretrain(args) -> object:
    """Check the settings, then pretrain; the policy's path."""
    config = PretrainConfig(suites=tuple(args.suites), seeds=args.seeds, devices=tuple(args.devices),
                            expert_seconds=args.expert_seconds, expert_steps=args.expert_steps,
                            improve_seconds=args.improve_seconds, epochs=args.epochs, rounds=args.rounds,
                            start=args.start, seed=args.seed)
    check_output_paths(None, args.out)
    fanout = fanout_from_args(args)
    from agents.learned.pretraining import pretrain  # torch: loaded once the settings are checked

    return pretrain(config, args.out, log=lambda line: print(line, flush=True), fanout=fanout)


if __name__ == "__main__":
    sys.exit(main())
