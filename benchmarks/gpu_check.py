"""The GPU check of issue 65 point 5: plans at scale run on this machine's CUDA devices with ``run_parallel``
(mixed precision: bf16 autocast over fp32 states, as the simulator counts them), each measured step and per-GPU
peak of allocated memory beside the GPU model's (``simulate_scale``, ``docs/spec/simulator.md`` section 3c).

    python benchmarks/gpu_check.py --out experiments/gpu_check      # on a machine with CUDA devices
    python benchmarks/gpu_check.py --cpu --out /tmp/dry              # the same path on CPU workers, a tiny model

``scripts/gpu_check.sh`` runs it as one prepared call of the device tool. The model is a Llama of transformers
(8 layers, hidden 2048, 16 heads, FFN 5632, vocabulary 32000, sequences of 2048 tokens: 0.45B parameters), a global
batch of 8 sequences, AdamW; the plans are those that fit the GPUs found: on one GPU, the whole model with 1 and 4
micro-batches and with full and selective recomputation; with 2, 4 and 8 GPUs also tensor, pipeline, data (ZeRO 1
and FSDP2's ZeRO 3) and 2 x 2 x 2 plans. Each runs ``STEPS`` steps; the measured step is the median after
``WARMUP`` (the first allocates the optimizer's states). The simulated step is the GPU model's for the GPU found
(``GPUS``: A100, H100, H200), its efficiencies fitted on the A100 development set and nothing else; the simulated
peak leaves out ``GpuModel.reserved`` (the CUDA context and NCCL's buffers are not the allocator's bytes).

``--cpu`` runs a tiny Llama's one-rank plans on a CPU worker and simulates them as if on an H100: it checks the
script, and its ratios mean nothing. ``--host`` runs every plan of up to 8 ranks on local gloo workers (one thread
each, fp32) with a Llama sized for a CPU (``HOST_MODEL``: 4 layers, hidden 256, sequences of 128 tokens) and
simulates each on this machine's own figures, measured first (``placement_env.runtime.host_model``: the products'
curve, the memory bandwidth, the gloo link, the cores the ranks share): the 3D plans measured against their
simulated step on local workers (issue 65 point 4; ``docs/simulator.md``). ``--plans`` names the plans to run
(``PLANS``' keys). Results are written after each plan (``gpu_check.json``, ``gpu_check.md`` under ``--out``), so a
run cut short keeps what it measured; ``--budget-s`` stops starting plans once that many seconds have passed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch
from machine import machine_line  # benchmarks/ is on the path

from placement_env import Parallelism
from placement_env.json_files import write_text_atomically
from placement_env.plan.scale import GPUS, GpuCluster, shape_from_config, simulate_scale
from placement_env.runtime.losses import causal_lm_loss
from placement_env.runtime.parallel_runner import run_parallel

STEPS, WARMUP = 5, 2
GLOBAL_BATCH = 8
MODEL = {"num_hidden_layers": 8, "hidden_size": 2048, "num_attention_heads": 16, "num_key_value_heads": 16,
         "intermediate_size": 5632, "vocab_size": 32000, "max_position_embeddings": 2048}
HOST_MODEL = {"num_hidden_layers": 4, "hidden_size": 256, "num_attention_heads": 8, "num_key_value_heads": 8,
              "intermediate_size": 704, "vocab_size": 2048, "max_position_embeddings": 128}
HOST_RANKS = 8
TINY = {"num_hidden_layers": 4, "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 4,
        "intermediate_size": 128, "vocab_size": 128, "max_position_embeddings": 32}
PLANS: dict[str, dict] = {  # a short name (--plans) for each plan's fields
    "whole": {"microbatches": 1},
    "m4": {"microbatches": 4},
    "full": {"microbatches": 1, "recompute": "full"},
    "selective": {"microbatches": 1, "recompute": "selective"},
    "t2": {"tensor": 2, "microbatches": 1},
    "p2": {"pipeline": 2, "microbatches": 4},
    "d2-zero1": {"data": 2, "zero": 1, "microbatches": 1},
    "d2-zero3": {"data": 2, "zero": 3, "microbatches": 1},
    "t2p2": {"tensor": 2, "pipeline": 2, "microbatches": 4},
    "t2d2-sp": {"tensor": 2, "data": 2, "zero": 2, "sequence_parallel": True, "microbatches": 1},
    "2x2x2": {"tensor": 2, "pipeline": 2, "data": 2, "zero": 2, "microbatches": 2},
    "2x2x2-interleaved": {"tensor": 2, "pipeline": 2, "data": 2, "zero": 1, "microbatches": 2,
                          "schedule": "interleaved-1f1b", "virtual_stages": 2},
}


def gpu_name(device_name: str, total_bytes: int) -> str:
    """The key of :data:`GPUS` for a CUDA device's name and memory; ``ValueError`` naming a GPU it does not model."""
    name = device_name.upper()
    if "H200" in name:
        return "h200-141gb"
    if "H100" in name:
        return "h100-80gb"
    if "A100" in name:
        return "a100-80gb" if total_bytes > 60 * 2**30 else "a100-40gb"
    raise ValueError(f"the GPU model has no {device_name!r}; known: {', '.join(GPUS)}")


def llama(config: dict) -> torch.nn.Module:
    import transformers

    torch.manual_seed(0)
    made = transformers.LlamaConfig(**config, use_cache=False)
    model = transformers.LlamaForCausalLM(made).train()
    if model.config._attn_implementation != "sdpa":  # transformers' default: fused attention, as simulated
        raise ValueError(f"the Llama's attention is {model.config._attn_implementation!r}, not SDPA")
    return model


def adamw(parameters: list) -> torch.optim.Optimizer:
    return torch.optim.AdamW(parameters, lr=1e-4)


def markdown(header: list[str], rows: list[dict]) -> str:
    lines = [*header, "", "| plan | measured ms | simulated ms | sim/meas | model TFLOP/s a GPU | measured peak GiB "
             "| simulated peak GiB | sim/meas | note |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['plan']} | | {r['simulated_ms']:.1f} | | | | {r['simulated_peak_gib']:.2f} | | "
                         f"{r['error']} |")
            continue
        peak, ratio = r["measured_peak_gib"], r["memory_ratio"]
        lines.append(f"| {r['plan']} | {r['measured_ms']:.1f} | {r['simulated_ms']:.1f} | {r['time_ratio']:.3f} | "
                     f"{r['tflops_per_gpu']:.0f} | {'-' if peak is None else f'{peak:.2f}'} | "
                     f"{r['simulated_peak_gib']:.2f} | {'-' if ratio is None else f'{ratio:.3f}'} | |")
    done = [r for r in rows if "error" not in r]
    if done:
        time_error = statistics.mean(abs(r["time_ratio"] - 1) for r in done)
        peaks = [abs(r["memory_ratio"] - 1) for r in done if r["memory_ratio"] is not None]
        memory = f"{statistics.mean(peaks):.1%} (peak memory)" if peaks else "peak memory not measured (CPU)"
        lines += ["", f"{len(done)} plans measured: mean |simulated / measured - 1| {time_error:.1%} (step), {memory}"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="folder for gpu_check.json and gpu_check.md")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--cpu", action="store_true", help="a tiny model on CPU workers (checks the script only)")
    mode.add_argument("--host", action="store_true", help="a CPU-sized model on local workers, simulated on this "
                      "machine's measured figures")
    parser.add_argument("--budget-s", type=float, default=420.0, help="start no plan after this many seconds")
    parser.add_argument("--max-plans", type=int, default=len(PLANS), help="run at most this many plans")
    parser.add_argument("--plans", default=",".join(PLANS), help=f"the plans to run, of {', '.join(PLANS)}")
    args = parser.parse_args(argv)
    chosen = [name.strip() for name in args.plans.split(",") if name.strip()]
    unknown = [name for name in chosen if name not in PLANS]
    if unknown or not chosen:
        print(f"error: unknown plan {(unknown[0] if unknown else args.plans)!r}; known: {', '.join(PLANS)}",
              file=sys.stderr)
        return 2
    started = time.monotonic()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    precision, host = "bf16-mixed", None
    if args.host:
        from placement_env.runtime.host_model import PRODUCT_SIZES, fit_products, host_cluster, measure_host

        host = measure_host()
        config, sequence, devices, gpus, kind, precision = HOST_MODEL, 128, None, HOST_RANKS, "", "fp32"
        product_peak, d0 = fit_products(PRODUCT_SIZES, host.product_flops)
        header = [f"the plans on local gloo workers (one thread each, fp32), simulated on this host's figures: "
                  f"{machine_line().removeprefix('machine: ')}; products {product_peak / 1e9:.1f} "
                  f"GFLOP/s at large sizes, d0 {d0:.0f}; element-wise {host.memory_bandwidth / 1e9:.1f} GB/s; with "
                  f"every core busy, {host.busy_product_flops / 1e9:.1f} GFLOP/s and "
                  f"{host.busy_memory_bandwidth / 1e9:.1f} GB/s a worker; gloo "
                  f"link {host.link_latency * 1e6:.0f} us, {host.link_bandwidth / 1e9:.2f} GB/s"]
    elif args.cpu:
        config, sequence, devices, gpus, kind = TINY, 32, None, 1, "h100-80gb"
        header = ["GPU check, dry run on CPU workers (a tiny model simulated as if on an H100: the ratios mean "
                  "nothing)"]
    else:
        if not torch.cuda.is_available():
            print("error: no CUDA device (give --cpu for a dry run on CPU workers, --host for the host model)",
                  file=sys.stderr)
            return 2
        properties = torch.cuda.get_device_properties(0)
        try:
            kind = gpu_name(properties.name, properties.total_memory)
        except ValueError as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
        config, sequence, devices, gpus = MODEL, MODEL["max_position_embeddings"], "cuda", torch.cuda.device_count()
        header = [f"GPU check on {gpus} x {properties.name} ({properties.total_memory / 2**30:.1f} GiB), simulated "
                  f"as {kind}; torch {torch.__version__}, CUDA {torch.version.cuda}"]
    print(header[0], flush=True)
    model = llama(config)
    name = "Llama 0.45B" if config is MODEL else "tiny Llama" if config is TINY else "Llama 4 x 256"
    shape = shape_from_config(config, sequence=sequence, name=name)

    def cluster_of(ranks: int) -> GpuCluster:
        return host_cluster(host, ranks) if host is not None else GpuCluster(GPUS[kind], gpus, per_node=gpus)

    ids = torch.randint(0, config["vocab_size"], (GLOBAL_BATCH, sequence), generator=torch.Generator().manual_seed(1))
    rows: list[dict] = []
    plans = [Parallelism(**PLANS[name]) for name in chosen]
    for p in [p for p in plans if p.devices <= gpus][:args.max_plans]:
        cluster = cluster_of(p.devices)
        step = simulate_scale(shape, p, cluster, GLOBAL_BATCH, flash_attention=True, overlap=p.zero >= 2)
        row: dict[str, Any] = {"plan": p.describe(), "gpus": p.devices, "simulated_ms": step.seconds * 1e3,
               "simulated_peak_gib": (float(step.peak_memory.max()) - cluster.gpu.reserved) / 2**30}
        if time.monotonic() - started > args.budget_s:
            row["error"] = f"not run: past the budget of {args.budget_s:.0f} s"
        else:
            try:
                run = run_parallel(model, (), p, steps=STEPS, example_kwargs={"input_ids": ids}, targets=ids,
                                   loss_fn=causal_lm_loss, optimizer=adamw, devices=devices,
                                   precision=precision)
            except (RuntimeError, ValueError) as error:  # out of memory, a rank that died: recorded, the rest run
                row["error"] = str(error).splitlines()[0][:200]
            else:
                measured = statistics.median(run.steps[WARMUP:])
                peak = max(run.peak_bytes) if run.peak_bytes else None  # None on CPU: no allocator to read
                row.update(measured_ms=measured * 1e3, time_ratio=step.seconds / measured,
                           tflops_per_gpu=step.model_flops / measured / p.devices / 1e12,
                           measured_peak_gib=None if peak is None else peak / 2**30,
                           memory_ratio=None if peak is None else row["simulated_peak_gib"] * 2**30 / peak,
                           steps_ms=[s * 1e3 for s in run.steps], losses=run.losses)
        rows.append(row)
        print(json.dumps({k: v for k, v in row.items() if k not in ("steps_ms", "losses")}), flush=True)
        write_text_atomically(out / "gpu_check.json", json.dumps({"header": header, "rows": rows}, indent=1) + "\n")
        write_text_atomically(out / "gpu_check.md", markdown(header, rows))
    print(markdown(header, rows), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
