"""What the two fidelity benchmarks share (``benchmarks/fidelity.py``, ``benchmarks/pipeline_fidelity.py``): the
models written outside this project (the table's, and the outside models no overhead was ever tuned on: a
transformers model not in the zoo, an MLP-Mixer and a plain CNN written for the benchmark), the fastest of repeated
profiles, a measurement's uncertainty, rank
correlation. Each benchmark imports this module; neither imports the other."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from placed_module_speed import ResidualCNN
from torch import nn

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


class MixerBlock(nn.Module):
    """One block of an MLP-Mixer (Tolstikhin et al., 2021): an MLP across the tokens, then one across the channels,
    each after a LayerNorm and added to its input."""

    def __init__(self, tokens: int, channels: int, token_hidden: int, channel_hidden: int) -> None:
        super().__init__()
        self.token_norm, self.channel_norm = nn.LayerNorm(channels), nn.LayerNorm(channels)
        self.token_mlp = nn.Sequential(nn.Linear(tokens, token_hidden), nn.GELU(), nn.Linear(token_hidden, tokens))
        self.channel_mlp = nn.Sequential(nn.Linear(channels, channel_hidden), nn.GELU(),
                                         nn.Linear(channel_hidden, channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.token_mlp(self.token_norm(x).transpose(1, 2)).transpose(1, 2)
        return x + self.channel_mlp(self.channel_norm(x))


class MLPMixer(nn.Module):
    """An MLP-Mixer for 32 x 32 images: 4 x 4 patches (64 tokens), ``depth`` blocks, a mean over the tokens."""

    def __init__(self, channels: int = 128, depth: int = 6, classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, channels, 4, stride=4)
        self.blocks = nn.Sequential(*[MixerBlock(64, channels, 64, 4 * channels) for _ in range(depth)])
        self.norm = nn.LayerNorm(channels)
        self.head = nn.Linear(channels, classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = self.stem(images).flatten(2).transpose(1, 2)
        return self.head(self.norm(self.blocks(x)).mean(1))


class PlainCNN(nn.Module):
    """A VGG-style CNN with no residual connections: three stages of two 3 x 3 convolutions (BatchNorm, ReLU),
    each stage ending in a 2 x 2 max-pool, then a linear classifier."""

    def __init__(self, width: int = 32, classes: int = 10) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        channels = 3
        for stage in range(3):
            out = width * 2**stage
            layers += [nn.Conv2d(channels, out, 3, padding=1), nn.BatchNorm2d(out), nn.ReLU(),
                       nn.Conv2d(out, out, 3, padding=1), nn.BatchNorm2d(out), nn.ReLU(), nn.MaxPool2d(2)]
            channels = out
        self.features = nn.Sequential(*layers)
        self.head = nn.Linear(channels * 16, classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(images).flatten(1))


def outside_models() -> dict[str, tuple[torch.nn.Module, tuple, dict, int]]:
    """The models no overhead of either benchmark was tuned on, as :func:`hugging_face_models` gives its own:
    name -> (model, positional inputs, keyword inputs, module depth of a placement unit). ``opt``: transformers'
    OPT (not in the zoo; learned positions, pre-LayerNorm, ReLU MLP); ``mixer``: :class:`MLPMixer`; ``plain-cnn``:
    :class:`PlainCNN`."""
    import transformers

    torch.manual_seed(0)
    opt = transformers.OPTForCausalLM(transformers.OPTConfig(
        vocab_size=1000, hidden_size=128, num_hidden_layers=4, ffn_dim=512, num_attention_heads=4,
        max_position_embeddings=64, word_embed_proj_dim=128, dropout=0.0, attention_dropout=0.0, use_cache=False))
    return {
        "opt": (opt.train(), (), {"input_ids": torch.randint(0, 1000, (8, 64))}, 4),
        "mixer": (MLPMixer().train(), (torch.randn(8, 3, 32, 32),), {}, 2),
        "plain-cnn": (PlainCNN().train(), (torch.randn(16, 3, 32, 32),), {}, 2),
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


def spearman(a: list[float], b: list[float]) -> float:
    ra, rb = np.argsort(np.argsort(a)), np.argsort(np.argsort(b))
    return float(np.corrcoef(ra, rb)[0, 1]) if len(a) > 1 and np.std(ra) > 0 and np.std(rb) > 0 else float("nan")
