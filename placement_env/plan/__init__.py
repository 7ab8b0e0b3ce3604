"""Plans: a placement as a runtime runs it.

* :func:`~placement_env.plan.split_points.to_split_points`: a contiguous placement's pipeline stages, as
  ``torch.distributed.pipelining`` and DeepSpeed name them;
* :class:`~placement_env.plan.pipeline_plan.PipelinePlan` and
  :func:`~placement_env.plan.pipeline_plan.pipeline_plan`: the pipeline a runtime launches (stages with their
  devices and pipeline ranks, micro-batches, schedule, tied parameter groups) with its simulated step and peak
  memory, as one object and one JSON file;
* :class:`~placement_env.plan.module_tree.PlacedModules`: the modules a placement puts where.

The runner of a plan is :func:`placement_env.runtime.pipeline_runner.run_pipeline`.
"""

from placement_env.plan.module_tree import PlacedModules
from placement_env.plan.pipeline_plan import PipelinePlan, PlanStage, TiedGroup, pipeline_plan
from placement_env.plan.split_points import SplitPoints, to_split_points

__all__ = ["PipelinePlan", "PlacedModules", "PlanStage", "SplitPoints", "TiedGroup", "pipeline_plan",
           "to_split_points"]
