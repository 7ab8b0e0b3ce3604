"""``ptb`` suite: recurrent language models whose cell is a random ENAS-style DAG.

The cell follows ENAS's recurrent search space (Pham et al., 2018): from the
input ``x_t`` and the previous state ``h_{t-1}`` a first node computes
``c = sigmoid(W_x x + W_h h)``, ``s = c * tanh(W'_x x + W'_h h) + (1 - c) * h``;
every further node ``i`` picks an earlier node ``j`` and an activation ``f`` and
computes ``c_i = sigmoid(W_i s_j)``, ``s_i = c_i * f(W'_i s_j) + (1 - c_i) * s_j``;
the new state is the mean of the nodes no other node reads (the loose ends).
The model embeds tokens, unrolls the cell over the time steps and decodes
every step's state to the vocabulary. Seeds vary the cell (node count,
parents, activations), the widths and the number of time steps.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import torch
from torch import nn

ACTIVATIONS = ("tanh", "relu", "sigmoid", "identity")


@dataclass(frozen=True)
class PtbConfig:
    """One seeded member of the suite (widths in features, lengths in tokens)."""

    parents: tuple[int, ...]  # node i >= 1 reads node parents[i - 1]
    activations: tuple[str, ...]
    steps: int
    hidden: int
    vocab: int
    batch: int

    @classmethod
    def from_seed(cls, seed: int) -> PtbConfig:
        rng = random.Random(seed)
        nodes = rng.randint(7, 11)
        parents = tuple(rng.randrange(i) for i in range(1, nodes))
        activations = tuple(rng.choice(ACTIVATIONS) for _ in range(nodes))
        return cls(parents, activations, steps=rng.randint(5, 8), hidden=rng.choice((200, 256, 400)),
                   vocab=10000, batch=rng.choice((20, 32, 64)))


def _activate(name: str, x: torch.Tensor) -> torch.Tensor:
    if name == "tanh":
        return torch.tanh(x)
    if name == "relu":
        return torch.relu(x)
    if name == "sigmoid":
        return torch.sigmoid(x)
    return x


class EnasRecurrentCell(nn.Module):
    """One step of the ENAS cell of :class:`PtbConfig` (see the module docstring)."""

    def __init__(self, spec: PtbConfig) -> None:
        super().__init__()
        h = spec.hidden
        self.spec = spec
        self.w_x = nn.Linear(h, 2 * h)
        self.w_h = nn.Linear(h, 2 * h, bias=False)
        self.w_nodes = nn.ModuleList(nn.Linear(h, 2 * h, bias=False) for _ in spec.parents)
        read = set(spec.parents)
        self.loose_ends = [i for i in range(len(spec.activations)) if i not in read]

    def forward(self, x: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        gate, value = torch.chunk(self.w_x(x) + self.w_h(h), 2, dim=-1)
        c = torch.sigmoid(gate)
        states = [c * _activate(self.spec.activations[0], value) + (1 - c) * h]
        for i, (parent, w) in enumerate(zip(self.spec.parents, self.w_nodes), start=1):
            s = states[parent]
            gate, value = torch.chunk(w(s), 2, dim=-1)
            c = torch.sigmoid(gate)
            states.append(c * _activate(self.spec.activations[i], value) + (1 - c) * s)
        return torch.stack([states[i] for i in self.loose_ends]).mean(0)


class PtbLanguageModel(nn.Module):
    """Embedding, the cell unrolled over ``spec.steps`` steps, and a decoder per step."""

    def __init__(self, spec: PtbConfig) -> None:
        super().__init__()
        self.spec = spec
        self.embed = nn.Embedding(spec.vocab, spec.hidden)
        self.cell = EnasRecurrentCell(spec)
        self.decode = nn.Linear(spec.hidden, spec.vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)  # (batch, steps, hidden)
        h = torch.zeros_like(x[:, 0])
        logits = []
        for t in range(self.spec.steps):
            h = self.cell(x[:, t], h)
            logits.append(self.decode(h))
        return torch.stack(logits, dim=1)

    def example_inputs(self) -> tuple[torch.Tensor]:
        return (torch.zeros(self.spec.batch, self.spec.steps, dtype=torch.long),)
