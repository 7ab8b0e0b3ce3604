"""``DevicePlacement-v0``: the FADP-GT paper's whole-graph placement MDP."""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces

from placement_env.checks import checked_count
from placement_env.cluster import DEFAULT_KIND
from placement_env.envs.base import PlacementEnvBase
from placement_env.envs.task import DEFAULT_MAX_UNITS
from placement_env.sim.pipeline import DEFAULT_SCHEDULE
from placement_env.sim.simulator import DEFAULT_PARAM_FACTOR


class DevicePlacementEnv(PlacementEnvBase):
    """
    ## Description

    Place every operation of a computation graph on one of M devices so that a
    simulated training step (``docs/spec/simulator.md``) finishes soonest
    without exceeding device memory. Each step proposes a whole placement, as
    in the FADP-GT paper (section 2.4): the agent sees the graph and the
    current placement and answers with a new one.

    ## Action Space

    ``MultiDiscrete([max_devices] * max_nodes)``: a device per placement unit
    (colocation group; a node without a group is its own unit), in unit order.
    Entries of padding units are ignored; a device index outside the cluster
    raises ``ValueError`` naming the unit.

    ## Observation Space

    A ``Dict`` of fixed-shape, padded arrays. ``embedding`` and ``edge_index``
    are matrices stored row-major as 1-D arrays (stable-baselines3 expects a
    1-D ``Box``); ``placement_env.unflatten_observation`` reshapes them, and
    ``flatten=False`` makes the environment return the matrices themselves.

    * ``embedding`` (max_nodes x F, float32 in [0, 1]): per unit the static
      features of ``placement_env.graph.units.STATIC_FEATURES`` (op-type mix,
      backward share, cost, output bytes, parameter bytes, degrees, depth,
      op count, each scaled within the graph), then the unit's current device
      as a one-hot over ``max_devices``, then a "current unit" flag (always 0
      here; used by the sequential environment);
    * ``edge_index`` (2 x max_edges, int64) and ``edge_mask``: the unit graph;
    * ``node_mask``, ``visited`` (max_nodes): real units; units placed by the
      agent in this episode (all of them after the first step);
    * ``gpu_onehot`` (max_devices): the device count M as a one-hot over 1..max_devices;
    * ``graph_id`` (1,): index of the episode's graph among the environment's graphs.

    ## Rewards

    Paper eq. 16: ``r_t = T(S_t) - T(S_{t+1}) - c * sum_d max(0, peak_d(S_{t+1}) - memory_d)``.
    With ``reward_scale="relative"`` (default) times are divided by the
    episode's initial makespan T(S_0) and each device's overflow by its memory;
    with ``"seconds"``, times are in seconds and overflow in GB (1e9 bytes).

    ## Starting State

    The placement ``initial_placement`` of a graph drawn (seeded) from ``graph``.

    ## Episode End

    Truncated after ``episode_length`` steps; never terminated.

    ``info`` after every step: ``makespan`` (s), ``peak_memory`` (bytes per
    device), ``busy`` (s per device), ``oom``, ``lb_ratio`` (makespan / lower
    bound), ``best_placement`` (device per node), ``best_makespan`` (s) and
    ``best_oom`` of the best placement seen in the episode (feasible ones
    first), ``graph``.

    ## Arguments

    * ``graph``: shipped graph name, suite name (``"synthetic"``: a graph drawn
      per episode), path, graph object, or a list of them (default ``"default"``);
    * ``num_devices`` (default 3 of ``device_kind``, default ``"p100"``) or ``cluster``
      (a ``Cluster`` or a cluster JSON path);
    * ``max_nodes``, ``max_devices``, ``max_edges``: padding (default: largest graph, device
      count, most unit edges), so observations of different environments can be batched;
    * ``max_units``: a graph with more placement units is placed coarsened to this many, with a
      warning (default 2,000; None: never).
    * ``episode_length`` T (default 10), ``reward_scale``, ``memory_penalty`` c (default 10);
    * ``initial_placement``: ``"single"`` (default), ``"random"``, ``"round_robin"`` or a
      placer name from ``baselines`` (``"heft"``, ``"m-etf"``...);
    * ``param_factor``: static bytes per parameter byte (4 = Adam training);
    * ``microbatches`` m (default 1) and ``schedule`` (``"1f1b"``, default, or ``"gpipe"``): the step simulated,
      pipelined in m micro-batches above 1 (``docs/spec/simulator.md`` section 3a);
    * ``flatten``: 1-D ``embedding`` / ``edge_index`` (default True, see above);
    * ``render_mode``: ``"rgb_array"`` (Gantt chart) or ``"ansi"`` (text).
    """

    def __init__(self, graph: Any = "default", num_devices: int | None = None, cluster: Any = None,
                 max_nodes: int | None = None, max_devices: int | None = None, episode_length: int = 10,
                 reward_scale: str = "relative", memory_penalty: float = 10.0, initial_placement: str = "single",
                 param_factor: float = DEFAULT_PARAM_FACTOR, device_kind: str = DEFAULT_KIND,
                 flatten: bool = True, render_mode: str | None = None,
                 max_edges: int | None = None, max_units: int | None = DEFAULT_MAX_UNITS, microbatches: int = 1,
                 schedule: str = DEFAULT_SCHEDULE) -> None:
        episode_length = checked_count("episode_length", episode_length)
        self._setup(graph, num_devices, cluster, max_nodes, max_devices, reward_scale, memory_penalty,
                    initial_placement, param_factor, device_kind, flatten, render_mode, max_edges, max_units,
                    microbatches, schedule)
        self.episode_length = int(episode_length)
        self.action_space = spaces.MultiDiscrete(np.full(self.task.max_nodes, self.task.max_devices))
        self._steps = 0

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        ep = self._new_episode()
        self._steps = 0
        return self.task.observation(ep.gi, ep.units, ep.visited), ep.info()

    def step(self, action):
        ep = self._stepping()
        action = np.asarray(action)
        if action.shape != (self.task.max_nodes,):
            raise ValueError(f"action must have shape ({self.task.max_nodes},), got {action.shape}")
        units = self.task.checked_units(ep.gi, action[:self.task.units[ep.gi].num_units])
        previous_makespan, _ = ep.move_to(units)
        ep.visited[:] = 1
        reward = (previous_makespan - ep.makespan) / ep.time_scale - ep.penalty(ep.peak)
        self._steps += 1
        obs = self.task.observation(ep.gi, units, ep.visited)
        truncated = self._steps >= self.episode_length
        self._ends(False, truncated)
        return obs, float(reward), False, truncated, ep.info()

    def _progress(self) -> str:
        return f"step {self._steps}/{self.episode_length}"
