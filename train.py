"""Train a device-placement policy and compare its best placement with the classical placers.

    python train.py                                   # FADP-GT + the guided search on the default graph, a minute
    python train.py --algo ppo                                       # FADP-GT + PPO (the paper's RL setting)
    python train.py --encoder gat --algo a2c --graph synthetic/3 --devices 5 --timesteps 20000
    python train.py --algo reinforce --episodes 200 --out runs/rf
    python train.py --algo maskable-ppo --encoder placeto            # Placeto's node-by-node MDP
    python train.py --out runs/x --resume                            # continue from runs/x/checkpoint.zip

A thin command line over :func:`agents.training.train` (see :mod:`agents.training.run` for what a run does
and what its search time counts). Outputs in ``--out``: ``placement.json`` (the spec's placement format),
``results.json``, ``learning_curve.png``, ``gantt.png``, ``checkpoint.zip`` and TensorBoard logs. The closing
table compares the run with the fast classical placers and with ``local-search`` and ``anneal`` given the run's
own search time (``--no-compare-searches`` leaves those out).

The default algorithm, ``guided`` (:mod:`agents.algorithms.guided_search`), has the policy propose many placements
per forward pass, anneals the best, and trains the policy to imitate the best placements found (docs/learned.md);
its ``--timesteps`` are proposals. For PPO, A2C and REINFORCE, ``--expected-moves 1`` (the default) adds the head's
stay prior (:mod:`agents.policies.heads`), so an untrained policy moves about one unit per step instead of
re-drawing every unit uniformly; ``--expected-moves 0`` is the spec's head exactly.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ALGORITHMS = ("ppo", "a2c", "reinforce", "maskable-ppo", "guided")


def build_parser() -> argparse.ArgumentParser:
    from placement_env.cli import OneLineParser, add_step_args  # here, so that Ctrl-C while it loads is caught by run()

    p = OneLineParser(prog="python train.py", description=(__doc__ or "").splitlines()[0])
    p.add_argument("--encoder", default="fadp-gt", help="a graph encoder name (graph_encoders.list_encoders())")
    p.add_argument("--algo", default="guided",
                   help=f"one of {', '.join(ALGORITHMS)} (default guided: the policy proposes placements, the "
                        "annealing improves them, the policy imitates the best; see docs/learned.md)")
    p.add_argument("--graph", default="default", help="shipped graph name, suite name, or a graph file")
    group = p.add_mutually_exclusive_group()
    group.add_argument("--devices", type=int, help="identical devices of --device-kind (default 3)")
    group.add_argument("--cluster", help="a cluster JSON file")
    p.add_argument("--device-kind", default="p100")
    p.add_argument("--per-node", type=int, metavar="K",
                   help="with --devices: nodes of K devices, the kind's link within a node and the node's network "
                        "(InfiniBand figures of the kind) between nodes")
    add_step_args(p)
    p.add_argument("--timesteps", type=int, default=100_000, help="environment steps")
    p.add_argument("--episodes", type=int, default=10_000, help="episodes (REINFORCE)")
    p.add_argument("--budget-seconds", type=float, default=60.0, help="stop training after this long (default 60)")
    p.add_argument("--episode-length", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--n-envs", type=int, default=1, help="parallel environments (SubprocVecEnv when > 1)")
    p.add_argument("--hidden-dim", type=int, default=64)
    p.add_argument("--initial-placement", default="single",
                   help="where every episode starts: single, random, round_robin, or a placer name (e.g. heft)")
    p.add_argument("--expected-moves", type=float, default=1.0,
                   help="the head's stay prior: units an untrained policy moves per step (default 1; 0: off, "
                        "the spec's head exactly)")
    p.add_argument("--encoder-option", action="append", default=[], metavar="KEY=VALUE",
                   help="an encoder keyword argument, e.g. use_low=false or num_layers=3 (repeatable)")
    p.add_argument("--learning-rate", type=float, default=1e-3)
    p.add_argument("--epsilon", type=float, default=0.1,
                   help="REINFORCE: probability of drawing a unit's device uniformly instead of from the policy")
    p.add_argument("--checkpoint-every", type=int, default=2048, help="steps between checkpoints")
    p.add_argument("--max-units", type=int, default=2000,
                   help="a graph of more placement units is trained on coarsened to this many, with a notice "
                        "(default 2000: the encoders' memory grows with the square of the units)")
    p.add_argument("--out", default="runs/latest", help="output folder (default runs/latest)")
    p.add_argument("--resume", action="store_true",
                   help="continue from the checkpoint in --out (without one: a new policy, with a notice)")
    p.add_argument("--no-compare-searches", dest="compare_searches", action="store_false",
                   help="leave local-search and anneal (given the run's own search time) out of the closing comparison")
    p.add_argument("--progress", choices=("auto", "bar", "lines", "off"), default="auto",
                   help="a bar (in a terminal), a line every 5 s with the best makespan so far, or nothing "
                        "(default auto: the bar in a terminal, lines otherwise)")
    return p


def config_from_args(args: argparse.Namespace):  # -> agents.training.TrainConfig
    from agents.training import TrainConfig, parse_encoder_options  # after argparse, so --help stays fast

    fields = {k: v for k, v in vars(args).items() if k not in ("encoder_option", "progress")}
    progress = ("bar" if sys.stderr.isatty() else "lines") if args.progress == "auto" else args.progress
    return TrainConfig(**fields, encoder_options=parse_encoder_options(args.encoder_option), progress=progress)


def main(argv: list[str] | None = None) -> int:
    config = config_from_args(build_parser().parse_args(argv))  # bad arguments fail here, before torch loads
    config.problem()  # and a missing graph, cluster file or unwritable --out
    from agents.training import closing_table, train  # torch: loaded once the input is checked

    if Path(config.out, "results.json").exists() and not config.resume:
        print(f"notice: {config.out}/ holds an earlier run; this run replaces its outputs (--out DIR keeps both, "
              "--resume continues it)", file=sys.stderr)
    result = train(config)
    print(closing_table(result))
    if result.interrupted:  # Ctrl-C or SIGTERM: the outputs are written, and the status says it
        return 143 if result.terminated else 130  # placement_env.cli's TERMINATED_STATUS, INTERRUPTED_STATUS
    return 0


def run(argv: list[str] | None = None) -> int:
    """:func:`main` with the command line's error contract: bad input is one ``error:`` line and status 2; Ctrl-C
    is one line and status 130 (during training the run still writes its outputs first)."""
    try:
        from placement_env.cli import interrupted, sigterm_as_interrupt  # as build_parser: loaded late
    except KeyboardInterrupt:  # Ctrl-C while the first modules load
        print("interrupted", file=sys.stderr)
        return 130
    try:
        with sigterm_as_interrupt():
            return main(argv)
    except SystemExit as exc:  # argparse has printed its one line
        return int(exc.code or 0)
    except KeyboardInterrupt as exc:  # Ctrl-C or SIGTERM before training started (or while the outputs were written)
        return interrupted(exc)
    except (ValueError, RuntimeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # a graph / cluster file not found, an output that cannot be written
        from placement_env.cli import os_error_message  # as build_parser: loaded late, inside the error contract

        print(f"error: {os_error_message(exc)}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(run())
