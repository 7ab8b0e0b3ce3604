"""Graphs of Hugging Face models from their configs: :func:`from_huggingface` (the optional extra ``[hf]``).

The model is built from the config on PyTorch's ``meta`` device, with its inputs there too: nothing is downloaded or
allocated (weights change no shape, FLOP or byte; one layer of a Llama-70B shape took 5.7 GB with random weights),
and the graph is the same as from a model with weights. It is built with ``use_cache=False`` (a training step keeps
no key-value cache), and traced by :func:`~placement_env.importers.pytorch.from_torch` on inputs of the given batch
and sequence length: ``input_ids`` for text models, ``pixel_values`` of the config's image size for vision models.
The head follows the model type: a causal language model for decoders (GPT-2, Llama, ...), a masked language model
for encoders (BERT, ...), an image classifier for ViT.
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
    (``ValueError`` naming a config that is not one), on the current default device (``with
    torch.device("meta"):`` for one without memory)."""
    import transformers

    if not isinstance(config, transformers.PretrainedConfig):
        raise ValueError(f"config must be a transformers PretrainedConfig, got {type(config).__name__}")
    config.use_cache = False
    kind = (transformers.AutoModelForImageClassification if config.model_type in VISION_TYPES
            else transformers.AutoModelForMaskedLM if config.model_type in ENCODER_TYPES
            else transformers.AutoModelForCausalLM)
    model = kind.from_config(config, dtype=dtype)
    return model.train()


def example_inputs(config: Any, batch: int, sequence: int, device: str | torch.device = "cpu"
                   ) -> dict[str, torch.Tensor]:
    """The keyword inputs of one training batch on ``device``: ``pixel_values`` (batch x channels x size x size)
    for a vision model, ``input_ids`` (batch x sequence, token ids below the vocabulary size) otherwise."""
    if config.model_type in VISION_TYPES:
        size = int(config.image_size)
        return {"pixel_values": torch.randn(batch, int(getattr(config, "num_channels", 3)), size, size,
                                            device=device)}
    return {"input_ids": torch.randint(0, int(config.vocab_size), (batch, sequence), device=device)}


MAX_BATCH = 1 << 20
"""The largest batch :func:`from_huggingface` takes (a graph's bytes grow with it; 1e9 overflowed an allocator)."""


def max_positions(config: Any) -> int | None:
    """The longest sequence a text model's position embeddings take (``n_positions``, ``max_position_embeddings``),
    None where the config sets none."""
    for key in ("n_positions", "max_position_embeddings"):
        value = getattr(config, key, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def from_huggingface(config: Any, batch: int = 8, sequence: int = 512, *, name: str | None = None,
                     device_kind: str = "a100-nvlink", dtype: torch.dtype = torch.bfloat16,
                     training: bool = True, colocate_modules: bool | int = False,
                     saved_activations: str = "autograd") -> ComputationGraph:
    """The computation graph of the model of ``config`` (a ``transformers`` config) on one batch.

    Args:
        config: e.g. ``transformers.GPT2Config()``, ``LlamaConfig(num_hidden_layers=16, ...)``, ``ViTConfig()``.
        batch: sequences (images) in the batch; the graph records it (``graph.batch``), which bounds the
            micro-batches of a pipelined step.
        sequence: tokens per sequence (ignored for vision models, whose input is the config's image size).
        name: the graph's name (default: the config's model type).
        device_kind, dtype: the roofline costs' device kind and precision (default: an A100 in bfloat16).
        training, colocate_modules, saved_activations: as :func:`~placement_env.importers.pytorch.from_torch`
            (the zoo's shipped graphs were made with ``saved_activations="inputs"``).

    Raises:
        ValueError: a config that is not one, a batch or sequence below 1, a batch above :data:`MAX_BATCH`, a
            sequence longer than the config's positions, a precision the device kind lacks, a model that cannot be
            traced.
    """
    for label, value in (("batch", batch), ("sequence", sequence)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{label} must be an integer >= 1, got {value!r}")
    if batch > MAX_BATCH:
        raise ValueError(f"batch {batch} is more than the {MAX_BATCH} from_huggingface takes")
    with torch.device("meta"):
        model = build_model(config, dtype)
    limit = None if config.model_type in VISION_TYPES else max_positions(config)
    if limit is not None and sequence > limit:
        raise ValueError(f"sequence {sequence} is longer than the {limit} positions of the {config.model_type} "
                         "config (the model would fail on it); give a sequence of at most that many tokens")
    inputs = example_inputs(config, batch, sequence, device="meta")
    return from_torch(model, (), example_kwargs=inputs, name=name or str(config.model_type),
                      device_kind=device_kind, dtype=dtype, training=training, colocate_modules=colocate_modules,
                      saved_activations=saved_activations)


__all__ = ["MAX_BATCH", "build_model", "example_inputs", "from_huggingface", "max_positions"]
