"""What the two fidelity benchmarks share (``benchmarks/fidelity.py``, ``benchmarks/pipeline_fidelity.py``): the
models written outside this project, the fastest of repeated profiles, a measurement's uncertainty, rank
correlation. Each benchmark imports this module; neither imports the other."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from placed_module_speed import ResidualCNN

from placement_env.graph.model import ComputationGraph, Node


def hugging_face_models() -> dict[str, tuple[torch.nn.Module, tuple, dict, int]]:
    """name -> (model, positional inputs, keyword inputs, module depth of a placement unit)."""
    import transformers

    torch.manual_seed(0)
    width: dict[str, Any] = {"hidden_size": 128, "num_hidden_layers": 4, "num_attention_heads": 4,
                             "intermediate_size": 512}
    ids = torch.randint(0, 1000, (8, 64))
    gpt2 = transformers.GPT2LMHeadModel(transformers.GPT2Config(
        n_layer=4, n_embd=128, n_head=4, vocab_size=1000, n_positions=64, resid_pdrop=0.0, embd_pdrop=0.0,
        attn_pdrop=0.0, bos_token_id=0, eos_token_id=0, use_cache=False))
    bert = transformers.BertForMaskedLM(transformers.BertConfig(vocab_size=1000, hidden_dropout_prob=0.0,
                                                                attention_probs_dropout_prob=0.0, **width))
    vit = transformers.ViTForImageClassification(transformers.ViTConfig(
        image_size=32, patch_size=4, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, **width))
    llama = transformers.LlamaForCausalLM(transformers.LlamaConfig(
        vocab_size=1000, num_key_value_heads=4, max_position_embeddings=64, use_cache=False,
        **{**width, "intermediate_size": 344}))
    return {
        "gpt2": (gpt2.train(), (), {"input_ids": ids}, 3),
        "bert": (bert.train(), (), {"input_ids": ids}, 4),
        "vit": (vit.train(), (), {"pixel_values": torch.randn(8, 3, 32, 32)}, 4),
        "llama": (llama.train(), (), {"input_ids": ids}, 3),
        "cnn": (ResidualCNN(32).train(), (torch.randn(16, 3, 32, 32),), {}, 1),
    }


def fastest_costs(graphs: list[ComputationGraph]) -> ComputationGraph:
    """The first graph with each op's cost and fixed cost the smallest of the graphs' (the same model profiled
    again)."""
    costs = np.min([[n.cost for n in g.nodes] for g in graphs], axis=0)
    fixed = np.min([[n.fixed_cost or 0.0 for n in g.nodes] for g in graphs], axis=0)
    first = graphs[0]
    nodes = [Node(n.id, n.op, float(c), n.output_bytes, n.param_bytes, n.colocation, n.flops, n.phase, n.module,
                  None if n.fixed_cost is None else float(min(f, c)))
             for n, c, f in zip(first.nodes, costs, fixed)]
    return ComputationGraph(nodes, first.edges(), name=first.name)


def uncertainty(rounds: list[float]) -> float:
    """How far the measured step (the fastest round's) may be off: the gap between the two fastest rounds over the
    fastest (a machine's noise only slows a round, so the fastest two agree once the minimum is found); infinite
    with fewer than two rounds."""
    if len(rounds) < 2:
        return float("inf")
    first, second = sorted(rounds)[:2]
    return (second - first) / first


def spearman(a: list[float], b: list[float]) -> float:
    ra, rb = np.argsort(np.argsort(a)), np.argsort(np.argsort(b))
    return float(np.corrcoef(ra, rb)[0, 1]) if len(a) > 1 and np.std(ra) > 0 and np.std(rb) > 0 else float("nan")
