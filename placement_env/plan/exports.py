"""A plan as the runtimes take it: :func:`megatron_arguments`, :func:`deepspeed_partition`, :func:`device_mesh`.

* Megatron-LM (``--pipeline-model-parallel-layout``, its ``docs/api-guide/pipeline_parallel_layout.md``): the
  plan's S x v chunks in model order, split by ``|``, each a run of symbols: ``E`` the embedding, ``t`` a
  transformer layer, ``L`` the loss (with the final norm and the output layer); ``t*3`` repeats. Megatron
  gives chunk ``c`` to pipeline rank ``c mod S``, virtual stage ``c div S``, as the plan does. The layers
  before the first block must all be in the first chunk and those after the last block in the last: Megatron
  has no other place for them.
* DeepSpeed (``PipelineModule(layers, num_stages)``): the plan's layers and the boundaries ``parts`` (stage s
  runs ``layers[parts[s]:parts[s + 1]]``), the custom partition a ``_partition_layers`` override sets; one chunk
  a rank (DeepSpeed does not interleave).
* ``torch.distributed``'s ``DeviceMesh`` of (dp, pp): ``mesh[r][s]`` the rank of stage s in replica r.
"""

from __future__ import annotations

from typing import Any

from placement_env.graph.model import ComputationGraph
from placement_env.parallelism import data_pipeline_mesh

from .module_tree import block_layers
from .pipeline_plan import PipelinePlan


def megatron_layout(plan: PipelinePlan, graph: ComputationGraph) -> str:
    """The plan's ``--pipeline-model-parallel-layout`` string (module docstring); ``ValueError`` naming the chunk
    when the embedding or the loss layers are not all in the first or last chunk."""
    blocks = set(block_layers(graph))
    order = plan.layers
    first = next((i for i, layer in enumerate(order) if layer in blocks), len(order))
    last = max((i for i, layer in enumerate(order) if layer in blocks), default=-1)
    chunks, at = [], 0
    for c, stage in enumerate(plan.stages):
        symbols: list[str] = []
        for i in range(at, at + len(stage.layers)):
            if i < first:
                if c != 0:
                    raise ValueError(f"Megatron-LM keeps the embedding in the first stage; layer {order[i]!r} is in "
                                     f"stage {c}")
                symbol = "E"
            elif i > last:
                if c != len(plan.stages) - 1:
                    raise ValueError(f"Megatron-LM keeps the final layers with the loss in the last stage; layer "
                                     f"{order[i]!r} is in stage {c}")
                symbol = "L"
            else:
                symbol = "t"
            if not symbols or symbols[-1] != symbol or symbol == "t":
                symbols.append(symbol)
        at += len(stage.layers)
        chunks.append(_runs(symbols))
    if "E" not in chunks[0]:
        chunks[0] = "E" + chunks[0]  # a model whose first block takes the inputs itself
    if not chunks[-1].endswith("L"):
        chunks[-1] += "L"
    return "|".join(chunks)


def _runs(symbols: list[str]) -> str:
    """``["E", "t", "t", "t"]`` as ``"Et*3"``."""
    out, i = [], 0
    while i < len(symbols):
        j = i
        while j < len(symbols) and symbols[j] == symbols[i]:
            j += 1
        out.append(symbols[i] + (f"*{j - i}" if j - i > 1 else ""))
        i = j
    return "".join(out)


def megatron_arguments(plan: PipelinePlan, graph: ComputationGraph) -> dict[str, Any]:
    """Megatron-LM's command-line arguments for the plan: pipeline size, layout, micro-batch and global batch
    (the data-parallel size is what ``torchrun`` gives beyond them), recomputation when every rank recomputes;
    ``notes`` says what Megatron cannot take as it is."""
    batch = plan.batch
    arguments: dict[str, Any] = {"--pipeline-model-parallel-size": plan.num_stages,
                                 "--pipeline-model-parallel-layout": megatron_layout(plan, graph)}
    if batch is not None:
        arguments["--micro-batch-size"] = batch // (plan.replicas * plan.microbatches)
        arguments["--global-batch-size"] = batch
    notes = [f"data-parallel size {plan.replicas}: run on {plan.num_stages * plan.replicas} GPUs (times the "
             "tensor-parallel size)"]
    recomputing = [stage.recompute for stage in plan.stages[:plan.num_stages]]
    if all(recomputing):
        arguments.update({"--recompute-granularity": "full", "--recompute-method": "uniform",
                          "--recompute-num-layers": 1})
    elif any(recomputing):
        notes.append(f"ranks {[s for s, on in enumerate(recomputing) if on]} recompute: Megatron-LM recomputes on "
                     "every rank or none (--recompute-num-layers sets how many layers)")
    if plan.schedule == "zb-h1":
        notes.append("zb-h1 is not Megatron-LM's schedule: run it with torch.distributed.pipelining's "
                     "ScheduleInterleavedZeroBubble, or take Megatron's 1F1B (the same memory)")
    if plan.schedule == "gpipe":
        notes.append("Megatron-LM runs 1F1B, not GPipe: the same step with less memory")
    return {"arguments": arguments, "notes": notes}


def deepspeed_partition(plan: PipelinePlan) -> dict[str, Any]:
    """``{"num_stages", "layers", "parts", "data_parallel_size"}`` for DeepSpeed's ``PipelineModule``;
    ``ValueError`` for a plan with virtual stages."""
    if plan.virtual_stages != 1:
        raise ValueError(f"DeepSpeed's pipeline runs one chunk a rank; this plan has {plan.virtual_stages}")
    return {"num_stages": plan.num_stages, "layers": plan.layers, "parts": plan.parts,
            "data_parallel_size": plan.replicas}


def device_mesh(plan: PipelinePlan) -> dict[str, Any]:
    """``{"mesh_dim_names": ["dp", "pp"], "mesh": [[rank of stage s in replica r for s] for r]}``: the argument
    of ``DeviceMesh(device_type, mesh, mesh_dim_names=...)``, its ranks the plan's devices."""
    return {"mesh_dim_names": ["dp", "pp"],
            "mesh": [list(row) for row in data_pipeline_mesh(plan.devices)]}


__all__ = ["deepspeed_partition", "device_mesh", "megatron_arguments", "megatron_layout"]
