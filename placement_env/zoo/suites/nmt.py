"""``nmt`` suite: sequence-to-sequence LSTM encoder-decoder with attention, unrolled.

A stacked LSTM encoder (cells written out: one linear per gate pair, sigmoid /
tanh gates) reads the embedded source sentence step by step; a stacked LSTM
decoder, initialised with the encoder's final states, reads the embedded
target sentence and at every step attends over all encoder outputs with
Luong's global dot-product attention (scores ``h_t . e_s``, softmax, context
vector, ``tanh(W [c_t; h_t])``) before projecting to the target vocabulary.
Seeds vary the depth, the width and both sentence lengths (the paper's nmt
graphs likewise come from one seq2seq model family at several sizes).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import torch
from torch import nn


@dataclass(frozen=True)
class NmtConfig:
    """One seeded member of the suite (widths in features, lengths in tokens)."""

    layers: int
    hidden: int
    source_steps: int
    target_steps: int
    vocab: int
    batch: int

    @classmethod
    def from_seed(cls, seed: int) -> NmtConfig:
        rng = random.Random(seed)
        return cls(layers=rng.randint(1, 2), hidden=rng.choice((256, 512, 1024)), source_steps=rng.randint(4, 6),
                   target_steps=rng.randint(4, 6), vocab=rng.choice((8000, 16000, 32000)), batch=rng.choice((32, 64)))


class LstmCell(nn.Module):
    """``i, f, g, o = W [x; h] + b``; ``c' = sigmoid(f) c + sigmoid(i) tanh(g)``; ``h' = sigmoid(o) tanh(c')``."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.gates = nn.Linear(2 * width, 4 * width)

    def forward(self, x: torch.Tensor, h: torch.Tensor, c: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        i, f, g, o = torch.chunk(self.gates(torch.cat([x, h], dim=-1)), 4, dim=-1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        return torch.sigmoid(o) * torch.tanh(c), c


class NmtSeq2Seq(nn.Module):
    """Embeddings, the unrolled encoder and attentional decoder of :class:`NmtConfig`, and the output layer."""

    def __init__(self, spec: NmtConfig) -> None:
        super().__init__()
        w = spec.hidden
        self.spec = spec
        self.source_embed = nn.Embedding(spec.vocab, w)
        self.target_embed = nn.Embedding(spec.vocab, w)
        self.encoder = nn.ModuleList(LstmCell(w) for _ in range(spec.layers))
        self.decoder = nn.ModuleList(LstmCell(w) for _ in range(spec.layers))
        self.attention_out = nn.Linear(2 * w, w, bias=False)
        self.project = nn.Linear(w, spec.vocab)

    def forward(self, source: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        x = self.source_embed(source)
        h = [torch.zeros_like(x[:, 0]) for _ in self.encoder]
        c = list(h)
        outputs = []
        for t in range(self.spec.source_steps):
            outputs.append(self._stack_step(self.encoder, x[:, t], h, c))
        memory = torch.stack(outputs, dim=1)  # (batch, source_steps, hidden)
        y = self.target_embed(target)
        logits = []
        for t in range(self.spec.target_steps):
            inp = self._stack_step(self.decoder, y[:, t], h, c)
            weights = torch.softmax(torch.bmm(memory, inp.unsqueeze(2)).squeeze(2), dim=1)
            context = torch.bmm(weights.unsqueeze(1), memory).squeeze(1)
            attended = torch.tanh(self.attention_out(torch.cat([context, inp], dim=-1)))
            logits.append(self.project(attended))
        return torch.stack(logits, dim=1)

    @staticmethod
    def _stack_step(cells: nn.ModuleList, inp: torch.Tensor, h: list, c: list) -> torch.Tensor:
        """One time step through the stacked cells, updating ``h`` and ``c`` in place; the top layer's output."""
        for layer, cell in enumerate(cells):
            h[layer], c[layer] = cell(inp, h[layer], c[layer])
            inp = h[layer]
        return inp

    def example_inputs(self) -> tuple[torch.Tensor, torch.Tensor]:
        s = self.spec
        return (torch.zeros(s.batch, s.source_steps, dtype=torch.long),
                torch.zeros(s.batch, s.target_steps, dtype=torch.long))
