"""Tensor and sharded data parallelism that run (issue 65 points 1-2; the pipelines below): a small Llama with its
own tensor-parallel plan, as tensor ranks alone, as FSDP2 ZeRO 2 and 3, ZeRO 1 and plain replicas, and as tensor x
data together, each ending one AdamW step with every parameter within 1e-5 of the same step run whole (fp32), and
with its loss; each rank holds its share of the parameters (what the sharding leaves it)."""

from __future__ import annotations

import copy

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from placement_env import Parallelism  # noqa: E402
from placement_env.runtime.fused_layers import linear_layers  # noqa: E402
from placement_env.runtime.live_bytes import LiveBytes  # noqa: E402
from placement_env.runtime.losses import causal_lm_loss  # noqa: E402
from placement_env.runtime.parallel_runner import run_parallel  # noqa: E402
from placement_env.runtime.recomputation import recompute_layers  # noqa: E402
from placement_env.runtime.tensor_plans import local_heads, sequence_plan, tensor_plan  # noqa: E402

VOCAB, BATCH, SEQUENCE = 64, 8, 8


def tiny_llama(layers: int = 2):
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=layers,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=16,
                                      use_cache=False)
    return transformers.LlamaForCausalLM(config).train()


def tiny_gpt2(layers: int = 2):
    """A GPT-2 with tied embeddings (lm_head is wte), fused query-key-value Conv1D layers, no dropout."""
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=layers, n_embd=32, n_head=4, vocab_size=VOCAB, n_positions=16,
                                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0)
    return transformers.GPT2LMHeadModel(config).train()


def tiny_opt(layers: int = 2):
    """An OPT (transformers' ``OPTForCausalLM``, not of the Llama family): learned positions called with the
    position ids, ``out_proj``, ``fc1`` and ``fc2``, the output layer tied to the token embedding, no dropout."""
    torch.manual_seed(0)
    config = transformers.OPTConfig(vocab_size=VOCAB, hidden_size=32, ffn_dim=64, num_hidden_layers=layers,
                                    num_attention_heads=4, max_position_embeddings=16, dropout=0.0,
                                    attention_dropout=0.0, activation_dropout=0.0, layerdrop=0.0, use_cache=False)
    return transformers.OPTForCausalLM(config).train()


MODELS = {"llama": tiny_llama, "gpt2": tiny_gpt2, "opt": tiny_opt}


def adamw(parameters):
    """AdamW with eps 1e-6: its first step moves a parameter by lr g / (|g| + eps), which for a gradient near eps
    turns fp32 summation-order noise in g into a difference of lr itself (a GPT-2 gradient of 6.6e-9 did so at
    the default 1e-8); at 1e-6 the comparison within 1e-5 is well posed, and a missing reduction still moves
    every parameter by about lr."""
    return torch.optim.AdamW(parameters, lr=1e-3, eps=1e-6)


def whole_step(model, ids, replicas, microbatches, mixed=False):
    """The same AdamW step run whole: the mean over replicas and micro-batches of each share's loss (``mixed``: each
    forward and loss under bf16 autocast, the backward outside it)."""
    reference = copy.deepcopy(model)
    shares = [part for replica in ids.chunk(replicas) for part in replica.chunk(microbatches)]
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=mixed):
        losses = [causal_lm_loss(reference(input_ids=x), x) for x in shares]
    torch.stack(losses).mean().backward()
    adamw(reference.parameters()).step()
    return reference, float(torch.stack(losses).mean().detach())


def assert_the_whole_step(model, ids, p):
    """``run_parallel`` of one AdamW step as ``p`` says: its loss and every parameter within 1e-5 of the whole
    step's (:func:`whole_step`); returns the run."""
    run = run_parallel(model, (), p, example_kwargs={"input_ids": ids}, targets=ids, loss_fn=causal_lm_loss,
                       optimizer=adamw)
    reference, loss = whole_step(model, ids, p.data, p.microbatches)
    assert run.losses[0] == pytest.approx(loss, rel=1e-5)
    expected = dict(reference.named_parameters())
    assert set(run.parameters) == set(expected)
    for name, value in run.parameters.items():
        np.testing.assert_allclose(value, expected[name].detach().numpy(), atol=1e-5, err_msg=name)
    return run


@pytest.mark.parametrize(("family", "tensor", "data", "zero", "microbatches", "sequence"), [
    ("llama", 2, 1, 0, 1, False),   # tensor parallelism alone
    # GPT-2's fused Conv1D layers, laid out for two tensor ranks (slow: the sequence-parallel case below lays them
    # out too)
    pytest.param("gpt2", 2, 1, 0, 1, False, marks=pytest.mark.slow),
    ("llama", 2, 1, 0, 1, True),    # and sequence parallelism
    ("gpt2", 2, 1, 0, 1, True),     # GPT-2's too: its learned positions added before the sequence is split
    ("llama", 1, 2, 0, 2, False),   # plain replicas, gradient accumulation
    ("llama", 1, 2, 1, 1, False),   # ZeRO 1: ZeroRedundancyOptimizer
    ("gpt2", 1, 2, 3, 1, False),    # FSDP2, resharded after the forward, with a tied output layer
    # tensor (sequence parallel) x data with FSDP2 (ZeRO 2): four workers (slow: the default suite runs sequence
    # parallelism on two and FSDP2's ZeRO 2 in the 2 x 2 x 2 case)
    pytest.param("llama", 2, 2, 2, 1, True, marks=pytest.mark.slow),
    ("opt", 2, 1, 0, 1, False),     # OPT: out_proj split by rows beside its q_proj
])
def test_a_parallel_adamw_step_is_the_whole_one(family, tensor, data, zero, microbatches, sequence):
    model = MODELS[family]()
    ids = torch.randint(0, VOCAB, (BATCH, SEQUENCE), generator=torch.Generator().manual_seed(1))
    p = Parallelism(tensor=tensor, data=data, zero=zero, microbatches=microbatches, sequence_parallel=sequence)
    run = assert_the_whole_step(model, ids, p)
    whole = sum(q.numel() * q.element_size() for q in model.parameters())
    if tensor > 1 or zero >= 2:  # the sharding holds: no rank keeps the whole model
        assert max(run.held_bytes) < whole
    else:
        assert run.held_bytes == [whole] * data


def test_the_tensor_plan_is_the_model_s_own_or_refused_by_name():
    plan = tensor_plan(tiny_llama())
    assert sorted(type(v).__name__ for k, v in plan.items() if k.startswith("model.layers.0.")) == [
        "ColwiseParallel"] * 5 + ["RowwiseParallel"] * 2
    gpt2 = tiny_gpt2(layers=1)
    with pytest.raises(ValueError, match="module 'transformer.h.0.attn.c_attn' cannot be split"):
        tensor_plan(gpt2)  # fused and a Conv1D: laid out first (linear_layers), as run_parallel does
    linear_layers(gpt2, 2)
    assert {k: type(v).__name__ for k, v in tensor_plan(gpt2).items()} == {
        "transformer.h.0.attn.c_attn": "ColwiseParallel", "transformer.h.0.attn.c_proj": "RowwiseParallel",
        "transformer.h.0.mlp.c_fc": "ColwiseParallel", "transformer.h.0.mlp.c_proj": "RowwiseParallel"}
    with pytest.raises(ValueError, match="module 'transformer.h.0.attn.c_attn' holds 4 attention heads"):
        linear_layers(tiny_gpt2(layers=1), 8)
    sequence = {k: type(v).__name__ for k, v in sequence_plan(gpt2).items()}
    assert sequence == {
        "transformer.drop": "PrepareModuleOutput", "transformer.ln_f": "SequenceParallel",
        "lm_head": "PrepareModuleInput",  # tied to wte: both stay whole, the output layer takes the whole sequence
        "transformer.h.0.ln_1": "SequenceParallel", "transformer.h.0.ln_2": "SequenceParallel",
        "transformer.h.0.attn": "PrepareModuleInput", "transformer.h.0.mlp": "PrepareModuleInput",
        "transformer.h.0.attn.c_attn": "ColwiseParallel", "transformer.h.0.attn.c_proj": "RowwiseParallel",
        "transformer.h.0.mlp.c_fc": "ColwiseParallel", "transformer.h.0.mlp.c_proj": "RowwiseParallel"}
    mlp = torch.nn.Sequential(torch.nn.Linear(4, 4))
    mlp.add_module("fc1", torch.nn.Linear(4, 8))
    with pytest.raises(ValueError, match="sequence parallelism needs a decoder named as transformers' Llama family"):
        sequence_plan(mlp)
    opt = tiny_opt(layers=1)  # OPT's output projection split by rows beside its q_proj; its heads counted per rank
    layer = "model.decoder.layers.0."
    assert {k: type(v).__name__ for k, v in tensor_plan(opt).items()} == {
        **{f"{layer}self_attn.{n}": "ColwiseParallel" for n in ("q_proj", "k_proj", "v_proj")},
        f"{layer}self_attn.out_proj": "RowwiseParallel", f"{layer}fc1": "ColwiseParallel",
        f"{layer}fc2": "RowwiseParallel"}
    assert local_heads(opt, 2) == 1 and opt.model.decoder.layers[0].self_attn.num_heads == 2
    with pytest.raises(ValueError, match="sequence parallelism needs a decoder named as transformers' Llama family"):
        sequence_plan(tiny_opt(layers=1))
    attention = torch.nn.Module()  # an nn.MultiheadAttention's out_proj reads its own unsplit attention: kept whole
    attention.attn = torch.nn.MultiheadAttention(8, 2)
    attention.fc1, attention.fc2 = torch.nn.Linear(8, 16), torch.nn.Linear(16, 8)
    assert sorted(tensor_plan(attention)) == ["fc1", "fc2"]


def test_what_it_does_not_run_is_refused_before_any_worker_starts():
    model = tiny_llama()
    ids = torch.randint(0, VOCAB, (BATCH, SEQUENCE))
    mlp = torch.nn.Sequential(torch.nn.Linear(4, 4))
    with pytest.raises(ValueError, match="model Sequential is not one: run its pipeline with\n? ?run_pipeline"):
        run_parallel(mlp, (torch.randn(8, 4),), Parallelism(pipeline=2, microbatches=2))
    for p, named in ((Parallelism(pipeline=4, microbatches=4), r"4 pipeline chunks \(4 ranks x 1\) for 2 layers"),
                     (Parallelism(pipeline=2, microbatches=2, schedule="interleaved-1f1b", virtual_stages=2),
                      r"4 pipeline chunks \(2 ranks x 2\) for 2 layers"),
                     (Parallelism(data=3), "3 replicas x 1 micro-batches = 3 do not divide the batch of 8"),
                     (Parallelism(tensor=4), r"4 tensor ranks do not divide the model's 2 heads \(num_key_value"),
                     (Parallelism(tensor=3), r"3 tensor ranks do not divide the model's 4 heads \(num_attention")):
        with pytest.raises(ValueError, match=named):
            run_parallel(model, (), p, example_kwargs={"input_ids": ids})


def tiny_llama_batch():
    """``python -m placement_env run --model tests.test_parallel_runner:tiny_llama_batch``: the model and a batch."""
    return tiny_llama(), (), {"input_ids": torch.randint(0, VOCAB, (BATCH, SEQUENCE),
                                                         generator=torch.Generator().manual_seed(1))}


def test_a_plan_at_scale_runs_from_the_command_line(tmp_path):
    import json
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    shape = json.dumps({"num_hidden_layers": 2, "hidden_size": 32, "intermediate_size": 64,
                        "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": VOCAB,
                        "max_position_embeddings": 16, "hidden_act": "silu", "rope_theta": 10000.0})
    plan = tmp_path / "plan.json"
    made = subprocess.run([sys.executable, "-m", "placement_env", "plan", "--shape", shape, "--devices", "2",
                           "--per-node", "2", "--device-kind", "a100-nvlink", "--batch", str(BATCH), "--tensor", "1",
                           "--replicas", "2", "--stages", "1", "--microbatches", "1", "--zero", "2",
                           "--sequence-parallel", "off", "--recompute", "none", "--out", str(plan)],
                          capture_output=True, text=True, cwd=root, check=False)
    assert made.returncode == 0, made.stderr
    out = tmp_path / "run.json"
    ran = subprocess.run([sys.executable, "-m", "placement_env", "run", "--plan", str(plan), "--model",
                          "tests.test_parallel_runner:tiny_llama_batch", "--steps", "2", "--sgd", "0.1",
                          "--precision", "bf16-mixed", "--out", str(out)],
                         capture_output=True, text=True, cwd=root, check=False)
    assert ran.returncode == 0, ran.stderr
    assert "t1 x p1 x d2" in ran.stdout and "ZeRO-2" in ran.stdout and "loss causal-lm" in ran.stdout
    losses = [float(x) for x in ran.stdout.split("losses")[1].splitlines()[0].split(",")]
    assert len(losses) == 2 and losses[1] < losses[0] < 5.5  # cross-entropy about ln 64, learning
    written = json.loads(out.read_text())
    assert written["precision"] == "bf16-mixed" and written["losses"] == pytest.approx(losses, rel=1e-4)
    assert written["peak_bytes"] is None  # no CUDA allocator to read on CPU
    pipeline_plan = tmp_path / "pipeline.json"
    pipeline_plan.write_text(json.dumps({"format": "placement_env.pipeline_plan/1"}))
    refused = subprocess.run([sys.executable, "-m", "placement_env", "run", "--plan", str(pipeline_plan), "--model",
                              "tests.test_parallel_runner:tiny_llama_batch", "--cuda"],
                             capture_output=True, text=True, cwd=root, check=False)
    assert refused.returncode == 2 and refused.stderr.startswith("error: --cuda and --precision apply to a plan at "
                                                                 "scale"), refused.stderr


def test_under_torchrun_each_rank_runs_its_part_of_a_plan_at_scale_from_the_command_line(tmp_path):
    """``torchrun ... -m placement_env run``: each process is one rank of a 2-stage pipeline (run_parallel reads
    RANK and WORLD_SIZE), every rank reports the whole run, rank 0 writes it; its first loss is the whole model's."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    from placement_env.runtime.local_workers import free_port

    root = Path(__file__).resolve().parents[1]
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"format": "device-placement-scale-plan", "version": 1,
                                "parallelism": {"pipeline": 2, "microbatches": 2, "schedule": "1f1b"}}))
    ran = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port",
                          str(free_port()), "-m", "placement_env", "run", "--plan", str(plan), "--model",
                          "tests.test_parallel_runner:tiny_llama_batch", "--steps", "2", "--sgd", "0.1", "--out",
                          str(tmp_path / "run.json")], capture_output=True, text=True, cwd=root, timeout=600,
                         env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(root)}, check=False)
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert ran.stdout.count("2 steps on torchrun (rank") == 2  # each rank prints the whole run
    model, _, kwargs = tiny_llama_batch()
    _, loss = whole_step(model, kwargs["input_ids"], 1, 2)
    losses = json.loads((tmp_path / "run.json").read_text())["losses"]
    assert losses[0] == pytest.approx(loss, rel=1e-5) and losses[1] < losses[0]


@pytest.mark.parametrize(("family", "pipeline", "tensor", "data", "zero", "schedule", "v", "recompute", "sequence"), [
    ("llama", 2, 2, 2, 2, "1f1b", 1, "none", False),  # 2 x 2 x 2 on 8 workers: pipeline, tensor, FSDP2
    # the same with tied embeddings: wte on stage 0, lm_head on 1 (8 workers: slow, one 2 x 2 x 2 case is enough
    # for the default suite; python -m pytest -m slow runs it)
    pytest.param("gpt2", 2, 2, 2, 2, "1f1b", 1, "none", False, marks=pytest.mark.slow),
    # a pipeline with ZeRO 1 replicas; ZeRO 1 over each tensor rank's shards (Megatron's usual) (four workers each:
    # slow; the default suite runs GPipe, ZeRO 1 and tensor x data in the cases around them)
    pytest.param("llama", 2, 1, 2, 1, "gpipe", 1, "none", False, marks=pytest.mark.slow),
    pytest.param("gpt2", 1, 2, 2, 1, "1f1b", 1, "none", False, marks=pytest.mark.slow),
    ("gpt2", 2, 1, 1, 0, "gpipe", 1, "none", False),  # a pipeline alone, its tied copies' gradients summed
    ("llama", 2, 1, 1, 0, "interleaved-1f1b", 2, "none", False),  # two chunks a rank
    # and tensor x FSDP2 ZeRO 3, recomputing (8 workers: slow; the default suite runs interleaving on two)
    pytest.param("llama", 2, 2, 2, 3, "interleaved-1f1b", 2, "selective", False, marks=pytest.mark.slow),
    ("gpt2", 2, 2, 1, 2, "zb-h1", 1, "full", False),  # zero bubble, its backward split, tied, recomputing
    # OPT's stages (its positions by id, tied ends) of tensor ranks (slow: the default suite runs OPT's tensor ranks)
    pytest.param("opt", 2, 2, 1, 1, "1f1b", 1, "none", False, marks=pytest.mark.slow),
    ("llama", 2, 2, 1, 0, "1f1b", 1, "none", True),  # sequence parallel stages: each sends its shard of the sequence
    # GPT-2's, its tied copies whole on both ends (slow: the default suite runs GPT-2's sequence parallelism whole)
    pytest.param("gpt2", 2, 2, 1, 0, "1f1b", 1, "none", True, marks=pytest.mark.slow),
])
def test_a_3d_adamw_step_is_the_whole_one(family, pipeline, tensor, data, zero, schedule, v, recompute, sequence):
    """Issue 65 point 2: a 4-layer Llama or GPT-2 cut by hand into S x v chunks (DecoderStage), each split over
    tensor ranks (with sequence parallelism or without), sharded or replicated over data ranks, recomputing or not,
    the chunks run by torch's 1F1B, GPipe, interleaved 1F1B or zero-bubble schedule: one AdamW step within 1e-5 of
    the whole one, with its loss."""
    model = MODELS[family](layers=4)
    ids = torch.randint(0, VOCAB, (BATCH, SEQUENCE), generator=torch.Generator().manual_seed(1))
    p = Parallelism(pipeline=pipeline, tensor=tensor, data=data, zero=zero, microbatches=2, schedule=schedule,
                    virtual_stages=v, recompute=recompute, sequence_parallel=sequence)
    run = assert_the_whole_step(model, ids, p)
    whole = sum(q.numel() * q.element_size() for q in model.parameters())
    assert max(run.held_bytes) < whole  # each rank holds a stage (and its share of it)


@pytest.mark.parametrize("pipeline", [1, pytest.param(2, marks=pytest.mark.slow)])
def test_a_mixed_precision_step_is_the_whole_autocast_one(pipeline):
    """``precision="bf16-mixed"``: the forward and the loss under bf16 autocast (its loss is not fp32's), the
    parameters and the optimizer's states fp32; one AdamW step, whole or as a GPipe of two stages, within 1e-5 of
    the same step run whole under autocast."""
    model = tiny_llama(layers=2)
    ids = torch.randint(0, VOCAB, (BATCH, SEQUENCE), generator=torch.Generator().manual_seed(1))
    p = Parallelism(pipeline=pipeline, microbatches=2, schedule="gpipe")
    run = run_parallel(model, (), p, example_kwargs={"input_ids": ids}, targets=ids, loss_fn=causal_lm_loss,
                       optimizer=adamw, precision="bf16-mixed")
    reference, loss = whole_step(model, ids, 1, 2, mixed=True)
    _, fp32_loss = whole_step(model, ids, 1, 2)
    assert run.losses[0] == pytest.approx(loss, rel=1e-5) and abs(loss / fp32_loss - 1) > 1e-5
    expected = dict(reference.named_parameters())
    for name, value in run.parameters.items():
        np.testing.assert_allclose(value, expected[name].detach().numpy(), atol=1e-5, err_msg=name)
    whole = sum(q.numel() * 4 for q in model.parameters())  # fp32 parameters, whatever the autocast computes in
    assert sum(run.held_bytes) >= whole and run.peak_bytes is None  # no CUDA allocator to read on CPU
    with pytest.raises(ValueError, match="precision must be one of fp32, bf16-mixed; got 'fp16'"):
        run_parallel(model, (), p, example_kwargs={"input_ids": ids}, precision="fp16")


def test_recomputation_keeps_less_for_the_backward_and_ends_the_same_step():
    """Full recomputation keeps only each layer's input, selective also its matrix products, none everything: the
    bytes alive after the forward fall in that order (and each is less), and the gradients are the same."""
    ids = torch.randint(0, VOCAB, (BATCH, 16), generator=torch.Generator().manual_seed(1))
    kept, grads = {}, {}
    for recompute in ("none", "selective", "full"):
        model = tiny_llama(layers=4)
        assert recompute_layers(model, recompute) == (0 if recompute == "none" else 4)
        tracker = LiveBytes()
        with tracker.mode:
            loss = causal_lm_loss(model(input_ids=ids), ids)
            kept[recompute] = tracker.live
            loss.backward()
        grads[recompute] = {n: q.grad.clone() for n, q in model.named_parameters()}
    assert kept["none"] > kept["selective"] > kept["full"]
    for recompute in ("selective", "full"):
        for name, grad in grads["none"].items():
            torch.testing.assert_close(grads[recompute][name], grad, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="unknown recompute 'some'"):
        recompute_layers(tiny_llama(), "some")


def test_gradients_averaged_in_buckets_come_back_to_their_own_tensors(monkeypatch, tmp_path):
    """``average_gradients`` packs consecutive gradients of one dtype into buckets (here of 64 bytes), one
    all-reduce each, and unpacks each back into its own tensor; in a group of one process the sum is the tensor
    itself, so averaging over ``ranks=2`` halves every element, across bucket edges and a change of dtype."""
    import torch.distributed as dist

    from placement_env.runtime import gradient_reduction

    monkeypatch.setattr(gradient_reduction, "BUCKET_BYTES", 64)
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        grads = [torch.arange(n, dtype=dtype) + 1.0 for n, dtype in
                 ((3, torch.float32), (10, torch.float32), (20, torch.float32), (2, torch.float64), (5, torch.float32))]
        expected = [g / 2 for g in grads]
        gradient_reduction.average_gradients(grads, None, 2)
    finally:
        dist.destroy_process_group()
    for got, want in zip(grads, expected, strict=True):
        assert got.dtype == want.dtype
        torch.testing.assert_close(got, want)
