"""One description of the parallel step (placement_env.parallelism), one schedule table, one mesh, the front door
of plans (placement_env and placement_env.plan export the user's verbs) and the old names kept for a release."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import placement_env
import placement_env.plan as plan_package
from baselines import place
from placement_env import Cluster, Parallelism, Step, load_graph, plan_from_placement, simulate
from placement_env.parallelism import SCHEDULES, data_pipeline_mesh, schedules_for
from placement_env.plan.schedules import PLAN_SCHEDULES, SPLIT_BACKWARD
from placement_env.sim.pipeline import SCHEDULES as SIMULATOR_SCHEDULES


@pytest.mark.parametrize(("fields", "named"), [
    ({"pipeline": 0}, "pipeline must be an integer >= 1, got 0"),
    ({"data": 2.0}, "data must be an integer >= 1, got 2.0"),
    ({"tensor": True}, "tensor must be an integer >= 1, got True"),
    ({"microbatches": -1}, "microbatches must be"),
    ({"schedule": "1F1B"}, "unknown schedule '1F1B'"),
    ({"schedule": "interleaved-1f1b", "pipeline": 2, "microbatches": 4}, "needs 2 or more virtual stages"),
    ({"schedule": "interleaved-1f1b", "pipeline": 4, "microbatches": 6, "virtual_stages": 2}, "multiple of the pipe"),
    ({"schedule": "gpipe", "virtual_stages": 2}, "runs one chunk a rank, got 2 virtual stages"),
    ({"recompute": "all"}, "unknown recompute 'all'"),
    ({"zero": 4}, "zero must be a ZeRO stage 0, 1, 2, 3, got 4"),
    ({"zero": False}, "zero must be a ZeRO stage"),
    ({"sequence_parallel": True}, "needs tensor >= 2"),
    ({"sequence_parallel": 1, "tensor": 2}, "sequence_parallel must be True or False"),
])
def test_a_parallelism_checks_itself_when_made_and_names_the_bad_field(fields, named):
    with pytest.raises(ValueError, match=named.replace("(", r"\(")):
        Parallelism(**fields)


def test_a_parallelism_counts_its_ranks_chunks_and_micro_batch_size():
    p = Parallelism(pipeline=4, data=8, tensor=2, microbatches=16, schedule="interleaved-1f1b", virtual_stages=2,
                    recompute="selective", zero=1, sequence_parallel=True)
    assert p.devices == 64 and p.chunks == 8
    assert p.check_batch(512) == 4  # 512 / (8 x 16)
    with pytest.raises(ValueError, match="8 replicas x 16 micro-batches = 128 do not divide the batch of 100"):
        p.check_batch(100)
    assert p.describe() == ("t2 x p4 x d8, 16 micro-batches, interleaved-1f1b v=2, selective recomputation, ZeRO-1, "
                            "sequence parallel")


def test_one_schedule_table_gives_every_user_its_schedules():
    assert SIMULATOR_SCHEDULES == schedules_for("simulator") == ("1f1b", "gpipe")
    assert PLAN_SCHEDULES == schedules_for("planner") == ("1f1b", "gpipe", "interleaved-1f1b", "zb-h1")
    assert SPLIT_BACKWARD == ("zb-h1",)
    assert list(SCHEDULES)[0] == "1f1b"
    pytest.importorskip("torch")
    from torch.distributed import pipelining

    from placement_env.runtime.pipeline_runner import SCHEDULE_CLASSES
    assert SCHEDULE_CLASSES == {"1f1b": "Schedule1F1B", "gpipe": "ScheduleGPipe",
                                "interleaved-1f1b": "ScheduleInterleaved1F1B",
                                "zb-h1": "ScheduleInterleavedZeroBubble"}
    for row in SCHEDULES.values():  # every class the table names is torch's own
        assert row.runner is not None and hasattr(pipelining, row.runner)


def test_the_data_pipeline_mesh_is_built_once_from_a_plan_s_devices():
    devices = [[0, 2, 4], [1, 3, 5]]  # rank s of replica r: devices[s][r]; S = 2, D = 3
    assert data_pipeline_mesh(devices) == ((0, 1), (2, 3), (4, 5))


def test_the_placer_and_the_plan_take_the_same_step_object():
    graph, cluster = load_graph("gpt2"), Cluster.preset("a100-nvlink", 2)
    step = Parallelism(pipeline=2, microbatches=4, schedule="gpipe")
    assert Step.of(step) == Step(4, "gpipe")
    placement = place(graph, cluster, "split", step=step, contiguous=True)
    np.testing.assert_array_equal(placement, place(graph, cluster, "split", step=Step(4, "gpipe"), contiguous=True))
    by_object = plan_from_placement(graph, placement, cluster, step)
    by_fields = plan_from_placement(graph, placement, cluster, microbatches=4, schedule="gpipe")
    assert by_object == by_fields and by_object.microbatches == 4 and by_object.schedule == "gpipe"
    with pytest.raises(ValueError, match="give the step once"):
        plan_from_placement(graph, placement, cluster, step, microbatches=4)
    assert simulate(graph, placement, cluster, step=step).makespan == simulate(
        graph, placement, cluster, microbatches=4, schedule="gpipe").makespan
    with pytest.raises(ValueError, match="give the step once"):
        simulate(graph, placement, cluster, microbatches=4, step=step)
    with pytest.raises(TypeError, match="step must be a Step"):
        Step.of((4, "gpipe"))


def test_the_user_s_verbs_are_exported_from_placement_env_and_placement_env_plan():
    for name in ("Parallelism", "SCHEDULES", "search_plan", "hand_plan", "SearchedPlan", "plan_from_placement",
                 "PipelinePlan", "simulate_plan"):
        assert name in placement_env.__all__ and name in plan_package.__all__
        assert getattr(placement_env, name) is getattr(plan_package, name)
    for name in ("Step", "run_pipeline", "PipelineRun"):
        assert name in placement_env.__all__ and getattr(placement_env, name) is not None
    assert len(placement_env.__all__) == len(set(placement_env.__all__))


@pytest.mark.parametrize(("module", "old", "new"), [
    ("placement_env.plan", "plan_pipeline", "search_plan"),
    ("placement_env.plan", "pipeline_plan", "plan_from_placement"),
    ("placement_env.plan", "PlannedPipeline", "SearchedPlan"),
    ("placement_env.plan.planner", "plan_pipeline", "search_plan"),
    ("placement_env.plan.planner", "PlannedPipeline", "SearchedPlan"),
    ("placement_env.plan.pipeline_plan", "pipeline_plan", "plan_from_placement"),
])
def test_the_old_names_still_work_for_a_release_and_say_what_to_use(module, old, new):
    import importlib
    package = importlib.import_module(module)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        value = getattr(package, old)
        if callable(value) and not isinstance(value, type):
            graph, cluster = load_graph("gpt2"), Cluster.preset("a100-nvlink", 2)
            if new == "search_plan":
                value(graph, cluster, stages=2, replicas=1, microbatches=2, schedule="1f1b", split="uniform")
            else:
                value(graph, np.zeros(graph.num_nodes, dtype=np.int64), cluster)
        else:
            assert value is getattr(plan_package, new)
    assert any(issubclass(w.category, DeprecationWarning) and new in str(w.message) for w in caught)
