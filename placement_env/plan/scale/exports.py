"""A plan at scale as the runtimes take it: :func:`megatron_arguments`, :func:`torchtitan_toml`,
:func:`deepspeed_config`, :func:`device_mesh`.

Each export says the whole plan in its runtime's own words, or refuses (``ValueError`` naming the decision) what
that runtime cannot run: Megatron-LM has no ZeRO 2 (its distributed optimizer is ZeRO 1, ``--use-torch-fsdp2``
ZeRO 3), no GPipe and no zero-bubble schedule; torchtitan shards data-parallel ranks with FSDP2 (ZeRO 2 without
resharding after the forward, ZeRO 3 with it) or replicates them (ZeRO 0), and its tensor parallelism is always
sequence parallel; DeepSpeed's pipeline engine runs 1F1B with ZeRO 0 or 1 only.
``scripts/check_plan_exports.py`` reads each back with the runtime's own parser.
"""

from __future__ import annotations

from typing import Any

from .planner import ScalePlan

MEGATRON_RECOMPUTE: dict[str, dict[str, Any]] = {"none": {}, "selective": {"--recompute-granularity": "selective"},
                      "full": {"--recompute-granularity": "full", "--recompute-method": "uniform",
                               "--recompute-num-layers": 1}}
TORCHTITAN_SCHEDULES = {"1f1b": "1F1B", "gpipe": "GPipe", "interleaved-1f1b": "Interleaved1F1B",
                        "zb-h1": "InterleavedZeroBubble"}


def _refuse(runtime: str, what: str) -> ValueError:
    return ValueError(f"{runtime} cannot run this plan: {what}")


def megatron_arguments(plan: ScalePlan) -> dict[str, Any]:
    """``{"arguments": {flag: value}, "command_line": "..."}`` for Megatron-LM's ``pretrain_gpt.py`` (a value of
    True is a flag without a value); the model's shape and the plan's decisions. Raises ``ValueError`` for what
    Megatron-LM cannot run (module docstring) or a rank order it does not take from its command line."""
    p, shape = plan.parallelism, plan.shape
    if p.schedule not in ("1f1b", "interleaved-1f1b"):
        raise _refuse("Megatron-LM", f"schedule {p.schedule} (it runs 1f1b and interleaved-1f1b)")
    if p.zero == 2:
        raise _refuse("Megatron-LM", "ZeRO 2 (--use-distributed-optimizer is ZeRO 1, --use-torch-fsdp2 ZeRO 3)")
    if plan.order != "tp-dp-pp":
        raise _refuse("Megatron-LM", f"rank order {plan.order} from its command line (its default is tp-dp-pp)")
    args: dict[str, Any] = {
        "--num-layers": shape.layers, "--hidden-size": shape.hidden, "--num-attention-heads": shape.heads,
        "--ffn-hidden-size": shape.inner, "--seq-length": shape.sequence,
        "--max-position-embeddings": max(shape.positions or 0, shape.sequence),
        "--tensor-model-parallel-size": p.tensor, "--pipeline-model-parallel-size": p.pipeline,
        "--micro-batch-size": plan.micro_batch, "--global-batch-size": plan.global_batch, "--bf16": True,
    }
    if p.virtual_stages > 1:
        if shape.layers % p.chunks:
            raise _refuse("Megatron-LM", f"{shape.layers} layers in {p.chunks} equal chunks")
        args["--num-layers-per-virtual-pipeline-stage"] = shape.layers // p.chunks
    if p.sequence_parallel:
        args["--sequence-parallel"] = True
    if p.zero == 1:
        args["--use-distributed-optimizer"] = True
    if p.zero == 3:
        args["--use-torch-fsdp2"] = True
    if plan.overlap:
        args["--overlap-grad-reduce"] = True
        if p.zero == 1:
            args["--overlap-param-gather"] = True
    args.update(MEGATRON_RECOMPUTE[p.recompute])
    if shape.kv != shape.heads:
        args.update({"--group-query-attention": True, "--num-query-groups": shape.kv})
    if shape.gated:
        args["--swiglu"] = True
    if not shape.biases:
        args.update({"--disable-bias-linear": True, "--normalization": "RMSNorm"})
    if not shape.learned_positions:
        args["--position-embedding-type"] = "rope"
    if not shape.tied_embeddings:
        args["--untie-embeddings-and-output-weights"] = True
    if shape.experts > 1:
        args.update({"--num-experts": shape.experts, "--moe-router-topk": shape.experts_per_token})
    if plan.flash_attention:
        args["--use-flash-attn"] = True
    words = [word for flag, value in args.items() for word in ([flag] if value is True else [flag, str(value)])]
    return {"arguments": args, "command_line": " ".join(words)}


def torchtitan_toml(plan: ScalePlan) -> str:
    """torchtitan's job config (``[training]``, ``[parallelism]``, ``[activation_checkpoint]``) as TOML text.
    Raises ``ValueError`` for what torchtitan cannot run (module docstring)."""
    p = plan.parallelism
    if p.zero == 1:
        raise _refuse("torchtitan", "ZeRO 1 (FSDP2 shards gradients too: ZeRO 2 or 3; or plain replicas, ZeRO 0)")
    if p.tensor > 1 and not p.sequence_parallel:
        raise _refuse("torchtitan", "tensor parallelism without sequence parallelism (its plan always splits the "
                                    "norms along the sequence)")
    if p.pipeline > 1 and plan.shape.layers % p.chunks:
        raise _refuse("torchtitan", f"{plan.shape.layers} layers in {p.chunks} equal pipeline stages")
    local = plan.global_batch // p.data if p.pipeline > 1 else plan.micro_batch
    sharded = p.zero >= 2
    lines = ["[training]", f"local_batch_size = {local}", f"global_batch_size = {plan.global_batch}",
             f"seq_len = {plan.shape.sequence}", "",
             "[parallelism]", f"data_parallel_replicate_degree = {1 if sharded else p.data}",
             f"data_parallel_shard_degree = {p.data if sharded else 1}",
             f'fsdp_reshard_after_forward = "{"always" if p.zero == 3 else "never"}"',
             f"tensor_parallel_degree = {p.tensor}", f"pipeline_parallel_degree = {p.pipeline}"]
    if p.pipeline > 1:
        lines += [f'pipeline_parallel_schedule = "{TORCHTITAN_SCHEDULES[p.schedule]}"',
                  f"pipeline_parallel_microbatch_size = {plan.micro_batch}",
                  f"pipeline_parallel_layers_per_stage = {plan.shape.layers // p.chunks}"]
    lines += ["", "[activation_checkpoint]", f'mode = "{p.recompute}"']
    if p.recompute == "selective":
        lines.append('selective_ac_option = "op"')
    return "\n".join(lines) + "\n"


def deepspeed_config(plan: ScalePlan) -> dict[str, Any]:
    """DeepSpeed's config (the JSON ``deepspeed.initialize`` takes) and, beside it, the ``PipelineModule``
    arguments: ``{"config": {...}, "pipeline_module": {...}, "world_size": N}``. Raises ``ValueError`` for what
    DeepSpeed cannot run (module docstring)."""
    p = plan.parallelism
    if p.pipeline > 1 and (p.zero >= 2 or p.schedule != "1f1b"):
        raise _refuse("DeepSpeed", f"a pipeline with ZeRO {p.zero} under {p.schedule} (its pipeline engine runs "
                                   "1f1b with ZeRO 0 or 1)")
    config: dict[str, Any] = {
        "train_batch_size": plan.global_batch, "train_micro_batch_size_per_gpu": plan.micro_batch,
        "gradient_accumulation_steps": p.microbatches, "bf16": {"enabled": True},
        "zero_optimization": {"stage": p.zero, "overlap_comm": plan.overlap,
                              "reduce_scatter": True, "contiguous_gradients": True},
    }
    if p.tensor > 1:
        config["tensor_parallel"] = {"autotp_size": p.tensor}
    if p.recompute != "none":
        config["activation_checkpointing"] = {"partition_activations": p.sequence_parallel,
                                              "contiguous_memory_optimization": False}
    module = {"num_stages": p.pipeline, "partition_method": "uniform",
              "activation_checkpoint_interval": 1 if p.recompute == "full" else 0}
    return {"config": config, "pipeline_module": module, "world_size": p.devices}


def device_mesh(plan: ScalePlan) -> dict[str, Any]:
    """``{"mesh_dim_names": [...], "mesh": nested lists of ranks}``: the arguments of
    ``DeviceMesh(device_type, mesh, mesh_dim_names=...)`` (or ``init_device_mesh``'s shape and names), its
    dimensions slowest first: ``("pp", "dp", "tp")`` for rank order ``tp-dp-pp``, ``("dp", "pp", "tp")`` for
    ``tp-pp-dp``; rank ``r`` is GPU ``r`` of the cluster."""
    p = plan.parallelism
    names = ["pp", "dp", "tp"] if plan.order == "tp-dp-pp" else ["dp", "pp", "tp"]
    sizes = {"pp": p.pipeline, "dp": p.data, "tp": p.tensor}
    outer, middle = sizes[names[0]], sizes[names[1]]
    mesh = [[[(i * middle + j) * p.tensor + k for k in range(p.tensor)] for j in range(middle)]
            for i in range(outer)]
    return {"mesh_dim_names": names, "mesh": mesh}


__all__ = ["deepspeed_config", "device_mesh", "megatron_arguments", "torchtitan_toml"]
