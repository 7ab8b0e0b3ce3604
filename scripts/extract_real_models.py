"""Extract the real models of the paper's table 6 into shipped graphs (needs the ``[models]`` extra).

    python scripts/extract_real_models.py [--models resnet50 vgg19 ...] [--batch 32] [--out DIR]

Builds VGG19, InceptionV3, ResNet50 and ResNet101 (torchvision) and NASNet-A large and PNASNet-5 large (timm)
with random weights (weights do not change shapes, FLOPs or bytes), traces each with
``placement_env.from_torch`` in training mode at the batch size given (default 32) and each model's own input
resolution (224 x 224; InceptionV3 299 x 299; NASNet and PNASNet 331 x 331), and writes the training graph
(roofline costs of a P100, spec section 5) to ``placement_env/zoo/data/models/<name>.json.gz``.

torchvision and timm do not import beside the CPU build of torch 2.13.0 this project tests with, so run this
in a separate environment (see the README: torch 2.14.1 and torchvision 0.29.1 from the local disk, then
``pip install -e ".[models]"``). The shipped files are what the registry loads; nothing at run time needs
torchvision or timm.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from placement_env.graph.io import write_graph  # noqa: E402
from placement_env.zoo.registry import REAL_MODELS, REAL_MODELS_DIR  # noqa: E402

RESOLUTION = {"inception_v3": 299, "nasnet_large": 331, "pnasnet_large": 331}


def build_model(name: str):
    """A randomly initialised ``nn.Module`` of the named architecture."""
    if name in ("vgg19", "resnet50", "resnet101"):
        import torchvision

        return getattr(torchvision.models, name)(weights=None)
    if name == "inception_v3":
        import torchvision

        return torchvision.models.inception_v3(weights=None, aux_logits=False, init_weights=False)
    if name in ("nasnet_large", "pnasnet_large"):
        import timm

        return timm.create_model({"nasnet_large": "nasnetalarge", "pnasnet_large": "pnasnet5large"}[name],
                                 pretrained=False)
    raise ValueError(f"unknown model {name!r}; known: {', '.join(REAL_MODELS)}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(REAL_MODELS), choices=list(REAL_MODELS))
    parser.add_argument("--batch", type=int, default=32, help="batch size of the training step (default 32)")
    parser.add_argument("--out", type=Path, default=REAL_MODELS_DIR)
    args = parser.parse_args(argv)
    import torch

    from placement_env.importers.pytorch import from_torch

    args.out.mkdir(parents=True, exist_ok=True)
    for name in args.models:
        torch.manual_seed(0)
        model = build_model(name).train()
        side = RESOLUTION.get(name, 224)
        start = time.perf_counter()
        graph = from_torch(model, torch.zeros(args.batch, 3, side, side), name=name,
                           saved_activations="inputs")  # the rule the shipped graphs were made with
        path = args.out / f"{name}.json.gz"
        write_graph(graph, path)
        print(f"{name}: {graph.num_nodes} ops, {graph.num_units} units, "
              f"{sum(n.flops or 0.0 for n in graph.nodes if n.phase == 'forward') / 1e9:.1f} GFLOP forward, "
              f"traced in {time.perf_counter() - start:.1f} s -> {path} ({path.stat().st_size / 1e6:.2f} MB)",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
