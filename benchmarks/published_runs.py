"""The GPU model against published measured runs (issue 64's development set): predicted vs measured iteration
time, per GPU peak memory, the rank correlation within each vTrain model; ``--fit`` fits the GPU model's
efficiencies on the development set and prints them.

    python benchmarks/published_runs.py [--data ../shared/data/published] [--fit] [--out experiments/published_runs]

The development set is the A100 runs (vTrain's 41, Narayanan et al.'s 10); the H100 weak-scaling table is printed
as a check of the order of magnitude and never fitted (its README: micro-batch, recomputation and sequence
parallelism not given). A decision a source leaves open (Narayanan's micro-batch and virtual stages) is chosen
as the fastest within memory (``simulate_published``). ``--fit`` minimises the mean |simulated / measured - 1| over
the development set (Nelder-Mead on the logarithms of the efficiencies, from the shipped values) and prints the
:class:`Efficiencies` to paste into ``placement_env/plan/scale/gpu_model.py``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import asdict, fields, replace
from pathlib import Path

import numpy as np
from scipy.optimize import minimize
from scipy.stats import spearmanr

from placement_env.plan.scale import gpu_model
from placement_env.plan.scale.gpu_model import FITTED, GIB, Efficiencies
from placement_env.plan.scale.planner import search_scale_plan
from placement_env.plan.scale.published import PublishedRun, read_published, simulate_published

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "published"
DEVELOPMENT = ("vtrain_a100_3.6b_18.4b.json", "narayanan2021_table1.json")
CHECK = ("megatron_h100_weak_scaling.json",)
RESTARTS = 4


def with_efficiencies(runs: list[PublishedRun], efficiencies: Efficiencies) -> list[PublishedRun]:
    """The runs on GPUs of these efficiencies."""
    out = []
    for run in runs:
        gpu = run.cluster.gpu.with_efficiencies(efficiencies)
        out.append(replace(run, cluster=replace(run.cluster, gpu=gpu)))
    return out


def errors(runs: list[PublishedRun]) -> np.ndarray:
    return np.array([simulate_published(run)[1].seconds / run.measured_seconds - 1 for run in runs])


def fit(runs: list[PublishedRun], start: Efficiencies) -> Efficiencies:
    names = [f.name for f in fields(Efficiencies)]
    x0 = np.log([getattr(start, n) for n in names])
    bounded = {"matmul": 1.0, "memory": 1.0, "nvlink": 1.0, "network": 1.0}
    x0 = np.minimum(x0, np.log([bounded.get(n, np.inf) for n in names]) - 1e-3)  # inside the bounds

    def make(x: np.ndarray) -> Efficiencies:
        values = {n: float(np.exp(v)) for n, v in zip(names, x)}
        for n, top in bounded.items():
            values[n] = min(values[n], top)
        return Efficiencies(**values)

    def loss(x: np.ndarray) -> float:
        return float(np.mean(np.abs(errors(with_efficiencies(runs, make(x))))))

    x = x0
    for _ in range(RESTARTS):  # Nelder-Mead restarted from its own end: a fresh simplex escapes a collapsed one
        x = minimize(loss, x, method="Nelder-Mead", options={"maxfev": 2000, "xatol": 1e-4, "fatol": 1e-6}).x
        print(f"fit: mean |error| {100 * loss(x):.2f}%", file=sys.stderr)
    return make(x)


def table(runs: list[PublishedRun]) -> list[dict]:
    rows = []
    for run in runs:
        parallelism, step = simulate_published(run)
        rows.append({"source": run.source, "run": run.name, "chosen": parallelism.describe(),
                     "measured_s": run.measured_seconds, "simulated_s": step.seconds,
                     "ratio": step.seconds / run.measured_seconds, "peak_gib": float(step.peak_memory.max()) / GIB,
                     "fits": step.fits, "compute_s": step.compute, "bubble_s": step.bubble,
                     "tensor_parallel_s": step.tensor_parallel, "data_parallel_s": step.data_parallel,
                     "optimizer_s": step.optimizer, "model": run.shape.name, "tensor": run.tensor,
                     "pipeline": run.pipeline, "data": run.data, "micro_batch": run.micro_batch})
    return rows


def summary(rows: list[dict], label: str) -> str:
    e = np.abs(np.array([r["ratio"] for r in rows]) - 1)
    fits = sum(r["fits"] for r in rows)
    return (f"{label}: {len(rows)} runs, mean |sim/meas - 1| {100 * e.mean():.1f}%, worst {100 * e.max():.1f}%, "
            f"within 10% {int((e <= 0.10).sum())}, within 20% {int((e <= 0.20).sum())}; {fits} of {len(rows)} fit "
            "in memory")


def ranking(rows: list[dict]) -> list[str]:
    """Per vTrain model: the rank correlation of simulated and measured times, and the measured time of the
    configuration the simulator ranks first against the best measured."""
    lines = []
    for model in sorted({r["model"] for r in rows if r["source"].startswith("vtrain")}):
        mine = [r for r in rows if r["model"] == model and r["source"].startswith("vtrain")]
        rho = spearmanr([r["simulated_s"] for r in mine], [r["measured_s"] for r in mine]).statistic
        first = min(mine, key=lambda r: r["simulated_s"])
        best = min(r["measured_s"] for r in mine)
        lines.append(f"{model}: {len(mine)} configurations, Spearman {rho:.3f}; the simulator's first "
                     f"({first['run']}) measured {first['measured_s']:.3f} s, the best measured {best:.3f} s "
                     f"(+{100 * (first['measured_s'] / best - 1):.1f}%)")
    return lines


def planned(runs: list[PublishedRun]) -> list[dict]:
    """For each published model, cluster and batch: the planner's own plan beside the best published configuration,
    both simulated the same way."""
    out = []
    seen: dict[tuple, list[PublishedRun]] = {}
    for run in runs:
        seen.setdefault((run.source, run.shape, run.cluster.gpus, run.global_batch), []).append(run)
    for (source, shape, gpus, batch), group in seen.items():
        published = min((simulate_published(run) for run in group), key=lambda pair: pair[1].seconds)
        plan = search_scale_plan(shape, group[0].cluster, batch, flash_attention=group[0].flash_attention,
                                 overlap=group[0].overlap)
        out.append({"source": source, "model": shape.name, "gpus": gpus, "batch": batch,
                    "published": published[0].describe(), "published_s": published[1].seconds,
                    "planner": f"{plan.parallelism.describe()}, micro-batch {plan.micro_batch}, {plan.order}",
                    "planner_s": plan.step.seconds, "planner_seconds": plan.seconds,
                    "configurations": plan.configurations})
    return out


def planned_markdown(rows: list[dict]) -> str:
    out = ["| model | GPUs | batch | best published configuration (simulated) | s | the planner's plan | s | "
           "planner / published | planned in s |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r['model']} | {r['gpus']} | {r['batch']} | {r['published']} | {r['published_s']:.3f} | "
                   f"{r['planner']} | {r['planner_s']:.3f} | {r['planner_s'] / r['published_s']:.3f} | "
                   f"{r['planner_seconds']:.2f} |")
    return "\n".join(out)


def markdown(rows: list[dict]) -> str:
    out = ["| source | run | chosen where open | measured s | simulated s | sim/meas | peak GiB |",
           "|---|---|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r['source'].split('_')[0]} | {r['run']} | {r['chosen']} | {r['measured_s']:.3f} | "
                   f"{r['simulated_s']:.3f} | {r['ratio']:.3f} | {r['peak_gib']:.1f}{'' if r['fits'] else ' (OOM)'} |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--fit", action="store_true", help="fit the efficiencies on the development set")
    parser.add_argument("--out", type=Path, default=ROOT / "experiments" / "published_runs")
    args = parser.parse_args(argv)
    if not args.data.is_dir():
        print(f"error: no published runs at {args.data}", file=sys.stderr)
        return 2
    development = [run for name in DEVELOPMENT for run in read_published(args.data / name)]
    check = [run for name in CHECK for run in read_published(args.data / name)]
    efficiencies = FITTED
    if args.fit:
        efficiencies = fit(development, FITTED)
        print("fitted:", repr(efficiencies))
        development = with_efficiencies(development, efficiencies)
        check = with_efficiencies(check, efficiencies)
    rows, checked = table(development), table(check)
    lines = [summary([r for r in rows if r["source"] == name], name) for name in DEVELOPMENT]
    lines += [summary(rows, "development set"), summary(checked, "check (H100, not fitted)")]
    lines += ranking(rows)
    print("\n".join(lines))
    print(markdown(rows + checked))
    if not args.fit:
        plans = planned(development + check)
        print(planned_markdown(plans))
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "rows.json").write_text(json.dumps({"efficiencies": asdict(efficiencies),
                                                       "rows": rows + checked, "planned": plans}, indent=1))
        (args.out / "table.md").write_text("\n\n".join(["\n".join(lines), markdown(rows + checked)]) + "\n")
        (args.out / "planner.md").write_text(planned_markdown(plans) + "\n")
    return 0


if __name__ == "__main__":
    assert gpu_model.FITTED is FITTED and math.isfinite(FITTED.matmul)
    sys.exit(main())
