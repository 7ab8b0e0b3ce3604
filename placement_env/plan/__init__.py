"""Plans: a placement as a runtime runs it.

* :func:`~placement_env.plan.split_points.to_split_points`: a contiguous placement's pipeline stages, as
  ``torch.distributed.pipelining`` and DeepSpeed name them;
* :class:`~placement_env.plan.pipeline_plan.PipelinePlan` and
  :func:`~placement_env.plan.pipeline_plan.pipeline_plan`: the pipeline a runtime launches (stages with their
  devices and pipeline ranks, micro-batches, schedule, tied parameter groups) with its simulated step and peak
  memory, as one object and one JSON file;
* :class:`~placement_env.plan.module_tree.PlacedModules`: the modules a placement puts where;
* :func:`~placement_env.plan.layers.chunk_costs`: a graph cut into chunks of layers, each summed into what it
  costs; :func:`~placement_env.plan.schedules.rank_sequences`: each pipeline rank's tasks under a schedule
  (``gpipe``, ``1f1b``, ``interleaved-1f1b``, ``zb-h1``);
* :func:`~placement_env.plan.plan_step.simulate_plan`: the step of a plan of S stages x D replicas
  (``docs/spec/simulator.md`` section 3b).

The runner of a plan is :func:`placement_env.runtime.pipeline_runner.run_pipeline`.
"""

from placement_env.plan.module_tree import PlacedModules
from placement_env.plan.pipeline_plan import PipelinePlan, PlanStage, TiedGroup, pipeline_plan
from placement_env.plan.plan_step import PlanLayout, PlanStep, simulate_layout, simulate_plan
from placement_env.plan.split_points import SplitPoints, to_split_points

__all__ = ["PipelinePlan", "PlacedModules", "PlanLayout", "PlanStage", "PlanStep", "SplitPoints", "TiedGroup",
           "pipeline_plan", "simulate_layout", "simulate_plan", "to_split_points"]
