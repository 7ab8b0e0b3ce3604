"""Graphs of Hugging Face models from their configs: :func:`from_huggingface` (the optional extra ``[hf]``).

The model is built from the config with random weights (nothing is downloaded; weights change no shape, FLOP or
byte), with ``use_cache=False`` (a training step keeps no key-value cache), and traced by
:func:`~placement_env.importers.pytorch.from_torch` on inputs of the given batch and sequence length:
``input_ids`` for text models, ``pixel_values`` of the config's image size for vision models. The head follows
the model type: a causal language model for decoders (GPT-2, Llama, ...), a masked language model for encoders
(BERT, ...), an image classifier for ViT.
"""

from __future__ import annotations

from typing import Any

import torch

from placement_env.graph.model import ComputationGraph

from .pytorch import from_torch

VISION_TYPES = frozenset({"vit", "deit", "beit", "swin", "convnext", "dinov2"})
ENCODER_TYPES = frozenset({"bert", "roberta", "distilbert", "albert", "electra", "deberta", "deberta-v2"})


def build_model(config: Any, dtype: torch.dtype = torch.float32) -> torch.nn.Module:
    """The randomly initialised model of a ``transformers`` config, in training mode, without a key-value cache
    (``ValueError`` naming a config that is not one)."""
    import transformers

    if not isinstance(config, transformers.PretrainedConfig):
        raise ValueError(f"config must be a transformers PretrainedConfig, got {type(config).__name__}")
    config.use_cache = False
    kind = (transformers.AutoModelForImageClassification if config.model_type in VISION_TYPES
            else transformers.AutoModelForMaskedLM if config.model_type in ENCODER_TYPES
            else transformers.AutoModelForCausalLM)
    model = kind.from_config(config, dtype=dtype)
    return model.train()


def example_inputs(config: Any, batch: int, sequence: int) -> dict[str, torch.Tensor]:
    """The keyword inputs of one training batch: ``pixel_values`` (batch x channels x size x size) for a vision
    model, ``input_ids`` (batch x sequence, token ids below the vocabulary size) otherwise."""
    if config.model_type in VISION_TYPES:
        size = int(config.image_size)
        return {"pixel_values": torch.randn(batch, int(getattr(config, "num_channels", 3)), size, size)}
    return {"input_ids": torch.randint(0, int(config.vocab_size), (batch, sequence))}


def from_huggingface(config: Any, batch: int = 8, sequence: int = 512, *, name: str | None = None,
                     device_kind: str = "a100-nvlink", dtype: torch.dtype = torch.bfloat16,
                     training: bool = True, colocate_modules: bool | int = False) -> ComputationGraph:
    """The computation graph of the model of ``config`` (a ``transformers`` config) on one batch.

    Args:
        config: e.g. ``transformers.GPT2Config()``, ``LlamaConfig(num_hidden_layers=16, ...)``, ``ViTConfig()``.
        batch: sequences (images) in the batch; the graph records it (``graph.batch``), which bounds the
            micro-batches of a pipelined step.
        sequence: tokens per sequence (ignored for vision models, whose input is the config's image size).
        name: the graph's name (default: the config's model type).
        device_kind, dtype: the roofline costs' device kind and precision (default: an A100 in bfloat16).
        training, colocate_modules: as :func:`~placement_env.importers.pytorch.from_torch`.

    Raises:
        ValueError: a config that is not one, a batch or sequence below 1, a precision the device kind lacks,
            a model that cannot be traced.
    """
    for label, value in (("batch", batch), ("sequence", sequence)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{label} must be an integer >= 1, got {value!r}")
    model = build_model(config, dtype)
    inputs = example_inputs(config, batch, sequence)
    return from_torch(model, (), example_kwargs=inputs, name=name or str(config.model_type),
                      device_kind=device_kind, dtype=dtype, training=training, colocate_modules=colocate_modules)


__all__ = ["build_model", "example_inputs", "from_huggingface"]
