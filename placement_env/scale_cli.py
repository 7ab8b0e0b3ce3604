"""``python -m placement_env plan --shape ...``: a plan at scale (tensor x pipeline x data, ZeRO, recomputation,
sequence parallelism) of a model given by its shape, with its export for Megatron-LM, torchtitan, DeepSpeed or a
3-D DeviceMesh. The ``plan`` command of a traced graph (``--graph``) shares its options; the ones only a plan at
scale has are refused there by name.

    python -m placement_env plan --shape config.json --devices 64 --per-node 8 --device-kind a100-nvlink \\
        --batch 512
    python -m placement_env plan --shape '{"layers": 30, "hidden": 3072, "heads": 32}' --devices 64 \\
        --device-kind a100-nvlink --batch 512 --tensor 2 --stages 1 --replicas 32 --micro-batch-size 8 \\
        --recompute full --zero 0 --export megatron
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path

from placement_env.json_files import write_text_atomically
from placement_env.parallelism import Parallelism
from placement_env.plan.scale.exports import deepspeed_config, device_mesh, megatron_arguments, torchtitan_toml
from placement_env.plan.scale.gpu_model import GIB, GpuCluster
from placement_env.plan.scale.model_shape import TransformerShape, shape_from_config
from placement_env.plan.scale.planner import ScalePlan, search_scale_plan
from placement_env.plan.scale.step import ORDERS

SCALE_EXPORTS = ("plan", "megatron", "torchtitan", "deepspeed", "device-mesh")
SCALE_PLAN_FORMAT = "device-placement-scale-plan"
SCALE_ONLY = ("tensor", "zero", "micro_batch_size", "sequence_parallel", "order", "flash_attention", "overlap",
              "sequence")


def add_scale_args(parser: argparse.ArgumentParser, count: Callable[[str], int]) -> None:
    """The options of a plan at scale, beside the ``plan`` command's own."""
    parser.add_argument("--shape", metavar="JSON", help="plan a model given by its shape: a transformers config.json, "
                                                        "a JSON file of TransformerShape's fields, or that JSON inline")
    parser.add_argument("--sequence", type=count, help="with --shape: tokens a sequence (default: the config's)")
    parser.add_argument("--tensor", type=count, help="with --shape: fix the tensor-parallel ranks t")
    parser.add_argument("--zero", type=int, choices=(0, 1, 2, 3), help="with --shape: fix the ZeRO stage")
    parser.add_argument("--micro-batch-size", type=count, help="with --shape: fix the sequences a micro-batch")
    parser.add_argument("--sequence-parallel", choices=("on", "off"), help="with --shape: fix sequence parallelism")
    parser.add_argument("--order", choices=ORDERS, help="with --shape: fix the rank order")
    parser.add_argument("--flash-attention", action="store_true", help="with --shape: the attention core is fused")
    parser.add_argument("--overlap", action="store_true",
                        help="with --shape: the data-parallel reduction overlaps compute (--overlap-grad-reduce)")


def refuse_scale_only(args: argparse.Namespace) -> None:
    """``ValueError`` naming an option of plans at scale given to the plan of a traced graph."""
    for name in SCALE_ONLY:
        if getattr(args, name, None) not in (None, False):
            raise ValueError(f"--{name.replace('_', '-')} needs --shape: tensor parallelism, ZeRO and the rest are "
                             "planned from a model's shape, not from a traced graph")
    if args.recompute in ("none", "selective", "full"):
        raise ValueError(f"--recompute {args.recompute} needs --shape (a traced graph's plan takes on or off)")


def read_shape(text: str, sequence: int | None) -> TransformerShape:
    """The shape of ``--shape``: a path to a JSON file or the JSON itself; ``ValueError`` naming what is wrong."""
    path = Path(text)
    try:
        raw = json.loads(path.read_text() if not text.lstrip().startswith("{") else text)
    except OSError as error:
        raise ValueError(f"--shape {text}: cannot read it ({error.strerror or error})") from None
    except ValueError as error:
        raise ValueError(f"--shape {text}: not JSON ({error})") from None
    if not isinstance(raw, dict):
        raise ValueError(f"--shape {text}: a JSON object is needed, got {type(raw).__name__}")
    return shape_from_config(raw, sequence=sequence, name=raw.get("name") or (path.stem if path.suffix else None))


def scale_plan_command(args: argparse.Namespace) -> int:
    """``plan --shape``: the plan, a summary, and ``--out`` (the plan or an export)."""
    if args.split is not None or args.layout is not None:
        raise ValueError("--split and --layout are decisions of a traced graph's plan; a plan at scale splits its "
                         "layers evenly and takes --order")
    if args.cluster is not None or args.memory_gib is not None:
        raise ValueError("a plan at scale takes --devices, --per-node and --device-kind (a100-nvlink, h100-nvlink)")
    shape = read_shape(args.shape, args.sequence)
    cluster = GpuCluster.from_device_kind(args.device_kind, args.devices or 8, args.per_node)
    if args.batch is None:
        raise ValueError("--batch (sequences a step) is needed with --shape")
    recompute = {"on": "full", "off": "none"}.get(args.recompute, args.recompute)
    plan = search_scale_plan(shape, cluster, args.batch, tensor=args.tensor, pipeline=args.stages,
                             data=args.replicas, micro_batch=args.micro_batch_size, microbatches=args.microbatches,
                             schedule=args.schedule, virtual_stages=args.virtual_stages, recompute=recompute,
                             zero=args.zero, order=args.order, flash_attention=args.flash_attention,
                             overlap=args.overlap,
                             sequence_parallel=None if args.sequence_parallel is None
                             else args.sequence_parallel == "on")
    exported = export_scale_plan(plan, args.export)
    print(shape.describe())
    print(f"cluster      {cluster.describe()}, batch {args.batch} sequences")
    print(f"plan         {plan.parallelism.describe()}, micro-batch {plan.micro_batch}, ranks {plan.order}")
    step = plan.step
    print(f"step         {step.seconds:.3f} s simulated (lower bound {plan.lower_bound:.3f} s, {plan.gap:.2f}x; "
          f"MFU {100 * step.mfu(cluster, plan.parallelism.devices):.1f}%)")
    print(f"of which     bubble {step.bubble:.3f} s, tensor-parallel collectives {step.tensor_parallel:.3f} s, "
          f"data-parallel {step.data_parallel:.3f} s, update {step.optimizer:.3f} s")
    print(f"memory       {float(step.peak_memory.max()) / GIB:.1f} GiB at most a GPU, of {step.memory / GIB:.0f}")
    print(f"planned in   {plan.seconds:.2f} s ({plan.configurations} configurations simulated)")
    if args.out:
        text = exported if isinstance(exported, str) else json.dumps(exported, indent=1) + "\n"
        write_text_atomically(args.out, text)
    return 0


def export_scale_plan(plan: ScalePlan, kind: str) -> dict | str:
    """The plan as ``kind`` (:data:`SCALE_EXPORTS`): a JSON object, or torchtitan's TOML text."""
    if kind == "megatron":
        return megatron_arguments(plan)
    if kind == "torchtitan":
        return torchtitan_toml(plan)
    if kind == "deepspeed":
        return deepspeed_config(plan)
    if kind == "device-mesh":
        return device_mesh(plan)
    p = plan.parallelism
    return {"format": SCALE_PLAN_FORMAT, "version": 1,
            "shape": {k: v for k, v in vars(plan.shape).items()}, "gpus": plan.cluster.gpus,
            "gpu": plan.cluster.gpu.name, "per_node": plan.cluster.per_node, "global_batch": plan.global_batch,
            "parallelism": {k: v for k, v in vars(p).items()}, "micro_batch": plan.micro_batch, "order": plan.order,
            "simulated_step_seconds": plan.step.seconds,
            "simulated_peak_memory": [float(x) for x in plan.step.peak_memory]}


def scale_plan_parallelism(data: dict, source: str) -> Parallelism:
    """The :class:`~placement_env.parallelism.Parallelism` of a plan file of ``plan --shape --export plan``;
    ``ValueError`` naming the file and what is wrong."""
    fields = data.get("parallelism")
    if data.get("version") != 1 or not isinstance(fields, dict):
        raise ValueError(f"{source}: a plan at scale of version 1 with a 'parallelism' object is needed")
    try:
        return Parallelism(**fields)
    except (TypeError, ValueError) as error:
        raise ValueError(f"{source}: {error}") from None


__all__ = ["SCALE_EXPORTS", "SCALE_PLAN_FORMAT", "add_scale_args", "export_scale_plan", "read_shape",
           "refuse_scale_only", "scale_plan_command", "scale_plan_parallelism"]
