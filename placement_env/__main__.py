"""``python -m placement_env``: simulate or export a placement, plan or run a pipeline, list the shipped graphs, or
print table 1.

Examples::

    python -m placement_env simulate --graph default --placement p.json --devices 3
    python -m placement_env simulate --graph g.json.gz --placement p.json --cluster c.json --json
    python -m placement_env simulate --graph default --placement p.json --devices 3 --trace step.json
    python -m placement_env export --graph model.json.gz --placement p.json --format device-map
    python -m placement_env export --graph model.json.gz --placement p.json --format split-points --out stages.json
    python -m placement_env export --graph model.json.gz --placement p.json --devices 4 --microbatches 8 \
        --format pipeline-plan --out plan.json
    python -m placement_env run --plan plan.json --model mypackage.models:tiny_gpt2 --steps 5 --sgd 0.01
    python -m placement_env plan --graph gpt2 --devices 16 --per-node 8 --device-kind a100-nvlink --batch 512
    python -m placement_env plan --graph gpt2 --devices 16 --per-node 8 --device-kind a100-nvlink --batch 512 \
        --stages 4 --replicas 4 --microbatches 16 --schedule 1f1b --split uniform --export megatron --out m.json
    python -m placement_env plan --shape '{"layers": 30, "hidden": 3072, "heads": 32}' --devices 64 --per-node 8 \
        --device-kind a100-nvlink --batch 512 --export megatron --out megatron.json
    python -m placement_env graphs
    python -m placement_env table1
"""

from __future__ import annotations

import argparse
import functools
import importlib
import json
import math
import os
import sys
from typing import Any

from placement_env.checks import first_line
from placement_env.cli import (
    OneLineParser,
    add_graph_and_cluster_args,
    add_step_args,
    check_output_paths,
    checked_step_args,
    graph_and_cluster_from_args,
    run_cli,
)
from placement_env.graph.placement_io import read_placement
from placement_env.json_files import read_json_file, write_json_file, write_text_atomically
from placement_env.plan.exports import deepspeed_partition, device_mesh, megatron_arguments
from placement_env.plan.pipeline_plan import PipelinePlan, plan_from_placement
from placement_env.plan.planner import LAYOUTS, SPLITS, search_plan
from placement_env.plan.schedules import PLAN_SCHEDULES
from placement_env.runtime import to_device_map, to_split_points
from placement_env.scale_cli import (
    SCALE_EXPORTS,
    SCALE_PLAN_FORMAT,
    add_scale_args,
    refuse_scale_only,
    scale_plan_command,
    scale_plan_parallelism,
)
from placement_env.sim.chrome_trace import write_chrome_trace
from placement_env.sim.simulator import check_placement, checked_param_factor, simulate
from placement_env.zoo.registry import (
    REAL_MODELS,
    REAL_MODELS_DIR,
    SUITES,
    TRANSFORMERS,
    TRANSFORMERS_DIR,
    list_graphs,
    load_graph,
)
from placement_env.zoo.suites import SUITE_NAMES, SUITE_SEEDS, shipped_path, table1_markdown


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="python -m placement_env", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sim = sub.add_parser("simulate", help="simulate one placement and report makespan, memory and OOM")
    add_graph_and_cluster_args(sim)
    sim.add_argument("--placement", required=True, metavar="FILE",
                     help="JSON list of device indices in node order, or object node id -> device")
    sim.add_argument("--param-factor", type=float, default=4.0,
                     help="static bytes per parameter byte (4 = training with Adam, 1 = inference)")
    add_step_args(sim)
    sim.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    sim.add_argument("--trace", metavar="FILE",
                     help="also write the schedule and each device's memory over time as a Chrome trace "
                          "(.json or .json.gz; open it in https://ui.perfetto.dev or chrome://tracing)")
    export = sub.add_parser("export", help="a placement of a graph with module names as a runtime takes it: "
                                           "accelerate's device_map, pipeline split points or a pipeline plan (JSON)")
    add_graph_and_cluster_args(export)
    export.add_argument("--placement", required=True, metavar="FILE",
                        help="the placement file (its devices are checked against the cluster)")
    export.add_argument("--format", required=True, choices=EXPORT_FORMATS,
                        help="device-map: {module: device} for accelerate.dispatch_model; split-points: the stages' "
                             "devices, split_spec for torch.distributed.pipelining, DeepSpeed's layers and parts; "
                             "pipeline-plan: the plan python -m placement_env run launches (stages, ranks, "
                             "micro-batches, schedule, tied parameters, simulated step and memory)")
    add_step_args(export)
    export.add_argument("--out", metavar="FILE", help="write the JSON there (default: standard output)")
    run = sub.add_parser("run", help="training steps of a pipeline plan with torch.distributed.pipelining on local "
                                     "worker processes (one per stage), or under torchrun")
    run.add_argument("--plan", required=True, metavar="FILE", help="a plan from export --format pipeline-plan")
    run.add_argument("--model", required=True, metavar="MODULE:FACTORY",
                     help="an importable function returning (model, example_inputs) or (model, example_inputs, "
                          "example_kwargs): the model of the plan's graph and one batch")
    run.add_argument("--steps", type=int, default=3, help="training steps (default 3)")
    run.add_argument("--sgd", type=float, metavar="LR",
                     help="update the parameters with SGD at this learning rate (default: gradients only)")
    run.add_argument("--loss", choices=("auto", "causal-lm", "sum"), default="auto",
                     help="the last stage's loss per micro-batch: causal-lm (next-token cross-entropy against the "
                          "input ids shifted), sum (the sum of the outputs: gradients flow, nothing is learnt); "
                          "auto (default): causal-lm for a transformers causal LM given input_ids, else sum")
    run.add_argument("--cuda", action="store_true",
                     help="a plan at scale: a CUDA device a rank (nccl; under torchrun cuda:LOCAL_RANK) rather than "
                          "CPU workers over gloo")
    run.add_argument("--precision", choices=("fp32", "bf16-mixed"), default="fp32",
                     help="a plan at scale: fp32 (default: the model as it is) or bf16-mixed (forward and loss under "
                          "bf16 autocast, fp32 parameters, gradients and optimizer states)")
    run.add_argument("--out", metavar="FILE", help="also write the measurements as JSON there")
    planning = sub.add_parser("plan", help="plan a hybrid pipeline (stages x replicas x micro-batches x schedule x "
                                           "recomputation x layer split) for a graph with module names")
    add_graph_and_cluster_args(planning)
    planning.add_argument("--batch", type=_count, help="the step's batch (default: the graph's own)")
    for name, what in (("stages", "pipeline stages S"), ("replicas", "data-parallel replicas D"),
                       ("microbatches", "micro-batches m per replica"),
                       ("virtual-stages", "chunks a stage runs (interleaved-1f1b)")):
        planning.add_argument(f"--{name}", type=_count, help=f"fix the {what} (default: the planner chooses)")
    planning.add_argument("--schedule", choices=PLAN_SCHEDULES, help="fix the schedule")
    planning.add_argument("--recompute", choices=("on", "off", "none", "selective", "full"),
                          help="recompute on every stage, or on none (default: where memory needs it); with "
                               "--shape: none, selective (the attention core) or full")
    planning.add_argument("--split", help="uniform (Megatron's), parameters (DeepSpeed's), time, or layers per "
                                          "chunk such as 5,4,4,4 (default: the planner chooses)")
    planning.add_argument("--layout", choices=LAYOUTS, help="which devices form stages and replicas")
    planning.add_argument("--export", choices=SCALE_EXPORTS, default="plan",
                          help="what --out holds: the plan (for run), Megatron-LM's arguments, DeepSpeed's "
                               "partition (with --shape: its config), the DeviceMesh, or (with --shape) "
                               "torchtitan's TOML")
    add_scale_args(planning, _count)
    planning.add_argument("--out", metavar="FILE", help="write it there as JSON (default: only the summary)")
    sub.add_parser("graphs", help="list the shipped graphs with their sizes")
    sub.add_parser("table1", help="the benchmark suites' structure in the layout of the paper's table 1")
    return parser


def _describe(name: str, path=None) -> str:
    g = load_graph(name)
    size = f"{path.stat().st_size / 1024:>7.0f} KiB" if path is not None else " " * 11
    return f"{name:<16} {g.num_nodes:>6} ops {g.num_edges:>7} edges {g.num_units:>6} units  {size}"


def list_shipped() -> None:
    """Print every shipped graph with its size, then the names built on demand and the suites."""
    print("shipped graphs (name, ops, op edges, placement units, file size):")
    for suite in SUITE_NAMES:
        for seed in SUITE_SEEDS:
            print("  " + _describe(f"{suite}/{seed}", shipped_path(suite, seed)))
    for models, folder in ((REAL_MODELS, REAL_MODELS_DIR), (TRANSFORMERS, TRANSFORMERS_DIR)):
        for model in models:
            path = folder / f"{model}.json.gz"
            print("  " + (_describe(model, path) if path.is_file() else f"{model:<16} not shipped in this install"))
    print("built on demand:")
    for name in list_graphs():
        if "<" in name:
            print(f"  {name:<16} (any non-negative integer seed; suites ship 0..16, seeds 100+ are held out)")
    print(f"  {'default':<16} = cifar10/0")
    for suite, members in SUITES.items():
        print(f"suite {suite:<10} {len(members)} graphs: {', '.join(members[:2])} .. {members[-1]}")


EXPORT_FORMATS = ("device-map", "split-points", "pipeline-plan")


def export(args: argparse.Namespace) -> int:
    """``export``: the placement in ``args.format``, as JSON on stdout or in ``args.out`` (written whole)."""
    check_output_paths(args.out)
    graph, cluster = graph_and_cluster_from_args(args)
    step = checked_step_args(args, graph)
    placement = read_placement(args.placement, graph)
    check_placement(graph, placement, cluster)
    if args.format == "device-map":
        exported = to_device_map(graph, placement)
    elif args.format == "split-points":
        exported = to_split_points(graph, placement).to_dict()
    else:
        exported = plan_from_placement(graph, placement, cluster, **step).to_dict()
    if args.out and args.out.endswith(".gz"):
        write_json_file(exported, args.out)  # gzipped, as the project's own readers take it
    elif args.out:
        write_text_atomically(args.out, json.dumps(exported, indent=1) + "\n")
    else:
        print(json.dumps(exported, indent=1))
    return 0


PLAN_EXPORTS = ("plan", "megatron", "deepspeed", "device-mesh")


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {text!r}")
    return value


def plan_command(args: argparse.Namespace) -> int:
    """``plan``: :func:`~placement_env.plan.planner.search_plan` with the decisions given fixed; a summary, and
    the plan or an export of it in ``args.out``."""
    check_output_paths(args.out)
    if args.shape is not None:
        return scale_plan_command(args)
    refuse_scale_only(args)
    if args.export not in PLAN_EXPORTS:
        raise ValueError(f"--export {args.export} needs --shape; a traced graph's plan exports "
                         f"{', '.join(PLAN_EXPORTS)}")
    graph, cluster = graph_and_cluster_from_args(args)
    print(f"planning {graph.name} on {cluster.num_devices} devices (the first plan after an install also compiles "
          "the planner's kernels: about 30 s)", flush=True)
    split: str | list[int] | None = args.split
    if split is not None and split not in SPLITS:
        try:
            split = [int(x) for x in str(args.split).split(",")]
        except ValueError:
            raise ValueError(f"--split must be one of {', '.join(SPLITS)} or layers per chunk such as 5,4,4,4, got "
                             f"{args.split!r}") from None
    planned = search_plan(graph, cluster, stages=args.stages, replicas=args.replicas,
                            microbatches=args.microbatches, schedule=args.schedule,
                            virtual_stages=args.virtual_stages,
                            recompute=None if args.recompute is None else args.recompute == "on", split=split,
                            layout=args.layout, batch=args.batch,
                            on_progress=lambda said: print(f"  {said}", flush=True))
    plan = planned.plan
    if args.export == "plan":
        exported = plan.to_dict()
    elif args.export == "megatron":
        exported = megatron_arguments(plan, graph)
    elif args.export == "deepspeed":
        exported = deepspeed_partition(plan)
    else:
        exported = device_mesh(plan)
    print(f"graph {graph.name} ({len(plan.layers)} layers), batch {plan.batch}, on {cluster.name} "
          f"({cluster.num_devices} devices)")
    for note in plan.notes:
        print(f"  {note}")
    print(f"step         {planned.step.seconds * 1e3:.3f} ms simulated (lower bound {planned.lower_bound * 1e3:.3f} "
          f"ms, {planned.gap:.2f}x)")
    per = "chunk (rank c mod S)" if plan.virtual_stages > 1 else "stage"
    print(f"split        {planned.split}: layers per {per} {[len(stage.layers) for stage in plan.stages]}")
    peak = max(stage.simulated_peak_memory for stage in plan.stages)
    print(f"memory       {peak / 2**30:.2f} GiB at most a device, of {float(cluster.memory.min()) / 2**30:.2f}")
    print(f"planned in   {planned.seconds:.1f} s ({planned.configurations} configurations, {planned.simulated} "
          "simulated)")
    if args.out:
        if args.out.endswith(".gz"):
            write_json_file(exported, args.out)
        else:
            write_text_atomically(args.out, json.dumps(exported, indent=1) + "\n")
    return 0


def run_plan(args: argparse.Namespace) -> int:
    """``run``: the plan's training steps on local workers (or this torchrun rank); a summary, and JSON in
    ``args.out``."""
    check_output_paths(args.out)
    if args.steps < 1:
        raise ValueError(f"--steps must be an integer >= 1, got {args.steps}")
    if args.sgd is not None and not (math.isfinite(args.sgd) and args.sgd >= 0):
        raise ValueError(f"--sgd must be a finite learning rate >= 0, got {args.sgd}")
    data = read_json_file(args.plan)
    at_scale = isinstance(data, dict) and data.get("format") == SCALE_PLAN_FORMAT
    if not at_scale and (args.cuda or args.precision != "fp32"):
        raise ValueError(f"--cuda and --precision apply to a plan at scale (python -m placement_env plan --shape ... "
                         f"--out); {args.plan} is a pipeline plan")
    plan = None if at_scale else PipelinePlan.from_dict(data, source=args.plan)
    parallelism = scale_plan_parallelism(data, args.plan) if at_scale else None
    model, inputs, kwargs = model_from_factory(args.model)
    from placement_env.runtime.losses import causal_lm_loss, is_causal_lm  # loads torch; other commands need none
    from placement_env.runtime.pipeline_runner import run_pipeline, sgd  # torch too, as above

    loss = args.loss
    if loss == "auto":
        loss = "causal-lm" if is_causal_lm(model) and "input_ids" in kwargs else "sum"
    if loss == "causal-lm" and "input_ids" not in kwargs:
        raise ValueError("--loss causal-lm needs the factory's example kwargs to hold input_ids (the targets)")
    if loss == "sum" and args.sgd is not None:
        print("warning: --sgd with the sum of the outputs as the loss drives the outputs down without bound (no "
              "training objective); give --loss causal-lm for a language model", file=sys.stderr)
    optimizer = None if args.sgd is None else functools.partial(sgd, lr=args.sgd)
    loss_fn, targets = (causal_lm_loss, kwargs["input_ids"]) if loss == "causal-lm" else (None, None)
    if parallelism is not None:
        return _run_at_scale(args, model, inputs, kwargs, parallelism, optimizer, loss_fn, targets, loss)
    assert plan is not None
    try:
        result = run_pipeline(model, inputs, plan, steps=args.steps, example_kwargs=kwargs, optimizer=optimizer,
                              loss_fn=loss_fn, targets=targets)
    except RuntimeError as error:  # a stage failed or died: its first line says which and why
        raise ValueError(first_line(error)) from None
    print(f"plan {args.plan}: {plan.num_stages} stages, {plan.microbatches} micro-batches, {plan.schedule}; "
          f"{args.steps} steps on {result.backend}; loss {loss}")
    print(f"step         {result.seconds * 1e3:.3f} ms (median; spread {result.spread:.1%}; the plan's simulated "
          f"step on {plan.cluster}: {plan.simulated_step_seconds * 1e3:.3f} ms)")
    print(f"losses       {', '.join(f'{x:.6g}' for x in result.losses)}")
    for stage, peak in zip(plan.stages, result.peak_memory):
        print(f"stage {stage.rank} (device {stage.device}): peak {peak / 2**20:.1f} MiB measured, "
              f"{stage.simulated_peak_memory / 2**20:.1f} MiB simulated")
    if args.out:
        write_text_atomically(args.out, json.dumps(result.to_dict(), indent=1) + "\n")
    return 0


def _run_at_scale(args: argparse.Namespace, model: Any, inputs: tuple, kwargs: dict, parallelism: Any,
                  optimizer: Any, loss_fn: Any, targets: Any, loss: str) -> int:
    """``run`` of a plan at scale: :func:`~placement_env.runtime.parallel_runner.run_parallel` on t x S x d local
    workers, or as this torchrun rank; a summary, and JSON in ``args.out`` (written by rank 0 under torchrun)."""
    from placement_env.runtime.parallel_runner import run_parallel  # torch: as run_plan's imports

    try:
        result = run_parallel(model, inputs, parallelism, steps=args.steps, example_kwargs=kwargs,
                              optimizer=optimizer, loss_fn=loss_fn, targets=targets,
                              devices="cuda" if args.cuda else None, precision=args.precision)
    except RuntimeError as error:  # a rank failed or died: its first line says which and why
        raise ValueError(first_line(error)) from None
    ranks = "CUDA devices" if args.cuda else "local workers"
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:  # run_parallel ran this process as one rank
        ranks = f"torchrun (rank {os.environ['RANK']} of {os.environ['WORLD_SIZE']})"
    print(f"plan {args.plan}: {parallelism.describe()}; {args.steps} steps on {ranks}; loss {loss}")
    print(f"step         {result.seconds * 1e3:.3f} ms (median)")
    print(f"losses       {', '.join(f'{x:.6g}' for x in result.losses)}")
    print(f"held         {', '.join(f'{b / 2**20:.2f}' for b in result.held_bytes)} MiB of parameters a rank")
    if result.peak_bytes is not None:
        print(f"peak         {', '.join(f'{b / 2**30:.2f}' for b in result.peak_bytes)} GiB allocated a rank (CUDA)")
    if args.out and os.environ.get("RANK", "0") == "0":  # under torchrun every rank has the result: one writes
        write_text_atomically(args.out, json.dumps({"steps": result.steps, "losses": result.losses,
                                                    "held_bytes": result.held_bytes, "peak_bytes": result.peak_bytes,
                                                    "precision": args.precision}, indent=1) + "\n")
    return 0


def model_from_factory(spec: str) -> tuple[object, tuple, dict]:
    """``(model, example_inputs, example_kwargs)`` from ``module:factory`` (see ``run --model``); ``ValueError``
    naming what cannot be imported or what the factory returned instead."""
    module_name, _, name = spec.partition(":")
    if not module_name or not name:
        raise ValueError(f"--model must be MODULE:FACTORY (an importable module and a function in it), got {spec!r}")
    try:
        module = importlib.import_module(module_name)
    except Exception as error:  # noqa: BLE001 - any failure to import is the user's to fix, said in one line
        raise ValueError(f"--model {spec}: cannot import {module_name!r} ({type(error).__name__}: "
                         f"{first_line(error)})") from None
    factory = getattr(module, name, None)
    if not callable(factory):
        raise ValueError(f"--model {spec}: module {module_name!r} has no function {name!r}")
    try:
        made = factory()
    except Exception as error:  # noqa: BLE001 - the user's factory failing is the user's to fix, said in one line
        raise ValueError(f"--model {spec}: the factory raised {type(error).__name__}: {first_line(error)}") from None
    if not isinstance(made, tuple) or len(made) not in (2, 3):
        raise ValueError(f"--model {spec}: the factory must return (model, example_inputs) or (model, "
                         f"example_inputs, example_kwargs), got {type(made).__name__}")
    model, inputs, kwargs = (*made, {}) if len(made) == 2 else made
    return model, inputs, dict(kwargs)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "export":
        return export(args)
    if args.command == "run":
        return run_plan(args)
    if args.command == "plan":
        return plan_command(args)
    if args.command == "graphs":
        list_shipped()
        return 0
    if args.command == "table1":
        print(table1_markdown())
        return 0
    checked_param_factor(args.param_factor)
    graph, cluster = graph_and_cluster_from_args(args)
    step = checked_step_args(args, graph)
    placement = read_placement(args.placement, graph)
    result = simulate(graph, placement, cluster, param_factor=args.param_factor, **step)
    if args.trace is not None:
        write_chrome_trace(args.trace, graph, cluster, result)
    if args.json:
        print(json.dumps(result.to_dict()))
        return 0
    pipelined = f", {step['microbatches']} micro-batches, {step['schedule']}" if step["microbatches"] > 1 else ""
    print(f"graph {graph.name} ({graph.num_nodes} ops) on {cluster.name}{pipelined}")
    print(f"makespan     {result.makespan * 1e3:.3f} ms")
    print(f"lower bound  {result.lower_bound * 1e3:.3f} ms  (makespan / LB = {result.lb_ratio:.3f})")
    print(f"transfers    {result.schedule.num_transfers}")
    print(f"{'device':<8} {'peak memory (GB)':>16} {'capacity (GB)':>14} {'busy (ms)':>10}")
    for d in range(cluster.num_devices):
        print(f"{cluster.devices[d].name:<8} {result.peak_memory[d] / 1e9:>16.3f} {cluster.memory[d] / 1e9:>14.3f} "
              f"{result.busy[d] * 1e3:>10.3f}")
    print(f"OOM          {'yes' if result.oom else 'no'}")
    if args.trace is not None:
        print(f"trace        {args.trace} (open in https://ui.perfetto.dev or chrome://tracing)")
    return 0


if __name__ == "__main__":
    sys.exit(run_cli(main))
