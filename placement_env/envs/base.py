"""What the two placement environments share: argument checks, the task, the current placement, rendering."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from placement_env.checks import checked_finite
from placement_env.envs.task import DEFAULT_MAX_UNITS, REWARD_SCALES, Episode, PlacementTask
from placement_env.sim.pipeline import DEFAULT_SCHEDULE


class PlacementEnvBase(gym.Env):
    """Base of ``DevicePlacementEnv`` and ``DevicePlacementSequentialEnv`` (not registered itself)."""

    metadata = {"render_modes": ["rgb_array", "ansi"], "render_fps": 4}

    def _setup(self, graph: Any, num_devices: int | None, cluster: Any, max_nodes: int | None,
               max_devices: int | None, reward_scale: str, memory_penalty: float, initial_placement: str,
               param_factor: float, device_kind: str, flatten: bool, render_mode: str | None,
               max_edges: int | None = None, max_units: int | None = DEFAULT_MAX_UNITS, microbatches: int = 1,
               schedule: str = DEFAULT_SCHEDULE) -> None:
        if reward_scale not in REWARD_SCALES:
            raise ValueError(f"reward_scale must be one of {REWARD_SCALES}, got {reward_scale!r}")
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be one of {self.metadata['render_modes']}, got {render_mode!r}")
        self.task = PlacementTask(graph, num_devices, cluster, max_nodes, max_devices, param_factor, device_kind,
                                  flatten, max_edges, max_units, microbatches, schedule)
        self.reward_scale = reward_scale
        self.memory_penalty = checked_finite("memory_penalty", memory_penalty, 0.0)
        self.initial_placement = initial_placement
        self.render_mode = render_mode
        self.observation_space = self.task.observation_space()
        self.task.initial_units(0, initial_placement, np.random.default_rng(0))  # reject a bad name now
        self.episode: Episode | None = None
        self._ended = False  # the episode has terminated or been truncated: step() needs a reset() first

    def _new_episode(self) -> Episode:
        gi = self.task.draw_graph(self.np_random)
        units = self.task.initial_units(gi, self.initial_placement, self.np_random)
        self.episode = Episode(self.task, gi, units, self.reward_scale, self.memory_penalty)
        self._ended = False
        return self.episode

    def _require_episode(self) -> Episode:
        if self.episode is None:
            raise RuntimeError("call reset() before step(), render() or current_placement()")
        return self.episode

    def _stepping(self) -> Episode:
        """The episode a step acts on; ``RuntimeError`` before ``reset()`` or after the episode ended (terminated
        or truncated), as Gymnasium's ``PassiveEnvChecker`` expects."""
        if self._ended:
            raise RuntimeError("the episode has ended (terminated or truncated): call reset() before step()")
        return self._require_episode()

    def _ends(self, terminated: bool, truncated: bool) -> None:
        self._ended = terminated or truncated

    def current_placement(self) -> np.ndarray:
        """The current placement, a device per node of the episode's graph."""
        return self._require_episode().node_placement()

    def _progress(self) -> str:
        raise NotImplementedError

    def render(self):
        if self.render_mode is None or self.episode is None:
            return None
        header = f"{self.task.graphs[self.episode.gi].name}, {self._progress()}"
        return self.episode.render(self.render_mode, header)
