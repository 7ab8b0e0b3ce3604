"""The planner of hybrid pipelines: its cut against brute force, fixed decisions honoured, never behind the hand
grid, uneven splits where layers differ, its plan simulated and read back, and bad input."""

import itertools

import numpy as np
import pytest

from placement_env import Cluster, load_graph
from placement_env.plan.cuts import bottleneck_cut, cut_prefix
from placement_env.plan.pipeline_plan import PipelinePlan
from placement_env.plan.plan_step import simulate_plan
from placement_env.plan.planner import hand_plan, search_plan


@pytest.mark.parametrize("seed", range(12))
def test_the_greedy_bottleneck_cut_is_the_brute_force_optimum(seed):
    rng = np.random.default_rng(seed)
    layers, k = int(rng.integers(2, 9)), int(rng.integers(1, 5))
    k = min(k, layers)
    weight = rng.uniform(0.1, 3.0, layers)
    cap = float(rng.uniform(weight.max(), weight.sum()))  # a memory: no chunk may hold more weight than this
    prefix = np.concatenate([[0.0], np.cumsum(weight)])
    speed = rng.uniform(0.5, 2.0, k)  # chunks on devices of different speeds

    def cost(c, a):
        return (prefix[a + 1:] - prefix[a]) / speed[c]

    def fits(c, a):
        return (prefix[a + 1:] - prefix[a]) <= cap

    best = None
    for cuts in itertools.combinations(range(1, layers), k - 1):
        parts = (0, *cuts, layers)
        runs = [(prefix[b] - prefix[a], c) for c, (a, b) in enumerate(zip(parts, parts[1:]))]
        if all(w <= cap for w, _ in runs):
            value = max(w / speed[c] for w, c in runs)
            best = value if best is None else min(best, value)
    found = bottleneck_cut(layers, k, cost, fits)
    if best is None:
        assert found is None
    else:
        assert found is not None
        value = max((prefix[b] - prefix[a]) / speed[c] for c, (a, b) in enumerate(zip(found, found[1:])))
        assert value == pytest.approx(best, rel=1e-3)
    # the compiled search on the same costs, as prefix sums (the weight its work and its parameters, the cap its
    # memory, nothing sent, nothing held), gives the same cut
    none = np.zeros(layers + 1)
    compiled = cut_prefix(prefix, none, prefix, none, none, speed, np.zeros(k), np.ones(k), np.zeros(k, dtype=bool),
                          np.full(k, cap), np.zeros(k), 1.0, 1.0, 0, np.ones(layers + 1, dtype=bool), k)
    assert compiled == found


@pytest.fixture(scope="module")
def gpt2():
    return load_graph("gpt2")


def test_fixed_decisions_are_the_plan_and_its_step_is_simulate_plan_s(gpt2, tmp_path):
    c = Cluster.preset("a100-nvlink", 8, per_node=4)
    planned = search_plan(gpt2, c, stages=2, replicas=4, microbatches=8, schedule="1f1b", split="uniform",
                            layout="replicas-across-nodes", batch=64)
    plan = planned.plan
    assert (plan.num_stages, plan.replicas, plan.microbatches, plan.schedule, plan.batch) == (2, 4, 8, "1f1b", 64)
    assert plan.devices == [[0, 2, 4, 6], [1, 3, 5, 7]]
    # Megatron's uniform split: 6 blocks each, the embedding (3 layers) first, the final norm and head last
    assert [len(stage.layers) for stage in plan.stages] == [9, 8]
    assert simulate_plan(gpt2, plan, c).seconds == planned.step.seconds == plan.simulated_step_seconds
    assert planned.lower_bound <= planned.step.seconds
    plan.to_json(tmp_path / "plan.json")
    again = PipelinePlan.from_json(tmp_path / "plan.json")
    assert again == plan and simulate_plan(gpt2, again, c).seconds == planned.step.seconds
    # the embedding (first stage) and the head (last) share the tied weight: summed across the two ranks
    assert [group.stages for group in plan.tied] == [[0, 1]]
    custom = search_plan(gpt2, c, stages=2, replicas=4, microbatches=8, schedule="1f1b", split=[5, 12],
                           batch=64)
    assert [len(stage.layers) for stage in custom.plan.stages] == [5, 12] and custom.split == "given"


def test_the_planner_is_never_behind_the_hand_grid(gpt2):
    c = Cluster.preset("a100-nvlink", 8, per_node=4)
    planned = search_plan(gpt2, c, batch=64)
    grid = []
    for s in (1, 2, 4, 8):
        for factor in (1, 2, 4, 8):
            try:
                grid.append(hand_plan(gpt2, c, s, 8 // s, s * factor, batch=64).step.seconds)
            except ValueError:  # 8 // s x s * factor does not divide 64, or it does not fit
                pass
    assert grid and planned.step.seconds <= min(grid) * (1 + 1e-9)
    assert planned.lower_bound <= planned.step.seconds


def test_heavy_first_and_last_layers_get_fewer_layers_than_uniform():
    # on one device per stage and a long pipeline, the embedding and the output layer (a 50,257-word vocabulary)
    # weigh as several blocks: the time-balanced split gives the end stages fewer layers
    g = load_graph("gpt2")
    c = Cluster.preset("a100-nvlink", 4)
    timed = search_plan(g, c, stages=4, replicas=1, microbatches=16, schedule="1f1b", split="time", batch=64)
    uniform = search_plan(g, c, stages=4, replicas=1, microbatches=16, schedule="1f1b", split="uniform",
                            batch=64)
    counts = [len(stage.layers) for stage in timed.plan.stages]
    assert counts != [len(stage.layers) for stage in uniform.plan.stages]
    assert timed.step.seconds < uniform.step.seconds


def test_bad_choices_are_one_error_naming_them(gpt2):
    c = Cluster.preset("a100-nvlink", 8)
    with pytest.raises(ValueError, match="4 stages x 4 replicas = 16 devices; the cluster has 8"):
        search_plan(gpt2, c, stages=4, replicas=4)
    with pytest.raises(ValueError, match="unknown schedule 'pipedream'"):
        search_plan(gpt2, c, schedule="pipedream")
    with pytest.raises(ValueError, match="2 replicas x 3 micro-batches do not divide the graph's batch of 8"):
        search_plan(gpt2, c, replicas=2, microbatches=3)
    with pytest.raises(ValueError, match="8 stages x 4 virtual stages need as many chunks; the graph's 17 layers "
                                         "make at most 14"):
        search_plan(gpt2, c, stages=8, virtual_stages=4, schedule="interleaved-1f1b")
    with pytest.raises(ValueError, match=r"a split gives each chunk 1 or more layers, 17 in all; got \[5, 5\]"):
        search_plan(gpt2, c, stages=2, split=[5, 5])
    with pytest.raises(ValueError, match="unknown layout 'diagonal'"):
        search_plan(gpt2, c, layout="diagonal")
    with pytest.raises(ValueError, match=r"no plan of graph 'gpt2' \(17 layers\) fits the memory of 8 devices \(0.09 "
                                         r"GiB the smallest\)"):
        search_plan(gpt2, c.with_memory(1e8))


def parse_megatron_layout(layout: str) -> list[list[str]]:
    """Megatron-LM's --pipeline-model-parallel-layout, read as its documentation (docs/api-guide/
    pipeline_parallel_layout.md) writes it: stages split by '|', 'x*n' and '(...)*n' repeat, commas cosmetic."""
    import re

    text = layout.replace(",", "")
    while "(" in text:
        text = re.sub(r"\(([^()]*)\)\*(\d+)", lambda m: m.group(1) * int(m.group(2)), text)
    text = re.sub(r"(.)\*(\d+)", lambda m: m.group(1) * int(m.group(2)), text)
    return [list(stage) for stage in text.split("|")]


@pytest.mark.parametrize("schedule,virtual", [("1f1b", 1), ("interleaved-1f1b", 2)])
def test_the_exports_are_read_back_as_their_consumers_read_them(gpt2, schedule, virtual):
    from placement_env.plan.exports import deepspeed_partition, device_mesh, megatron_arguments
    from placement_env.plan.module_tree import block_layers

    c = Cluster.preset("a100-nvlink", 8, per_node=4)
    plan = search_plan(gpt2, c, stages=4, replicas=2, microbatches=8, schedule=schedule, virtual_stages=virtual,
                         batch=64).plan
    megatron = megatron_arguments(plan, gpt2)["arguments"]
    stages = parse_megatron_layout(megatron["--pipeline-model-parallel-layout"])
    blocks = set(block_layers(gpt2))
    assert len(stages) == len(plan.stages) == 4 * virtual
    assert [stage.count("t") for stage in stages] == [sum(x in blocks for x in s.layers) for s in plan.stages]
    flat = [symbol for stage in stages for symbol in stage]
    assert flat[0] == "E" and flat[-1] == "L" and flat.count("E") == flat.count("L") == 1
    assert megatron["--pipeline-model-parallel-size"] == 4 and megatron["--micro-batch-size"] == 64 // (2 * 8)
    mesh = device_mesh(plan)
    assert mesh["mesh"] == [[plan.devices[s][r] for s in range(4)] for r in range(2)]
    if virtual == 1:
        parts = deepspeed_partition(plan)
        assert parts["layers"][parts["parts"][1]] == plan.stages[1].begins_at and parts["data_parallel_size"] == 2
    else:
        with pytest.raises(ValueError, match="one chunk a rank"):
            deepspeed_partition(plan)


def test_the_plan_command_writes_a_plan_or_an_export_and_refuses_bad_input(tmp_path):
    import json
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    base = [sys.executable, "-m", "placement_env", "plan", "--graph", "gpt2", "--devices", "8", "--per-node", "4",
            "--device-kind", "a100-nvlink", "--batch", "64"]
    done = subprocess.run([*base, "--stages", "2", "--replicas", "4", "--microbatches", "8", "--schedule", "1f1b",
                           "--split", "uniform", "--out", str(tmp_path / "plan.json")], cwd=root, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "2 stages x 4 replicas" in done.stdout and "step " in done.stdout
    plan = PipelinePlan.from_json(tmp_path / "plan.json")
    assert (plan.num_stages, plan.replicas) == (2, 4)
    done = subprocess.run([*base, "--stages", "2", "--replicas", "4", "--microbatches", "8", "--export", "megatron",
                           "--out", str(tmp_path / "m.json")], cwd=root, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "--pipeline-model-parallel-layout" in json.loads(
        (tmp_path / "m.json").read_text())["arguments"]
    for bad, message in ((["--stages", "9"], "error: 9 stages x 1 replicas = 9 devices; the cluster has 8"),
                         (["--split", "5,x"], "error: --split must be one of"),
                         (["--schedule", "pipedream"], "error: argument --schedule: invalid choice")):
        done = subprocess.run([*base, *bad, "--out", str(tmp_path / "bad.json")], cwd=root, capture_output=True,
                              text=True, timeout=300)
        assert done.returncode == 2 and done.stderr.startswith(message) and len(done.stderr.splitlines()) == 1, \
            done.stderr
        assert not (tmp_path / "bad.json").exists()


@pytest.mark.parametrize("stages", [2, 4, 7])
def test_the_deepspeed_splits_are_deepspeed_s_rules(gpt2, stages):
    from placement_env.plan.layers import layer_table
    from placement_env.plan.module_tree import layer_sequence
    from placement_env.plan.partitions import partition_balanced, partition_uniform

    c = Cluster.preset("a100-nvlink", stages)
    layers = layer_sequence(gpt2)
    uniform = search_plan(gpt2, c, stages=stages, replicas=1, microbatches=8, schedule="1f1b",
                            split="deepspeed-uniform", batch=64).plan
    assert uniform.parts == partition_uniform(len(layers), stages)
    # a layer's parameters as DeepSpeed counts them, layer.parameters(): the tied embedding in each reader
    per_layer = layer_table(gpt2, layers).costs.parameter_bytes
    weight = dict(zip(layers, per_layer.tolist()))
    heaviest = lambda parts: max(sum(weight[x] for x in layers[a:b]) for a, b in zip(parts, parts[1:]))  # noqa: E731
    balanced = search_plan(gpt2, c, stages=stages, replicas=1, microbatches=8, schedule="1f1b",
                             split="parameters", batch=64).plan
    assert heaviest(balanced.parts) == pytest.approx(heaviest(partition_balanced([weight[x] for x in layers], stages)),
                                                     rel=1e-4)
