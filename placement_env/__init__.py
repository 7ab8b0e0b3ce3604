"""Device placement of computation graphs: graphs, clusters and the step-time simulator.

The data path: a :class:`ComputationGraph` (``load_graph``) and a :class:`Cluster`
(``Cluster.preset``) go into :func:`simulate` with a placement (a device per
node), which returns the makespan, per-device peak memory and busy time, the
OOM flag and the schedule. Semantics: ``shared/spec/simulator.md``.
"""

from .cluster import DEVICE_KINDS, Cluster, Device
from .coarsen import coarsen, coarsen_to_fit
from .graph import ComputationGraph, Edge, Node
from .graph_io import read_graph, write_graph
from .placement_io import placement_from_json, read_placement, write_placement
from .registry import DEFAULT_GRAPH, SUITES, list_graphs, load_graph, load_suite
from .simulator import (
    BatchResult,
    Schedule,
    SimulationResult,
    Simulator,
    check_placement,
    critical_path,
    lower_bound,
    simulate,
    simulate_batch,
)
from .memory_timeline import memory_timeline
from .chrome_trace import chrome_trace, write_chrome_trace
from .synthetic import layered_dag, two_chains
from .training_graph import to_training_graph
from .env import DevicePlacementEnv
from .placement_task import unflatten_observation
from .sequential_env import DevicePlacementSequentialEnv

import gymnasium as _gym


def from_torch(module, example_inputs, **kwargs):
    """Trace a PyTorch module into a :class:`ComputationGraph` (see :mod:`placement_env.torch_import`;
    imported on first use, so that the simulator does not load torch)."""
    from .torch_import import from_torch as _from_torch

    return _from_torch(module, example_inputs, **kwargs)


if "DevicePlacement-v0" not in _gym.registry:
    _gym.register(id="DevicePlacement-v0", entry_point="placement_env.env:DevicePlacementEnv")
if "DevicePlacementSequential-v0" not in _gym.registry:
    _gym.register(id="DevicePlacementSequential-v0", entry_point="placement_env.sequential_env:DevicePlacementSequentialEnv")

__all__ = [
    "DEFAULT_GRAPH", "DEVICE_KINDS", "BatchResult", "coarsen", "coarsen_to_fit", "DevicePlacementEnv", "DevicePlacementSequentialEnv", "Cluster", "ComputationGraph", "Device", "Edge", "Node",
    "Schedule", "SimulationResult", "Simulator", "check_placement", "chrome_trace", "critical_path", "layered_dag",
    "list_graphs", "memory_timeline",
    "two_chains",
    "load_graph", "load_suite", "SUITES", "lower_bound", "placement_from_json", "read_graph", "read_placement",
    "simulate", "simulate_batch",
    "from_torch", "to_training_graph", "unflatten_observation", "write_chrome_trace", "write_graph", "write_placement",
]
