"""Plans at the scale people train: a transformer as its shape, a GPU model fitted on published runs, and the step
of a tensor x pipeline x data plan (``docs/spec/simulator.md`` section 3c).

* :class:`~placement_env.plan.scale.model_shape.TransformerShape`, :func:`~.model_shape.shape_from_config`;
* :class:`~placement_env.plan.scale.gpu_model.GpuModel`, :data:`~.gpu_model.GPUS`, :class:`~.gpu_model.GpuCluster`;
* :func:`~placement_env.plan.scale.collectives.collective_seconds`;
* :func:`~placement_env.plan.scale.step.simulate_scale`, :class:`~.step.ScaleStep`.
"""

from placement_env.plan.scale.collectives import collective_seconds
from placement_env.plan.scale.gpu_model import GPUS, Efficiencies, GpuCluster, GpuModel
from placement_env.plan.scale.model_shape import TransformerShape, shape_from_config
from placement_env.plan.scale.step import ScaleStep, activation_bytes, model_state_bytes, simulate_scale

__all__ = ["GPUS", "Efficiencies", "GpuCluster", "GpuModel", "ScaleStep", "TransformerShape", "activation_bytes",
           "collective_seconds", "model_state_bytes", "shape_from_config", "simulate_scale"]
