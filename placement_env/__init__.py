"""Device placement of computation graphs: graphs, clusters, the step-time simulator and the environments.

The data path: a :class:`ComputationGraph` (``load_graph``) and a :class:`Cluster`
(``Cluster.preset``) go into :func:`simulate` with a placement (a device per
node), which returns the makespan, per-device peak memory and busy time, the
OOM flag and the schedule. Semantics: ``docs/spec/simulator.md``.

The layers, each a subpackage, each importing only those before it:

1. :mod:`.checks`, :mod:`.json_files` (validators, files), :mod:`.cluster` and :mod:`.graph`;
2. :mod:`.sim`, the simulator;
3. :mod:`.importers` (PyTorch) and :mod:`.zoo` (the shipped graphs by name), then :mod:`.cli`;
4. :mod:`.plan`, plans (:class:`Parallelism` describes the step; :func:`search_plan`, :func:`hand_plan`,
   :func:`plan_from_placement`, :func:`simulate_plan`), and :mod:`.runtime`, which runs them
   (:func:`run_pipeline`, loaded on first use: it needs torch);
5. :mod:`.envs`, the Gymnasium environments, which start episodes from the placers of the top-level package
   :mod:`baselines` (built on every layer here) without importing them: they find them through an entry point
   (:mod:`.envs.starts`).

This module re-exports the public names of every layer. The environments and
:func:`from_torch` are loaded on first use (``placement_env.DevicePlacementEnv``
imports :mod:`.envs`), and torch is only needed to trace a model.
``import placement_env`` registers ``DevicePlacement-v0``, ``DevicePlacementSequential-v0`` and
``ParallelPlan-v0`` with Gymnasium.
"""

from __future__ import annotations

from placement_env.numba_cache import configure_numba_cache

configure_numba_cache()  # before any kernel compiles: a read-only install still finds a cache

from typing import TYPE_CHECKING

from placement_env.cluster import DEVICE_KINDS, Cluster, Device
from placement_env.envs.registration import register_environments
from placement_env.graph import (
    ComputationGraph,
    Edge,
    Node,
    coarsen,
    coarsen_to_fit,
    layered_dag,
    placement_from_json,
    read_graph,
    read_placement,
    to_training_graph,
    two_chains,
    write_graph,
    write_placement,
)
from placement_env.lazy_names import lazy_attributes
from placement_env.parallelism import SCHEDULES, Parallelism
from placement_env.plan import (
    PipelinePlan,
    SearchedPlan,
    hand_plan,
    plan_from_placement,
    search_plan,
    simulate_plan,
)
from placement_env.sim import (
    BatchResult,
    Schedule,
    SimulationResult,
    Simulator,
    check_placement,
    chrome_trace,
    critical_path,
    lower_bound,
    memory_timeline,
    simulate,
    simulate_batch,
    write_chrome_trace,
)
from placement_env.sim.pipeline import Step
from placement_env.zoo import DEFAULT_GRAPH, SUITES, list_graphs, load_graph, load_suite

if TYPE_CHECKING:
    from placement_env.envs.device_placement import DevicePlacementEnv
    from placement_env.envs.sequential import DevicePlacementSequentialEnv
    from placement_env.envs.task import unflatten_observation
    from placement_env.importers.huggingface import from_huggingface
    from placement_env.importers.pytorch import from_torch
    from placement_env.runtime.pipeline_runner import PipelineRun, run_pipeline

_ON_FIRST_USE = {  # name -> module that defines it
    "DevicePlacementEnv": "placement_env.envs.device_placement",
    "DevicePlacementSequentialEnv": "placement_env.envs.sequential",
    "unflatten_observation": "placement_env.envs.task",
    "from_torch": "placement_env.importers.pytorch",
    "from_huggingface": "placement_env.importers.huggingface",
    "run_pipeline": "placement_env.runtime.pipeline_runner",
    "PipelineRun": "placement_env.runtime.pipeline_runner",
}


if not TYPE_CHECKING:  # type checkers see the imports above, and no catch-all attribute
    __getattr__ = lazy_attributes("placement_env", _ON_FIRST_USE, globals())


register_environments()

__all__ = [
    # graphs
    "DEFAULT_GRAPH", "SUITES", "ComputationGraph", "Edge", "Node", "coarsen", "coarsen_to_fit", "from_huggingface",
    "from_torch", "layered_dag", "list_graphs", "load_graph", "load_suite", "read_graph", "to_training_graph",
    "two_chains", "write_graph",
    # clusters
    "DEVICE_KINDS", "Cluster", "Device",
    # placements and their simulated step
    "BatchResult", "Schedule", "SimulationResult", "Simulator", "Step", "check_placement", "chrome_trace",
    "critical_path", "lower_bound", "memory_timeline", "placement_from_json", "read_placement", "simulate",
    "simulate_batch", "write_chrome_trace", "write_placement",
    # plans: describe the parallel step, search, from a placement, simulate, run
    "SCHEDULES", "Parallelism", "PipelinePlan", "PipelineRun", "SearchedPlan", "hand_plan", "plan_from_placement",
    "run_pipeline", "search_plan", "simulate_plan",
    # the environments
    "DevicePlacementEnv", "DevicePlacementSequentialEnv", "unflatten_observation",
]
