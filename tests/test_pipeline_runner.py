"""The pipeline plan and its runner: a tiny GPT-2 with tied embeddings, placed, planned and run with
``torch.distributed.pipelining`` on local workers, ends an SGD step with the unpipelined model's parameters."""

import copy
import functools
import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
import transformers

from baselines.placers import CONTIGUOUS_PLACERS, CONTIGUOUS_RUNTIME_DEFAULTS
from placement_env import Cluster, from_torch, write_graph
from placement_env.graph.placement_io import write_placement
from placement_env.plan.pipeline_plan import PipelinePlan, plan_from_placement
from placement_env.runtime.pipeline_runner import run_pipeline
from placement_env.sim.pipeline import Step

VOCAB, BATCH, SEQUENCE, MICROBATCHES = 64, 8, 8, 4
ROOT = Path(__file__).resolve().parents[1]


def tiny_gpt2(layers: int = 4, width: int = 32):
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=layers, n_embd=width, n_head=2, vocab_size=VOCAB, n_positions=16,
                                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0,
                                     eos_token_id=0, use_cache=False)
    return transformers.GPT2LMHeadModel(config).train()


def lm_loss(logits, target):
    """Next-token cross-entropy of one micro-batch (module level: the workers import it)."""
    return F.cross_entropy(logits.reshape(-1, VOCAB), target.reshape(-1))


def tiny_gpt2_batch():
    """``python -m placement_env run --model tests.test_pipeline_runner:tiny_gpt2_batch``: the model and a batch."""
    model = tiny_gpt2()
    torch.manual_seed(1)
    return model, (), {"input_ids": torch.randint(0, VOCAB, (BATCH, SEQUENCE))}


@pytest.fixture(scope="module")
def gpt2_and_graph():
    model = tiny_gpt2()
    torch.manual_seed(1)
    ids = torch.randint(0, VOCAB, (BATCH, SEQUENCE))
    graph = from_torch(model, (), example_kwargs={"input_ids": ids}, colocate_modules=3)
    return model, ids, graph


def reference_step(model, ids, targets, lr):
    """One SGD step of the unpipelined model on the mean of the micro-batches' losses."""
    reference = copy.deepcopy(model)
    losses = [lm_loss(reference(input_ids=x).logits, t) for x, t in zip(ids.chunk(MICROBATCHES),
                                                                         targets.chunk(MICROBATCHES))]
    torch.stack(losses).mean().backward()
    with torch.no_grad():
        for p in reference.parameters():
            p -= lr * p.grad
    return reference, [float(x) for x in losses]


def assert_an_sgd_step_matches_the_model(model, ids, plan):
    """One SGD step of ``plan`` by ``run_pipeline``: its loss and every parameter (tied ones included) within 1e-5
    of the unpipelined model's step; returns the run."""
    targets = torch.roll(ids, -1, dims=1)
    run = run_pipeline(model, (), plan, example_kwargs={"input_ids": ids}, targets=targets, loss_fn=lm_loss,
                       optimizer=functools.partial(torch.optim.SGD, lr=0.1), steps=1)
    reference, losses = reference_step(model, ids, targets, 0.1)
    assert run.losses[0] == pytest.approx(float(np.mean(losses)), rel=1e-5)
    expected = dict(reference.named_parameters())
    assert set(run.parameters) == set(expected)
    for name, value in run.parameters.items():
        np.testing.assert_allclose(value, expected[name].detach().numpy(), atol=1e-5, err_msg=name)
    return run


@pytest.mark.slow
@pytest.mark.parametrize("devices", [2, 4])
def test_a_tied_gpt2_pipeline_ends_an_sgd_step_with_the_model_s_parameters(gpt2_and_graph, devices):
    model, ids, graph = gpt2_and_graph
    cluster = Cluster.preset("a100-nvlink", devices, per_node=2)
    plan = plan_from_placement(graph, blocks(graph, devices), cluster, microbatches=MICROBATCHES)
    assert plan.num_stages == devices and not plan.stages_without_parameters
    assert [g.parameter for g in plan.tied] == ["transformer.wte.weight"]
    assert plan.tied[0].stages == [0, devices - 1]
    run = assert_an_sgd_step_matches_the_model(model, ids, plan)
    assert run.peak_memory.shape == (devices,) and (run.peak_memory > 0).all()
    assert len(run.steps) == 1 and run.seconds > 0


def tiny_bert():
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                     intermediate_size=64, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    return transformers.BertForMaskedLM(config).train()


@pytest.mark.slow
def test_a_bert_pipeline_whose_stages_send_strided_tensors_ends_an_sgd_step_with_the_model_s_parameters():
    """BERT's tied decoder, and attention outputs that are transposed views: sent contiguous over gloo."""
    model = tiny_bert()
    torch.manual_seed(1)
    ids = torch.randint(0, VOCAB, (BATCH, SEQUENCE))
    graph = from_torch(model, (), example_kwargs={"input_ids": ids}, colocate_modules=4)
    cluster = Cluster.preset("a100-nvlink", 2)
    placement = CONTIGUOUS_RUNTIME_DEFAULTS["deepspeed-uniform"](graph, cluster, 0, step=Step(MICROBATCHES))
    plan = plan_from_placement(graph, placement, cluster, microbatches=MICROBATCHES)
    assert plan.num_stages == 2 and [g.parameter for g in plan.tied] == ["bert.embeddings.word_embeddings.weight"]
    assert_an_sgd_step_matches_the_model(model, ids, plan)


def test_a_plan_round_trips_through_json_and_states_what_it_leaves_out(gpt2_and_graph, tmp_path):
    _, _, graph = gpt2_and_graph
    cluster = Cluster.preset("a100-nvlink", 8)
    placement = CONTIGUOUS_PLACERS["split"](graph, cluster, 0)
    plan = plan_from_placement(graph, placement, cluster, microbatches=MICROBATCHES, schedule="gpipe")
    plan.to_json(tmp_path / "plan.json")
    assert PipelinePlan.from_json(tmp_path / "plan.json") == plan
    assert plan.microbatches == MICROBATCHES and plan.schedule == "gpipe" and plan.batch == BATCH
    assert plan.simulated_step_seconds > 0 and all(s.simulated_peak_memory > 0 for s in plan.stages)
    assert [s.rank for s in plan.stages] == list(range(plan.num_stages))
    assert plan.parts[-1] == len(plan.layers)
    if plan.num_stages < 8:  # unused devices are stated, never silently dropped
        assert plan.unused_devices and any(note.endswith(" none") and "hold" in note for note in plan.notes)


def blocks(graph, devices):
    """The 4 blocks on ``devices`` stages in equal shares; the embeddings with the first, the head with the last."""
    layer = -1

    def device(name):
        nonlocal layer
        if name.startswith("module:transformer.h."):
            layer = int(name.split(".")[2])
        return max(layer, 0) * devices // 4

    return by_units(graph, device)


def by_units(graph, device_of_unit):
    """A placement giving each unit ``device_of_unit(its name)``."""
    return graph.expand_unit_placement(np.array([device_of_unit(name) for name in graph.unit_names]))


def test_a_stage_without_parameters_is_stated_in_the_plan_and_no_placer_makes_one(gpt2_and_graph):
    _, _, graph = gpt2_and_graph
    cluster = Cluster.preset("a100-nvlink", 3)
    after_drop = False

    def device(name):  # stage 1 is the dropout alone
        nonlocal after_drop
        if name == "module:transformer.drop":
            after_drop = True
            return 1
        return 2 if after_drop else 0

    plan = plan_from_placement(graph, by_units(graph, device), cluster)
    assert plan.stages_without_parameters == [1]
    assert any(note.startswith("stage 1 (device 1) holds no parameters") for note in plan.notes)
    for name in ("split", "m-topo", "heft", "round-robin", "metis"):
        placement = CONTIGUOUS_PLACERS[name](graph, Cluster.preset("a100-nvlink", 16), 0)
        assert not plan_from_placement(graph, placement, Cluster.preset("a100-nvlink", 16)).stages_without_parameters


def test_bad_plans_and_runs_are_one_error_each(gpt2_and_graph, tmp_path):
    model, ids, graph = gpt2_and_graph
    cluster = Cluster.preset("a100-nvlink", 2)
    placement = blocks(graph, 2)
    with pytest.raises(ValueError, match="is placed on device 1, cluster '1xa100-nvlink' has 1 devices"):
        plan_from_placement(graph, placement, Cluster.preset("a100-nvlink", 1))
    with pytest.raises(ValueError, match="microbatches 3 does not divide the batch of 8"):
        plan_from_placement(graph, placement, cluster, microbatches=3)
    plan = plan_from_placement(graph, placement, cluster, microbatches=2)
    with pytest.raises(ValueError, match="steps must be an integer >= 1, got 0"):
        run_pipeline(model, (), plan, example_kwargs={"input_ids": ids}, steps=0)
    other = torch.nn.Sequential(torch.nn.Linear(4, 4))
    with pytest.raises(ValueError, match="which model Sequential lacks: a plan of another model"):
        run_pipeline(other, (torch.randn(8, 4),), plan)
    for wrong in (tiny_gpt2(width=64), tiny_gpt2(layers=6)):  # the same module names: only the sizes tell
        with pytest.raises(ValueError, match=r"whose parameters take 213,760 bytes; model GPT2LMHeadModel has "
                                             r"[0-9,]+: a plan of another model"):
            run_pipeline(wrong, (), plan, example_kwargs={"input_ids": ids})
    data = plan.to_dict()
    for change, message in [(lambda d: d.update(schedule="zb-v"), "unknown schedule 'zb-v'"),
                            (lambda d: d["stages"][1].update(device=5), "stage 1 is on device 5, the plan's "
                                                                         "cluster has 2 devices"),
                            (lambda d: d.update(microbatches=0), "microbatches must be an integer >= 1"),
                            (lambda d: d.pop("stages"), "missing field 'stages'")]:
        broken = copy.deepcopy(data)
        change(broken)
        with pytest.raises(ValueError, match=message):
            PipelinePlan.from_dict(broken)


@pytest.mark.slow
def test_the_export_and_run_commands_launch_a_plan_and_refuse_bad_input_in_one_line(gpt2_and_graph, tmp_path,
                                                                                    capsys):
    import placement_env.__main__ as command
    from placement_env.cli import run_cli

    _, _, graph = gpt2_and_graph
    write_graph(graph, tmp_path / "gpt2.json.gz")
    write_placement(blocks(graph, 2), tmp_path / "p.json")
    write_placement(np.minimum(blocks(graph, 4), 3) + 4, tmp_path / "far.json")
    export = [sys.executable, "-m", "placement_env", "export", "--graph", str(tmp_path / "gpt2.json.gz"),
              "--devices", "4", "--format", "pipeline-plan", "--microbatches", "4"]
    done = subprocess.run([*export, "--placement", str(tmp_path / "p.json"), "--out", str(tmp_path / "plan.json")],
                          capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    plan = PipelinePlan.from_json(tmp_path / "plan.json")
    assert plan.num_stages == 2 and plan.unused_devices == [2, 3]
    done = subprocess.run([*export, "--placement", str(tmp_path / "far.json"), "--out", str(tmp_path / "x.json")],
                          capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 2 and done.stderr.startswith("error: node ") and "devices 0..3" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and not (tmp_path / "x.json").exists()
    run = [sys.executable, "-m", "placement_env", "run", "--plan", str(tmp_path / "plan.json")]
    done = subprocess.run([*run, "--model", "tests.test_pipeline_runner:tiny_gpt2_batch", "--steps", "2", "--sgd",
                           "0.1", "--out", str(tmp_path / "run.json")], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    measured = json.loads((tmp_path / "run.json").read_text())
    assert len(measured["steps"]) == 2 and len(measured["peak_memory"]) == 2 and len(measured["losses"]) == 2
    # a causal LM trains on next-token cross-entropy (about ln 64 = 4.2 at first), not on the sum of its logits
    assert "loss causal-lm" in done.stdout and "warning" not in done.stderr
    assert all(3.0 < loss < 5.5 for loss in measured["losses"]), measured["losses"]
    summed = subprocess.run([*run, "--model", "tests.test_pipeline_runner:tiny_gpt2_batch", "--steps", "1", "--sgd",
                             "0.1", "--loss", "sum"], capture_output=True, text=True, cwd=ROOT)
    assert summed.returncode == 0 and summed.stderr.startswith("warning: --sgd with the sum of the outputs")
    for bad, message in [(["--model", "no_such_module:f"], "cannot import 'no_such_module'"),
                         (["--model", "tests.test_pipeline_runner:nothing"], "has no function 'nothing'"),
                         (["--model", "tests.test_pipeline_runner:tiny_gpt2_batch", "--steps", "0"],
                          "--steps must be an integer >= 1, got 0")]:  # in this process: the same main, quicker
        capsys.readouterr()
        assert run_cli(functools.partial(command.main, [*run[3:], *bad])) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and message in err and len(err.strip().splitlines()) == 1, err


class RaisingGPT2(transformers.GPT2LMHeadModel):
    """GPT-2 whose forward raises: the plan fits it, the run fails."""

    def forward(self, *args, **kwargs):
        raise ValueError("this model refuses to run")


@pytest.mark.slow
def test_a_model_that_raises_is_one_error_naming_its_stage(gpt2_and_graph):
    model, ids, graph = gpt2_and_graph
    cluster = Cluster.preset("a100-nvlink", 2)
    plan = plan_from_placement(graph, blocks(graph, 2), cluster, microbatches=2)
    raising = RaisingGPT2(model.config)
    with pytest.raises(RuntimeError, match=r"^local worker [01] failed: .*this model refuses to run"):
        run_pipeline(raising, (), plan, example_kwargs={"input_ids": ids})


@pytest.mark.slow
def test_under_torchrun_each_rank_runs_its_stage_and_gets_the_whole_result(gpt2_and_graph, tmp_path):
    model, ids, graph = gpt2_and_graph
    plan = plan_from_placement(graph, blocks(graph, 2), Cluster.preset("a100-nvlink", 2), microbatches=MICROBATCHES)
    plan.to_json(tmp_path / "plan.json")
    from placement_env.runtime.local_workers import free_port

    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                           "--master_port", str(free_port()), "tests/torchrun_job.py", str(tmp_path / "plan.json"),
                           str(tmp_path / "result")], cwd=ROOT, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-3000:]
    targets = torch.roll(ids, -1, dims=1)
    reference, losses = reference_step(model, ids, targets, 0.1)
    expected = dict(reference.named_parameters())
    for rank in (0, 1):
        got = json.loads((tmp_path / f"result.{rank}.json").read_text())
        assert got["backend"] == "torchrun" and got["losses"][0] == pytest.approx(float(np.mean(losses)), rel=1e-5)
        for name, value in got["parameters"].items():
            np.testing.assert_allclose(np.array(value), expected[name].detach().numpy(), atol=1e-5, err_msg=name)


@pytest.mark.slow
def test_a_plan_of_two_replicas_ends_an_sgd_step_with_the_model_s_parameters(gpt2_and_graph):
    """2 stages x 2 replicas x 2 micro-batches on 4 local workers, a stage's replicas on neighbouring processes
    (its DeviceMesh [[0, 2], [1, 3]]): each replica on half of the batch, the replicas' gradients averaged, the
    tied embedding summed within each replica."""
    layout = "stages-across-nodes"
    from placement_env.plan.exports import device_mesh
    from placement_env.plan.planner import search_plan
    from placement_env.runtime.pipeline_runner import process_mesh

    model, ids, graph = gpt2_and_graph
    cluster = Cluster.preset("a100-nvlink", 4, per_node=2)
    plan = search_plan(graph, cluster, stages=2, replicas=2, microbatches=MICROBATCHES // 2, schedule="1f1b",
                         split="uniform", layout=layout).plan
    assert (plan.num_stages, plan.replicas) == (2, 2) and [g.stages for g in plan.tied] == [[0, 1]]
    assert [list(row) for row in process_mesh(plan)] == device_mesh(plan)["mesh"] == [[0, 2], [1, 3]]
    run = assert_an_sgd_step_matches_the_model(model, ids, plan)
    assert run.peak_memory.shape == (4,)


def test_plans_the_runner_cannot_run_are_one_error(gpt2_and_graph):

    from placement_env.plan.planner import search_plan

    model, ids, graph = gpt2_and_graph
    cluster = Cluster.preset("a100-nvlink", 4, per_node=2)
    unknown = replace(search_plan(graph, cluster, stages=2, replicas=2, microbatches=2, schedule="1f1b").plan,
                      schedule="zb-v")  # a schedule no table lists (the planner's own are all run)
    with pytest.raises(ValueError, match="the plan's schedule 'zb-v' is not one the runner knows"):
        run_pipeline(model, (), unknown, example_kwargs={"input_ids": ids})
    short = search_plan(graph, cluster, stages=2, replicas=2, microbatches=1, schedule="1f1b").plan
    with pytest.raises(ValueError, match="runs 1f1b with at least as many micro-batches as stages; this plan has 1 "
                                         "for 2 stages"):
        run_pipeline(model, (), short, example_kwargs={"input_ids": ids})
    plan = search_plan(graph, cluster, stages=2, replicas=2, microbatches=2, schedule="1f1b").plan
    flipped = replace(plan, stages=[replace(plan.stages[0], replica_devices=[1, 3], device=1),
                                    replace(plan.stages[1], replica_devices=[0, 2], device=0)])
    with pytest.raises(ValueError, match=r"replica 0's stages are on devices \[1, 0\]: the runner needs them in "
                                         "increasing order"):
        run_pipeline(model, (), flipped, example_kwargs={"input_ids": ids})


class _ListOfBlocks(torch.nn.Module):
    """A stem, then blocks held in an ``nn.ModuleList`` (never called itself: its parent iterates it)."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = torch.nn.Linear(8, 8)
        self.blocks = torch.nn.ModuleList([torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU())
                                           for _ in range(2)])

    def forward(self, x):
        x = self.stem(x)
        for block in self.blocks:
            x = x + block(x)
        return x


def test_a_stage_that_begins_at_a_module_list_begins_at_its_first_block():
    from placement_env.runtime.pipeline_runner import called_split_point

    torch.manual_seed(0)
    model, x = _ListOfBlocks(), torch.randn(4, 8)
    assert called_split_point(model, "blocks") == "blocks.0" and called_split_point(model, "stem") == "stem"
    graph = from_torch(model, (x,), colocate_modules=1)
    seen_blocks = False

    def device(name):  # the stem (and the input) on device 0, the blocks and what follows them on 1
        nonlocal seen_blocks
        seen_blocks = seen_blocks or name.startswith("module:blocks")
        return int(seen_blocks)

    placement = by_units(graph, device)
    plan = plan_from_placement(graph, placement, Cluster.preset("p100", 2), microbatches=2, schedule="gpipe")
    assert plan.split_spec == ["blocks.0"]  # the plan names the first block (the list is entered twice)

    by_hand = replace(plan, stages=[plan.stages[0], replace(plan.stages[1], begins_at="blocks")])
    assert by_hand.split_spec == ["blocks"]  # a plan written by hand: before, "the model splits into 1 stages"
    run = run_pipeline(model, (x,), by_hand, steps=1)
    assert run.peak_memory.shape == (2,) and np.isfinite(run.steps).all()


def test_the_pipeline_overheads_are_applied_by_hand_and_the_latency_fit_reaches_the_measured_step():
    from placement_env.graph.model import ComputationGraph, Edge, Node
    from placement_env.runtime.pipeline_calibration import message_latency
    from placement_env.runtime.runtime_overheads import RuntimeOverheads

    graph = ComputationGraph([Node("x", "input", 0.0, 100), Node("a", "matmul", 1e-3, 100, 10, module="a",
                                                                 fixed_cost=1e-4),
                              Node("b", "matmul", 2e-3, 0, 10, module="b")], [Edge("x", "a"), Edge("a", "b")],
                             name="g", batch=8)
    cluster = Cluster.preset("p100", 2)
    g, c = RuntimeOverheads(5e-5, 2e-3).applied(graph, cluster)
    assert g.cost.tolist() == pytest.approx([0.0, 1.05e-3, 2.05e-3])
    assert [n.fixed_cost or 0.0 for n in g.nodes] == pytest.approx([0.0, 1.5e-4, 5e-5])
    assert c.latency[0, 1] - cluster.latency[0, 1] == pytest.approx(2e-3) and np.array_equal(c.bandwidth,
                                                                                            cluster.bandwidth)
    placement = np.array([0, 0, 1])
    measured = 0.02
    latency = message_latency(graph, placement, cluster, 5e-5, measured, 4)
    g, c = RuntimeOverheads(5e-5, latency).applied(graph, cluster)
    assert plan_from_placement(g, placement, c, microbatches=4, schedule="gpipe").simulated_step_seconds == \
        pytest.approx(measured, rel=1e-6)
    assert message_latency(graph, placement, cluster, 5e-5, 1e-6, 4) == 0.0  # already slower than that


def test_the_per_model_overheads_count_each_crossing_tensor_once_a_side_and_the_fit_reaches_the_measured_step():
    from placement_env.graph.model import ComputationGraph, Edge, Node
    from placement_env.runtime.pipeline_calibration import tensor_cost
    from placement_env.runtime.runtime_overheads import RuntimeOverheads, crossing_tensors

    graph = ComputationGraph([Node("x", "input", 0.0, 100), Node("w", "parameter", 0.0, 40, 40),
                              Node("a", "matmul", 1e-3, 100, 10, module="a", fixed_cost=1e-4),
                              Node("b", "matmul", 2e-3, 0, 10, module="b"), Node("c", "add", 1e-3, 0, module="b")],
                             [Edge("x", "a"), Edge("w", "a"), Edge("w", "b"), Edge("a", "b"), Edge("a", "c")],
                             name="g", batch=8)
    placement = np.array([0, 0, 0, 1, 1])
    # a sends once to device 1 (read there by b and c), b and c receive one each; w is a parameter: no message
    assert crossing_tensors(graph, placement).tolist() == [0, 0, 1, 1, 1]
    cluster = Cluster.preset("p100", 2)
    g, c = RuntimeOverheads(5e-5, step_seconds=3e-3, tensor_seconds=1e-4).applied(graph, cluster, placement)
    assert g.cost.tolist() == pytest.approx([0.0, 0.0, 1e-3 + 5e-5 + 1e-4 + 3e-3, 2e-3 + 5e-5 + 1e-4,
                                             1e-3 + 5e-5 + 1e-4])  # the step's overhead once, on the first op
    assert [n.fixed_cost or 0.0 for n in g.nodes] == pytest.approx([0.0, 0.0, 2.5e-4, 1.5e-4, 1.5e-4])
    assert np.array_equal(c.latency, cluster.latency)
    with pytest.raises(ValueError, match="a device per op"):
        RuntimeOverheads(0.0, tensor_seconds=1e-4).applied(graph, cluster)
    overheads = RuntimeOverheads(5e-5, step_seconds=1e-3)
    measured = 0.03
    seconds = tensor_cost(graph, placement, cluster, overheads, measured, 4, "1f1b")
    g, c = replace(overheads, tensor_seconds=seconds).applied(graph, cluster, placement)
    step = Step(4, "1f1b")
    assert seconds > 0 and plan_from_placement(g, placement, c, step).simulated_step_seconds == pytest.approx(
        measured, rel=1e-6)


def test_the_two_point_fit_recovers_a_cost_per_tensor_and_one_per_step():
    from placement_env.graph.model import ComputationGraph, Edge, Node
    from placement_env.runtime.pipeline_calibration import tensor_and_step_cost
    from placement_env.runtime.runtime_overheads import RuntimeOverheads

    graph = ComputationGraph([Node("x", "input", 0.0, 100), Node("a", "matmul", 1e-3, 100, 10, module="a"),
                              Node("b", "matmul", 2e-3, 100, 10, module="b"), Node("c", "add", 1e-3, 0, module="c")],
                             [Edge("x", "a"), Edge("a", "b"), Edge("b", "c"), Edge("a", "c")], name="g", batch=8)
    placement = np.array([0, 0, 1, 1])
    cluster = Cluster.preset("p100", 2)
    base = RuntimeOverheads(5e-5)

    def simulated(tensor: float, step: float, m: int) -> float:
        g, c = replace(base, tensor_seconds=tensor, step_seconds=step).applied(graph, cluster, placement)
        return plan_from_placement(g, placement, c, microbatches=m, schedule="gpipe").simulated_step_seconds

    truth = (3e-4, 4e-3)  # made by the simulator: the fit finds them again
    measured = {m: simulated(*truth, m) for m in (2, 8)}
    assert tensor_and_step_cost(graph, placement, cluster, base, measured, "gpipe") == pytest.approx(truth, rel=1e-4)
    # a per-micro-batch cost alone, fitted at m = 2, overshoots at m = 8 when part of the step is paid once a step
    one = tensor_and_step_cost(graph, placement, cluster, base, {2: measured[2], 8: 10.0}, "gpipe")
    assert one[1] == 0.0 and simulated(one[0], 0.0, 8) > measured[8]
    # measured at m = 8 below what even a step cost alone gives: all of it a step's cost, no tensor cost
    tensor, step = tensor_and_step_cost(graph, placement, cluster, base, {2: measured[2], 8: 1e-6}, "gpipe")
    assert tensor == pytest.approx(0.0, abs=1e-9) and simulated(0.0, step, 2) == pytest.approx(measured[2], rel=1e-6)
    with pytest.raises(ValueError, match="two micro-batch counts, got \\[2\\]"):
        tensor_and_step_cost(graph, placement, cluster, base, {2: measured[2]}, "gpipe")
