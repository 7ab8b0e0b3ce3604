"""The planner of plans at scale (placement_env.plan.scale.planner) and its exports: fixed decisions are kept, the
plan is never behind a published configuration under its own simulator, no-plan errors name the real reason, and
each export says the plan in its runtime's words or refuses by name."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from placement_env import Parallelism
from placement_env.plan.scale import GPUS, GpuCluster, TransformerShape, simulate_scale
from placement_env.plan.scale.exports import deepspeed_config, device_mesh, megatron_arguments, torchtitan_toml
from placement_env.plan.scale.planner import search_scale_plan
from placement_env.plan.scale.published import read_published, simulate_published

PUBLISHED = Path(__file__).resolve().parents[2] / "shared" / "data" / "published"
GPT = TransformerShape(layers=30, hidden=3072, heads=32, tied_embeddings=True, name="GPT 3.6B")
CLUSTER = GpuCluster(GPUS["a100-80gb"], 64, 8, 12.5e9)


def test_every_fixed_decision_is_kept_and_simulated_as_simulate_scale_does():
    plan = search_scale_plan(GPT, CLUSTER, 512, tensor=2, pipeline=2, data=16, micro_batch=4, schedule="1f1b",
                             recompute="full", zero=1, sequence_parallel=True, order="tp-dp-pp")
    expected = Parallelism(pipeline=2, data=16, tensor=2, microbatches=8, recompute="full", zero=1,
                           sequence_parallel=True)
    assert plan.parallelism == expected and plan.micro_batch == 4 and plan.configurations == 1
    assert plan.step.seconds == simulate_scale(GPT, expected, CLUSTER, 512).seconds
    assert plan.lower_bound < plan.step.seconds


def test_the_open_plan_is_no_slower_than_any_fixed_one():
    best = search_scale_plan(GPT, CLUSTER, 512)
    assert best.step.fits and best.configurations > 100
    for fixed in ({"tensor": 8}, {"pipeline": 2, "schedule": "1f1b"}, {"zero": 3}, {"recompute": "full"}):
        assert best.step.seconds <= search_scale_plan(GPT, CLUSTER, 512, **fixed).step.seconds


@pytest.mark.skipif(not PUBLISHED.is_dir(), reason="the development set (../shared/data/published) is not here")
def test_the_planner_is_never_behind_a_published_configuration_on_the_same_gpus():
    runs = [r for r in read_published(PUBLISHED / "vtrain_a100_3.6b_18.4b.json") if r.shape.name == "GPT 3.6B"]
    plan = search_scale_plan(runs[0].shape, runs[0].cluster, runs[0].global_batch)
    for run in runs:
        assert plan.step.seconds <= simulate_published(run)[1].seconds, run.name


def test_no_plan_names_the_real_reason():
    with pytest.raises(ValueError, match="2 replicas do not divide the batch of 3"):
        search_scale_plan(GPT, GpuCluster(GPUS["a100-80gb"], 8), 3, tensor=2, data=2)
    with pytest.raises(ValueError, match="16 replicas x t8 x p1 = 128 GPUs of 64"):
        search_scale_plan(GPT, CLUSTER, 512, tensor=8, pipeline=1, data=16)
    huge = TransformerShape(layers=128, hidden=25600, heads=160, name="GPT 1T")
    with pytest.raises(ValueError, match=r"no plan of GPT 1T .* fits 8 x a100-80gb .* needs [0-9.]+ GiB more a GPU"):
        search_scale_plan(huge, GpuCluster(GPUS["a100-80gb"], 8), 8)
    with pytest.raises(ValueError, match="global_batch must be an integer >= 1, got 0"):
        search_scale_plan(GPT, CLUSTER, 0)
    # a fixed micro-batch count with the replicas open: replica counts it does not divide are skipped, not fatal
    plan = search_scale_plan(GPT, CLUSTER, 96, microbatches=4)
    assert plan.parallelism.microbatches == 4 and 96 % (plan.parallelism.data * 4) == 0


def test_fewer_replicas_than_the_gpus_allow_where_the_batch_needs_it():
    plan = search_scale_plan(GPT, CLUSTER, 48, tensor=1, pipeline=1)  # 64 replicas cannot share 48 sequences
    assert plan.parallelism.data == 48 and plan.parallelism.devices == 48


def _plan(**fixed):
    base = {"tensor": 2, "pipeline": 2, "data": 16, "micro_batch": 4, "schedule": "interleaved-1f1b",
            "virtual_stages": 3, "recompute": "selective", "zero": 1, "sequence_parallel": True, "order": "tp-dp-pp"}
    return search_scale_plan(GPT, CLUSTER, 512, **{**base, **fixed})


def test_megatron_arguments_say_the_whole_plan():
    args = megatron_arguments(_plan())["arguments"]
    assert args["--tensor-model-parallel-size"] == 2 and args["--pipeline-model-parallel-size"] == 2
    assert args["--num-layers-per-virtual-pipeline-stage"] == 5  # 30 layers / (2 x 3)
    assert args["--micro-batch-size"] == 4 and args["--global-batch-size"] == 512
    assert args["--sequence-parallel"] is True and args["--use-distributed-optimizer"] is True
    assert args["--recompute-granularity"] == "selective" and "--recompute-method" not in args
    full = megatron_arguments(_plan(recompute="full", schedule="1f1b", virtual_stages=None))["arguments"]
    assert (full["--recompute-method"], full["--recompute-num-layers"]) == ("uniform", 1)
    assert "--num-layers-per-virtual-pipeline-stage" not in full
    for fixed, named in (({"zero": 2}, "ZeRO 2"), ({"schedule": "zb-h1", "virtual_stages": None}, "schedule zb-h1"),
                         ({"order": "tp-pp-dp"}, "rank order tp-pp-dp")):
        with pytest.raises(ValueError, match=f"Megatron-LM cannot run this plan: {named}"):
            megatron_arguments(_plan(**fixed))


def test_torchtitan_deepspeed_and_the_mesh():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11's TOML reader
    text = torchtitan_toml(_plan(zero=3))
    parsed = tomllib.loads(text)
    assert parsed["parallelism"]["data_parallel_shard_degree"] == 16
    assert parsed["parallelism"]["fsdp_reshard_after_forward"] == "always"
    assert parsed["parallelism"]["pipeline_parallel_schedule"] == "Interleaved1F1B"
    assert parsed["parallelism"]["pipeline_parallel_layers_per_stage"] == 5
    assert parsed["training"] == {"local_batch_size": 32, "global_batch_size": 512, "seq_len": 2048}
    assert parsed["activation_checkpoint"]["mode"] == "selective"
    with pytest.raises(ValueError, match="torchtitan cannot run this plan: ZeRO 1"):
        torchtitan_toml(_plan())
    config = deepspeed_config(_plan(schedule="1f1b", virtual_stages=None, zero=1))
    c = config["config"]
    assert c["train_batch_size"] == c["train_micro_batch_size_per_gpu"] * c["gradient_accumulation_steps"] * 16
    assert c["zero_optimization"]["stage"] == 1 and config["pipeline_module"]["num_stages"] == 2
    with pytest.raises(ValueError, match="DeepSpeed cannot run this plan: a pipeline with ZeRO 3"):
        deepspeed_config(_plan(zero=3, schedule="1f1b", virtual_stages=None))
    mesh = device_mesh(_plan())
    assert mesh["mesh_dim_names"] == ["pp", "dp", "tp"]
    assert mesh["mesh"][1][0] == [32, 33] and mesh["mesh"][0][1] == [2, 3]  # tensor ranks neighbours, then data
    other = device_mesh(_plan(order="tp-pp-dp"))
    assert other["mesh_dim_names"] == ["dp", "pp", "tp"] and other["mesh"][0][1] == [2, 3]


def test_the_plan_command_at_scale(tmp_path):
    shape = tmp_path / "config.json"
    shape.write_text(json.dumps({"num_hidden_layers": 30, "hidden_size": 3072, "num_attention_heads": 32,
                                 "vocab_size": 51200, "max_position_embeddings": 2048, "n_positions": 2048,
                                 "tie_word_embeddings": True}))
    out = tmp_path / "megatron.json"
    run = subprocess.run([sys.executable, "-m", "placement_env", "plan", "--shape", str(shape), "--devices", "64",
                          "--per-node", "8", "--device-kind", "a100-nvlink", "--batch", "512", "--tensor", "2",
                          "--export", "megatron", "--out", str(out)], capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stderr
    assert "plan         t2 x" in run.stdout and "MFU" in run.stdout
    assert json.loads(out.read_text())["arguments"]["--tensor-model-parallel-size"] == 2
    for argv, named in ((["--graph", "gpt2", "--zero", "1"], "--zero needs --shape"),
                        (["--shape", str(shape), "--device-kind", "p100", "--batch", "8"], "device kind 'p100' has "
                                                                                            "no GPU model"),
                        (["--shape", "{\"layers\": 2}", "--batch", "8", "--device-kind", "a100-nvlink"],
                         "a shape needs layers, hidden and heads"),
                        (["--shape", str(tmp_path / "missing.json"), "--batch", "8"], "cannot read it")):
        bad = subprocess.run([sys.executable, "-m", "placement_env", "plan", *argv], capture_output=True, text=True,
                             check=False)
        assert bad.returncode == 2 and bad.stderr.startswith("error:") and named in bad.stderr, bad.stderr
        assert len(bad.stderr.strip().splitlines()) == 1
