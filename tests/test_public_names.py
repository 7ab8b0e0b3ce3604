"""Every name users imported from the packages before the layered layout still imports from the same place."""

import importlib
import subprocess
import sys

import pytest

BEFORE_THE_LAYERS = {  # the packages' __all__ at cd53a2b
    "placement_env": [
        "DEFAULT_GRAPH", "DEVICE_KINDS", "BatchResult", "coarsen", "coarsen_to_fit", "DevicePlacementEnv",
        "DevicePlacementSequentialEnv", "Cluster", "ComputationGraph", "Device", "Edge", "Node", "Schedule",
        "SimulationResult", "Simulator", "check_placement", "chrome_trace", "critical_path", "layered_dag",
        "list_graphs", "memory_timeline", "two_chains", "load_graph", "load_suite", "SUITES", "lower_bound",
        "placement_from_json", "read_graph", "read_placement", "simulate", "simulate_batch", "from_torch",
        "to_training_graph", "unflatten_observation", "write_chrome_trace", "write_graph", "write_placement"],
    "agents": [
        "GraphFeaturesExtractor", "MaskablePlacementPolicy", "PlacementNetwork", "PlacementPolicy",
        "ReinforceConfig", "SB3_ALGORITHMS", "greedy_placement", "load_network", "make_agent", "make_sb3",
        "place_graph", "save_network", "train_reinforce"],
    "baselines": [
        "PLACERS", "MemoryBudget", "PlacementInfeasibleError", "Placer", "RefineResult", "critical_path_first",
        "heft", "list_placers", "local_search_from", "m_etf", "m_topo", "metis", "place", "random_placement",
        "refine", "repair_memory", "round_robin", "single_device", "unit_demand", "within_memory"],
    "graph_encoders": ["ENCODERS", "GraphBatch", "GraphEncoder", "build_encoder", "list_encoders", "FADPGT",
                       "Transformer", "GCN", "GAT", "GraphSAGE", "GNN", "Graphormer", "Placeto", "PGNN", "Mamba"],
}


@pytest.mark.parametrize("package", sorted(BEFORE_THE_LAYERS))
def test_every_public_name_still_imports(package):
    module = importlib.import_module(package)
    missing = [name for name in BEFORE_THE_LAYERS[package] if not hasattr(module, name)]
    assert not missing
    assert set(BEFORE_THE_LAYERS[package]) <= set(module.__all__)


LATER_FIRSTS = ("placement_env", "agents", "graph_encoders", "placement_env.envs.task")


@pytest.mark.parametrize("first", ["baselines", *(pytest.param(n, marks=pytest.mark.slow) for n in LATER_FIRSTS)])
def test_any_package_can_be_imported_first(first):
    """The environments sit above the placers, which sit above the graph: no import order may break."""
    code = f"import {first}; import placement_env, gymnasium; gymnasium.make('DevicePlacement-v0'); " \
           "print(placement_env.DevicePlacementEnv.__name__)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "DevicePlacementEnv"


def test_importing_the_simulator_loads_neither_torch_nor_the_environments():
    code = "import sys, placement_env; print('torch' in sys.modules, 'placement_env.envs.task' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.stdout.split() == ["False", "False"], out.stderr
