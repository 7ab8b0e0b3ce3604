"""The parallel runner on transformers' decoders beyond Llama, GPT-2 and OPT (issue 65 point 1: the model's own
tensor-parallel plan where transformers ships one, or a refusal by name): each run ends one AdamW step with every
parameter within 1e-5 of the same step run whole, and with its loss (``assert_the_whole_step``); what it cannot run
is refused before any worker starts, never trained wrong."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from torch.distributed.tensor import Replicate  # noqa: E402
from torch.distributed.tensor.parallel import ColwiseParallel, PrepareModuleInputOutput  # noqa: E402

from placement_env import Parallelism  # noqa: E402
from placement_env.runtime.decoder_stages import check_stages, decoder_layout  # noqa: E402
from placement_env.runtime.parallel_runner import run_parallel  # noqa: E402
from placement_env.runtime.tensor_plans import (  # noqa: E402
    check_ties,
    local_heads,
    sequence_plan,
    summed_gradient_modules,
    tensor_plan,
)
from tests.test_parallel_runner import BATCH, SEQUENCE, VOCAB, assert_the_whole_step  # noqa: E402

SHAPE = {"vocab_size": VOCAB, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 16}


def decoder(family: str, **extra):
    """A tiny transformers causal LM of ``family`` (fp32, training mode, the same seed each call)."""
    torch.manual_seed(0)
    config = {
        "qwen3": lambda: transformers.Qwen3Config(**SHAPE, head_dim=8),  # per-head query and key norms
        "gemma": lambda: transformers.GemmaConfig(**SHAPE, head_dim=8),  # tied output layer, scaled embedding
        "mixtral": lambda: transformers.MixtralConfig(**SHAPE, num_local_experts=4, num_experts_per_tok=2),
        "phi3": lambda: transformers.Phi3Config(**SHAPE, pad_token_id=0),  # fused qkv_proj and gate_up_proj
        "llama": lambda: transformers.LlamaConfig(**SHAPE),
        "neox": lambda: transformers.GPTNeoXConfig(**{k: v for k, v in SHAPE.items() if k != "num_key_value_heads"}),
        "gptj": lambda: transformers.GPTJConfig(n_embd=32, n_head=4, vocab_size=VOCAB, n_positions=16, n_layer=2,
                                                rotary_dim=4, bos_token_id=0, eos_token_id=0),
        "gemma2": lambda: transformers.Gemma2Config(**SHAPE, head_dim=8, final_logit_softcapping=5.0),
        "gemma3": lambda: transformers.Gemma3TextConfig(**SHAPE, head_dim=8),
    }[family]()
    for key, value in extra.items():
        setattr(config, key, value)
    return transformers.AutoModelForCausalLM.from_config(config).float().train()


def batch():
    return torch.randint(0, VOCAB, (BATCH, SEQUENCE), generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize(("family", "extra", "p"), [
    # Qwen 3's own plan keeps its per-head norms whole on each tensor rank, their gradients summed over the ranks;
    # with its output layer tied to its embedding, both split by vocabulary rows under sequence parallelism: one
    # parameter (the default suite's one run of the other decoders: removing the sum, or the tie, fails it)
    ("qwen3", {"tie_word_embeddings": True}, Parallelism(tensor=2, sequence_parallel=True)),
    pytest.param("qwen3", {}, Parallelism(tensor=2), marks=pytest.mark.slow),
    # Gemma's tie, its embedding scaled inside its embedding module
    pytest.param("gemma", {}, Parallelism(tensor=2, sequence_parallel=True), marks=pytest.mark.slow),
    # Mixtral's plan splits the attention, not the experts: the FFN takes the whole sequence, gives its shard back
    # (slow, as the two below: the default suite checks its sequence plan, and GPT-NeoX's stages against its own
    # forward, without workers)
    pytest.param("mixtral", {}, Parallelism(tensor=2, sequence_parallel=True), marks=pytest.mark.slow),
    # GPT-NeoX's layout cut into pipeline stages (its rotary embeddings under their own names)
    pytest.param("neox", {}, Parallelism(pipeline=2, microbatches=2), marks=pytest.mark.slow),
    # the model's own plan gathers Phi-3's fused layers' outputs and splits the next one's inputs (slow: four kinds
    # of plan entry, two of them checked without workers below)
    pytest.param("phi3", {}, Parallelism(tensor=2), marks=pytest.mark.slow),
    # GPT-J: a vocabulary-split embedding (embedding_rowwise) and its heads counted by num_attention_heads
    pytest.param("gptj", {}, Parallelism(tensor=2), marks=pytest.mark.slow),
    # a sequence-parallel embedding's gradient reaches ZeRO 1's shards laid out as its weight (four workers)
    pytest.param("llama", {}, Parallelism(tensor=2, data=2, zero=1, sequence_parallel=True), marks=pytest.mark.slow),
    # a tied embedding on the first stage and output layer on the last, sequence parallel (four workers)
    pytest.param("gemma", {}, Parallelism(tensor=2, pipeline=2, microbatches=2, sequence_parallel=True),
                 marks=pytest.mark.slow),
])
def test_a_parallel_adamw_step_of_another_decoder_is_the_whole_one(family, extra, p):
    model = decoder(family, **extra)
    run = assert_the_whole_step(model, batch(), p)
    if p.tensor > 1:
        assert max(run.held_bytes) < sum(q.numel() * q.element_size() for q in model.parameters())


def test_the_model_s_own_plan_is_taken_kind_by_kind():
    phi3 = decoder("phi3")
    plan = tensor_plan(phi3)
    fused = plan["model.layers.0.self_attn.qkv_proj"]
    assert isinstance(fused, ColwiseParallel) and isinstance(fused.output_layouts[0], Replicate)
    assert isinstance(plan["model.layers.0.self_attn.o_proj"].input_layouts[0], Replicate)
    assert local_heads(phi3, 2, plan) == 0  # its queries gathered: every rank keeps every head
    qwen3 = decoder("qwen3")
    assert sorted(summed_gradient_modules(qwen3)) == [f"model.layers.{i}.self_attn.{n}" for i in (0, 1)
                                                      for n in ("k_norm", "q_norm")]
    assert not any("norm" in name for name in tensor_plan(qwen3))
    assert summed_gradient_modules(decoder("llama")) == []
    mixtral = sequence_plan(decoder("mixtral"))
    assert isinstance(mixtral["model.layers.0.mlp"], PrepareModuleInputOutput)
    gemma = decoder("gemma")
    assert check_ties(gemma, sequence_plan(gemma)) == [["model.embed_tokens.weight", "lm_head.weight"]]
    assert check_ties(gemma, tensor_plan(gemma)) == []  # neither is split: the tie stays as it is
    with pytest.raises(ValueError, match=r"the tied parameter model.embed_tokens.weight = lm_head.weight would be "
                                         r"laid out as rows and whole"):
        check_ties(gemma, {"lm_head": ColwiseParallel()})
    assert decoder_layout(decoder("neox")).base == "gpt_neox"
    assert decoder_layout(decoder("gptj")).rotary == "rotary_emb"


def test_what_its_stages_or_plans_would_compute_wrong_is_refused_before_any_worker_starts():
    ids = batch()
    check_stages(decoder("gemma"), 2, ids)  # its scaled embedding is its embedding module's own: the stages agree
    for family in ("neox", "gptj"):  # their layouts' stages compute what their forwards do
        check_stages(decoder(family), 2, ids)
    with pytest.raises(ValueError, match="model Gemma2ForCausalLM: its forward does more than its layers"):
        run_parallel(decoder("gemma2"), (), Parallelism(pipeline=2, microbatches=2), example_kwargs={"input_ids": ids})
    with pytest.raises(ValueError, match=r"model Gemma3ForCausalLM: its layers cannot be run as pipeline stages "
                                         r"\(TypeError"):
        run_parallel(decoder("gemma3"), (), Parallelism(pipeline=2, microbatches=2), example_kwargs={"input_ids": ids})
    with pytest.raises(ValueError, match="a decoder's pipeline takes token ids of shape"):
        check_stages(decoder("llama"), 2, torch.randn(2, 8))
    with pytest.raises(ValueError, match="sequence parallelism: model GPTJForCausalLM has no module "
                                         "'transformer.h.0.ln_2'"):
        run_parallel(decoder("gptj"), (), Parallelism(tensor=2, sequence_parallel=True),
                     example_kwargs={"input_ids": ids})
    qwen3 = decoder("qwen3")
    qwen3.config.base_model_tp_plan = {"layers.*.mlp.gate_proj": "packed_colwise"}
    with pytest.raises(ValueError, match="splits 'layers.*.mlp.gate_proj' as 'packed_colwise'; the runner runs "
                                         "colwise, rowwise"):
        run_parallel(qwen3, (), Parallelism(tensor=2), example_kwargs={"input_ids": ids})
