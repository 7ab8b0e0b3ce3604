"""``DevicePlacementSequential-v0``: Placeto's node-by-node placement MDP."""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces

from placement_env.checks import checked_count
from placement_env.cluster import DEFAULT_KIND
from placement_env.envs.base import PlacementEnvBase
from placement_env.envs.task import DEFAULT_MAX_UNITS
from placement_env.graph.traversal import TRAVERSAL_ORDERS, traversal_order
from placement_env.sim.pipeline import DEFAULT_SCHEDULE
from placement_env.sim.simulator import DEFAULT_PARAM_FACTOR


class DevicePlacementSequentialEnv(PlacementEnvBase):
    """
    ## Description

    Placeto's MDP (Addanki et al., 2019): starting from a complete placement,
    visit the placement units one at a time in a traversal order and choose a
    device for the current one; the simulated step time
    (``docs/spec/simulator.md``) after each change is the signal.

    ## Action Space

    ``Discrete(max_devices)``: the device of the current unit. :meth:`action_masks`
    marks the devices that exist (for ``sb3_contrib.MaskablePPO``); a device
    outside the cluster raises ``ValueError``.

    ## Observation Space

    The same ``Dict`` as ``DevicePlacement-v0`` (see ``placement_env.envs.device_placement``),
    with the current unit flagged in the last ``embedding`` column and
    ``visited`` marking the units already placed in the current pass.

    ## Rewards

    The change in makespan caused by the step, ``T(S_t) - T(S_{t+1})``, minus
    the change of the memory penalty ``c * sum_d overflow_d``, so that an
    episode's rewards add up to the improvement over the starting placement.
    Scales as in ``DevicePlacement-v0`` (``relative``: divided by the initial
    makespan / by device memory; ``seconds``: seconds / GB).

    ## Starting State

    The placement ``initial_placement`` of a graph drawn (seeded) from
    ``graph``; the first unit of the traversal order is current.

    ## Episode End

    Terminated after ``passes`` passes over all units.

    ## Arguments

    As ``DevicePlacement-v0`` (``graph``, ``num_devices`` / ``cluster``,
    ``max_nodes``, ``max_devices``, ``max_units``, ``reward_scale``, ``memory_penalty``,
    ``initial_placement``, ``param_factor``, ``microbatches``, ``schedule``, ``flatten``, ``render_mode``), plus
    ``traversal_order``: ``"topological"`` (default), ``"reverse_topological"``,
    ``"bfs"``, ``"dfs"`` or ``"random"`` (a new order per episode), and
    ``passes`` (default 1).
    """

    def __init__(self, graph: Any = "default", num_devices: int | None = None, cluster: Any = None,
                 max_nodes: int | None = None, max_devices: int | None = None, traversal_order: str = "topological",
                 passes: int = 1, reward_scale: str = "relative", memory_penalty: float = 10.0,
                 initial_placement: str = "single", param_factor: float = DEFAULT_PARAM_FACTOR,
                 device_kind: str = DEFAULT_KIND, flatten: bool = True, render_mode: str | None = None,
                 max_edges: int | None = None, max_units: int | None = DEFAULT_MAX_UNITS, microbatches: int = 1,
                 schedule: str = DEFAULT_SCHEDULE) -> None:
        if traversal_order not in TRAVERSAL_ORDERS:
            raise ValueError(f"unknown traversal_order {traversal_order!r}; use one of {', '.join(TRAVERSAL_ORDERS)}")
        passes = checked_count("passes", passes)
        self._setup(graph, num_devices, cluster, max_nodes, max_devices, reward_scale, memory_penalty,
                    initial_placement, param_factor, device_kind, flatten, render_mode, max_edges, max_units,
                    microbatches, schedule)
        self.traversal_order = traversal_order
        self.passes = int(passes)
        self.action_space = spaces.Discrete(self.task.max_devices)
        self._mask = np.arange(self.task.max_devices) < self.task.cluster.num_devices

    def _observation(self) -> dict:
        ep = self.episode
        assert ep is not None, "reset() first"
        return self.task.observation(ep.gi, ep.units, ep.visited, current=int(self._order[self._position]))

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        ep = self._new_episode()
        self._order = traversal_order(self.task.units[ep.gi], self.traversal_order, self.np_random)
        self._position = 0
        self._pass = 0
        return self._observation(), ep.info()

    def action_masks(self) -> np.ndarray:
        """Which actions are devices of the cluster (for ``sb3_contrib.MaskablePPO``)."""
        return self._mask.copy()

    def step(self, action):
        ep = self._stepping()
        device = np.asarray(action)
        if device.size != 1:
            raise ValueError(f"action must be one device index, got shape {device.shape}")
        unit = int(self._order[self._position])
        units = ep.units.astype(np.result_type(ep.units, device))  # a float action stays float until checked
        units[unit] = device.reshape(())
        units = self.task.checked_units(ep.gi, units)
        previous_makespan, previous_penalty = ep.move_to(units)
        reward = (previous_makespan - ep.makespan) / ep.time_scale - (ep.penalty(ep.peak) - previous_penalty)
        ep.visited[unit] = 1
        self._position += 1
        terminated = False
        if self._position == len(self._order):
            self._pass += 1
            terminated = self._pass >= self.passes
            if not terminated:
                self._position = 0
                ep.visited[:] = 0
        if terminated:  # the observation after the last step shows no current unit
            obs = self.task.observation(ep.gi, ep.units, ep.visited)
        else:
            obs = self._observation()
        self._ends(terminated, False)
        return obs, float(reward), terminated, False, ep.info()

    def _progress(self) -> str:
        done = self._pass * len(self._order) + self._position
        return f"unit {done}/{len(self._order) * self.passes}"
