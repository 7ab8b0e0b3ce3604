"""Plans: a placement, or a searched configuration, as a runtime runs it.

The user's verbs (every name below is importable from ``placement_env.plan`` and from ``placement_env``):

* describe the step: :class:`~placement_env.parallelism.Parallelism` (tensor x pipeline x data ranks,
  micro-batches, schedule, virtual stages, recomputation, ZeRO stage; checked when made) and
  :data:`~placement_env.parallelism.SCHEDULES` (which schedule the simulator, the planner and the runner support);
* search for a plan: :func:`~placement_env.plan.planner.search_plan` (every decision open or fixed) and
  :func:`~placement_env.plan.planner.hand_plan` (every decision fixed), each a
  :class:`~placement_env.plan.planner.SearchedPlan`;
* a plan from a placement: :func:`~placement_env.plan.pipeline_plan.plan_from_placement` (a contiguous placement
  as the :class:`~placement_env.plan.pipeline_plan.PipelinePlan` a runtime launches: stages with their devices
  and ranks, micro-batches, schedule, tied parameter groups, simulated step and memory; one JSON file,
  ``PipelinePlan.to_json`` / ``PipelinePlan.from_json``);
* simulate a plan: :func:`~placement_env.plan.plan_step.simulate_plan` (``docs/spec/simulator.md`` section 3b);
* export a plan: :func:`~placement_env.plan.exports.megatron_arguments`,
  :func:`~placement_env.plan.exports.deepspeed_partition`, :func:`~placement_env.plan.exports.device_mesh`;
* the pieces: :func:`~placement_env.plan.split_points.to_split_points` (a contiguous placement's stages, as
  ``torch.distributed.pipelining`` and DeepSpeed name them), :class:`~placement_env.plan.module_tree.PlacedModules`,
  :func:`~placement_env.plan.layers.chunk_costs`, :func:`~placement_env.plan.schedules.rank_sequences`.

The runner of a plan, :func:`placement_env.runtime.pipeline_runner.run_pipeline`, sits in the layer above
(it loads torch): import it from ``placement_env`` or ``placement_env.runtime``.

``pipeline_plan``, ``plan_pipeline`` and ``PlannedPipeline`` are the names of 0.8 (deprecated, removed in 0.10).
"""

from typing import TYPE_CHECKING

from placement_env.deprecation import deprecated_names
from placement_env.parallelism import SCHEDULES, Parallelism, schedules_for
from placement_env.plan.exports import deepspeed_partition, device_mesh, megatron_arguments
from placement_env.plan.module_tree import PlacedModules
from placement_env.plan.pipeline_plan import PipelinePlan, PlanStage, TiedGroup, plan_from_placement
from placement_env.plan.pipeline_plan import pipeline_plan as _pipeline_plan
from placement_env.plan.plan_step import PlanLayout, PlanStep, simulate_layout, simulate_plan
from placement_env.plan.planner import SearchedPlan, hand_plan, search_plan
from placement_env.plan.planner import plan_pipeline as _plan_pipeline
from placement_env.plan.split_points import SplitPoints, to_split_points

pipeline_plan = _pipeline_plan  # the old function (warns when called), where the submodule's name would be
if not TYPE_CHECKING:
    __getattr__ = deprecated_names("placement_env.plan", {"plan_pipeline": (_plan_pipeline, "search_plan"),
                                                          "PlannedPipeline": (SearchedPlan, "SearchedPlan")},
                                   "0.10.0")

__all__ = [
    # describe the parallel step
    "SCHEDULES", "Parallelism", "schedules_for",
    # search for a plan
    "SearchedPlan", "hand_plan", "search_plan",
    # a plan from a placement, its file
    "PipelinePlan", "PlanStage", "TiedGroup", "plan_from_placement",
    # simulate a plan
    "PlanLayout", "PlanStep", "simulate_layout", "simulate_plan",
    # export a plan
    "deepspeed_partition", "device_mesh", "megatron_arguments",
    # the pieces
    "PlacedModules", "SplitPoints", "to_split_points",
]
