"""``cifar10`` suite: convolutional networks stacked from random ENAS-style cells.

Each cell follows ENAS's convolutional search space (Pham et al., 2018): it
reads the outputs of the two previous cells, and each of its ``blocks`` blocks
picks two inputs among those and the earlier blocks of the cell, applies one
operation to each (3x3 / 5x5 convolution, 3x3 / 5x5 depthwise-separable
convolution, 3x3 average or max pooling, identity) and adds the results; the
cell concatenates the blocks no other block read and projects them back to
the cell's width with a 1x1 convolution. A normal cell keeps the resolution;
after every ``cells_per_stage`` normal cells a reduction cell (the same
structure with stride 2, its own random choices) halves it and doubles the
width. A stem convolution opens the network, global pooling and a linear
classifier close it. Seeds vary both cells, the widths, the depth and the
number of blocks.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import torch
from torch import nn

OPERATIONS = ("conv3", "conv5", "sep3", "sep5", "avg3", "max3", "identity")


@dataclass(frozen=True)
class CellChoice:
    """Block ``i`` adds ``operations[2i](inputs[2i])`` and ``operations[2i+1](inputs[2i+1])``; input 0 and
    1 are the two previous cells, input ``k >= 2`` is block ``k - 2``."""

    inputs: tuple[int, ...]
    operations: tuple[str, ...]

    @classmethod
    def sample(cls, rng: random.Random, blocks: int) -> CellChoice:
        inputs, operations = [], []
        for b in range(blocks):
            for _ in range(2):
                inputs.append(rng.randrange(b + 2))
                operations.append(rng.choice(OPERATIONS))
        return cls(tuple(inputs), tuple(operations))

    @property
    def loose_ends(self) -> list[int]:
        read = set(self.inputs)
        return [k for k in range(2, 2 + len(self.inputs) // 2) if k not in read]


@dataclass(frozen=True)
class Cifar10Config:
    """One seeded member of the suite (widths in channels, images 32 x 32)."""

    normal: CellChoice
    reduction: CellChoice
    stages: int
    cells_per_stage: int
    width: int
    batch: int

    @classmethod
    def from_seed(cls, seed: int) -> Cifar10Config:
        rng = random.Random(seed)
        blocks = rng.randint(4, 6)
        return cls(CellChoice.sample(rng, blocks), CellChoice.sample(rng, blocks), stages=3, cells_per_stage=1,
                   width=rng.choice((20, 32, 36)), batch=rng.choice((32, 64, 128)))


def _relu_conv_bn(c_in: int, c_out: int, kernel: int, stride: int = 1, groups: int = 1) -> nn.Sequential:
    return nn.Sequential(nn.ReLU(), nn.Conv2d(c_in, c_out, kernel, stride, kernel // 2, groups=groups, bias=False),
                         nn.BatchNorm2d(c_out))


def _operation(name: str, channels: int, stride: int) -> nn.Module:
    if name in ("conv3", "conv5"):
        return _relu_conv_bn(channels, channels, int(name[-1]), stride)
    if name in ("sep3", "sep5"):  # depthwise then pointwise
        k = int(name[-1])
        return nn.Sequential(_relu_conv_bn(channels, channels, k, stride, groups=channels),
                             _relu_conv_bn(channels, channels, 1))
    if name == "avg3":
        return nn.AvgPool2d(3, stride, 1, count_include_pad=False)
    if name == "max3":
        return nn.MaxPool2d(3, stride, 1)
    return nn.Identity() if stride == 1 else _relu_conv_bn(channels, channels, 1, stride)


class EnasConvCell(nn.Module):
    """One cell of :class:`CellChoice` (see the module docstring); ``reduce`` halves the resolution."""

    def __init__(self, choice: CellChoice, c_prev2: int, c_prev: int, channels: int, reduce: bool,
                 prev2_is_larger: bool) -> None:
        super().__init__()
        self.choice = choice
        # bring both inputs to `channels` at the resolution of the previous cell
        self.pre2 = _relu_conv_bn(c_prev2, channels, 1, 2 if prev2_is_larger else 1)
        self.pre1 = _relu_conv_bn(c_prev, channels, 1)
        self.ops = nn.ModuleList(
            _operation(op, channels, 2 if reduce and src < 2 else 1)
            for src, op in zip(choice.inputs, choice.operations))
        self.project = _relu_conv_bn(channels * len(choice.loose_ends), channels, 1)

    def forward(self, prev2: torch.Tensor, prev: torch.Tensor) -> torch.Tensor:
        states = [self.pre2(prev2), self.pre1(prev)]
        for b in range(len(self.choice.inputs) // 2):
            i, j = self.choice.inputs[2 * b], self.choice.inputs[2 * b + 1]
            states.append(self.ops[2 * b](states[i]) + self.ops[2 * b + 1](states[j]))
        return self.project(torch.cat([states[k] for k in self.choice.loose_ends], dim=1))


class Cifar10Network(nn.Module):
    """Stem, ``stages`` stages of normal cells separated by reduction cells, pooling and a classifier."""

    def __init__(self, spec: Cifar10Config) -> None:
        super().__init__()
        self.spec = spec
        c = spec.width
        self.stem = nn.Sequential(nn.Conv2d(3, c, 3, 1, 1, bias=False), nn.BatchNorm2d(c))
        cells, c_prev2, c_prev, larger = [], c, c, False
        for stage in range(spec.stages):
            if stage > 0:
                c *= 2
                cells.append(EnasConvCell(spec.reduction, c_prev2, c_prev, c, True, larger))
                c_prev2, c_prev, larger = c_prev, c, True
            for _ in range(spec.cells_per_stage):
                cells.append(EnasConvCell(spec.normal, c_prev2, c_prev, c, False, larger))
                c_prev2, c_prev, larger = c_prev, c, False
        self.cells = nn.ModuleList(cells)
        self.classifier = nn.Linear(c_prev, 10)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        prev2 = prev = self.stem(images)
        for cell in self.cells:
            prev2, prev = prev, cell(prev2, prev)
        return self.classifier(torch.flatten(nn.functional.adaptive_avg_pool2d(prev, 1), 1))

    def example_inputs(self) -> tuple[torch.Tensor]:
        return (torch.zeros(self.spec.batch, 3, 32, 32),)
