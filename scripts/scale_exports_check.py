"""The exports of plans at scale read back by the runtimes' own code (run by ``scripts/check_plan_exports.py``,
whose docstring has the installs): Megatron-core's ``TransformerConfig`` (its ``__post_init__`` checks tensor,
pipeline and virtual-pipeline sizes, sequence parallelism and recomputation) and its micro-batch calculator;
torchtitan's ``ConfigManager`` reading the TOML file; DeepSpeed's ``DeepSpeedConfig`` with the plan's data-parallel
size (it checks ``train_batch_size = micro-batch x accumulation x data``) and its ZeRO stage."""

from __future__ import annotations

import json
import os
import tempfile
from typing import Any

from placement_env.plan.scale import GPUS, GpuCluster, TransformerShape
from placement_env.plan.scale.exports import deepspeed_config, device_mesh, megatron_arguments, torchtitan_toml
from placement_env.plan.scale.planner import ScalePlan, search_scale_plan

GPT = TransformerShape(layers=32, hidden=4096, heads=32, name="GPT 6.7B")
LLAMA = TransformerShape(layers=32, hidden=4096, heads=32, kv_heads=8, ffn=14336, vocabulary=128256, sequence=8192,
                         gated=True, biases=False, learned_positions=False, name="llama-3-8b")


def plans() -> list[ScalePlan]:
    """Plans each runtime runs: Megatron's (ZeRO 1, 1F1B / interleaved), torchtitan's (FSDP ZeRO 2 / 3, sequence
    parallel), DeepSpeed's (ZeRO 1 pipelines, ZeRO 3 without)."""
    cluster = GpuCluster(GPUS["a100-80gb"], 64, 8, 25e9)
    fixed: list[dict[str, Any]] = [
        dict(tensor=2, pipeline=4, zero=1, schedule="interleaved-1f1b", virtual_stages=2, recompute="selective",
             sequence_parallel=True),
        dict(tensor=4, pipeline=2, zero=1, schedule="1f1b", recompute="full", sequence_parallel=True),
        dict(tensor=2, pipeline=1, zero=3, recompute="full", sequence_parallel=True),
        dict(tensor=1, pipeline=2, zero=2, schedule="1f1b", recompute="selective"),
        dict(tensor=1, pipeline=4, zero=1, schedule="1f1b", recompute="full")]
    return [search_scale_plan(shape, cluster, 512, order="tp-dp-pp", **f) for shape in (GPT, LLAMA) for f in fixed]


def megatron(plan: ScalePlan) -> str:
    import torch
    from megatron.core.num_microbatches_calculator import ConstantNumMicroBatchesCalculator
    from megatron.core.transformer.transformer_config import TransformerConfig

    args = megatron_arguments(plan)["arguments"]
    p = plan.parallelism
    vpp = args.get("--num-layers-per-virtual-pipeline-stage")
    config = TransformerConfig(
        num_layers=args["--num-layers"], hidden_size=args["--hidden-size"],
        num_attention_heads=args["--num-attention-heads"], ffn_hidden_size=args["--ffn-hidden-size"],
        num_query_groups=args.get("--num-query-groups"), gated_linear_unit=bool(args.get("--swiglu")),
        add_bias_linear=not args.get("--disable-bias-linear"), normalization=args.get("--normalization", "LayerNorm"),
        tensor_model_parallel_size=args["--tensor-model-parallel-size"],
        pipeline_model_parallel_size=args["--pipeline-model-parallel-size"],
        virtual_pipeline_model_parallel_size=None if vpp is None else args["--num-layers"] // (
            vpp * args["--pipeline-model-parallel-size"]),
        sequence_parallel=bool(args.get("--sequence-parallel")),
        recompute_granularity=args.get("--recompute-granularity"), recompute_method=args.get("--recompute-method"),
        recompute_num_layers=args.get("--recompute-num-layers"), bf16=True, params_dtype=torch.bfloat16,
        pipeline_dtype=torch.bfloat16)
    calculator = ConstantNumMicroBatchesCalculator(args["--global-batch-size"], args["--micro-batch-size"], p.data,
                                                   False, 0)
    same = (config.tensor_model_parallel_size, config.pipeline_model_parallel_size,
            config.virtual_pipeline_model_parallel_size or 1, calculator.get()) == (
        p.tensor, p.pipeline, p.virtual_stages, p.microbatches)
    assert same, (config, calculator.get())
    return f"Megatron-core TransformerConfig accepted it, {calculator.get()} micro-batches"


def torchtitan(plan: ScalePlan) -> str:
    from torchtitan.config import ConfigManager

    with tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False) as file:
        file.write(torchtitan_toml(plan))
    try:
        config = ConfigManager().parse_args(["--job.config_file", file.name])
    finally:
        os.unlink(file.name)
    p, got = plan.parallelism, config.parallelism
    dp = got.data_parallel_replicate_degree * got.data_parallel_shard_degree
    assert (got.tensor_parallel_degree, got.pipeline_parallel_degree, dp) == (p.tensor, p.pipeline, p.data)
    assert config.activation_checkpoint.mode == p.recompute
    assert config.training.global_batch_size == plan.global_batch
    return f"torchtitan read it: dp {dp}, reshard {got.fsdp_reshard_after_forward}, {got.pipeline_parallel_schedule}"


class _DataParallel:  # what DeepSpeedConfig asks of Megatron's mpu: the data-parallel size
    def __init__(self, size: int) -> None:
        self.size = size

    def get_data_parallel_world_size(self) -> int:
        return self.size


def deepspeed(plan: ScalePlan) -> str:
    import deepspeed.comm as dist
    from deepspeed.runtime.config import DeepSpeedConfig

    if not dist.is_initialized():  # one local process; the data-parallel size comes from the mpu below
        dist.init_distributed(dist_backend="gloo", auto_mpi_discovery=False, init_method="tcp://127.0.0.1:29531",
                              rank=0, world_size=1, verbose=False)
    exported = deepspeed_config(plan)
    config = DeepSpeedConfig(json.loads(json.dumps(exported["config"])), mpu=_DataParallel(plan.parallelism.data))
    assert config.zero_optimization_stage == plan.parallelism.zero
    assert config.gradient_accumulation_steps == plan.parallelism.microbatches
    return f"DeepSpeedConfig accepted it: ZeRO {config.zero_optimization_stage}, batch {config.train_batch_size}"


def check_scale_exports() -> int:
    failures = 0
    for plan in plans():
        mesh = device_mesh(plan)
        flat = [r for a in mesh["mesh"] for b in a for r in b]
        assert sorted(flat) == list(range(plan.parallelism.devices))
        for name, check in (("megatron", megatron), ("torchtitan", torchtitan), ("deepspeed", deepspeed)):
            try:
                said = check(plan)
            except ValueError as error:
                if "cannot run this plan" not in str(error):
                    raise
                said = f"refused: {error}"
            except Exception as error:  # noqa: BLE001 - a runtime's parser refusing the export is a failure
                failures += 1
                said = f"FAILED: {type(error).__name__}: {error}"
            print(f"{plan.shape.name}: {plan.parallelism.describe()}, micro-batch {plan.micro_batch} -> {name}: {said}")
    return failures
