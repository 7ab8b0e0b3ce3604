"""The planners' exports read back by their consumers' own code: Megatron-LM's layout parser and DeepSpeed's
partition functions, on the zoo's transformers; and the exports of plans at scale by Megatron-core's configs and
micro-batch calculator, torchtitan's job config (TOML) and DeepSpeed's ``DeepSpeedConfig``.

    pip install --no-deps --target /tmp/megatron megatron-core==0.16.1
    pip install --no-deps --target /tmp/deepspeed deepspeed==0.19.8 hjson py-cpuinfo einops msgpack pydantic
    pip install --no-deps --target /tmp/torchtitan022 torchtitan==0.2.2
    pip install --target /tmp/tyro tyro
    pip install --no-deps --target /tmp/triton triton        # torchtitan's config imports its MoE kernels
    PYTHONPATH=/tmp/megatron:/tmp/deepspeed:/tmp/torchtitan022:/tmp/tyro:/tmp/triton \
        python scripts/check_plan_exports.py

(torchtitan 0.2.2 is its last release configured by TOML; 0.3.0 moved to Python config registries.)

Neither package is a dependency of this project (Megatron-LM and DeepSpeed train on GPUs; here only their
parsers run). For each model and plan: Megatron's ``PipelineParallelLayerLayout`` parses the layout string and
``validate_layer_layout`` accepts it with the model's number of transformer layers, and each (pipeline rank,
virtual stage) gets the plan's chunk's layers; DeepSpeed's ``partition_uniform`` and ``partition_balanced``
(what ``PipelineModule`` calls for ``partition_method="uniform"`` and ``"parameters"``) give the parts of the
plans whose split is DeepSpeed's rule, and ``PipelineModule`` imports.
"""

from __future__ import annotations

import sys

from scale_exports_check import check_scale_exports

from placement_env import Cluster, load_graph
from placement_env.plan.exports import deepspeed_partition, megatron_arguments
from placement_env.plan.module_tree import block_layers
from placement_env.plan.planner import search_plan

MODELS = ("gpt2", "bert-base", "llama-1b")


def main() -> int:
    from deepspeed.runtime.pipe.module import PipelineModule  # noqa: F401 - it imports: the partitioning is there
    from deepspeed.runtime.utils import partition_uniform
    from megatron.core.transformer.enums import LayerType
    from megatron.core.transformer.pipeline_parallel_layer_layout import PipelineParallelLayerLayout

    cluster = Cluster.preset("a100-nvlink", 16, per_node=8)
    failures = 0
    for name in MODELS:
        graph = load_graph(name)
        blocks = set(block_layers(graph))
        plans = [search_plan(graph, cluster, batch=512).plan,
                 search_plan(graph, cluster, stages=4, replicas=4, microbatches=16, schedule="1f1b",
                               split="uniform", batch=512).plan,
                 search_plan(graph, cluster, stages=4, replicas=4, microbatches=16, schedule="interleaved-1f1b",
                               virtual_stages=2, split="time", batch=512).plan]
        for plan in plans:
            layout = megatron_arguments(plan, graph)["arguments"]["--pipeline-model-parallel-layout"]
            parsed = PipelineParallelLayerLayout(layout, plan.num_stages)
            parsed.validate_layer_layout(num_layers=len(blocks), mtp_num_layers=None)
            got = [parsed.layout[c % plan.num_stages][c // plan.num_stages].count(LayerType.decoder)
                   for c in range(len(plan.stages))]
            want = [sum(layer in blocks for layer in stage.layers) for stage in plan.stages]
            ok = got == want
            line = (f"{name}: {plan.num_stages} stages x {plan.replicas} replicas, v={plan.virtual_stages}, "
                    f"{plan.schedule}: Megatron layout {layout!r} parsed and validated; decoder layers per chunk "
                    f"{got} {'==' if ok else '!='} the plan's {want}")
            if plan.virtual_stages == 1 and plan is plans[1]:
                parts = deepspeed_partition(plan)["parts"]
                # Megatron's uniform split over the blocks is DeepSpeed's partition_uniform over them
                first = next(i for i, layer in enumerate(plan.layers) if layer in blocks)
                uniform = [first + p for p in partition_uniform(len(blocks), plan.num_stages)]
                same = parts[1:-1] == uniform[1:-1]
                ok = ok and same
                line += (f"; DeepSpeed parts {parts}, partition_uniform over the blocks {uniform} "
                         f"({'same cuts' if same else 'other cuts'})")
            failures += not ok
            print(line)
    failures += check_scale_exports()
    print(f"{failures} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
