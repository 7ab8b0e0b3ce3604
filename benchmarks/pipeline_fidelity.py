"""The simulator's pipelined step against pipelines run with torch.distributed.pipelining on 2 local devices.

    python benchmarks/pipeline_fidelity.py [--rounds 3] [--max-rounds 8] [--steps 4]
        [--models gpt2,bert,vit,llama,cnn | opt,mixer,plain-cnn]
        [--calibrate | --calibrate-per-model | --calibrate-two-point]
        [--json experiments/pipeline_fidelity/rows.json]
    python benchmarks/pipeline_fidelity.py --summary-of experiments/pipeline_fidelity/per_model_rows.json

Five models, four from Hugging Face configs (GPT-2 with its tied embeddings, BERT with its tied decoder, ViT,
Llama; 4 layers, width 128) and a plain PyTorch CNN; or, with ``--models opt,mixer,plain-cnn``, three models no
overhead was tuned on (``fidelity_common.outside_models``: transformers' OPT, not in the zoo, and an MLP-Mixer and a
VGG-style CNN written for the benchmark). Each is imported with ``from_torch(..., profile=True,
colocate_modules=depth)`` on one thread (each op's cost the fastest of ``--rounds`` profiles), so that every
module of depth ``depth`` is a placement unit and every contiguous placement is a pipeline. The cluster is
``local_cluster(2)`` (measured: speed 1.0, the gloo link while the workers compute). For m in {4, 8} and each
schedule (GPipe, 1F1B), four placers give a contiguous placement (``deepspeed-uniform``,
``deepspeed-parameters``, ``split``, ``anneal`` with 2 s), each made a plan (``plan_from_placement``, parameters counted
twice: weights and gradients, no optimizer state) and run by ``run_pipeline`` (``--steps`` steps, no update; the
step is the median of the steps after the first). Plans that agree are run once. Rounds interleave the plans;
each plan's measured step is the fastest of its rounds' medians, and its spread across rounds is reported beside
the error it judges. After ``--rounds`` rounds, the cells whose error is not resolved (the gap between their two
fastest rounds, the measurement's ``uncertainty``, is not below ``|predicted / measured - 1|``, the prediction
being the calibrated column's where there is one) get more rounds, interleaved, up to ``--max-rounds`` in all;
the summary says how many cells are resolved and bounds the others' error by their error plus their uncertainty.

Printed per cell: the simulated and measured step (ms), their ratio, the spread of the measured rounds, each
stage's simulated and measured peak memory; per model: whether the plan the simulator ranks best is measured
fastest or within the measured spread of the fastest. The summary: mean |simulated / measured - 1|, cells within
20%, per-stage memory within 20%. With ``--calibrate``, each plan is also simulated with the pipeline runtime's
overheads (per op call and micro-batch, per message) measured first on a calibration model of their own
(:func:`placement_env.runtime.pipeline_calibration.calibrate_pipeline`), and the summary gives that column's
error too. With ``--calibrate-per-model`` the column is instead simulated with the overheads measured on each model
itself (:func:`~placement_env.runtime.pipeline_calibration.calibrate_model`): one-stage runs at m in {1, 2, 4, 8}
and the ``deepspeed-uniform`` plan at m = 2 under GPipe, none of them a cell of the table. With
``--calibrate-two-point`` (alone, or beside either, in a column of its own measured on the same cells) the
overheads are measured on each model too, the cost per tensor and the cost per step
fitted together to two runs, at m = 2 and m = 8 under GPipe, of a two-stage cut of the model's layers that no cell's
placer makes (``unjudged_cut``: the one nearest the middle), so that neither run is a cell.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from fidelity_common import fastest_costs, hugging_face_models, outside_models, spearman
from machine import machine_line

from baselines.placers import CONTIGUOUS_PLACERS, CONTIGUOUS_RUNTIME_DEFAULTS, search_placers
from placement_env import from_torch
from placement_env.plan.layers import placement_of_layers
from placement_env.plan.module_tree import layer_sequence
from placement_env.plan.pipeline_plan import plan_from_placement
from placement_env.runtime.local_cluster import local_cluster
from placement_env.runtime.pipeline_calibration import calibrate_model, calibrate_pipeline, uncertainty
from placement_env.runtime.pipeline_runner import run_pipeline
from placement_env.runtime.runtime_overheads import RuntimeOverheads
from placement_env.sim.pipeline import Step

PLACERS = ("deepspeed-uniform", "deepspeed-parameters", "split", "anneal")
COLUMNS = {"calibrated": "calibrated", "two_point": "two-point"}
"""The calibrated columns a row may have (its keys ``{column}_ms``, ``{column}_ratio``) and their printed names:
``--calibrate`` or ``--calibrate-per-model``, and ``--calibrate-two-point``."""
STEPS = [(m, s) for m in (4, 8) for s in ("gpipe", "1f1b")]
CALIBRATION_ATTEMPTS = 4  # calibrate_model refuses measurements a busy machine spread; each refusal is printed


def measured_local_cluster() -> Any:
    """Print the machine, set one thread (as each worker runs), measure ``local_cluster(2)`` and print its link."""
    print(machine_line(), flush=True)
    torch.set_num_threads(1)
    cluster = local_cluster(2)
    print(f"local_cluster(2) link, loaded: latency {cluster.latency[0, 1] * 1e6:.0f} us, bandwidth "
          f"{cluster.bandwidth[0, 1] / 1e9:.2f} GB/s", flush=True)
    return cluster


def calibrated_on_model(name: str, model: Any, inputs: tuple, kwargs: dict, graph: Any, placement: np.ndarray,
                        cluster: Any, rounds: int, steps: int,
                        microbatches: int | tuple[int, int] = 2) -> RuntimeOverheads:
    """``calibrate_model`` on ``placement`` at ``microbatches``, tried again (after 30 s) when it refuses
    measurements a busy machine spread, as its refusal says, up to :data:`CALIBRATION_ATTEMPTS` times; each refusal
    printed."""
    for attempt in range(1, CALIBRATION_ATTEMPTS + 1):
        try:
            return calibrate_model(model, inputs, kwargs, graph, placement, cluster, rounds=rounds, steps=steps,
                                   microbatches=microbatches)
        except ValueError as refused:
            print(f"{name:6s} calibration attempt {attempt} of {CALIBRATION_ATTEMPTS} refused: {refused}", flush=True)
            if attempt == CALIBRATION_ATTEMPTS:
                raise
            time.sleep(30)
    raise AssertionError("unreachable")


def unjudged_cut(graph: Any, cluster: Any, judged: set[tuple[int, ...]]) -> np.ndarray:
    """The two-stage cut of the graph's layers (``layer_sequence``, as DeepSpeed lists them) nearest the middle whose
    placement is no judged cell's (``judged``: the cells' placements) and that makes a plan; ``ValueError`` when
    every cut is judged or refused."""
    layers = layer_sequence(graph)
    middle = len(layers) / 2
    for k in sorted(range(1, len(layers)), key=lambda k: (abs(k - middle), k)):
        placement = placement_of_layers(graph, layers, [0, k, len(layers)])
        if tuple(placement.tolist()) in judged:
            continue
        try:
            plan_from_placement(graph, placement, cluster, microbatches=2, schedule="gpipe")
        except ValueError:
            continue
        return placement
    raise ValueError(f"every two-stage cut of {graph.name!r}'s {len(layers)} layers is a judged cell's or refused")


def describe_cut(graph: Any, placement: np.ndarray) -> str:
    """Where a two-stage placement's second stage begins, and how many ops each stage holds."""
    first = next(node.module or node.id for node, device in zip(graph.nodes, placement) if device == 1)
    return f"stage 1 begins at {first} ({int(np.sum(placement == 0))} / {int(np.sum(placement == 1))} ops)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--max-rounds", type=int, default=8,
                        help="rounds a cell may take in all: after --rounds, the cells whose error the two fastest "
                             "rounds do not yet resolve get more, interleaved (default 8)")
    parser.add_argument("--models", default="gpt2,bert,vit,llama,cnn")
    parser.add_argument("--json", default=None)
    parser.add_argument("--summary-of", default=None, metavar="JSON",
                        help="print the rankings and summary of a rows file this script wrote, and stop")
    parser.add_argument("--calibrate", action="store_true",
                        help="also simulate each plan with the pipeline runtime's overheads measured on a "
                             "calibration model of its own (placement_env.runtime.pipeline_calibration)")
    parser.add_argument("--calibrate-two-point", action="store_true",
                        help="the overheads measured on each model itself, the cost per tensor and per step fitted "
                             "to two runs (m = 2 and 8, GPipe) of a two-stage cut no cell's placer makes")
    parser.add_argument("--calibrate-per-model", action="store_true",
                        help="the same with the overheads measured on each model itself, in runs that are no cell "
                             "of the table (calibrate_model)")
    args = parser.parse_args()
    if args.rounds < 1 or args.max_rounds < args.rounds:
        parser.error("--rounds must be at least 1 and --max-rounds at least --rounds")
    if args.calibrate and args.calibrate_per_model:
        parser.error("--calibrate and --calibrate-per-model are two designs of one column: give one")
    if args.summary_of:
        summary_of(args.summary_of)
        return
    cluster = measured_local_cluster()
    shared = calibrate_pipeline(cluster, rounds=args.rounds) if args.calibrate else None
    if shared is not None:
        print(f"pipeline runtime, calibrated: {describe(shared)}", flush=True)
    placers = {**CONTIGUOUS_PLACERS, **CONTIGUOUS_RUNTIME_DEFAULTS, **search_placers(2.0, contiguous=True)}
    rows, summary = [], []
    zoo = {**hugging_face_models(), **outside_models()}
    for name in args.models.split(","):
        if name not in zoo:
            parser.error(f"unknown model {name!r} in --models; known: {', '.join(zoo)}")
    for name in args.models.split(","):
        model, inputs, kwargs, depth = zoo[name]
        graph = fastest_costs([from_torch(model, inputs, example_kwargs=kwargs, profile=True, repeats=10,
                                          name=name, colocate_modules=depth) for _ in range(args.rounds)])
        plans: dict[tuple, dict] = {}  # (placement, m, schedule) -> the cell
        for m, schedule in STEPS:
            for placer in PLACERS:
                placement = placers[placer](graph, cluster, 0, step=Step(m, schedule))
                key = (tuple(placement.tolist()), m, schedule)
                if key in plans:
                    plans[key]["placers"].append(placer)
                    continue
                try:
                    plan = plan_from_placement(graph, placement, cluster, microbatches=m, schedule=schedule,
                                         param_factor=2.0)
                except ValueError as error:  # a placement no runtime can run as a pipeline: reported
                    print(f"{name:6s} m={m} {schedule:5s} {placer}: no plan: {error}", flush=True)
                    rows.append({"model": name, "placers": placer, "microbatches": m, "schedule": schedule,
                                 "error": f"no plan: {error}"})
                    continue
                plans[key] = {"placers": [placer], "plan": plan, "rounds": [], "peaks": []}
        columns: dict[str, RuntimeOverheads] = {"calibrated": shared} if shared is not None else {}
        if args.calibrate_per_model:
            two = placers["deepspeed-uniform"](graph, cluster, 0, step=Step(2, "gpipe"))
            columns["calibrated"] = calibrated_on_model(name, model, inputs, kwargs, graph, two, cluster, args.rounds,
                                                        args.steps)
            print(f"{name:6s} pipeline runtime, calibrated on the model: {describe(columns['calibrated'])}",
                  flush=True)
        if args.calibrate_two_point:
            cut = unjudged_cut(graph, cluster, {key[0] for key in plans})
            print(f"{name:6s} calibration cut, no cell's: {describe_cut(graph, cut)}", flush=True)
            columns["two_point"] = calibrated_on_model(name, model, inputs, kwargs, graph, cut, cluster, args.rounds,
                                                       args.steps, microbatches=(2, 8))
            print(f"{name:6s} pipeline runtime, calibrated on the model at m = 2 and 8: "
                  f"{describe(columns['two_point'])}", flush=True)
        for (placement, m, schedule), cell in plans.items():
            for column, overheads in columns.items():
                g, c = overheads.applied(graph, cluster, np.array(placement))
                cell[column] = plan_from_placement(g, np.array(placement), c, microbatches=m, schedule=schedule,
                                                   param_factor=2.0).simulated_step_seconds
        for _ in range(args.rounds):
            run_round(list(plans.values()), model, inputs, kwargs, args.steps)
        for _ in range(args.max_rounds - args.rounds):  # more rounds for the cells whose error is not yet resolved
            open_cells = [c for c in plans.values() if "error" not in c and not resolved(c)]
            if not open_cells:
                break
            run_round(open_cells, model, inputs, kwargs, args.steps)
        model_rows = []
        for (_, m, schedule), cell in plans.items():
            plan = cell["plan"]
            if "error" in cell:
                rows.append({"model": name, "placers": " = ".join(cell["placers"]), "microbatches": m,
                             "schedule": schedule, "stages": plan.num_stages, "split_spec": plan.split_spec,
                             "error": cell["error"]})
                print(f"{name:6s} m={m} {schedule:5s} {rows[-1]['placers']:44s} split at {plan.split_spec}: not run: "
                      f"{cell['error']}", flush=True)
                continue
            measured = min(cell["rounds"])
            spread = (max(cell["rounds"]) - measured) / measured
            judged = judged_seconds(cell)
            peaks = np.min(np.array(cell["peaks"]), axis=0)
            simulated_peaks = [s.simulated_peak_memory for s in plan.stages]
            row = {"model": name, "placers": " = ".join(cell["placers"]), "microbatches": m, "schedule": schedule,
                   "stages": plan.num_stages, "split_spec": plan.split_spec,
                   "simulated_ms": plan.simulated_step_seconds * 1e3,
                   "measured_ms": measured * 1e3, "ratio": plan.simulated_step_seconds / measured,
                   "spread": spread, "rounds_ms": [t * 1e3 for t in cell["rounds"]],
                   "uncertainty": uncertainty(cell["rounds"]), "resolved": resolved(cell),
                   "judged_ratio": judged / measured,
                   "simulated_peak_mib": [p / 2**20 for p in simulated_peaks],
                   "measured_peak_mib": [p / 2**20 for p in peaks],
                   "memory_ratio": [s / p for s, p in zip(simulated_peaks, peaks)]}
            for column in COLUMNS:
                if column in cell:
                    row[f"{column}_ms"] = cell[column] * 1e3
                    row[f"{column}_ratio"] = cell[column] / measured
            rows.append(row)
            model_rows.append(row)
            print(f"{name:6s} m={m} {schedule:5s} {row['placers']:44s} stages {row['stages']}  simulated "
                  f"{row['simulated_ms']:8.2f} ms  measured {row['measured_ms']:8.2f} ms  ratio {row['ratio']:.2f}  "
                  f"spread {spread:.0%}  memory ratio {', '.join(f'{r:.2f}' for r in row['memory_ratio'])}"
                  + "".join(f"  {COLUMNS[column]} {row[f'{column}_ms']:8.2f} ms ratio {row[f'{column}_ratio']:.2f}"
                            for column in COLUMNS if f"{column}_ms" in row), flush=True)
        if not model_rows:
            continue
        summary.append(ranking(name, model_rows))
        print(ranking_line(summary[-1]), flush=True)
        write_json(args.json, cluster, rows, summary)
    print_summary(rows, summary)


def run_round(cells: list[dict], model: torch.nn.Module, inputs: tuple, kwargs: dict, steps: int) -> None:
    """Run every cell's plan once (``steps`` steps), adding the round's step and peaks to the cell; a plan the
    runtime refuses is recorded as the cell's error."""
    for cell in cells:
        if "error" in cell:
            continue
        began = time.perf_counter()
        try:
            run = run_pipeline(model, inputs, cell["plan"], steps=steps, example_kwargs=kwargs)
        except (RuntimeError, ValueError) as error:  # a plan the runtime cannot run: a finding, reported
            cell["error"] = str(error).splitlines()[0]
            continue
        cell["rounds"].append(float(np.median(run.steps[1:])))
        cell["peaks"].append(run.peak_memory.tolist())
        cell["wall"] = time.perf_counter() - began


def judged_seconds(cell: dict) -> float:
    """The prediction a cell judges: the two-point column's where there is one, else the calibrated column's, else
    the simulator's."""
    return cell.get("two_point", cell.get("calibrated", cell["plan"].simulated_step_seconds))


def resolved(cell: dict) -> bool:
    """Whether the cell's measurement resolves its error: its :func:`uncertainty` is below
    ``|judged / measured - 1|`` (else the error is within what the rounds can tell apart from 0)."""
    if len(cell["rounds"]) < 2:
        return False
    return uncertainty(cell["rounds"]) < abs(judged_seconds(cell) / min(cell["rounds"]) - 1)


def ranking(name: str, model_rows: list[dict]) -> dict:
    """Per model: Spearman's rho of the simulated and measured steps, and whether the plan the simulator ranks best
    is measured fastest or within the measured spread of the fastest; with the calibrated column too when the rows
    have one."""
    measured = [r["measured_ms"] for r in model_rows]
    best_real = int(np.argmin(measured))
    out: dict[str, Any] = {"model": name, "measured_best": plan_name(model_rows[best_real])}
    for column, prefix in (("simulated_ms", ""), *((f"{c}_ms", f"{c}_") for c in COLUMNS)):
        if column not in model_rows[0]:
            continue
        sims = [r[column] for r in model_rows]
        best_sim = int(np.argmin(sims))
        within = measured[best_sim] <= measured[best_real] * (1 + model_rows[best_real]["spread"]
                                                              + model_rows[best_sim]["spread"])
        out.update({f"{prefix}spearman": spearman(sims, measured), f"{prefix}same_best": best_sim == best_real,
                    f"{prefix}best_within_spread": bool(within),
                    f"{prefix}simulated_best": plan_name(model_rows[best_sim])})
    return out


def plan_name(row: dict) -> str:
    """A row's placers, micro-batches and schedule."""
    return f"{row['placers']} m={row['microbatches']} {row['schedule']}"


def ranking_line(s: dict) -> str:
    """The printed line of :func:`ranking`."""
    line = (f"{s['model']:6s} spearman {s['spearman']:.2f}; best simulated {s['simulated_best']}, fastest measured "
            f"{s['measured_best']} (the simulated best {'is' if s['best_within_spread'] else 'is not'} within the "
            "measured spread of the fastest)")
    for column, label in COLUMNS.items():
        if f"{column}_spearman" not in s:
            continue
        verdict = ("measured fastest" if s[f"{column}_same_best"] else
                   "within the spread" if s[f"{column}_best_within_spread"] else "not within the spread")
        line += (f"; {label}: spearman {s[f'{column}_spearman']:.2f}, best {s[f'{column}_simulated_best']} "
                 f"({verdict})")
    return line


def print_summary(rows: list[dict], summary: list[dict]) -> None:
    """The table's summary lines: errors, cells within 20%, spreads, memory, rankings (and the calibrated column's)."""
    ran = [r for r in rows if "error" not in r]
    errors = [abs(r["ratio"] - 1) for r in ran]
    memory = [abs(x - 1) for r in ran for x in r["memory_ratio"]]
    print(f"mean |simulated/measured - 1| {np.mean(errors):.1%}; cells within 20%: "
          f"{sum(e <= 0.2 for e in errors)} / {len(ran)} ({len(rows) - len(ran)} plans not run); median spread "
          f"of the measured rounds {np.median([r['spread'] for r in ran]):.1%}; stage peaks within 20%: "
          f"{sum(e <= 0.2 for e in memory)} / {len(memory)}; models whose simulated best is measured fastest or "
          f"within its spread: {sum(s['best_within_spread'] for s in summary)} / {len(summary)}", flush=True)
    if ran and "resolved" in ran[0]:
        unresolved = [r for r in ran if not r["resolved"]]
        print(f"cells whose error the two fastest of their rounds resolve: {len(ran) - len(unresolved)} / {len(ran)} "
              f"(rounds per cell: {min(len(r['rounds_ms']) for r in ran)}-{max(len(r['rounds_ms']) for r in ran)}); "
              + (f"the other {len(unresolved)} err by at most "
                 f"{max(abs(r['judged_ratio'] - 1) + r['uncertainty'] for r in unresolved):.1%} (error plus "
                 "uncertainty)" if unresolved else "every error is resolved"), flush=True)
    for column, label in COLUMNS.items():
        if not ran or f"{column}_ratio" not in ran[0]:
            continue
        errors = [abs(r[f"{column}_ratio"] - 1) for r in ran]
        print(f"{label}: mean |simulated/measured - 1| {np.mean(errors):.1%}, worst {max(errors):.1%}; cells within "
              f"20%: {sum(e <= 0.2 for e in errors)} / {len(ran)}; models whose {label} best is measured fastest: "
              f"{sum(s[f'{column}_same_best'] for s in summary)}, or within its spread: "
              f"{sum(s[f'{column}_best_within_spread'] for s in summary)} / {len(summary)}", flush=True)


def summary_of(path: str) -> None:
    """Print the rankings and the summary of a rows file this script wrote (``--summary-of``)."""
    rows = json.loads(Path(path).read_text())["rows"]
    ran = [r for r in rows if "error" not in r]
    summary = [ranking(name, [r for r in ran if r["model"] == name]) for name in dict.fromkeys(r["model"] for r in ran)]
    for s in summary:
        print(ranking_line(s))
    print_summary(rows, summary)


def describe(overheads: RuntimeOverheads) -> str:
    """One line of the overheads, in microseconds."""
    return (f"{overheads.call_seconds * 1e6:.1f} us per op call and micro-batch, {overheads.step_seconds * 1e6:.0f} us "
            f"a step, {overheads.tensor_seconds * 1e6:.0f} us per tensor crossing stages and micro-batch, "
            f"{overheads.message_seconds * 1e6:.0f} us per message")


def write_json(path: str | None, cluster: Any, rows: list[dict], summary: list[dict]) -> None:
    """The rows so far (written after each model: a stopped run keeps what it measured)."""
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        with open(path, "w") as f:
            json.dump({"machine": machine_line(), "command": " ".join(sys.argv),
                       "link": {"latency_s": float(cluster.latency[0, 1]),
                                "bandwidth_Bps": float(cluster.bandwidth[0, 1])},
                       "rows": rows, "summary": summary}, f, indent=1)


if __name__ == "__main__":
    main()
