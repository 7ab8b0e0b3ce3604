"""The runner runs what the planner picks (issue 65 points 1 and 3): interleaved 1F1B, ZB-H1 and recomputation,
each an SGD step within 1e-5 of the unpipelined one; an optimizer and a loss given as lambdas and closures."""

from __future__ import annotations

import copy
import functools

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import torch.nn.functional as F  # noqa: E402

from placement_env import Cluster, from_torch, plan_from_placement, run_pipeline  # noqa: E402
from tests.test_pipeline_runner import (  # noqa: E402
    BATCH,
    MICROBATCHES,
    SEQUENCE,
    VOCAB,
    assert_an_sgd_step_matches_the_model,
    blocks,
    tiny_gpt2,
)


@pytest.fixture(scope="module")
def gpt2_and_graph():
    model = tiny_gpt2()
    torch.manual_seed(1)
    ids = torch.randint(0, VOCAB, (BATCH, SEQUENCE))
    return model, ids, from_torch(model, (), example_kwargs={"input_ids": ids}, colocate_modules=3)


def test_an_optimizer_and_a_loss_written_as_lambdas_and_closures_run(gpt2_and_graph):
    """Issue 65 point 3: ``optimizer=lambda ps: AdamW(ps, lr=1e-3)`` and a loss closing over a local value reach the
    stage processes (cloudpickle), and the AdamW step is the unpipelined one."""
    model, ids, graph = gpt2_and_graph
    plan = plan_from_placement(graph, blocks(graph, 2), Cluster.preset("a100-nvlink", 2), microbatches=MICROBATCHES)
    vocabulary = VOCAB  # a local the loss closes over

    def loss(logits_or_output, target):
        logits = getattr(logits_or_output, "logits", logits_or_output)
        return F.cross_entropy(logits.reshape(-1, vocabulary), target.reshape(-1))

    targets = torch.roll(ids, -1, dims=1)
    run = run_pipeline(model, (), plan, example_kwargs={"input_ids": ids}, targets=targets, loss_fn=loss,
                       optimizer=lambda ps: torch.optim.AdamW(ps, lr=1e-3), steps=1)
    reference = copy.deepcopy(model)
    losses = [loss(reference(input_ids=x), t) for x, t in zip(ids.chunk(MICROBATCHES), targets.chunk(MICROBATCHES))]
    torch.stack(losses).mean().backward()
    torch.optim.AdamW(reference.parameters(), lr=1e-3).step()
    assert run.losses[0] == pytest.approx(float(torch.stack(losses).mean().detach()), rel=1e-5)
    expected = dict(reference.named_parameters())
    for name, value in run.parameters.items():
        np.testing.assert_allclose(value, expected[name].detach().numpy(), atol=1e-5, err_msg=name)
    lock = __import__("threading").Lock()

    def holding_a_lock(ps):  # a closure over a lock: nothing can pickle it
        with lock:
            return torch.optim.SGD(ps, lr=0.1)

    with pytest.raises(ValueError, match="optimizer cannot be sent to the worker processes"):
        run_pipeline(model, (), plan, example_kwargs={"input_ids": ids}, optimizer=holding_a_lock)


@pytest.mark.parametrize(("schedule", "recompute"), [("zb-h1", False), ("1f1b", True), ("gpipe", True)])
def test_the_planner_s_schedules_and_recomputation_run_and_end_the_unpipelined_step(gpt2_and_graph, schedule,
                                                                                    recompute):
    """Issue 65 point 1: ZB-H1 and recomputation (torch.utils.checkpoint), each an SGD step of a tied GPT-2 within
    1e-5 of the unpipelined one."""
    from placement_env.plan.planner import search_plan

    model, ids, graph = gpt2_and_graph
    plan = search_plan(graph, Cluster.preset("a100-nvlink", 2), stages=2, replicas=1, microbatches=MICROBATCHES,
                       schedule=schedule, virtual_stages=1, recompute=recompute).plan
    assert all(s.recompute == recompute for s in plan.stages)
    assert_an_sgd_step_matches_the_model(model, ids, plan)


def tiny_mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.Tanh()) for _ in range(8)])


def mse(output, target):
    """Mean squared error of one micro-batch (module level: the workers import it)."""
    return F.mse_loss(output, target)


@pytest.mark.parametrize("recompute", [False, True])
def test_interleaved_1f1b_runs_two_chunks_a_rank_and_ends_the_unpipelined_step(recompute):
    """Issue 65 point 1: interleaved 1F1B (ScheduleInterleaved1F1B, two chunks on each of two ranks), with and
    without recomputation: the SGD step of an 8-block MLP within 1e-5 of the unpipelined one."""
    from placement_env.plan.planner import search_plan

    model = tiny_mlp()
    x, targets = torch.randn(8, 16), torch.randn(8, 16)
    graph = from_torch(model, (x,), colocate_modules=1)
    plan = search_plan(graph, Cluster.preset("a100-nvlink", 2), stages=2, replicas=1, microbatches=4,
                       schedule="interleaved-1f1b", virtual_stages=2, recompute=recompute).plan
    assert plan.virtual_stages == 2 and len(plan.stages) == 4
    run = run_pipeline(model, (x,), plan, targets=targets, loss_fn=mse,
                       optimizer=functools.partial(torch.optim.SGD, lr=0.1), steps=1)
    reference = copy.deepcopy(model)
    losses = [mse(reference(a), t) for a, t in zip(x.chunk(4), targets.chunk(4))]
    torch.stack(losses).mean().backward()
    with torch.no_grad():
        for p in reference.parameters():
            p -= 0.1 * p.grad
    assert run.losses[0] == pytest.approx(float(torch.stack(losses).mean().detach()), rel=1e-5)
    expected = dict(reference.named_parameters())
    assert set(run.parameters) == set(expected)
    for name, value in run.parameters.items():
        np.testing.assert_allclose(value, expected[name].detach().numpy(), atol=1e-5, err_msg=name)


def test_interleaving_a_model_with_a_skip_connection_is_refused_by_name(gpt2_and_graph):
    from placement_env.plan.planner import search_plan

    model, ids, graph = gpt2_and_graph
    plan = search_plan(graph, Cluster.preset("a100-nvlink", 2), stages=2, replicas=1, microbatches=MICROBATCHES,
                       schedule="interleaved-1f1b", virtual_stages=2).plan
    with pytest.raises(RuntimeError, match="schedule interleaved-1f1b: chunk [0-9]+ takes an input from chunk"):
        run_pipeline(model, (), plan, example_kwargs={"input_ids": ids})
