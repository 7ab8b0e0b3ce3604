"""Place a graph with a pretrained policy: ``python -m agents.place`` (and ``agents.place(graph, cluster)``).

    python -m agents.place --graph cifar10/3 --devices 3 --budget-seconds 30 --out placement.json
    python -m agents.place --graph gpt2 --devices 16 --per-node 8 --microbatches 8 --contiguous
    python -m agents.place --graph resnet50 --devices 8 --zero-shot
    python -m agents.place --graph cifar10/3 --devices 3 --method fine-tuned --policy my_policy.zip

A thin command line over the learned methods: ``--method steered``, the annealing steered by a policy
(:mod:`agents.steering`: any cluster, ``--contiguous`` for pipeline stages), the default, as the one ahead of
annealing at equal wall-clock (``docs/steering.md``); and the placement policy's, ``zero-shot`` and ``fine-tuned``,
:func:`agents.learned.placer.place` (zero-shot: one forward pass; fine-tuned: the policy and the annealing search
the graph for ``--budget-seconds``), chosen by ``--method``, or when ``--method`` is not given by ``--zero-shot`` or
by the options of the placement policy (``--policy``, ``--passes``, ``--samples``). It prints the placement's
simulated step time beside the best of the fast classical placers and the lower bound; after a search it also runs
the plain annealing for the same budget (so the command takes twice ``--budget-seconds``) and prints it on the
learned line, whichever wins; it writes the faster of the two with ``--out``, saying which. Ctrl-C (or SIGTERM)
during the search (steered or fine-tuned) stops it: the best placement found so far is reported and written, and the
command exits with status 130 (143). This module is callable: ``import agents; agents.place(graph, cluster, ...)``
calls :func:`agents.learned.placer.place`.
"""

from __future__ import annotations

import os
import sys
import types
from typing import Any

from placement_env.checks import checked_count, checked_finite
from placement_env.cli import (
    OneLineParser,
    Terminated,
    add_graph_and_cluster_args,
    add_step_args,
    check_output_paths,
    checked_step_args,
    graph_and_cluster_from_args,
    ignore_interrupts,
    interrupted,
    run_cli,
)
from placement_env.graph.placement_io import write_placement
from placement_env.sim.pipeline import Step

DEFAULT_BUDGET_SECONDS = 10.0  # agents.learned.placer.DEFAULT_BUDGET_SECONDS (a test holds them equal)
DEFAULT_SAMPLES = 512  # agents.learned.placer.DEFAULT_SAMPLES
MAX_SAMPLES = 65_536  # agents.learned.placer.MAX_SAMPLES (a test holds them equal)
METHODS = ("fine-tuned", "zero-shot", "steered")


def build_parser() -> OneLineParser:
    """The command's argument parser (errors are one line, status 2)."""
    parser = OneLineParser(prog="python -m agents.place", description=(__doc__ or "").splitlines()[0])
    add_graph_and_cluster_args(parser)
    add_step_args(parser)
    parser.add_argument("--policy", metavar="FILE", help="a policy from python -m agents.pretrain (default: the "
                                                        "shipped one), or a checkpoint of train.py")
    parser.add_argument("--budget-seconds", type=float, metavar="S",
                        help=f"search this graph for S seconds in all (default {DEFAULT_BUDGET_SECONDS:g}); the "
                             "annealing it is compared with takes as long again")
    parser.add_argument("--method", choices=METHODS,
                        help="steered (the default): the annealing steered by --steering-policy; fine-tuned (the "
                             "default with --policy, --passes or --samples): the placement policy fine-tuned by "
                             "search; zero-shot: one forward pass")
    parser.add_argument("--zero-shot", action="store_true", help="the same as --method zero-shot")
    parser.add_argument("--steering-policy", metavar="FILE",
                        help="with --method steered: a policy from python -m agents.steering.training (default: the "
                             "shipped one)")
    parser.add_argument("--contiguous", action="store_true",
                        help="with --method steered: pipeline stages in program order, as pipeline runtimes run them")
    parser.add_argument("--samples", type=int, help=f"placements drawn per forward pass of the placement policy "
                                                    f"(default {DEFAULT_SAMPLES})")
    parser.add_argument("--passes", type=int, default=1,
                        help="with --zero-shot: forward passes, each showing the policy the best placement so far "
                             "(default 1)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", metavar="FILE", help="write the placement (the spec's placement file)")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the command (``argv``: its arguments); 0, or 2 after one ``error:`` line (bad input, nothing fits)."""
    args = build_parser().parse_args(argv)

    def run() -> int:
        if args.zero_shot:
            if args.method not in (None, "fine-tuned", "zero-shot"):
                raise ValueError(f"--zero-shot is --method zero-shot; it cannot go with --method {args.method}")
            args.method = "zero-shot"
        if args.method is None:  # the placement policy's options choose it; else the steered search
            args.method = "fine-tuned" if args.policy is not None or args.passes > 1 or args.samples is not None \
                else "steered"
        if args.budget_seconds is not None:
            if not checked_finite("--budget-seconds", args.budget_seconds) > 0:
                raise ValueError(f"--budget-seconds must be positive, got {args.budget_seconds!r}")
            if args.method == "zero-shot":
                raise ValueError("--zero-shot takes no --budget-seconds (it does not search)")
        if args.method != "steered" and (args.contiguous or args.steering_policy is not None):
            raise ValueError(f"{'--contiguous' if args.contiguous else '--steering-policy'} is for --method "
                             f"steered (the {args.method} placer places freely, with its own policy)")
        if args.method == "steered" and (args.policy is not None or args.passes > 1 or args.samples is not None):
            option = "--policy" if args.policy is not None else "--passes" if args.passes > 1 else "--samples"
            raise ValueError(f"{option} is for the fine-tuned and zero-shot placers (--method steered takes "
                             "--steering-policy)")
        args.zero_shot = args.method == "zero-shot"
        args.samples = DEFAULT_SAMPLES if args.samples is None else args.samples
        if checked_count("--samples", args.samples, 1) > MAX_SAMPLES:
            raise ValueError(f"--samples must be at most {MAX_SAMPLES:,} (placements drawn and judged at once), "
                             f"got {args.samples:,}")
        checked_count("--passes", args.passes, 1)
        if args.passes > 1 and not args.zero_shot:
            raise ValueError("--passes is for --zero-shot (the fine-tuning searches instead)")
        check_output_paths(args.out)
        graph, cluster = graph_and_cluster_from_args(args)
        step = Step(**checked_step_args(args, graph))
        for option, path in (("--policy", args.policy), ("--steering-policy", args.steering_policy)):
            if path is not None and not os.path.isfile(path):
                raise ValueError(f"{option}: no such file: {path!r}")
        budget = DEFAULT_BUDGET_SECONDS if args.budget_seconds is None else args.budget_seconds
        from agents.learned import report  # the placers it compares with: once the input is checked

        if not args.zero_shot:  # the searches compared share their start placers' set-up: built before both
            report.warm_up(graph, cluster, step, args.contiguous)

        def searching() -> None:
            print(f"searching for {budget:g} s (Ctrl-C stops it and keeps the best placement so far)", flush=True)

        if args.method == "steered":
            from agents.steering.placer import steered_search  # the simulator's kernels: once the input is checked

            result = steered_search(graph, cluster, budget, args.steering_policy, args.contiguous, args.seed, step,
                                    on_search=searching)
        else:
            from agents.learned import placer  # torch: loaded once the input is checked

            result = placer.place(graph, cluster, args.policy, args.budget_seconds, args.zero_shot, args.seed,
                                  args.samples, step=step, passes=args.passes, on_search=searching)
        if args.out:  # the search's best is kept before the comparison: a stop during it loses nothing
            with ignore_interrupts():
                write_placement(result.placement, args.out)
        against, stopped = None, None
        if not (args.zero_shot or result.interrupted):
            try:  # the line says the comparison began: a stop from then on is the comparison's
                print(f"comparing with annealing for {budget:g} s (Ctrl-C keeps the search's placement"
                      + (f", already in {args.out})" if args.out else ")"), flush=True)
                against = report.anneal_at_budget(graph, cluster, budget, args.seed, step, args.contiguous)
            except KeyboardInterrupt as stop:  # Ctrl-C or SIGTERM during the comparison: report the search alone
                stopped = stop
        with ignore_interrupts():  # the best placement found is reported and written whole
            print(report.placement_report(graph, cluster, result, args.seed, step, against, args.contiguous))
            if args.out:
                faster = against is not None and (against.overflow, against.makespan) < (result.overflow,
                                                                                          result.makespan)
                if against is not None and faster:
                    write_placement(against.placement, args.out)
                print(f"placement in {args.out}" + (" (the annealing's: it was faster)" if faster else ""))
        if stopped is not None:
            return interrupted(stopped, "the comparison with annealing was stopped; the search's best placement "
                               + ("is in " + args.out if args.out else "is reported above"))
        if result.interrupted:
            return interrupted(Terminated() if result.terminated else KeyboardInterrupt(),
                               f"the search stopped after {result.seconds:.1f} s; the best placement found so far "
                               + ("is in " + args.out if args.out else "is reported above"))
        return 0

    return run_cli(run)


class _CallableModule(types.ModuleType):
    """Lets ``agents.place(...)`` call :func:`agents.learned.placer.place` although ``python -m agents.place``
    makes ``agents.place`` this module."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from agents.learned.placer import place  # torch: only when a placement is asked for

        return place(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule

if __name__ == "__main__":
    sys.exit(main())
