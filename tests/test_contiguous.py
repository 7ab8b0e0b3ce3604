"""Contiguous mode (issue 39 point 4): pipeline stages in program order, as pipeline runtimes run them."""

import itertools
import json
import subprocess
import sys

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from baselines import place
from baselines.anneal import anneal_units
from baselines.contiguous import fit_contiguous
from baselines.local_search import refine
from baselines.memory import PlacementInfeasibleError
from baselines.placers import CONTIGUOUS_PLACERS, CONTIGUOUS_RUNTIME_DEFAULTS
from baselines.stages import nearest_contiguous, stage_neighbours
from placement_env import (
    Cluster,
    ComputationGraph,
    Device,
    Edge,
    Node,
    from_torch,
    load_graph,
    simulate,
    write_graph,
)
from placement_env.graph.stage_order import program_order
from placement_env.plan.split_points import to_split_points
from placement_env.plan.stages import (
    glue_unsplittable_starts,
    is_contiguous,
    merge_weightless_runs,
    unit_can_begin,
    unit_parameters,
)
from placement_env.sim.pipeline import Step
from placement_env.sim.reference import simulate_reference
from tests.test_pipelined_step import chain, free_cluster
from tests.test_runtime_export import Net


def line(n: int, cost: float = 1.0, params: int = 0) -> ComputationGraph:
    """n ops in a chain, each its own unit, in program order."""
    nodes = [Node(f"v{i}", "op", cost, 100, params) for i in range(n)]
    return ComputationGraph(nodes, [Edge(f"v{i}", f"v{i + 1}") for i in range(n - 1)], name=f"line{n}")


def test_contiguity_by_hand():
    g = line(6)
    assert is_contiguous(g, [0, 0, 1, 1, 2, 2])
    assert is_contiguous(g, [2, 2, 0, 0, 0, 1])  # any device order
    assert is_contiguous(g, [1] * 6)
    assert not is_contiguous(g, [0, 1, 0, 0, 1, 1])
    assert not is_contiguous(g, [0, 0, 1, 1, 2, 0])  # device 0's run resumes


def test_the_nearest_contiguous_placement_by_hand():
    g = line(6)
    # device 0 at 0, 2, 3 (median 2), device 1 at 1, 4, 5 (median 4): 0 first; the cut after 4 ops keeps 5 of 6
    assert nearest_contiguous(g, [0, 1, 0, 0, 1, 1]).tolist() == [0, 0, 0, 0, 1, 1]
    assert nearest_contiguous(g, [2, 2, 0, 0, 0, 1]).tolist() == [2, 2, 0, 0, 0, 1]  # contiguous: unchanged
    # cost decides: the heavy op 1 keeps its device
    heavy = ComputationGraph([Node(f"v{i}", "op", 10.0 if i == 1 else 1.0, 100, 0) for i in range(4)],
                             [Edge(f"v{i}", f"v{i + 1}") for i in range(3)])
    assert nearest_contiguous(heavy, [0, 1, 0, 1]).tolist() == [0, 1, 1, 1]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(0, 3), min_size=1, max_size=8), st.lists(st.floats(0.0, 5.0), min_size=8, max_size=8))
def test_the_nearest_contiguous_placement_keeps_the_most_cost_of_any_cut_in_its_device_order(devices, costs):
    n = len(devices)
    g = ComputationGraph([Node(f"v{i}", "op", costs[i], 100, 0) for i in range(n)],
                         [Edge(f"v{i}", f"v{i + 1}") for i in range(n - 1)])
    made = nearest_contiguous(g, devices)
    assert is_contiguous(g, made)
    weight = np.asarray(costs[:n]) + 1e-3 * max(float(np.mean(costs[:n])), 1e-12)

    def kept(p):
        return float(weight[np.asarray(p) == np.asarray(devices)].sum())

    order = [d for i, d in enumerate(made.tolist()) if i == 0 or made[i - 1] != d]
    best = 0.0  # brute force: every cut of the positions into len(order) possibly empty stages in that order
    for cuts in itertools.combinations_with_replacement(range(n + 1), len(order) - 1):
        bounds = [0, *cuts, n]
        p = [order[k] for k in range(len(order)) for _ in range(bounds[k + 1] - bounds[k])]
        best = max(best, kept(p))
    assert kept(made) == pytest.approx(best)


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 30), st.integers(1, 6), st.integers(0, 2**31))
def test_every_stage_neighbour_of_a_contiguous_placement_is_contiguous(n, m, seed):
    rng = np.random.default_rng(seed)
    g = line(n)
    devices = rng.permutation(m)[: rng.integers(1, m + 1)]
    cuts = np.sort(rng.integers(0, n + 1, devices.size - 1))
    start = np.repeat(devices, np.diff(np.r_[0, cuts, n]))
    rows = stage_neighbours(start, program_order(g), m, 64, rng)
    assert rows.shape == (64, n)
    assert all(is_contiguous(g, row) for row in rows)
    if m > 1 and n > 1:
        assert any(not np.array_equal(row, start) for row in rows)


def test_stages_without_parameters_join_their_neighbours_by_hand():
    weight = np.array([0, 5, 0, 0, 3, 0], dtype=float)  # units 0, 2, 3 and 5 hold no parameter
    assert merge_weightless_runs(np.array([7, 1, 2, 4, 4, 6]), weight).tolist() == [1, 1, 4, 4, 4, 4]
    assert merge_weightless_runs(np.array([0, 0, 1, 1, 1, 1]), weight).tolist() == [0, 0, 1, 1, 1, 1]  # all hold
    assert merge_weightless_runs(np.array([0, 1, 2]), np.zeros(3)).tolist() == [0, 1, 2]  # no parameters at all
    g = line(6)
    g = ComputationGraph([Node(n.id, n.op, n.cost, n.output_bytes, int(w)) for n, w in zip(g.nodes, weight)],
                         g.edges(), name="weights")
    assert nearest_contiguous(g, [7, 1, 2, 4, 4, 6]).tolist() == [1, 1, 4, 4, 4, 4]


@settings(max_examples=100, deadline=None)
@given(st.integers(2, 30), st.integers(2, 6), st.integers(0, 2**31))
def test_no_stage_neighbour_holds_a_stage_without_parameters(n, m, seed):
    rng = np.random.default_rng(seed)
    weight = rng.integers(0, 2, n) * rng.integers(1, 10, n).astype(float)
    weight[rng.integers(n)] = 1.0  # some unit holds parameters
    start = merge_weightless_runs(np.sort(rng.integers(0, m, n)), weight)
    rows = stage_neighbours(start, np.arange(n), m, 32, rng, weight)
    for row in rows:
        starts = np.flatnonzero(np.r_[True, row[1:] != row[:-1]])
        assert (np.add.reduceat(weight, starts) > 0).all()
        assert np.unique(row[starts]).size == starts.size  # contiguous


def layers(p: int, f: float, b: float) -> ComputationGraph:
    """:func:`tests.test_pipelined_step.chain` with each layer's forward and backward op one unit."""
    g = chain(p, f, b)
    nodes = [Node(n.id, n.op, n.cost, n.output_bytes, n.param_bytes, colocation=f"L{n.id[1:]}", phase=n.phase)
             for n in g.nodes]
    return ComputationGraph(nodes, g.edges(), name=g.name)


def test_the_contiguous_searches_pipeline_a_chain_from_one_device():
    p, m = 4, 8
    g, c = layers(2 * p, 1.0 * m, 2.0 * m), free_cluster(p)  # 8 layers on 4 devices: 2 a stage at best
    step = Step(m, "1f1b")
    best = (m + p - 1) * 2 * 3.0
    one = np.zeros(g.num_units, dtype=np.int64)
    annealed = anneal_units(g, c, one, seed=0, time_budget=None, max_steps=400, step=step, contiguous=True)
    refined = refine(g, c, np.zeros(g.num_nodes, dtype=np.int64), seed=0, max_rounds=400, patience=400,
                     step=step, contiguous=True)
    assert is_contiguous(g, annealed.placement) and annealed.makespan == pytest.approx(best)
    # the greedy search stops short of the best, at stages of 3, 2, 2 and 1 layers: no single shift of a boundary
    # gains (each leaves a stage of 3 layers), and the makespan it reports is the spec's for that placement
    assert is_contiguous(g, refined.placement)
    assert np.bincount(refined.placement[: 2 * p], minlength=p).tolist() == [3, 2, 2, 1]
    assert refined.makespan > best and refined.makespan == simulate_reference(
        g, refined.placement, c, microbatches=m, schedule="1f1b")["makespan"]


@pytest.fixture(scope="module")
def module_graph():
    torch.manual_seed(0)
    return from_torch(Net(d=16, n=6), (torch.randn(4, 3),), colocate_modules=2)


@pytest.mark.parametrize("name", sorted(CONTIGUOUS_PLACERS))
def test_every_placer_in_contiguous_mode_gives_split_points_of_a_module_granular_graph(name, module_graph):
    cluster = Cluster.preset("p100", 3)
    placement = place(module_graph, cluster, name, step=Step(4, "1f1b"), contiguous=True)
    assert is_contiguous(module_graph, placement)
    points = to_split_points(module_graph, placement)  # no module split, the stages in program order
    assert len(points.devices) == len(set(placement.tolist()))
    assert not simulate(module_graph, placement, cluster, microbatches=4).oom


@pytest.mark.parametrize("name", sorted(CONTIGUOUS_RUNTIME_DEFAULTS))
def test_the_runtimes_partitions_are_contiguous_and_unchanged(name, module_graph):
    from baselines.placers import RUNTIME_DEFAULTS

    cluster = Cluster.preset("p100", 3)
    free = RUNTIME_DEFAULTS[name](module_graph, cluster, 0)
    assert is_contiguous(module_graph, free)
    assert CONTIGUOUS_RUNTIME_DEFAULTS[name](module_graph, cluster, 0).tolist() == free.tolist()


def test_a_contiguous_placement_out_of_memory_is_repaired_keeping_its_stages():
    g = line(12, params=100)
    capacity = 4 * 100 * 4 + 300  # four ops' parameters (x 4, with Adam) and some activations: 12 need 3 devices
    cluster = Cluster([Device(f"d{i}", 1.0, capacity) for i in range(4)], np.full((4, 4), 1e9), np.zeros((4, 4)))
    assert simulate(g, [0] * 12, cluster).oom
    fitted = fit_contiguous(g, cluster, np.zeros(12, dtype=np.int64))
    assert is_contiguous(g, fitted) and not simulate(g, fitted, cluster).oom
    for name in ("heft", "m-etf", "anneal"):
        placed = place(g, cluster, name, contiguous=True)
        assert is_contiguous(g, placed) and not simulate(g, placed, cluster).oom
    with pytest.raises(PlacementInfeasibleError, match="no single device holds it"):
        place(g, cluster, "single", contiguous=True)  # as in free mode: its one device is its answer


def test_the_command_compares_the_placers_in_contiguous_mode(tmp_path, module_graph):
    graph_file, out = tmp_path / "net.json.gz", tmp_path / "table.json"
    write_graph(module_graph, graph_file)
    done = subprocess.run([sys.executable, "-m", "baselines", "--graph", str(graph_file), "--devices", "3",
                           "--microbatches", "4", "--contiguous", "--placers", "heft,split,anneal,deepspeed-uniform",
                           "--budget-seconds", "0.5", "--json", str(out)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "step: 4 micro-batches, 1f1b; contiguous stages;" in done.stdout
    payload = json.loads(out.read_text())
    assert payload["contiguous"] is True
    for row in payload["rows"]:
        assert is_contiguous(module_graph, row["placement"]), row["placer"]


class Around(torch.nn.Module):
    """A module with own ops before, between and after its two submodules."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = torch.nn.Linear(4, 4), torch.nn.Linear(4, 4)

    def forward(self, x):
        return torch.relu(self.b(torch.tanh(self.a(x * 2.0)))) + 1.0


class Model(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body, self.head = Around(), torch.nn.Linear(4, 2)

    def forward(self, x):
        return self.head(self.body(x)).sum()


def test_a_module_s_own_ops_after_a_submodule_go_with_it():
    g = from_torch(Model(), (torch.randn(3, 4),), colocate_modules=2, training=False)
    group = {n.op.split(".")[0].split("_")[0]: n.colocation for n in g.nodes if n.module == "body"}
    assert group["mul"] == "module:body"  # before its first submodule: the module's own group
    assert group["tanh"] == "module:body.a" and group["relu"] == "module:body.b"  # after a, after b
    assert group["add"] == "module:body.b"
    placement = [1 if (n.colocation or "").startswith(("module:body.b", "module:head")) else 0 for n in g.nodes]
    assert to_split_points(g, placement).split_spec == ["body.b"]  # a stage may begin at a submodule


def test_every_contiguous_placer_gives_split_points_of_a_hugging_face_gpt2():
    import transformers

    from placement_env.importers.huggingface import from_huggingface

    config = transformers.GPT2Config(n_layer=4, n_embd=32, n_head=4, vocab_size=256, n_positions=64, bos_token_id=0,
                                     eos_token_id=0)
    g = from_huggingface(config, 8, 32, colocate_modules=3)
    cluster = Cluster.preset("a100-nvlink", 4)
    for name, placer in {**CONTIGUOUS_PLACERS, **CONTIGUOUS_RUNTIME_DEFAULTS}.items():
        if name in ("local-search", "anneal"):
            continue  # their starts are among the others; the searches alone: the module graph test above
        placement = placer(g, cluster, 0, step=Step(8, "1f1b"))
        points = to_split_points(g, placement)
        assert all(s.startswith(("transformer.", "lm_head")) for s in points.split_spec), name


class _TwiceDropped(torch.nn.Module):
    """Blocks whose dropout the block calls twice (two residual branches), as ViT's layers do."""

    def __init__(self) -> None:
        super().__init__()
        self.blocks = torch.nn.ModuleList([_Block() for _ in range(4)])

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return x


class _Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.first, self.second = torch.nn.Linear(8, 8), torch.nn.Linear(8, 8)
        self.dropout = torch.nn.Dropout(0.0)

    def forward(self, x):
        x = x + self.dropout(self.first(x))
        return x + self.dropout(self.second(x))


def test_no_stage_begins_at_a_module_the_program_enters_twice():
    assert glue_unsplittable_starts(np.array([0, 0, 1, 1, 1, 2]), np.array([1, 1, 0, 0, 1, 1], bool)).tolist() \
        == [0, 0, 0, 0, 1, 2]
    assert glue_unsplittable_starts(np.array([0, 1, 1, 2]), np.array([1, 0, 0, 1], bool)).tolist() == [0, 0, 0, 2]
    graph = from_torch(_TwiceDropped(), (torch.randn(4, 8),), colocate_modules=3)
    order = program_order(graph)
    names = [graph.unit_names[u] for u in order]
    allowed = unit_can_begin(graph)
    assert allowed is not None
    assert not allowed[names.index("module:blocks.1.dropout")] and allowed[names.index("module:blocks.1.first")]
    cluster = Cluster.preset("p100", 2)
    at = names.index("module:blocks.1.dropout")
    units = np.zeros(graph.num_units, dtype=np.int64)
    units[order[at:]] = 1  # stage 1 would begin at the dropout
    fixed = nearest_contiguous(graph, graph.expand_unit_placement(units))
    to_split_points(graph, fixed)  # before: "stage 1 would begin at module 'blocks.1.dropout', which ..."
    for seed in range(3):
        result = anneal_units(graph, cluster, units, seed, None, 30, step=Step(2, "gpipe"), contiguous=True)
        to_split_points(graph, result.placement)


def test_a_tensor_colocated_with_its_views_in_every_layer_does_not_forbid_cuts():
    # llama's rotary cos and sin are each one unit with their views in all 22 layers: that span is no module
    # called twice, so a stage may still begin at every decoder layer, and the contiguous split uses all 8 devices
    g = load_graph("llama-1b")
    names = [g.unit_names[u] for u in program_order(g)]
    allowed = {name for name, ok in zip(names, unit_can_begin(g)) if ok}
    spanning = [u for u, name in enumerate(g.unit_names) if name in ("to_4/alias", "to_5/alias")]
    assert len(spanning) == 2 and len(allowed) >= 22
    placement = CONTIGUOUS_PLACERS["split"](g, Cluster.preset("a100-nvlink", 8), 0, step=Step(8, "1f1b"))
    assert np.unique(placement).size == 8 and is_contiguous(g, placement)


def test_the_simulator_the_split_points_and_the_placers_agree_on_the_stage_order():
    """One stage order (placement_env.graph.stage_order): the 1F1B cap's stages, the split points' devices and
    the runs of devices along the units in program order are the same devices in the same order, on the
    contiguous placements of every contiguous placer and random contiguous neighbours of them."""
    from placement_env.graph.stage_order import stage_runs
    from placement_env.sim.pipeline import stage_caps

    graph = from_torch(Net(), (torch.randn(2, 3),), colocate_modules=2)
    cluster = Cluster.preset("p100", 4)
    rng = np.random.default_rng(3)
    order = program_order(graph)
    checked = 0
    for name in ("single", "m-topo", "heft", "split", "metis", "critical-path"):
        start = CONTIGUOUS_PLACERS[name](graph, cluster, 0)
        units = graph.unit_placement(np.asarray(start))
        neighbours = stage_neighbours(units, order, cluster.num_devices, 6, rng, unit_parameters(graph),
                                      can_begin=unit_can_begin(graph))  # as the searches draw them
        for row in [units, *neighbours]:
            placement = graph.expand_unit_placement(row)
            _, runs = stage_runs(row[order])
            caps = stage_caps(graph, placement, cluster.num_devices)
            assert to_split_points(graph, placement).devices == runs.tolist()
            assert caps[runs].tolist() == list(range(len(runs), 0, -1))  # stage s has the cap P - s
            checked += 1
    assert checked == 42
