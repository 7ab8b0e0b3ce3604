"""The Gymnasium ids of the environments, registered when :mod:`placement_env` is imported.

Entry points are strings, so registering imports nothing: ``gymnasium.make`` loads the class on first use.
"""

from __future__ import annotations

import gymnasium as gym

ENVIRONMENTS = {
    "DevicePlacement-v0": "placement_env.envs.device_placement:DevicePlacementEnv",
    "DevicePlacementSequential-v0": "placement_env.envs.sequential:DevicePlacementSequentialEnv",
    "ParallelPlan-v0": "placement_env.envs.parallel_plan:ParallelPlanEnv",
}


def register_environments() -> None:
    """Register every id of :data:`ENVIRONMENTS` not yet registered (importing twice is harmless)."""
    for env_id, entry_point in ENVIRONMENTS.items():
        if env_id not in gym.registry:
            gym.register(id=env_id, entry_point=entry_point)
