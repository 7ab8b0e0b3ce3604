"""What the fx indirection of ``placement_env.runtime.placed_module`` costs: a training step (forward and
backward) of the placed model on one device against the original model's, interleaved.

    python benchmarks/placed_module_speed.py [--repeats 30]

Models: a 4-layer transformer encoder (d_model 256, batch 16 x 64 tokens), a 6-block MLP (2048 wide, batch 256)
and a small residual CNN (batch 32, 32 x 32). Every op on device 0 (``cpu``), so that no copy is made: what is
left is the traced program against the module's own ``forward``. Prints the median step of each and the ratio
(target: at most 1.10).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from machine import machine_line
from torch import nn

from placement_env import from_torch
from placement_env.runtime.placed_program import placed_module


class ResidualCNN(nn.Module):
    def __init__(self, channels: int = 64) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, channels, 3, padding=1)
        self.blocks = nn.ModuleList([nn.Sequential(nn.Conv2d(channels, channels, 3, padding=1),
                                                   nn.BatchNorm2d(channels), nn.ReLU()) for _ in range(4)])
        self.head = nn.Linear(channels, 10)

    def forward(self, x):
        x = self.stem(x)
        for block in self.blocks:
            x = x + block(x)
        return self.head(x.mean((2, 3)))


def cases() -> dict[str, tuple[nn.Module, torch.Tensor]]:
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(256, 4, 1024, dropout=0.0, batch_first=True)
    mlp = nn.Sequential(*[m for _ in range(6) for m in (nn.Linear(2048, 2048), nn.ReLU())])
    return {"transformer encoder": (nn.TransformerEncoder(layer, 4), torch.randn(16, 64, 256)),
            "mlp": (mlp, torch.randn(256, 2048)),
            "residual cnn": (ResidualCNN(), torch.randn(32, 3, 32, 32))}


def step_seconds(module: nn.Module, x: torch.Tensor) -> float:
    began = time.perf_counter()
    module(x).square().mean().backward()
    return time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args()
    print(machine_line())
    print(f"torch threads: {torch.get_num_threads()}")
    for name, (model, x) in cases().items():
        graph = from_torch(model, (x,))
        placed = placed_module(model, (x,), graph, [0] * graph.num_nodes, ["cpu"])
        for module in (model, placed):  # warm up
            step_seconds(module, x)
        original, ours = [], []
        for _ in range(args.repeats):  # interleaved: the host's noise falls on both
            original.append(step_seconds(model, x))
            ours.append(step_seconds(placed, x))
        a, b = statistics.median(original), statistics.median(ours)
        print(f"{name:<20} model {a * 1e3:8.2f} ms  placed {b * 1e3:8.2f} ms  ratio {b / a:.3f}")


if __name__ == "__main__":
    main()
