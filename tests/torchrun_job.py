"""What tests/test_pipeline_runner.py runs under torchrun: one SGD step of a plan, each rank writing its result.

    python -m torch.distributed.run --nproc_per_node 2 tests/torchrun_job.py PLAN OUT_PREFIX
"""

import functools
import json
import os
import sys

import torch

from placement_env.plan.pipeline_plan import PipelinePlan
from placement_env.runtime.pipeline_runner import run_pipeline
from tests.test_pipeline_runner import lm_loss, tiny_gpt2_batch

if __name__ == "__main__":
    plan, out = PipelinePlan.from_json(sys.argv[1]), sys.argv[2]
    model, inputs, kwargs = tiny_gpt2_batch()
    run = run_pipeline(model, inputs, plan, example_kwargs=kwargs, targets=torch.roll(kwargs["input_ids"], -1, 1),
                       loss_fn=lm_loss, optimizer=functools.partial(torch.optim.SGD, lr=0.1), steps=1)
    with open(f"{out}.{os.environ['RANK']}.json", "w") as f:
        json.dump({"backend": run.backend, "losses": list(run.losses),
                   "parameters": {k: v.tolist() for k, v in run.parameters.items()}}, f)
