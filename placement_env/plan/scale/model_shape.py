"""A transformer at the scale people train, as a shape: :class:`TransformerShape` and :func:`shape_from_config`.

The planner of tensor x pipeline x data plans reads a model as its shape (layers, hidden size, heads, KV heads,
FFN width, vocabulary, sequence, experts), never as a traced graph: a 1T-parameter model is a few integers, made
in microseconds and holding no memory. A transformers config (GPT-2, Llama, Mistral, Mixtral, and any config with
the same fields) or a plain dictionary of these fields gives one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

MAX_PARAMETERS = 2e12
"""The largest model a shape may describe (parameters); beyond it a shape is refused as a likely typo."""


@dataclass(frozen=True)
class TransformerShape:
    """A decoder-only transformer as its shape; checked when made (``ValueError`` naming the field).

    Attributes:
        layers: transformer layers. ``hidden``: the model width h. ``heads``: attention heads a.
        kv_heads: key/value heads (grouped-query attention; ``heads`` for multi-head attention).
        ffn: the FFN's inner width (``4 h`` for GPT). ``gated``: the FFN has a gate (SwiGLU: three matrices, as
            Llama and Mistral), else two (GeLU, as GPT).
        vocabulary: the embedding's rows. ``sequence``: tokens a sequence.
        experts: FFN experts a layer (1: dense); ``experts_per_token``: experts each token runs (Mixtral: 8, 2).
        positions: rows of a learned position embedding (default: ``sequence``).
        tied_embeddings: the output layer reuses the input embedding's matrix.
        biases: the linear layers have biases and the norms are LayerNorms (weight and bias), as GPT's; else no
            biases and RMSNorms (weight only), as Llama's.
        learned_positions: a learned position embedding (GPT's); else rotary (no parameters).
        name: for reports.
    """

    layers: int
    hidden: int
    heads: int
    kv_heads: int | None = None
    ffn: int | None = None
    vocabulary: int = 51200
    sequence: int = 2048
    gated: bool = False
    experts: int = 1
    experts_per_token: int = 1
    positions: int | None = None
    tied_embeddings: bool = False
    biases: bool = True
    learned_positions: bool = True
    name: str = "transformer"

    def __post_init__(self) -> None:
        for name in ("layers", "hidden", "heads", "vocabulary", "sequence", "experts", "experts_per_token"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"shape {self.name!r}: {name} must be an integer >= 1, got {value!r}")
        for name in ("kv_heads", "ffn", "positions"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ValueError(f"shape {self.name!r}: {name} must be an integer >= 1 or None, got {value!r}")
        if self.hidden % self.heads:
            raise ValueError(f"shape {self.name!r}: hidden {self.hidden} is not a multiple of heads {self.heads}")
        if self.heads % self.kv:
            raise ValueError(f"shape {self.name!r}: heads {self.heads} are not a multiple of kv_heads {self.kv}")
        if self.experts_per_token > self.experts:
            raise ValueError(f"shape {self.name!r}: experts_per_token {self.experts_per_token} is more than the "
                             f"{self.experts} experts")
        if self.parameters > MAX_PARAMETERS:
            raise ValueError(f"shape {self.name!r} has {self.parameters / 1e12:.1f}T parameters, more than the "
                             f"{MAX_PARAMETERS / 1e12:.0f}T a shape may describe")

    @property
    def kv(self) -> int:
        """Key/value heads."""
        return self.kv_heads or self.heads

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def inner(self) -> int:
        """The FFN's inner width."""
        return self.ffn or 4 * self.hidden

    @property
    def attention_parameters(self) -> int:
        """A layer's attention weights and biases: Q, K, V (K and V of ``kv`` heads) and the output projection."""
        h, kv = self.hidden, self.kv * self.head_dim
        return h * (h + 2 * kv) + h * h + ((h + 2 * kv) + h if self.biases else 0)

    @property
    def ffn_parameters(self) -> int:
        """A layer's FFN weights and biases (all its experts, and the router)."""
        h, f = self.hidden, self.inner
        one = (3 if self.gated else 2) * h * f + ((2 * f if self.gated else f) + h if self.biases else 0)
        return self.experts * one + (h * self.experts if self.experts > 1 else 0)

    @property
    def layer_parameters(self) -> int:
        """One transformer layer: attention, FFN and two norms."""
        return self.attention_parameters + self.ffn_parameters + self.norm_parameters * 2

    @property
    def norm_parameters(self) -> int:
        """One norm: a LayerNorm's weight and bias, or an RMSNorm's weight."""
        return (2 if self.biases else 1) * self.hidden

    @property
    def embedding_parameters(self) -> int:
        """The input embedding (and the learned positions, where the model has them)."""
        rows = self.positions or self.sequence
        return self.vocabulary * self.hidden + (rows * self.hidden if self.learned_positions else 0)

    @property
    def output_parameters(self) -> int:
        """The final norm and the output layer (0 rows of its own when tied to the embedding)."""
        return self.norm_parameters + (0 if self.tied_embeddings else self.vocabulary * self.hidden)

    @property
    def parameters(self) -> int:
        return self.layers * self.layer_parameters + self.embedding_parameters + self.output_parameters

    def describe(self) -> str:
        moe = f", {self.experts} experts ({self.experts_per_token} a token)" if self.experts > 1 else ""
        return (f"{self.name}: {self.parameters / 1e9:.2f}B parameters, {self.layers} layers, hidden {self.hidden}, "
                f"{self.heads} heads ({self.kv} KV), FFN {self.inner}{' gated' if self.gated else ''}{moe}, "
                f"vocabulary {self.vocabulary}, sequence {self.sequence}")


_CONFIG_FIELDS = {  # our field -> the names transformers configs give it, in order of preference
    "layers": ("num_hidden_layers", "n_layer", "num_layers"),
    "hidden": ("hidden_size", "n_embd", "d_model"),
    "heads": ("num_attention_heads", "n_head"),
    "kv_heads": ("num_key_value_heads",),
    "ffn": ("intermediate_size", "n_inner", "ffn_hidden_size"),
    "vocabulary": ("vocab_size",),
    "sequence": ("max_position_embeddings", "n_positions", "seq_length"),
    "experts": ("num_local_experts", "num_experts"),
    "experts_per_token": ("num_experts_per_tok",),
    "tied_embeddings": ("tie_word_embeddings",),
    "positions": ("n_positions", "max_position_embeddings"),
}
_ROTARY = ("rope_parameters", "rope_theta", "rope_scaling", "rotary_dim", "rotary_pct")
_GATED_ACTIVATIONS = ("silu", "swiglu", "swish")


def shape_from_config(config: Any, *, sequence: int | None = None, name: str | None = None) -> TransformerShape:
    """The shape of a transformers config (``GPT2Config``, ``LlamaConfig``, ``MistralConfig``, ``MixtralConfig``,
    ...) or of a mapping: either names as transformers spells them (``num_hidden_layers``, ``hidden_size``, ...) or
    the fields of :class:`TransformerShape` themselves.

    Args:
        config: the config object or mapping.
        sequence: the training sequence length (default: the config's positions, else 2048).
        name: for reports (default: the config's ``model_type``).

    Raises:
        ValueError: a missing field (named, with the names looked for) or a shape :class:`TransformerShape`
            refuses; an unknown field of a plain mapping.
    """
    if isinstance(config, Mapping):
        raw = dict(config)
        ours = {f.name for f in fields(TransformerShape)}
        if set(raw) <= ours:
            values = dict(raw)
            if sequence is not None:
                values["sequence"] = sequence
            if name is not None:
                values["name"] = name
            try:
                return TransformerShape(**values)
            except TypeError as error:
                raise ValueError(f"a shape needs layers, hidden and heads: {error}") from None
        get = raw.get
    else:
        raw = {}

        def get(key: str, default: Any = None) -> Any:
            return getattr(config, key, default)

    values = {}
    for field_name, names in _CONFIG_FIELDS.items():
        found = next((get(n) for n in names if get(n) is not None), None)
        if found is not None:
            values[field_name] = found
    for required in ("layers", "hidden", "heads"):
        if required not in values:
            raise ValueError(f"the config has no {required} (looked for {', '.join(_CONFIG_FIELDS[required])})")
    activation = str(get("hidden_act") or get("activation_function") or "gelu").lower()
    values["gated"] = activation in _GATED_ACTIVATIONS
    values["biases"] = bool(get("attention_bias", not values["gated"]))
    values["learned_positions"] = not any(get(key) is not None for key in _ROTARY)
    values["tied_embeddings"] = bool(values.get("tied_embeddings", False))
    if sequence is not None:
        values["sequence"] = sequence
    values["sequence"] = int(values.get("sequence", 2048))
    values["name"] = name or str(get("model_type") or "transformer")
    return TransformerShape(**values)


__all__ = ["MAX_PARAMETERS", "TransformerShape", "shape_from_config"]
