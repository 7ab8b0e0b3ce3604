"""How long ``from_torch`` takes on ResNet50 (target: under 10 s on a 2-core CPU).

    python benchmarks/torch_import.py [--batch 32] [--repeats 3]

Traces ``benchmarks/resnet50_model.py`` (torchvision's ResNet50 architecture, training mode, 224 x 224
images) into its training graph and prints the median wall time and the graph's size.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402
from machine import machine_line  # noqa: E402
from resnet50_model import ResNet50  # noqa: E402

from placement_env.importers.pytorch import from_torch  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.manual_seed(0)
    model = ResNet50().train()
    x = torch.zeros(args.batch, 3, 224, 224)
    times = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        graph = from_torch(model, x, name="resnet50")
        times.append(time.perf_counter() - start)
    print(machine_line())
    print(f"from_torch(ResNet50, batch {args.batch}, 224x224): {graph.num_nodes} ops, {graph.num_units} units; "
          f"median {statistics.median(times):.2f} s over {args.repeats} runs (target < 10 s), "
          f"{torch.get_num_threads()} torch threads")


if __name__ == "__main__":
    main()
