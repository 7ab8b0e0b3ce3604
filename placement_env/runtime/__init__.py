"""Placements that leave the simulator: run for real, or exported to the runtimes people use.

* :func:`~placement_env.runtime.placed_program.placed_module`: the model as a ``torch.fx.GraphModule`` running
  every op on its device, copying tensors where the simulator transfers them (loads torch on first use), and
  :func:`~placement_env.runtime.placed_program.write_back`, its trained parameters back into the model;
* :func:`~placement_env.runtime.device_map.to_device_map`: Hugging Face accelerate's ``device_map``;
* :func:`~placement_env.plan.split_points.to_split_points`: pipeline stages for
  ``torch.distributed.pipelining`` and DeepSpeed;
* :func:`~placement_env.plan.pipeline_plan.plan_from_placement`: a contiguous placement as the
  :class:`~placement_env.plan.pipeline_plan.PipelinePlan` a runtime launches, and
  :func:`~placement_env.runtime.pipeline_runner.run_pipeline`, its training steps with
  ``torch.distributed.pipelining`` (local workers, CUDA devices or torchrun);
* :func:`~placement_env.runtime.measured_step.measure_step`: real training steps of a placement, on CUDA
  devices or on local worker processes (one CPU thread each, tensors sent between them);
* :func:`~placement_env.runtime.local_cluster.local_cluster`: the cluster those workers form, measured.

They read the module names :func:`~placement_env.importers.pytorch.from_torch` records (node field ``module``).
"""

from typing import TYPE_CHECKING

from placement_env.lazy_names import lazy_attributes
from placement_env.plan.pipeline_plan import PipelinePlan, plan_from_placement
from placement_env.plan.split_points import SplitPoints, to_split_points
from placement_env.runtime.device_map import to_device_map
from placement_env.runtime.local_cluster import local_cluster

if TYPE_CHECKING:
    from placement_env.runtime.measured_step import MeasuredStep, measure_step
    from placement_env.runtime.pipeline_runner import PipelineRun, run_pipeline
    from placement_env.runtime.placed_program import placed_module, write_back
else:  # torch loads when placed_module, measure_step or run_pipeline is first used
    __getattr__ = lazy_attributes("placement_env.runtime", {"placed_module": "placement_env.runtime.placed_program",
                                                            "write_back": "placement_env.runtime.placed_program",
                                                            "measure_step": "placement_env.runtime.measured_step",
                                                            "MeasuredStep": "placement_env.runtime.measured_step",
                                                            "run_pipeline": "placement_env.runtime.pipeline_runner",
                                                            "PipelineRun": "placement_env.runtime.pipeline_runner"},
                                  globals())

__all__ = ["MeasuredStep", "PipelinePlan", "PipelineRun", "SplitPoints", "local_cluster", "measure_step",
           "plan_from_placement", "placed_module", "run_pipeline", "to_device_map", "to_split_points", "write_back"]
