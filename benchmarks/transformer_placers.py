"""The transformer tables of RESULTS.md: every placer on the zoo's transformers, one step and pipelined.

    python benchmarks/transformer_placers.py --out experiments/transformers.md  # resumes from experiments/transformers/

Three tables:

* **one node**: each transformer of the zoo (``gpt2``, ``gpt2-medium``, ``bert-base``, ``bert-large``,
  ``llama-1b``, ``vit-b16``; bf16 training graphs costed for an A100) on one NVSwitch node of 8 A100s
  (``Cluster.preset("a100-nvlink", 8)``);
* **two nodes**: the same on 2 nodes of 8 joined by InfiniBand (``Cluster.preset("a100-nvlink", 16,
  per_node=8)``);
* **memory-bound**: models that one device cannot hold with Adam (the simulator's peak with everything on one
  device over a device's memory in the "one device needs" column) on 4 or 8 A100s cut to 16 GiB or 8 GiB.

Each model is judged by the plain step (one batch, forward then backward), by the pipelined step of 8
micro-batches under 1F1B, and (the first two tables) by that pipelined step with every placer in contiguous mode
(pipeline stages in program order, what a pipeline runtime runs: ``--contiguous``). A cell is the simulated
step in milliseconds, the best of its row in bold; the memory-bound table adds the largest peak over its
device's memory. Every placer of ``python -m baselines`` runs, the searches with ``--budget-seconds`` each
(default 10 s), DeepSpeed's and accelerate's partitions as their runtimes make them (not repaired for memory:
"OOM" when they run out). Each row is cached as JSON under ``--cache`` (default ``experiments/transformers/``),
so an interrupted run resumes; ``--fresh`` recomputes.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from baselines.compare import compare_placers  # noqa: E402
from baselines.placers import (  # noqa: E402
    CONTIGUOUS_RUNTIME_DEFAULTS,
    RUNTIME_DEFAULTS,
    placers_with_budget,
)
from placement_env import Cluster, ComputationGraph, load_graph, simulate  # noqa: E402
from placement_env.json_files import write_text_atomically  # noqa: E402
from placement_env.sim.pipeline import PLAIN_STEP, Step  # noqa: E402

MODELS = ("gpt2", "gpt2-medium", "bert-base", "bert-large", "llama-1b", "vit-b16")
PIPELINED = Step(8, "1f1b")
# (model, devices, GiB per device): one device cannot hold the plain step of any (nor, for llama-1b, the pipelined)
MEMORY_BOUND = (("llama-1b", 4, 16.0), ("llama-1b", 8, 16.0), ("gpt2-medium", 4, 8.0), ("bert-large", 4, 8.0))
STEPS = ((PLAIN_STEP, False, "one step"), (PIPELINED, False, "m = 8, 1F1B"),
         (PIPELINED, True, "m = 8, 1F1B, contiguous"))


def clusters() -> dict[str, Cluster]:
    return {"one node": Cluster.preset("a100-nvlink", 8),
            "two nodes": Cluster.preset("a100-nvlink", 16, per_node=8)}


def single_device_peak(graph: ComputationGraph, step: Step) -> float:
    """Bytes: the simulated peak of ``step`` with everything on one A100."""
    one = Cluster.preset("a100-nvlink", 1)
    return float(simulate(graph, np.zeros(graph.num_nodes, dtype=np.int64), one, microbatches=step.microbatches,
                          schedule=step.schedule).peak_memory[0])


def run_row(graph: ComputationGraph, cluster: Cluster, step: Step, contiguous: bool, budget: float) -> dict:
    """Every placer on one cell: ``{"placers": [...], "rows": [ComparisonRow.to_dict()...], "seconds": ...}``."""
    placers = {**placers_with_budget(budget, contiguous),
               **(CONTIGUOUS_RUNTIME_DEFAULTS if contiguous else RUNTIME_DEFAULTS)}
    began = time.perf_counter()
    rows = compare_placers(graph, cluster, placers, seed=0, step=step)
    return {"graph": graph.name, "cluster": cluster.name, "microbatches": step.microbatches,
            "schedule": step.schedule, "contiguous": contiguous, "budget_seconds": budget,
            "seconds": time.perf_counter() - began, "rows": [r.to_dict() for r in rows]}


def cached_row(cache: Path, key: str, fresh: bool, graph: ComputationGraph, cluster: Cluster, step: Step,
               contiguous: bool, budget: float) -> dict:
    """:func:`run_row`, from ``cache/<key>.json`` when it is there, readable and made with these settings (graph,
    cluster, step, contiguity, budget), and not ``fresh``; else run and written there (a notice says why)."""
    path = cache / f"{key}.json"
    wanted = {"graph": graph.name, "cluster": cluster.name, "microbatches": step.microbatches,
              "schedule": step.schedule, "contiguous": contiguous, "budget_seconds": budget}
    if path.exists() and not fresh:
        try:
            row = json.loads(path.read_text())
        except ValueError:
            print(f"notice: {path} is not a whole row (a run stopped while writing it?): run again", file=sys.stderr)
        else:
            if isinstance(row, dict) and all(row.get(k) == v for k, v in wanted.items()):
                return row
            made = {k: row.get(k) for k in wanted if isinstance(row, dict) and row.get(k) != wanted[k]}
            print(f"notice: {path} was made with {made}: run again with {({k: wanted[k] for k in made})}",
                  file=sys.stderr)
    row = run_row(graph, cluster, step, contiguous, budget)
    write_text_atomically(path, json.dumps(row, indent=1))
    return row


def cell(row: dict, best: float, memory: bool) -> str:
    if row.get("error"):
        return "infeasible"
    ms = row["makespan"] * 1e3
    bold = not row["oom"] and row["makespan"] <= best * (1 + 1e-9)  # the best within memory
    text = f"**{ms:.2f}**" if bold else f"{ms:.2f}"
    if memory:
        text += f" ({row['max_memory_ratio']:.2f})"
    return text + (" OOM" if row["oom"] else "")


def markdown(rows: list[tuple[str, dict]], memory: bool, needs: dict[str, float] | None = None) -> list[str]:
    placers = [r["placer"] for r in rows[0][1]["rows"]]
    extra = "one device needs | " if needs is not None else ""
    lines = [f"| cell | {extra}" + " | ".join(placers) + " | best / single |",
             "|---" * (len(placers) + 2 + (needs is not None)) + "|"]
    for label, result in rows:
        ok = [r for r in result["rows"] if not r.get("error") and not r["oom"]]
        best = min(r["makespan"] for r in ok) if ok else float("inf")
        single = next((r for r in ok if r["placer"] == "single"), None)
        gain = f"{best / single['makespan']:.3f}" if single else "single infeasible"
        need = f"{needs[label]:.2f} x a device | " if needs is not None else ""
        lines.append(f"| {label} | {need}" + " | ".join(cell(r, best, memory) for r in result["rows"])
                     + f" | {gain} |")
    return lines


def best_of(result: dict, placers: tuple[str, ...] | None = None) -> tuple[float, str]:
    """The smallest makespan within memory of a row (of ``placers`` only, if given) and its placer."""
    ok = [r for r in result["rows"] if not r.get("error") and not r["oom"]
          and (placers is None or r["placer"] in placers)]
    if not ok:
        return float("inf"), "none"
    r = min(ok, key=lambda r: r["makespan"])
    return float(r["makespan"]), str(r["placer"])


def figures(title: str, rows: list[tuple[str, dict]]) -> list[str]:
    """The figures RESULTS.md's prose quotes, per model of one cluster: best one step over single, the best one
    step over the best contiguous pipelined step, the best contiguous over the best unconstrained pipelined step,
    DeepSpeed's better partition and ``split`` against the best contiguous one."""
    by = dict(rows)
    lines = [f"figures, {title}:"]
    for model in dict.fromkeys(label.split(",")[0] for label, _ in rows):
        one, plain, contiguous = (by[f"{model}, {label}"] for _, _, label in STEPS)
        best_one, one_placer = best_of(one)
        single = best_of(one, ("single",))[0]
        best_plain = best_of(plain)[0]
        best_contiguous, contiguous_placer = best_of(contiguous)
        deepspeed = best_of(contiguous, ("deepspeed-uniform", "deepspeed-parameters"))[0]
        split = best_of(contiguous, ("split",))[0]
        over_single = f"{best_one / single:.3f}" if np.isfinite(single) else "- (single infeasible)"
        lines.append(f"  {model}: best one step / single {over_single} ({one_placer}, "
                     f"{best_one * 1e3:.2f} ms); best one step / best contiguous pipelined "
                     f"{best_one / best_contiguous:.2f} x; best contiguous / best unconstrained pipelined "
                     f"{best_contiguous / best_plain:.3f} ({contiguous_placer}); DeepSpeed's better / best contiguous "
                     f"{deepspeed / best_contiguous:.3f}; split / best contiguous {split / best_contiguous:.3f}")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--out", type=Path, help="write the tables (Markdown) here")
    parser.add_argument("--cache", type=Path, default=ROOT / "experiments" / "transformers")
    parser.add_argument("--budget-seconds", type=float, default=10.0, help="each search placer's budget (10 s)")
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    parser.add_argument("--fresh", action="store_true", help="recompute the cached rows")
    args = parser.parse_args()
    args.cache.mkdir(parents=True, exist_ok=True)
    text = [f"Simulated step (ms) of each placer, the best of a row in bold; searches {args.budget_seconds:g} s "
            "each; `python benchmarks/transformer_placers.py`.", ""]
    summary: list[str] = []
    for title, cluster in clusters().items():
        rows = []
        for model in args.models:
            graph = load_graph(model)
            for step, contiguous, label in STEPS:
                key = f"{model}_{cluster.name}_m{step.microbatches}{'_contiguous' if contiguous else ''}"
                result = cached_row(args.cache, key, args.fresh, graph, cluster, step, contiguous,
                                    args.budget_seconds)
                rows.append((f"{model}, {label}", result))
                print(f"{title}: {model}, {label}: {result['seconds']:.0f} s", flush=True)
        text += [f"### {title}: {cluster.name}", "", *markdown(rows, memory=False), ""]
        summary += figures(title, rows)
    rows, needs = [], {}
    for model, devices, gib in MEMORY_BOUND:
        if model not in args.models:
            continue
        graph = load_graph(model)
        cluster = Cluster.preset("a100-nvlink", devices).with_memory(gib * 2**30)
        for step, contiguous, label in STEPS[:2]:
            key = f"{model}_{devices}x{gib:g}GiB_m{step.microbatches}"
            result = cached_row(args.cache, key, args.fresh, graph, cluster, step, contiguous, args.budget_seconds)
            full = f"{model} on {devices} x {gib:g} GiB, {label}"
            needs[full] = single_device_peak(graph, step) / (gib * 2**30)
            rows.append((full, result))
            print(f"memory-bound: {full}: {result['seconds']:.0f} s", flush=True)
    if rows:
        text += ["### memory-bound: A100s with less memory", "",
                 "Each cell: simulated step (ms) and, in brackets, the largest device peak over its memory.", "",
                 *markdown(rows, memory=True, needs=needs), ""]
    text += ["```", *summary, "```", ""]
    if args.out:
        write_text_atomically(args.out, "\n".join(text))
        print(f"wrote {args.out}")
    else:
        print("\n".join(text))
    return 0


if __name__ == "__main__":
    sys.exit(main())
