"""Pretrain one placement policy on many training graphs: ``python -m agents.pretrain``.

    python -m agents.pretrain --out runs/pretrain --workers 2
    python -m agents.pretrain --out runs/pretrain --seeds 8 --devices 3 5 --expert-steps 400
    python -m agents.pretrain --out runs/gat --encoder gat --encoder-option hidden_dim=160 --experts runs/pretrain
    python -m agents.pretrain --out runs/any --head device-embedding --devices 3 5 8 16

A thin command line over :func:`agents.learned.pretraining.pretrain` (the stages, what they write and how they
resume: there). Rerun the same command after an interruption to resume. Exit status 0, 2 after one ``error:``
line (bad input), 1 when jobs failed (what was done is kept), 130 on Ctrl-C.
"""

from __future__ import annotations

import sys
from pathlib import Path

from agents.jobs import add_fanout_args, fanout_from_args
from agents.learned.pretrain_config import HELD_OUT_FIRST_SEED, POLICY_HEADS, POLICY_STARTS, PretrainConfig
from agents.training.config import parse_encoder_options
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
    parser.add_argument("--encoder", default=defaults.encoder, help="a graph encoder name (default fadp-gt)")
    parser.add_argument("--encoder-option", action="append", default=[], metavar="KEY=VALUE",
                        help="an encoder keyword argument, e.g. hidden_dim=96 or use_low=false (repeatable)")
    parser.add_argument("--head", choices=POLICY_HEADS, default=defaults.head,
                        help="the policy's device head: per-unit (outputs for at most --max-devices devices) or "
                             "device-embedding (any number of devices)")
    parser.add_argument("--max-devices", type=int, default=defaults.max_devices,
                        help="the per-unit head's device outputs (default 8)")
    parser.add_argument("--experts", metavar="DIR",
                        help="copy the expert placements of the pretraining in DIR made from the same inputs "
                             "instead of computing them (policies pretrained on the same experts)")
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
                            start=args.start, seed=args.seed, encoder=args.encoder,
                            encoder_kwargs=parse_encoder_options(args.encoder_option), head=args.head,
                            max_devices=args.max_devices)
    check_output_paths(None, args.out)
    if args.experts is not None and not Path(args.experts, "targets").is_dir():
        raise ValueError(f"--experts: {args.experts!r} holds no targets/ folder of a pretraining")
    fanout = fanout_from_args(args)
    from agents.learned.policy_file import new_network  # torch: loaded once the settings are checked
    from agents.learned.pretraining import pretrain  # torch, as above

    new_network(config.encoder, config.encoder_kwargs, config.max_devices, head=config.head)  # options checked now
    return pretrain(config, args.out, log=lambda line: print(line, flush=True), fanout=fanout, experts=args.experts)


if __name__ == "__main__":
    sys.exit(main())
