"""Extract the transformers of the zoo into shipped graphs (needs the ``[hf]`` extra: ``transformers``).

    python scripts/extract_transformers.py [--models gpt2 bert-base ...] [--out DIR]

Builds each model of :data:`placement_env.zoo.registry.TRANSFORMERS` from a ``transformers`` config with random
weights (nothing downloaded), traces it with ``placement_env.from_huggingface`` in training mode (module names
kept; roofline costs of an A100 in bfloat16) at the batch and sequence length below, and writes the training
graph to ``placement_env/zoo/data/transformers/<name>.json.gz``. ``transformers`` 5.x installs beside the CPU
build of torch 2.13.0 without pulling another torch, so this runs in the project's own environment.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from placement_env.graph.io import write_graph  # noqa: E402
from placement_env.zoo.registry import TRANSFORMERS, TRANSFORMERS_DIR  # noqa: E402

# name -> (config class, its arguments, batch, sequence). The sizes: GPT-2 small and medium (Radford et al.
# 2019), BERT base and large (Devlin et al. 2019), a Llama-style decoder of TinyLlama-1.1B's shape (22 layers,
# hidden 2048, 32 heads, 4 key-value heads, intermediate 5632, vocabulary 32000), ViT-B/16 (Dosovitskiy et al.
# 2021) on 224 x 224 images.
MODELS: dict[str, tuple[str, dict, int, int]] = {
    "gpt2": ("GPT2Config", {}, 8, 1024),
    "gpt2-medium": ("GPT2Config", {"n_layer": 24, "n_embd": 1024, "n_head": 16}, 8, 1024),
    "bert-base": ("BertConfig", {}, 32, 512),
    "bert-large": ("BertConfig", {"hidden_size": 1024, "num_hidden_layers": 24, "num_attention_heads": 16,
                                  "intermediate_size": 4096}, 32, 512),
    "llama-1b": ("LlamaConfig", {"hidden_size": 2048, "intermediate_size": 5632, "num_hidden_layers": 22,
                                 "num_attention_heads": 32, "num_key_value_heads": 4, "vocab_size": 32000,
                                 "max_position_embeddings": 2048}, 8, 2048),
    "vit-b16": ("ViTConfig", {}, 64, 0),
}


def config_of(name: str):
    """The ``transformers`` config of model ``name``."""
    import transformers

    cls, kwargs, _, _ = MODELS[name]
    return getattr(transformers, cls)(**kwargs)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--out", default=str(TRANSFORMERS_DIR))
    args = parser.parse_args()
    from placement_env.importers.huggingface import from_huggingface

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name in args.models:
        assert name in TRANSFORMERS, name
        _, _, batch, sequence = MODELS[name]
        began = time.perf_counter()
        graph = from_huggingface(config_of(name), batch, max(sequence, 1), name=name,
                                 saved_activations="inputs")  # the rule the shipped graphs were made with
        write_graph(graph, out / f"{name}.json.gz")
        params = graph.param_bytes.sum() / 2  # bfloat16
        print(f"{name}: {graph.num_nodes} ops, {graph.num_edges} edges, {graph.num_units} units, "
              f"{params / 1e6:.0f} M parameters, batch {batch}, {time.perf_counter() - began:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
